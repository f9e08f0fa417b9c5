"""Input checks shared by the course's modules: one rule, one message style.

Each check names the argument and what it got (its type, shape or value): ``TypeError`` for
a wrong type or dtype, ``ValueError`` for a wrong shape or value. Private to the package
(the leading underscore); modules import what they need from here.
"""

from __future__ import annotations

import torch


# ---------------------------------------------------------------------------------------
# Input checks: every public function names the argument and the shapes it got.
# ---------------------------------------------------------------------------------------
def check_qkv(query, key, value, same_length: bool = False) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name} must be (..., N, D), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError(f"query, key and value must have the same leading dims, got {shapes}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key must have the same feature size D, got {shapes}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key and value must have the same length M, got {shapes}")
    if same_length and query.shape[-2] != key.shape[-2]:
        raise ValueError(f"query and key must have the same length N here, got {shapes}")


def check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
