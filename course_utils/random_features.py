"""Performer's positive random features (FAVOR+): linear-time attention that estimates softmax.

Softmax attention weighs key ``k`` for query ``q`` by the kernel ``exp(q . k / sqrt(D))``.
With ``x = q / D^(1/4)``, ``y = k / D^(1/4)`` and ``w ~ N(0, I_D)``,
``E[exp(w . x - |x|^2 / 2) exp(w . y - |y|^2 / 2)] = exp(x . y)``, so ``m`` such features per
vector, ``phi(x) = exp(W x - |x|^2 / 2) / sqrt(m)``, give ``phi(q) . phi(k)``, an unbiased
estimate of the softmax kernel whose error shrinks as ``m`` grows (Choromanski et al.,
2021). Fed to :func:`course_utils.efficient.feature_map_attention`, they give attention
that costs ``O(N m Dv)`` and approximates softmax attention. ``elu + 1``
(:func:`course_utils.efficient.linear_attention`) is a different kernel and estimates nothing.

The features are computed in the input's dtype without the paper's max-subtraction, so that
the estimate stays exactly unbiased; inputs of the usual scale (entries of order 1) are far
from overflowing ``exp`` in float32.
"""

from __future__ import annotations

import math

import torch

from course_utils._validate import check_positive, check_qkv, check_tensor
from course_utils.efficient import feature_map_attention


def softmax_kernel(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``exp(Q K^T / sqrt(D))``, ``(..., N, M)``: the kernel the random features estimate.

    >>> q, k = torch.randn(2, 3, 4).unbind(0)
    >>> w = softmax_kernel(q, k)
    >>> torch.allclose(w / w.sum(-1, keepdim=True), torch.softmax(q @ k.T / 2, -1))
    True
    """
    check_qkv(query, key, key, names=("query", "key", "key"))
    return torch.exp(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]))


def random_projection(
    D: int,
    num_features: int,
    generator: torch.Generator | None = None,
    orthogonal: bool = True,
) -> torch.Tensor:
    """``(num_features, D)`` random directions whose rows are each distributed as ``N(0, I_D)``.

    ``orthogonal=True`` (Performer's default) makes the rows of each block of ``D`` exactly
    orthogonal (a uniformly random rotation), then gives each row the length of an
    independent Gaussian vector: every row keeps the ``N(0, I_D)`` distribution (so the
    estimate stays unbiased) while the rows of a block no longer repeat each other's
    directions, which lowers the variance. Drawn on the CPU from ``generator`` (the global
    generator when None), in float32.

    >>> W = random_projection(4, 6, torch.Generator().manual_seed(0))
    >>> W.shape, torch.allclose((W[:4] @ W[:4].T).triu(1), torch.zeros(4, 4), atol=1e-5)
    (torch.Size([6, 4]), True)
    """
    check_positive("D", D)
    check_positive("num_features", num_features)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if not orthogonal:
        return torch.randn(num_features, D, generator=generator)
    n_blocks = -(-num_features // D)  # ceil(num_features / D) blocks of D rows
    g = torch.randn(n_blocks, D, D, generator=generator)
    q, r = torch.linalg.qr(g)  # (n, D, D) each
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]  # a uniform rotation
    lengths = torch.randn(n_blocks, D, D, generator=generator).norm(dim=-1)  # chi_D per row
    rows = q.transpose(-2, -1) * lengths[..., None]  # (n, D, D): orthogonal rows, Gaussian lengths
    return rows.reshape(n_blocks * D, D)[:num_features]


def positive_random_features(x: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """``phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m)`` with ``x' = x / D^(1/4)``: ``(..., N, m)``.

    ``x`` is ``(..., N, D)``, ``projection`` ``W`` is ``(m, D)`` (:func:`random_projection`).
    Every feature is positive, and ``phi(q) . phi(k)`` estimates ``exp(q . k / sqrt(D))``
    without bias.

    >>> W = random_projection(4, 20000, torch.Generator().manual_seed(0))
    >>> q, k = torch.tensor([[0.5, -0.2, 0.1, 0.3]]), torch.tensor([[0.4, 0.1, -0.3, 0.2]])
    >>> estimate = positive_random_features(q, W) @ positive_random_features(k, W).T
    >>> bool((estimate / softmax_kernel(q, k) - 1).abs() < 0.02)
    True
    """
    check_tensor("x", x)
    check_tensor("projection", projection, dims=2)
    if x.dim() < 2 or x.shape[-1] != projection.shape[1]:
        raise ValueError(
            f"x must be (..., N, D) with D = projection's {projection.shape[1]} columns, got "
            f"x {tuple(x.shape)} and projection {tuple(projection.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    m = projection.shape[0]
    x = x / x.shape[-1] ** 0.25  # so that x . y = q . k / sqrt(D)
    wx = x @ projection.to(x).T  # (..., N, D) @ (D, m) -> (..., N, m)
    return torch.exp(wx - (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(m)


def performer_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    num_features: int = 256,
    is_causal: bool = False,
    generator: torch.Generator | None = None,
    orthogonal: bool = True,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Softmax attention estimated with ``num_features`` positive random features (FAVOR+).

    ``query (..., N, D)``, ``key (..., M, D)``, ``value (..., M, Dv)`` -> ``(..., N, Dv)``. One
    projection (from ``generator``) serves every batch entry and head. The output approaches
    ``softmax(Q K^T / sqrt(D)) V`` as ``num_features`` grows; its cost is linear in N.
    ``is_causal`` and ``chunk_size`` work as in :func:`course_utils.efficient.linear_attention`.

    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (0.5 * torch.randn(1, 16, 8, generator=g) for _ in range(3))
    >>> out = performer_attention(q, k, v, 4096, generator=g)
    >>> exact = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    >>> bool((out - exact).norm() / exact.norm() < 0.05)
    True
    """
    check_qkv(query, key, value, same_length=is_causal)
    check_positive("num_features", num_features)
    projection = random_projection(query.shape[-1], num_features, generator, orthogonal)
    projection = projection.to(device=query.device, dtype=query.dtype)
    phi_q = positive_random_features(query, projection)  # (..., N, m)
    phi_k = positive_random_features(key, projection)  # (..., M, m)
    return feature_map_attention(phi_q, phi_k, value, is_causal, chunk_size, eps=0.0)
