"""Notebook 14's checkers: an independent correct answer passes, a classic mistake fails."""

import pytest
import torch

from course_utils.exercises import nb14


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


EXERCISES = [
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
