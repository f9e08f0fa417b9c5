"""The exercise-checking harness: run a learner's function against the reference on seeded inputs.

Each check compares shape first, then values, and prints expected against got with a hint,
so a wrong answer teaches something. A failed check raises ``AssertionError`` at the end, so
the notebook cell that ran it fails visibly.

The checkers themselves live in one module per notebook, named after it: ``nb01`` (GRU step,
exact match), ``nb02`` (masked softmax, scaled dot-product attention, additive score,
Nadaraya-Watson), ``nb03`` (attention read, alignment accuracy), ``nb04`` (split heads,
multi-head self-attention, previous-token score), ``nb05`` (sinusoidal encoding, offset
rotation, rotary positions), ``nb06`` (feed-forward block, label smoothing, Noam rate),
``nb07`` (BLEU's modified precision and brevity penalty), ``nb08`` (the pointer-generator's
final distribution, a summary's coverage loss), ``nb09`` (gated read over an image grid,
the doubly stochastic term, peak in a box), ``nb10`` (mel filterbank, pyramidal time
reduction, monotonic share), ``nb11`` (attention entropy, top-k search), ``nb13`` (online
softmax, dilated window mask), ``nb14`` (a sharp key-value read, a memory-network hop, a
two-step reader of stories), ``nb15`` (stacked glimpses, the digit left of another, a peak
in any box), ``nb16`` (integrated gradients, precision at k, the Jensen-Shannon divergence,
gradient times the difference from a baseline), ``nb17`` (min-p filter, windowed causal
mask, one cached attention step) and ``nb18`` (heads removed by hand, the induction rule,
the eigenvalue measure of copying).
``student`` writes the copies of
the notebooks without solutions.

>>> check_function(abs, lambda x: x if x >= 0 else -x, [(-2,), (3,)], name="abs")
[abs] case 1: ok
[abs] case 2: ok
abs: all 2 cases passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from course_utils.attention import AdditiveScore


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:200]


def _compare(expected: object, got: object, atol: float) -> str | None:
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
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        # Floats summed in another order differ in the last bits: compare like tensors.
        close = abs(got - expected) <= atol + 1e-4 * abs(expected)
        return None if close else f"expected {expected!r}, got {got!r}"
    return None if got == expected else f"expected {expected!r}, got {got!r}"


_FAILED_CHECKS: dict[str, int] = {}  # checker name -> failed calls so far (staged hints)


def check_function(
    learner_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[tuple],
    name: str,
    hint: str | Sequence[str] = "",
    atol: float = 1e-5,
) -> None:
    """Call both functions on every case (a tuple of arguments) and compare the results.

    Prints one line per case, expected against got on a mismatch, and the hint; raises
    ``AssertionError`` when any case failed. Returns nothing, so a notebook cell that ends
    with a check shows only what the check printed.

    ``hint`` may be staged, a sequence from the idea to the code: the first failed check of
    ``name`` shows the first hint, each further failed check one more.

    >>> def attempt(learner_fn):
    ...     stages = ["what happens to a negative number?", "return x if x >= 0 else -x"]
    ...     try:
    ...         check_function(learner_fn, abs, [(-2,)], name="my_abs", hint=stages)
    ...     except AssertionError as failed:
    ...         print(failed)
    >>> attempt(lambda x: x)
    [my_abs] case 1 FAILED on inputs (int -2):
      expected 2, got -2
    Hint 1 of 2: what happens to a negative number?
    (A more detailed hint comes with the next failed check.)
    my_abs: 1 of 1 cases failed
    >>> attempt(lambda x: x)
    [my_abs] case 1 FAILED on inputs (int -2):
      expected 2, got -2
    Hint 1 of 2: what happens to a negative number?
    Hint 2 of 2: return x if x >= 0 else -x
    my_abs: 1 of 1 cases failed
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
        _print_hints(name, [hint] if isinstance(hint, str) else list(hint))
        raise AssertionError(f"{name}: {failures} of {len(cases)} cases failed")
    print(f"{name}: all {len(cases)} cases passed.")


def _print_hints(name: str, hints: list[str]) -> None:
    """The hints a learner has earned: one more for every failed check of ``name``."""
    tries = _FAILED_CHECKS[name] = _FAILED_CHECKS.get(name, 0) + 1
    shown = [h for h in hints[:tries] if h]
    if len(hints) == 1 and shown:
        print(f"Hint: {shown[0]}")
        return
    for level, text in enumerate(shown, start=1):
        print(f"Hint {level} of {len(hints)}: {text}")
    if tries < len(hints):
        print("(A more detailed hint comes with the next failed check.)")


def seeded(seed: int) -> torch.Generator:
    """A fresh CPU generator seeded with ``seed``: each checker draws its inputs from one."""
    return torch.Generator().manual_seed(seed)


def additive_score_from(W_q: torch.Tensor, W_k: torch.Tensor, v: torch.Tensor) -> AdditiveScore:
    """The library's :class:`~course_utils.attention.AdditiveScore` holding a learner's
    matrices ``W_q (A, R)``, ``W_k (A, C)`` and ``v (A,)``: the checkers' reference score."""
    A, R = W_q.shape
    score = AdditiveScore(query_dim=R, key_dim=W_k.shape[1], hidden_dim=A)
    with torch.no_grad():
        score.w_q.weight.copy_(W_q)
        score.w_k.weight.copy_(W_k)
        score.v.weight.copy_(v.unsqueeze(0))
    return score
