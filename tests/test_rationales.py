"""course_utils.apps.rationales: labels and rationales checked by an independent reading.

The generator places the digit and colour words; these tests read each sentence back as
text (a regular expression for the label, a scan over the words for the rationale), so an
error in the placement would show.
"""

from __future__ import annotations

import re

import pytest
import torch

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


# -- the classifier and its attributions ---------------------------------------------------


def _model(seed, **kw):
    torch.manual_seed(seed)
    return rationales.build_model(**kw).eval()


@pytest.mark.parametrize("seed", range(3))
def test_classifier_equals_a_forward_written_out(seed):
    model = _model(seed, num_layers=1, d_model=16, d_ff=8)
    data = rationales.encode(rationales.make_examples(6, seed=seed))
    logit, alpha, attentions = model(data.ids, data.mask)
    h = model.word(data.ids) + model.position.weight[: data.ids.shape[1]]
    h, weights = model.layers[0](h, data.mask[:, None, None, :])
    scores = (h @ model.query) / 4.0  # sqrt(d_model = 16)
    for b in range(len(data)):
        n = int(data.mask[b].sum())
        a = torch.softmax(scores[b, :n], -1)
        torch.testing.assert_close(alpha[b, :n], a)
        assert torch.all(alpha[b, n:] == 0)
        torch.testing.assert_close(logit[b], model.out(a @ h[b, :n]).squeeze(-1))
    torch.testing.assert_close(attentions[0], weights)


def test_padding_changes_nothing_and_uniform_pooling_is_one_over_n():
    model = _model(0, attention=False)
    data = rationales.encode(rationales.make_examples(5, seed=3))
    logit, alpha, _ = model(data.ids, data.mask)
    torch.testing.assert_close(alpha.sum(1), torch.ones(5))
    n = data.mask.sum(1, keepdim=True)
    torch.testing.assert_close(alpha, data.mask / n)
    for b in range(5):  # each sentence alone, unpadded
        k = int(n[b])
        alone = model(data.ids[b : b + 1, :k], data.mask[b : b + 1, :k])[0]
        torch.testing.assert_close(alone[0], logit[b], atol=1e-5, rtol=1e-5)


def test_a_given_alpha_replaces_the_pooling():
    model = _model(1)
    data = rationales.encode(rationales.make_examples(4, seed=1))
    x = model.words(data.ids)
    _, alpha, _ = model.forward_from_words(x, data.mask)
    same = model.forward_from_words(x, data.mask, alpha)[0]
    torch.testing.assert_close(same, model.forward_from_words(x, data.mask)[0])
    first = torch.zeros_like(alpha)
    first[:, 0] = 1.0  # all weight on the first token: the logit reads h_0 alone
    changed = model.forward_from_words(x, data.mask, first)[0]
    assert not torch.allclose(changed, same)


def test_attributions_keep_integrated_gradients_complete_and_occlusion_exact():
    from course_utils.attribution import occlusion

    model = _model(2, num_layers=1)
    data = rationales.encode(rationales.make_examples(8, seed=2))
    scores = rationales.attributions(model, data.ids, data.mask, steps=64)
    assert set(scores) == set(rationales.METHODS)
    for s in scores.values():
        assert s.shape == data.ids.shape and torch.all(s[~data.mask] == 0)
    x = model.words(data.ids).detach()
    with torch.no_grad():
        logit = model.forward_from_words(x, data.mask)[0]
        sign = torch.where(logit > 0, 1.0, -1.0)
        at_baseline = model.forward_from_words(torch.zeros_like(x), data.mask)[0]
    # integrated gradients add up to f(x) - f(baseline), over the real tokens
    gap = scores["integrated gradients"].sum(1) - sign * (logit - at_baseline)
    assert gap.abs().max() < 0.05 * (logit - at_baseline).abs().max()
    # occlusion: one token's word vector set to zero, the signed logit's drop
    for b, i in [(0, 0), (3, 2), (7, 4)]:
        y = x.clone()
        y[b, i] = 0
        with torch.no_grad():
            drop = sign[b] * (logit[b] - model.forward_from_words(y, data.mask)[0][b])
        torch.testing.assert_close(scores["occlusion"][b, i], drop, atol=1e-5, rtol=1e-5)
    f = lambda w: sign * model.forward_from_words(w, data.mask)[0]  # noqa: E731
    torch.testing.assert_close(scores["occlusion"], occlusion(f, x).masked_fill(~data.mask, 0))


def test_with_no_encoder_the_rollout_is_the_pooling():
    model = _model(0, num_layers=0)
    data = rationales.encode(rationales.make_examples(4, seed=0))
    scores = rationales.attributions(model, data.ids, data.mask, steps=4)
    torch.testing.assert_close(scores["rollout"], scores["attention"])


def test_training_learns_the_task_quickly():
    from course_utils.training import fit

    splits = rationales.make_splits(1000, 10, 200, seed=0)
    model = _model(0, num_layers=0, d_model=64)
    fit(model, rationales.batches(splits["train"], 64, seed=0), rationales.loss, steps=300,
        lr=3e-2, progress=False)  # fmt: skip
    assert rationales.evaluate(model, splits["test"])["accuracy"] > 0.9


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(pooling="max"), ValueError),
        (dict(num_layers=-1), ValueError),
        (dict(d_model=0), ValueError),
    ],
)
def test_bad_sizes_are_named(kwargs, error):
    with pytest.raises(error, match="pooling|num_layers|d_model"):
        rationales.RationaleClassifier(30, 0, **kwargs)


def test_bad_inputs_are_named():
    model = _model(0)
    data = rationales.encode(rationales.make_examples(2, seed=0))
    x = model.words(data.ids)
    with pytest.raises(ValueError, match="mask"):
        model.forward_from_words(x, data.mask.long())
    with pytest.raises(ValueError, match="alpha"):
        model.forward_from_words(x, data.mask, torch.rand(2, 3))
    with pytest.raises(ValueError, match="x must be"):
        model.forward_from_words(x[..., :5], data.mask)
