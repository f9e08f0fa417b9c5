"""Exercise checkers pass the reference, fail wrong answers, and say what went wrong."""

import pytest
import torch

from course_utils import attention, exercises, metrics
from course_utils.exercises import nb01, nb02, nb14


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


# Each exercise checker: an independent correct answer passes, a classic mistake fails.
EXERCISES = [
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
