"""A tiny CLIP: scenes and their captions embedded in one space by a contrastive loss
(Radford et al., 2021), notebook 15's closing section.

An image side reads a scene's CNN features (the frozen grid of notebook 09's encoder) and a
text side reads its caption with a GRU; each ends in a vector of ``D`` numbers of length 1.
For a batch of ``B`` matching pairs, the ``B x B`` matrix of cosine similarities divided by a
temperature is scored by CLIP's symmetric cross-entropy: each image must pick its own caption
among the ``B`` captions, and each caption its own image. Retrieval is then a nearest
neighbour search in that space. Shapes: ``P`` grid cells, ``C`` channels, ``L`` words.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import check_positive, check_tensor
from course_utils.apps.vqa import QuestionEncoder
from course_utils.data import TensorBatch, pad_sequences, shuffled_batches


def clip_loss(images: torch.Tensor, texts: torch.Tensor, temperature: float = 0.07) -> torch.Tensor:
    """CLIP's symmetric loss for ``B`` matching pairs, row ``i`` of ``images`` (B, D) with row
    ``i`` of ``texts`` (B, D), both L2-normalised: the mean of the image -> text and the
    text -> image cross-entropies of ``images @ texts.T / temperature``.

    >>> e = torch.eye(3)
    >>> round(clip_loss(e, e, temperature=1.0).item(), 4)  # log(1 + 2 / e)
    0.5514
    """
    check_tensor("images", images, dims=2)
    check_tensor("texts", texts, dims=2)
    if images.shape != texts.shape:
        raise ValueError(
            f"images and texts must both be (B, D), got {tuple(images.shape)} and "
            f"{tuple(texts.shape)}"
        )
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or temperature <= 0
    ):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    logits = images @ texts.T / temperature  # (B, D) @ (D, B) -> (B, B)
    right = torch.arange(len(images), device=images.device)  # pair i sits on the diagonal
    loss_images = nn.functional.cross_entropy(logits, right)  # each image picks a caption
    loss_texts = nn.functional.cross_entropy(logits.T, right)  # each caption picks an image
    return (loss_images + loss_texts) / 2


class DualEncoder(nn.Module):
    """``images(features (B, P, C))`` and ``texts(captions (B, L))`` -> unit vectors (B, D).

    The image side flattens the normalised grid (so where a digit is matters, as it does in
    a caption read left to right) and projects it; the text side is a GRU reader
    (:class:`~course_utils.apps.vqa.QuestionEncoder`) and a projection.

    >>> m = DualEncoder(vocab_size=20, pad_id=0, cells=9, channels=4, dim=8)
    >>> torch.allclose(m.images(torch.randn(2, 9, 4)).norm(dim=-1), torch.ones(2))
    True
    >>> m.texts(torch.tensor([[5, 6], [7, 0]])).shape
    torch.Size([2, 8])
    """

    def __init__(self, vocab_size: int, pad_id: int, cells: int, channels: int = 64,
                 dim: int = 32, emb_dim: int = 32, rnn_dim: int = 64):  # fmt: skip
        super().__init__()
        for name, value in (("cells", cells), ("channels", channels), ("dim", dim)):
            check_positive(name, value)
        self.cells, self.channels = cells, channels
        self.image_norm = nn.LayerNorm(channels)
        self.image_proj = nn.Linear(cells * channels, dim)
        self.reader = QuestionEncoder(vocab_size, emb_dim, rnn_dim, pad_id)
        self.text_proj = nn.Linear(rnn_dim, dim)

    def images(self, features: torch.Tensor) -> torch.Tensor:
        check_tensor("features", features, dims=3)
        if tuple(features.shape[1:]) != (self.cells, self.channels):
            raise ValueError(
                f"features must be (B, P={self.cells}, C={self.channels}), got "
                f"{tuple(features.shape)}"
            )
        flat = self.image_norm(features).flatten(1)  # (B, P, C) -> (B, P * C)
        return nn.functional.normalize(self.image_proj(flat), dim=-1)  # (B, D)

    def texts(self, captions: torch.Tensor) -> torch.Tensor:
        _, summary, _ = self.reader(captions)  # (B, rnn_dim)
        return nn.functional.normalize(self.text_proj(summary), dim=-1)  # (B, D)


@torch.no_grad()
def retrieval_accuracy(images: torch.Tensor, texts: torch.Tensor, captions: list) -> dict:
    """Caption -> image search over ``N`` pairs (row ``i`` of each is scene ``i``).

    ``{"retrieval": share of captions whose most similar image has that very caption (two
    scenes may share one), "chance": the mean share of images with the query's caption}``.

    >>> retrieval_accuracy(torch.eye(3), torch.eye(3)[[0, 2, 1]], ["a", "b", "c"])["retrieval"]
    0.3333333333333333
    """
    check_tensor("images", images, dims=2)
    if images.shape != texts.shape or len(captions) != len(images):
        raise ValueError(
            f"images and texts must be (N, D) with N = len(captions) = {len(captions)}, got "
            f"{tuple(images.shape)} and {tuple(texts.shape)}"
        )
    keys = [" ".join(c) if isinstance(c, (list, tuple)) else str(c) for c in captions]
    best = (texts @ images.T).argmax(dim=-1).tolist()  # (N,): the nearest image per caption
    same = [sum(k == key for k in keys) / len(keys) for key in keys]
    hits = [keys[b] == keys[i] for i, b in enumerate(best)]
    return {"retrieval": sum(hits) / len(hits), "chance": sum(same) / len(same)}


@dataclass
class PairBatch(TensorBatch):
    """``features`` (B, P, C) of B scenes and their ``captions`` (B, L) padded ids."""

    features: torch.Tensor
    captions: torch.Tensor


def pair_batches(
    features: torch.Tensor, captions: list[list[int]], pad_id: int, batch_size: int, seed: int = 0
) -> Iterator[PairBatch]:
    """Shuffled batches of (scene, caption) pairs forever, a new seeded order each epoch;
    the last incomplete batch of an epoch is dropped (every batch has ``batch_size``
    negatives to tell apart)."""
    check_tensor("features", features, dims=3)
    check_positive("batch_size", batch_size)
    if len(captions) != len(features) or batch_size > len(captions):
        raise ValueError(
            f"need one caption per scene and batch_size <= scenes, got {len(captions)} "
            f"captions, {len(features)} scenes and batch_size {batch_size}"
        )

    class Pairs(list):  # the captions, with the scenes' features to batch them with
        def batch(self, rows: list[int]) -> PairBatch:
            return PairBatch(features[rows], pad_sequences([self[i] for i in rows], pad_id))

    return shuffled_batches(Pairs(captions), batch_size, seed, reseed_each_epoch=True)
