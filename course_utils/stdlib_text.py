"""A real text for a character language model: the Python standard library's own source.

Every Python installation carries its standard library as ``.py`` files, so the text is
there offline, on every machine, and it is a text a Python learner recognises (notebook
17). :func:`stdlib_text` reads the top-level modules in sorted order and splits them into
training and validation text by file, so the two never share a file. Another Python
version has a slightly different library, hence a slightly different text: the
vocabulary is therefore fixed (:class:`CharVocab`, printable ASCII and the newline, plus
one unknown symbol), never read off the text, and trained weights work with any version.

:func:`random_windows` draws training windows, :func:`bigram_log_probs` is the baseline
without attention (the next character from the current one only, by counting).
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from course_utils._validate import check_ids, check_positive, check_tensor
from course_utils.data import TensorBatch

UNKNOWN = "\x00"  # stands for every character outside the vocabulary (shown as "?")
CHARS = UNKNOWN + "\n" + "".join(chr(c) for c in range(32, 127))


class CharVocab:
    """A fixed character vocabulary: ids are positions in ``chars``; id 0 is the unknown.

    >>> v = CharVocab()
    >>> len(v), v.encode("def").tolist()
    (97, [70, 71, 72])
    >>> v.decode(v.encode("x = 'é'\\n"))  # é is outside the vocabulary
    "x = '?'\\n"
    """

    def __init__(self, chars: str = CHARS):
        if not isinstance(chars, str) or not chars or chars[0] != UNKNOWN:
            raise ValueError("chars must be a non-empty string that starts with the unknown symbol")
        if len(set(chars)) != len(chars):
            raise ValueError("chars must not repeat a character")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """``(len(text),)`` long tensor of ids; unknown characters get id 0."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return torch.tensor([self.stoi.get(c, 0) for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """The text of ``ids`` (a 1-D tensor or list); the unknown symbol prints as ``?``."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join("?" if i == 0 else self.chars[i] for i in ids)

    def label(self, i: int) -> str:
        """A readable label for one id, for plots: ``\\n`` for newline, ``␣`` for space."""
        return {"\n": "\\n", " ": "␣", UNKNOWN: "?"}.get(self.chars[i], self.chars[i])


def stdlib_files(folder: str | Path | None = None) -> list[Path]:
    """The top-level ``.py`` files of the standard library (or of ``folder``), sorted by name."""
    folder = Path(folder if folder is not None else sysconfig.get_paths()["stdlib"])
    if not folder.is_dir():
        raise ValueError(f"folder must be a directory, got {folder}")
    return sorted(folder.glob("*.py"), key=lambda p: p.name)


@dataclass
class TextSplits:
    """Training and validation text, with the files each came from."""

    train: str
    val: str
    train_files: list[str]
    val_files: list[str]


def stdlib_text(folder: str | Path | None = None, val_every: int = 10) -> TextSplits:
    """The standard library's top-level modules as text, split by file.

    Files are read in sorted order; every ``val_every``-th file (the 10th, 20th, ...) goes
    to validation, the rest to training, so both halves cover the alphabet of module names.
    ``folder`` defaults to the running interpreter's standard library.
    """
    check_positive("val_every", val_every)
    if val_every < 2:
        raise ValueError(
            f"val_every must be at least 2 (else nothing is left to train on), got {val_every}"
        )
    train, val, train_files, val_files = [], [], [], []
    for i, path in enumerate(stdlib_files(folder), start=1):
        text = path.read_text(encoding="utf-8", errors="replace")
        if i % val_every == 0:
            val.append(text)
            val_files.append(path.name)
        else:
            train.append(text)
            train_files.append(path.name)
    if not train or not val:
        raise ValueError(f"{folder} holds too few .py files to split them")
    return TextSplits("".join(train), "".join(val), train_files, val_files)


@dataclass
class LMBatch(TensorBatch):
    """Windows of text ``x (B, L)`` and the next character at every position ``y (B, L)``."""

    x: torch.Tensor
    y: torch.Tensor


def random_windows(
    ids: torch.Tensor,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    start_token: int | None = None,
) -> LMBatch:
    """``batch_size`` windows of ``length`` characters at random offsets of ``ids`` (1-D).

    With ``start_token``, every window begins with that id, followed by ``length - 1``
    characters of text (a start-of-text token, as many language models have).

    >>> ids = torch.arange(10)
    >>> b = random_windows(ids, 2, 3, torch.Generator().manual_seed(0))
    >>> bool((b.y == b.x + 1).all())  # the target is the next character
    True
    >>> random_windows(ids, 1, 3, torch.Generator().manual_seed(0), start_token=0).x[:, 0]
    tensor([0])
    """
    check_tensor("ids", ids, dims=1)
    check_positive("batch_size", batch_size)
    check_positive("length", length)
    if len(ids) < length + 1:
        raise ValueError(f"ids has {len(ids)} characters, fewer than length + 1 = {length + 1}")
    text = length if start_token is None else length - 1  # characters of text per window
    starts = torch.randint(0, len(ids) - text, (batch_size,), generator=generator)
    windows = ids[starts[:, None] + torch.arange(text + 1)]  # (B, text + 1)
    windows = _with_start(windows, start_token)  # (B, L + 1)
    return LMBatch(windows[:, :-1], windows[:, 1:])


def _with_start(windows: torch.Tensor, start_token: int | None) -> torch.Tensor:
    if start_token is None:
        return windows
    if isinstance(start_token, bool) or not isinstance(start_token, int) or start_token < 0:
        raise ValueError(f"start_token must be an id >= 0, got {start_token!r}")
    return torch.cat([torch.full_like(windows[:, :1], start_token), windows], dim=1)


def evenly_spaced_windows(
    ids: torch.Tensor, count: int, length: int, start_token: int | None = None
) -> torch.Tensor:
    """``(count, length + 1)`` windows spread evenly over ``ids``: a fixed evaluation set.

    With ``start_token`` each window is that id followed by ``length`` characters.
    """
    check_tensor("ids", ids, dims=1)
    check_positive("count", count)
    check_positive("length", length)
    text = length if start_token is None else length - 1
    if len(ids) < length + 1:
        raise ValueError(f"ids has {len(ids)} characters, fewer than length + 1 = {length + 1}")
    starts = torch.linspace(0, len(ids) - text - 1, count).long()
    return _with_start(ids[starts[:, None] + torch.arange(text + 1)], start_token)


def bigram_log_probs(ids: torch.Tensor, vocab_size: int, smoothing: float = 1.0) -> torch.Tensor:
    """``(V, V)`` table of ``log p(next | current)`` counted on ``ids``, add-``smoothing``.

    The model with no attention at all: it reads one character and predicts the next.

    >>> table = bigram_log_probs(torch.tensor([0, 1, 0, 1, 0, 2]), 3, smoothing=0.0)
    >>> [round(p, 3) for p in table[0].exp().tolist()]  # after 0 came 1, 1, 2
    [0.0, 0.667, 0.333]
    """
    check_tensor("ids", ids, dims=1)
    check_positive("vocab_size", vocab_size)
    if smoothing < 0:
        raise ValueError(f"smoothing must be >= 0, got {smoothing}")
    if len(ids) and int(ids.max()) >= vocab_size:
        raise ValueError(f"ids holds id {int(ids.max())}, outside vocab_size {vocab_size}")
    pairs = ids[:-1] * vocab_size + ids[1:]
    counts = torch.bincount(pairs, minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)
    counts = counts.double() + smoothing
    return (counts / counts.sum(-1, keepdim=True)).log().float()


def bigram_loss(table: torch.Tensor, windows: torch.Tensor) -> float:
    """Mean cross-entropy (nats per character) of the bigram ``table`` on ``windows (N, L + 1)``."""
    check_ids("windows", windows)
    if table.dim() != 2 or table.shape[0] != table.shape[1]:
        raise ValueError(f"table must be (V, V), got shape {tuple(table.shape)}")
    return -table[windows[:, :-1], windows[:, 1:]].mean().item()
