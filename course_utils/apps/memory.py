"""Attention as differentiable memory (notebook 14): a key-value memory read by attention,
associative recall, and the end-to-end memory network over :mod:`~course_utils.apps.stories`.

* :func:`memory_read` is a soft lookup, ``softmax(beta q K^T) V``; :func:`hard_read` takes the
  best-matching slot (argmax), which no gradient can pass; :func:`read_recall` measures how a
  read blurs as more pairs are stored, and :func:`predicted_weight` gives its closed form.
* Associative recall: a sequence of (key, value) symbol pairs, then a key; the answer is its
  value (:func:`make_recall`). :class:`RecallAttention` reads the pairs with one attention
  layer, :class:`RecallGRU` must carry them in its state.
* :class:`MemN2N` (Sukhbaatar et al. 2015): sentences embedded as memory, ``hops`` rounds of
  attention with the query updated by each read (``u <- u + o``).

Shapes: ``B`` batch, ``P`` stored pairs, ``M`` sentences, ``W`` words a sentence, ``E`` width
(``d_model``), ``D`` key size, ``Dv`` value size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive, check_qkv, check_tensor
from course_utils.apps.stories import MAX_WORDS, StoryBatch, StoryData, make_stories, story_vocab
from course_utils.attention import masked_softmax
from course_utils.data import TensorBatch


# ---------------------------------------------------------------------------------------
# A key-value memory read by attention
# ---------------------------------------------------------------------------------------
def memory_read(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, beta: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft read: ``weights = softmax(beta q K^T)`` over the slots, ``read = weights V``.

    ``query (..., D)``, ``keys (..., N, D)``, ``values (..., N, Dv)`` -> ``(read (..., Dv),
    weights (..., N))``.

    >>> keys, values = torch.eye(2), torch.tensor([[10.0], [20.0]])
    >>> read, weights = memory_read(torch.tensor([1.0, 0.0]), keys, values, beta=math.log(3))
    >>> weights, read  # e^(ln 3) / (e^(ln 3) + 1) = 3/4 on the first slot
    (tensor([0.7500, 0.2500]), tensor([12.5000]))
    """
    check_tensor("query", query)
    check_qkv(query.unsqueeze(-2), keys, values)
    scores = beta * (keys @ query.unsqueeze(-1)).squeeze(
        -1
    )  # (..., N, D) @ (..., D, 1) -> (..., N)
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(-2) @ values).squeeze(-2), weights  # (..., 1, N) @ (..., N, Dv)


def linear_read(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Fast-weight read: write the pairs into one matrix ``M = sum_i v_i k_i^T`` ``(..., Dv,
    D)`` and read ``M q``, which is ``sum_i (k_i . q) v_i``: the soft read without its softmax
    (Schlag, Irie & Schmidhuber 2021; linear attention with identity features, notebook 13).

    ``query (..., D)``, ``keys (..., N, D)``, ``values (..., N, Dv)`` -> ``read (..., Dv)``.

    >>> keys, values = torch.eye(2), torch.tensor([[10.0], [20.0]])
    >>> linear_read(torch.tensor([1.0, 0.5]), keys, values)  # 1 * 10 + 0.5 * 20
    tensor([20.])
    """
    check_tensor("query", query)
    check_qkv(query.unsqueeze(-2), keys, values)
    M = values.transpose(-2, -1) @ keys  # (..., Dv, N) @ (..., N, D) -> (..., Dv, D)
    return (M @ query.unsqueeze(-1)).squeeze(-1)  # (..., Dv, D) @ (..., D, 1) -> (..., Dv)


def hard_read(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard read: the value of the best-matching key (argmax of ``q K^T``), one-hot weights.

    The argmax has no gradient, so nothing trained through this read can move the keys.

    >>> hard_read(torch.tensor([1.0, 0.0]), torch.eye(2), torch.tensor([[10.0], [20.0]]))
    (tensor([10.]), tensor([1., 0.]))
    """
    check_tensor("query", query)
    check_qkv(query.unsqueeze(-2), keys, values)
    best = (keys @ query.unsqueeze(-1)).squeeze(-1).argmax(dim=-1)  # (...,)
    weights = nn.functional.one_hot(best, keys.shape[-2]).to(values.dtype)
    return (weights.unsqueeze(-2) @ values).squeeze(-2), weights


def predicted_weight(num_pairs: int, key_dim: int, beta: float) -> float:
    """The weight a soft read puts on the right slot, for random unit keys and an exact query.

    The right key scores ``beta``; each of the other ``num_pairs - 1`` scores ``beta x`` with
    ``x`` about normal, mean 0, variance ``1 / key_dim``, so ``E[e^(beta x)] = e^(beta^2 / 2D)``:
    ``w = e^beta / (e^beta + (num_pairs - 1) e^(beta^2 / (2 key_dim)))``.

    >>> round(predicted_weight(1, 16, 5.0), 3)
    1.0
    """
    check_positive("num_pairs", num_pairs)
    check_positive("key_dim", key_dim)
    return 1.0 / (1.0 + (num_pairs - 1) * math.exp(beta**2 / (2 * key_dim) - beta))


@torch.no_grad()
def read_recall(
    num_pairs: int, key_dim: int, beta: float, trials: int = 200, seed: int = 0
) -> dict[str, float]:
    """Store ``num_pairs`` random (unit key, Gaussian value) pairs, read each trial's memory
    with one stored key; ``{"weight": mean weight on the right slot, "recall": share of reads
    closer (cosine) to the right value than to any other stored value}``."""
    keys, values, pick = _random_memories(num_pairs, key_dim, trials, seed)
    rows = torch.arange(trials)
    read, weights = memory_read(keys[rows, pick], keys, values, beta)  # (trials, Dv), (trials, N)
    return {"weight": weights[rows, pick].mean().item(), "recall": _recall(read, values, pick)}


def linear_recall(num_pairs: int, key_dim: int, trials: int = 200, seed: int = 0) -> float:
    """:func:`read_recall`'s recall for a :func:`linear_read` of the same memories (the same
    ``seed`` draws the same keys, values and queried slots)."""
    keys, values, pick = _random_memories(num_pairs, key_dim, trials, seed)
    read = linear_read(keys[torch.arange(trials), pick], keys, values)  # (trials, Dv)
    return _recall(read, values, pick)


def _random_memories(
    num_pairs: int, key_dim: int, trials: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``trials`` memories of unit keys ``(trials, N, D)`` and Gaussian values ``(trials, N,
    D)``, and the slot each trial reads ``(trials,)``."""
    check_positive("num_pairs", num_pairs)
    check_positive("key_dim", key_dim)
    check_positive("trials", trials)
    g = torch.Generator().manual_seed(seed)
    keys = nn.functional.normalize(torch.randn(trials, num_pairs, key_dim, generator=g), dim=-1)
    values = torch.randn(trials, num_pairs, key_dim, generator=g)
    return keys, values, torch.randint(num_pairs, (trials,), generator=g)


def _recall(read: torch.Tensor, values: torch.Tensor, pick: torch.Tensor) -> float:
    """Share of reads ``(trials, Dv)`` closer (cosine) to value ``pick`` than to any other."""
    cosine = nn.functional.cosine_similarity(read.unsqueeze(1), values, dim=-1)  # (trials, N)
    return (cosine.argmax(-1) == pick).float().mean().item()


# ---------------------------------------------------------------------------------------
# Associative recall: pairs, then a key; answer its value
# ---------------------------------------------------------------------------------------
@dataclass
class RecallBatch(TensorBatch):
    """``keys (B, P)`` and ``values (B, P)`` symbol ids, ``query (B,)`` one of the keys,
    ``answer (B,)`` its value, ``position (B,)`` the queried pair's index."""

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    answer: torch.Tensor
    position: torch.Tensor


def make_recall(
    n: int, num_pairs: int, n_keys: int = 16, n_values: int = 16, seed: int = 0
) -> RecallBatch:
    """``n`` sequences of ``num_pairs`` pairs with distinct keys and random values.

    >>> b = make_recall(1, 3, seed=0)
    >>> int(b.answer[0]) == int(b.values[0, b.position[0]])
    True
    """
    check_positive("n", n)
    check_positive("num_pairs", num_pairs)
    if num_pairs > n_keys:
        raise ValueError(f"num_pairs={num_pairs} distinct keys need n_keys >= it, got {n_keys}")
    g = torch.Generator().manual_seed(seed)
    keys = torch.rand(n, n_keys, generator=g).argsort(dim=-1)[:, :num_pairs]  # distinct keys
    values = torch.randint(n_values, (n, num_pairs), generator=g)
    position = torch.randint(num_pairs, (n,), generator=g)
    rows = torch.arange(n)
    return RecallBatch(keys, values, keys[rows, position], values[rows, position], position)


def recall_batches(
    batch_size: int, pairs: tuple[int, int], seed: int = 0, **symbols: int
) -> Iterator[RecallBatch]:
    """Training batches forever, each of a number of pairs drawn from ``pairs`` (both ends
    included); ``symbols`` (``n_keys``, ``n_values``) go to :func:`make_recall`."""
    rng = torch.Generator().manual_seed(seed)
    step = 0
    while True:
        num_pairs = int(torch.randint(pairs[0], pairs[1] + 1, (1,), generator=rng))
        yield make_recall(batch_size, num_pairs, seed=seed * 1_000_003 + step, **symbols)
        step += 1


class RecallAttention(nn.Module):
    """One attention layer: the query key asks, the pairs (key + value embeddings) answer."""

    def __init__(self, n_keys: int = 16, n_values: int = 16, d_model: int = 64):
        super().__init__()
        self.key_emb, self.value_emb = (
            CheckedEmbedding(n_keys, d_model),
            CheckedEmbedding(n_values, d_model),
        )
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, n_values)

    def forward(self, batch: RecallBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """-> ``(logits (B, n_values), weights (B, P))``."""
        x = self.key_emb(batch.keys) + self.value_emb(batch.values)  # (B, P, E): one slot a pair
        q = self.w_q(self.key_emb(batch.query))  # (B, E)
        scores = (self.w_k(x) @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])  # (B, P)
        weights = torch.softmax(scores, dim=-1)
        read = (weights.unsqueeze(1) @ self.w_v(x)).squeeze(1)  # (B, 1, P) @ (B, P, E) -> (B, E)
        return self.out(read), weights


class RecallGRU(nn.Module):
    """A GRU reads the pairs, then the query key; its last state predicts the value."""

    def __init__(self, n_keys: int = 16, n_values: int = 16, d_model: int = 32, rnn_dim: int = 48):
        super().__init__()
        self.key_emb, self.value_emb = (
            CheckedEmbedding(n_keys, d_model),
            CheckedEmbedding(n_values, d_model),
        )
        self.rnn = nn.GRU(d_model, rnn_dim, batch_first=True)
        self.out = nn.Linear(rnn_dim, n_values)

    def forward(self, batch: RecallBatch) -> tuple[torch.Tensor, None]:
        """-> ``(logits (B, n_values), None)``: there are no attention weights."""
        x = self.key_emb(batch.keys) + self.value_emb(batch.values)  # (B, P, E)
        x = torch.cat([x, self.key_emb(batch.query).unsqueeze(1)], dim=1)  # (B, P + 1, E)
        _, h = self.rnn(x)  # h (1, B, R)
        return self.out(h[0]), None


def recall_loss(model: nn.Module, batch: RecallBatch) -> torch.Tensor:
    """Cross-entropy of the predicted value."""
    return nn.functional.cross_entropy(model(batch)[0], batch.answer)


@torch.no_grad()
def recall_accuracy(model: nn.Module, batch: RecallBatch) -> float:
    """Share of the batch whose value the model names."""
    device = next(model.parameters()).device
    return (model(batch.to(device))[0].argmax(-1).cpu() == batch.answer).float().mean().item()


# ---------------------------------------------------------------------------------------
# The end-to-end memory network (Sukhbaatar et al. 2015)
# ---------------------------------------------------------------------------------------
def position_encoding(num_words: int, d_model: int) -> torch.Tensor:
    """The paper's weights ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)`` (j word, k feature), ``(W, E)``,
    so a sentence's embedding depends on its word order ("mary picked" is not "picked mary")."""
    j = torch.arange(1, num_words + 1, dtype=torch.float32).unsqueeze(1) / num_words  # (W, 1)
    k = torch.arange(1, d_model + 1, dtype=torch.float32).unsqueeze(0) / d_model  # (1, E)
    return (1 - j) - k * (1 - 2 * j)


class MemN2N(nn.Module):
    """``hops`` rounds of attention over a story's sentences, the query updated by each read.

    Adjacent weight tying: ``hops + 1`` word embeddings ``embed[0..hops]``; hop ``k`` (from 1)
    addresses the memory with ``embed[k-1]`` and reads it with ``embed[k]``; the question uses
    ``embed[0]``. Each has a temporal table indexed by a sentence's age (0 = the last one).
    ``attention=False`` replaces every hop's weights by a uniform mean over the sentences.
    """

    def __init__(
        self, vocab_size: int, d_model: int = 32, hops: int = 2, max_sentences: int = 10,
        attention: bool = True, pad_id: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_positive("hops", hops)
        check_positive("d_model", d_model)
        self.hops, self.attention = hops, attention
        self.embed = nn.ModuleList(
            CheckedEmbedding(vocab_size, d_model, padding_idx=pad_id) for _ in range(hops + 1)
        )
        self.temporal = nn.ModuleList(nn.Embedding(max_sentences, d_model) for _ in range(hops + 1))
        for table in (*self.embed, *self.temporal):
            nn.init.normal_(table.weight, std=0.1)
        with torch.no_grad():
            for table in self.embed:
                table.weight[pad_id] = 0  # a padding word adds nothing to a sentence
        self.out = nn.Linear(d_model, vocab_size, bias=False)
        self.register_buffer("pe", position_encoding(MAX_WORDS, d_model), persistent=False)

    def sentences(self, k: int, story: torch.Tensor, age: torch.Tensor) -> torch.Tensor:
        """Embed (B, M, W) ids with table ``k``: position-weighted bag of words + age -> (B, M, E)."""
        return (self.embed[k](story) * self.pe).sum(-2) + self.temporal[k](age)

    def forward_with_attention(self, batch: StoryBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """-> ``(logits (B, V), weights (B, hops, M))``."""
        mask = batch.story_mask  # (B, M) True at real sentences
        n = mask.sum(-1, keepdim=True)  # (B, 1)
        age = (n - 1 - torch.arange(mask.shape[1], device=mask.device)).clamp(min=0)  # (B, M)
        u = (self.embed[0](batch.query) * self.pe).sum(-2)  # (B, W, E) -> (B, E)
        all_weights = []
        for k in range(1, self.hops + 1):
            m = self.sentences(k - 1, batch.story, age)  # (B, M, E): addresses
            c = self.sentences(k, batch.story, age)  # (B, M, E): contents
            scores = (m @ u.unsqueeze(-1)).squeeze(-1)  # (B, M)
            weights = masked_softmax(scores if self.attention else torch.zeros_like(scores), mask)
            u = u + (weights.unsqueeze(1) @ c).squeeze(1)  # (B, 1, M) @ (B, M, E) -> (B, E)
            all_weights.append(weights)
        return self.out(u), torch.stack(all_weights, dim=1)

    def forward(self, batch: StoryBatch) -> torch.Tensor:
        return self.forward_with_attention(batch)[0]


def story_loss(model: MemN2N, batch: StoryBatch) -> torch.Tensor:
    """Cross-entropy of the answer word."""
    return nn.functional.cross_entropy(model(batch), batch.answer)


# ---------------------------------------------------------------------------------------
# The application protocol of course_utils.apps: make_splits, build_model, evaluate
# ---------------------------------------------------------------------------------------
def make_splits(n_train: int, n_val: int, n_test: int, seed: int = 0) -> dict[str, StoryData]:
    """Train, validation and test :class:`StoryData`; no story is in two splits.

    >>> {name: len(data) for name, data in make_splits(20, 5, 5).items()}
    {'train': 20, 'val': 5, 'test': 5}
    """
    vocab, sizes = story_vocab(), {"train": n_train, "val": n_val, "test": n_test}
    return {s: StoryData(make_stories(sizes[s], s, seed), vocab) for s in sizes}


def build_model(attention: bool, hops: int = 2, d_model: int = 32) -> MemN2N:
    """A memory network over :func:`story_vocab` with ``hops`` hops, reading by attention or
    (``attention=False``) by a uniform mean over the sentences."""
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    vocab = story_vocab()
    return MemN2N(len(vocab), d_model, hops, attention=attention, pad_id=vocab.pad_id)


@torch.no_grad()
def predict(model: MemN2N, data: StoryData) -> tuple[torch.Tensor, torch.Tensor]:
    """Every story's predicted answer id ``(N,)`` and attention ``(N, hops, M)``."""
    device = next(model.parameters()).device
    logits, weights = model.forward_with_attention(data.batch(list(range(len(data)))).to(device))
    return logits.argmax(-1).cpu(), weights.cpu()


def support_hits(weights: torch.Tensor, data: StoryData) -> dict[str, float]:
    """Over the two-fact stories: the share whose hop-1 peak is the pick-up sentence
    (``"hop1"``), whose hop-2 peak is the holder's last move (``"hop2"``), and the chance of
    hitting one given sentence with a uniformly random peak (``"chance"``, mean 1 / M)."""
    check_tensor("weights", weights, dims=3)
    if weights.shape[1] < 2:
        raise ValueError(f"support_hits needs 2 or more hops, got weights {tuple(weights.shape)}")
    rows = [i for i, s in enumerate(data.stories) if s.kind == "two-fact"]
    peaks = weights[rows].argmax(-1)  # (N2, hops)
    first = torch.tensor([data.stories[i].supporting[0] for i in rows])
    second = torch.tensor([data.stories[i].supporting[1] for i in rows])
    return {
        "hop1": (peaks[:, 0] == first).float().mean().item(),
        "hop2": (peaks[:, 1] == second).float().mean().item(),
        "chance": sum(1 / len(data.stories[i].sentences) for i in rows) / len(rows),
    }


def evaluate(model: MemN2N, data: StoryData) -> dict[str, float]:
    """``{"accuracy", "one-fact", "two-fact"}`` accuracies, plus :func:`support_hits` for a
    model with attention and 2 or more hops.

    >>> sorted(evaluate(build_model(attention=True), make_splits(5, 5, 6)["test"]))
    ['accuracy', 'chance', 'hop1', 'hop2', 'one-fact', 'two-fact']
    """
    if not isinstance(data, StoryData):
        raise TypeError(f"data must be StoryData, got {type(data).__name__}")
    answers, weights = predict(model, data)
    correct = answers == data.answer
    kinds = data.kinds()
    out = {"accuracy": correct.float().mean().item()}
    for kind in ("one-fact", "two-fact"):
        rows = [i for i, k in enumerate(kinds) if k == kind]
        out[kind] = correct[rows].float().mean().item() if rows else float("nan")
    if model.attention and model.hops >= 2 and "two-fact" in kinds:
        out.update(support_hits(weights, data))
    return out
