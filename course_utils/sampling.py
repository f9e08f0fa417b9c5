"""Choosing the next token from a language model's logits, and generating text with a cache.

:func:`next_token_probs` reshapes the distribution the way today's models are sampled:
divide the logits by a ``temperature``, keep the ``top_k`` most likely tokens
(:func:`top_k_filter`) and/or the smallest set whose probability reaches ``top_p``
(nucleus sampling, Holtzman et al. 2020, :func:`top_p_filter`). Greedy decoding takes the
most likely token. :func:`generate` runs any :class:`course_utils.language_model.DecoderLM`
token by token, with its KV cache or by recomputing the whole prefix at every step.

This module samples from a decoder-only model that continues a prompt;
:mod:`course_utils.decoding` searches (greedy and beam) for the encoder-decoder models that
turn a source into an output through ``start`` / ``step``.
"""

from __future__ import annotations

import torch

from course_utils._validate import check_ids, check_positive, check_tensor


def _check_logits(logits: object) -> None:
    check_tensor("logits", logits)
    if not logits.is_floating_point() or logits.dim() < 1:
        raise TypeError(
            f"logits must be a float tensor (..., V), got {logits.dtype} {tuple(logits.shape)}"
        )


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``logits (..., V)`` with every token outside the ``k`` largest set to ``-inf``.

    Tokens tied with the k-th largest logit are kept too (they are equally likely).

    >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0, 0.0]), 2)
    tensor([-inf, 3., 2., -inf])
    """
    _check_logits(logits)
    check_positive("k", k)
    if k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """``logits (..., V)`` keeping the smallest set of most likely tokens whose probability
    reaches ``p`` (nucleus sampling); the rest become ``-inf``. ``p`` in ``(0, 1]``.

    A token is kept when the probability of the tokens more likely than it is below ``p``,
    so the most likely token is always kept.

    >>> logits = torch.tensor([0.5, 0.2, 0.2, 0.1]).log()
    >>> top_p_filter(logits, 0.6).isfinite().tolist()  # 0.5 < 0.6, then 0.5 + 0.2 >= 0.6
    [True, True, False, False]
    >>> top_p_filter(logits, 0.5).isfinite().tolist()  # 0.5 alone reaches 0.5
    [True, False, False, False]
    """
    _check_logits(logits)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"top_p must be a number in (0, 1], got {p!r}")
    if p == 1:
        return logits
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (..., V), most likely first
    before = sorted_probs.cumsum(-1) - sorted_probs  # probability of the tokens ahead of each
    keep_sorted = before < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocab order
    return logits.masked_fill(~keep, float("-inf"))


def next_token_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """``(..., V)`` sampling distribution: ``softmax(logits / temperature)`` restricted to
    the top-k and then the top-p tokens (each only when given).

    >>> next_token_probs(torch.tensor([2.0, 1.0, 0.0]), temperature=0.5, top_k=2)
    tensor([0.8808, 0.1192, 0.0000])
    """
    _check_logits(logits)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature > 0
    ):
        raise ValueError(
            f"temperature must be a number > 0, got {temperature!r} (for the most likely token "
            "use greedy decoding)"
        )
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompt: torch.Tensor,
    max_steps: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Continue ``prompt (B, P)`` by ``max_steps`` tokens: ``(B, P + max_steps)``.

    With ``use_cache`` the prompt goes through the model once and each step feeds only the
    new token; without, each step recomputes the whole sequence so far. ``greedy`` takes the
    most likely token; otherwise tokens are drawn from :func:`next_token_probs` with
    ``generator`` (both ways draw the same tokens from the same generator state).
    """
    check_ids("prompt", prompt)
    check_positive("max_steps", max_steps)
    if prompt.shape[1] < 1:
        raise ValueError("prompt must hold at least one token per sequence")
    model.eval()
    ids = prompt
    cache = model.new_cache() if use_cache else None
    logits = model(prompt, cache)[:, -1]  # (B, V): the distribution of the first new token
    for step in range(max_steps):
        if greedy:
            nxt = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            probs = next_token_probs(logits, temperature, top_k, top_p)
            nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        ids = torch.cat([ids, nxt], dim=1)
        if step + 1 < max_steps:
            logits = (model(nxt, cache) if use_cache else model(ids))[:, -1]
    return ids
