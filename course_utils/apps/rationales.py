"""A text task whose reason is known (notebook 16): is the number named before the colour?

Every sentence holds filler words, exactly one digit word and exactly one colour word. The
label is 1 when the digit word comes before the colour word, else 0. So the label depends on
those two tokens and nothing else, and each example carries its ground-truth **rationale**:
the positions of the digit word and the colour word. An attribution method can then be
scored against the truth (:func:`course_utils.attribution.precision_at_k` with ``k = 2``).

>>> ex = make_examples(2, seed=0)[1]
>>> " ".join(ex.tokens), ex.label, ex.rationale
('ran the near eight the green near', 1, (3, 5))

A sentence belongs to one split through a stable hash of its words (80% train, 10%
validation, 10% test), so no sentence is in two splits; labels are balanced in each split
(half of the examples drawn with each label). Shapes: ``N`` examples, ``L`` the padded length.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import torch

from course_utils._validate import check_positive
from course_utils.data import Vocab

DIGITS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
COLOURS = ["red", "green", "blue", "yellow", "black", "white"]
FILLERS = ["the", "a", "cat", "dog", "bird", "saw", "near", "under", "big", "small", "ran"]
SPLITS = ("train", "val", "test")
MIN_FILLERS, MAX_FILLERS = 3, 10  # sentences of 5 .. 12 words


@dataclass(frozen=True)
class Example:
    """One sentence, its label (1: the digit word comes first) and the rationale, the
    positions ``(digit word, colour word)`` the label depends on."""

    tokens: tuple[str, ...]
    label: int
    rationale: tuple[int, int]


def example_split(tokens: tuple[str, ...] | list[str]) -> str:
    """The split a sentence belongs to, from a stable hash of its words.

    >>> example_split(["the", "cat", "two", "saw", "red"])
    'val'
    """
    h = zlib.crc32(" ".join(tokens).encode()) / 2**32
    return "train" if h < 0.8 else ("val" if h < 0.9 else "test")


def _sentence(rng: random.Random, label: int) -> Example:
    """Filler words with a digit word and a colour word at two random places, in the order
    ``label`` asks for."""
    words = [rng.choice(FILLERS) for _ in range(rng.randint(MIN_FILLERS, MAX_FILLERS))]
    first, second = sorted(rng.sample(range(len(words) + 2), 2))  # two slots, first < second
    digit, colour = rng.choice(DIGITS), rng.choice(COLOURS)
    where = (first, second) if label == 1 else (second, first)  # (digit at, colour at)
    fill = iter(words)
    tokens = []
    for i in range(len(words) + 2):
        tokens.append(digit if i == where[0] else colour if i == where[1] else next(fill))
    return Example(tuple(tokens), label, where)


def make_examples(n: int, split: str = "train", seed: int = 0) -> list[Example]:
    """``n`` seeded examples of one split: the labels alternate 0, 1, 0, 1, ... (balanced),
    every sentence hashes to ``split``, and none repeats."""
    check_positive("n", n)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rng = random.Random(f"rationales-{seed}-{split}")
    out: list[Example] = []
    seen: set[tuple[str, ...]] = set()
    while len(out) < n:
        ex = _sentence(rng, label=len(out) % 2)
        if ex.tokens not in seen and example_split(ex.tokens) == split:
            seen.add(ex.tokens)
            out.append(ex)
    return out


def rationale_vocab() -> Vocab:
    """Every word of the task (fillers, digit words, colour words) after the specials."""
    return Vocab(FILLERS + DIGITS + COLOURS)


@dataclass
class RationaleData:
    """A split as tensors: ``ids (N, L)`` padded with ``vocab.pad_id``, ``mask (N, L)``
    (``True`` at real words), ``labels (N,)``, ``rationale (N, L)`` (``True`` at the digit
    and colour words), and the examples they came from."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    rationale: torch.Tensor
    examples: list[Example]
    vocab: Vocab

    def __len__(self) -> int:
        return len(self.examples)


def encode(examples: list[Example], vocab: Vocab | None = None) -> RationaleData:
    """Examples -> padded tensors (:class:`RationaleData`).

    >>> data = encode(make_examples(3, seed=0))
    >>> data.ids.shape, data.labels.tolist(), data.rationale.sum(1).tolist()
    (torch.Size([3, 10]), [0, 1, 0], [2, 2, 2])
    """
    if not examples or not all(isinstance(ex, Example) for ex in examples):
        raise TypeError("examples must be a non-empty list of Example, e.g. from make_examples")
    vocab = rationale_vocab() if vocab is None else vocab
    L = max(len(ex.tokens) for ex in examples)
    ids = torch.full((len(examples), L), vocab.pad_id, dtype=torch.long)
    mask = torch.zeros(len(examples), L, dtype=torch.bool)
    rationale = torch.zeros(len(examples), L, dtype=torch.bool)
    for row, ex in enumerate(examples):
        ids[row, : len(ex.tokens)] = torch.tensor(vocab.encode(ex.tokens))
        mask[row, : len(ex.tokens)] = True
        rationale[row, list(ex.rationale)] = True
    labels = torch.tensor([ex.label for ex in examples])
    return RationaleData(ids, mask, labels, rationale, list(examples), vocab)


def make_splits(
    n_train: int = 2000, n_val: int = 200, n_test: int = 200, seed: int = 0
) -> dict[str, RationaleData]:
    """``{"train", "val", "test"}`` as :class:`RationaleData`, one vocabulary, no sentence in
    two splits. Each split depends only on ``seed`` and its own size, not on the others.

    >>> splits = make_splits(20, 4, 4)
    >>> {name: len(data) for name, data in splits.items()}
    {'train': 20, 'val': 4, 'test': 4}
    """
    vocab = rationale_vocab()
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    return {split: encode(make_examples(n, split, seed), vocab) for split, n in sizes.items()}
