"""Listen, Attend and Spell (Chan et al., 2016) at toy scale, notebook 10.

The *listener* reads log-mel frames (B, F, M) with a pyramid of bidirectional LSTMs: before
each layer, :func:`pyramid_reduce` joins every two neighbouring frames into one, so each
layer halves the time axis and three layers leave one state per 8 frames (80 ms). The
*speller* writes the transcript one character at a time with an LSTM; before each character
it attends over the listener's states (additive attention, as in notebook 03), so that it can
read the part of the audio that says the next letter. ``attention=False`` gives the baseline
that reads only a summary of the utterance, the listener's final states, at every step.

Both spellers follow the decoding protocol of :mod:`course_utils.decoding` and the
application protocol of :mod:`course_utils.apps` (``make_splits``, ``build_model``,
``evaluate``). Shapes follow the legend in :mod:`course_utils`, plus ``F`` frames and ``M``
mel channels; ``S`` is the number of listener states (frames / 8) and ``C = 2 *
listener_dim`` their size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils._validate import CheckedEmbedding, check_lengths, check_positive, check_tensor
from course_utils.alignment import monotonic_chance, monotonic_share, peak_progress
from course_utils.apps.audio import N_MELS, SpeechBatch, SpeechData, char_vocab, load_speech
from course_utils.attention import AdditiveScore, attend
from course_utils.data import SPLITS, Vocab, lengths_to_mask
from course_utils.decoding import greedy_decode
from course_utils.metrics import error_rate
from course_utils.training import sequence_loss

State = tuple[torch.Tensor, ...]
MAX_STEPS = 32  # the longest transcript, "seven seven seven seven", has 23 characters


@dataclass
class SpeechConfig:
    """Everything that defines a :class:`ListenAttendSpell`; build it with :meth:`from_vocab`."""

    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    attention: bool = True
    n_mels: int = N_MELS  # M
    listener_dim: int = 64  # per direction, so C = 128
    pyramid_layers: int = 3
    emb_dim: int = 16  # E
    rnn_dim: int = 128  # R, the speller's LSTM state
    attn_dim: int = 64  # A

    @classmethod
    def from_vocab(cls, vocab: Vocab, **sizes: object) -> SpeechConfig:
        return cls(len(vocab), vocab.pad_id, vocab.bos_id, vocab.eos_id, **sizes)

    def __post_init__(self) -> None:
        if not isinstance(self.attention, bool):
            raise TypeError(f"attention must be a bool, got {self.attention!r}")
        for name in ("vocab_size", "n_mels", "listener_dim", "pyramid_layers", "emb_dim"):
            check_positive(name, getattr(self, name))
        check_positive("rnn_dim", self.rnn_dim)
        check_positive("attn_dim", self.attn_dim)


# ---------------------------------------------------------------------------------------
# The listener
# ---------------------------------------------------------------------------------------
def pyramid_reduce(x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Join frames ``2i`` and ``2i + 1``: ``x`` (B, F, D) -> (B, ceil(F / 2), 2 D), and each
    length ``n`` -> ``ceil(n / 2)``. An odd frame count gets one zero frame at the end first,
    so the last real frame of an odd-length example is paired with zeros, never dropped.

    >>> y, n = pyramid_reduce(torch.arange(6.0).reshape(1, 3, 2), torch.tensor([3]))
    >>> y, n
    (tensor([[[0., 1., 2., 3.],
             [4., 5., 0., 0.]]]), tensor([2]))
    """
    check_tensor("x", x, dims=3)
    B, F, D = x.shape
    check_lengths("lengths", lengths, B, F)
    if F % 2:
        x = nn.functional.pad(x, (0, 0, 0, 1))  # (B, F, D) -> (B, F + 1, D)
    # zero the padded frames, so a real frame is never paired with leftover values
    mask = lengths_to_mask(lengths, x.shape[1]).to(x.device)
    x = x * mask.unsqueeze(-1)
    return x.reshape(B, x.shape[1] // 2, 2 * D), (lengths + 1) // 2  # (B, F/2, 2D)


class Listener(nn.Module):
    """``pyramid_layers`` bidirectional LSTMs, each after a :func:`pyramid_reduce`:
    ``feats`` (B, F, M) -> ``(states (B, S, C), lengths (B,))``, ``S = ceil(F / 2^layers)``."""

    def __init__(self, n_mels: int, listener_dim: int, pyramid_layers: int):
        super().__init__()
        sizes = [2 * n_mels] + [4 * listener_dim] * (pyramid_layers - 1)  # joined frames
        self.layers = nn.ModuleList(
            nn.LSTM(size, listener_dim, batch_first=True, bidirectional=True) for size in sizes
        )

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple:
        x = feats
        for lstm in self.layers:
            x, lengths = pyramid_reduce(x, lengths)  # halves the time axis
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            x, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])
        return x, lengths  # (B, S, C), (B,)


def summary(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The listener's final states: the forward LSTM's state at each example's last frame
    joined to the backward LSTM's at frame 0, ``(B, S, C) -> (B, C)``: all that a speller
    without attention reads of the audio."""
    half = states.shape[-1] // 2
    last = states[torch.arange(states.shape[0]), lengths - 1, :half]  # (B, C/2)
    return torch.cat([last, states[:, 0, half:]], dim=-1)  # (B, C)


# ---------------------------------------------------------------------------------------
# The speller and the whole model
# ---------------------------------------------------------------------------------------
class ListenAttendSpell(nn.Module):
    """Listener + character speller, with attention over the listener's states or without.

    The speller's state starts from :func:`summary`. At step ``t`` it reads the context
    ``c_t`` (attention queried by the previous state, or the summary again without
    attention), feeds ``[embedding(y_{t-1}), c_t]`` to its LSTM cell, and predicts the next
    character from ``[s_t, c_t]``.
    """

    def __init__(self, config: SpeechConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        enc_dim = 2 * c.listener_dim  # C
        self.listener = Listener(c.n_mels, c.listener_dim, c.pyramid_layers)
        if c.attention:
            self.score = AdditiveScore(c.rnn_dim, enc_dim, c.attn_dim)
        self.init_h = nn.Linear(enc_dim, c.rnn_dim)
        self.init_c = nn.Linear(enc_dim, c.rnn_dim)
        self.embedding = CheckedEmbedding(c.vocab_size, c.emb_dim, padding_idx=c.pad_id)
        self.rnn = nn.LSTMCell(c.emb_dim + enc_dim, c.rnn_dim)
        self.out = nn.Linear(c.rnn_dim + enc_dim, c.vocab_size)

    # The decoding protocol of course_utils.decoding
    def start(self, batch: object) -> State:
        """Listen once -> ``(h (B, R), c (B, R), states (B, S, C), mask (B, S), summary (B, C))``."""
        check_tensor("feats", batch.feats, dims=3)
        states, lengths = self.listener(batch.feats, batch.feat_len)
        mask = lengths_to_mask(lengths, states.shape[1]).to(states.device)  # (B, S)
        final = summary(states, lengths)  # (B, C)
        return torch.tanh(self.init_h(final)), torch.tanh(self.init_c(final)), states, mask, final

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, object]:
        """``tokens`` (B,) -> ``(log_probs (B, V), state, weights (B, S) or None)``."""
        h, c, states, mask, final = state
        if self.config.attention:
            context, weights = attend(h, states, self.score, mask)  # (B, C), (B, S)
        else:
            context, weights = final, None
        h, c = self.rnn(torch.cat([self.embedding(tokens), context], dim=-1), (h, c))
        logits = self.out(torch.cat([h, context], dim=-1))  # (B, R + C) -> (B, V)
        return logits.log_softmax(dim=-1), (h, c, states, mask, final), weights

    def forward_with_attention(self, batch: SpeechBatch) -> tuple:
        """Teacher forcing -> ``(log_probs (B, T, V), weights (B, T, S) or None)``; row ``t``
        is the step that predicts character ``t + 1``."""
        check_tensor("tgt_in", batch.tgt_in, dims=2)
        state, out, weights = self.start(batch), [], []
        for t in range(batch.tgt_in.shape[1]):  # each step needs the state of the one before
            log_probs, state, w = self.step(batch.tgt_in[:, t], state)
            out.append(log_probs)
            weights.append(w)
        return torch.stack(out, 1), (torch.stack(weights, 1) if weights[0] is not None else None)

    def forward(self, batch: SpeechBatch) -> torch.Tensor:
        """Teacher forcing: a :class:`SpeechBatch` -> log-probabilities (B, T, V)."""
        return self.forward_with_attention(batch)[0]


def speech_loss(model: ListenAttendSpell, batch: SpeechBatch) -> torch.Tensor:
    """``loss_fn`` for :func:`course_utils.training.fit`: the next character's cross-entropy."""
    return sequence_loss(model(batch), batch.tgt_out, model.pad_id)


# ---------------------------------------------------------------------------------------
# The application protocol of course_utils.apps: make_splits, build_model, evaluate
# ---------------------------------------------------------------------------------------
def make_splits() -> dict[str, SpeechData]:
    """The stored train, validation and test clips; no voice is in two splits.

    >>> {name: len(data) for name, data in make_splits().items()}
    {'train': 640, 'val': 80, 'test': 120}
    """
    return {split: load_speech(split) for split in SPLITS}


def build_model(attention: bool, **sizes: int) -> ListenAttendSpell:
    """LAS with attention (``True``) or the speller that reads the summary only (``False``);
    ``sizes`` go to :class:`SpeechConfig`."""
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    return ListenAttendSpell(SpeechConfig.from_vocab(char_vocab(), attention=attention, **sizes))


@torch.no_grad()
def transcribe(
    model: ListenAttendSpell, data: SpeechData, batch_size: int = 120
) -> tuple[list[str], list[torch.Tensor | None]]:
    """Greedy transcripts of every clip, and each clip's attention ``(T_n, S_n)`` (its
    characters and ``<eos>`` by its real frames), or ``None`` without attention."""
    device, texts, weights = next(model.parameters()).device, [], []
    for start in range(0, len(data), batch_size):
        batch = data.batch(list(range(start, min(start + batch_size, len(data))))).to(device)
        decoded = greedy_decode(model, batch, max_steps=MAX_STEPS)
        frames = (
            batch.feat_len + 2**model.config.pyramid_layers - 1
        ) // 2**model.config.pyramid_layers
        for row, ids in enumerate(decoded.ids.cpu()):
            text = "".join(data.vocab.decode(ids))
            texts.append(text)
            if decoded.weights is None:
                weights.append(None)
            else:
                steps = min(len(text) + 1, decoded.weights.shape[1])
                weights.append(decoded.weights[row, :steps, : int(frames[row])].cpu())
    return texts, weights


def evaluate(model: ListenAttendSpell, data: SpeechData) -> dict[str, float]:
    """Greedy transcripts -> ``{"cer", "wer"}`` (jiwer), plus, with attention,
    ``"progress"`` (:func:`~course_utils.alignment.peak_progress`: the Spearman correlation
    of step and attention peak, averaged over clips; 0 for a frozen or a random peak),
    ``"monotonic"`` (share of steps whose attention peak does not move back; 1 for a frozen
    peak) and its ``"chance"`` level for random peaks. A speller that stops after one step
    on every clip (an untrained one can) has no peak that moves: progress 0, and NaN for the
    share and its chance, which no threshold then passes.

    >>> _ = torch.manual_seed(0)
    >>> sorted(evaluate(build_model(attention=True), load_speech("val")))
    ['cer', 'chance', 'monotonic', 'progress', 'wer']
    """
    if not isinstance(data, SpeechData):
        raise TypeError(f"data must be SpeechData, got {type(data).__name__}")
    was_training = model.training
    model.eval()
    texts, weights = transcribe(model, data)
    out = {
        "cer": error_rate(texts, data.texts, "char"),
        "wer": error_rate(texts, data.texts, "word"),
    }
    kept = [w for w in weights if w is not None and w.shape[0] >= 2]  # None: no attention
    if model.config.attention and not kept:  # no clip has two steps to compare
        out.update(progress=0.0, monotonic=float("nan"), chance=float("nan"))
    elif kept:
        S = max(w.shape[1] for w in kept)
        padded = torch.zeros(len(kept), max(w.shape[0] for w in kept), S)
        for i, w in enumerate(kept):
            padded[i, : w.shape[0], : w.shape[1]] = w
        steps = torch.tensor([w.shape[0] for w in kept])
        frames = torch.tensor([w.shape[1] for w in kept])
        out["progress"] = peak_progress(padded, steps)
        out["monotonic"] = monotonic_share(padded, steps)
        out["chance"] = monotonic_chance(frames, steps)
    model.train(was_training)
    return out
