"""Checkers for the exercises of notebook 15 (visual question answering).

``check_stacked_read`` compares two stacked glimpses written with plain tensors with
``apps.vqa.stacked_glimpses`` around ``attention.AdditiveScore`` modules holding the given
matrices; ``check_left_of`` compares the answer to "what digit is left of the X ?" read from
digits and boxes with ``apps.questions.every_question``; ``check_peak_in_any_box`` compares
one grounding hit (a peak in any supporting box) with ``alignment.region_hits``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from course_utils import alignment
from course_utils.apps import questions, vqa
from course_utils.apps.scenes import make_scenes
from course_utils.exercises import additive_score_from, check_function, seeded


def _stacked_reference(query: Tensor, regions: Tensor, params: list) -> tuple[Tensor, Tensor]:
    scores = nn.ModuleList(additive_score_from(*p) for p in params)
    with torch.no_grad():
        return vqa.stacked_glimpses(query, regions, scores)


def check_stacked_read(fn: Callable) -> None:
    """Check ``stacked_read(query (B, E), regions (B, P, E), params)`` -> ``(u (B, E),
    weights (B, K, P))``, where ``params`` holds one ``(W_q (A, E), W_k (A, E), v (A,))`` per
    glimpse."""
    g = seeded(150)

    def case(B: int, P: int, E: int, A: int, K: int) -> tuple:
        params = [
            (torch.randn(A, E, generator=g), torch.randn(A, E, generator=g), torch.randn(A, generator=g))
            for _ in range(K)
        ]  # fmt: skip
        return torch.randn(B, E, generator=g), torch.randn(B, P, E, generator=g), params

    check_function(
        fn,
        _stacked_reference,
        [case(1, 4, 3, 5, 1), case(2, 9, 4, 6, 2), case(3, 36, 8, 4, 3)],
        name="stacked_read",
        hint=(
            "each glimpse is section 4's additive attention with the current query over the "
            "regions; after each glimpse the query grows by what it read (u_k = u_(k-1) + c_k).",
            "u = query; for each (W_q, W_k, v): scores (B, P) = tanh(u @ W_q.T [:, None, :] + "
            "regions @ W_k.T) @ v, weights = softmax over the regions, context = weights @ regions "
            "(B, E), u = u + context; return (u, the weights stacked on dim 1).",
        ),
    )


def check_left_of(fn: Callable) -> None:
    """Check ``left_of(digits, boxes, named)`` -> the digit just left of the one named, or
    ``None`` when the question has no single answer (the digit is absent, appears twice, or
    nothing lies left of it). ``digits`` and ``boxes`` are in any order."""
    g = seeded(151)
    cases, expected = [], {}
    for scene in make_scenes(8, split="val", seed=15):
        order = torch.randperm(len(scene.digits), generator=g).tolist()  # shuffled: use the boxes
        for named in (
            sorted(set(scene.digits)) + [d for d in range(10) if d not in scene.digits][:1]
        ):
            args = ([scene.digits[k] for k in order], [scene.boxes[k] for k in order], named)
            cases.append(args)
            asked = [
                q
                for q in questions.every_question(scene)
                if (q.template, q.digit) == ("left", named)
            ]
            expected[repr(args)] = questions.ANSWERS.index(asked[0].answer) if asked else None  # fmt: skip

    check_function(
        fn,
        lambda digits, boxes, named: expected[repr((digits, boxes, named))],
        cases,
        name="left_of",
        hint=(
            "'left of' compares horizontal positions: find where the named digit sits, then the "
            "nearest digit on its left.",
            "the named digit must appear exactly once; its box's centre column is "
            "(left + right) / 2; among the other boxes whose centre is further left, take the one "
            "with the largest centre column; None if there is none.",
        ),
    )


def check_peak_in_any_box(fn: Callable) -> None:
    """Check ``peak_in_any_box(weights (G, G), boxes, image_size (H, W))`` -> ``bool``: the
    centre of the most-attended cell lies in at least one of the boxes."""
    data = questions.make_questions(12, "val", seed=15)
    g = seeded(152)
    cases = []
    for q, s in zip(data.questions, data.scene_of, strict=True):
        if q.support:
            boxes = [data.scenes[s].boxes[k] for k in q.support]
            cases.append((torch.rand(6, 6, generator=g) ** 4, boxes, (48, 48)))
    # by hand: the peak (cell (4, 1), centre (36, 12)) lies in the second of two boxes only
    peak = torch.zeros(6, 6)
    peak[4, 1] = 1.0
    cases.append((peak, [(0, 0, 16, 16), (30, 6, 42, 18)], (48, 48)))

    def reference(weights: Tensor, boxes: list, image_size: tuple) -> bool:
        hits = alignment.region_hits(weights[None].expand(len(boxes), -1, -1), boxes, image_size)
        return bool(hits.any())

    check_function(
        lambda w, b, s: bool(fn(w, b, s)),
        reference,
        cases,
        name="peak_in_any_box",
        hint=(
            "find the grid cell with the largest weight, turn it into the pixel position of that "
            "cell's centre, and test that point against every box.",
            "row, col = divmod(argmax of the flattened grid, G); the cell's centre is at "
            "((row + 0.5) * H / G, (col + 0.5) * W / G); True if top <= y < bottom and "
            "left <= x < right for any box.",
        ),
    )
