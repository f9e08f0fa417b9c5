"""Summarisation with a pointer-generator and coverage (See, Liu & Manning, 2017), notebook 08.

One model class, :class:`Summariser`, with three switches that turn notebook 03's attention
model into See et al.'s:

* ``attention``: the decoder reads an additive-attention context at every step (off: the
  mean of the encoder states, the same vector at every step);
* ``pointer``: the output mixes generating from the vocabulary with copying a source token,
  ``P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: x_i = w} a_i`` over the *extended*
  vocabulary (the vocabulary plus the document's own unknown words), with
  ``p_gen = sigmoid(w_h . context + w_s . s_t + w_x . x_t + b)``;
* ``coverage``: the running sum of past attention ``c^t = sum_{t' < t} a^{t'}`` enters the
  attention score, ``e_i = v . tanh(W_s s + W_h h_i + w_c c_i)``, and
  :func:`coverage_loss` ``sum_i min(a_i, c_i)`` punishes attending twice to the same place.

The encoder is a bidirectional GRU; the decoder follows :mod:`course_utils.bahdanau`
(query = the previous state, a GRU cell reading ``[embedding, context]``, the read-out from
``[state, context]``). A model follows :mod:`course_utils.decoding`'s protocol, so
``greedy_decode`` and ``beam_search`` decode it; a pointer model's ``step`` returns
log-probabilities over ``V + S`` ids, every source position being a possible new word.

Shapes follow the legend in :mod:`course_utils`: ``B`` batch, ``S`` source length, ``T``
summary length, ``E`` embedding size, ``R`` decoder state size, ``C`` encoder state size
(2 x ``rnn_dim``: both directions), ``A`` attention size, ``V`` vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import CheckedEmbedding, check_src, check_tensor
from course_utils.apps import news
from course_utils.apps.corpus import UnkVocab
from course_utils.attention import AdditiveScore, masked_softmax
from course_utils.config import ModelConfig
from course_utils.data import lengths_to_mask
from course_utils.decoding import greedy_decode
from course_utils.metrics import oov_recall, repeated_trigram_rate, rouge

State = tuple[torch.Tensor, ...]


# ---------------------------------------------------------------------------------------
# The two new pieces: the final distribution and the coverage loss
# ---------------------------------------------------------------------------------------
def final_distribution(
    p_vocab: torch.Tensor, attention: torch.Tensor, src_ext: torch.Tensor, p_gen: torch.Tensor
) -> torch.Tensor:
    """See et al.'s eq. 9 over the extended vocabulary of ``V + S`` ids.

    ``p_vocab`` (B, V) generator distribution, ``attention`` (B, S), ``src_ext`` (B, S)
    extended source ids (each < V + S), ``p_gen`` (B,) or (B, 1) in [0, 1] -> (B, V + S).
    A word that occurs twice in the source collects both positions' attention.

    >>> p = final_distribution(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75]]),
    ...                        torch.tensor([[1, 2]]), torch.tensor([0.8]))
    >>> p  # 0.8 x [0.5, 0.5, 0, 0] + 0.2 x [0, 0.25, 0.75, 0]
    tensor([[0.4000, 0.4500, 0.1500, 0.0000]])
    """
    check_tensor("p_vocab", p_vocab, dims=2)
    check_tensor("attention", attention, dims=2)
    check_tensor("src_ext", src_ext, dims=2)
    check_tensor("p_gen", p_gen)
    B, V = p_vocab.shape
    S = attention.shape[1]
    if attention.shape[0] != B or src_ext.shape != attention.shape:
        raise ValueError(
            f"p_vocab (B, V), attention (B, S) and src_ext (B, S) must agree, got "
            f"{tuple(p_vocab.shape)}, {tuple(attention.shape)} and {tuple(src_ext.shape)}"
        )
    if p_gen.shape not in ((B,), (B, 1)):
        raise ValueError(f"p_gen must have shape ({B},) or ({B}, 1), got {tuple(p_gen.shape)}")
    if src_ext.dtype != torch.long or bool((src_ext < 0).any() | (src_ext >= V + S).any()):
        raise ValueError(f"src_ext must hold int64 ids in 0..{V + S - 1} (V + S), got {src_ext}")
    p_gen = p_gen.reshape(B, 1)
    extended = F.pad(p_gen * p_vocab, (0, S))  # (B, V) -> (B, V + S), new words get 0
    return extended.scatter_add(1, src_ext, (1 - p_gen) * attention)  # copy: (B, S) -> ids


def coverage_loss(attention: torch.Tensor, coverage: torch.Tensor) -> torch.Tensor:
    """``sum_i min(a_i, c_i)`` over the last axis: ``attention`` and ``coverage`` (..., S)
    -> (...). Zero unless this step attends where earlier steps already did.

    >>> coverage_loss(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.9, 0.1, 1.0]))
    tensor(0.6000)
    """
    check_tensor("attention", attention)
    check_tensor("coverage", coverage)
    if attention.shape != coverage.shape:
        raise ValueError(
            f"attention and coverage must have the same shape, got {tuple(attention.shape)} "
            f"and {tuple(coverage.shape)}"
        )
    return torch.minimum(attention, coverage).sum(dim=-1)


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------
@dataclass
class SummariserConfig(ModelConfig):
    """Everything that defines a :class:`Summariser`; build it with
    ``SummariserConfig.from_vocab(vocab, unk_id=vocab.unk_id, pointer=True, ...)``."""

    src_vocab_size: int
    tgt_vocab_size: int
    unk_id: int
    emb_dim: int = 64
    rnn_dim: int = 64
    attn_dim: int = 64
    attention: bool = True
    pointer: bool = False
    coverage: bool = False
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"a summariser reads and writes one vocabulary, got src_vocab_size "
                f"{self.src_vocab_size} and tgt_vocab_size {self.tgt_vocab_size}"
            )
        if isinstance(self.unk_id, bool) or not 0 <= self.unk_id < self.tgt_vocab_size:
            raise ValueError(f"unk_id must lie in 0..{self.tgt_vocab_size - 1}, got {self.unk_id}")
        if (self.pointer or self.coverage) and not self.attention:
            raise ValueError("pointer and coverage need attention=True")


class Summariser(nn.Module):
    """A bidirectional GRU encoder and an attention decoder, with optional pointer and
    coverage (see the module docstring).

    >>> data = news.NewsData(news.make_reports(4, seed=0), UnkVocab(["the", "."]))
    >>> batch = next(news.ordered_batches(data))[1]
    >>> model = Summariser(SummariserConfig.from_vocab(data.vocab, unk_id=3, pointer=True))
    >>> log_probs, weights, p_gen, cov = model.forward_with_attention(batch)
    >>> S = batch.src.shape[1]
    >>> log_probs.shape[-1] == len(data.vocab) + S, weights.shape[-1] == S
    (True, True)
    """

    def __init__(self, config: SummariserConfig):
        super().__init__()
        if not isinstance(config, SummariserConfig):
            raise TypeError(f"config must be a SummariserConfig, got {type(config).__name__}")
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = c.pad_id, c.bos_id, c.eos_id, c.unk_id
        C, R = 2 * c.rnn_dim, c.rnn_dim
        self.embedding = CheckedEmbedding(c.tgt_vocab_size, c.emb_dim, padding_idx=c.pad_id)
        # The two directions of a bidirectional GRU (see encode)
        self.encoder_forward = nn.GRU(c.emb_dim, c.rnn_dim, batch_first=True)
        self.encoder_backward = nn.GRU(c.emb_dim, c.rnn_dim, batch_first=True)
        self.bridge = nn.Linear(C, R)  # both final states -> the decoder's first state
        self.attention = AdditiveScore(R, C, c.attn_dim) if c.attention else None
        if c.coverage:  # w_c starts at 0: switching coverage on leaves the model unchanged
            self.w_c = nn.Linear(1, c.attn_dim, bias=False)
            nn.init.zeros_(self.w_c.weight)
        self.rnn = nn.GRUCell(c.emb_dim + C, R)
        self.out = nn.Linear(R + C, c.tgt_vocab_size)
        self.p_gen = nn.Linear(C + R + c.emb_dim, 1) if c.pointer else None

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``src`` (B, S) in-vocabulary ids -> ``(states (B, S, C), hidden (B, R),
        keys (B, S, A) or states, src_mask (B, S))``.

        A bidirectional GRU, run as two one-way GRUs over the padded batch (the same result
        as ``nn.GRU(bidirectional=True)`` over a packed batch, and about twice as fast to
        train on a CPU, where the packed GRU's backward pass grows with the square of ``S``).
        The forward GRU reads the padding only after a document's last token, so its states
        at the real tokens never see it; the backward GRU reads each document's real tokens
        reversed (``flip`` maps position ``i < len`` to ``len - 1 - i``), then its states
        are put back in document order. States at padding are 0.
        """
        check_src(src, src_len)
        B, S = src.shape
        R = self.config.rnn_dim
        src_mask = lengths_to_mask(src_len, S)  # (B, S)
        x = self.embedding(src)  # (B, S) -> (B, S, E)
        position = torch.arange(S, device=src.device)
        flip = torch.where(src_mask, src_len.unsqueeze(1) - 1 - position, position)  # (B, S)
        forward, _ = self.encoder_forward(x)  # (B, S, R)
        backward, _ = self.encoder_backward(x.gather(1, flip.unsqueeze(-1).expand_as(x)))
        backward = backward.gather(1, flip.unsqueeze(-1).expand(B, S, R))  # document order
        states = torch.cat([forward, backward], dim=-1) * src_mask.unsqueeze(-1)  # (B, S, C)
        last = forward.gather(1, (src_len - 1).view(B, 1, 1).expand(B, 1, R)).squeeze(1)
        # Both final states: the forward GRU's at the last token, the backward's at the first
        hidden = torch.tanh(self.bridge(torch.cat([last, backward[:, 0]], dim=-1)))  # (B, R)
        # The keys W_h h_i are the same at every step: project them once.
        keys = self.attention.w_k(states) if self.attention is not None else states
        return states, hidden, keys, src_mask

    def _attend(self, hidden: torch.Tensor, state: State) -> tuple[torch.Tensor | None, ...]:
        """Where the decoder looks from ``hidden`` (B, R) -> ``(weights (B, S) or None,
        context (B, C), coverage loss (B,), the new coverage (B, S))``."""
        _, states, keys, src_mask, _, coverage = state
        if not self.config.attention:  # the mean encoder state, the same at every step
            mask = src_mask.unsqueeze(-1).to(states.dtype)
            context = (states * mask).sum(1) / mask.sum(1)  # (B, C)
            return None, context, torch.zeros(len(hidden), device=hidden.device), coverage
        feats = self.attention.w_q(hidden).unsqueeze(1) + keys  # (B, 1, A) + (B, S, A)
        if self.config.coverage:
            # w_c c_i, as self.w_c(coverage.unsqueeze(-1)) but without a matmul over one input
            feats = feats + coverage.unsqueeze(-1) * self.w_c.weight.squeeze(-1)  # (B, S, A)
        weights = masked_softmax(self.attention.v(torch.tanh(feats)).squeeze(-1), src_mask)
        context = (weights.unsqueeze(1) @ states).squeeze(1)  # (B, 1, S) @ (B, S, C)
        return weights, context, torch.minimum(weights, coverage).sum(-1), coverage + weights

    def _embed(self, token: torch.Tensor) -> torch.Tensor:
        """Ids (any shape) -> embeddings (..., E); a copied word (id >= V) reads ``<unk>``."""
        return self.embedding(token.masked_fill(token >= self.config.tgt_vocab_size, self.unk_id))

    def _read_out(
        self,
        hidden: torch.Tensor,
        context: torch.Tensor,
        y: torch.Tensor,
        weights: torch.Tensor | None,
        src_ext: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output distribution of ``N`` steps at once: ``hidden`` (N, R), ``context``
        (N, C), ``y`` (N, E), ``weights`` (N, S), ``src_ext`` (N, S) -> ``(log_probs (N, V)
        or (N, V + S), p_gen (N,) or None)``. Nothing here feeds the next step, so teacher
        forcing reads out every step of the summary in one call."""
        logits = self.out(torch.cat([hidden, context], dim=-1))  # (N, R + C) -> (N, V)
        if not self.config.pointer:
            return logits.log_softmax(dim=-1), None
        p_gen = torch.sigmoid(self.p_gen(torch.cat([context, hidden, y], -1))).squeeze(-1)
        probs = final_distribution(logits.softmax(-1), weights, src_ext, p_gen)
        return probs.clamp_min(1e-12).log(), p_gen  # (N, V + S)

    def _step(self, token: torch.Tensor, state: State) -> tuple[torch.Tensor, ...]:
        """One step from ``token`` (B,) -> ``(log_probs (B, V or V + S), state, weights
        (B, S) or None, p_gen (B,) or None, coverage loss (B,))``."""
        hidden, states, keys, src_mask, src_ext, _ = state
        weights, context, step_cov, coverage = self._attend(hidden, state)  # query: s_{t-1}
        y = self._embed(token)  # (B,) -> (B, E)
        hidden = self.rnn(torch.cat([y, context], dim=-1), hidden)  # (B, E + C) -> (B, R)
        log_probs, p_gen = self._read_out(hidden, context, y, weights, src_ext)
        return (
            log_probs,
            (hidden, states, keys, src_mask, src_ext, coverage),
            weights,
            p_gen,
            step_cov,
        )

    def forward_with_attention(self, batch: object) -> tuple[torch.Tensor, ...]:
        """Teacher forcing over ``batch.tgt_in`` -> ``(log_probs (B, T, V or V + S),
        weights (B, T, S) or None, p_gen (B, T) or None, coverage loss (B, T))``.

        The same maths as :meth:`_step` at every step; only the attention and the GRU run
        step by step, and the read-out of all ``T`` steps runs once (faster to train)."""
        if batch.src.shape != batch.src_ext.shape:
            raise ValueError(
                f"batch.src and batch.src_ext must have the same shape, got "
                f"{tuple(batch.src.shape)} and {tuple(batch.src_ext.shape)}"
            )
        if batch.tgt_in.dim() != 2 or batch.tgt_in.shape[0] != batch.src.shape[0]:
            raise ValueError(
                f"batch.tgt_in must be (B, T) with B = {batch.src.shape[0]}, got "
                f"{tuple(batch.tgt_in.shape)}"
            )
        state = self.start(batch)
        hidden, states, keys, src_mask, src_ext, coverage = state
        ys = self._embed(batch.tgt_in)  # (B, T, E)
        steps = []
        for y in ys.unbind(1):  # (B, E) per step
            weights, context, cov, coverage = self._attend(
                hidden, (hidden, states, keys, src_mask, src_ext, coverage)
            )
            hidden = self.rnn(torch.cat([y, context], dim=-1), hidden)  # (B, R)
            steps.append((hidden, context, weights, cov))
        hiddens, contexts, weights, cov = zip(*steps, strict=True)
        B, T, S = ys.shape[0], len(steps), src_ext.shape[1]
        weights = None if weights[0] is None else torch.stack(weights, dim=1)  # (B, T, S)
        log_probs, p_gen = self._read_out(
            torch.stack(hiddens, dim=1).reshape(B * T, -1),
            torch.stack(contexts, dim=1).reshape(B * T, -1),
            ys.reshape(B * T, -1),
            None if weights is None else weights.reshape(B * T, S),
            src_ext.unsqueeze(1).expand(B, T, S).reshape(B * T, S),
        )
        p_gen = None if p_gen is None else p_gen.reshape(B, T)
        return log_probs.reshape(B, T, -1), weights, p_gen, torch.stack(cov, dim=1)

    def forward(self, batch: object) -> torch.Tensor:
        """Teacher forcing -> log-probabilities (B, T, V or V + S)."""
        return self.forward_with_attention(batch)[0]

    # The decoding protocol of course_utils.decoding
    def start(self, batch: object) -> State:
        """Encode ``batch.src`` once; the state also carries ``src_ext`` and the coverage."""
        states, hidden, keys, src_mask = self.encode(batch.src, batch.src_len)
        coverage = torch.zeros(src_mask.shape, device=states.device)  # (B, S)
        return hidden, states, keys, src_mask, batch.src_ext, coverage

    def step(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        """``tokens`` (B,) -> ``(log_probs, state, weights (B, S) or None)``."""
        log_probs, state, weights, _, _ = self._step(tokens, state)
        return log_probs, state, weights


def summary_loss(model: Summariser, batch: object, coverage_weight: float = 0.0) -> torch.Tensor:
    """Mean negative log-likelihood of the reference summary's tokens (extended ids for a
    pointer model, ``<unk>`` for unknown words otherwise), plus ``coverage_weight`` times
    the mean coverage loss per token (See et al. use 1)."""
    log_probs, _, _, cov = model.forward_with_attention(batch)
    target = batch.tgt_out_ext if model.config.pointer else batch.tgt_out  # (B, T)
    real = target != model.pad_id  # (B, T)
    picked = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    nll = -(picked * real).sum() / real.sum()
    if coverage_weight == 0.0:
        return nll
    return nll + coverage_weight * (cov * real).sum() / real.sum()


# ---------------------------------------------------------------------------------------
# The application protocol of course_utils.apps: make_splits, build_model, evaluate
# ---------------------------------------------------------------------------------------
def make_splits(
    n_train: int = 4000,
    n_val: int = 100,
    n_test: int = 400,
    seed: int = 0,
    max_vocab: int = 300,
    min_freq: int = 5,
) -> dict[str, news.NewsData]:
    """Train, validation and test reports (names from disjoint pools) and one capped
    vocabulary built from the training reports only.

    >>> splits = make_splits(50, 5, 5)
    >>> {name: len(s) for name, s in splits.items()}, splits["test"].vocab is splits["train"].vocab
    ({'train': 50, 'val': 5, 'test': 5}, True)
    """
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    reports = {s: news.make_reports(n, split=s, seed=seed) for s, n in sizes.items()}
    vocab = news.news_vocab(reports["train"], max_size=max_vocab, min_freq=min_freq)
    return {s: news.NewsData(r, vocab, split=s) for s, r in reports.items()}


def build_model(
    attention: bool,
    vocab: UnkVocab | None = None,
    pointer: bool | None = None,
    coverage: bool = False,
    **sizes: int,
) -> Summariser:
    """A :class:`Summariser` over ``vocab`` (default: the vocabulary of :func:`make_splits`'
    default training reports, as notebook 08 uses); ``pointer`` defaults to ``attention``
    (a model with attention is the pointer-generator, one without can neither attend nor copy).

    >>> build_model(attention=False).config.pointer
    False
    """
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    if vocab is None:
        vocab = news.news_vocab(news.make_reports(4000, split="train", seed=0))
    if not isinstance(vocab, UnkVocab):
        raise TypeError(f"vocab must be an UnkVocab, got {type(vocab).__name__}")
    pointer = attention if pointer is None else pointer
    config = SummariserConfig.from_vocab(
        vocab, unk_id=vocab.unk_id, attention=attention, pointer=pointer, coverage=coverage, **sizes
    )
    return Summariser(config)


@torch.no_grad()
def summarise(model: Summariser, data: news.NewsData, max_steps: int = 40) -> list[list[str]]:
    """Greedy summaries of every report of ``data``, as word lists (in ``data``'s order)."""
    if not isinstance(data, news.NewsData):
        raise TypeError(f"data must be NewsData, got {type(data).__name__}")
    device = next(model.parameters()).device
    out: list[list[str]] = [[] for _ in range(len(data))]
    for chunk, batch in news.ordered_batches(data):
        ids = greedy_decode(model, batch.to(device), max_steps=max_steps).ids.tolist()
        for i, row, oovs in zip(chunk, ids, batch.oovs, strict=True):
            out[i] = news.words(row, data.vocab, oovs)
    return out


def score(outputs: list[list[str]], data: news.NewsData) -> dict[str, float]:
    """Summaries of every report of ``data`` (word lists, in ``data``'s order, as
    :func:`summarise` returns them) scored against the references: ROUGE-1/2/L F1 (0-100),
    the share of the references' out-of-vocabulary words written (``oov_recall``), the
    share of repeated trigrams in the outputs (``repeated_trigrams``) and the share that
    the reference does not repeat (``extra_repeats``)."""
    if not isinstance(data, news.NewsData):
        raise TypeError(f"data must be NewsData, got {type(data).__name__}")
    references = [r.summary for r in data.reports]
    if not isinstance(outputs, list) or len(outputs) != len(references):
        raise ValueError(
            f"outputs must be a list of one summary per report of data ({len(references)}), "
            f"got {type(outputs).__name__} of length {len(outputs) if hasattr(outputs, '__len__') else '?'}"
        )
    scores = rouge([" ".join(o) for o in outputs], [" ".join(r) for r in references])
    scores["oov_recall"] = oov_recall(outputs, references, set(data.vocab.itos))
    scores["repeated_trigrams"] = repeated_trigram_rate(outputs)
    scores["extra_repeats"] = repeated_trigram_rate(outputs, references)
    return scores


def evaluate(model: Summariser, data: news.NewsData, max_steps: int = 40) -> dict[str, float]:
    """Greedy summaries of ``data`` (:func:`summarise`), scored by :func:`score`."""
    return score(summarise(model, data, max_steps), data)
