"""Exercise checkers: run a learner's function against the reference on seeded inputs.

Each check compares shape first, then values, and prints expected against got with a hint,
so a wrong answer teaches something. A failed check raises ``AssertionError`` at the end, so
the notebook cell that ran it fails visibly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from . import attention, seq2seq


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:200]


def _compare(expected, got, atol: float) -> str | None:
    """None when ``got`` matches ``expected``, else a message saying how it differs."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return f"expected a tuple of {len(expected)} values, got {_describe(got)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            problem = _compare(e, g, atol)
            if problem:
                return f"item {i}: {problem}"
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor of shape {tuple(expected.shape)}, got {_describe(got)}"
        if got.shape != expected.shape:
            return f"shape: expected {tuple(expected.shape)}, got {tuple(got.shape)}"
        if torch.isnan(got).any() and not torch.isnan(expected).any():
            return f"got NaN values:\n  got      {got}"
        if not torch.allclose(got.double(), expected.double(), atol=atol, rtol=1e-4):
            err = (got.double() - expected.double()).abs().max().item()
            return (
                f"values differ (max abs error {err:.3g}):\n  expected {expected}\n  got      {got}"
            )
        return None
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def check_function(
    learner_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[tuple],
    name: str,
    hint: str = "",
    atol: float = 1e-5,
) -> None:
    """Call both functions on every case (a tuple of arguments) and compare the results.

    Prints one line per case, expected against got on a mismatch, and the hint; raises
    ``AssertionError`` when any case failed. Returns nothing, so a notebook cell that ends
    with a check shows only what the check printed.
    """
    failures = 0
    for i, args in enumerate(cases, start=1):
        expected = reference_fn(*args)
        try:
            got = learner_fn(*args)
        except NotImplementedError:
            print(f"[{name}] case {i}: not implemented yet.")
            failures += 1
            continue
        except Exception as exc:  # the learner's bug, shown as a message, not a traceback
            print(f"[{name}] case {i}: raised {type(exc).__name__}: {exc}")
            failures += 1
            continue
        problem = _compare(expected, got, atol)
        if problem:
            arg_text = ", ".join(_describe(a) for a in args)
            print(f"[{name}] case {i} FAILED on inputs ({arg_text}):\n  {problem}")
            failures += 1
        else:
            print(f"[{name}] case {i}: ok")
    if failures:
        if hint:
            print(f"Hint: {hint}")
        raise AssertionError(f"{name}: {failures} of {len(cases)} cases failed")
    print(f"{name}: all {len(cases)} cases passed.")


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def check_masked_softmax(fn: Callable) -> None:
    """Check a learner's ``masked_softmax(scores, mask)`` against the course's."""
    g = _seeded(0)
    scores = torch.randn(2, 3, 5, generator=g)
    mask = torch.rand(2, 3, 5, generator=g) > 0.4
    mask[0, 0] = False  # a row with nothing allowed must give zeros, not NaN
    cases = [
        (scores[0], torch.ones(3, 5, dtype=torch.bool)),
        (scores, mask),
        (scores, torch.tensor([True, True, False, True, False])),  # broadcast over rows
    ]
    check_function(
        fn,
        attention.masked_softmax,
        cases,
        name="masked_softmax",
        hint="set disallowed scores to a very negative number before the softmax, then set "
        "their weights to exactly 0 so a row with nothing allowed gives zeros, not NaN.",
    )


def check_scaled_dot_product_attention(fn: Callable) -> None:
    """Check a learner's ``attention(query, key, value, mask)`` -> ``(output, weights)``."""
    g = _seeded(1)
    q, k, v = (torch.randn(2, 4, 8, generator=g) for _ in range(3))
    k6, v6 = torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 3, generator=g)
    mask = torch.rand(2, 4, 6, generator=g) > 0.3
    cases = [(q, k, v, None), (q, k6, v6, None), (q, k6, v6, mask)]
    check_function(
        fn,
        attention.scaled_dot_product_attention,
        cases,
        name="scaled_dot_product_attention",
        hint="scores = Q K^T / sqrt(d_k) with d_k = query.shape[-1]; weights = masked softmax "
        "over the last axis; output = weights @ V. Return (output, weights).",
    )


# --- notebook 01 exercises ---


def check_gru_cell_step(fn: Callable) -> None:
    """Check a learner's ``gru_cell_step(x, h, W_ih, W_hh, b_ih, b_hh)`` against ``nn.GRUCell``.

    The weights use torch's layout: ``W_ih`` (3H, D) and ``W_hh`` (3H, H) stack the reset,
    update and candidate rows in that order; ``b_ih``, ``b_hh`` are (3H,).
    """

    def reference(x, h, W_ih, W_hh, b_ih, b_hh):
        cell = torch.nn.GRUCell(W_ih.shape[1], W_hh.shape[1])
        with torch.no_grad():
            for name, value in zip(
                ("weight_ih", "weight_hh", "bias_ih", "bias_hh"),
                (W_ih, W_hh, b_ih, b_hh),
                strict=True,
            ):
                getattr(cell, name).copy_(value)
            return cell(x, h)

    g = _seeded(10)
    cases = []
    for B, D, H in [(1, 3, 2), (4, 5, 3), (2, 8, 6)]:
        cases.append(
            (
                torch.randn(B, D, generator=g),
                torch.randn(B, H, generator=g),
                torch.randn(3 * H, D, generator=g),
                torch.randn(3 * H, H, generator=g),
                torch.randn(3 * H, generator=g),
                torch.randn(3 * H, generator=g),
            )
        )
    check_function(
        fn,
        reference,
        cases,
        name="gru_cell_step",
        hint="split W_ih @ x + b_ih and W_hh @ h + b_hh into three chunks (reset, update, "
        "candidate) with .chunk(3, dim=-1); the reset gate multiplies only the hidden part of "
        "the candidate, and h_new = (1 - z) * n + z * h.",
    )


def check_exact_match(fn: Callable) -> None:
    """Check a learner's ``exact_match(pred_ids, target_ids, eos_id, pad_id)`` -> bool (B,)."""
    pad, eos = 0, 2
    target = torch.tensor([[5, 6, eos, pad], [5, 6, 7, eos], [5, 6, eos, pad], [5, 6, 7, eos]])
    # Row by row: junk after <eos>; never emits <eos>; one wrong token; stops too early.
    pred_same_width = torch.tensor(
        [[5, 6, eos, 9], [5, 6, 7, 7], [5, 7, eos, pad], [5, 6, eos, pad]]
    )
    # Wider than the target: right; right; one token too many; one token too many.
    pred_wider = torch.tensor(
        [
            [5, 6, eos, pad, pad, pad],
            [5, 6, 7, eos, pad, pad],
            [5, 6, 7, eos, pad, pad],
            [5, 6, 7, 8, eos, pad],
        ]
    )
    cases = [(target, target, eos, pad), (pred_same_width, target, eos, pad)]
    cases.append((pred_wider, target, eos, pad))
    check_function(
        fn,
        seq2seq.exact_match,
        cases,
        name="exact_match",
        hint="cut both sequences at their first <eos> (replace it and everything after it by "
        "<pad>), pad the narrower one on the right to the same width, then compare whole rows "
        "with (pred == target).all(dim=1).",
    )


# --- notebook 02 exercises ---
def _additive_reference(query, key, W_q, W_k, v):
    """The library's ``AdditiveScore`` holding the given matrices (``W (H, D)``, ``v (H,)``)."""
    H, Dq = W_q.shape
    module = attention.AdditiveScore(query_dim=Dq, key_dim=W_k.shape[1], hidden_dim=H)
    with torch.no_grad():
        module.w_q.weight.copy_(W_q)
        module.w_k.weight.copy_(W_k)
        module.v.weight.copy_(v.unsqueeze(0))
        return module(query, key)


def check_additive_score(fn: Callable) -> None:
    """Check a learner's ``additive(query, key, W_q, W_k, v)`` -> scores ``(..., Lq, Lk)``."""
    g = _seeded(2)

    def case(q_shape, k_shape, H):
        Dq, Dk = q_shape[-1], k_shape[-1]
        return (
            torch.randn(*q_shape, generator=g),
            torch.randn(*k_shape, generator=g),
            torch.randn(H, Dq, generator=g),
            torch.randn(H, Dk, generator=g),
            torch.randn(H, generator=g),
        )

    cases = [case((3, 4), (5, 4), 8), case((3, 4), (5, 6), 7), case((2, 3, 4), (2, 6, 5), 8)]
    check_function(
        fn,
        _additive_reference,
        cases,
        name="additive_score",
        hint="project first: query @ W_q.T is (..., Lq, H) and key @ W_k.T is (..., Lk, H); "
        "unsqueeze them to (..., Lq, 1, H) and (..., 1, Lk, H) so their sum is (..., Lq, Lk, H); "
        "then tanh, then @ v.",
    )


def _nadaraya_watson_reference(x_query, x_train, y_train, bandwidth):
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2)  # (Lq, Lk)
    weights = attention.masked_softmax(scores)
    return weights @ y_train, weights  # (Lq,), (Lq, Lk)


def check_nadaraya_watson(fn: Callable) -> None:
    """Check a learner's ``nw(x_query, x_train, y_train, bandwidth)`` -> ``(pred, weights)``."""
    g = _seeded(3)
    x_train = 5 * torch.rand(12, generator=g)
    y_train = torch.sin(x_train) + 0.3 * torch.randn(12, generator=g)
    x_query = torch.linspace(0, 5, 7)
    far = torch.tensor([-50.0, 2.5, 100.0])  # far from every key: exp underflows to 0 there
    cases = [
        (x_query, x_train, y_train, 0.5),
        (x_query, x_train, y_train, 2.0),
        (far, x_train, y_train, 0.1),
    ]
    check_function(
        fn,
        _nadaraya_watson_reference,
        cases,
        name="nadaraya_watson",
        hint="scores = -(x_query[:, None] - x_train[None, :])**2 / (2 * bandwidth**2) has "
        "shape (Lq, Lk); weights = torch.softmax(scores, dim=-1); predictions = weights @ "
        "y_train. Return (predictions, weights).",
    )
