"""Greedy search and beam search for every sequence model, over one small protocol.

A model is *decodable* when it has ``bos_id``, ``eos_id`` and ``pad_id`` (from its
:class:`~course_utils.data.Vocab`) and two methods:

* ``start(batch) -> state``: read the input once (encode the source). ``batch`` is a
  :class:`~course_utils.data.Batch` or anything holding the fields that model reads.
* ``step(tokens (B,), state) -> (log_probs (B, V), state, weights)``: feed the previous
  output token, get the next token's log-probabilities, the new state and where this step
  attended (``(B, S)``, or ``None`` for a model without attention).

``state`` is a tuple of tensors whose first dimension is the batch, so beam search can copy
and reorder it; what the tensors mean is the model's business (a GRU's hidden state, the
encoder's states and mask, a Transformer's memory and the prefix decoded so far).

This module searches: it reads a source once and looks for the most likely output (greedy or
beam), for the encoder-decoder models of notebooks 01-10. Drawing text at random from a
decoder-only language model, with temperature, top-k and top-p and a KV cache, is
:mod:`course_utils.sampling`'s job (notebook 17).

:func:`greedy_decode` and :func:`beam_search` both return a :class:`Decoded`: the ids,
the attention weights of every step when the model has them, and the log-probability of
each output. Ids start after ``<bos>``, include each example's ``<eos>`` and hold ``<pad>``
after it. Shapes follow the legend in :mod:`course_utils`: ``B`` batch, ``T`` decoded
steps, ``S`` source length, ``V`` vocabulary, ``K`` beam size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from course_utils._validate import check_positive

State = tuple[torch.Tensor, ...]


class Decodable(Protocol):
    """What :func:`greedy_decode` and :func:`beam_search` need from a model."""

    bos_id: int
    eos_id: int
    pad_id: int
    training: bool

    def start(self, batch: object) -> State: ...

    def step(
        self, tokens: torch.Tensor, state: State
    ) -> tuple[torch.Tensor, State, torch.Tensor | None]: ...

    def train(self, mode: bool = True) -> object: ...


@dataclass
class Decoded:
    """What a decoder produced: ``ids (B, T)``, ``weights (B, T, S)`` or ``None``, and
    ``scores (B,)``, the log-probability the model gives each output (its ``<eos>`` included)."""

    ids: torch.Tensor
    weights: torch.Tensor | None
    scores: torch.Tensor


def _check_model(model: object) -> None:
    missing = [a for a in ("start", "step", "bos_id", "eos_id", "pad_id") if not hasattr(model, a)]
    if missing:
        raise TypeError(
            f"model must follow the decoding protocol (start, step, bos_id, eos_id, pad_id); "
            f"{type(model).__name__} lacks {', '.join(missing)}"
        )


def _check_step(log_probs: torch.Tensor, rows: int) -> None:
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 2:
        raise ValueError(
            f"step must return log_probs (B, V), got {tuple(getattr(log_probs, 'shape', ()))}"
        )
    if log_probs.shape[0] != rows:
        raise ValueError(f"step returned {log_probs.shape[0]} rows of log_probs, expected {rows}")


def _batch_size(state: State) -> int:
    if not isinstance(state, tuple) or not state:
        raise TypeError(f"start must return a non-empty tuple of tensors, got {type(state)}")
    return state[0].shape[0]


def _select(state: State, rows: torch.Tensor) -> State:
    """Every tensor of ``state`` at the given batch rows (copy or reorder beams)."""
    return tuple(x.index_select(0, rows) for x in state)


@torch.no_grad()
def greedy_decode(model: Decodable, batch: object, max_steps: int) -> Decoded:
    """Feed back the most likely token at each step, for at most ``max_steps`` steps.

    Decoding stops early once every example has emitted ``<eos>``; finished examples emit
    ``<pad>``, and their weights rows are zero. The model runs in eval mode and is put back
    in the mode it was in.
    """
    _check_model(model)
    check_positive("max_steps", max_steps)
    was_training = model.training
    model.train(False)
    state = model.start(batch)
    B = _batch_size(state)
    device = state[0].device
    token = torch.full((B,), model.bos_id, dtype=torch.long, device=device)  # (B,)
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    scores = torch.zeros(B, device=device)
    out, weights = [], []
    for _ in range(max_steps):
        log_probs, state, step_weights = model.step(token, state)  # (B, V), state, (B, S)
        _check_step(log_probs, B)
        token = log_probs.argmax(dim=-1)  # (B,)
        scores = scores + log_probs.gather(1, token[:, None])[:, 0].masked_fill(done, 0.0)
        out.append(token.masked_fill(done, model.pad_id))  # finished examples emit <pad>
        if step_weights is not None:
            weights.append(step_weights.masked_fill(done[:, None], 0.0))  # (B, S)
        done = done | (token == model.eos_id)
        if bool(done.all()):
            break
    model.train(was_training)
    return Decoded(
        torch.stack(out, dim=1),  # T x (B,) -> (B, T)
        torch.stack(weights, dim=1) if weights else None,  # (B, T, S)
        scores,
    )


@torch.no_grad()
def beam_search(
    model: Decodable,
    batch: object,
    max_steps: int,
    beam_size: int = 4,
    length_penalty: float = 0.0,
) -> Decoded:
    """Keep the ``beam_size`` most probable prefixes at each step.

    A prefix's score is the sum of its tokens' log-probabilities; a finished one (it emitted
    ``<eos>``) keeps its score and competes with the live ones. At the end each example
    returns the hypothesis with the best ``score / ((5 + n) / 6) ** length_penalty`` (Wu et
    al., 2016; ``n`` tokens counting ``<eos>``), so ``length_penalty=0`` compares raw scores
    and larger values favour longer outputs. ``beam_size=1`` is greedy decoding.
    ``Decoded.scores`` holds the chosen hypotheses' log-probabilities, without the penalty.
    """
    _check_model(model)
    check_positive("max_steps", max_steps)
    check_positive("beam_size", beam_size)
    was_training = model.training
    model.train(False)
    state = model.start(batch)
    B, K = _batch_size(state), beam_size
    dev = state[0].device
    # Every example gets K rows: (B, ...) -> (B*K, ...)
    state = _select(state, torch.arange(B, device=dev).repeat_interleave(K))
    token = torch.full((B * K,), model.bos_id, dtype=torch.long, device=dev)  # (B*K,)
    seqs = torch.empty(B * K, 0, dtype=torch.long, device=dev)  # (B*K, t)
    weights: torch.Tensor | None = None  # (B*K, t, S)
    scores = torch.zeros(B, K, device=dev)
    scores[:, 1:] = float("-inf")  # at the start only one beam is live: no duplicates
    done = torch.zeros(B * K, dtype=torch.bool, device=dev)
    lengths = torch.zeros(B * K, device=dev)  # tokens so far, <eos> included
    for _ in range(max_steps):
        logp, state, step_weights = model.step(token, state)  # (B*K, V)
        _check_step(logp, B * K)
        logp = logp.float()
        V = logp.shape[-1]
        # A finished hypothesis can only be extended by <pad>, at no cost.
        finished = torch.full_like(logp, float("-inf"))
        finished[:, model.pad_id] = 0.0
        logp = torch.where(done[:, None], finished, logp)
        candidates = scores.reshape(B * K, 1) + logp  # (B*K, V)
        best, index = candidates.reshape(B, K * V).topk(K, dim=-1)  # (B, K)
        parent = (index // V + torch.arange(B, device=dev)[:, None] * K).reshape(B * K)
        token = (index % V).reshape(B * K)  # (B*K,)
        state = _select(state, parent)
        seqs = torch.cat([seqs[parent], token[:, None]], dim=1)  # (B*K, t + 1)
        if step_weights is not None:
            step_weights = step_weights.masked_fill(done[:, None], 0.0)[parent, None]
            weights = (
                step_weights if weights is None else torch.cat([weights[parent], step_weights], 1)
            )
        lengths = lengths[parent] + (~done[parent]).float()
        done = done[parent] | (token == model.eos_id)
        scores = best  # (B, K), best first
        if bool(done.all()):
            break
        # Without a length penalty, scores only fall as prefixes grow: once an example's
        # best hypothesis has finished, no live one can overtake it.
        if length_penalty == 0.0 and bool(done.reshape(B, K)[:, 0].all()):
            break
    penalty = ((5.0 + lengths) / 6.0) ** length_penalty  # (B*K,)
    ranked = (scores.reshape(B * K) / penalty).reshape(B, K)
    pick = ranked.argmax(dim=-1) + torch.arange(B, device=dev) * K  # (B,)
    model.train(was_training)
    T = int(lengths[pick].max())  # columns after every chosen <eos> are <pad>
    return Decoded(
        seqs[pick, :T],
        None if weights is None else weights[pick, :T],
        scores.reshape(B * K)[pick],
    )
