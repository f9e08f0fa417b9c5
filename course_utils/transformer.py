"""The Transformer (Vaswani et al., 2017): layers, the encoder-decoder core, a seq2seq model.

Read top to bottom: the position-wise ``FeedForward``; ``EncoderLayer`` and ``DecoderLayer``
(attention and feed-forward sublayers, each wrapped in a residual connection and a
LayerNorm, after the sublayer or before it); the ``Encoder`` and ``Decoder`` stacks; the
embedding-free ``Transformer`` core, which ``Transformer.from_torch`` copies from
``torch.nn.Transformer``; then ``TransformerSeq2Seq`` (embeddings, positions, output layer,
greedy and beam-search decoding), its label-smoothed loss and the warm-up learning rate.

Masks follow the course convention: boolean, ``True`` = this position may be attended to.
PyTorch's boolean masks mean the opposite (``True`` = blocked) and its float masks are added
to the scores; :func:`mask_from_torch` converts both. Attention masks are ``(L, S)``,
``(B, L, S)`` or ``(B, H, L, S)``; key-padding masks are ``(B, S)``, ``True`` at real tokens
(what :attr:`course_utils.data.Batch.src_mask` gives).

Shape legend: ``B`` batch, ``S`` source length, ``T`` target length, ``E`` = ``d_model``,
``F`` = ``dim_feedforward``, ``H`` heads, ``V`` vocabulary size, ``K`` beam size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, causal_mask
from .positional import sinusoidal_encoding

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


# ---------------------------------------------------------------------------------------
# Input checks and masks
# ---------------------------------------------------------------------------------------
def _check_sequence(name: str, x, d_model: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d_model or not x.is_floating_point():
        raise ValueError(
            f"{name} must be a float tensor (B, L, {d_model}) (batch first), got shape "
            f"{tuple(x.shape)} and dtype {x.dtype}"
        )


def _combine(attn_mask, padding_mask, name: str, batch: int, length: int):
    """An attention mask and a ``(B, S)`` key-padding mask -> one mask (or None)."""
    if padding_mask is None:
        return attn_mask
    if not isinstance(padding_mask, torch.Tensor) or padding_mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = real token), got "
            f"{type(padding_mask).__name__} {getattr(padding_mask, 'dtype', '')}"
        )
    if padding_mask.shape != (batch, length):
        raise ValueError(
            f"{name} must have shape (B, S) = {(batch, length)}, got {tuple(padding_mask.shape)}"
        )
    keys = padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S): the same for every query
    if attn_mask is None:
        return keys
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
        raise TypeError(
            f"attention masks must be boolean (True = may attend), got "
            f"{getattr(attn_mask, 'dtype', type(attn_mask).__name__)}"
        )
    if attn_mask.dim() == 3:  # (B, L, S) -> (B, 1, L, S), so it broadcasts over heads
        attn_mask = attn_mask[:, None]
    return attn_mask & keys


def mask_from_torch(mask: torch.Tensor) -> torch.Tensor:
    """A PyTorch attention or key-padding mask in the course convention (True = may attend).

    PyTorch's boolean masks are ``True`` where attention is *blocked*, so they are inverted.
    Its float masks are added to the scores: ``0`` keeps a position, ``-inf`` blocks it; other
    values are biases, which a boolean mask cannot express, and raise ``ValueError``.

    >>> torch_mask = torch.nn.Transformer.generate_square_subsequent_mask(3)
    >>> mask_from_torch(torch_mask)
    tensor([[ True, False, False],
            [ True,  True, False],
            [ True,  True,  True]])
    >>> mask_from_torch(torch.tensor([[False, True]]))  # key padding: True = <pad> in torch
    tensor([[ True, False]])
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        blocked = torch.isneginf(mask)
        if not ((mask == 0) | blocked).all():
            raise ValueError("a float mask must hold only 0 (keep) and -inf (block) values")
        return ~blocked
    raise TypeError(f"mask must be boolean or float, got dtype {mask.dtype}")


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------
class FeedForward(nn.Module):
    """Position-wise feed-forward network ``linear2(dropout(activation(linear1(x))))``.

    ``(..., E) -> (..., E)`` through a hidden size ``F``, the same at every position.

    >>> ff = FeedForward(8, 32)
    >>> ff(torch.randn(2, 5, 8)).shape
    torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        d_model: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = ACTIVATIONS[self.activation](self.linear1(x))  # (..., E) -> (..., F)
        return self.linear2(self.dropout(hidden))  # (..., F) -> (..., E)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each sublayer has a residual connection and a norm.

    Post-norm (``norm_first=False``, the paper): ``x = norm(x + sublayer(x))``.
    Pre-norm (``norm_first=True``, most models today): ``x = x + sublayer(norm(x))``.
    ``forward(x (B, S, E), mask=None) -> (x (B, S, E), weights (B, H, S, S))``.

    >>> layer = EncoderLayer(16, 4, 32).eval()
    >>> out, weights = layer(torch.randn(2, 5, 16))
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout)
        self.feed_forward = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def _attend(self, x, mask):
        out, weights = self.self_attn(x, x, x, mask=mask)  # (B, S, E), (B, H, S, S)
        return self.dropout1(out), weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
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
    >>> out, self_w, cross_w = layer(torch.randn(2, 3, 16), torch.randn(2, 5, 16), causal_mask(3))
    >>> out.shape, self_w.shape, cross_w.shape
    (torch.Size([2, 3, 16]), torch.Size([2, 4, 3, 3]), torch.Size([2, 4, 3, 5]))
    >>> bool((self_w.triu(1) == 0).all())  # no position looks ahead
    True
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout)
        self.feed_forward = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self(self, x, mask):
        out, weights = self.self_attn(x, x, x, mask=mask)  # (B, T, E), (B, H, T, T)
        return self.dropout1(out), weights

    def _cross(self, x, memory, mask):
        # queries from the decoder, keys and values from the encoder's output
        out, weights = self.cross_attn(x, memory, memory, mask=mask)  # (B, T, E), (B, H, T, S)
        return self.dropout2(out), weights

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ):
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
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

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        self_weights, cross_weights = [], []
        for layer in self.layers:
            x, ws, wc = layer(x, memory, tgt_mask, memory_mask)
            self_weights.append(ws)
            cross_weights.append(wc)
        return (self.norm(x) if self.norm is not None else x), self_weights, cross_weights


# ---------------------------------------------------------------------------------------
# The embedding-free core, constructor arguments as in torch.nn.Transformer
# ---------------------------------------------------------------------------------------
class Transformer(nn.Module):
    """Encoder-decoder Transformer on vectors (no embeddings, no output layer), batch first.

    ``forward(src (B, S, E), tgt (B, T, E), src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)
    -> (B, T, E)``. Masks use the course convention (True = may attend); key-padding masks
    are ``(B, S)`` or ``(B, T)`` with True at real tokens. ``tgt_mask`` is where the causal
    mask goes. :meth:`encode` and :meth:`decode` also return the attention weights.

    ``Transformer.from_torch(m)`` copies a batch-first ``torch.nn.Transformer`` (post-norm
    or pre-norm); convert its masks with :func:`mask_from_torch`:

    >>> m = torch.nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True).eval()
    >>> ours = Transformer.from_torch(m).eval()
    >>> src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    >>> torch_mask = m.generate_square_subsequent_mask(4)
    >>> expected = m(src, tgt, tgt_mask=torch_mask)
    >>> got = ours(src, tgt, tgt_mask=mask_from_torch(torch_mask))
    >>> torch.allclose(got, expected, atol=1e-5)
    True
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        final_norm: bool = True,
    ):
        super().__init__()
        if not isinstance(d_model, int) or not isinstance(nhead, int) or d_model <= 0 or nhead <= 0:
            raise ValueError(f"d_model and nhead must be positive ints, got {d_model!r}, {nhead!r}")
        if d_model % nhead != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by nhead ({nhead}): each head gets "
                "d_model / nhead features"
            )
        self.d_model, self.nhead, self.norm_first = d_model, nhead, norm_first
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first)

        def norm():
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

    def encode(self, src, src_mask=None, src_key_padding_mask=None):
        """``src (B, S, E) -> (memory (B, S, E), [self-attention weights (B, H, S, S)])``."""
        _check_sequence("src", src, self.d_model)
        B, S, _ = src.shape
        mask = _combine(src_mask, src_key_padding_mask, "src_key_padding_mask", B, S)
        return self.encoder(src, mask)

    def decode(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
    ):
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
        self_mask = _combine(tgt_mask, tgt_key_padding_mask, "tgt_key_padding_mask", B, T)
        cross_mask = _combine(memory_mask, memory_key_padding_mask, "memory_key_padding_mask", B, S)
        return self.decoder(tgt, memory, self_mask, cross_mask)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
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
            nhead=m.nhead,
            num_encoder_layers=len(enc),
            num_decoder_layers=len(dec),
            dim_feedforward=first.linear1.out_features,
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


def _activation_name(fn) -> str:
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


# ---------------------------------------------------------------------------------------
# A whole sequence-to-sequence model: embeddings, positions, the core, an output layer
# ---------------------------------------------------------------------------------------
@dataclass
class TransformerConfig:
    """Everything that defines a :class:`TransformerSeq2Seq`.

    The defaults are a small model for the course's toy tasks; the paper's base model is
    ``d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048,
    dropout=0.1`` with a shared 37000-token vocabulary (``share_embeddings=True``).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.1
    norm_first: bool = False
    max_len: int = 256
    share_embeddings: bool = False  # source, target and output share one matrix (one vocab)
    tie_output: bool = True  # the output layer reuses the target embedding matrix
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


def _check_src(src, src_len) -> None:
    for name, x, dims in (("src", src, 2), ("src_len", src_len, 1)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != dims or x.dtype != torch.long:
            raise ValueError(
                f"{name} must be a {dims}-D long tensor, got shape {tuple(x.shape)} and "
                f"dtype {x.dtype}"
            )
    if src_len.shape[0] != src.shape[0]:
        raise ValueError(
            f"src_len must have shape (B,) = ({src.shape[0]},), got {tuple(src_len.shape)}"
        )
    if len(src_len) and (int(src_len.min()) < 1 or int(src_len.max()) > src.shape[1]):
        raise ValueError(f"src_len values must lie in 1..{src.shape[1]} (the width of src)")


class TransformerSeq2Seq(nn.Module):
    """Token ids in, next-token logits out: embeddings x sqrt(E) + sinusoidal positions,
    the :class:`Transformer` core, and a linear layer to the target vocabulary.

    Same interface as :class:`course_utils.seq2seq.Seq2Seq`, so ``seq2seq_loss`` and
    ``accuracy_by_length`` work with it: ``forward(src (B, S), src_len (B,), tgt_in (B, T))
    -> logits (B, T, V)``, ``greedy_decode(src, src_len, max_len)``, plus ``beam_search``.

    >>> model = TransformerSeq2Seq(TransformerConfig(src_vocab_size=10, tgt_vocab_size=10))
    >>> src, src_len = torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([3, 2])
    >>> model(src, src_len, torch.tensor([[1, 7], [1, 9]])).shape
    torch.Size([2, 2, 10])
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        if c.share_embeddings and c.src_vocab_size != c.tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs one vocabulary, got src_vocab_size "
                f"{c.src_vocab_size} and tgt_vocab_size {c.tgt_vocab_size}"
            )
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        self.transformer = Transformer(
            c.d_model,
            c.num_heads,
            c.num_encoder_layers,
            c.num_decoder_layers,
            c.d_ff,
            c.dropout,
            norm_first=c.norm_first,
        )
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        # The paper's scale: embeddings ~ N(0, 1/E), multiplied by sqrt(E) on the way in.
        # A list, not a set: a set of modules iterates in memory-address order, so the two
        # tables would draw their random values in an order that changes from run to run.
        embeds = [self.src_embed] if c.share_embeddings else [self.src_embed, self.tgt_embed]
        for embed in embeds:
            nn.init.normal_(embed.weight, std=c.d_model**-0.5)
            with torch.no_grad():
                embed.weight[c.pad_id].zero_()  # <pad> embeds to zero, as padding_idx intends
        self.out = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.tie_output or c.share_embeddings:
            self.out.weight = self.tgt_embed.weight  # one (V, E) matrix, two uses
        self.register_buffer("pe", sinusoidal_encoding(c.max_len, c.d_model), persistent=False)
        self.dropout = nn.Dropout(c.dropout)

    def _embed(self, embed: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        L = ids.shape[1]
        if L > self.config.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len {self.config.max_len}")
        x = embed(ids) * math.sqrt(self.config.d_model)  # (B, L) -> (B, L, E)
        return self.dropout(x + self.pe[:L])  # positions broadcast over the batch

    def encode(self, src: torch.Tensor, src_len: torch.Tensor):
        """``src (B, S), src_len (B,) -> (memory (B, S, E), key mask (B, S), enc weights)``."""
        _check_src(src, src_len)
        keys = torch.arange(src.shape[1], device=src.device)[None, :] < src_len[:, None]
        memory, weights = self.transformer.encode(
            self._embed(self.src_embed, src), src_key_padding_mask=keys
        )
        return memory, keys, weights

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_keys: torch.Tensor):
        """``tgt_in (B, T)`` -> ``(logits (B, T, V), self_weights, cross_weights)``."""
        T = tgt_in.shape[1]
        out, self_w, cross_w = self.transformer.decode(
            self._embed(self.tgt_embed, tgt_in),
            memory,
            tgt_mask=causal_mask(T, device=tgt_in.device),  # no peeking at later targets
            memory_key_padding_mask=src_keys,  # no attending to source padding
        )
        return self.out(out), self_w, cross_w

    def forward_with_attention(self, src, src_len, tgt_in):
        """Like ``forward``, plus ``{"encoder", "decoder", "cross"}`` weight lists per layer."""
        if not isinstance(tgt_in, torch.Tensor) or tgt_in.dim() != 2:
            raise ValueError(
                f"tgt_in must be a 2-D tensor (B, T), got {tuple(getattr(tgt_in, 'shape', ()))}"
            )
        memory, keys, enc_w = self.encode(src, src_len)
        logits, self_w, cross_w = self.decode(tgt_in, memory, keys)
        return logits, {"encoder": enc_w, "decoder": self_w, "cross": cross_w}

    def forward(self, src, src_len, tgt_in) -> torch.Tensor:
        """Teacher forcing: ``src (B, S), src_len (B,), tgt_in (B, T) -> logits (B, T, V)``."""
        return self.forward_with_attention(src, src_len, tgt_in)[0]

    @torch.no_grad()
    def greedy_decode(self, src, src_len, max_len: int) -> torch.Tensor:
        """Feed back the most likely token -> ids (B, T <= max_len), as ``Seq2Seq`` does.

        The output starts after ``<bos>`` and includes each ``<eos>``; later positions hold
        ``<pad>``. The encoder runs once; the decoder re-reads the prefix at every step.
        """
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        was_training = self.training
        self.eval()
        memory, keys, _ = self.encode(src, src_len)  # the encoder runs once
        B = src.shape[0]
        seqs = torch.full((B, 1), self.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
        for _ in range(max_len):
            logits, _, _ = self.decode(seqs, memory, keys)  # (B, t, V)
            token = logits[:, -1].argmax(dim=-1)  # only the last position is new: (B,)
            token = token.masked_fill(done, self.pad_id)  # finished examples emit <pad>
            seqs = torch.cat([seqs, token[:, None]], dim=1)  # (B, t + 1)
            done = done | (token == self.eos_id)
            if bool(done.all()):
                break
        self.train(was_training)
        return seqs[:, 1:]  # drop <bos>: (B, T)

    @torch.no_grad()
    def beam_search(
        self,
        src,
        src_len,
        max_len: int,
        beam_size: int = 4,
        length_penalty: float = 0.0,
        return_scores: bool = False,
    ):
        """Keep the ``beam_size`` most probable prefixes at each step -> ids (B, T).

        A prefix's score is the sum of its tokens' log-probabilities; a finished one (it
        emitted ``<eos>``) keeps its score and competes with the live ones. At the end each
        example returns the hypothesis with the best ``score / ((5 + n) / 6) **
        length_penalty`` (Wu et al., 2016; ``n`` tokens counting ``<eos>``), so
        ``length_penalty=0`` compares raw scores and larger values favour longer outputs.
        ``beam_size=1`` is greedy decoding. With ``return_scores``, also the chosen
        hypotheses' log-probabilities (B,).

        >>> model = TransformerSeq2Seq(TransformerConfig(9, 9, d_model=16, num_heads=2)).eval()
        >>> src, src_len = torch.tensor([[4, 5, 6]]), torch.tensor([3])
        >>> torch.equal(model.beam_search(src, src_len, 5, beam_size=1),
        ...             model.greedy_decode(src, src_len, 5))
        True
        """
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
        was_training = self.training
        self.eval()
        memory, keys, _ = self.encode(src, src_len)
        B, K, dev = src.shape[0], beam_size, src.device
        # Every example gets K rows: (B, ...) -> (B*K, ...)
        memory = memory.repeat_interleave(K, dim=0)  # (B*K, S, E)
        keys = keys.repeat_interleave(K, dim=0)  # (B*K, S)
        seqs = torch.full((B * K, 1), self.bos_id, dtype=torch.long, device=dev)  # (B*K, 1)
        scores = torch.zeros(B, K, device=dev)
        scores[:, 1:] = float("-inf")  # at the start only one beam is live: no duplicates
        done = torch.zeros(B * K, dtype=torch.bool, device=dev)
        lengths = torch.zeros(B * K, device=dev)  # tokens so far, <eos> included
        for _ in range(max_len):
            logits, _, _ = self.decode(seqs, memory, keys)
            logp = logits[:, -1].float().log_softmax(dim=-1)  # (B*K, V)
            V = logp.shape[-1]
            # A finished hypothesis can only be extended by <pad>, at no cost.
            finished = torch.full_like(logp, float("-inf"))
            finished[:, self.pad_id] = 0.0
            logp = torch.where(done[:, None], finished, logp)
            candidates = scores.reshape(B * K, 1) + logp  # (B*K, V)
            best, index = candidates.reshape(B, K * V).topk(K, dim=-1)  # (B, K)
            parent = index // V + torch.arange(B, device=dev)[:, None] * K  # rows in (B*K)
            token = (index % V).reshape(B * K)  # (B*K,)
            parent = parent.reshape(B * K)
            seqs = torch.cat([seqs[parent], token[:, None]], dim=1)  # (B*K, t+1)
            lengths = lengths[parent] + (~done[parent]).float()
            done = done[parent] | (token == self.eos_id)
            scores = best  # (B, K), best first
            if bool(done.all()):
                break
            # Without a length penalty, scores only fall as prefixes grow: once an example's
            # best hypothesis has finished, no live one can overtake it.
            if length_penalty == 0.0 and bool(done.reshape(B, K)[:, 0].all()):
                break
        penalty = ((5.0 + lengths) / 6.0) ** length_penalty  # (B*K,)
        ranked = (scores.reshape(B * K) / penalty).reshape(B, K)
        pick = ranked.argmax(dim=-1) + torch.arange(B, device=dev) * K  # (B,)
        self.train(was_training)
        out = seqs[pick, 1:]  # drop <bos>: (B, T)
        out = out[:, : int(lengths[pick].max())]  # columns after every chosen <eos> are <pad>
        if return_scores:
            return out, scores.reshape(B * K)[pick]
        return out


# ---------------------------------------------------------------------------------------
# Training: label-smoothed loss and the warm-up learning rate
# ---------------------------------------------------------------------------------------
def label_smoothed_loss(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int, smoothing: float = 0.1
) -> torch.Tensor:
    """Cross-entropy against ``(1 - smoothing) * one_hot + smoothing / V``, mean over non-pad.

    ``logits (B, T, V), targets (B, T) -> scalar``; equals ``F.cross_entropy(...,
    ignore_index=pad_id, label_smoothing=smoothing)``. ``smoothing=0`` is plain cross-entropy.

    >>> logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    >>> round(label_smoothed_loss(logits, torch.tensor([[0, 1]]), pad_id=1, smoothing=0.0).item(), 4)
    0.2395
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(
            f"logits must be a 3-D tensor (B, T, V), got shape {tuple(getattr(logits, 'shape', ()))}"
        )
    if not isinstance(targets, torch.Tensor) or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"targets must have shape (B, T) = {tuple(logits.shape[:2])}, got "
            f"{tuple(getattr(targets, 'shape', ()))}"
        )
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    B, T, V = logits.shape
    return F.cross_entropy(
        logits.reshape(B * T, V),
        targets.reshape(B * T),
        ignore_index=pad_id,
        label_smoothing=smoothing,
    )


def smoothed_seq2seq_loss(smoothing: float = 0.1):
    """A ``loss_fn`` for :func:`course_utils.training.fit` with label smoothing."""

    def loss_fn(model, batch):
        logits = model(batch.src, batch.src_len, batch.tgt_in)  # (B, T, V)
        return label_smoothed_loss(logits, batch.tgt_out, model.pad_id, smoothing)

    return loss_fn


def noam_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The paper's learning rate: ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    Rises linearly for ``warmup_steps`` steps, then falls as ``1 / sqrt(step)``; step 1 is
    the first optimiser step.

    >>> round(noam_rate(4000, d_model=512, warmup_steps=4000), 6)  # the peak
    0.000699
    """
    if step < 1 or warmup_steps < 1 or d_model < 1:
        raise ValueError(
            f"step, warmup_steps and d_model must be positive, got {step}, {warmup_steps}, "
            f"{d_model}"
        )
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_optimizer(
    params, d_model: int, warmup_steps: int, factor: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(betas 0.9, 0.98, eps 1e-9) whose learning rate follows :func:`noam_rate`.

    The schedule advances after every ``optimizer.step()`` by itself (a step hook), so the
    optimiser can be handed to :func:`course_utils.training.fit` as it is.

    >>> w = nn.Parameter(torch.zeros(2))
    >>> optimizer, _ = noam_optimizer([w], d_model=64, warmup_steps=10)
    >>> for _ in range(3):
    ...     w.grad = torch.ones(2)
    ...     optimizer.step()
    >>> optimizer.param_groups[0]["lr"] == noam_rate(4, 64, 10)  # the rate for the next step
    True
    """
    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR multiplies lr=1.0 by the rate; its counter starts at 0, the rate at step 1.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: noam_rate(i + 1, d_model, warmup_steps, factor)
    )
    optimizer.register_step_post_hook(lambda *_: scheduler.step())
    return optimizer, scheduler
