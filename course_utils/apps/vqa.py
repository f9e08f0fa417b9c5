"""Visual question answering on the digit scenes: a question attends over image regions
(notebook 15).

The image goes through notebook 09's CNN (:class:`~course_utils.apps.captioning.ConvEncoder`,
a ``G x G`` grid of ``P = G * G`` cells), each cell projected to ``d_model`` numbers: the
**regions**. A GRU reads the question (:class:`QuestionEncoder`): one vector per word and a
summary ``q``. Then the model combines them in one of five ways (``VQAConfig.attention``).
Three baselines do not attend:

* ``"blind"``: ``q`` alone into the classifier, the image unused: the question-only model
  of Antol et al. (2015) and Goyal et al. (2017), which measures how much the answers'
  priors give away;
* ``"mean"``: the mean of the regions next to ``q``: the image through one pooled vector,
  which holds what is there but not where;
* ``"grid"``: every region squeezed to ``cell_dim`` numbers and the whole grid flattened
  next to ``q``, into an MLP: it keeps where each thing is (a cell's slot in the flat
  vector), but the question can only meet the image in the MLP's hidden layer (the
  "revisiting VQA baselines" kind of model, Jabri, Joulin and van der Maaten, 2016).

Two attend:

* ``"stacked"`` (stacked attention networks, Yang et al., 2016): ``u_0 = q``; each of
  ``glimpses`` steps scores every region against ``u`` (additive attention, notebook 09's
  :func:`~course_utils.attention.attend`), reads the weighted mean ``c_k`` and
  refines the query, ``u_k = u_{k-1} + c_k``; the classifier reads the last ``u``;
* ``"coattention"``: a Transformer-style block where the question's words attend to the
  regions and the **regions attend back** to those words (multi-head attention, residual
  and LayerNorm, the padding of the question masked), followed by one glimpse of ``q`` over
  the updated regions; the classifier reads ``[q, c]``.

The answer is one of :data:`~course_utils.apps.questions.ANSWERS` (a classification). Shapes
follow :mod:`course_utils`: ``L`` question words, ``E`` = ``d_model``, ``P`` regions,
``K`` glimpses, ``A`` answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive, check_tensor
from course_utils.alignment import region_chance, region_hits
from course_utils.apps.questions import (
    ANSWERS,
    TEMPLATES,
    VQAData,
    grounding_boxes,
    make_questions,
    question_vocab,
)
from course_utils.apps.scenes import CANVAS
from course_utils.attention import AdditiveScore, MultiHeadAttention, attend

KINDS = ("blind", "mean", "grid", "stacked", "coattention")
ATTENDING = ("stacked", "coattention")


@dataclass
class VQAConfig:
    """Everything that defines a :class:`VQAModel`."""

    vocab_size: int
    pad_id: int
    attention: str = "stacked"
    glimpses: int = 2  # K, for "stacked" (the co-attention model takes one)
    image_size: int = CANVAS  # H = W, a multiple of 8
    channels: int = 64  # C, the CNN's
    d_model: int = 64  # E, regions, words and the question summary
    emb_dim: int = 32  # word embeddings
    attn_dim: int = 64  # the additive score's hidden size
    num_heads: int = 4  # the co-attention block's
    cell_dim: int = 8  # the "grid" model's numbers per region
    n_answers: int = len(ANSWERS)

    def __post_init__(self) -> None:
        if self.attention not in KINDS:
            raise ValueError(f"attention must be one of {KINDS}, got {self.attention!r}")
        for name in ("vocab_size", "glimpses", "image_size", "channels", "d_model", "emb_dim",
                     "attn_dim", "num_heads", "cell_dim", "n_answers"):  # fmt: skip
            check_positive(name, getattr(self, name))
        if self.image_size % 8:
            raise ValueError(f"image_size must be a multiple of 8, got {self.image_size}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )

    @property
    def grid(self) -> int:
        """G: the CNN divides the side by 8."""
        return self.image_size // 8


# ---------------------------------------------------------------------------------------
# The pieces: a question encoder, the regions, the co-attention block
# ---------------------------------------------------------------------------------------
class QuestionEncoder(nn.Module):
    """Embedding and a GRU over the question: ``questions`` (B, L) ids padded with ``pad_id``
    -> ``(words (B, L, E), summary (B, E), mask (B, L))``, ``mask`` True at real words.

    Questions are padded at the end and a GRU reads left to right, so the padding changes
    neither the summary (the state after the last real word) nor the real words' vectors;
    padded positions hold zeros.

    >>> enc = QuestionEncoder(vocab_size=10, emb_dim=4, d_model=6, pad_id=0)
    >>> words, summary, mask = enc(torch.tensor([[3, 4, 5], [6, 7, 0]]))
    >>> words.shape, summary.shape, mask.tolist()
    (torch.Size([2, 3, 6]), torch.Size([2, 6]), [[True, True, True], [True, True, False]])
    """

    def __init__(self, vocab_size: int, emb_dim: int, d_model: int, pad_id: int):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = CheckedEmbedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(emb_dim, d_model, batch_first=True)

    def forward(self, questions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_tensor("questions", questions, dims=2)
        mask = questions != self.pad_id  # (B, L)
        lengths = mask.sum(dim=1)  # (B,)
        if questions.dtype != torch.long or bool((lengths == 0).any()):
            raise ValueError(
                f"questions must be (B, L) word ids with at least one real word each, got "
                f"dtype {questions.dtype} and lengths {lengths.tolist()}"
            )
        out, _ = self.rnn(self.embedding(questions))  # (B, L, E)
        # the GRU reads left to right, so a real word's state never saw the padding after it
        summary = out[torch.arange(len(lengths)), lengths - 1]  # (B, E): after the last word
        return out * mask[..., None], summary, mask  # padded positions zeroed


class CoAttention(nn.Module):
    """Words attend to regions, then regions attend back to the words (padding masked);
    each with a residual connection and LayerNorm, as in a Transformer's cross-attention.

    ``forward(words (B, L, E), regions (B, P, E), word_mask (B, L))`` -> ``(words (B, L, E),
    regions (B, P, E), words_to_regions (B, H, L, P), regions_to_words (B, H, P, L))``.
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.words_look = MultiHeadAttention(d_model, num_heads)
        self.regions_look = MultiHeadAttention(d_model, num_heads)
        self.norm_words = nn.LayerNorm(d_model)
        self.norm_regions = nn.LayerNorm(d_model)

    def forward(
        self, words: torch.Tensor, regions: torch.Tensor, word_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        read, w2r = self.words_look(words, regions, regions)  # (B, L, E), (B, H, L, P)
        words = self.norm_words(words + read)
        keys = word_mask[:, None, None, :]  # (B, 1, 1, L): no region reads a padded word
        read, r2w = self.regions_look(regions, words, words, mask=keys)  # (B, P, E), (B, H, P, L)
        regions = self.norm_regions(regions + read)
        return words, regions, w2r, r2w


def stacked_glimpses(
    query: torch.Tensor, regions: torch.Tensor, scores: nn.ModuleList, refine: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Yang et al.'s stacked attention: ``query`` (B, E) looks at ``regions`` (B, P, E) once
    per score in ``scores``, each time ``u_k = u_{k-1} + c_k`` (``refine``) or, without it,
    ``u_k = c_k``. Returns ``(u (B, E), weights (B, K, P))``; each glimpse sums to 1.

    >>> _ = torch.manual_seed(0)
    >>> scores = nn.ModuleList([AdditiveScore(4, 4, 3), AdditiveScore(4, 4, 3)])
    >>> u, w = stacked_glimpses(torch.randn(2, 4), torch.randn(2, 9, 4), scores)
    >>> u.shape, w.shape, torch.allclose(w.sum(-1), torch.ones(2, 2))
    (torch.Size([2, 4]), torch.Size([2, 2, 9]), True)
    """
    check_tensor("query", query, dims=2)
    check_tensor("regions", regions, dims=3)
    if regions.shape[0] != query.shape[0]:
        raise ValueError(
            f"query (B, E) and regions (B, P, E) must have the same B, got "
            f"{tuple(query.shape)} and {tuple(regions.shape)}"
        )
    u, weights = query, []
    for score in scores:
        context, w = attend(u, regions, score)  # (B, E), (B, P)
        weights.append(w)
        u = u + context if refine else context
    return u, torch.stack(weights, dim=1)


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------
class VQAModel(nn.Module):
    """Image and question -> answer logits, looking at the regions as ``config.attention``
    says (see the module).

    >>> from course_utils.apps.captioning import ConvEncoder
    >>> v = question_vocab()
    >>> model = VQAModel(VQAConfig(len(v), v.pad_id, attention="stacked", glimpses=2))
    >>> data = make_questions(3, seed=0).encode(ConvEncoder(channels=64))  # CNN features
    >>> batch = data.batch([0, 1, 2])
    >>> logits, glimpses, _ = model.forward_with_attention(batch.features, batch.questions)
    >>> logits.shape, glimpses.shape  # (B, A), (B, K, P)
    (torch.Size([3, 12]), torch.Size([3, 2, 36]))
    """

    def __init__(self, config: VQAConfig):
        super().__init__()
        c = self.config = config
        if c.attention != "blind":  # the question-only model has no use for the image
            # The CNN's features (ReLU outputs, some large) are normalised, then projected
            self.regions = nn.Sequential(nn.LayerNorm(c.channels), nn.Linear(c.channels, c.d_model))
            self.where = nn.Linear(2, c.d_model, bias=False)  # a cell's (row, column) -> (E,)
        self.question = QuestionEncoder(c.vocab_size, c.emb_dim, c.d_model, c.pad_id)
        n_glimpses = {"stacked": c.glimpses, "coattention": 1}.get(c.attention, 0)
        self.scores = nn.ModuleList(
            AdditiveScore(c.d_model, c.d_model, c.attn_dim) for _ in range(n_glimpses)
        )
        if c.attention == "coattention":
            self.block = CoAttention(c.d_model, c.num_heads)
        if c.attention == "grid":
            self.squeeze = nn.Linear(c.d_model, c.cell_dim)  # each region -> cell_dim numbers
        width = {
            "blind": c.d_model,
            "stacked": c.d_model,
            "grid": c.grid**2 * c.cell_dim + c.d_model,
        }.get(c.attention, 2 * c.d_model)
        self.classifier = nn.Sequential(
            nn.Linear(width, c.d_model), nn.ReLU(), nn.Linear(c.d_model, c.n_answers)
        )

    def embed_regions(self, features: torch.Tensor) -> torch.Tensor:
        """``features`` (B, P, C) of a square grid -> regions (B, P, E): each cell's features,
        normalised and projected, plus a learned vector of its (row, column) in [-1, 1]."""
        if self.config.attention == "blind":
            raise ValueError("the blind (question-only) model has no regions")
        G = round(features.shape[1] ** 0.5)
        side = torch.linspace(-1, 1, G, device=features.device)
        cells = torch.stack(torch.meshgrid(side, side, indexing="ij"), dim=-1)  # (G, G, 2)
        return self.regions(features) + self.where(cells.reshape(G * G, 2))  # (B, P, E)

    def forward_with_attention(self, features: torch.Tensor, questions: torch.Tensor) -> tuple:
        """``features`` (B, P, C) from the CNN, ``questions`` (B, L) -> ``(logits (B, A), glimpses
        (B, K, P) or None, block weights or None)``: each glimpse's weights over the regions
        (they sum to 1), and for co-attention the block's ``(words_to_regions (B, H, L, P),
        regions_to_words (B, H, P, L))``."""
        words, q, mask = self.question(questions)  # (B, L, E), (B, E), (B, L)
        check_tensor("features", features, dims=3)
        if features.shape[0] != q.shape[0] or features.shape[2] != self.config.channels:
            raise ValueError(
                f"features must be (B, P, C={self.config.channels}) with B = {q.shape[0]} "
                f"questions, got {tuple(features.shape)}"
            )
        kind = self.config.attention
        if kind == "blind":
            return self.classifier(q), None, None  # the image is never read
        regions = self.embed_regions(features)  # (B, P, C) -> (B, P, E)
        if kind == "mean":
            return self.classifier(torch.cat([regions.mean(dim=1), q], dim=-1)), None, None
        if kind == "grid":
            if regions.shape[1] != self.config.grid**2:
                raise ValueError(
                    f"the grid model reads exactly P = {self.config.grid**2} regions, got "
                    f"features {tuple(features.shape)}"
                )
            flat = self.squeeze(regions).flatten(1)  # (B, P * cell_dim): cell k in slot k
            return self.classifier(torch.cat([flat, q], dim=-1)), None, None
        block = None
        if kind == "coattention":
            _, regions, w2r, r2w = self.block(words, regions, mask)
            block = (w2r, r2w)
        u, glimpses = stacked_glimpses(q, regions, self.scores, refine=kind == "stacked")
        features = u if kind == "stacked" else torch.cat([q, u], dim=-1)  # u: c for coattention
        return self.classifier(features), glimpses, block

    def forward(self, features: torch.Tensor, questions: torch.Tensor) -> torch.Tensor:
        """``features`` (B, P, C), ``questions`` (B, L) -> answer logits (B, A)."""
        return self.forward_with_attention(features, questions)[0]


def vqa_loss(model: VQAModel, batch: object) -> torch.Tensor:
    """Cross-entropy of the answer."""
    return nn.functional.cross_entropy(model(batch.features, batch.questions), batch.answers)


# ---------------------------------------------------------------------------------------
# The application protocol of course_utils.apps: make_splits, build_model, evaluate
# ---------------------------------------------------------------------------------------
def make_splits(
    n_train: int, n_val: int, n_test: int, n_compositional: int, seed: int = 0
) -> dict[str, VQAData]:
    """Train, validation, test and compositional questions (see
    :func:`~course_utils.apps.questions.make_questions`).

    >>> {name: len(data) for name, data in make_splits(20, 4, 6, 6).items()}
    {'train': 20, 'val': 4, 'test': 6, 'compositional': 6}
    """
    sizes = dict(train=n_train, val=n_val, test=n_test, compositional=n_compositional)
    return {split: make_questions(n, split, seed) for split, n in sizes.items()}


def build_model(attention: bool, kind: str | None = None, **sizes: object) -> VQAModel:
    """A model with attention (``kind`` "stacked" by default, or "coattention") or without
    (``attention=False``: "mean" by default, "grid" or "blind"); ``sizes`` go to
    :class:`VQAConfig` (``glimpses=1``...)."""
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    kind = kind or ("stacked" if attention else "mean")
    if kind not in KINDS:
        raise ValueError(f"attention must be one of {KINDS}, got kind={kind!r}")
    if (kind in ATTENDING) != attention:
        raise ValueError(f"attention={attention} contradicts kind={kind!r}")
    v = question_vocab()
    return VQAModel(VQAConfig(len(v), v.pad_id, attention=kind, **sizes))


@torch.no_grad()
def predict(model: VQAModel, data: VQAData, batch_size: int = 500) -> tuple:
    """``(answers (N,) indices into ANSWERS, glimpses (N, K, P) or None)`` for every question."""
    if not isinstance(data, VQAData):
        raise TypeError(f"data must be VQAData, got {type(data).__name__}")
    if data.features is None:
        raise ValueError("data holds no image features: call data.encode(encoder) first")
    was_training, device = model.training, next(model.parameters()).device
    model.eval()
    answers, glimpses = [], []
    for start in range(0, len(data), batch_size):
        batch = data.batch(list(range(start, min(start + batch_size, len(data))))).to(device)
        logits, g, _ = model.forward_with_attention(batch.features, batch.questions)
        answers.append(logits.argmax(dim=-1).cpu())
        glimpses.append(None if g is None else g.cpu())
    model.train(was_training)
    return torch.cat(answers), None if glimpses[0] is None else torch.cat(glimpses)


def grounding(
    glimpses: torch.Tensor,
    data: VQAData,
    glimpse: int = -1,
    on: str = "support",
    templates: tuple[str, ...] | None = None,
) -> dict[str, float]:
    """Where a glimpse peaks, over the questions that have boxes to peak on.

    ``glimpses`` (N, K, P) from :func:`predict`; ``glimpse`` which of the K; ``on`` which
    boxes count (:func:`~course_utils.apps.questions.grounding_boxes`: any supporting digit,
    the named one or the answer); ``templates`` keeps only questions of those templates (all by default).
    Returns ``{"grounding": share of the counted questions whose peak cell's centre lies in
    one of their boxes, "chance": the mean share of the grid's cell centres inside them (a
    peak on a random cell), "digit_chance": the mean share of the scene's digits whose box
    counts (a peak on a random digit, whatever the question), "questions": how many
    counted}``. The boxes of one scene never overlap, so a union's share is the sum of its
    boxes'. A glimpse that only seeks ink lands on some digit, so it beats ``chance`` by far
    but ``digit_chance`` hardly at all.
    """
    check_tensor("glimpses", glimpses, dims=3)
    G = round(glimpses.shape[-1] ** 0.5)
    if glimpses.shape[0] != len(data) or G * G != glimpses.shape[-1]:
        raise ValueError(
            f"glimpses must be (N={len(data)}, K, P) with P a square, got {tuple(glimpses.shape)}"
        )
    if not -glimpses.shape[1] <= glimpse < glimpses.shape[1]:
        raise ValueError(f"glimpse must index one of K={glimpses.shape[1]}, got {glimpse}")
    if templates is not None and not set(templates) <= set(TEMPLATES):
        raise ValueError(f"templates must be among {TEMPLATES}, got {templates!r}")
    size, grids, boxes, owner = tuple(data.images.shape[-2:]), [], [], []
    digit_chance = torch.zeros(len(data))
    for n, (q, s) in enumerate(zip(data.questions, data.scene_of, strict=True)):
        if templates is not None and q.template not in templates:
            continue
        chosen = grounding_boxes(q, data.scenes[s], on)
        digit_chance[n] = len(chosen) / len(data.scenes[s].digits)
        for box in chosen:
            grids.append(glimpses[n, glimpse].reshape(G, G))
            boxes.append(box)
            owner.append(n)
    if not boxes:
        raise ValueError(f"no question of data (templates {templates}) has boxes on={on!r}")
    hits = region_hits(torch.stack(grids), boxes, size).float()  # (rows,)
    chance = region_chance(boxes, G, size)  # (rows,)
    owner = torch.tensor(owner)
    per_question = torch.zeros(len(data)).index_add_(0, owner, hits)  # 0 or 1: boxes disjoint
    chance_q = torch.zeros(len(data)).index_add_(0, owner, chance)
    counted = torch.zeros(len(data), dtype=torch.bool)
    counted[owner] = True
    return {
        "grounding": per_question[counted].mean().item(),
        "chance": chance_q[counted].mean().item(),
        "digit_chance": digit_chance[counted].mean().item(),
        "questions": int(counted.sum()),
    }


def evaluate(model: VQAModel, data: VQAData) -> dict[str, float]:
    """``{"accuracy": share answered right, "accuracy_<template>": the same per template}``
    plus ``"grounding"`` and its ``"chance"`` (last glimpse) for a model that attends.

    >>> from course_utils.apps.captioning import ConvEncoder
    >>> test = make_splits(5, 5, 5, 3)["test"].encode(ConvEncoder(channels=64))
    >>> sorted(evaluate(build_model(attention=True), test))[:3]
    ['accuracy', 'accuracy_count', 'accuracy_exists']
    """
    answers, glimpses = predict(model, data)
    right = answers == data.answers  # (N,)
    out = {"accuracy": right.float().mean().item()}
    for t in TEMPLATES:
        chosen = torch.tensor([q.template == t for q in data.questions])
        if chosen.any():
            out[f"accuracy_{t}"] = right[chosen].float().mean().item()
    if glimpses is not None and any(q.support for q in data.questions):
        found = grounding(glimpses, data)
        out.update(grounding=found["grounding"], chance=found["chance"])
    return out
