"""course_utils.sampling: top-k, top-p and temperature on hand-worked distributions; generation."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.language_model import DecoderLM, LMConfig
from course_utils.sampling import generate, next_token_probs, top_k_filter, top_p_filter

PROBS = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15])  # sorted: 0.4 (1), 0.3 (3), 0.15 (4), 0.1, 0.05


def kept(logits):
    return sorted(torch.nonzero(logits.isfinite()).flatten().tolist())


@pytest.mark.parametrize(
    ("k", "expected"), [(1, [1]), (2, [1, 3]), (3, [1, 3, 4]), (9, [0, 1, 2, 3, 4])]
)
def test_top_k_keeps_the_k_most_likely(k, expected):
    assert kept(top_k_filter(PROBS.log(), k)) == expected


# cumulative: 0.4, 0.7, 0.85, 0.95, 1.0; a token is kept while the mass before it is < p
@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (0.1, [1]),
        (0.4, [1]),
        (0.41, [1, 3]),
        (0.7, [1, 3]),
        (0.8, [1, 3, 4]),
        (0.9, [1, 2, 3, 4]),
        (1.0, [0, 1, 2, 3, 4]),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_p(p, expected):
    assert kept(top_p_filter(PROBS.log(), p)) == expected


def test_filters_work_row_by_row():
    logits = torch.stack([PROBS.log(), PROBS.flip(0).log()])
    assert kept(top_p_filter(logits, 0.7)[1]) == [1, 3]
    assert kept(top_k_filter(logits, 1)[1]) == [3]


def test_temperature_reshapes_like_the_closed_form():
    logits = torch.tensor([1.0, 2.0, 4.0])
    for t in (0.25, 1.0, 3.0):
        expected = torch.tensor([math.exp(x / t) for x in (1.0, 2.0, 4.0)])
        assert torch.allclose(next_token_probs(logits, t), expected / expected.sum(), atol=1e-6)
    # top-k then renormalised: 0.4 and 0.3 become 4/7 and 3/7
    got = next_token_probs(PROBS.log(), 1.0, top_k=2)
    assert torch.allclose(got, torch.tensor([0, 4 / 7, 0, 3 / 7, 0]), atol=1e-6)


@pytest.mark.parametrize("p", [0.0, -0.1, 1.2, float("nan")])
def test_top_p_outside_the_unit_interval_is_an_error(p):
    with pytest.raises(ValueError, match="top_p must be a number in"):
        top_p_filter(PROBS.log(), p)


@pytest.mark.parametrize("t", [0, -1.0])
def test_temperature_must_be_positive(t):
    with pytest.raises(ValueError, match="temperature must be a number > 0"):
        next_token_probs(PROBS.log(), t)


def test_bad_k_and_logits_are_named():
    with pytest.raises(ValueError, match="k must be positive"):
        top_k_filter(PROBS, 0)
    with pytest.raises(TypeError, match="logits must be"):
        top_k_filter([0.1, 0.2], 1)


@pytest.mark.parametrize("num_kv_heads", [2, 1])
def test_generation_with_and_without_cache_gives_the_same_tokens(num_kv_heads):
    torch.manual_seed(0)
    model = DecoderLM(
        LMConfig(vocab_size=15, d_model=16, num_heads=2, num_kv_heads=num_kv_heads, max_len=30)
    )
    prompt = torch.randint(0, 15, (3, 4))
    runs = [
        generate(
            model,
            prompt,
            12,
            temperature=0.8,
            top_k=5,
            use_cache=c,
            generator=torch.Generator().manual_seed(5),
        )
        for c in (True, False)
    ]
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (3, 16)
    assert torch.equal(runs[0][:, :4], prompt)
    greedy = generate(model, prompt, 5, greedy=True)
    assert torch.equal(greedy[:, 4], model(prompt)[:, -1].argmax(-1))
