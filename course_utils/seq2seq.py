"""A GRU encoder-decoder without attention: the whole source squeezed into one vector.

The encoder reads the padded source and returns every state it passed through, ``(B, S, R)``,
plus its final state ``(B, R)``. This model's decoder only ever sees the final state (the
bottleneck); notebook 03 reuses the same encoder and lets its decoder attend over all the
states instead.

:class:`Seq2SeqConfig` holds the sizes and the vocabulary's special-token ids; the model
follows the decoding protocol of :mod:`course_utils.decoding` (``start`` / ``step``), so
``decoding.greedy_decode`` and ``decoding.beam_search`` decode it.

Shapes follow the legend in :mod:`course_utils`: ``B`` batch, ``S`` source length, ``T``
target length, ``E`` embedding size, ``R`` GRU state size, ``V`` vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils._validate import CheckedEmbedding, check_ids, check_src
from course_utils.config import ModelConfig
from course_utils.data import BOS_ID, EOS_ID, PAD_ID

State = tuple[torch.Tensor, ...]


@dataclass
class Seq2SeqConfig(ModelConfig):
    """Everything that defines a :class:`Seq2Seq`; build it with
    ``Seq2SeqConfig.from_vocab(src_vocab, tgt_vocab, emb_dim=..., rnn_dim=...)``.

    >>> Seq2SeqConfig(src_vocab_size=13, tgt_vocab_size=13, rnn_dim=0)
    Traceback (most recent call last):
    ...
    ValueError: rnn_dim must be positive, got 0
    """

    src_vocab_size: int
    tgt_vocab_size: int
    emb_dim: int = 32
    rnn_dim: int = 64
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID


# ---------------------------------------------------------------------------------------
# Encoder, decoder, and the model that joins them
# ---------------------------------------------------------------------------------------


class GRUEncoder(nn.Module):
    """Embedding + one-layer GRU over the source; padding never reaches the GRU."""

    def __init__(self, vocab_size: int, emb_dim: int, rnn_dim: int, pad_id: int):
        super().__init__()
        self.rnn_dim = rnn_dim
        self.embedding = CheckedEmbedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(emb_dim, rnn_dim, batch_first=True)

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``src`` (B, S), ``src_len`` (B,) -> ``(states (B, S, R), final (B, R))``.

        ``states`` are zero at padded positions; ``final`` is the state after each example's
        own last real token, not after the padding.
        """
        check_src(src, src_len)
        B, S = src.shape
        x = self.embedding(src)  # (B, S) -> (B, S, E)
        # Packing makes the GRU stop at each example's true length. Lengths live on the CPU.
        packed = pack_padded_sequence(x, src_len.cpu(), batch_first=True, enforce_sorted=False)
        packed_states, final = self.rnn(packed)  # final: (1, B, R), in the original order
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=S)
        return states, final[0]  # (B, S, R), (B, R)


class GRUDecoder(nn.Module):
    """Embedding + one-layer GRU + a linear read-out to vocabulary logits.

    Its only knowledge of the source is the hidden state it starts from.
    """

    def __init__(self, vocab_size: int, emb_dim: int, rnn_dim: int, pad_id: int):
        super().__init__()
        self.embedding = CheckedEmbedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(emb_dim, rnn_dim, batch_first=True)
        self.out = nn.Linear(rnn_dim, vocab_size)

    def forward(
        self, tgt_in: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``tgt_in`` (B, T), ``hidden`` (B, R) -> ``(logits (B, T, V), hidden (B, R))``."""
        check_ids("tgt_in", tgt_in)
        if hidden.dim() != 2 or hidden.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"hidden must have shape (B, R) with B = {tgt_in.shape[0]} from tgt_in, "
                f"got {tuple(hidden.shape)}"
            )
        y = self.embedding(tgt_in)  # (B, T) -> (B, T, E)
        outputs, h = self.rnn(y, hidden.unsqueeze(0).contiguous())  # (B, T, R), (1, B, R)
        return self.out(outputs), h[0]  # (B, T, V), (B, R)


class GRUEncoderDecoder(nn.Module):
    """What the course's GRU encoder-decoders share: a checked config, the special-token ids,
    the :class:`GRUEncoder`, and the input checks of a teacher-forced forward pass."""

    config_type: type = Seq2SeqConfig

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        if not isinstance(config, self.config_type):
            raise TypeError(
                f"config must be a {self.config_type.__name__}, got {type(config).__name__}"
            )
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        self.encoder = GRUEncoder(c.src_vocab_size, c.emb_dim, c.rnn_dim, c.pad_id)

    @staticmethod
    def check_inputs(src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor) -> None:
        """``src`` (B, S) ids, ``src_len`` (B,) in 1..S and ``tgt_in`` (B, T) ids."""
        check_src(src, src_len)
        check_ids("tgt_in", tgt_in)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in and src must have the same batch size, got tgt_in "
                f"{tuple(tgt_in.shape)} and src {tuple(src.shape)}"
            )


class Seq2Seq(GRUEncoderDecoder):
    """Encoder-decoder whose decoder starts from the encoder's final state (the bottleneck).

    >>> from course_utils.data import letter_vocab
    >>> model = Seq2Seq(Seq2SeqConfig.from_vocab(letter_vocab(5), emb_dim=4, rnn_dim=6))
    >>> model(torch.tensor([[3, 4, 5]]), torch.tensor([3]), torch.tensor([[1, 5]])).shape
    torch.Size([1, 2, 8])
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__(config)  # the config, the ids and the encoder, built first
        c = config
        self.decoder = GRUDecoder(c.tgt_vocab_size, c.emb_dim, c.rnn_dim, c.pad_id)

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: ``src`` (B, S), ``src_len`` (B,), ``tgt_in`` (B, T) -> (B, T, V)."""
        self.check_inputs(src, src_len, tgt_in)
        _, final = self.encoder(src, src_len)  # (B, R): all the decoder will know
        logits, _ = self.decoder(tgt_in, final)  # (B, T, V)
        return logits

    def forward_with_attention(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        """``(logits (B, T, V), None)``: this model has no attention weights to return."""
        return self.forward(src, src_len, tgt_in), None

    # The decoding protocol of course_utils.decoding
    def start(self, batch: object) -> State:
        """Encode ``batch.src`` once -> the state ``(hidden (B, R),)``."""
        _, hidden = self.encoder(batch.src, batch.src_len)  # (B, R)
        return (hidden,)

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, None]:
        """``tokens`` (B,) -> ``(log_probs (B, V), (hidden,), None)``."""
        logits, hidden = self.decoder(tokens[:, None], state[0])  # (B, 1, V), (B, R)
        return logits[:, 0].log_softmax(dim=-1), (hidden,), None
