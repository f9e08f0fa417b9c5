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

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive, check_tensor
from course_utils.data import TensorBatch, Vocab, shuffled_batches, split_by_hash
from course_utils.transformer import EncoderLayer

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
    return split_by_hash(" ".join(tokens))


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

    def batch(self, rows: list[int] | torch.Tensor) -> RationaleBatch:
        """The chosen rows as a :class:`RationaleBatch`."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        return RationaleBatch(self.ids[rows], self.mask[rows], self.labels[rows])


@dataclass
class RationaleBatch(TensorBatch):
    """``ids (B, L)``, ``mask (B, L)``, ``labels (B,)``; ``.to(device)`` for :func:`fit`."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor


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


# -- the classifier --------------------------------------------------------------------------
MAX_LEN = MAX_FILLERS + 2  # the longest sentence


class RationaleClassifier(nn.Module):
    """Words -> Transformer encoder -> **attention pooling** -> one logit (label 1).

    ``x = word(ids) + position``; ``num_layers`` post-norm :class:`EncoderLayer` s; then one
    learned query ``u`` attends over the encoded tokens, ``alpha = softmax(h u / sqrt(E))``
    over the real tokens, and the logit reads ``w . sum_i alpha_i h_i + b``. ``alpha (B, L)``
    is the attention Jain & Wallace (2019) study: one distribution over the input tokens that
    decides what the classifier reads. With ``pooling="uniform"`` it is frozen at ``1 / n``
    over the ``n`` real tokens (Wiegreffe & Pinter's baseline), so only the encoder learns.

    :meth:`forward_from_words` starts from the word vectors ``x (B, L, E)`` (positions are
    added inside), so gradient attributions see one vector per token, and it accepts a
    replacement ``alpha`` to test what the attention's values do to the output.
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        d_model: int = 32,
        num_heads: int = 2,
        num_layers: int = 2,
        d_ff: int = 64,
        pooling: str = "attention",
    ):
        super().__init__()
        if pooling not in ("attention", "uniform"):
            raise ValueError(f"pooling must be 'attention' or 'uniform', got {pooling!r}")
        for name, value in [("vocab_size", vocab_size), ("d_model", d_model),
                            ("d_ff", d_ff)]:  # fmt: skip
            check_positive(name, value)
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(f"num_layers must be an int >= 0, got {num_layers!r}")
        self.pooling, self.pad_id, self.d_model = pooling, pad_id, d_model
        self.word = CheckedEmbedding(vocab_size, d_model, padding_idx=pad_id)
        self.position = nn.Embedding(MAX_LEN, d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.query = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))
        self.out = nn.Linear(d_model, 1)

    def words(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, L)`` -> word vectors ``(B, L, E)`` (no position yet)."""
        check_tensor("ids", ids, dims=2)
        return self.word(ids)

    def forward_from_words(
        self, x: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """``x (B, L, E)``, ``mask (B, L)`` -> ``(logit (B,), alpha (B, L), attentions)``.

        ``attentions``: the encoder's ``(B, H, L, L)`` per layer. A given ``alpha (B, L)``
        replaces the pooling weights (its values at padding are ignored)."""
        check_tensor("x", x, dims=3)
        check_tensor("mask", mask, dims=2)
        B, L, E = x.shape
        if E != self.d_model or tuple(mask.shape) != (B, L) or mask.dtype != torch.bool:
            raise ValueError(
                f"x must be (B, L, {self.d_model}) and mask a boolean (B, L), got x "
                f"{tuple(x.shape)} and mask {tuple(mask.shape)} of dtype {mask.dtype}"
            )
        if L > MAX_LEN:
            raise ValueError(f"sentences have at most {MAX_LEN} tokens, got L = {L}")
        h = x + self.position.weight[:L]
        attentions = []
        for layer in self.layers:
            h, weights = layer(h, mask[:, None, None, :])  # every query sees the real keys
            attentions.append(weights)
        if alpha is None:
            alpha = self.pooling_weights(h, mask)
        elif tuple(alpha.shape) != (B, L):
            raise ValueError(f"alpha must be (B, L) = {(B, L)}, got {tuple(alpha.shape)}")
        alpha = alpha.masked_fill(~mask, 0.0)
        pooled = (alpha.unsqueeze(1) @ h).squeeze(1)  # (B, 1, L) @ (B, L, E) -> (B, E)
        return self.out(pooled).squeeze(-1), alpha, attentions

    def pooling_weights(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``alpha (B, L)`` over the real tokens: learned, or uniform when frozen."""
        if self.pooling == "uniform":
            return mask.float() / mask.sum(1, keepdim=True).clamp(min=1)
        scores = (h @ self.query) / math.sqrt(self.d_model)  # (B, L)
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """``ids (B, L)``, ``mask (B, L)`` -> ``(logit (B,), alpha (B, L), attentions)``."""
        return self.forward_from_words(self.words(ids), mask)


def build_model(attention: bool = True, **sizes) -> RationaleClassifier:
    """The classifier with learned attention pooling, or (``attention=False``) with the
    pooling frozen uniform; ``sizes`` go to :class:`RationaleClassifier`."""
    vocab = rationale_vocab()
    pooling = "attention" if attention else "uniform"
    return RationaleClassifier(len(vocab), vocab.pad_id, pooling=pooling, **sizes)


def batches(data: RationaleData, batch_size: int = 64, seed: int = 0) -> Iterator[RationaleBatch]:
    """Shuffled batches forever, for :func:`fit` (:func:`~course_utils.data.shuffled_batches`)."""
    return shuffled_batches(data, batch_size, seed)


def loss(model: RationaleClassifier, batch: RationaleBatch) -> torch.Tensor:
    """Binary cross-entropy of the logit against the label."""
    logit = model(batch.ids, batch.mask)[0]
    return nn.functional.binary_cross_entropy_with_logits(logit, batch.labels.float())


@torch.no_grad()
def evaluate(model: RationaleClassifier, data: RationaleData) -> dict[str, float]:
    """``{"accuracy": ...}``: the share of sentences whose label the model gets right."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    logit = model(data.ids.to(device), data.mask.to(device))[0]
    model.train(was_training)
    return {"accuracy": ((logit > 0).long().cpu() == data.labels).float().mean().item()}


# -- explaining its decisions ---------------------------------------------------------------
METHODS = ("attention", "rollout", "gradient x input", "integrated gradients", "occlusion")


def attributions(
    model: RationaleClassifier, ids: torch.Tensor, mask: torch.Tensor, steps: int = 32
) -> dict[str, torch.Tensor]:
    """Every method of :data:`METHODS`: ``{name: scores (B, L)}``, zero at padding.

    The explained output is the logit signed towards the model's own prediction (``+logit``
    when it says 1, ``-logit`` when it says 0), so a high score means "this token supports
    what the model decided". ``attention`` is the pooling weight ``alpha``; ``rollout`` is
    ``alpha`` read through the encoder's attention rollout (``alpha @ R``); the gradient
    methods and occlusion act on the word vectors, with zeros (no word, position kept) as
    the baseline and occluded value.
    """
    from course_utils.attribution import (
        gradient_x_input,
        integrated_gradients,
        occlusion,
        token_scores,
    )
    from course_utils.interpret import attention_rollout

    model.eval()
    with torch.no_grad():
        x = model.words(ids)
        logit, alpha, attentions = model.forward_from_words(x, mask)
        sign = torch.where(logit > 0, 1.0, -1.0)
        rolled = alpha  # with no encoder layer, the rollout is the pooling itself
        if attentions:
            rolled = (alpha.unsqueeze(1) @ attention_rollout(attentions)).squeeze(1)

    def f(words: torch.Tensor) -> torch.Tensor:
        return sign * model.forward_from_words(words, mask)[0]

    scores = {
        "attention": alpha,
        "rollout": rolled,
        "gradient x input": token_scores(gradient_x_input(f, x)),
        "integrated gradients": token_scores(integrated_gradients(f, x, steps=steps)),
        "occlusion": occlusion(f, x),
    }
    return {name: s.detach().masked_fill(~mask, 0.0) for name, s in scores.items()}
