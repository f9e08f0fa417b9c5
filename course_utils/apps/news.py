"""Seeded news-like reports with rare names, and a loader for real summarisation data.

Notebook 08 needs documents whose summaries must name people, places and numbers that a
capped vocabulary has never seen. :func:`make_reports` writes short reports from templates:
a lead sentence says who did what, where and when; a detail sentence, somewhere later, adds
how many; distractor sentences mention other people, places and numbers. The reference
summary restates the key facts in one or two sentences, in its own word order.

>>> item = make_reports(1, split="test", seed=9)[0]
>>> print(" ".join(item.document))  # doctest: +NORMALIZE_WHITESPACE
Robedo , the director of the city council , said on tuesday that the city council will
build a new clinic in Kenemere after months of talks . Kenilu did not comment on the
budget . it will cost 4125 pounds .
>>> print(" ".join(item.summary))
Robedo will build a clinic in Kenemere for 4125 pounds , the director said on tuesday .
>>> item.facts, item.key_sentences  # the lead and the detail sentence hold the facts
(['Robedo', 'Kenemere', '4125'], [0, 2])

People and places come from syllable-built name pools. Each name belongs to one split by a
hash of its text, so the names of test reports never occur in training: a model can get a
test name right only by copying it from the document. Numbers are drawn from a wide range,
so most of them are rare too.

:func:`read_jsonl` reads real data in a common simple format, one JSON object per line with
``document`` and ``summary`` strings, and tokenises it the way :mod:`course_utils.apps.corpus`
does; a malformed line raises ``ValueError`` naming its line number.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from course_utils._validate import check_positive
from course_utils.apps.corpus import UnkVocab, tokenize
from course_utils.data import (
    SPECIALS,
    SPLITS,
    TensorBatch,
    length_bucketed_chunks,
    pad_sequences,
    split_by_hash,
)

# ---------------------------------------------------------------------------------------
# Name pools: every name belongs to exactly one split
# ---------------------------------------------------------------------------------------
_ONSETS = ["b", "d", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u"]
_PLACE_ENDINGS = ["ton", "vik", "burg", "port", "mere", "ham", "dal"]


def name_split(name: str, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split a name belongs to, from a stable hash of its text.

    >>> name_split("Robedo"), name_split("Nekoti")
    ('test', 'train')
    """
    return split_by_hash(name.lower(), fractions)


def _syllables(k: int) -> list[str]:
    pairs = [o + v for o in _ONSETS for v in _VOWELS]
    return ["".join(p) for p in itertools.product(pairs, repeat=k)]


def name_pool(kind: str, split: str) -> list[str]:
    """Every person (``kind="person"``: three syllables) or place (two syllables and an
    ending) name of one split, in a fixed order.

    >>> len(name_pool("person", "train")) > 10 * len(name_pool("person", "test")) / 2
    True
    """
    if kind not in ("person", "place"):
        raise ValueError(f"kind must be 'person' or 'place', got {kind!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if kind == "person":
        names = [s.capitalize() for s in _syllables(3)]
    else:
        names = [s.capitalize() + e for s in _syllables(2) for e in _PLACE_ENDINGS]
    return [n for n in names if name_split(n) == split]


# ---------------------------------------------------------------------------------------
# The templates
# ---------------------------------------------------------------------------------------
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
ROLES = ["director", "mayor", "chair", "spokesperson", "manager"]
BODIES = ["the city council", "the hospital", "the university", "the rail company"]
BUILDINGS = ["school", "bridge", "library", "station", "clinic", "market"]
RACES = ["marathon", "cycling race", "chess final", "rowing cup"]
EVENTS = ["flood", "fire", "storm", "power cut"]
GOODS = ["buses", "trains", "ambulances", "computers"]
WEATHER = ["cold", "warm", "calm", "wet", "windy", "dry"]
SEASONS = ["spring", "summer", "autumn", "winter"]
TOPICS = ["plan", "budget", "vote", "report"]


@dataclass
class Report:
    """One report: ``document`` and ``summary`` tokens, the key ``facts`` (the summary's
    names, places and numbers, each of which occurs in the document) and ``key_sentences``,
    the indices of the document's sentences that hold them."""

    document: list[str]
    summary: list[str]
    facts: list[str]
    key_sentences: list[int]


def _event(rng: random.Random, who: str, where: str, n: str) -> tuple[str, str, str]:
    """(lead sentence, detail sentence, summary) for one event; all mention the facts."""
    day, role = rng.choice(DAYS), rng.choice(ROLES)
    kind = rng.randrange(4)
    if kind == 0:
        body, thing = rng.choice(BODIES), rng.choice(BUILDINGS)
        return (
            f"{who} , the {role} of {body} , said on {day} that {body} will build a new "
            f"{thing} in {where} after months of talks .",
            f"it will cost {n} pounds .",
            f"{who} will build a {thing} in {where} for {n} pounds , the {role} said on {day} .",
        )
    if kind == 1:
        race = rng.choice(RACES)
        return (
            f"{who} won the {race} in {where} on {day} , ahead of a field of local favourites .",
            f"{who} finished {n} seconds ahead of the runner-up .",
            f"{who} won the {race} in {where} by {n} seconds on {day} .",
        )
    if kind == 2:
        event = rng.choice(EVENTS)
        return (
            f"people in {where} left their homes on {day} after a {event} , the {role} , {who} , "
            "told reporters .",
            f"about {n} residents spent the night in the sports hall .",
            f"a {event} forced {n} residents of {where} from their homes on {day} , said {who} .",
        )
    goods = rng.choice(GOODS)
    return (
        f"{who} signed a deal on {day} for new {goods} built by a company in {where} .",
        f"the order is for {n} {goods} in all .",
        f"{who} ordered {n} {goods} from {where} on {day} .",
    )


def _distractor(rng: random.Random, people: list[str], places: list[str]) -> str:
    who, where, n = rng.choice(people), rng.choice(places), str(rng.randrange(2, 2000))
    return rng.choice(
        [
            f"{who} , a {rng.choice(ROLES)} from {where} , said the {rng.choice(TOPICS)} was "
            f"{rng.choice(['fair', 'late', 'too small', 'a good start'])} .",
            f"last year {n} {rng.choice(BUILDINGS)}s were inspected in {where} .",
            f"the weather in {where} was {rng.choice(WEATHER)} on {rng.choice(DAYS)} .",
            f"{who} did not comment on the {rng.choice(TOPICS)} .",
            f"officials in {where} expect {n} visitors next {rng.choice(SEASONS)} .",
            "{} and {} will meet again in {} .".format(*rng.sample(people, 2), rng.choice(SEASONS)),
        ]
    )


def make_reports(
    n: int, split: str = "train", seed: int = 0, sentences: range = range(3, 9)
) -> list[Report]:
    """``n`` reports of one split, with names drawn only from that split's pools.

    A report tells one event or (more often) two; each event has a lead sentence and a
    detail sentence further on, and distractor sentences fill the report up to a length
    drawn from ``sentences``. The summary restates each event in one sentence, in the order
    the report tells them.
    """
    check_positive("n", n)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not sentences or min(sentences) < 3:
        raise ValueError(f"sentences must allow at least 3 sentences, got {sentences}")
    people, places = name_pool("person", split), name_pool("place", split)
    rng = random.Random(f"news-{seed}-{split}")
    reports = []
    for _ in range(n):
        n_events = 2 if rng.random() < 0.6 else 1
        length = max(rng.choice(sentences), 2 * n_events + 1)
        # Sentences as (text, role): role (k, 0) is event k's lead, (k, 1) its detail.
        events, facts, summary = [], [], []
        # The events of one report are of one kind and share every ordinary word (a day of
        # results, of orders, ...): only their names and numbers tell them apart.
        style = rng.random()
        for k in range(n_events):
            who, where = rng.choice(people), rng.choice(places)
            number = str(rng.randrange(10, 10_000))
            lead, detail, short = _event(random.Random(style), who, where, number)
            events.append([(lead, (k, 0)), (detail, (k, 1))])
            facts += [who, where, number]
            summary.append(short)
        others, elsewhere = rng.sample(people, 4), rng.sample(places, 4)
        text = [(_distractor(rng, others, elsewhere), None) for _ in range(length - 2 * n_events)]
        # Leads in order, each detail somewhere after its own lead.
        for k in range(n_events):
            start = max((i for i, (_, r) in enumerate(text) if r == (k - 1, 0)), default=-1) + 1
            text.insert(rng.randrange(start, len(text) + 1), events[k][0])
        for k in range(n_events):
            lead = next(i for i, (_, r) in enumerate(text) if r == (k, 0))
            text.insert(rng.randrange(lead + 1, len(text) + 1), events[k][1])
        reports.append(
            Report(
                document=" ".join(t for t, _ in text).split(),
                summary=" ".join(summary).split(),
                facts=facts,
                key_sentences=[i for i, (_, r) in enumerate(text) if r is not None],
            )
        )
    return reports


# ---------------------------------------------------------------------------------------
# Real data: one JSON object per line
# ---------------------------------------------------------------------------------------
def read_jsonl(path: str | Path, lowercase: bool = False) -> list[Report]:
    """Read ``{"document": ..., "summary": ...}`` lines into tokenised :class:`Report` s.

    Blank lines are skipped; anything else that is not such an object with two non-empty
    strings raises ``ValueError`` with the file name and line number. ``facts`` and
    ``key_sentences`` are empty: real data does not know them.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    reports = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path.name}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{where}: not valid JSON ({error.msg}): {line.strip()[:80]!r}"
                ) from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            fields = {}
            for key in ("document", "summary"):
                value = record.get(key)
                if not isinstance(value, str) or not value.strip():
                    raise ValueError(
                        f"{where}: '{key}' must be a non-empty string, got {value!r:.80}"
                    )
                fields[key] = tokenize(value, lowercase=lowercase)
            reports.append(Report(fields["document"], fields["summary"], [], []))
    if not reports:
        raise ValueError(f"{path.name}: no document in the file")
    return reports


def news_vocab(reports: Sequence[Report], max_size: int = 300, min_freq: int = 5) -> UnkVocab:
    """The capped vocabulary: at most ``max_size`` tokens of the documents and summaries,
    each in at least ``min_freq`` reports, most widespread first (ties by name). Counting
    reports, not occurrences, keeps out a name that one report repeats.

    >>> news_vocab(make_reports(200, seed=0)).encode(["the", "Zzyzx"])[1]  # unknown -> <unk>
    3
    """
    if not reports or not all(isinstance(r, Report) for r in reports):
        raise TypeError("reports must be a non-empty sequence of Report")
    for name, value in (("max_size", max_size), ("min_freq", min_freq)):
        check_positive(name, value)
    counts = Counter(t for r in reports for t in set(r.document + r.summary))
    clash = set(counts) & set(SPECIALS)
    if clash:
        raise ValueError(f"reports contain the reserved tokens {sorted(clash)}")
    kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
    return UnkVocab(kept[:max_size])


# ---------------------------------------------------------------------------------------
# Ids over an extended vocabulary, and batches
# ---------------------------------------------------------------------------------------
@dataclass
class Encoded:
    """One report in ids. ``src`` and ``tgt`` use the vocabulary (unknown words are
    ``<unk>``); ``src_ext`` and ``tgt_ext`` give the report's own out-of-vocabulary words the
    ids ``V, V + 1, ...`` in order of first appearance in the document (``oovs``). A summary
    word that is neither in the vocabulary nor in the document stays ``<unk>``."""

    src: list[int]
    src_ext: list[int]
    tgt: list[int]
    tgt_ext: list[int]
    oovs: list[str]


def encode(report: Report, vocab: UnkVocab) -> Encoded:
    """Ids of ``report`` in ``vocab``, extended by the document's unknown words.

    >>> v = UnkVocab(["won", "in"])
    >>> e = encode(Report(["Ada", "won", "in", "Rome"], ["Ada", "won", "in", "Oslo"], [], []), v)
    >>> e.src, e.src_ext, e.oovs, e.tgt_ext  # V = 6: Ada -> 6, Rome -> 7, Oslo -> <unk> = 3
    ([3, 4, 5, 3], [6, 4, 5, 7], ['Ada', 'Rome'], [6, 4, 5, 3])
    """
    if not isinstance(vocab, UnkVocab):
        raise TypeError(f"vocab must be an UnkVocab (it needs <unk>), got {type(vocab).__name__}")
    if not report.document or not report.summary:
        raise ValueError(
            f"a report needs a non-empty document and summary, got {len(report.document)} "
            f"and {len(report.summary)} tokens"
        )
    V, oovs = len(vocab), []
    for t in report.document:
        if t not in vocab.stoi and t not in oovs:
            oovs.append(t)
    extended = {t: V + i for i, t in enumerate(oovs)}

    def ext(tokens: list[str]) -> list[int]:
        return [vocab.stoi.get(t, extended.get(t, vocab.unk_id)) for t in tokens]

    return Encoded(
        vocab.encode(report.document),
        ext(report.document),
        vocab.encode(report.summary),
        ext(report.summary),
        oovs,
    )


class NewsData:
    """Reports of one split with their ids: ``reports``, ``vocab`` and ``encoded``."""

    def __init__(self, reports: Sequence[Report], vocab: UnkVocab, split: str = "train"):
        self.reports, self.vocab, self.split = list(reports), vocab, split
        self.encoded = [encode(r, vocab) for r in self.reports]

    def __len__(self) -> int:
        return len(self.reports)

    def __repr__(self) -> str:
        return f"NewsData({self.split}: {len(self)} reports, vocabulary of {len(self.vocab)})"


@dataclass
class NewsBatch(TensorBatch):
    """A padded batch. ``src``/``src_ext`` (B, S), ``src_len`` (B,), ``tgt_in`` (B, T)
    (``<bos>`` + summary, unknown words as ``<unk>``: what the decoder reads), ``tgt_out``
    and ``tgt_out_ext`` (B, T) (summary + ``<eos>``, in the vocabulary and extended), and
    ``oovs``, each report's own out-of-vocabulary words (to read ids >= V back)."""

    src: torch.Tensor
    src_ext: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_out_ext: torch.Tensor
    oovs: list[list[str]]


def make_news_batch(examples: Sequence[Encoded], vocab: UnkVocab) -> NewsBatch:
    """Pad a list of :class:`Encoded` reports into one :class:`NewsBatch`."""
    if not examples:
        raise ValueError("examples must not be empty")
    pad, bos, eos = vocab.pad_id, vocab.bos_id, vocab.eos_id
    return NewsBatch(
        src=pad_sequences([e.src for e in examples], pad),
        src_ext=pad_sequences([e.src_ext for e in examples], pad),
        src_len=torch.tensor([len(e.src) for e in examples]),
        tgt_in=pad_sequences([[bos] + e.tgt for e in examples], pad),
        tgt_out=pad_sequences([e.tgt + [eos] for e in examples], pad),
        tgt_out_ext=pad_sequences([e.tgt_ext + [eos] for e in examples], pad),
        oovs=[e.oovs for e in examples],
    )


def news_batches(data: NewsData, batch_size: int, seed: int = 0) -> Iterator[NewsBatch]:
    """Batches of documents of similar length, in a new seeded order each epoch, forever."""
    if not isinstance(data, NewsData):
        raise TypeError(f"data must be NewsData, got {type(data).__name__}")
    lengths = torch.tensor([len(e.src) for e in data.encoded])
    for chunk in length_bucketed_chunks(lengths, batch_size, seed):
        yield make_news_batch([data.encoded[i] for i in chunk], data.vocab)


def ordered_batches(data: NewsData, batch_size: int = 100) -> Iterator[tuple[list[int], NewsBatch]]:
    """``(indices, batch)`` pairs covering ``data`` once, documents sorted by length."""
    check_positive("batch_size", batch_size)
    order = sorted(range(len(data)), key=lambda i: len(data.encoded[i].src))
    for k in range(0, len(order), batch_size):
        chunk = order[k : k + batch_size]
        yield chunk, make_news_batch([data.encoded[i] for i in chunk], data.vocab)


def words(ids: list[int], vocab: UnkVocab, oovs: list[str]) -> list[str]:
    """Extended ids -> words, up to the first ``<eos>``: ids >= V name ``oovs[id - V]``.

    >>> words([5, 4, 2, 4], UnkVocab(["won"]), ["Ada"])  # V = 5: id 5 is "Ada"
    ['Ada', 'won']
    """
    out = []
    for i in ids:
        if i == vocab.eos_id:
            break
        if i != vocab.pad_id:
            out.append(vocab.itos[i] if i < len(vocab) else oovs[i - len(vocab)])
    return out
