"""Input checks shared by the course's modules: one rule, one message style.

Each check names the argument and what it got (its type, shape or value): ``TypeError`` for
a wrong type or dtype, ``ValueError`` for a wrong shape or value. Private to the package
(the leading underscore); modules import what they need from here.
"""

from __future__ import annotations

import torch
from torch import nn


# ---------------------------------------------------------------------------------------
# Input checks: every public function names the argument and the shapes it got.
# ---------------------------------------------------------------------------------------
def check_qkv(
    query: object,
    key: object,
    value: object,
    same_length: bool = False,
    names: tuple[str, str, str] = ("query", "key", "value"),
) -> None:
    """Query ``(..., N, D)``, key ``(..., M, D)``, value ``(..., M, Dv)``, named ``names``."""
    q_name, k_name, v_name = names
    for name, x in zip(names, (query, key, value), strict=True):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name} must be (..., N, D), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    shapes = ", ".join(
        f"{n} {tuple(x.shape)}" for n, x in zip(names, (query, key, value), strict=True)
    )
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            f"{q_name}, {k_name} and {v_name} must have the same leading dims, got {shapes}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{q_name} and {k_name} must have the same feature size D, got {shapes}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{k_name} and {v_name} must have the same length M, got {shapes}")
    if same_length and query.shape[-2] != key.shape[-2]:
        raise ValueError(f"{q_name} and {k_name} must have the same length N here, got {shapes}")


def check_positive(name: str, value: object) -> None:
    """An int >= 1; bools are rejected (``True`` is an int to Python, never a size here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def one_output_per_example(f: object, x: torch.Tensor, takes: str = "x") -> torch.Tensor:
    """``f(x)``, checked to be a function returning one number per example, ``(B,)`` for an
    ``x`` of ``B`` rows; ``takes`` says in the message what ``f`` is given."""
    if not callable(f):
        raise TypeError(f"f must be a function {takes} -> (B,), got {type(f).__name__}")
    out = f(x)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (x.shape[0],):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"f must return one output per example (B,) = ({x.shape[0]},), got {shape}"
        )
    return out


def check_tensor(name: str, x: object, dims: int | None = None) -> None:
    """``x`` must be a ``torch.Tensor`` (``TypeError``), with ``dims`` dimensions if given."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dims is not None and x.dim() != dims:
        raise ValueError(f"{name} must have {dims} dims, got shape {tuple(x.shape)}")


def check_ids(name: str, ids: object) -> None:
    """Token ids: a 2-D integer tensor ``(B, L)``."""
    check_tensor(name, ids)
    if ids.dtype != torch.long:
        raise TypeError(f"{name} must hold token ids (dtype torch.long), got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor (B, L), got shape {tuple(ids.shape)}")


def check_lengths(name: str, lengths: object, batch: int, width: int, low: int = 1) -> None:
    """``lengths`` (B,) integers with every value in ``low``..``width``."""
    check_tensor(name, lengths)
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer lengths, got dtype {lengths.dtype}")
    if lengths.shape != (batch,):
        raise ValueError(f"{name} must have shape (B,) = ({batch},), got {tuple(lengths.shape)}")
    if batch > 0 and (int(lengths.min()) < low or int(lengths.max()) > width):
        raise ValueError(
            f"{name} values must lie in {low}..{width}, got min {int(lengths.min())} and "
            f"max {int(lengths.max())}"
        )


def check_src(src: object, src_len: object) -> None:
    """A padded source ``src`` (B, S) long and its lengths ``src_len`` (B,) in 1..S."""
    check_ids("src", src)
    check_lengths("src_len", src_len, src.shape[0], src.shape[1])


def check_per_step(name: str, x: object, ids_name: str, ids: object, last: str) -> None:
    """``x`` a 3-D tensor ``(B, T, last)`` and ``ids`` a ``(B, T)`` id tensor, one per step."""
    check_tensor(name, x)
    if x.dim() != 3:
        raise ValueError(f"{name} must be a 3-D tensor (B, T, {last}), got shape {tuple(x.shape)}")
    check_ids(ids_name, ids)
    if ids.shape != x.shape[:2]:
        raise ValueError(
            f"{ids_name} must have shape (B, T) = {tuple(x.shape[:2])} to match {name} "
            f"{tuple(x.shape)}, got {tuple(ids.shape)}"
        )


def check_bool_mask(name: str, mask: object, meaning: str = "True = may attend") -> None:
    """A boolean mask tensor; ``meaning`` says what ``True`` means, for the message."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be boolean ({meaning}), got dtype {mask.dtype} "
            f"with shape {tuple(mask.shape)}"
        )


def check_token_mask(name: str, mask: object, shape: tuple[int, int]) -> None:
    """A ``(B, L)`` mask of the real tokens: boolean, or integers 0 and 1 as tokenizers give."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a (B, L) = {shape} tensor, got {type(mask).__name__}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must be (B, L) = {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool and (
        mask.is_floating_point() or bool(((mask != 0) & (mask != 1)).any())
    ):
        raise TypeError(f"{name} must be boolean or hold 0 and 1 only, got dtype {mask.dtype}")


# ---------------------------------------------------------------------------------------
# Attention's inputs: queries, keys and masks (course_utils.attention and its score modules)
# ---------------------------------------------------------------------------------------
def check_float_tensor(name: str, x: object, min_dim: int = 2) -> None:
    """A floating-point tensor with at least ``min_dim`` dims."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dims, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_batch_dims(names: str, *tensors: torch.Tensor) -> None:
    """Leading (batch) dims must broadcast; the last two dims are the matrix dims."""
    try:
        torch.broadcast_shapes(*(t.shape[:-2] for t in tensors))
    except RuntimeError:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise ValueError(f"{names} have batch dims that do not broadcast: {shapes}") from None


def check_query_key(query: torch.Tensor, key: torch.Tensor) -> None:
    """Query ``(..., Lq, D)`` and key ``(..., Lk, D)``: the same ``D``, batch dims that broadcast."""
    check_float_tensor("query", query)
    check_float_tensor("key", key)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "query and key must have the same feature size (last dim), got "
            f"query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    check_batch_dims("query and key", query, key)


def check_scores_mask(mask: object, scores_shape: torch.Size) -> None:
    """A boolean mask that broadcasts to the scores' shape ``(..., Lq, Lk)``."""
    check_bool_mask("mask", mask)
    try:
        ok = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., Lq, Lk)"
        )


def check_sized_query_key(module: nn.Module, query: object, key: object) -> None:
    """For a score module built for ``query_dim`` and ``key_dim`` features."""
    check_float_tensor("query", query)
    check_float_tensor("key", key)
    if query.shape[-1] != module.query_dim or key.shape[-1] != module.key_dim:
        raise ValueError(
            f"{type(module).__name__} expects query (..., Lq, {module.query_dim}) and key "
            f"(..., Lk, {module.key_dim}), got query {tuple(query.shape)} and key "
            f"{tuple(key.shape)}"
        )
    check_batch_dims("query and key", query, key)


# ---------------------------------------------------------------------------------------
# Token ids at a model's boundary
# ---------------------------------------------------------------------------------------
class CheckedEmbedding(torch.nn.Embedding):
    """``nn.Embedding`` whose lookup names a token id outside its table and the table's size,
    where torch raises a bare ``IndexError``. Every model's token table is one, so a model
    checks its ids against its own vocabulary at its boundary. Same parameters (``weight``),
    same initialisation, same output.

    >>> table = CheckedEmbedding(5, 2)
    >>> table(torch.tensor([[0, 7]]))
    Traceback (most recent call last):
    ...
    ValueError: token id 7 is outside the vocabulary of 5 (ids must lie in 0..4)
    """

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
            got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise TypeError(f"token ids must be an integer tensor, got {got}")
        outside = (ids < 0) | (ids >= self.num_embeddings)
        if bool(outside.any()):
            bad = int(ids[outside][0])
            raise ValueError(
                f"token id {bad} is outside the vocabulary of {self.num_embeddings} "
                f"(ids must lie in 0..{self.num_embeddings - 1})"
            )
        return super().forward(ids)
