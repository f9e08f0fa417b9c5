"""The Transformer (Vaswani et al., 2017): its layers and the encoder-decoder core.

Read top to bottom: the position-wise ``FeedForward``; ``EncoderLayer`` and ``DecoderLayer``
(attention and feed-forward sublayers, each wrapped in a residual connection and a
LayerNorm, after the sublayer or before it); the ``Encoder`` and ``Decoder`` stacks; and the
embedding-free ``Transformer`` core, which ``Transformer.from_torch`` copies from
``torch.nn.Transformer``. The seq2seq model with embeddings, an output layer and decoding is
:mod:`course_utils.transformer_seq2seq`; its loss and learning-rate schedule are in
:mod:`course_utils.training`.

Masks follow the course convention: boolean, ``True`` = this position may be attended to.
PyTorch's boolean masks mean the opposite (``True`` = blocked) and its float masks are added
to the scores; :func:`course_utils.attention.mask_from_torch` converts both. Attention masks
are ``(L, S)``, ``(B, L, S)`` or ``(B, H, L, S)``; key-padding masks are ``(B, S)``, ``True``
at real tokens (what :attr:`course_utils.data.Batch.src_mask` gives). Shapes as in the
glossary of :mod:`course_utils`: ``S`` source, ``T`` target, ``E = d_model``, ``F = d_ff``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_utils._validate import check_positive
from course_utils.attention import Mask, MultiHeadAttention, with_key_padding

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


# ---------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------
def _check_sequence(name: str, x: object, d_model: int) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d_model or not x.is_floating_point():
        raise ValueError(
            f"{name} must be a float tensor (B, L, {d_model}) (batch first), got shape "
            f"{tuple(x.shape)} and dtype {x.dtype}"
        )


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------
class FeedForward(nn.Module):
    """Position-wise feed-forward network ``linear2(dropout(activation(linear1(x))))``.

    ``(..., E) -> (..., E)`` through ``F = d_ff`` hidden features, the same at every position.

    >>> ff = FeedForward(8, 32)
    >>> ff(torch.randn(2, 5, 8)).shape
    torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        hidden = ACTIVATIONS[self.activation](self.linear1(x))  # (..., E) -> (..., F)
        return self.linear2(self.dropout(hidden))  # (..., F) -> (..., E)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each sublayer has a residual connection and a norm.

    Post-norm (``norm_first=False``, the paper): ``x = norm(x + sublayer(x))``.
    Pre-norm (``norm_first=True``, most models today): ``x = x + sublayer(norm(x))``.
    ``forward(x (B, S, E), mask=None) -> (x (B, S, E), weights (B, H, S, S))``. Its parameters
    come in the order of ``torch.nn.TransformerEncoderLayer`` (``d_model, num_heads, d_ff,
    dropout``) under the course's names, as the course's public API fixes.

    >>> layer = EncoderLayer(16, 4, 32).eval()
    >>> out, weights = layer(torch.randn(2, 5, 16))
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def _attend(self, x: Tensor, mask: Mask) -> tuple[Tensor, Tensor]:
        out, weights = self.self_attn(x, x, x, mask=mask)  # (B, S, E), (B, H, S, S)
        return self.dropout1(out), weights

    def forward(self, x: Tensor, mask: Mask = None) -> tuple[Tensor, Tensor]:
        _check_sequence("x", x, self.d_model)
        if self.norm_first:
            attended, weights = self._attend(self.norm1(x), mask)
            x = x + attended
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            attended, weights = self._attend(x, mask)
            x = self.norm1(x + attended)
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's memory, then feed-forward.

    ``forward(x (B, T, E), memory (B, S, E), tgt_mask=None, memory_mask=None) ->
    (x (B, T, E), self_weights (B, H, T, T), cross_weights (B, H, T, S))``. The causal mask
    is not built in: pass it as ``tgt_mask`` (``course_utils.attention.causal_mask(T)``).

    >>> layer = DecoderLayer(16, 4, 32).eval()
    >>> from course_utils.attention import causal_mask
    >>> out, self_w, cross_w = layer(torch.randn(2, 3, 16), torch.randn(2, 5, 16), causal_mask(3))
    >>> out.shape, self_w.shape, cross_w.shape
    (torch.Size([2, 3, 16]), torch.Size([2, 4, 3, 3]), torch.Size([2, 4, 3, 5]))
    >>> bool((self_w.triu(1) == 0).all())  # no position looks ahead
    True
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self(self, x: Tensor, mask: Mask) -> tuple[Tensor, Tensor]:
        out, weights = self.self_attn(x, x, x, mask=mask)  # (B, T, E), (B, H, T, T)
        return self.dropout1(out), weights

    def _cross(self, x: Tensor, memory: Tensor, mask: Mask) -> tuple[Tensor, Tensor]:
        # queries from the decoder, keys and values from the encoder's output
        out, weights = self.cross_attn(x, memory, memory, mask=mask)  # (B, T, E), (B, H, T, S)
        return self.dropout2(out), weights

    def forward(
        self, x: Tensor, memory: Tensor, tgt_mask: Mask = None, memory_mask: Mask = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        _check_sequence("x", x, self.d_model)
        _check_sequence("memory", memory, self.d_model)
        if self.norm_first:
            attended, self_weights = self._self(self.norm1(x), tgt_mask)
            x = x + attended
            attended, cross_weights = self._cross(self.norm2(x), memory, memory_mask)
            x = x + attended
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:
            attended, self_weights = self._self(x, tgt_mask)
            x = self.norm1(x + attended)
            attended, cross_weights = self._cross(x, memory, memory_mask)
            x = self.norm2(x + attended)
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x, self_weights, cross_weights


class Encoder(nn.Module):
    """A stack of encoder layers and an optional final LayerNorm.

    ``forward(src (B, S, E), mask=None) -> (memory (B, S, E), [weights (B, H, S, S)] per
    layer)``. ``torch.nn.Transformer`` always ends its stacks with a LayerNorm; pre-norm
    stacks need it (their residual stream is never normalised otherwise).
    """

    def __init__(self, layers: list[EncoderLayer], norm: nn.LayerNorm | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(self, x: Tensor, mask: Mask = None) -> tuple[Tensor, list[Tensor]]:
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask)
            weights.append(w)
        return (self.norm(x) if self.norm is not None else x), weights


class Decoder(nn.Module):
    """A stack of decoder layers and an optional final LayerNorm.

    ``forward(tgt (B, T, E), memory (B, S, E), tgt_mask=None, memory_mask=None) ->
    (out (B, T, E), self_weights, cross_weights)``, one weight tensor per layer in each list.
    """

    def __init__(self, layers: list[DecoderLayer], norm: nn.LayerNorm | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(
        self, x: Tensor, memory: Tensor, tgt_mask: Mask = None, memory_mask: Mask = None
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        self_weights, cross_weights = [], []
        for layer in self.layers:
            x, ws, wc = layer(x, memory, tgt_mask, memory_mask)
            self_weights.append(ws)
            cross_weights.append(wc)
        return (self.norm(x) if self.norm is not None else x), self_weights, cross_weights


# ---------------------------------------------------------------------------------------
# The embedding-free core, constructor arguments in torch.nn.Transformer's order
# ---------------------------------------------------------------------------------------
class Transformer(nn.Module):
    """Encoder-decoder Transformer on vectors (no embeddings, no output layer), batch first.

    ``forward(src (B, S, E), tgt (B, T, E), src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)
    -> (B, T, E)``. Masks use the course convention (True = may attend); key-padding masks
    are ``(B, S)`` or ``(B, T)`` with True at real tokens. ``tgt_mask`` is where the causal
    mask goes. :meth:`encode` and :meth:`decode` also return the attention weights.

    ``Transformer.from_torch(m)`` copies a batch-first ``torch.nn.Transformer`` (post-norm
    or pre-norm); convert its masks with :func:`course_utils.attention.mask_from_torch`:

    >>> m = torch.nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True).eval()
    >>> ours = Transformer.from_torch(m).eval()
    >>> src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    >>> torch_mask = m.generate_square_subsequent_mask(4)
    >>> expected = m(src, tgt, tgt_mask=torch_mask)
    >>> from course_utils.attention import mask_from_torch
    >>> got = ours(src, tgt, tgt_mask=mask_from_torch(torch_mask))
    >>> torch.allclose(got, expected, atol=1e-5)
    True
    """

    def __init__(
        self,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        final_norm: bool = True,
    ):
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}): each head gets "
                "d_model / num_heads features"
            )
        self.d_model, self.num_heads, self.norm_first = d_model, num_heads, norm_first
        args = (d_model, num_heads, d_ff, dropout, activation, layer_norm_eps, norm_first)

        def norm() -> nn.LayerNorm | None:
            return nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias) if final_norm else None

        self.encoder = Encoder(
            [EncoderLayer(*args, bias=bias) for _ in range(num_encoder_layers)], norm()
        )
        self.decoder = Decoder(
            [DecoderLayer(*args, bias=bias) for _ in range(num_decoder_layers)], norm()
        )
        for p in self.parameters():  # as torch.nn.Transformer does
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(
        self, src: Tensor, src_mask: Mask = None, src_key_padding_mask: Mask = None
    ) -> tuple[Tensor, list[Tensor]]:
        """``src (B, S, E) -> (memory (B, S, E), [self-attention weights (B, H, S, S)])``."""
        _check_sequence("src", src, self.d_model)
        B, S, _ = src.shape
        mask = with_key_padding(src_mask, src_key_padding_mask, "src_key_padding_mask", B, S)
        return self.encoder(src, mask)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Mask = None,
        memory_mask: Mask = None,
        tgt_key_padding_mask: Mask = None,
        memory_key_padding_mask: Mask = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """``tgt (B, T, E), memory (B, S, E) -> (out (B, T, E), self_weights, cross_weights)``."""
        _check_sequence("tgt", tgt, self.d_model)
        _check_sequence("memory", memory, self.d_model)
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(
                f"tgt and memory must have the same batch size, got {tuple(tgt.shape)} and "
                f"{tuple(memory.shape)}"
            )
        B, T, _ = tgt.shape
        S = memory.shape[1]
        self_mask = with_key_padding(tgt_mask, tgt_key_padding_mask, "tgt_key_padding_mask", B, T)
        cross_mask = with_key_padding(
            memory_mask, memory_key_padding_mask, "memory_key_padding_mask", B, S
        )
        return self.decoder(tgt, memory, self_mask, cross_mask)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Mask = None,
        tgt_mask: Mask = None,
        memory_mask: Mask = None,
        src_key_padding_mask: Mask = None,
        tgt_key_padding_mask: Mask = None,
        memory_key_padding_mask: Mask = None,
    ) -> Tensor:
        memory, _ = self.encode(src, src_mask, src_key_padding_mask)
        out, _, _ = self.decode(
            tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask
        )
        return out

    @classmethod
    def from_torch(cls, m: nn.Transformer) -> Transformer:
        """A copy of a batch-first ``torch.nn.Transformer`` (same weights, same outputs).

        Supported: post-norm and pre-norm, ReLU or GELU, with or without bias and final norms.
        """
        if not isinstance(m, nn.Transformer):
            raise TypeError(f"m must be a torch.nn.Transformer, got {type(m).__name__}")
        if not m.batch_first:
            raise ValueError("m must be built with batch_first=True (this course is batch-first)")
        enc, dec = m.encoder.layers, m.decoder.layers
        first = enc[0] if len(enc) else dec[0]
        activation = _activation_name(first.activation)
        bias = first.linear1.bias is not None
        new = cls(
            d_model=m.d_model,
            num_heads=m.nhead,
            num_encoder_layers=len(enc),
            num_decoder_layers=len(dec),
            d_ff=first.linear1.out_features,
            dropout=first.dropout.p,
            activation=activation,
            layer_norm_eps=first.norm1.eps,
            norm_first=first.norm_first,
            bias=bias,
            final_norm=m.encoder.norm is not None,
        )
        if (m.encoder.norm is None) != (m.decoder.norm is None):
            raise ValueError("m's encoder and decoder must both have a final norm, or neither")
        for ours, theirs in zip(new.encoder.layers, enc, strict=True):
            _copy_layer(ours, theirs, ["self_attn"])
        for ours, theirs in zip(new.decoder.layers, dec, strict=True):
            _copy_layer(ours, theirs, ["self_attn", "multihead_attn"])
        for ours, theirs in ((new.encoder, m.encoder), (new.decoder, m.decoder)):
            if theirs.norm is not None:
                ours.norm.load_state_dict(theirs.norm.state_dict())
        p = next(m.parameters())
        new = new.to(device=p.device, dtype=p.dtype)
        new.train(m.training)
        return new


def _activation_name(fn: object) -> str:
    for name, ours in ACTIVATIONS.items():
        if fn is ours or (isinstance(fn, nn.Module) and type(fn).__name__.lower() == name):
            return name
    raise ValueError(f"only relu and gelu activations are supported, got {fn!r}")


def _copy_layer(ours: nn.Module, theirs: nn.Module, attention_names: list[str]) -> None:
    """Copy one torch encoder/decoder layer's weights into ours (names mapped by hand)."""
    if _activation_name(theirs.activation) != ours.feed_forward.activation:
        raise ValueError("every layer of m must use the same activation")
    if theirs.norm_first != ours.norm_first:
        raise ValueError("every layer of m must use the same norm placement (norm_first)")
    with torch.no_grad():
        mine = {"self_attn": ours.self_attn, "multihead_attn": getattr(ours, "cross_attn", None)}
        for name in attention_names:
            copied = MultiHeadAttention.from_torch(getattr(theirs, name))
            mine[name].load_state_dict(copied.state_dict())
        ours.feed_forward.linear1.load_state_dict(theirs.linear1.state_dict())
        ours.feed_forward.linear2.load_state_dict(theirs.linear2.state_dict())
        for i in (1, 2, 3):
            if hasattr(ours, f"norm{i}"):
                getattr(ours, f"norm{i}").load_state_dict(getattr(theirs, f"norm{i}").state_dict())
