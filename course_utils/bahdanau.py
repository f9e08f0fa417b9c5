"""The GRU encoder-decoder of :mod:`course_utils.seq2seq` plus additive (Bahdanau) attention.

The encoder is the same :class:`~course_utils.seq2seq.Encoder`. The decoder no longer has to
make do with the encoder's final state: at every output step it scores *all* encoder states
against its previous state, takes their attention-weighted sum (the context), and reads that
context together with the previous token (Bahdanau, Cho & Bengio, 2015):

* ``weights = masked_softmax(score(s_prev, states), src_mask)``, the score being
  :class:`~course_utils.attention.AdditiveScore` and the mask hiding the source padding;
* ``context = weights @ states``;
* ``s = GRUCell([embedding(y_prev), context], s_prev)``;
* ``logits = Linear([s, context])``.

:class:`AttentionSeq2Seq` has :class:`~course_utils.seq2seq.Seq2Seq`'s constructor and
interface (teacher-forced ``forward`` -> logits), so ``seq2seq_loss``, ``exact_match`` and
``accuracy_by_length`` work with it; its ``greedy_decode`` also returns the attention weights.

Shape legend: ``B`` batch, ``S`` source length, ``T`` target length, ``E`` embedding size,
``H`` decoder hidden size, ``K`` encoder state size, ``A`` attention hidden size,
``V`` vocabulary size.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils._validate import check_ids, check_src
from course_utils.attention import AdditiveScore, masked_softmax
from course_utils.data import lengths_to_mask
from course_utils.seq2seq import Encoder

# ---------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------


def _check_encoder_side(
    B: int, hidden: torch.Tensor, enc_states: torch.Tensor, src_mask: torch.Tensor
) -> None:
    """``hidden`` (B, H), ``enc_states`` (B, S, K) and a boolean ``src_mask`` (B, S)."""
    for name, x, dims in (("hidden", hidden, 2), ("enc_states", enc_states, 3)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != dims or x.shape[0] != B:
            raise ValueError(
                f"{name} must have {dims} dims with batch size {B}, got {tuple(x.shape)}"
            )
    if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
        raise TypeError(
            f"src_mask must be a boolean tensor (True = real token), got "
            f"{getattr(src_mask, 'dtype', type(src_mask).__name__)}"
        )
    if src_mask.shape != enc_states.shape[:2]:
        raise ValueError(
            f"src_mask must have shape (B, S) = {tuple(enc_states.shape[:2])} to match "
            f"enc_states {tuple(enc_states.shape)}, got {tuple(src_mask.shape)}"
        )


# ---------------------------------------------------------------------------------------
# One look at the source, the decoder that looks at every step, and the whole model
# ---------------------------------------------------------------------------------------


def attend(
    query: torch.Tensor,
    enc_states: torch.Tensor,
    src_mask: torch.Tensor,
    score: nn.Module,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention read: ``query`` (B, H) against ``enc_states`` (B, S, K).

    Returns ``(context (B, K), weights (B, S))``; ``weights`` are zero where ``src_mask``
    (B, S) is False and sum to 1 over the rest. ``score`` is any module mapping
    ``(B, 1, H), (B, S, K) -> (B, 1, S)``, e.g. :class:`~course_utils.attention.AdditiveScore`.

    >>> _ = torch.manual_seed(0)
    >>> states = torch.randn(1, 3, 4)
    >>> context, weights = attend(torch.randn(1, 4), states, torch.tensor([[True, True, False]]),
    ...                           AdditiveScore(4, 4, 5))
    >>> context.shape, weights[0, 2].item(), round(weights.sum().item(), 6)
    (torch.Size([1, 4]), 0.0, 1.0)
    """
    scores = score(query.unsqueeze(1), enc_states)  # (B, 1, H), (B, S, K) -> (B, 1, S)
    weights = masked_softmax(scores, src_mask.unsqueeze(1))  # (B, 1, S)
    context = weights @ enc_states  # (B, 1, S) @ (B, S, K) -> (B, 1, K)
    return context.squeeze(1), weights.squeeze(1)  # (B, K), (B, S)


class AttentionDecoder(nn.Module):
    """Embedding + additive attention + GRU cell + a read-out from ``[state, context]``.

    At step ``t`` the query is the previous decoder state ``s_{t-1}``; the GRU cell reads
    ``[embedding(y_{t-1}), context_t]``, and the logits come from ``[s_t, context_t]``.
    ``enc_dim`` (K) and ``attn_dim`` (A) default to ``hidden_dim``.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        hidden_dim: int,
        pad_id: int,
        enc_dim: int | None = None,
        attn_dim: int | None = None,
    ):
        super().__init__()
        enc_dim = hidden_dim if enc_dim is None else enc_dim
        attn_dim = hidden_dim if attn_dim is None else attn_dim
        self.hidden_dim, self.enc_dim = hidden_dim, enc_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.attention = AdditiveScore(hidden_dim, enc_dim, attn_dim)
        self.rnn = nn.GRUCell(emb_dim + enc_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim + enc_dim, vocab_size)

    def step(
        self,
        token: torch.Tensor,
        hidden: torch.Tensor,
        enc_states: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoding step: ``token`` (B,) ids, ``hidden`` (B, H) = ``s_{t-1}``.

        Returns ``(logits (B, V), hidden (B, H) = s_t, weights (B, S))``.
        """
        context, weights = attend(hidden, enc_states, src_mask, self.attention)  # (B, K), (B, S)
        y = self.embedding(token)  # (B,) -> (B, E)
        hidden = self.rnn(torch.cat([y, context], dim=-1), hidden)  # (B, E + K) -> (B, H)
        logits = self.out(torch.cat([hidden, context], dim=-1))  # (B, H + K) -> (B, V)
        return logits, hidden, weights

    def forward(
        self,
        tgt_in: torch.Tensor,
        hidden: torch.Tensor,
        enc_states: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher forcing over ``tgt_in`` (B, T), starting from ``hidden`` (B, H).

        Returns ``(logits (B, T, V), hidden (B, H), weights (B, T, S))``.
        """
        check_ids("tgt_in", tgt_in)
        _check_encoder_side(tgt_in.shape[0], hidden, enc_states, src_mask)
        if hidden.shape[1] != self.hidden_dim or enc_states.shape[2] != self.enc_dim:
            raise ValueError(
                f"expected hidden (B, {self.hidden_dim}) and enc_states (B, S, {self.enc_dim}), "
                f"got {tuple(hidden.shape)} and {tuple(enc_states.shape)}"
            )
        # The keys W_k k_j are the same at every step: project them once per sequence. Each
        # step below then equals self.step (a test checks), only cheaper.
        keys = self.attention.w_k(enc_states)  # (B, S, K) -> (B, S, A)
        y = self.embedding(tgt_in)  # (B, T) -> (B, T, E)
        states, contexts, weights = [], [], []
        # note: a loop, not one nn.GRU call: each step's input needs the context, and the
        # context needs the previous step's state.
        for t in range(tgt_in.shape[1]):
            q = self.attention.w_q(hidden).unsqueeze(1)  # (B, H) -> (B, 1, A)
            scores = self.attention.v(torch.tanh(q + keys)).squeeze(-1)  # (B, S, A) -> (B, S)
            step_weights = masked_softmax(scores, src_mask)  # (B, S)
            context = (step_weights.unsqueeze(1) @ enc_states).squeeze(1)  # (B, 1, S) @ (B, S, K)
            hidden = self.rnn(torch.cat([y[:, t], context], dim=-1), hidden)  # (B, H)
            states.append(hidden)
            contexts.append(context)
            weights.append(step_weights)
        # The read-out does not feed back into the loop, so it runs once over all steps.
        readout = torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1)
        logits = self.out(readout)  # (B, T, H + K) -> (B, T, V)
        return logits, hidden, torch.stack(weights, dim=1)  # (B, T, V), (B, H), (B, T, S)


class AttentionSeq2Seq(nn.Module):
    """:class:`~course_utils.seq2seq.Seq2Seq` whose decoder attends over every encoder state.

    Same constructor and interface as ``Seq2Seq``; ``tgt_vocab_size`` (keyword, default
    ``vocab_size``) gives the decoder its own vocabulary, e.g. for translation.

    >>> model = AttentionSeq2Seq(vocab_size=8, emb_dim=4, hidden_dim=6, pad_id=0, bos_id=1, eos_id=2)
    >>> src, src_len = torch.tensor([[5, 6, 7], [5, 4, 0]]), torch.tensor([3, 2])
    >>> model(src, src_len, torch.tensor([[1, 7], [1, 4]])).shape
    torch.Size([2, 2, 8])
    >>> pred, weights = model.greedy_decode(src, src_len, max_len=4)
    >>> weights.shape[0], weights.shape[2], weights[1, 0, 2].item()  # (B, T, S); pad gets 0
    (2, 3, 0.0)
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        hidden_dim: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        attn_dim: int | None = None,
        *,
        tgt_vocab_size: int | None = None,
    ):
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        tgt_vocab_size = vocab_size if tgt_vocab_size is None else tgt_vocab_size
        self.encoder = Encoder(vocab_size, emb_dim, hidden_dim, pad_id)
        self.decoder = AttentionDecoder(
            tgt_vocab_size, emb_dim, hidden_dim, pad_id, enc_dim=hidden_dim, attn_dim=attn_dim
        )

    def forward(
        self,
        src: torch.Tensor,
        src_len: torch.Tensor,
        tgt_in: torch.Tensor,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: ``src`` (B, S), ``src_len`` (B,), ``tgt_in`` (B, T) -> (B, T, V).

        With ``return_weights``, returns ``(logits, weights (B, T, S))``.
        """
        check_src(src, src_len)
        check_ids("tgt_in", tgt_in)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in and src must have the same batch size, got tgt_in "
                f"{tuple(tgt_in.shape)} and src {tuple(src.shape)}"
            )
        states, final = self.encoder(src, src_len)  # (B, S, H), (B, H)
        src_mask = lengths_to_mask(src_len, src.shape[1])  # (B, S)
        logits, _, weights = self.decoder(tgt_in, final, states, src_mask)
        return (logits, weights) if return_weights else logits

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_len: torch.Tensor, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed back the most likely token -> ``(ids (B, T), weights (B, T, S))``, T <= ``max_len``.

        As ``Seq2Seq.greedy_decode``: the ids start after ``<bos>`` and include each example's
        ``<eos>``, with ``<pad>`` after it; decoding stops once every example has emitted
        ``<eos>``. ``weights[b, t]`` is where step ``t`` looked; rows after example ``b``'s
        ``<eos>`` are zero.
        """
        check_src(src, src_len)
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        B = src.shape[0]
        states, hidden = self.encoder(src, src_len)  # (B, S, H), (B, H)
        src_mask = lengths_to_mask(src_len, src.shape[1])  # (B, S)
        token = torch.full((B,), self.bos_id, dtype=torch.long, device=src.device)  # (B,)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
        out, weights = [], []
        for _ in range(max_len):
            logits, hidden, step_weights = self.decoder.step(token, hidden, states, src_mask)
            token = logits.argmax(dim=-1)  # (B,)
            out.append(token.masked_fill(done, self.pad_id))  # finished examples emit <pad>
            weights.append(step_weights.masked_fill(done[:, None], 0.0))  # (B, S)
            done = done | (token == self.eos_id)
            if bool(done.all()):
                break
        return torch.stack(out, dim=1), torch.stack(weights, dim=1)  # (B, T), (B, T, S)


# ---------------------------------------------------------------------------------------
# Measuring alignments
# ---------------------------------------------------------------------------------------


def alignment_accuracy(weights: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of decoding steps whose most-attended source position is the gold one.

    ``weights`` (B, T, S) are attention weights; ``gold`` (B, T) long holds the source
    position each output step should look at, or ``-1`` for steps that do not count (e.g.
    ``<eos>`` and padding). For the reverse task, step ``t`` of an input of length ``n``
    should look at position ``n - 1 - t``.

    >>> w = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]]])  # (1, 3, 2)
    >>> alignment_accuracy(w, torch.tensor([[1, 1, -1]]))  # step 0 right, step 1 wrong
    0.5
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 3:
        raise ValueError(
            f"weights must be a 3-D tensor (B, T, S), got shape "
            f"{tuple(getattr(weights, 'shape', ()))}"
        )
    check_ids("gold", gold)
    if gold.shape != weights.shape[:2]:
        raise ValueError(
            f"gold must have shape (B, T) = {tuple(weights.shape[:2])} to match weights "
            f"{tuple(weights.shape)}, got {tuple(gold.shape)}"
        )
    counted = gold >= 0  # (B, T)
    if not bool(counted.any()):
        raise ValueError("gold marks no step to count (every entry is -1)")
    hits = (weights.argmax(dim=-1) == gold) & counted  # (B, T)
    return hits.sum().item() / counted.sum().item()
