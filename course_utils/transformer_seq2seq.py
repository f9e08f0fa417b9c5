"""A whole sequence-to-sequence Transformer: embeddings, positions, the core, an output layer.

:class:`TransformerConfig` holds everything that defines a model; :class:`TransformerSeq2Seq`
maps token ids to next-token logits through :class:`course_utils.transformer.Transformer`
and follows the ``start`` / ``step`` protocol of :mod:`course_utils.decoding`, so
``decoding.greedy_decode`` and ``decoding.beam_search`` decode it. Train it with
:func:`course_utils.training.smoothed_seq2seq_loss` and the warm-up of
:func:`course_utils.training.noam_rate`.

Shapes follow the legend in :mod:`course_utils`: ``B`` batch, ``S`` source length, ``T``
target length, ``E`` = ``d_model``, ``H`` heads, ``V`` vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_src
from course_utils.attention import causal_mask
from course_utils.config import ModelConfig
from course_utils.data import BOS_ID, EOS_ID, PAD_ID, lengths_to_mask
from course_utils.positional import sinusoidal_encoding
from course_utils.transformer import Transformer

State = tuple[torch.Tensor, ...]


# ---------------------------------------------------------------------------------------
# A whole sequence-to-sequence model: embeddings, positions, the core, an output layer
# ---------------------------------------------------------------------------------------
@dataclass
class TransformerConfig(ModelConfig):
    """Everything that defines a :class:`TransformerSeq2Seq`; build it with
    ``TransformerConfig.from_vocab(src_vocab, tgt_vocab, d_model=..., ...)``, which takes the
    special-token ids from the vocabularies. ``max_len`` is the size of the position table:
    the longest sequence the model can read.

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
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID


class TransformerSeq2Seq(nn.Module):
    """Token ids in, next-token logits out: embeddings x sqrt(E) + sinusoidal positions,
    the :class:`Transformer` core, and a linear layer to the target vocabulary.

    Same interface as :class:`course_utils.seq2seq.Seq2Seq`, so ``seq2seq_loss``,
    ``metrics.accuracy_by_length`` and :mod:`course_utils.decoding` work with it:
    ``forward(src (B, S), src_len (B,), tgt_in (B, T)) -> logits (B, T, V)``,
    ``forward_with_attention``, and ``start`` / ``step``.

    >>> from course_utils.data import Batch, letter_vocab
    >>> from course_utils.decoding import beam_search, greedy_decode
    >>> config = TransformerConfig.from_vocab(letter_vocab(7), d_model=16, num_heads=2)
    >>> model = TransformerSeq2Seq(config)
    >>> src, src_len = torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([3, 2])
    >>> model(src, src_len, torch.tensor([[1, 7], [1, 9]])).shape
    torch.Size([2, 2, 10])
    >>> batch = Batch(src, src_len, src, src)
    >>> torch.equal(beam_search(model, batch, 5, beam_size=1).ids, greedy_decode(model, batch, 5).ids)
    True
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
        self.src_embed = CheckedEmbedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else CheckedEmbedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
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

    def encode(
        self, src: torch.Tensor, src_len: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """``src (B, S), src_len (B,) -> (memory (B, S, E), src_mask (B, S), enc weights)``.

        The model's boundary: ``src_len`` is checked here and the padding mask built from it
        once, named ``src_mask`` as ``Batch.src_mask``; the core takes it under PyTorch's
        name for a key-padding mask and checks it once more, as it would a mask of yours."""
        check_src(src, src_len)
        src_mask = lengths_to_mask(src_len, src.shape[1])  # (B, S), True at real tokens
        memory, weights = self.transformer.encode(
            self._embed(self.src_embed, src), src_key_padding_mask=src_mask
        )
        return memory, src_mask, weights

    def decode(
        self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """``tgt_in (B, T)`` -> ``(logits (B, T, V), self_weights, cross_weights)``."""
        T = tgt_in.shape[1]
        out, self_w, cross_w = self.transformer.decode(
            self._embed(self.tgt_embed, tgt_in),
            memory,
            tgt_mask=causal_mask(T, device=tgt_in.device),  # no peeking at later targets
            memory_key_padding_mask=src_mask,  # no attending to source padding
        )
        return self.out(out), self_w, cross_w

    def attention_by_layer(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, list[torch.Tensor]]:
        """Every attention map, teacher-forced: ``{"encoder", "decoder", "cross"}``, each a
        list with one ``(B, H, L, S)`` tensor per layer (queries ``L``: S, T and T)."""
        return self._run(src, src_len, tgt_in)[1]

    def forward_with_attention(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing -> ``(logits (B, T, V), weights (B, T, S))``: the source attention
        of the last decoder layer, averaged over its heads (what ``step`` returns too)."""
        logits, weights = self._run(src, src_len, tgt_in)
        return logits, weights["cross"][-1].mean(dim=1)

    def _run(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]]]:
        if not isinstance(tgt_in, torch.Tensor) or tgt_in.dim() != 2:
            raise ValueError(
                f"tgt_in must be a 2-D tensor (B, T), got {tuple(getattr(tgt_in, 'shape', ()))}"
            )
        memory, src_mask, enc_w = self.encode(src, src_len)
        logits, self_w, cross_w = self.decode(tgt_in, memory, src_mask)
        return logits, {"encoder": enc_w, "decoder": self_w, "cross": cross_w}

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: ``src (B, S), src_len (B,), tgt_in (B, T) -> logits (B, T, V)``."""
        return self._run(src, src_len, tgt_in)[0]

    # The decoding protocol of course_utils.decoding. The encoder runs once; at every step the
    # decoder re-reads the whole prefix (no key/value cache: notebook 17 adds one).
    def start(self, batch: object) -> State:
        """Encode ``batch.src`` once -> ``(memory (B, S, E), src_mask (B, S), prefix (B, 0))``."""
        memory, src_mask, _ = self.encode(batch.src, batch.src_len)
        prefix = torch.empty(memory.shape[0], 0, dtype=torch.long, device=memory.device)
        return memory, src_mask, prefix

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        """``tokens`` (B,) -> ``(log_probs (B, V), state, weights (B, S))``, the weights being
        the last decoder layer's source attention at this step, averaged over its heads."""
        memory, src_mask, prefix = state
        prefix = torch.cat([prefix, tokens[:, None]], dim=1)  # (B, t)
        logits, _, cross = self.decode(prefix, memory, src_mask)  # (B, t, V)
        weights = cross[-1][:, :, -1].mean(dim=1)  # (B, H, t, S) -> (B, S)
        return logits[:, -1].log_softmax(dim=-1), (memory, src_mask, prefix), weights
