"""A GRU encoder-decoder without attention: the whole source squeezed into one vector.

The encoder reads the padded source and returns every state it passed through, ``(B, S, H)``,
plus its final state ``(B, H)``. This model's decoder only ever sees the final state (the
bottleneck); notebook 03 reuses the same encoder and lets its decoder attend over all the
states instead.

Shape legend: ``B`` batch, ``S`` source length, ``T`` target length, ``E`` embedding size,
``H`` hidden size, ``V`` vocabulary size.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils._validate import check_ids, check_src
from course_utils.data import SequencePairs, batches

# ---------------------------------------------------------------------------------------
# Encoder, decoder, and the model that joins them
# ---------------------------------------------------------------------------------------


class Encoder(nn.Module):
    """Embedding + one-layer GRU over the source; padding never reaches the GRU."""

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, pad_id: int):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(emb_dim, hidden_dim, batch_first=True)

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``src`` (B, S), ``src_len`` (B,) -> ``(states (B, S, H), final (B, H))``.

        ``states`` are zero at padded positions; ``final`` is the state after each example's
        own last real token, not after the padding.
        """
        check_src(src, src_len)
        B, S = src.shape
        x = self.embedding(src)  # (B, S) -> (B, S, E)
        # Packing makes the GRU stop at each example's true length. Lengths live on the CPU.
        packed = pack_padded_sequence(x, src_len.cpu(), batch_first=True, enforce_sorted=False)
        packed_states, final = self.rnn(packed)  # final: (1, B, H), in the original order
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=S)
        return states, final[0]  # (B, S, H), (B, H)


class Decoder(nn.Module):
    """Embedding + one-layer GRU + a linear read-out to vocabulary logits.

    Its only knowledge of the source is the hidden state it starts from.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(emb_dim, hidden_dim, batch_first=True)
        self.out = nn.Linear(hidden_dim, vocab_size)

    def forward(
        self, tgt_in: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``tgt_in`` (B, T), ``hidden`` (B, H) -> ``(logits (B, T, V), hidden (B, H))``."""
        check_ids("tgt_in", tgt_in)
        if hidden.dim() != 2 or hidden.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"hidden must have shape (B, H) with B = {tgt_in.shape[0]} from tgt_in, "
                f"got {tuple(hidden.shape)}"
            )
        y = self.embedding(tgt_in)  # (B, T) -> (B, T, E)
        outputs, h = self.rnn(y, hidden.unsqueeze(0).contiguous())  # (B, T, H), (1, B, H)
        return self.out(outputs), h[0]  # (B, T, V), (B, H)


class Seq2Seq(nn.Module):
    """Encoder-decoder whose decoder starts from the encoder's final state (the bottleneck).

    ``tgt_vocab_size`` (keyword, default ``vocab_size``) gives the decoder its own
    vocabulary, e.g. for translation.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        hidden_dim: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        *,
        tgt_vocab_size: int | None = None,
    ):
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        tgt_vocab_size = vocab_size if tgt_vocab_size is None else tgt_vocab_size
        self.encoder = Encoder(vocab_size, emb_dim, hidden_dim, pad_id)
        self.decoder = Decoder(tgt_vocab_size, emb_dim, hidden_dim, pad_id)

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: ``src`` (B, S), ``src_len`` (B,), ``tgt_in`` (B, T) -> (B, T, V)."""
        check_src(src, src_len)
        check_ids("tgt_in", tgt_in)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in and src must have the same batch size, got tgt_in "
                f"{tuple(tgt_in.shape)} and src {tuple(src.shape)}"
            )
        _, final = self.encoder(src, src_len)  # (B, H): all the decoder will know
        logits, _ = self.decoder(tgt_in, final)  # (B, T, V)
        return logits

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, src_len: torch.Tensor, max_len: int) -> torch.Tensor:
        """Feed back the most likely token at each step -> ids (B, T) with T <= ``max_len``.

        The output starts after ``<bos>`` and includes each example's ``<eos>``; positions
        after it hold ``<pad>``. Decoding stops early once every example has emitted ``<eos>``.
        """
        check_src(src, src_len)
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        B = src.shape[0]
        _, hidden = self.encoder(src, src_len)  # (B, H)
        token = torch.full((B, 1), self.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
        out = []
        for _ in range(max_len):
            logits, hidden = self.decoder(token, hidden)  # (B, 1, V), (B, H)
            token = logits.argmax(dim=-1)  # (B, 1)
            # Finished examples emit <pad>; their hidden state no longer matters.
            out.append(token[:, 0].masked_fill(done, self.pad_id))  # (B,)
            done = done | (token[:, 0] == self.eos_id)
            if bool(done.all()):
                break
        return torch.stack(out, dim=1)  # T x (B,) -> (B, T)


# ---------------------------------------------------------------------------------------
# Loss and metrics
# ---------------------------------------------------------------------------------------


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean cross-entropy over the non-pad target positions.

    ``logits`` (B, T, V), ``targets`` (B, T) -> a scalar.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(
            f"logits must be a 3-D tensor (B, T, V), got shape "
            f"{tuple(getattr(logits, 'shape', ()))}"
        )
    check_ids("targets", targets)
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"targets must have shape (B, T) = {tuple(logits.shape[:2])} to match logits "
            f"{tuple(logits.shape)}, got {tuple(targets.shape)}"
        )
    B, T, V = logits.shape
    return F.cross_entropy(
        logits.reshape(B * T, V),  # (B, T, V) -> (B*T, V)
        targets.reshape(B * T),  # (B, T) -> (B*T,)
        ignore_index=pad_id,
    )


def seq2seq_loss(model: nn.Module, batch) -> torch.Tensor:
    """``loss_fn`` for :func:`course_utils.training.fit`: teacher-forced loss on one batch."""
    logits = model(batch.src, batch.src_len, batch.tgt_in)  # (B, T, V)
    return sequence_loss(logits, batch.tgt_out, model.pad_id)


def _upto_eos(ids: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """Replace the first ``<eos>`` and everything after it with ``<pad>``; (B, L) -> (B, L)."""
    after = (ids == eos_id).long().cumsum(dim=1) > 0  # (B, L): True from the first <eos> on
    return ids.masked_fill(after, pad_id)


def exact_match(
    pred_ids: torch.Tensor, target_ids: torch.Tensor, eos_id: int, pad_id: int
) -> torch.Tensor:
    """Per example, True when the prediction equals the target up to their first ``<eos>``.

    ``pred_ids`` (B, Lp) and ``target_ids`` (B, Lt) -> bool (B,). The two widths may
    differ. Tokens from the first ``<eos>`` on are ignored, and so is trailing ``<pad>``; a
    prediction that never emits ``<eos>`` must still hold exactly the target's tokens.

    >>> exact_match(torch.tensor([[5, 6, 2, 7]]), torch.tensor([[5, 6, 2]]), 2, 0)
    tensor([True])
    """
    check_ids("pred_ids", pred_ids)
    check_ids("target_ids", target_ids)
    if pred_ids.shape[0] != target_ids.shape[0]:
        raise ValueError(
            f"pred_ids and target_ids must have the same batch size, got "
            f"{tuple(pred_ids.shape)} and {tuple(target_ids.shape)}"
        )
    L = max(pred_ids.shape[1], target_ids.shape[1])
    pred = F.pad(_upto_eos(pred_ids, eos_id, pad_id), (0, L - pred_ids.shape[1]), value=pad_id)
    tgt = F.pad(_upto_eos(target_ids, eos_id, pad_id), (0, L - target_ids.shape[1]), value=pad_id)
    return (pred == tgt).all(dim=1)  # (B, L) -> (B,)


@torch.no_grad()
def accuracy_by_length(
    model: nn.Module,
    data: SequencePairs,
    batch_size: int = 256,
    device: torch.device | str | None = None,
) -> dict[int, float]:
    """Greedy-decode every example of ``data``; exact-match accuracy per source length.

    Returns ``{length: accuracy}`` sorted by length. Give it held-out data (a ``val`` or
    ``test`` split): accuracy on the training data says little about what was learned.

    ``model`` is any module with ``eos_id``, ``pad_id`` and ``greedy_decode(src, src_len,
    max_len)`` returning the ids ``(B, T)``, or a tuple whose first item is the ids (as
    :class:`course_utils.bahdanau.AttentionSeq2Seq` returns them with its attention weights).
    """
    if not isinstance(data, SequencePairs):
        raise TypeError(f"data must be a SequencePairs, got {type(data).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    # Sorting by length keeps the padding, and the number of decoding steps, small.
    order = sorted(range(len(data)), key=lambda i: len(data.src[i]))
    ordered = SequencePairs(
        [data.src[i] for i in order],
        [data.tgt[i] for i in order],
        data.vocab,
        data.task,
        data.split,
    )
    correct: dict[int, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    for batch in batches(ordered, batch_size):
        batch = batch.to(device)
        pred = model.greedy_decode(batch.src, batch.src_len, max_len=batch.tgt_out.shape[1] + 1)
        if isinstance(pred, tuple):  # (ids, attention weights, ...)
            pred = pred[0]
        ok = exact_match(pred, batch.tgt_out, model.eos_id, model.pad_id)  # (B,)
        for length, hit in zip(batch.src_len.tolist(), ok.tolist(), strict=True):
            correct[length] += int(hit)
            total[length] += 1
    model.train(was_training)
    return {length: correct[length] / total[length] for length in sorted(total)}
