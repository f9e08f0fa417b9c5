"""The GRU encoder-decoder of :mod:`course_utils.seq2seq` plus additive (Bahdanau) attention.

The encoder is the same :class:`~course_utils.seq2seq.GRUEncoder`. The decoder no longer has to
make do with the encoder's final state: at every output step it scores *all* encoder states
against its previous state, takes their attention-weighted sum (the context), and reads that
context together with the previous token (Bahdanau, Cho & Bengio, 2015):

* ``weights = masked_softmax(score(s_prev, states), src_mask)``, the score being
  :class:`~course_utils.attention.AdditiveScore` and the mask hiding the source padding;
* ``context = weights @ states``;
* ``s = GRUCell([embedding(y_prev), context], s_prev)``;
* ``logits = Linear([s, context])``.

:class:`AttentionSeq2Seq` has :class:`~course_utils.seq2seq.Seq2Seq`'s interface
(teacher-forced ``forward`` -> logits, the ``start`` / ``step`` decoding protocol of
:mod:`course_utils.decoding`), so ``seq2seq_loss``, ``metrics.accuracy_by_length`` and
``decoding.greedy_decode`` / ``beam_search`` work with it; its ``step`` and
``forward_with_attention`` also return where it looked.

Shapes follow the legend in :mod:`course_utils`: ``B`` batch, ``S`` source length, ``T``
target length, ``E`` embedding size, ``R`` decoder (GRU) state size, ``C`` size of the
encoder states it attends to (``enc_dim``, R by default), ``A`` attention hidden size,
``V`` vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_bool_mask, check_ids
from course_utils.attention import AdditiveScore, attend, masked_softmax
from course_utils.data import lengths_to_mask
from course_utils.seq2seq import GRUEncoderDecoder, Seq2SeqConfig

State = tuple[torch.Tensor, ...]


@dataclass
class BahdanauConfig(Seq2SeqConfig):
    """:class:`~course_utils.seq2seq.Seq2SeqConfig` plus ``attn_dim`` (A), the additive
    score's hidden size (``None``: ``rnn_dim``); build it with ``from_vocab``."""

    attn_dim: int | None = None


# ---------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------


def _check_encoder_side(
    B: int, hidden: torch.Tensor, enc_states: torch.Tensor, src_mask: torch.Tensor
) -> None:
    """``hidden`` (B, R), ``enc_states`` (B, S, C) and a boolean ``src_mask`` (B, S)."""
    for name, x, dims in (("hidden", hidden, 2), ("enc_states", enc_states, 3)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != dims or x.shape[0] != B:
            raise ValueError(
                f"{name} must have {dims} dims with batch size {B}, got {tuple(x.shape)}"
            )
    check_bool_mask("src_mask", src_mask, "True = real token")
    if src_mask.shape != enc_states.shape[:2]:
        raise ValueError(
            f"src_mask must have shape (B, S) = {tuple(enc_states.shape[:2])} to match "
            f"enc_states {tuple(enc_states.shape)}, got {tuple(src_mask.shape)}"
        )


# ---------------------------------------------------------------------------------------
# One look at the source, the decoder that looks at every step, and the whole model
# ---------------------------------------------------------------------------------------


class AttentionDecoder(nn.Module):
    """Embedding + additive attention + GRU cell + a read-out from ``[state, context]``.

    At step ``t`` the query is the previous decoder state ``s_{t-1}``; the GRU cell reads
    ``[embedding(y_{t-1}), context_t]``, and the logits come from ``[s_t, context_t]``.
    ``enc_dim`` (C) and ``attn_dim`` (A) default to ``rnn_dim``.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        rnn_dim: int,
        pad_id: int,
        enc_dim: int | None = None,
        attn_dim: int | None = None,
    ):
        super().__init__()
        enc_dim = rnn_dim if enc_dim is None else enc_dim
        attn_dim = rnn_dim if attn_dim is None else attn_dim
        self.rnn_dim, self.enc_dim = rnn_dim, enc_dim
        self.embedding = CheckedEmbedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.attention = AdditiveScore(rnn_dim, enc_dim, attn_dim)
        self.rnn = nn.GRUCell(emb_dim + enc_dim, rnn_dim)
        self.out = nn.Linear(rnn_dim + enc_dim, vocab_size)

    def step(
        self,
        token: torch.Tensor,
        hidden: torch.Tensor,
        enc_states: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoding step: ``token`` (B,) ids, ``hidden`` (B, R) = ``s_{t-1}``.

        Returns ``(logits (B, V), hidden (B, R) = s_t, weights (B, S))``.
        """
        context, weights = attend(hidden, enc_states, self.attention, src_mask)  # (B, C), (B, S)
        y = self.embedding(token)  # (B,) -> (B, E)
        hidden = self.rnn(torch.cat([y, context], dim=-1), hidden)  # (B, E + C) -> (B, R)
        logits = self.out(torch.cat([hidden, context], dim=-1))  # (B, R + C) -> (B, V)
        return logits, hidden, weights

    def forward(
        self,
        tgt_in: torch.Tensor,
        hidden: torch.Tensor,
        enc_states: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher forcing over ``tgt_in`` (B, T), starting from ``hidden`` (B, R).

        Returns ``(logits (B, T, V), hidden (B, R), weights (B, T, S))``.
        """
        check_ids("tgt_in", tgt_in)
        _check_encoder_side(tgt_in.shape[0], hidden, enc_states, src_mask)
        if hidden.shape[1] != self.rnn_dim or enc_states.shape[2] != self.enc_dim:
            raise ValueError(
                f"expected hidden (B, {self.rnn_dim}) and enc_states (B, S, {self.enc_dim}), "
                f"got {tuple(hidden.shape)} and {tuple(enc_states.shape)}"
            )
        # The keys W_k k_j are the same at every step: project them once per sequence. Each
        # step below then equals self.step (a test checks), only cheaper.
        keys = self.attention.w_k(enc_states)  # (B, S, C) -> (B, S, A)
        y = self.embedding(tgt_in)  # (B, T) -> (B, T, E)
        states, contexts, weights = [], [], []
        # note: a loop, not one nn.GRU call: each step's input needs the context, and the
        # context needs the previous step's state.
        for t in range(tgt_in.shape[1]):
            q = self.attention.w_q(hidden).unsqueeze(1)  # (B, R) -> (B, 1, A)
            scores = self.attention.v(torch.tanh(q + keys)).squeeze(-1)  # (B, S, A) -> (B, S)
            step_weights = masked_softmax(scores, src_mask)  # (B, S)
            context = (step_weights.unsqueeze(1) @ enc_states).squeeze(1)  # (B, 1, S) @ (B, S, C)
            hidden = self.rnn(torch.cat([y[:, t], context], dim=-1), hidden)  # (B, R)
            states.append(hidden)
            contexts.append(context)
            weights.append(step_weights)
        # The read-out does not feed back into the loop, so it runs once over all steps.
        readout = torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1)
        logits = self.out(readout)  # (B, T, R + C) -> (B, T, V)
        return logits, hidden, torch.stack(weights, dim=1)  # (B, T, V), (B, R), (B, T, S)


class AttentionSeq2Seq(GRUEncoderDecoder):
    """:class:`~course_utils.seq2seq.Seq2Seq` whose decoder attends over every encoder state.

    >>> from course_utils.data import Batch, letter_vocab
    >>> from course_utils.decoding import greedy_decode
    >>> model = AttentionSeq2Seq(BahdanauConfig.from_vocab(letter_vocab(5), emb_dim=4, rnn_dim=6))
    >>> src, src_len = torch.tensor([[5, 6, 7], [5, 4, 0]]), torch.tensor([3, 2])
    >>> model(src, src_len, torch.tensor([[1, 7], [1, 4]])).shape
    torch.Size([2, 2, 8])
    >>> out = greedy_decode(model, Batch(src, src_len, src, src), max_steps=4)
    >>> out.weights.shape[0], out.weights.shape[2], out.weights[1, 0, 2].item()  # pad gets 0
    (2, 3, 0.0)
    """

    config_type = BahdanauConfig

    def __init__(self, config: BahdanauConfig):
        super().__init__(config)  # the config, the ids and the encoder, built first
        c = config
        self.decoder = AttentionDecoder(
            c.tgt_vocab_size,
            c.emb_dim,
            c.rnn_dim,
            c.pad_id,
            enc_dim=c.rnn_dim,
            attn_dim=c.attn_dim,
        )

    def forward_with_attention(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing -> ``(logits (B, T, V), weights (B, T, S))``."""
        self.check_inputs(src, src_len, tgt_in)
        states, final = self.encoder(src, src_len)  # (B, S, R), (B, R)
        src_mask = lengths_to_mask(src_len, src.shape[1])  # (B, S)
        logits, _, weights = self.decoder(tgt_in, final, states, src_mask)
        return logits, weights

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: ``src`` (B, S), ``src_len`` (B,), ``tgt_in`` (B, T) -> (B, T, V)."""
        return self.forward_with_attention(src, src_len, tgt_in)[0]

    # The decoding protocol of course_utils.decoding
    def start(self, batch: object) -> State:
        """Encode ``batch.src`` once -> ``(hidden (B, R), states (B, S, R), batch.src_mask (B, S))``."""
        states, hidden = self.encoder(batch.src, batch.src_len)  # (B, S, R), (B, R)
        return hidden, states, batch.src_mask

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        """``tokens`` (B,) -> ``(log_probs (B, V), state, weights (B, S))``."""
        hidden, states, src_mask = state
        logits, hidden, weights = self.decoder.step(tokens, hidden, states, src_mask)
        return logits.log_softmax(dim=-1), (hidden, states, src_mask), weights
