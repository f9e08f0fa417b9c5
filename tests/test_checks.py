"""Exercise checkers pass the reference, fail wrong answers, and say what went wrong."""

import math
import statistics

import numpy as np
import pytest
import torch

from course_utils import attention, exercises, metrics
from course_utils.exercises import nb01, nb02, nb08, nb09, nb10, nb11, nb12, nb14, nb15, nb16, nb18


def test_reference_solutions_pass(capsys):
    nb02.check_masked_softmax(attention.masked_softmax)
    nb02.check_scaled_dot_product_attention(attention.scaled_dot_product_attention)
    assert "all 3 cases passed" in capsys.readouterr().out


def test_naive_masked_softmax_fails_with_a_hint(capsys):
    def nan_on_empty_rows(scores, mask):  # the classic bug: -inf fill gives NaN rows
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)

    with pytest.raises(AssertionError, match="masked_softmax"):
        nb02.check_masked_softmax(nan_on_empty_rows)
    out = capsys.readouterr().out
    assert "NaN" in out and "Hint:" in out


def test_staged_hints_come_one_per_failed_check(capsys, monkeypatch):
    monkeypatch.setattr(exercises, "_FAILED_CHECKS", {})  # a learner who has not failed yet
    wrong = lambda logits, min_p: logits  # noqa: E731  (keeps every token)
    from course_utils.exercises import nb17

    outs = []
    for _ in range(3):
        with pytest.raises(AssertionError, match="min_p_filter"):
            nb17.check_min_p_filter(wrong)
        outs.append(capsys.readouterr().out)
    assert "Hint 1 of 2: work with probabilities" in outs[0] and "Hint 2 of 2" not in outs[0]
    assert "more detailed hint comes" in outs[0]
    assert "Hint 2 of 2: probs = torch.softmax" in outs[1] and "more detailed" not in outs[1]
    assert outs[2].count("Hint") == 2  # nothing more to give
    nb17.check_min_p_filter(lambda logits, min_p: logits.masked_fill(
        torch.softmax(logits, -1) < min_p * torch.softmax(logits, -1).max(-1, keepdim=True).values,
        float("-inf")))  # fmt: skip
    assert "all" in capsys.readouterr().out


def test_unscaled_attention_fails_on_values(capsys):
    def unscaled(q, k, v, mask=None):
        w = attention.masked_softmax(q @ k.transpose(-2, -1), mask)
        return w @ v, w

    with pytest.raises(AssertionError):
        nb02.check_scaled_dot_product_attention(unscaled)
    assert "values differ" in capsys.readouterr().out


def test_shape_is_checked_before_values(capsys):
    def transposed(q, k, v, mask=None):
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        return out, w.transpose(-2, -1)

    with pytest.raises(AssertionError):
        nb02.check_scaled_dot_product_attention(transposed)
    assert "shape: expected (2, 4, 6), got (2, 6, 4)" in capsys.readouterr().out


def test_unfinished_and_crashing_exercises_are_reported(capsys):
    def unfinished(scores, mask):
        raise NotImplementedError

    with pytest.raises(AssertionError):
        nb02.check_masked_softmax(unfinished)
    assert "not implemented yet" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        exercises.check_function(lambda x: x.foo, lambda x: x, [(torch.ones(1),)], name="demo")
    assert "raised AttributeError" in capsys.readouterr().out


def _gru_step(x, h, W_ih, W_hh, b_ih, b_hh):
    r_i, z_i, n_i = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    n = torch.tanh(n_i + r * n_h)
    return (1 - z) * n + z * h


def _additive(query, key, W_q, W_k, v):
    return torch.tanh((query @ W_q.T).unsqueeze(-2) + (key @ W_k.T).unsqueeze(-3)) @ v


def _nadaraya_watson(x_query, x_train, y_train, bandwidth):
    weights = torch.softmax(-((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2), -1)
    return weights @ y_train, weights


# notebook 14's exercises
def _read(query, keys, values, beta):
    weights = torch.softmax(beta * keys @ query, 0)
    return weights @ values, weights


def _hop(u, addresses, contents, mask):
    scores = torch.einsum("bme,be->bm", addresses, u).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    return u + torch.einsum("bm,bme->be", weights, contents), weights


def _rule(sentences, question):
    target = question[-1]
    if question[2] == "the":  # an object: who picked it up last, then where they went last
        target = next(s[0] for s in reversed(sentences) if s[1] == "picked" and s[4] == target)
    return next(s[4] for s in reversed(sentences) if s[0] == target and s[1] == "went")


def _integrated_gradients(f, x, baseline, steps):
    total = torch.zeros_like(x)
    for k in range(steps):
        point = (baseline + (k + 0.5) / steps * (x - baseline)).requires_grad_(True)
        total += torch.autograd.grad(f(point).sum(), point)[0]
    return (x - baseline) * total / steps


def _left_riemann_ig(f, x, baseline, steps):  # a_k = k / steps: another rule, other numbers
    total = torch.zeros_like(x)
    for k in range(steps):
        point = (baseline + k / steps * (x - baseline)).requires_grad_(True)
        total += torch.autograd.grad(f(point).sum(), point)[0]
    return (x - baseline) * total / steps


def _precision_at_k(scores, rationale, k):
    out = []
    for row, truth in zip(scores.tolist(), rationale.tolist(), strict=True):
        top = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        out.append(sum(truth[i] for i in top) / k)
    return torch.tensor(out)


def _js(p, q):
    m = (p + q) / 2
    kl = lambda a: torch.where(a > 0, a * (a / m).log(), 0.0).sum(-1)  # noqa: E731
    return (kl(p) + kl(q)) / 2


def _induction_rule(ids):
    out = torch.full(ids.shape, -1, dtype=torch.long)
    for b, row in enumerate(ids.tolist()):
        for i, token in enumerate(row):
            earlier = [j for j in range(i) if row[j] == token]
            if earlier:
                out[b, i] = row[earlier[-1] + 1]
    return out


def _first_occurrence(ids):  # copies after the first occurrence, not the most recent one
    out = torch.full(ids.shape, -1, dtype=torch.long)
    for b, row in enumerate(ids.tolist()):
        for i, token in enumerate(row):
            earlier = [j for j in range(i) if row[j] == token]
            if earlier:
                out[b, i] = row[earlier[0] + 1]
    return out


def _eigen(ov):
    eigenvalues = np.linalg.eigvals(ov.double().numpy())
    return float(eigenvalues.sum().real / np.abs(eigenvalues).sum())


def _eigen_real_parts(ov):  # |Re(lambda)| in the denominator instead of |lambda|
    eigenvalues = np.linalg.eigvals(ov.double().numpy())
    return float(eigenvalues.real.sum() / np.abs(eigenvalues.real).sum())


def _times_difference(f, x, baseline, use_baseline=True):
    z = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(z).sum(), z)
    return ((x - baseline) if use_baseline else x) * grad


def _without_heads(mha, x, heads, remove=True):
    B, L, E = x.shape
    H = mha.num_heads
    q, k, v = (
        p(x).view(B, L, H, E // H).transpose(1, 2) for p in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, H, L, D)
    if remove:
        out[:, list(heads)] = 0
    return mha.out_proj(out.transpose(1, 2).reshape(B, L, E))


def _caption_loss(logits, tgt_out, weights, pad_id, lam, mask_penalty=True):
    real = tgt_out != pad_id
    log_p = logits.log_softmax(-1).gather(-1, tgt_out.clamp(min=0)[..., None])[..., 0]
    words = -(log_p * real).sum() / real.sum()
    steps = real if mask_penalty else torch.ones_like(real)
    received = (weights * steps[..., None]).sum(1)  # (B, P)
    return words + lam * ((1 - received) ** 2).sum(-1).mean()


def _stack_frames(x, lengths, k, zero_padding=True):
    B, F, D = x.shape
    n = -(-F // k)
    out = torch.zeros(B, n, k * D)
    for b in range(B):
        for f in range(min(F, int(lengths[b])) if zero_padding else F):
            out[b, f // k, (f % k) * D : (f % k + 1) * D] = x[b, f]
    return out, -(-lengths // k)


# -- notebooks 08, 09, 10, 11 and 15: each checker against a right answer and a classic mistake
def _mix(p_vocab, attention, src_ext, p_gen, add=True):
    B, S = attention.shape
    gate = p_gen.reshape(B, 1)
    out = torch.cat([gate * p_vocab, p_vocab.new_zeros(B, S)], dim=1)  # (B, V + S)
    copied = (1 - gate) * attention
    # the mistake: scatter overwrites, so a repeated word keeps only its last copy
    return out.scatter_add(1, src_ext, copied) if add else out.scatter(1, src_ext, copied)


def _coverage(weights, include_current=False):
    coverage = torch.cumsum(weights, 0) - (0 if include_current else weights)
    return float(torch.minimum(weights, coverage).sum())


def _gated_read(hidden, features, W_q, W_k, v, w_beta, b_beta, gate=True):
    scores = torch.tanh((hidden @ W_q.T)[:, None, :] + features @ W_k.T) @ v  # (B, P)
    weights = torch.softmax(scores, dim=-1)
    context = (weights[:, :, None] * features).sum(1)  # (B, C)
    beta = torch.sigmoid(hidden @ w_beta + b_beta)  # (B,)
    return (beta[:, None] * context if gate else context), weights, beta


def _peak_point(weights, image_size, corner=False):
    G_rows, G_cols = weights.shape
    row, col = divmod(int(weights.argmax()), G_cols)
    shift = 0.0 if corner else 0.5  # the mistake: the cell's top-left corner, not its centre
    return (row + shift) * image_size[0] / G_rows, (col + shift) * image_size[1] / G_cols


def _inside(point, box):
    top, left, bottom, right = box
    return top <= point[0] < bottom and left <= point[1] < right


def _peak_in_box(weights, box, image_size, corner=False):
    return _inside(_peak_point(weights, image_size, corner), box)


def _mel_filterbank(n_mels, n_fft, rate, scale="mel"):
    to_mel = (lambda f: 2595 * np.log10(1 + f / 700)) if scale == "mel" else (lambda f: f)
    to_hz = (lambda m: 700 * (10 ** (m / 2595) - 1)) if scale == "mel" else (lambda m: m)
    edges = to_hz(np.linspace(to_mel(0.0), to_mel(rate / 2), n_mels + 2))
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    bank = np.zeros((n_mels, len(freqs)))
    for m in range(n_mels):
        rise = (freqs - edges[m]) / (edges[m + 1] - edges[m])
        fall = (edges[m + 2] - freqs) / (edges[m + 2] - edges[m + 1])
        bank[m] = np.maximum(0, np.minimum(rise, fall))
    return torch.tensor(bank, dtype=torch.float32)


def _monotonic_share(weights, steps, every_step=False):
    forward = counted = 0
    for b in range(weights.shape[0]):
        peaks = weights[b].argmax(-1).tolist()
        last = weights.shape[1] if every_step else int(steps[b])  # the mistake: padding counted
        for t in range(1, last):
            forward += peaks[t] >= peaks[t - 1]
            counted += 1
    return forward / counted


def _entropy(weights, guard=True):
    logs = (
        torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
        if guard
        else weights.log()
    )
    return -(weights * logs).sum(-1)  # unguarded: 0 log 0 is NaN


def _top_k(queries, corpus, k, normalise=True):
    if normalise:
        queries = queries / queries.norm(dim=-1, keepdim=True)
        corpus = corpus / corpus.norm(dim=-1, keepdim=True)
    return tuple((queries @ corpus.T).topk(k, dim=-1))


def _stacked(query, regions, params, accumulate=True):
    u, all_weights = query, []
    for W_q, W_k, v in params:
        scores = torch.tanh((u @ W_q.T)[:, None, :] + regions @ W_k.T) @ v  # (B, P)
        weights = torch.softmax(scores, dim=-1)
        context = (weights[:, :, None] * regions).sum(1)  # (B, E)
        u = u + context if accumulate else context  # the mistake: the query forgets itself
        all_weights.append(weights)
    return u, torch.stack(all_weights, dim=1)


def _left_of(digits, boxes, named, nearest=True):
    if digits.count(named) != 1:
        return None
    centre = [(left + right) / 2 for _, left, _, right in boxes]
    mine = centre[digits.index(named)]
    left_of_it = [(c, d) for c, d in zip(centre, digits, strict=True) if c < mine]
    if not left_of_it:
        return None
    # the mistake: the leftmost digit of the scene rather than the nearest on the left
    return (max if nearest else min)(left_of_it)[1]


def _peak_in_any_box(weights, boxes, image_size, first_only=False):
    point = _peak_point(weights, image_size)
    return any(_inside(point, box) for box in (boxes[:1] if first_only else boxes))


# Each exercise checker: an independent correct answer passes, a classic mistake fails.
def _welch(a, b, population=False):
    var = statistics.pvariance if population else statistics.variance
    return statistics.fmean(a) - statistics.fmean(b), math.sqrt(var(a) / len(a) + var(b) / len(b))


def _gru_parameters(V, E, R):
    gru = 3 * (E * R + R * R) + 6 * R  # three gates: input and state weights, two biases each
    return 2 * (V * E + gru) + R * V + V


EXERCISES = [
    (nb16.check_integrated_gradients, _integrated_gradients, _left_riemann_ig),
    (
        nb16.check_precision_at_k,
        _precision_at_k,
        lambda s, r, k: r.gather(1, s.argsort(-1)[:, :k]).float().mean(1),  # lowest scores
    ),
    (nb16.check_js_divergence, _js, lambda p, q: (p * (p / q).log()).nansum(-1)),  # KL(p || q)
    (nb18.check_induction_rule, _induction_rule, _first_occurrence),
    (nb18.check_eigen_copying, _eigen, _eigen_real_parts),
    (
        nb16.check_gradient_times_difference,
        _times_difference,
        lambda f, x, b: _times_difference(f, x, b, use_baseline=False),  # gradient x input
    ),
    (
        nb18.check_mha_without_heads,
        _without_heads,
        lambda mha, x, heads: _without_heads(mha, x, heads, remove=False),  # removes nothing
    ),
    (
        nb01.check_gru_cell_step,
        _gru_step,
        lambda x, h, W_ih, W_hh, b_ih, b_hh: _gru_step(x, h, W_ih, W_hh, b_ih, b_hh).flip(-1),
    ),
    (
        nb01.check_exact_match,
        metrics.exact_match,
        lambda p, t, eos, pad: (p[:, : t.shape[1]] == t[:, : p.shape[1]]).all(1),  # ignores <eos>
    ),
    (
        nb02.check_additive_score,
        _additive,
        lambda q, k, W_q, W_k, v: (q @ W_q.T) @ (k @ W_k.T).transpose(-2, -1),
    ),
    (
        nb02.check_nadaraya_watson,
        _nadaraya_watson,
        lambda xq, xt, yt, h: _nadaraya_watson(xq, xt, yt, 1.0),  # ignores the bandwidth
    ),
    (
        nb09.check_caption_loss,
        _caption_loss,
        lambda *args: _caption_loss(*args, mask_penalty=False),  # penalty over padded steps too
    ),
    (
        nb10.check_stack_frames,
        _stack_frames,
        lambda x, lengths, k: _stack_frames(x, lengths, k, zero_padding=False),  # padding kept
    ),
    (nb08.check_mix, _mix, lambda *a: _mix(*a, add=False)),
    (nb08.check_coverage_loss, _coverage, lambda w: _coverage(w, include_current=True)),
    (nb09.check_gated_grid_read, _gated_read, lambda *a: _gated_read(*a, gate=False)),
    (nb09.check_peak_in_box, _peak_in_box, lambda w, b, s: _peak_in_box(w, b, s, corner=True)),
    (nb10.check_mel_filterbank, _mel_filterbank, lambda m, n, r: _mel_filterbank(m, n, r, "hz")),
    (nb10.check_monotonic_share, _monotonic_share, lambda w, s: _monotonic_share(w, s, True)),
    (nb11.check_attention_entropy, _entropy, lambda w: _entropy(w, guard=False)),
    (nb11.check_top_k_search, _top_k, lambda q, c, k: _top_k(q, c, k, normalise=False)),
    (nb15.check_stacked_read, _stacked, lambda q, r, p: _stacked(q, r, p, accumulate=False)),
    (nb15.check_left_of, _left_of, lambda d, b, n: _left_of(d, b, n, nearest=False)),
    (
        nb15.check_peak_in_any_box,
        _peak_in_any_box,
        lambda w, b, s: _peak_in_any_box(w, b, s, first_only=True),
    ),
    (nb12.check_welch, _welch, lambda a, b: _welch(a, b, population=True)),  # divides by n
    (
        nb12.check_gru_parameters,
        _gru_parameters,
        lambda V, E, R: _gru_parameters(V, E, R) - 3 * R,  # one bias vector per gate, not two
    ),
    (nb14.check_sharp_read, _read, lambda q, k, v, beta: _read(q, k, v, 1.0)),  # ignores beta
    (
        nb14.check_hop,
        _hop,
        lambda u, a, c, mask: _hop(u, a, c, torch.ones_like(mask)),  # reads the padding too
    ),
    (
        nb14.check_rule_answer,
        _rule,
        lambda sentences, q: next(s[4] for s in reversed(sentences) if s[1] == "went"),  # 1 hop
    ),
]


@pytest.mark.parametrize(
    "checker, right, wrong", EXERCISES, ids=lambda f: getattr(f, "__name__", "")
)
def test_exercise_checkers_tell_right_from_wrong(checker, right, wrong, capsys):
    checker(right)
    with pytest.raises(AssertionError):
        checker(wrong)
    assert "FAILED" in capsys.readouterr().out
