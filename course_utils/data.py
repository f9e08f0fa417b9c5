"""Seeded synthetic sequence tasks, their vocabulary, and padded batches.

A task maps a source sequence of symbols to a target sequence::

    copy:    r e f f e n  ->  r e f f e n
    reverse: r e f f e n  ->  n e f f e r
    sort:    r e f f e n  ->  e e f f n r

(these three are ``make_split(task, "train", n=1, lengths=[6], seed=1).show(0)``).

Every example is drawn from a ``torch.Generator`` seeded by the caller, so the data never
depends on the order in which notebook cells ran. Which split (train / val / test) an
example belongs to is decided by a hash of its source sequence, so the splits can never
share a source sequence, whatever their sizes.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field

import torch

from course_utils._validate import check_positive, check_tensor

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
# Every Vocab puts the specials first, so their ids are their places in SPECIALS. Model
# configs default to these; config.ModelConfig.from_vocab takes them from the Vocab itself.
PAD_ID, BOS_ID, EOS_ID = (SPECIALS.index(t) for t in SPECIALS)


class Vocab:
    """A fixed list of tokens; ids are positions in that list. Special tokens come first.

    >>> v = Vocab(["a", "b", "c"])
    >>> v.encode(["c", "a"])
    [5, 3]
    >>> v.decode([5, 3, v.eos_id, v.pad_id])
    ['c', 'a']
    """

    def __init__(self, symbols: Sequence[str]):
        symbols = list(symbols)
        if len(set(symbols)) != len(symbols):
            raise ValueError(f"symbols must be unique, got {symbols}")
        clash = set(symbols) & set(SPECIALS)
        if clash:
            raise ValueError(f"symbols must not contain special tokens {sorted(clash)}")
        self.itos = list(SPECIALS) + symbols
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = (self.stoi[t] for t in SPECIALS)

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {' '.join(self.itos[:10])}{' ...' if len(self) > 10 else ''})"

    @property
    def symbols(self) -> list[str]:
        """The non-special tokens."""
        return self.itos[len(SPECIALS) :]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        unknown = [t for t in tokens if t not in self.stoi]
        if unknown:
            raise ValueError(f"tokens not in the vocabulary: {unknown[:5]}")
        return [self.stoi[t] for t in tokens]

    def decode(self, ids: Sequence[int] | torch.Tensor, strip: bool = True) -> list[str]:
        """Ids -> tokens. With ``strip``, stop at the first <eos> and drop <bos>/<pad>."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            tok = self.itos[i]
            if strip and tok == EOS:
                break
            if strip and tok in (PAD, BOS):
                continue
            out.append(tok)
        return out


def letter_vocab(num_symbols: int = 20) -> Vocab:
    """A vocabulary of ``num_symbols`` lower-case letters (``a``, ``b``, ...)."""
    check_positive("num_symbols", num_symbols)
    if not 2 <= num_symbols <= 26:
        raise ValueError(f"num_symbols must be in 2..26, got {num_symbols}")
    return Vocab([chr(ord("a") + i) for i in range(num_symbols)])


# ---------------------------------------------------------------------------------------
# Tasks: a function from a source list of symbol ids (no specials) to the target list.
# Add a task by adding an entry here; make_split and the notebooks pick it up by name.
# ---------------------------------------------------------------------------------------
TASKS: dict[str, Callable[[list[int]], list[int]]] = {
    "copy": lambda src: list(src),
    "reverse": lambda src: list(reversed(src)),
    "sort": lambda src: sorted(src),
}

SPLITS = ("train", "val", "test")


def split_by_hash(key: str, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split (``"train"``, ``"val"`` or ``"test"``) of whatever ``key`` names, from a stable
    hash of its text: CRC-32 of its UTF-8 bytes over 2^32, cut at ``fractions``. The same key
    always lands in the same split, so no two splits can share one. Every generated data set of
    the course splits this way; each builds its own key (a sentence's words, a story's text, a
    digit image's index).

    >>> split_by_hash("the cat saw two red birds"), split_by_hash("digit-0")
    ('train', 'test')
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three shares >= 0 that add up to 1, got {fractions}")
    h = zlib.crc32(key.encode("utf-8")) / 2**32
    if h < fractions[0]:
        return "train"
    return "val" if h < fractions[0] + fractions[1] else "test"


def split_of(src: Sequence[int], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split a source sequence of ids belongs to: :func:`split_by_hash` of its list's text."""
    return split_by_hash(str(list(src)), fractions)


@dataclass
class SequencePairs:
    """Source and target id sequences (no <bos>/<eos>), plus the vocabulary they use."""

    src: list[list[int]]
    tgt: list[list[int]]
    vocab: Vocab
    task: str
    split: str

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.src[i], self.tgt[i]

    def batch(self, rows: list[int]) -> Batch:
        """The examples ``rows`` as one padded :class:`Batch`."""
        return make_batch([self[i] for i in rows], self.vocab)

    def lengths(self) -> torch.Tensor:
        return torch.tensor([len(s) for s in self.src])

    def show(self, i: int) -> str:
        """One example as text, e.g. ``'r d b g q -> q g b d r'``."""
        return f"{' '.join(self.vocab.decode(self.src[i]))} -> {' '.join(self.vocab.decode(self.tgt[i]))}"


@dataclass
class TranslationPairs(SequencePairs):
    """:class:`SequencePairs` with separate source and target vocabularies.

    ``vocab`` is the target vocabulary (batches take ``<pad>``, ``<bos>``, ``<eos>`` from it;
    the specials have the same ids in both). ``pairs`` keeps the token-level pairs they came
    from (with their alignments, for :mod:`course_utils.apps.translation`'s language).
    """

    src_vocab: Vocab | None = None
    pairs: list = field(default_factory=list)

    @property
    def tgt_vocab(self) -> Vocab:
        return self.vocab

    def show(self, i: int) -> str:
        src = " ".join(self.src_vocab.decode(self.src[i]))
        return f"{src} -> {' '.join(self.vocab.decode(self.tgt[i]))}"


def make_split(
    task: str,
    split: str,
    n: int,
    lengths: Sequence[int] | range,
    vocab: Vocab | None = None,
    seed: int = 0,
) -> SequencePairs:
    """``n`` examples of ``task`` for one split, with source lengths drawn uniformly from ``lengths``.

    >>> data = make_split("reverse", "train", n=3, lengths=range(4, 7), seed=0)
    >>> [data.show(i) for i in range(3)]
    ['t n a d t h -> h t d a n t', 'r d b g q -> q g b d r', 's q q i -> i q q s']

    Examples inside one split are distinct. Each split uses its own random stream (from
    ``seed`` and the split's name), so asking for more test data leaves the train data as
    it was.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    lengths = list(lengths)
    if not lengths or min(lengths) < 1:
        raise ValueError(f"lengths must be a non-empty list of positive ints, got {lengths}")
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    vocab = vocab or letter_vocab()
    first = len(SPECIALS)
    g = torch.Generator().manual_seed(seed * 1000 + SPLITS.index(split))
    fn = TASKS[task]
    seen: set[tuple[int, ...]] = set()
    src_all, tgt_all = [], []
    tries = 0
    while len(src_all) < n:
        tries += 1
        if tries > 200 * n:
            raise ValueError(
                f"could not draw {n} distinct {split} examples with lengths {lengths} "
                f"and {len(vocab.symbols)} symbols: ask for fewer or longer sequences"
            )
        length = lengths[int(torch.randint(len(lengths), (1,), generator=g))]
        src = (torch.randint(len(vocab.symbols), (length,), generator=g) + first).tolist()
        key = tuple(src)
        if key in seen or split_of(src) != split:
            continue
        seen.add(key)
        src_all.append(src)
        tgt_all.append(fn(src))
    return SequencePairs(src_all, tgt_all, vocab, task, split)


def make_splits(
    task: str,
    lengths: Sequence[int] | range,
    n_train: int,
    n_val: int,
    n_test: int,
    vocab: Vocab | None = None,
    seed: int = 0,
) -> dict[str, SequencePairs]:
    """Train, validation and test splits of one task; no source sequence is in two of them."""
    vocab = vocab or letter_vocab()
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    return {s: make_split(task, s, sizes[s], lengths, vocab, seed) for s in SPLITS}


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------
def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """A list of id lists -> a ``(B, T_max)`` long tensor, right-padded with ``pad_id``."""
    if len(seqs) == 0:
        raise ValueError("seqs must not be empty")
    T = max(len(s) for s in seqs)
    out = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def lengths_to_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``(B,)`` lengths -> ``(B, width)`` boolean mask, True at the real (non-pad) positions.

    The course's one padding mask (True = may be attended to, the mask rule of
    :func:`course_utils.attention.causal_mask` too); every model and ``Batch.src_mask`` use it.

    >>> lengths_to_mask(torch.tensor([3, 1]), 4)
    tensor([[ True,  True,  True, False],
            [ True, False, False, False]])
    """
    check_tensor("lengths", lengths, dims=1)
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integer lengths, got dtype {lengths.dtype}")
    check_positive("width", width)
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]  # (B, width)


class TensorBatch:
    """The base of every batch dataclass in the course: :meth:`to` moves each tensor field to
    a device and keeps the other fields (lists of words, ``None``) as they are."""

    def to(self, device: torch.device | str) -> TensorBatch:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        return type(self)(**moved)


@dataclass
class Batch(TensorBatch):
    """A padded batch for an encoder-decoder.

    ``src`` (B, S) and ``src_len`` (B,): the source ids and true lengths.
    ``tgt_in`` (B, T): ``<bos> y1 .. yn`` (what the decoder reads, teacher forcing).
    ``tgt_out`` (B, T): ``y1 .. yn <eos>`` (what it must predict); both padded with <pad>.
    """

    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    @property
    def src_mask(self) -> torch.Tensor:
        """``(B, S)`` boolean, True where the source holds a real token."""
        return lengths_to_mask(self.src_len, self.src.shape[1])


def make_batch(pairs: Sequence[tuple[list[int], list[int]]], vocab: Vocab) -> Batch:
    src = [s for s, _ in pairs]
    tgt = [t for _, t in pairs]
    return Batch(
        src=pad_sequences(src, vocab.pad_id),
        src_len=torch.tensor([len(s) for s in src]),
        tgt_in=pad_sequences([[vocab.bos_id] + t for t in tgt], vocab.pad_id),
        tgt_out=pad_sequences([t + [vocab.eos_id] for t in tgt], vocab.pad_id),
    )


def batches(
    data: SequencePairs,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
) -> Iterator[Batch]:
    """Yield :class:`Batch` objects over ``data``; with ``shuffle``, in a seeded random order."""
    order = list(range(len(data)))
    if shuffle:
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)).tolist()
    for start in range(0, len(order), batch_size):
        yield make_batch([data[i] for i in order[start : start + batch_size]], data.vocab)


def shuffled_batches(
    data: Sized,
    batch_size: int,
    seed: int = 0,
    drop_last: bool = True,
    reseed_each_epoch: bool = False,
) -> Iterator:
    """``data.batch(rows)`` for shuffled rows, forever: every data set with ``len`` and a
    ``batch(rows)`` method draws its training batches here; ``drop_last`` drops an epoch's
    last incomplete batch. One generator seeded with ``seed`` draws every epoch's order, or
    (``reseed_each_epoch``) each epoch seeds its own with ``seed * 100_003 + epoch``: both
    kept, so every notebook draws the batches it always drew.

    >>> class Rows(list):
    ...     def batch(self, rows):
    ...         return [self[i] for i in rows]
    >>> batches = shuffled_batches(Rows("abcde"), 2, seed=0)
    >>> [sorted(next(batches)) for _ in range(3)]  # 2 batches an epoch, 1 row left over
    [['a', 'e'], ['b', 'd'], ['d', 'e']]
    """
    check_positive("batch_size", batch_size)
    if not callable(getattr(data, "batch", None)):
        raise TypeError(f"data must have a batch(rows) method, got {type(data).__name__}")
    if len(data) < (batch_size if drop_last else 1):  # else the loop below never yields
        raise ValueError(f"data has {len(data)} rows, fewer than one batch of {batch_size=}")
    g, epoch = torch.Generator().manual_seed(seed), 0
    while True:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch) if reseed_each_epoch else g
        order = torch.randperm(len(data), generator=g).tolist()
        stop = len(order) - batch_size + 1 if drop_last else len(order)
        for start in range(0, stop, batch_size):
            yield data.batch(order[start : start + batch_size])
        epoch += 1


def infinite_batches(data: SequencePairs, batch_size: int, seed: int = 0) -> Iterator[Batch]:
    """Shuffled :class:`Batch` objects forever, a new seeded order each epoch, the last
    incomplete batch kept (:func:`shuffled_batches`)."""
    return shuffled_batches(data, batch_size, seed, drop_last=False, reseed_each_epoch=True)


# ---------------------------------------------------------------------------------------
# Training batches of similar lengths
# ---------------------------------------------------------------------------------------


def length_bucketed_chunks(
    lengths: torch.Tensor, batch_size: int, seed: int = 0
) -> Iterator[list[int]]:
    """Lists of example indices of (nearly) equal ``lengths`` (N,), forever: every index
    once per epoch, a new seeded random order each epoch (see :func:`length_bucketed_batches`)."""
    check_positive("batch_size", batch_size)
    if len(lengths) == 0:  # else the loop below never yields
        raise ValueError("lengths is empty: there is nothing to batch")
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        shuffled = torch.randperm(len(lengths), generator=g)  # random order within each length
        order = shuffled[torch.argsort(lengths[shuffled], stable=True)].tolist()  # by length
        chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for c in torch.randperm(len(chunks), generator=g).tolist():  # batches in random order
            yield chunks[c]
        epoch += 1


def length_bucketed_batches(data: SequencePairs, batch_size: int, seed: int = 0) -> Iterator[Batch]:
    """Batches of sources of (nearly) equal length, in a new seeded random order each epoch.

    An attention decoder runs one Python step per target token and attends over every
    source position, so a batch costs about ``S x T``; grouping inputs of similar length
    keeps both small instead of padding everything to the longest input. Like
    :func:`infinite_batches`, it yields :class:`Batch` objects forever, and every example
    is seen once per epoch.

    >>> data = make_split("reverse", "train", n=40, lengths=range(4, 31), seed=0)
    >>> first = next(length_bucketed_batches(data, batch_size=8))
    >>> int(first.src_len.max() - first.src_len.min()) <= 8
    True
    """
    if not isinstance(data, SequencePairs):
        raise TypeError(f"data must be a SequencePairs, got {type(data).__name__}")
    for chunk in length_bucketed_chunks(data.lengths(), batch_size, seed):
        yield make_batch([data[i] for i in chunk], data.vocab)
