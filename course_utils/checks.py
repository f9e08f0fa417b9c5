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


# --- notebook 04 exercises ---
def _split_heads_reference(x, num_heads):
    B, L, E = x.shape  # (B, L, E) -> (B, L, H, E/H) -> (B, H, L, E/H)
    return x.reshape(B, L, num_heads, E // num_heads).transpose(1, 2)


def check_split_heads(fn: Callable) -> None:
    """Check a learner's ``split_heads(x, num_heads)``: ``(B, L, E) -> (B, H, L, E / H)``."""
    g = _seeded(40)
    cases = [
        (torch.randn(1, 3, 4, generator=g), 2),
        (torch.randn(2, 5, 12, generator=g), 3),
        (torch.randn(3, 4, 8, generator=g), 1),
    ]
    check_function(
        fn,
        _split_heads_reference,
        cases,
        name="split_heads",
        hint="x.view(B, L, H, E // H) puts each head's features in their own axis; then "
        ".transpose(1, 2) moves the head axis in front of the positions. (A plain "
        ".view(B, H, L, E // H) gives the right shape but mixes positions into heads.)",
    )


def _multi_head_reference(x, W_q, W_k, W_v, W_o, num_heads, mask=None):
    """The library's ``MultiHeadAttention`` without biases, holding ``W`` (``x @ W`` layout)."""
    E = x.shape[-1]
    module = attention.MultiHeadAttention(E, num_heads, bias=False)
    with torch.no_grad():
        for proj, W in zip(
            (module.q_proj, module.k_proj, module.v_proj, module.out_proj),
            (W_q, W_k, W_v, W_o),
            strict=True,
        ):
            proj.weight.copy_(W.T)  # nn.Linear computes x @ weight.T
        return module(x, x, x, mask=mask)


def check_multi_head_self_attention(fn: Callable) -> None:
    """Check ``mha(x, W_q, W_k, W_v, W_o, num_heads, mask)`` -> ``(out (B, L, E), weights)``."""
    g = _seeded(41)

    def case(B, L, E, H, masked):
        Ws = [torch.randn(E, E, generator=g) / E**0.5 for _ in range(4)]
        mask = attention.causal_mask(L) if masked else None
        return (torch.randn(B, L, E, generator=g), *Ws, H, mask)

    cases = [case(1, 4, 4, 1, False), case(2, 5, 8, 2, False), case(2, 6, 12, 3, True)]
    check_function(
        fn,
        _multi_head_reference,
        cases,
        name="multi_head_self_attention",
        hint="project with x @ W_q (and W_k, W_v), split each into heads (B, H, L, dk), "
        "scores = q @ k^T / sqrt(dk) with dk = E // H, masked softmax, weights @ v, then "
        "transpose(1, 2).reshape(B, L, E) to merge the heads and multiply by W_o.",
    )


def check_previous_token_score(fn: Callable) -> None:
    """Check a learner's ``previous_token_score(weights (B, H, L, L))`` -> ``(H,)``."""
    from .interpret import head_pattern_scores

    g = _seeded(42)
    eye = torch.eye(6)
    one_back = torch.diag(torch.ones(5), -1)
    one_back[0, 0] = 1.0  # position 0 can only look at itself
    cases = [
        (torch.stack([one_back, eye, torch.full((6, 6), 1 / 6)])[None],),  # (1, 3, 6, 6)
        (torch.softmax(torch.randn(4, 2, 5, 5, generator=g), dim=-1),),
        (torch.softmax(3 * torch.randn(2, 4, 9, 9, generator=g), dim=-1),),
    ]
    check_function(
        fn,
        lambda w: head_pattern_scores(w)["previous"],
        cases,
        name="previous_token_score",
        hint="the weight of query t on key t - 1 is weights[:, :, t, t - 1] with t = "
        "torch.arange(2, L) (advanced indexing pairs the two index tensors); average over "
        "the batch (dim 0) and the positions, keeping the head axis.",
    )


# --- notebook 05 exercises ---
def check_sinusoidal_encoding(fn: Callable) -> None:
    """Check a learner's ``sinusoidal_encoding(max_len, d_model)`` -> ``(max_len, d_model)``."""
    from .positional import sinusoidal_encoding

    check_function(
        fn,
        lambda max_len, d_model: sinusoidal_encoding(max_len, d_model),
        [(4, 2), (10, 8), (50, 16)],
        name="sinusoidal_encoding",
        hint="PE[p, 2i] = sin(p / 10000**(2i / d_model)) and PE[p, 2i+1] = cos(the same "
        "angle): build positions (max_len, 1) and 2i = torch.arange(0, d_model, 2), divide, "
        "then fill the even columns with sin and the odd ones with cos.",
        atol=1e-4,
    )


def check_offset_rotation(fn: Callable) -> None:
    """Check a learner's ``offset_rotation(k, d_model)`` -> ``M_k`` ``(d_model, d_model)``."""
    from .positional import offset_rotation

    check_function(
        fn,
        lambda k, d_model: offset_rotation(k, d_model),
        [(1, 2), (3, 4), (5, 8), (-2, 6)],
        name="offset_rotation",
        hint="block i (rows and columns 2i, 2i+1) is [[cos(k w), sin(k w)], [-sin(k w), "
        "cos(k w)]] with w = 1 / 10000**(2i / d_model): it maps (sin(p w), cos(p w)) to "
        "(sin((p+k) w), cos((p+k) w)). Every other entry is 0.",
        atol=1e-5,
    )


def check_apply_rotary(fn: Callable) -> None:
    """Check a learner's ``apply_rotary(x, positions)`` against the course's."""
    from .positional import apply_rotary

    g = _seeded(50)
    cases = [
        (torch.randn(3, 2, generator=g), torch.arange(3)),
        (torch.randn(5, 8, generator=g), torch.arange(5)),
        (torch.randn(2, 4, 6, generator=g), torch.tensor([7, 3, 0, 12])),
    ]
    check_function(
        fn,
        apply_rotary,
        cases,
        name="apply_rotary",
        hint="theta_i = 10000**(-2i / D) for i = 0 .. D/2 - 1; the angle at position p is "
        "p * theta_i; with x1 = x[..., 0::2], x2 = x[..., 1::2], the result has x1 cos - x2 sin "
        "in the even features and x1 sin + x2 cos in the odd ones.",
        atol=1e-5,
    )


# --- notebook 03 exercises ---


def _attention_read_reference(query, enc_states, src_mask, W_q, W_k, v):
    """``bahdanau.attend`` with an ``AdditiveScore`` holding ``W_q (A, H)``, ``W_k (A, K)``, ``v (A,)``."""
    from . import bahdanau  # imported here: this section is appended to the module

    A, H = W_q.shape
    score = attention.AdditiveScore(query_dim=H, key_dim=W_k.shape[1], hidden_dim=A)
    with torch.no_grad():
        score.w_q.weight.copy_(W_q)
        score.w_k.weight.copy_(W_k)
        score.v.weight.copy_(v.unsqueeze(0))
        return bahdanau.attend(query, enc_states, src_mask, score)


def check_attention_read(fn: Callable) -> None:
    """Check ``attention_read(query, enc_states, src_mask, W_q, W_k, v)`` -> ``(context, weights)``.

    ``query (B, H)``, ``enc_states (B, S, K)``, ``src_mask (B, S)`` boolean (True = real
    token), ``W_q (A, H)``, ``W_k (A, K)``, ``v (A,)``; ``context (B, K)``, ``weights (B, S)``.
    """
    g = _seeded(30)

    def case(B, S, H, K, A, lengths):
        src_mask = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
        return (
            torch.randn(B, H, generator=g),
            torch.randn(B, S, K, generator=g),
            src_mask,
            torch.randn(A, H, generator=g),
            torch.randn(A, K, generator=g),
            torch.randn(A, generator=g),
        )

    cases = [
        case(1, 4, 3, 3, 5, [4]),  # no padding
        case(3, 6, 4, 5, 7, [6, 2, 4]),  # padding, and query and key sizes differ
        case(2, 5, 3, 3, 4, [1, 5]),  # an input of one token gets all the weight
    ]
    check_function(
        fn,
        _attention_read_reference,
        cases,
        name="attention_read",
        hint="scores = tanh(query @ W_q.T, unsqueezed to (B, 1, A), + enc_states @ W_k.T) @ v "
        "has shape (B, S); fill the padded scores with a very negative number, softmax over S, "
        "set the padded weights to exactly 0; context = weights (B, 1, S) @ enc_states.",
    )


def check_alignment_accuracy(fn: Callable) -> None:
    """Check ``alignment_acc(weights (B, T, S), gold (B, T))`` -> a float in [0, 1]."""
    from . import bahdanau  # imported here: this section is appended to the module

    g = _seeded(31)
    hand = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]]])  # (1, 3, 2)
    random_weights = torch.softmax(torch.randn(3, 6, 5, generator=g), dim=-1)
    random_gold = torch.randint(0, 5, (3, 6), generator=g)
    random_gold[:, -2:] = -1  # the last two steps of every row do not count
    mirrored = torch.softmax(3 * torch.randn(2, 5, 4, generator=g), dim=-1)
    mirrored_gold = torch.tensor([[3, 2, 1, 0, -1], [1, 0, -1, -1, -1]])  # lengths 4 and 2
    cases = [
        (hand, torch.tensor([[1, 1, -1]])),
        (random_weights, random_gold),
        (mirrored, mirrored_gold),
    ]

    def as_tensor(f):
        return lambda w, gold: torch.as_tensor(f(w, gold), dtype=torch.float64)

    check_function(
        as_tensor(fn),
        as_tensor(bahdanau.alignment_accuracy),
        cases,
        name="alignment_accuracy",
        hint="weights.argmax(dim=-1) is the most-attended position per step, (B, T); compare it "
        "with gold, keep only the steps where gold >= 0, and divide the hits by the number of "
        "counted steps (not by B * T).",
    )


# --- notebook 06 exercises ---
def _feed_forward_reference(x, W1, b1, W2, b2):
    from .transformer import FeedForward

    module = FeedForward(W1.shape[1], W1.shape[0])
    with torch.no_grad():
        for layer, W, b in ((module.linear1, W1, b1), (module.linear2, W2, b2)):
            layer.weight.copy_(W)
            layer.bias.copy_(b)
        return module(x)


def check_feed_forward(fn: Callable) -> None:
    """Check a learner's ``feed_forward(x, W1, b1, W2, b2)`` against the course's module."""
    g = _seeded(60)
    cases = []
    for shape, F in (((4, 8), 16), ((2, 3, 8), 32), ((2, 5, 6), 4)):
        E = shape[-1]
        cases.append(
            (
                torch.randn(*shape, generator=g),
                torch.randn(F, E, generator=g),
                torch.randn(F, generator=g),
                torch.randn(E, F, generator=g),
                torch.randn(E, generator=g),
            )
        )
    check_function(
        fn,
        _feed_forward_reference,
        cases,
        name="feed_forward",
        hint="nn.Linear computes x @ W.T + b; apply relu to the first layer's output, then the "
        "second layer. The shapes: (..., E) -> (..., F) -> (..., E).",
    )


def check_label_smoothing_loss(fn: Callable) -> None:
    """Check a learner's ``loss(logits, targets, pad_id, smoothing)`` -> a scalar tensor."""
    from .training import label_smoothed_loss

    g = _seeded(61)
    logits = torch.randn(3, 5, 7, generator=g)
    targets = torch.randint(1, 7, (3, 5), generator=g)
    targets[1, 2:] = 0  # padding, which must not count
    cases = [(logits, targets, 0, 0.0), (logits, targets, 0, 0.1), (3 * logits, targets, 0, 0.4)]
    check_function(
        fn,
        label_smoothed_loss,
        cases,
        name="label_smoothing_loss",
        hint="build q = smoothing / V everywhere plus (1 - smoothing) at the target, take "
        "-(q * log_softmax(logits)).sum(-1) per position, then average only over positions "
        "where targets != pad_id.",
    )


def check_noam_rate(fn: Callable) -> None:
    """Check a learner's ``noam(step, d_model, warmup_steps, factor)`` -> a float."""
    from .training import noam_rate

    def as_tensor(f):
        return lambda *args: torch.tensor(float(f(*args)), dtype=torch.float64)

    cases = [(1, 512, 4000, 1.0), (4000, 512, 4000, 1.0), (20000, 512, 4000, 1.0)]
    cases += [(50, 64, 100, 2.0), (300, 64, 100, 2.0)]
    check_function(
        as_tensor(fn),
        as_tensor(noam_rate),
        cases,
        name="noam_rate",
        hint="factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5): the "
        "second term wins while step < warmup_steps (the linear rise).",
        atol=1e-12,
    )


# --- notebook 13 exercises ---
def check_online_softmax(fn: Callable) -> None:
    """Check a learner's one-pass ``online_softmax(scores)`` (1-D) against ``torch.softmax``."""
    g = _seeded(13)
    cases = [
        (torch.tensor([2.0, 4.0, 1.0, 5.0, 3.0]),),  # the notebook's worked example
        (torch.randn(17, generator=g),),
        (torch.tensor([1000.0, 999.0, -1000.0, 998.0]),),  # exp(1000) overflows float32
        (torch.tensor([-3.0]),),
    ]
    check_function(
        fn,
        lambda scores: torch.softmax(scores, dim=-1),
        cases,
        name="online_softmax",
        hint="start with m = -inf and l = 0; for each score s: m_new = max(m, s), "
        "l = l * exp(m - m_new) + exp(s - m_new), m = m_new; at the end return "
        "exp(scores - m) / l.",
    )


def _dilated_window_reference(N: int, window: int, dilation: int) -> torch.Tensor:
    offset = torch.arange(N)[:, None] - torch.arange(N)[None, :]  # (N, N): i - j
    return (offset.abs() < window * dilation) & (offset % dilation == 0)


def check_dilated_window_mask(fn: Callable) -> None:
    """Check a learner's ``dilated_window_mask(N, window, dilation)`` -> bool ``(N, N)``."""
    from . import sparse_attention  # imported here: this section is appended to the module

    cases = [(6, 2, 1), (10, 3, 2), (12, 2, 3), (5, 8, 2)]
    assert torch.equal(_dilated_window_reference(9, 3, 1), sparse_attention.sliding_window_mask(9, 3))
    check_function(
        fn,
        _dilated_window_reference,
        cases,
        name="dilated_window_mask",
        hint="offset = i - j for every pair, shape (N, N), from two aranges; a key is allowed "
        "when abs(offset) < window * dilation and offset % dilation == 0. Return booleans.",
    )


# --- notebook 11 exercises ---
def _attention_like(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Random rows that sum to 1, some of them sharp, like real attention heads."""
    scores = torch.randn(*shape, generator=g) * torch.rand(*shape[:-1], 1, generator=g) * 6
    return torch.softmax(scores, dim=-1)


def _entropy_reference(weights: torch.Tensor) -> torch.Tensor:
    return torch.special.entr(weights).sum(-1)  # -sum p log p, with 0 log 0 = 0


def check_attention_entropy(fn: Callable) -> None:
    """Check a learner's ``attention_entropy(weights (..., L, L))`` -> ``(..., L)`` in nats."""
    g = _seeded(111)
    cases = [
        (torch.full((4, 4), 0.25),),  # uniform over 4 keys: log 4 each
        (torch.eye(3),),  # one-hot rows hold 0 * log 0 terms: must give 0, not NaN
        (_attention_like(g, 12, 6, 6),),
        (_attention_like(g, 2, 3, 5, 5),),
    ]
    check_function(
        fn,
        _entropy_reference,
        cases,
        name="attention_entropy",
        hint="-(w * log w).sum(-1), where a zero weight contributes 0: use torch.special.entr(w) "
        "or torch.where(w > 0, w * w.log(), 0). Sum over the keys (last axis) only.",
    )


def _top_k_reference(queries: torch.Tensor, corpus: torch.Tensor, k: int):
    unit = torch.nn.functional.normalize
    sims = unit(queries, dim=-1) @ unit(corpus, dim=-1).T  # (Q, N) cosine similarities
    return tuple(sims.topk(k, dim=-1))


def check_top_k_search(fn: Callable) -> None:
    """Check a learner's ``top_k_search(queries (Q, E), corpus (N, E), k)`` ->
    ``(similarities (Q, k), indices (Q, k))``, best first, by cosine similarity."""
    g = _seeded(112)
    corpus = torch.randn(20, 16, generator=g)
    near = corpus[[3, 11]] + 0.1 * torch.randn(2, 16, generator=g)  # close to items 3 and 11
    cases = [
        (near, corpus, 1),
        (torch.randn(5, 16, generator=g), corpus, 3),
        (torch.randn(4, 8, generator=g), 7 * torch.randn(30, 8, generator=g), 5),  # not unit
    ]
    check_function(
        fn,
        _top_k_reference,
        cases,
        name="top_k_search",
        hint="cosine similarity is the dot product of unit vectors: F.normalize both, "
        "queries @ corpus.T gives (Q, N), then .topk(k, dim=-1) returns (values, indices), "
        "largest first.",
    )


# --- notebook 07 exercises ---
def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _modified_precision_reference(
    hyp: Sequence[str], ref: Sequence[str], n: int
) -> tuple[int, int]:
    """BLEU's clipped n-gram matches and the number of hypothesis n-grams."""
    from collections import Counter

    hyp_counts, ref_counts = Counter(_ngrams(hyp, n)), Counter(_ngrams(ref, n))
    matches = sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
    return matches, max(len(hyp) - n + 1, 0)


def check_modified_precision(fn: Callable) -> None:
    """Check ``modified_precision(hyp, ref, n)`` -> ``(clipped matches, hypothesis n-grams)``."""
    cases = [
        ("the the the the".split(), "the cat is on the mat".split(), 1),  # clipping: 2, not 4
        ("kaba ena pado mira -n".split(), "kaba ena pado mira -n".split(), 2),
        ("miro kaba miro kaba miro".split(), "kaba miro kaba".split(), 2),
        ("a b".split(), "a b c d".split(), 3),  # no trigram in the hypothesis
        ("x y z x y z".split(), "x y z w x y".split(), 3),
    ]
    check_function(
        fn,
        _modified_precision_reference,
        cases,
        name="modified_precision",
        hint="count the hypothesis n-grams and the reference n-grams (collections.Counter of "
        "tuples); each hypothesis n-gram scores min(its count, its count in the reference); "
        "return (that sum, len(hyp) - n + 1, or 0 when the hypothesis is shorter than n).",
    )


def _brevity_penalty_reference(hyp_len: int, ref_len: int) -> float:
    import math

    if hyp_len >= ref_len:
        return 1.0
    return 0.0 if hyp_len == 0 else math.exp(1 - ref_len / hyp_len)


def check_brevity_penalty(fn: Callable) -> None:
    """Check ``brevity_penalty(hyp_len, ref_len)`` -> BLEU's BP, a float in [0, 1]."""
    cases = [(10, 10), (12, 10), (9, 10), (5, 10), (1, 7), (0, 4)]

    def as_tensor(f):
        return lambda c, r: torch.tensor(float(f(c, r)), dtype=torch.float64)

    check_function(
        as_tensor(fn),
        as_tensor(_brevity_penalty_reference),
        cases,
        name="brevity_penalty",
        hint="BP = 1 when the hypothesis is at least as long as the reference, else "
        "exp(1 - ref_len / hyp_len) (and 0 for an empty hypothesis).",
    )
