"""course_utils.apps.rationales: labels and rationales checked by an independent reading.

The generator places the digit and colour words; these tests read each sentence back as
text (a regular expression for the label, a scan over the words for the rationale), so an
error in the placement would show.
"""

from __future__ import annotations

import re

import pytest

from course_utils.apps import rationales

DIGIT_WORDS = "one two three four five six seven eight nine".split()
COLOUR_WORDS = "red green blue yellow black white".split()
# "a digit word, anything, then a colour word", on whole words
DIGIT_RE, COLOUR_RE = "|".join(DIGIT_WORDS), "|".join(COLOUR_WORDS)
BEFORE = re.compile(rf"\b({DIGIT_RE})\b.*\b({COLOUR_RE})\b")


def test_labels_and_rationales_by_an_independent_reading():
    for split in rationales.SPLITS:
        for ex in rationales.make_examples(300, split, seed=1):
            text = " ".join(ex.tokens)
            assert ex.label == int(BEFORE.search(text) is not None), text
            digits = [i for i, w in enumerate(ex.tokens) if w in DIGIT_WORDS]
            colours = [i for i, w in enumerate(ex.tokens) if w in COLOUR_WORDS]
            assert len(digits) == 1 and len(colours) == 1, text
            assert ex.rationale == (digits[0], colours[0]), text
            assert 5 <= len(ex.tokens) <= 12


def test_splits_are_disjoint_balanced_and_seeded():
    splits = rationales.make_splits(400, 60, 60, seed=0)
    texts = {name: {ex.tokens for ex in data.examples} for name, data in splits.items()}
    assert [len(t) for t in texts.values()] == [400, 60, 60]  # no sentence twice in a split
    assert not texts["train"] & texts["val"]
    assert not texts["train"] & texts["test"]
    assert not texts["val"] & texts["test"]
    for data in splits.values():
        assert float(data.labels.float().mean()) == 0.5
    again = rationales.make_splits(400, 60, 60, seed=0)
    assert all(again[n].examples == splits[n].examples for n in splits)
    other = rationales.make_splits(400, 60, 60, seed=1)
    assert other["train"].examples != splits["train"].examples
    # a split does not depend on the size of the others
    assert rationales.make_splits(10, 60, 5, seed=0)["val"].examples == splits["val"].examples


def test_encode_keeps_words_labels_and_rationale():
    examples = rationales.make_examples(50, seed=2)
    data = rationales.encode(examples)
    N, L = data.ids.shape
    assert N == 50 and L == max(len(ex.tokens) for ex in examples)
    for row, ex in enumerate(examples):
        n = len(ex.tokens)
        assert data.vocab.decode(data.ids[row]) == list(ex.tokens)
        assert data.mask[row].tolist() == [True] * n + [False] * (L - n)
        assert (data.ids[row, n:] == data.vocab.pad_id).all()
        marked = [i for i in range(L) if data.rationale[row, i]]
        assert marked == sorted(ex.rationale)
        assert int(data.labels[row]) == ex.label


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="n must be positive"):
        rationales.make_examples(0)
    with pytest.raises(ValueError, match="split must be one of"):
        rationales.make_examples(3, split="dev")
    with pytest.raises(TypeError, match="examples must be a non-empty list of Example"):
        rationales.encode([])
