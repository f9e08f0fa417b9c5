"""A tiny attention-only Transformer and the synthetic tasks that make its heads specialise.

The model is token embedding + a positional signal, then ``num_layers`` blocks of
multi-head self-attention with a residual connection, then a linear read-out. No MLP and no
LayerNorm: whatever the model learns, its attention heads must do, so their weights can be
read off directly.

The "first and previous" task asks, at every position ``t >= 1``, for two tokens at once:
the one that opened the sequence and the one just before ``t``::

    ids       6 8 7 7 0
    first     - 6 6 6 6
    previous  - 6 8 7 7

A single softmax row cannot point at both places sharply, so with two heads one learns to
look at position 0 and the other at ``t - 1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive
from course_utils.attention import MultiHeadAttention
from course_utils.data import TensorBatch
from course_utils.positional import LearnedPositionalEmbedding, sinusoidal_encoding

POSITIONS = ("learned", "sinusoidal", "none")


@dataclass
class ToyConfig:
    """Sizes of an :class:`AttentionOnlyTransformer`.

    ``positions`` is ``"learned"``, ``"sinusoidal"`` or ``"none"``; ``causal`` adds the
    causal mask in every layer; ``num_outputs`` is the size of the read-out per position.
    """

    vocab_size: int = 10
    max_len: int = 12
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 1
    num_outputs: int = 20
    positions: str = "learned"
    causal: bool = True

    def __post_init__(self):
        for name in (
            "vocab_size",
            "max_len",
            "d_model",
            "num_heads",
            "num_layers",
            "num_outputs",
        ):
            check_positive(name, getattr(self, name))
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )


class AttentionOnlyTransformer(nn.Module):
    """Embeddings + positions -> ``num_layers`` x (self-attention + residual) -> linear.

    ``forward(ids (B, L)) -> (logits (B, L, num_outputs), weights)`` where ``weights`` is a
    list with one ``(B, H, L, L)`` tensor per layer: the very weights the output used.

    >>> model = AttentionOnlyTransformer(ToyConfig(vocab_size=5, max_len=6, num_outputs=3))
    >>> logits, weights = model(torch.tensor([[1, 4, 0, 2]]))
    >>> logits.shape, len(weights), weights[0].shape
    (torch.Size([1, 4, 3]), 1, torch.Size([1, 2, 4, 4]))
    """

    def __init__(self, config: ToyConfig):
        super().__init__()
        if not isinstance(config, ToyConfig):
            raise TypeError(f"config must be a ToyConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.token_embedding = CheckedEmbedding(c.vocab_size, c.d_model)
        if c.positions == "learned":
            self.position = LearnedPositionalEmbedding(c.max_len, c.d_model)
        else:
            self.position = None
        if c.positions == "sinusoidal":
            self.register_buffer("sinusoids", sinusoidal_encoding(c.max_len, c.d_model))
        self.layers = nn.ModuleList(
            MultiHeadAttention(c.d_model, c.num_heads) for _ in range(c.num_layers)
        )
        self.readout = nn.Linear(c.d_model, c.num_outputs)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The residual stream before the first layer: token embeddings plus positions,
        ``(B, L)`` ids -> ``(B, L, E)``."""
        x = self.token_embedding(ids)  # (B, L, E)
        if self.position is not None:
            return self.position(x)
        if self.config.positions == "sinusoidal":
            return x + self.sinusoids[: ids.shape[1]]
        return x

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        c = self.config
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
            shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must be a (B, L) integer tensor, got {shape}")
        L = ids.shape[1]
        if L > c.max_len:
            raise ValueError(f"ids has length {L}, longer than max_len={c.max_len}")
        x = self.embed(ids)  # (B, L, E)
        weights = []
        for attention in self.layers:
            out, w = attention(x, x, x, is_causal=c.causal)  # (B, L, E), (B, H, L, L)
            x = x + out  # residual: each layer adds what its heads found
            weights.append(w)
        return self.readout(x), weights


# ---------------------------------------------------------------------------------------
# The "first and previous" task
# ---------------------------------------------------------------------------------------
def first_and_previous_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids ``(B, L)`` and targets ``(B, L, 2)``: ``[..., 0]`` the first token,
    ``[..., 1]`` the previous one; ``-100`` (ignored by cross-entropy) at position 0.

    >>> ids, targets = first_and_previous_batch(1, 5, 10, torch.Generator().manual_seed(3))
    >>> ids.tolist()
    [[6, 8, 7, 7, 0]]
    >>> targets[0, :, 0].tolist(), targets[0, :, 1].tolist()
    ([-100, 6, 6, 6, 6], [-100, 6, 8, 7, 7])
    """
    for name, value in (
        ("batch_size", batch_size),
        ("seq_len", seq_len),
        ("vocab_size", vocab_size),
    ):
        check_positive(name, value)
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2 (position 0 has no previous), got {seq_len}")
    ids = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    targets = torch.full((batch_size, seq_len, 2), -100, dtype=torch.long)
    targets[:, 1:, 0] = ids[:, :1]  # first token, broadcast along the sequence
    targets[:, 1:, 1] = ids[:, :-1]  # previous token
    return ids, targets


@dataclass
class ToyBatch(TensorBatch):
    """Ids ``(B, L)`` and targets ``(B, L, 2)`` (first, previous), as one movable batch."""

    ids: torch.Tensor
    targets: torch.Tensor


def first_and_previous_batches(
    batch_size: int, seq_len: int, vocab_size: int, seed: int = 0
) -> Iterator[ToyBatch]:
    """Fresh random :class:`ToyBatch` objects forever, from a generator seeded with ``seed``.

    >>> batch = next(first_and_previous_batches(4, 6, 10, seed=0))
    >>> batch.ids.shape, batch.targets.shape
    (torch.Size([4, 6]), torch.Size([4, 6, 2]))
    """
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield ToyBatch(*first_and_previous_batch(batch_size, seq_len, vocab_size, generator))
