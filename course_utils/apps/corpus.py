"""Loading a real parallel corpus: tab-separated sentence pairs, one pair a line.

This is the format of the Tatoeba / Anki sentence-pair files (``source<TAB>target`` plus
optional extra columns such as attribution, which are ignored)::

    Go.<TAB>Va !<TAB>CC-BY 2.0 (France) Attribution: tatoeba.org ...
    Hi.<TAB>Salut !

:func:`read_pairs` tokenises each side (lower case, punctuation split off words) and filters
by length; :func:`build_vocab` keeps the tokens seen at least ``min_freq`` times and maps the
rest to ``<unk>``; :func:`load_corpus` does both and returns id sequences ready for the
course's batching and models. A malformed line raises ``ValueError`` naming its line number
and content.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.tsv"
>>> _ = path.write_text("Go.\\tVa !\\tattribution\\nI won!\\tJ'ai gagné !\\n", encoding="utf-8")
>>> read_pairs(path)
[(['go', '.'], ['va', '!']), (['i', 'won', '!'], ["j'ai", 'gagné', '!'])]
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from course_utils._validate import check_positive
from course_utils.data import SPECIALS, TranslationPairs, Vocab

UNK = "<unk>"
# A word (letters, digits, inner apostrophes as in "don't" or "j'ai") or one punctuation mark.
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")


def tokenize(text: str, lowercase: bool = True) -> list[str]:
    """Split a sentence into words and punctuation marks.

    >>> tokenize("Don't stop, Tom!")
    ["don't", 'stop', ',', 'tom', '!']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _TOKEN.findall(text.lower() if lowercase else text)


def read_pairs(
    path: str | Path,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    lowercase: bool = True,
    src_column: int = 0,
    tgt_column: int = 1,
) -> list[tuple[list[str], list[str]]]:
    """Tokenised ``(source, target)`` pairs from a tab-separated file (UTF-8).

    Blank lines are skipped. A pair is kept when both sides have ``min_tokens`` to ``max_tokens``
    tokens (``None``: no upper limit). A line with too few columns, or an empty source or
    target, raises ``ValueError`` with its line number and content.
    """
    if min_tokens < 1 or (max_tokens is not None and max_tokens < min_tokens):
        raise ValueError(
            f"need 1 <= min_tokens <= max_tokens, got min_tokens {min_tokens}, max_tokens {max_tokens}"
        )
    if src_column == tgt_column or min(src_column, tgt_column) < 0:
        raise ValueError(
            f"src_column and tgt_column must be different non-negative column numbers, got "
            f"{src_column} and {tgt_column}"
        )
    path = Path(path)
    need = max(src_column, tgt_column) + 1
    pairs = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) < need:
                raise ValueError(
                    f"{path.name}, line {number}: expected at least {need} tab-separated "
                    f"columns, got {len(columns)}: {line!r}"
                )
            src = tokenize(columns[src_column], lowercase)
            tgt = tokenize(columns[tgt_column], lowercase)
            if not src or not tgt:
                side = "source" if not src else "target"
                raise ValueError(f"{path.name}, line {number}: empty {side} sentence: {line!r}")
            if all(min_tokens <= len(x) <= (max_tokens or len(x)) for x in (src, tgt)):
                pairs.append((src, tgt))
    return pairs


class UnkVocab(Vocab):
    """A :class:`~course_utils.data.Vocab` with ``<unk>``: unknown tokens encode to its id.

    >>> v = UnkVocab(["a", "b"])
    >>> v.encode(["b", "zebra"])
    [5, 3]
    """

    def __init__(self, symbols: Sequence[str]):
        super().__init__([UNK] + [s for s in symbols if s != UNK])
        self.unk_id = self.stoi[UNK]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]


def build_vocab(sentences: Sequence[Sequence[str]], min_freq: int = 1) -> UnkVocab:
    """The tokens that occur at least ``min_freq`` times, most frequent first (ties by name).

    >>> build_vocab([["a", "b", "a"], ["c", "a", "b"]], min_freq=2).symbols
    ['<unk>', 'a', 'b']
    """
    check_positive("min_freq", min_freq)
    counts = Counter(tok for sentence in sentences for tok in sentence)
    clash = set(counts) & set(SPECIALS)
    if clash:
        raise ValueError(f"sentences contain the reserved tokens {sorted(clash)}")
    kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
    return UnkVocab(kept)


def load_corpus(
    path: str | Path,
    min_freq: int = 1,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    src_vocab: UnkVocab | None = None,
    tgt_vocab: UnkVocab | None = None,
) -> TranslationPairs:
    """Read, tokenise, filter and encode a tab-separated corpus.

    Vocabularies are built from this file unless given (give the training split's
    vocabularies when loading a test file). ``.pairs`` of the result is empty: a real corpus
    has no gold alignment.
    """
    pairs = read_pairs(path, min_tokens=min_tokens, max_tokens=max_tokens)
    if not pairs:
        raise ValueError(f"{Path(path).name}: no sentence pair left after length filtering")
    src_vocab = src_vocab or build_vocab([s for s, _ in pairs], min_freq)
    tgt_vocab = tgt_vocab or build_vocab([t for _, t in pairs], min_freq)
    return TranslationPairs(
        src=[src_vocab.encode(s) for s, _ in pairs],
        tgt=[tgt_vocab.encode(t) for _, t in pairs],
        vocab=tgt_vocab,
        task=Path(path).name,
        split="file",
        src_vocab=src_vocab,
    )
