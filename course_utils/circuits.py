"""Interventions on attention heads: remove one, replace its output, record it, patch it in.

A head's **output** here is its slice of the concatenated heads, the input of the attention
module's ``out_proj``: head ``h`` of a module with head size ``D`` owns features
``h*D .. (h+1)*D`` of that ``(B, L, E)`` tensor. Every function works through a forward
pre-hook on ``out_proj``, so it needs nothing from the model but its
:class:`~course_utils.attention.MultiHeadAttention` modules, numbered by layer as
:func:`attention_modules` lists them; the model is unchanged after the ``with`` block.

- :func:`ablate_heads`: **zero ablation** (or any scale): the head writes ``weight`` times
  its output, 0 removes it;
- :func:`record_heads`: every head's output on a forward pass, ``(B, H, L, D)`` per layer;
- :func:`patch_heads`: chosen heads write given values instead of their own: their mean over
  a batch (**mean ablation**), or their output on another input (**activation patching**).

Notebook 18 uses all three on MiniLM's heads and on an induction circuit. Shapes as in the
glossary of :mod:`course_utils` (``B`` batch, ``L`` tokens, ``H`` heads, ``D`` the head size,
``E`` = ``H * D``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

from course_utils.attention import MultiHeadAttention


def attention_modules(model: nn.Module) -> list[MultiHeadAttention]:
    """Every :class:`~course_utils.attention.MultiHeadAttention` inside ``model``, in the order
    the model registers them: for an encoder of self-attention layers, one per layer, so
    index ``l`` of the list is layer ``l``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def _heads_by_layer(
    modules: list[MultiHeadAttention], heads: Iterable[object], name: str = "heads"
) -> dict[int, list[int]]:
    """``{layer: [head, ...]}`` from ``(layer, head)`` pairs, each checked against the model."""
    chosen: dict[int, list[int]] = {}
    for pair in heads:
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        ok = ok and all(isinstance(i, int) and not isinstance(i, bool) for i in pair)
        if not ok or not 0 <= pair[0] < len(modules):
            raise ValueError(
                f"{name} must hold (layer, head) pairs of ints with layer in "
                f"0..{len(modules) - 1} (the model has {len(modules)} attention modules), "
                f"got {pair!r}"
            )
        layer, head = pair
        if not 0 <= head < modules[layer].num_heads:
            raise ValueError(
                f"head must lie in 0..{modules[layer].num_heads - 1} for layer {layer}, got {head}"
            )
        chosen.setdefault(layer, []).append(head)
    return chosen


@contextmanager
def _pre_hooks(modules: list[MultiHeadAttention], hooks: dict[int, object]) -> Iterator[None]:
    handles = [modules[layer].out_proj.register_forward_pre_hook(h) for layer, h in hooks.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def ablate_heads(
    model: nn.Module, heads: Iterable[tuple[int, int]], weight: float = 0.0
) -> Iterator[None]:
    """Inside the ``with`` block, head ``h`` of attention module ``l`` contributes ``weight``
    times its output, for every ``(l, h)`` in ``heads``; ``weight=0`` removes the head
    (zero ablation).

    This scales the head's columns of the ``out_proj`` input, so the projection's bias stays.

    >>> from course_utils.attention import MultiHeadAttention
    >>> mha, x = MultiHeadAttention(4, 2), torch.randn(1, 3, 4)
    >>> with ablate_heads(mha, [(0, 0), (0, 1)]):  # every head removed: only the bias is left
    ...     out = mha(x, x, x)[0]
    >>> torch.allclose(out, mha.out_proj.bias.expand(1, 3, 4))
    True
    """
    modules = attention_modules(model)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise TypeError(f"weight must be a number, got {type(weight).__name__}")
    chosen = _heads_by_layer(modules, heads)

    def scaler(heads_here: list[int], head_dim: int):
        def hook(_module: nn.Module, args: tuple) -> tuple:
            merged = args[0]  # (B, L, E): the heads side by side, head h at h*D .. (h+1)*D
            scale = merged.new_ones(merged.shape[-1])
            for h in heads_here:
                scale[h * head_dim : (h + 1) * head_dim] = weight
            return (merged * scale,)

        return hook

    hooks = {layer: scaler(hs, modules[layer].head_dim) for layer, hs in chosen.items()}
    with _pre_hooks(modules, hooks):
        yield


@contextmanager
def record_heads(model: nn.Module) -> Iterator[dict[int, torch.Tensor]]:
    """Inside the ``with`` block, each forward pass stores every head's output: the yielded
    dict maps layer ``l`` to a ``(B, H, L, D)`` tensor (detached), overwritten by each pass.

    >>> from course_utils.attention import MultiHeadAttention
    >>> mha, x = MultiHeadAttention(4, 2), torch.randn(1, 3, 4)
    >>> with record_heads(mha) as outputs:
    ...     _ = mha(x, x, x)
    >>> outputs[0].shape  # (B, H, L, D)
    torch.Size([1, 2, 3, 2])
    """
    modules = attention_modules(model)
    outputs: dict[int, torch.Tensor] = {}

    def recorder(layer: int, num_heads: int, head_dim: int):
        def hook(_module: nn.Module, args: tuple) -> None:
            B, L, _ = args[0].shape  # (B, L, E) -> (B, H, L, D)
            outputs[layer] = args[0].detach().view(B, L, num_heads, head_dim).transpose(1, 2)

        return hook

    hooks = {i: recorder(i, m.num_heads, m.head_dim) for i, m in enumerate(modules)}
    with _pre_hooks(modules, hooks):
        yield outputs


@contextmanager
def patch_heads(model: nn.Module, values: Mapping[tuple[int, int], torch.Tensor]) -> Iterator[None]:
    """Inside the ``with`` block, head ``(l, h)`` writes ``values[(l, h)]`` instead of its own
    output, for every key of ``values``. A value is ``(B, L, D)`` or broadcasts to it:
    ``(L, D)`` or ``(1, L, D)`` (the head's mean output per position over a batch: **mean
    ablation**), ``(D,)`` (one vector everywhere). Patch in the head's output on another
    input, recorded by :func:`record_heads`, for **activation patching**.

    >>> from course_utils.attention import MultiHeadAttention
    >>> mha, x, y = MultiHeadAttention(4, 2), torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    >>> with record_heads(mha) as on_y:
    ...     _ = mha(y, y, y)
    >>> with patch_heads(mha, {(0, 0): on_y[0][:, 0], (0, 1): on_y[0][:, 1]}):
    ...     patched = mha(x, x, x)[0]  # every head patched from y: the output on y
    >>> torch.allclose(patched, mha(y, y, y)[0], atol=1e-6)
    True
    """
    modules = attention_modules(model)
    if not isinstance(values, Mapping):
        raise TypeError(
            f"values must map (layer, head) pairs to tensors, got {type(values).__name__}"
        )
    chosen = _heads_by_layer(modules, values.keys(), name="values' keys")
    for key, value in values.items():
        D = modules[key[0]].head_dim
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            got = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
            raise TypeError(f"values[{key}] must be a floating-point tensor, got {got}")
        if not 1 <= value.dim() <= 3 or value.shape[-1] != D:
            raise ValueError(
                f"values[{key}] must be (B, L, D), (L, D) or (D,) with D = {D}, "
                f"got {tuple(value.shape)}"
            )

    def patcher(layer: int, heads_here: list[int], head_dim: int):
        def hook(_module: nn.Module, args: tuple) -> tuple:
            merged = args[0]  # (B, L, E)
            B, L, _ = merged.shape
            merged = merged.clone()
            for h in heads_here:
                value = values[(layer, h)].to(merged.device, merged.dtype)
                try:
                    value = torch.broadcast_to(value, (B, L, head_dim))
                except RuntimeError:
                    raise ValueError(
                        f"values[{(layer, h)}] of shape {tuple(value.shape)} does not broadcast "
                        f"to the head's output (B, L, D) = {(B, L, head_dim)}"
                    ) from None
                merged[..., h * head_dim : (h + 1) * head_dim] = value
            return (merged,)

        return hook

    hooks = {layer: patcher(layer, hs, modules[layer].head_dim) for layer, hs in chosen.items()}
    with _pre_hooks(modules, hooks):
        yield
