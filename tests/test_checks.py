"""Exercise checkers pass the reference, fail wrong answers, and say what went wrong."""

import pytest
import torch

from course_utils import attention, checks


def test_reference_solutions_pass(capsys):
    assert checks.check_masked_softmax(attention.masked_softmax)
    assert checks.check_scaled_dot_product_attention(attention.scaled_dot_product_attention)
    assert "all 3 cases passed" in capsys.readouterr().out


def test_naive_masked_softmax_fails_with_a_hint(capsys):
    def nan_on_empty_rows(scores, mask):  # the classic bug: -inf fill gives NaN rows
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)

    with pytest.raises(AssertionError, match="masked_softmax"):
        checks.check_masked_softmax(nan_on_empty_rows)
    out = capsys.readouterr().out
    assert "NaN" in out and "Hint:" in out


def test_unscaled_attention_fails_on_values(capsys):
    def unscaled(q, k, v, mask=None):
        w = attention.masked_softmax(q @ k.transpose(-2, -1), mask)
        return w @ v, w

    with pytest.raises(AssertionError):
        checks.check_scaled_dot_product_attention(unscaled)
    assert "values differ" in capsys.readouterr().out


def test_shape_is_checked_before_values(capsys):
    def transposed(q, k, v, mask=None):
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        return out, w.transpose(-2, -1)

    with pytest.raises(AssertionError):
        checks.check_scaled_dot_product_attention(transposed)
    assert "shape: expected (2, 4, 6), got (2, 6, 4)" in capsys.readouterr().out


def test_unfinished_and_crashing_exercises_are_reported(capsys):
    def unfinished(scores, mask):
        raise NotImplementedError

    with pytest.raises(AssertionError):
        checks.check_masked_softmax(unfinished)
    assert "not implemented yet" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        checks.check_function(lambda x: x.foo, lambda x: x, [(torch.ones(1),)], name="demo")
    assert "raised AttributeError" in capsys.readouterr().out
