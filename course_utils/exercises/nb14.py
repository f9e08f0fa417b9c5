"""Checkers for the exercises of notebook 14 (attention as memory, multi-hop reasoning).

``check_sharp_read`` compares a soft key-value read ``softmax(beta q K^T) V`` with
``apps.memory.memory_read``; ``check_hop`` compares one memory-network hop (address with
``u``, read the contents, ``u + o``, padded sentences left out) with a loop over the
sentences; ``check_rule_answer`` compares a hand-written two-step reader of a story with the
answers the story generator knows, for every question each story can answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from course_utils.apps import memory, stories
from course_utils.exercises import check_function, seeded


def check_sharp_read(fn: Callable) -> None:
    """Check ``sharp_read(query (D,), keys (N, D), values (N, Dv), beta)`` -> ``(read, weights)``."""
    g = seeded(14)
    cases = [(torch.tensor([1.0, 0.0]), torch.eye(2), torch.tensor([[10.0], [20.0]]), math.log(3))]
    for N, D, Dv, beta in [(3, 4, 2, 1.0), (6, 8, 5, 4.0), (9, 16, 3, 0.0)]:
        keys = torch.randn(N, D, generator=g)
        cases.append(
            (
                keys[1] + 0.1 * torch.randn(D, generator=g),
                keys,
                torch.randn(N, Dv, generator=g),
                beta,
            )
        )
    check_function(
        fn,
        memory.memory_read,
        cases,
        name="sharp_read",
        hint=(
            "score every slot by how well its key matches the query, sharpen the scores by beta, "
            "turn them into weights that sum to 1, and average the values with those weights.",
            "scores = beta * (keys @ query) has one number per slot (N,); weights = their "
            "softmax over dim 0; the read is weights @ values. With beta = 0 every slot gets 1/N.",
        ),
    )


def _hop_reference(u: Tensor, addresses: Tensor, contents: Tensor, mask: Tensor) -> tuple:
    B, M, E = addresses.shape
    weights = torch.zeros(B, M)
    out = u.clone()
    for b in range(B):
        real = [i for i in range(M) if mask[b, i]]
        scores = torch.stack([addresses[b, i] @ u[b] for i in real])
        p = torch.softmax(scores, 0)
        for w, i in zip(p, real, strict=True):
            weights[b, i] = w
            out[b] = out[b] + w * contents[b, i]
    return out, weights


def check_hop(fn: Callable) -> None:
    """Check ``hop(u (B, E), addresses (B, M, E), contents (B, M, E), mask (B, M))`` ->
    ``(u + o (B, E), weights (B, M))``, zero weight on the padded sentences."""
    g = seeded(15)
    cases = []
    for B, M, E, n_real in [(1, 3, 2, [3]), (2, 5, 4, [5, 2]), (3, 7, 6, [1, 7, 4])]:
        mask = torch.arange(M).unsqueeze(0) < torch.tensor(n_real).unsqueeze(1)  # (B, M)
        cases.append(
            (torch.randn(B, E, generator=g), torch.randn(B, M, E, generator=g),
             torch.randn(B, M, E, generator=g), mask)
        )  # fmt: skip
    check_function(
        fn,
        _hop_reference,
        cases,
        name="hop",
        hint=(
            "one hop is section 5's three equations: match u against every address, leave out the "
            "padded sentences, read the contents with the weights, and add what was read to u.",
            "scores = (addresses @ u.unsqueeze(-1)).squeeze(-1) is (B, M); put -inf where "
            "mask is False before the softmax (or use course_utils.attention.masked_softmax); "
            "o = (weights.unsqueeze(1) @ contents).squeeze(1); return u + o and the weights.",
        ),
    )


def check_rule_answer(fn: Callable) -> None:
    """Check ``rule_answer(sentences: list[list[str]], question: list[str])`` -> the room."""
    cases = [
        (story.sentences, question)
        for story in stories.make_stories(6, "val", seed=14)
        for question, *_ in stories.all_questions(story.sentences)
    ]

    def reference(sentences: list[list[str]], question: list[str]) -> str:
        return next(a for q, a, *_ in stories.all_questions(sentences) if q == question)

    check_function(
        fn,
        reference,
        cases,
        name="rule_answer",
        hint=(
            "which two sentences does the answer rest on, and in which order would you look for "
            "them? The generator marks them as the supporting facts.",
            "read the story from the end. For 'where is the OBJECT', first find the last "
            "sentence 'PERSON picked up the OBJECT' (hop 1: the holder), then the last "
            "'PERSON went to the ROOM' (hop 2: the room). For 'where is PERSON' only the second "
            "step.",
        ),
    )
