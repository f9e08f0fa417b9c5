"""A whole sequence-to-sequence Transformer: embeddings, positions, the core, an output layer.

:class:`TransformerConfig` holds everything that defines a model; :class:`TransformerSeq2Seq`
maps token ids to next-token logits through :class:`course_utils.transformer.Transformer`
and decodes greedily or with beam search. Train it with
:func:`course_utils.training.smoothed_seq2seq_loss` and the warm-up of
:func:`course_utils.training.noam_rate`.

Shape legend: ``B`` batch, ``S`` source length, ``T`` target length, ``E`` = ``d_model``,
``V`` vocabulary size, ``K`` beam size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import check_src
from course_utils.attention import causal_mask
from course_utils.data import lengths_to_mask
from course_utils.positional import sinusoidal_encoding
from course_utils.transformer import Transformer


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
        check_src(src, src_len)
        keys = lengths_to_mask(src_len, src.shape[1])  # (B, S), True at real tokens
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
