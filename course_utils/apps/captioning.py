"""Image captioning with attention over a CNN's feature grid (Show, Attend and Tell), notebook 09.

A small CNN turns an image into a grid of feature vectors, ``G x G`` cells of ``C`` channels,
flattened to ``P = G * G`` positions. An LSTM writes the caption one word at a time, and before
each word it looks at the image again, in one of three ways (``CaptionConfig.attention``):

* ``"spatial"`` (Xu et al., 2015): additive attention over the ``P`` cells, queried by the
  previous LSTM state ``h``; the context is the weighted mean of the cells' vectors (size
  ``C``), scaled by a gate ``beta = sigmoid(w . h + b)`` that lets the model read less of the
  image (for words such as "and");
* ``"channel"`` (after SE and SCA-CNN, Chen et al., 2017): the same additive attention over
  the ``C`` channels, each scored by its map over the grid: the model picks *which features*
  to read, not where; the context is the mean feature with each channel scaled by its weight;
* ``"none"``: the mean of the cells' vectors at every step, the baseline without attention;
* ``"grid"``: no attention either, but a learned linear map of the whole flattened grid (all
  ``P x C`` numbers) to ``C`` numbers, the same at every step: it keeps where each digit
  is, which the mean throws away, so it is the fair baseline (notebook 12).

Everything else is shared: the encoder, the LSTM started from the mean feature, the read-out
``Linear([h, context])``. Training adds Xu et al.'s *doubly stochastic* term
``lambda * sum_i (1 - sum_t a_ti)^2`` for spatial attention, which asks every cell to receive
about one unit of attention over the whole caption. The model follows the decoding protocol of
:mod:`course_utils.decoding` and the application protocol of :mod:`course_utils.apps`.

Shapes follow the legend in :mod:`course_utils`, plus ``G`` grid side, ``P`` grid cells and
``H``, ``W`` image height and width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive, check_tensor
from course_utils.alignment import region_chance, region_hits
from course_utils.apps.scenes import (
    CANVAS,
    CaptionBatch,
    CaptionData,
    caption_vocab,
    make_scenes,
)
from course_utils.attention import AdditiveScore, attend, masked_softmax
from course_utils.data import SPLITS, Vocab
from course_utils.decoding import greedy_decode
from course_utils.metrics import corpus_bleu, exact_match

State = tuple[torch.Tensor, ...]
KINDS = ("spatial", "channel", "none", "grid")


@dataclass
class CaptionConfig:
    """Everything that defines a :class:`Captioner`; build it with :meth:`from_vocab`."""

    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    attention: str = "spatial"
    image_size: int = CANVAS  # H = W, a multiple of 8
    channels: int = 64  # C
    emb_dim: int = 16  # E
    rnn_dim: int = 128  # R, the LSTM state
    attn_dim: int = 64  # A

    @classmethod
    def from_vocab(cls, vocab: Vocab, **sizes: object) -> CaptionConfig:
        return cls(len(vocab), vocab.pad_id, vocab.bos_id, vocab.eos_id, **sizes)

    def __post_init__(self) -> None:
        if self.attention not in KINDS:
            raise ValueError(f"attention must be one of {KINDS}, got {self.attention!r}")
        for name in ("vocab_size", "image_size", "channels", "emb_dim", "rnn_dim", "attn_dim"):
            check_positive(name, getattr(self, name))
        if self.image_size % 8:
            raise ValueError(f"image_size must be a multiple of 8, got {self.image_size}")

    @property
    def grid(self) -> int:
        """G: three 2 x 2 poolings divide the side by 8."""
        return self.image_size // 8


# ---------------------------------------------------------------------------------------
# The encoder and the three ways to look
# ---------------------------------------------------------------------------------------
class ConvEncoder(nn.Module):
    """Three blocks of 3 x 3 convolution, batch norm and ReLU, each halving the image's side
    (the first by its stride 2, the next two by 2 x 2 max pooling): (B, 1, H, W) -> (B, P, C).

    The image enters with two more channels, each pixel's row and column scaled to [-1, 1]
    ("CoordConv", Liu et al., 2018): convolutions alone see the same thing wherever it is,
    and a caption written left to right needs to know where things are.
    """

    def __init__(self, channels: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            *self.block(3, 16, stride=2),  # (B, 3, H, W) -> (B, 16, H/2, W/2)
            *self.block(16, 32),
            nn.MaxPool2d(2),  # -> (B, 32, H/4, W/4)
            *self.block(32, channels),
            nn.MaxPool2d(2),  # -> (B, C, H/8, W/8) = (B, C, G, G)
        )

    @staticmethod
    def block(c_in: int, c_out: int, stride: int = 1) -> list[nn.Module]:
        conv = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        return [conv, nn.BatchNorm2d(c_out), nn.ReLU()]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_tensor("images", images, dims=4)
        if images.shape[1] != 1 or images.shape[2] % 8 or images.shape[3] % 8:
            raise ValueError(
                f"images must be (B, 1, H, W) with H and W multiples of 8, got {tuple(images.shape)}"
            )
        B, _, H, W = images.shape
        rows = torch.linspace(-1, 1, H, device=images.device)[:, None].expand(H, W)
        cols = torch.linspace(-1, 1, W, device=images.device)[None, :].expand(H, W)
        coords = torch.stack([rows, cols]).expand(B, 2, H, W)
        maps = self.net(torch.cat([images, coords], dim=1))  # (B, 3, H, W) -> (B, C, G, G)
        return maps.flatten(2).transpose(1, 2)  # (B, C, P) -> (B, P, C), cells row by row


def channel_attend(
    hidden: torch.Tensor, features: torch.Tensor, score: nn.Module
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the channels: ``hidden`` (B, R), ``features`` (B, P, C) ->
    ``(context (B, C), weights (B, C))``.

    Each channel is scored by its map over the cells (the keys are ``(B, C, P)``); the
    context is the mean feature with channel ``c`` scaled by ``C * weights[c]``, so uniform
    weights give the plain mean (what the model without attention reads).

    >>> _ = torch.manual_seed(0)
    >>> context, w = channel_attend(torch.randn(2, 5), torch.randn(2, 9, 4), AdditiveScore(5, 9, 3))
    >>> context.shape, w.shape, torch.allclose(w.sum(-1), torch.ones(2))
    (torch.Size([2, 4]), torch.Size([2, 4]), True)
    """
    C = features.shape[-1]
    channel_maps = features.transpose(1, 2)  # (B, P, C) -> (B, C, P)
    scores = score(hidden.unsqueeze(1), channel_maps)  # (B, 1, R), (B, C, P) -> (B, 1, C)
    weights = masked_softmax(scores).squeeze(1)  # (B, C)
    return C * weights * features.mean(dim=1), weights  # (B, C) * (B, C)


def doubly_stochastic_penalty(weights: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """Xu et al.'s ``sum_i (1 - sum_t a_ti)^2`` per image: ``weights`` (B, T, P) over the
    cells at each step, ``step_mask`` (B, T) True at real (non-pad) steps -> (B,).

    >>> w = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])  # two steps over two cells
    >>> doubly_stochastic_penalty(w, torch.tensor([[True, True]]))  # (1 - 1.5)^2 + (1 - 0.5)^2
    tensor([0.5000])
    """
    check_tensor("weights", weights, dims=3)
    if not isinstance(step_mask, torch.Tensor) or step_mask.shape != weights.shape[:2]:
        raise ValueError(
            f"step_mask must be a (B, T) = {tuple(weights.shape[:2])} tensor, got "
            f"{tuple(getattr(step_mask, 'shape', ()))}"
        )
    per_cell = (weights * step_mask[..., None]).sum(dim=1)  # (B, T, P) -> (B, P)
    return ((1.0 - per_cell) ** 2).sum(dim=-1)  # (B,)


# ---------------------------------------------------------------------------------------
# The captioner
# ---------------------------------------------------------------------------------------
class Captioner(nn.Module):
    """CNN encoder + LSTM decoder that looks at the image before each word (see the module).

    >>> model = Captioner(CaptionConfig.from_vocab(caption_vocab()))
    >>> batch = CaptionData(make_scenes(2, seed=0), caption_vocab()).batch([0, 1])
    >>> logits, weights, betas = model.forward_with_attention(batch.images, batch.tgt_in)
    >>> logits.shape[-1] == len(caption_vocab()), weights.shape[-1], betas.shape == batch.tgt_in.shape
    (True, 36, True)
    """

    def __init__(self, config: CaptionConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        self.encoder = ConvEncoder(c.channels)
        if c.attention == "spatial":  # keys: the cells' feature vectors (C numbers each)
            self.score = AdditiveScore(c.rnn_dim, c.channels, c.attn_dim)
        elif c.attention == "channel":  # keys: the channels' maps (P numbers each)
            self.score = AdditiveScore(c.rnn_dim, c.grid * c.grid, c.attn_dim)
        elif c.attention == "grid":  # every cell's vector, in place: P * C numbers -> C
            self.flat = nn.Linear(c.grid * c.grid * c.channels, c.channels)
        if c.attention in ("spatial", "channel"):
            self.gate = nn.Linear(c.rnn_dim, 1)  # beta, Xu et al.'s gating scalar
        self.init_h = nn.Linear(c.channels, c.rnn_dim)
        self.init_c = nn.Linear(c.channels, c.rnn_dim)
        self.embedding = CheckedEmbedding(c.vocab_size, c.emb_dim, padding_idx=c.pad_id)
        self.rnn = nn.LSTMCell(c.emb_dim + c.channels, c.rnn_dim)
        self.out = nn.Linear(c.rnn_dim + c.channels, c.vocab_size)

    def look(self, hidden: torch.Tensor, features: torch.Tensor) -> tuple:
        """``(context, weights or None, beta (B,) or None)`` for one step."""
        kind = self.config.attention
        if kind == "none":
            return features.mean(dim=1), None, None  # (B, P, C) -> (B, C)
        if kind == "grid":
            return self.flat(features.flatten(1)), None, None  # (B, P * C) -> (B, C)
        read = attend if kind == "spatial" else channel_attend  # over the cells or the channels
        context, weights = read(hidden, features, self.score)
        beta = torch.sigmoid(self.gate(hidden))  # (B, R) -> (B, 1)
        return beta * context, weights, beta.squeeze(-1)

    # The decoding protocol of course_utils.decoding
    def start(self, batch: object) -> State:
        """Encode ``batch.images`` once -> ``(h (B, R), c (B, R), features (B, P, C))``."""
        features = self.encoder(batch.images)  # (B, P, C)
        mean = features.mean(dim=1)  # (B, C)
        return torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)), features

    def step_with_gate(self, tokens: torch.Tensor, state: State) -> tuple:
        """``tokens`` (B,) -> ``(logits (B, V), state, weights, beta)``."""
        h, c, features = state
        context, weights, beta = self.look(h, features)  # looks with the previous state
        y = self.embedding(tokens)  # (B,) -> (B, E)
        h, c = self.rnn(torch.cat([y, context], dim=-1), (h, c))  # (B, E + C) -> (B, R)
        logits = self.out(torch.cat([h, context], dim=-1))  # (B, R + C) -> (B, V)
        return logits, (h, c, features), weights, beta

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, object]:
        """``tokens`` (B,) -> ``(log_probs (B, V), state, weights (B, P | C) or None)``."""
        logits, state, weights, _ = self.step_with_gate(tokens, state)
        return logits.log_softmax(dim=-1), state, weights

    def forward_with_attention(self, images: torch.Tensor, tgt_in: torch.Tensor) -> tuple:
        """Teacher forcing -> ``(logits (B, T, V), weights (B, T, P | C) or None, betas
        (B, T) or None)``; row ``t`` is the step that predicts word ``t + 1``."""
        check_tensor("tgt_in", tgt_in, dims=2)
        if tgt_in.shape[1] == 0 or tgt_in.dtype != torch.long:
            raise ValueError(
                f"tgt_in must be (B, T) token ids with T >= 1 (<bos> first), got shape "
                f"{tuple(tgt_in.shape)} and dtype {tgt_in.dtype}"
            )
        state = self.start(CaptionBatch(images, tgt_in, tgt_in))
        if state[0].shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"images and tgt_in must have the same batch size, got {tuple(images.shape)} "
                f"and {tuple(tgt_in.shape)}"
            )
        logits, weights, betas = [], [], []
        for t in range(tgt_in.shape[1]):  # each step needs the state of the one before
            step_logits, state, w, beta = self.step_with_gate(tgt_in[:, t], state)
            logits.append(step_logits)
            weights.append(w)
            betas.append(beta)
        if weights[0] is None:
            return torch.stack(logits, 1), None, None
        return torch.stack(logits, 1), torch.stack(weights, 1), torch.stack(betas, 1)

    def forward(self, images: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: ``images`` (B, 1, H, W), ``tgt_in`` (B, T) -> logits (B, T, V)."""
        return self.forward_with_attention(images, tgt_in)[0]


def caption_loss(model: Captioner, batch: CaptionBatch, lam: float = 0.0) -> torch.Tensor:
    """Cross-entropy of the next word (padding ignored), plus ``lam`` times the mean doubly
    stochastic penalty when the model attends over the grid."""
    logits, weights, _ = model.forward_with_attention(batch.images, batch.tgt_in)
    loss = nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.pad_id
    )
    if lam and model.config.attention == "spatial":
        loss = loss + lam * doubly_stochastic_penalty(weights, batch.tgt_out != model.pad_id).mean()
    return loss


# ---------------------------------------------------------------------------------------
# The application protocol of course_utils.apps: make_splits, build_model, evaluate
# ---------------------------------------------------------------------------------------
def make_splits(
    n_train: int,
    n_val: int,
    n_test: int,
    n_digits: tuple[int, int] = (2, 4),
    seed: int = 0,
    relations: bool = False,
) -> dict[str, CaptionData]:
    """Train, validation and test :class:`CaptionData`; no digit image is in two splits.

    >>> {name: len(data) for name, data in make_splits(20, 5, 5).items()}
    {'train': 20, 'val': 5, 'test': 5}
    """
    sizes, vocab = {"train": n_train, "val": n_val, "test": n_test}, caption_vocab()
    return {
        s: CaptionData(make_scenes(sizes[s], s, seed, n_digits, relations=relations), vocab, s)
        for s in SPLITS
    }


def build_model(attention: bool, kind: str | None = None, **sizes: int) -> Captioner:
    """The captioner with spatial attention (``attention=True``), without (``False``), or of
    the given ``kind`` (``"spatial"``, ``"channel"``, ``"none"``, ``"grid"``); ``sizes`` go
    to the config."""
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    kind = kind or ("spatial" if attention else "none")
    if (kind in ("spatial", "channel")) != attention:
        raise ValueError(f"attention={attention} contradicts kind={kind!r}")
    return Captioner(CaptionConfig.from_vocab(caption_vocab(), attention=kind, **sizes))


@torch.no_grad()
def caption(model: Captioner, data: CaptionData, batch_size: int = 250) -> torch.Tensor:
    """Greedy captions of every scene of ``data``: ids (N, T), ``<eos>`` then ``<pad>``."""
    device, out = next(model.parameters()).device, []
    for start in range(0, len(data), batch_size):
        batch = data.batch(list(range(start, min(start + batch_size, len(data))))).to(device)
        ids = greedy_decode(model, batch, max_steps=12).ids  # 4 digits, 3 relations, <eos>
        out.append(nn.functional.pad(ids, (0, 12 - ids.shape[1]), value=model.pad_id).cpu())
    return torch.cat(out)


@torch.no_grad()
def pointing(model: Captioner, data: CaptionData) -> dict[str, float]:
    """Where spatial attention peaks while each digit word is written (teacher forcing).

    ``{"pointing": share of digit words whose peak cell's centre lies inside that digit's
    box, "chance": the boxes' mean share of the grid's cell centres}``.
    """
    if model.config.attention != "spatial":
        raise ValueError(f"pointing needs spatial attention, got {model.config.attention!r}")
    device, G = next(model.parameters()).device, model.config.grid
    batch = data.batch(list(range(len(data)))).to(device)
    _, weights, _ = model.forward_with_attention(batch.images, batch.tgt_in)  # (N, T, P)
    rows, boxes = [], []
    for n, scene in enumerate(data.scenes):
        for t, d in enumerate(scene.word_digit):
            if d >= 0:  # the step that writes word t names digit d
                rows.append(weights[n, t].reshape(G, G).cpu())
                boxes.append(scene.boxes[d])
    weights_per_word, size = torch.stack(rows), tuple(data.images.shape[-2:])
    return {
        "pointing": region_hits(weights_per_word, boxes, size).float().mean().item(),
        "chance": region_chance(boxes, G, size).mean().item(),
    }


def evaluate(model: Captioner, data: CaptionData) -> dict[str, float]:
    """Greedy captions -> ``{"bleu": corpus BLEU, "exact_match": share}``, plus
    ``"pointing"`` and its ``"chance"`` for a model with spatial attention.

    >>> sorted(evaluate(build_model(attention=True), make_splits(5, 5, 5)["test"]))
    ['bleu', 'chance', 'exact_match', 'pointing']
    """
    if not isinstance(data, CaptionData):
        raise TypeError(f"data must be CaptionData, got {type(data).__name__}")
    was_training = model.training
    model.eval()
    ids, vocab = caption(model, data), data.vocab
    reference = data.batch(list(range(len(data)))).tgt_out  # (N, T)
    hypotheses = [" ".join(vocab.decode(row)) for row in ids]
    out = {
        "bleu": corpus_bleu(hypotheses, [" ".join(s.caption) for s in data.scenes]),
        "exact_match": exact_match(ids, reference, vocab.eos_id, vocab.pad_id)
        .float()
        .mean()
        .item(),
    }
    if model.config.attention == "spatial":
        out.update(pointing(model, data))
    model.train(was_training)
    return out
