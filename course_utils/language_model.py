"""A decoder-only (GPT-style) language model from the course's layers, with a KV cache.

Read top to bottom: :class:`LMConfig` (checks itself); :class:`KVCache`, the keys and values
each layer keeps while a model generates, optionally trimmed to a window plus a few first
"sink" tokens (StreamingLLM); :class:`GroupedQueryAttention`, causal self-attention whose
``num_kv_heads`` key/value heads are shared by groups of query heads (``num_kv_heads ==
num_heads``: multi-head attention; ``1``: multi-query); a pre-norm :class:`Block`; and
:class:`DecoderLM`, the model, with tied input and output embeddings.

Positions (``LMConfig.position``): ``"learned"`` and ``"sinusoidal"`` vectors are added to
the token embeddings; ``"rope"`` rotates queries and keys; ``"alibi"`` adds a linear bias to
the scores. Rotations and biases use positions *inside the cache*: without trimming those
are the tokens' positions, and RoPE keys are cached after their rotation, each rotated once
(as the caches of Hugging Face transformers, vLLM and llama.cpp do); with a window the
positions stay below the window's size (StreamingLLM's choice), so there the keys are cached
before their rotation and the whole window is rotated again at every step. A block of new queries after cached
keys needs the causal mask aligned at the bottom-right: ``causal_mask(Lq, Lk, offset=Lk -
Lq)``. Shapes as in the glossary: ``H`` query heads, ``Hkv`` key/value heads, ``D`` per head.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import CheckedEmbedding, check_ids, check_positive
from course_utils.attention import causal_mask, masked_softmax, scaled_dot_product_scores
from course_utils.positional import alibi_slopes, apply_rotary, sinusoidal_encoding
from course_utils.transformer import FeedForward

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")
WEIGHTS_DIR = (
    Path(__file__).resolve().parents[1] / "data" / "lm"
)  # scripts/train_language_models.py


@dataclass
class LMConfig:
    """A decoder-only model's hyperparameters; invalid combinations raise at construction.

    ``max_len`` is the longest sequence the model (and its KV cache) may hold; a model
    trained on shorter windows can be evaluated up to it (learned positions beyond the
    trained length stay at their random initial values).

    >>> LMConfig(vocab_size=97, num_heads=4, num_kv_heads=2).head_dim
    32
    >>> LMConfig(vocab_size=97, num_heads=4, num_kv_heads=3)
    Traceback (most recent call last):
    ValueError: num_heads (4) must be a multiple of num_kv_heads (3): each key/value head serves num_heads / num_kv_heads query heads
    """

    vocab_size: int
    d_model: int = 128
    num_heads: int = 4
    num_kv_heads: int | None = None  # None: as many as query heads (multi-head attention)
    num_layers: int = 2
    d_ff: int = 384
    max_len: int = 512
    position: str = "rope"
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len"):
            check_positive(name, getattr(self, name))
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        check_positive("num_kv_heads", self.num_kv_heads)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}): each key/value head serves num_heads / num_kv_heads "
                "query heads"
            )
        if self.position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {self.position!r}")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"rope needs an even head_dim, got {self.head_dim}")
        if not self.rope_base > 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


class KVCache:
    """The keys and values of every layer, ``(B, Hkv, T, D)`` each, grown one block at a time.

    ``max_len`` bounds what it may hold (the model's ``max_len``): more raises ``ValueError``.
    With ``window``, it keeps only the first ``num_sinks`` tokens and the last ``window``
    (StreamingLLM, Xiao et al. 2024, with ``num_sinks > 0``; a plain sliding window with 0);
    trimming needs one new token per step. ``seen`` counts every token ever appended.
    """

    def __init__(
        self, num_layers: int, max_len: int, window: int | None = None, num_sinks: int = 0
    ):
        check_positive("num_layers", num_layers)
        check_positive("max_len", max_len)
        if window is not None:
            check_positive("window", window)
        if isinstance(num_sinks, bool) or not isinstance(num_sinks, int) or num_sinks < 0:
            raise ValueError(f"num_sinks must be an int >= 0, got {num_sinks!r}")
        if window is not None and window + num_sinks > max_len:
            raise ValueError(
                f"window + num_sinks = {window + num_sinks} must not exceed max_len = {max_len}"
            )
        self.max_len, self.window, self.num_sinks = max_len, window, num_sinks
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.seen = 0  # tokens appended so far (advanced by the model after its last layer)

    def __len__(self) -> int:
        """Positions held now (those of layer 0)."""
        return self.length(0)

    def length(self, layer: int) -> int:
        """Positions ``layer`` holds now (before this step's block, while a forward runs)."""
        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]

    def append(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``k, v (B, Hkv, Lq, D)`` to ``layer``; return everything held, ``(B, Hkv, T, D)``."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)  # (B, Hkv, T_old + Lq, D)
            v = torch.cat([self.values[layer], v], dim=-2)
        if self.window is not None and k.shape[-2] > self.window + self.num_sinks:
            if k.shape[-2] > self.window + self.num_sinks + 1:
                raise ValueError(
                    f"a cache with a window of {self.window} needs one new token per step once "
                    f"full, got a block that makes {k.shape[-2]} positions"
                )
            keep = torch.cat(
                [torch.arange(self.num_sinks), torch.arange(k.shape[-2] - self.window, k.shape[-2])]
            )
            k, v = k[..., keep.to(k.device), :], v[..., keep.to(v.device), :]
        if k.shape[-2] > self.max_len:
            raise ValueError(
                f"the cache would hold {k.shape[-2]} positions, more than the model's max_len = "
                f"{self.max_len}; start a new cache or use a window"
            )
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        """Bytes held by the cached tensors, measured."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``num_kv_heads`` key/value heads shared by the query heads.

    Query head ``h`` reads key/value head ``h // (num_heads / num_kv_heads)``. ``forward(x
    (B, L, E), cache=None, need_weights=False, rope_scale=1.0) -> (out (B, L, E), weights
    (B, H, L, T) or None)``, where ``T`` counts the cached positions plus ``L``. ``rope_scale``
    multiplies RoPE's positions (position interpolation uses train length / eval length); a
    cache without a window holds keys rotated at the scale of the call that added them, so
    keep one scale per cache.
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.position, self.rope_base = c.position, c.rope_base
        self.w_q = nn.Linear(c.d_model, c.num_heads * c.head_dim, bias=False)
        self.w_k = nn.Linear(c.d_model, c.num_kv_heads * c.head_dim, bias=False)
        self.w_v = nn.Linear(c.d_model, c.num_kv_heads * c.head_dim, bias=False)
        self.w_o = nn.Linear(c.num_heads * c.head_dim, c.d_model, bias=False)
        if c.position == "alibi":
            self.register_buffer("slopes", alibi_slopes(c.num_heads), persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
        rope_scale: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, L, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.w_q(x).view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
        k = self.w_k(x).view(B, L, Hkv, D).transpose(1, 2)  # (B, Hkv, L, D)
        v = self.w_v(x).view(B, L, Hkv, D).transpose(1, 2)  # (B, Hkv, L, D)
        rope, windowed = self.position == "rope", cache is not None and cache.window is not None
        if rope and not windowed:  # rotate the new keys once, at their positions, then cache
            held = 0 if cache is None else cache.length(layer)
            k = apply_rotary(
                k, torch.arange(held, held + L, device=x.device) * rope_scale, self.rope_base
            )
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, Hkv, T, D): the past and the new block
        T = k.shape[-2]
        q_pos = torch.arange(T - L, T, device=x.device)  # new queries are the last L positions
        k_pos = torch.arange(T, device=x.device)
        if rope:
            q = apply_rotary(q, q_pos * rope_scale, self.rope_base)
        if rope and windowed:  # keys cached unrotated: re-rotated at their places in the window
            k = apply_rotary(k, k_pos * rope_scale, self.rope_base)
        group = H // Hkv
        k = k.repeat_interleave(group, dim=1)  # (B, Hkv, T, D) -> (B, H, T, D)
        v = v.repeat_interleave(group, dim=1)
        mask = causal_mask(L, T, device=x.device, offset=T - L)  # bottom-right aligned
        bias = None
        if self.position == "alibi":  # -m_h * distance, distances inside the cache
            distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0)  # (L, T)
            bias = -self.slopes[:, None, None] * distance  # (H, L, T)
        if need_weights:  # the course's own attention, which returns the weights
            scores = scaled_dot_product_scores(q, k)  # (B, H, L, T)
            weights = masked_softmax(scores if bias is None else scores + bias, mask)
            out = weights @ v  # (B, H, L, T) @ (B, H, T, D) -> (B, H, L, D)
        else:  # the same numbers through PyTorch's fused kernel (faster, no weights kept)
            attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask), None
        out = out.transpose(1, 2).reshape(B, L, H * D)  # (B, H, L, D) -> (B, L, H * D)
        return self.w_o(out), weights


class Block(nn.Module):
    """Pre-norm decoder block: ``x + attn(norm(x))``, then ``x + ff(norm(x))`` (GELU)."""

    def __init__(self, config: LMConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attn = GroupedQueryAttention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, activation="gelu")

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
        rope_scale: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attn(self.norm1(x), cache, layer, need_weights, rope_scale)
        x = x + attended
        return x + self.feed_forward(self.norm2(x)), weights


class DecoderLM(nn.Module):
    """A decoder-only language model: embeddings, ``num_layers`` blocks, tied output layer.

    ``forward(ids (B, L), cache=None) -> logits (B, L, V)``: with a :class:`KVCache`, ``ids``
    are the tokens that follow what the cache holds, and the cache is extended.
    :meth:`attention_weights` returns one ``(B, H, L, L)`` tensor per layer.

    >>> model = DecoderLM(LMConfig(vocab_size=10, d_model=16, num_heads=2, max_len=8)).eval()
    >>> ids = torch.randint(0, 10, (1, 5))
    >>> cache = model.new_cache()
    >>> stepwise = torch.cat([model(ids[:, i : i + 1], cache) for i in range(5)], dim=1)
    >>> torch.allclose(stepwise, model(ids), atol=1e-5)  # the cache changes nothing
    True
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"config must be an LMConfig, got {type(config).__name__}")
        self.config = c = config
        self.rope_scale = 1.0  # RoPE position interpolation: set to train length / eval length
        self.embed = CheckedEmbedding(c.vocab_size, c.d_model)
        if c.position == "learned":
            self.pos = nn.Parameter(torch.zeros(c.max_len, c.d_model))
        elif c.position == "sinusoidal":
            # scaled to the size of the token embeddings at initialisation (std 0.02): at
            # full size (entries of +-1) the positions drown the tokens after the first norm
            pos = 0.02 * math.sqrt(2) * sinusoidal_encoding(c.max_len, c.d_model)
            self.register_buffer("pos", pos, persistent=False)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_layers))
        self.norm = nn.LayerNorm(c.d_model)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            if name.endswith("w_o.weight") or name.endswith("linear2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.num_layers))  # residual outputs

    def new_cache(self, window: int | None = None, num_sinks: int = 0) -> KVCache:
        """An empty :class:`KVCache` for this model (bounded by its ``max_len``)."""
        return KVCache(self.config.num_layers, self.config.max_len, window, num_sinks)

    def _run(
        self, ids: torch.Tensor, cache: KVCache | None, need_weights: bool
    ) -> tuple[torch.Tensor, list]:
        check_ids("ids", ids)
        c = self.config
        if int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size:
            raise ValueError(
                f"ids must lie in 0..{c.vocab_size - 1}, got {int(ids.min())}..{int(ids.max())}"
            )
        L = ids.shape[1]
        start = 0 if cache is None else cache.seen
        if cache is None and L > c.max_len:
            raise ValueError(f"ids has {L} positions, more than the model's max_len = {c.max_len}")
        x = self.embed(ids)  # (B, L, E)
        if c.position in ("learned", "sinusoidal"):  # absolute positions, added once
            if start + L > c.max_len:
                raise ValueError(
                    f"position {start + L - 1} is past the table's max_len = {c.max_len}"
                )
            x = x + self.pos[start : start + L]
        weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, cache, i, need_weights, self.rope_scale)
            weights.append(w)
        if cache is not None:
            cache.seen += L
        logits = self.norm(x) @ self.embed.weight.T  # tied: (B, L, E) @ (E, V) -> (B, L, V)
        return logits, weights

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self._run(ids, cache, need_weights=False)[0]

    def attention_weights(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """One ``(B, H, L, L)`` tensor of attention weights per layer (no cache)."""
        return self._run(ids, None, need_weights=True)[1]


def lm_loss(model: nn.Module, batch: object) -> torch.Tensor:
    """Mean next-character cross-entropy of ``model`` on a batch with ``x`` and ``y (B, L)``."""
    logits = model(batch.x)  # (B, L, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.y.reshape(-1))


@torch.no_grad()
def loss_per_position(
    model: nn.Module, windows: torch.Tensor, batch_size: int = 16
) -> torch.Tensor:
    """``(L,)`` mean cross-entropy at each position of ``windows (N, L + 1)`` (no cache)."""
    check_ids("windows", windows)
    total = torch.zeros(windows.shape[1] - 1)
    for chunk in windows.split(batch_size):
        logits = model(chunk[:, :-1])  # (b, L, V)
        loss = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")  # (b, L)
        total += loss.sum(0)
    return total / len(windows)


@torch.no_grad()
def streaming_loss_per_position(
    model: DecoderLM, windows: torch.Tensor, window: int, num_sinks: int = 0
) -> torch.Tensor:
    """``(L,)`` cross-entropy per position, feeding one token at a time into a trimmed cache.

    Each step sees the first ``num_sinks`` tokens and the last ``window`` (itself included):
    StreamingLLM's cache with sinks, a plain sliding window without.
    """
    check_ids("windows", windows)
    cache = model.new_cache(window=window, num_sinks=num_sinks)
    losses = []
    for t in range(windows.shape[1] - 1):
        logits = model(windows[:, t : t + 1], cache)[:, 0]  # (N, V)
        losses.append(F.cross_entropy(logits, windows[:, t + 1], reduction="none").mean())
    return torch.stack(losses)


def save_lm(model: DecoderLM, path: str | Path, chars: str, **extra: object) -> None:
    """Write ``model`` small: its config, its character set and float16 weights (+ ``extra``)."""
    state = {k: v.detach().cpu().half() for k, v in model.state_dict().items()}
    entry = {"config": asdict(model.config), "chars": chars, "state_dict": state, **extra}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(entry, path)


def load_lm(name: str, folder: str | Path = WEIGHTS_DIR) -> tuple[DecoderLM, dict]:
    """The model stored as ``folder/name.pt`` (float32, eval mode) and the whole entry.

    Read with ``torch.load(..., weights_only=True)``: only tensors, numbers and strings.
    """
    path = Path(folder) / f"{name}.pt"
    if not path.exists():
        raise FileNotFoundError(f"no stored model {path}: run scripts/train_language_models.py")
    entry = torch.load(path, map_location="cpu", weights_only=True)
    model = DecoderLM(LMConfig(**entry["config"]))
    model.load_state_dict({k: v.float() for k, v in entry["state_dict"].items()})
    return model.eval(), entry
