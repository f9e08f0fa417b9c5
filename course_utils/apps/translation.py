"""A seeded synthetic language pair with gold word alignments, for notebook 07.

The source is a small English; the target ("Tarvi", an invented language) differs from it the
way real pairs differ:

- **word order**: the verb goes last (subject object verb), an adjective follows its noun,
  prepositions become postpositions, and a relative clause puts its verb last too;
- **agreement**: a verb takes the suffix ``-n`` after a singular subject and ``-r`` after a
  plural one; an adjective takes ``-ko`` or ``-ti`` by the *class* of its noun (every noun
  belongs to one of two classes, as grammatical gender does); plural nouns take ``-le``;
- **one word -> two**: ``helped`` is ``apo dar`` ("help give");
- **two words -> one**: ``next to`` is the single postposition ``yoko``;
- **one word -> none**: ``the`` has no translation; ``a`` and ``some`` become ``ena``.

Suffixes are separate target tokens (written with a leading ``-``), so the target vocabulary
stays small; :func:`detokenize` glues them onto their word for reading and for BLEU.

>>> pair = make_pairs(1, seed=201, lengths=range(8, 11))[0]
>>> print(pair)
the teachers helped the tall cats next to some trees
->  sorin -le miro -le saba -ko koru -le ena yoko apo dar -r
>>> pair.alignment  # (source index, target index)
[(1, 0), (1, 1), (5, 2), (5, 3), (4, 4), (4, 5), (9, 6), (9, 7), (8, 8), (6, 9), (7, 9), (2, 10), (2, 11), (2, 12)]
>>> detokenize(pair.tgt)
'sorinle mirole sabako korule ena yoko apo darr'

Read it as: "the teachers" -> ``sorin -le`` ("the" is not translated; ``-le`` marks the
plural), the object "the tall cats" comes before the verb with the adjective after its noun
(``saba -ko``: cats are class 1), the place phrase turns around ("next to some trees" ->
``koru -le ena yoko``: "some" becomes ``ena`` and "next to" the one postposition ``yoko``),
and the sentence ends with the two words of "helped" and the plural-subject suffix ``-r``.

Every target token is aligned to at least one source token (the *sure* links above).
``pair.possible`` adds, for every agreement suffix, a link to the word it agrees with (the
subject for a verb suffix, the noun for an adjective suffix): the "possible" links of Och &
Ney's alignment error rate. Which split (train / val / test) a sentence belongs to is decided
by a hash of its source text, so no source sentence is ever in two splits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from course_utils._validate import check_positive
from course_utils.bahdanau import AttentionSeq2Seq, BahdanauConfig
from course_utils.data import SPLITS, TranslationPairs, Vocab, make_batch, split_by_hash
from course_utils.decoding import greedy_decode
from course_utils.metrics import corpus_bleu, exact_match
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig

# ---------------------------------------------------------------------------------------
# The lexicon: source word(s) -> target word(s)
# ---------------------------------------------------------------------------------------
# noun: (singular, plural, target, class)
NOUNS = [
    ("cat", "cats", "miro", 1),
    ("dog", "dogs", "kaba", 2),
    ("bird", "birds", "tulo", 2),
    ("child", "children", "nuki", 1),
    ("teacher", "teachers", "sorin", 1),
    ("farmer", "farmers", "pado", 2),
]
PLACES = [  # nouns that appear inside prepositional phrases
    ("house", "houses", "dase", 1),
    ("garden", "gardens", "pela", 2),
    ("river", "rivers", "vanu", 1),
    ("tree", "trees", "koru", 2),
]
ADJECTIVES = {"big": "gora", "small": "nimi", "tall": "saba", "red": "roku", "happy": "lumo"}
TRANSITIVE = {"saw": ["mira"], "chased": ["kesa"], "liked": ["ama"], "helped": ["apo", "dar"]}
INTRANSITIVE = {"slept": ["tena"], "sang": ["kanta"]}
PREPOSITIONS = {("in",): "ni", ("on",): "ue", ("near",): "soba", ("next", "to"): "yoko"}
PLURAL, INDEFINITE, RELATIVE = "-le", "ena", "ki"
VERB_SUFFIX = {False: "-n", True: "-r"}  # by the subject's number: singular, plural
ADJ_SUFFIX = {1: "-ko", 2: "-ti"}  # by the noun's class


def source_words() -> list[str]:
    """Every source token the grammar can produce, in a fixed order."""
    words = ["the", "a", "some", "that"]
    for sg, pl, _, _ in NOUNS + PLACES:
        words += [sg, pl]
    words += list(ADJECTIVES) + list(TRANSITIVE) + list(INTRANSITIVE)
    words += [w for prep in PREPOSITIONS for w in prep if w not in words]
    return words


def target_words() -> list[str]:
    """Every target token (words and suffixes), in a fixed order."""
    words = [t for _, _, t, _ in NOUNS + PLACES] + list(ADJECTIVES.values())
    for verbs in (TRANSITIVE, INTRANSITIVE):
        words += [w for ws in verbs.values() for w in ws]
    words += list(PREPOSITIONS.values()) + [INDEFINITE, RELATIVE, PLURAL]
    words += list(VERB_SUFFIX.values()) + list(ADJ_SUFFIX.values())
    return words


def source_vocab() -> Vocab:
    return Vocab(source_words())


def target_vocab() -> Vocab:
    return Vocab(target_words())


def detokenize(tokens: Sequence[str]) -> str:
    """Target tokens -> text: a suffix token (``-xx``) is glued onto the word before it.

    >>> detokenize(["miro", "-le", "kaba", "mira", "-r"])
    'mirole kaba mirar'
    """
    words: list[str] = []
    for tok in tokens:
        if tok.startswith("-") and len(tok) > 1 and words:
            words[-1] += tok[1:]
        else:
            words.append(tok)
    return " ".join(words)


# ---------------------------------------------------------------------------------------
# One sentence pair, built phrase by phrase with its alignment
# ---------------------------------------------------------------------------------------
@dataclass
class SentencePair:
    """Source and target tokens, the sure alignment, and the possible links (a superset)."""

    src: list[str]
    tgt: list[str]
    alignment: list[tuple[int, int]]  # sure links (source index, target index)
    possible: list[tuple[int, int]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{' '.join(self.src)}\n->  {' '.join(self.tgt)}"


class _Builder:
    """Appends source and target tokens and records the links between them."""

    def __init__(self):
        self.src: list[str] = []
        self.tgt: list[str] = []
        self.sure: list[tuple[int, int]] = []
        self.extra: list[tuple[int, int]] = []

    def add_src(self, word: str) -> int:
        self.src.append(word)
        return len(self.src) - 1

    def add_tgt(self, word: str, *sources: int) -> int:
        self.tgt.append(word)
        self.sure += [(s, len(self.tgt) - 1) for s in sources]
        return len(self.tgt) - 1


@dataclass
class _NounPhrase:
    noun: tuple[str, str, str, int]
    plural: bool
    definite: bool
    adjective: str | None = None
    relative: tuple[str, _NounPhrase] | None = None  # "that" VERB OBJECT


@dataclass
class _Sentence:
    subject: _NounPhrase
    verb: str
    obj: _NounPhrase | None
    pps: list[tuple[tuple[str, ...], _NounPhrase]]


def _emit_np_source(b: _Builder, np: _NounPhrase) -> dict:
    """Source order: DET (ADJ) NOUN (that VERB NP). Returns the source indices of its parts."""
    det = "the" if np.definite else ("some" if np.plural else "a")
    idx = {"det": b.add_src(det)}
    if np.adjective:
        idx["adj"] = b.add_src(np.adjective)
    idx["noun"] = b.add_src(np.noun[1] if np.plural else np.noun[0])
    if np.relative:
        verb, obj = np.relative
        idx["that"] = b.add_src("that")
        idx["verb"] = b.add_src(verb)
        idx["obj"] = _emit_np_source(b, obj)
    return idx


def _emit_np_target(b: _Builder, np: _NounPhrase, idx: dict) -> None:
    """Target order: NOUN (-le) (ADJ -agr) (ena) (ki NP VERB -agr)."""
    b.add_tgt(np.noun[2], idx["noun"])
    if np.plural:
        b.add_tgt(PLURAL, idx["noun"])
    if np.adjective:
        b.add_tgt(ADJECTIVES[np.adjective], idx["adj"])
        j = b.add_tgt(ADJ_SUFFIX[np.noun[3]], idx["adj"])
        b.extra.append((idx["noun"], j))  # the suffix agrees with the noun's class
    if not np.definite:
        b.add_tgt(INDEFINITE, idx["det"])  # "the" has no translation
    if np.relative:
        verb, obj = np.relative
        b.add_tgt(RELATIVE, idx["that"])
        _emit_np_target(b, obj, idx["obj"])
        _emit_verb(b, verb, idx["verb"], subject=idx["noun"], plural=np.plural)


def _emit_verb(b: _Builder, verb: str, i: int, subject: int, plural: bool) -> None:
    for w in {**TRANSITIVE, **INTRANSITIVE}[verb]:
        b.add_tgt(w, i)
    j = b.add_tgt(VERB_SUFFIX[plural], i)
    b.extra.append((subject, j))  # the suffix agrees with the subject's number


def _render(s: _Sentence) -> SentencePair:
    b = _Builder()
    subj = _emit_np_source(b, s.subject)
    verb = b.add_src(s.verb)
    obj = _emit_np_source(b, s.obj) if s.obj else None
    pps = []
    for prep, np in s.pps:
        prep_idx = [b.add_src(w) for w in prep]
        pps.append((prep, prep_idx, np, _emit_np_source(b, np)))
    # Target: SUBJECT OBJECT (NP POSTPOSITION)* VERB -agr
    _emit_np_target(b, s.subject, subj)
    if s.obj:
        _emit_np_target(b, s.obj, obj)
    for prep, prep_idx, np, np_idx in pps:
        _emit_np_target(b, np, np_idx)
        b.add_tgt(PREPOSITIONS[prep], *prep_idx)
    _emit_verb(b, s.verb, verb, subject=subj["noun"], plural=s.subject.plural)
    possible = sorted(set(b.sure) | set(b.extra), key=lambda st: (st[1], st[0]))
    return SentencePair(b.src, b.tgt, b.sure, possible)


def _source_length(s: _Sentence) -> int:
    def np_len(np: _NounPhrase) -> int:
        n = 2 + (np.adjective is not None)
        return n + (2 + np_len(np.relative[1]) if np.relative else 0)

    n = np_len(s.subject) + 1 + (np_len(s.obj) if s.obj else 0)
    return n + sum(len(p) + np_len(np) for p, np in s.pps)


def _random_np(rng: random.Random, nouns: list[tuple[str, str, str, int]]) -> _NounPhrase:
    return _NounPhrase(rng.choice(nouns), plural=rng.random() < 0.4, definite=rng.random() < 0.6)


def _grow(rng: random.Random, s: _Sentence) -> None:
    """Make the sentence a little longer: an adjective, a relative clause or a PP."""
    nps = [s.subject] + ([s.obj] if s.obj else []) + [np for _, np in s.pps]
    choice = rng.random()
    if choice < 0.35:
        bare = [np for np in nps if np.adjective is None]
        if bare:
            rng.choice(bare).adjective = rng.choice(list(ADJECTIVES))
            return
    if choice < 0.6:
        core = [s.subject] + ([s.obj] if s.obj else [])
        open_nps = [np for np in core if np.relative is None]  # subject or object only
        if open_nps:
            verb = rng.choice(list(TRANSITIVE))
            rng.choice(open_nps).relative = (verb, _random_np(rng, NOUNS))
            return
    prep = rng.choice(list(PREPOSITIONS))
    s.pps.append((prep, _random_np(rng, PLACES)))


def _random_sentence(rng: random.Random, length: int) -> _Sentence | None:
    """A sentence of exactly ``length`` source tokens, or None when growth overshot."""
    transitive = length > 4 and rng.random() < 0.75
    s = _Sentence(
        subject=_random_np(rng, NOUNS),
        verb=rng.choice(list(TRANSITIVE if transitive else INTRANSITIVE)),
        obj=_random_np(rng, NOUNS) if transitive else None,
        pps=[],
    )
    while _source_length(s) < length:
        _grow(rng, s)
    return s if _source_length(s) == length else None


def split_of(src: Sequence[str], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split of a source sentence: :func:`~course_utils.data.split_by_hash` of its words."""
    return split_by_hash(" ".join(src), fractions)


def make_pairs(
    n: int,
    seed: int = 0,
    lengths: Sequence[int] | range = range(4, 31),
    split: str | None = None,
) -> list[SentencePair]:
    """``n`` distinct sentence pairs, source lengths drawn uniformly from ``lengths``.

    With ``split``, only sentences whose source hashes into that split are kept.

    >>> [" ".join(p.src) for p in make_pairs(2, seed=0, lengths=[4, 5])]
    ['the tall teachers slept', 'the big farmer sang']
    """
    lengths = list(lengths)
    if not lengths or min(lengths) < 3:
        raise ValueError(f"lengths must be a non-empty list of ints >= 3, got {lengths}")
    check_positive("n", n)
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    rng = random.Random(f"{seed}-{split}")  # each split has its own stream
    pairs, seen, tries = [], set(), 0
    while len(pairs) < n:
        length = rng.choice(lengths)
        # Some lengths are hard to hit exactly: try the same one a while, so that the
        # lengths stay close to uniform, then move on (a length may be used up).
        for _ in range(50):
            tries += 1
            if tries > 1000 * n:
                raise ValueError(f"could not draw {n} distinct sentences with lengths {lengths}")
            sentence = _random_sentence(rng, length)
            if sentence is None:
                continue
            pair = _render(sentence)
            key = " ".join(pair.src)
            if key in seen or (split is not None and split_of(pair.src) != split):
                continue
            seen.add(key)
            pairs.append(pair)
            break
    return pairs


# ---------------------------------------------------------------------------------------
# Id sequences for the models
# ---------------------------------------------------------------------------------------
def to_ids(
    pairs: Sequence[SentencePair], src_vocab: Vocab, tgt_vocab: Vocab, split: str = "train"
) -> TranslationPairs:
    """Token pairs -> :class:`TranslationPairs` of ids (no ``<bos>`` / ``<eos>``)."""
    if src_vocab.itos[:3] != tgt_vocab.itos[:3]:
        raise ValueError("src_vocab and tgt_vocab must put the special tokens at the same ids")
    return TranslationPairs(
        src=[src_vocab.encode(p.src) for p in pairs],
        tgt=[tgt_vocab.encode(p.tgt) for p in pairs],
        vocab=tgt_vocab,
        task="translate",
        split=split,
        src_vocab=src_vocab,
        pairs=list(pairs),
    )


def make_splits(
    n_train: int,
    n_val: int,
    n_test: int,
    lengths: Sequence[int] | range = range(4, 31),
    seed: int = 0,
) -> dict[str, TranslationPairs]:
    """Train, validation and test :class:`TranslationPairs`; no source is in two splits.

    >>> splits = make_splits(20, 5, 5, seed=0)
    >>> {name: len(s) for name, s in splits.items()}
    {'train': 20, 'val': 5, 'test': 5}
    """
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    src_vocab, tgt_vocab = source_vocab(), target_vocab()
    return {
        s: to_ids(make_pairs(sizes[s], seed, lengths, split=s), src_vocab, tgt_vocab, s)
        for s in SPLITS
    }


# --- The application protocol of course_utils.apps: make_splits (above), build_model, evaluate
def build_model(
    attention: bool, emb_dim: int = 32, rnn_dim: int = 64, attn_dim: int = 32
) -> nn.Module:
    """Notebook 07's GRU model from :func:`source_vocab` to :func:`target_vocab`, with
    additive attention (:class:`~course_utils.bahdanau.AttentionSeq2Seq`) or without."""
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {attention!r}")
    vocabs, sizes = (source_vocab(), target_vocab()), dict(emb_dim=emb_dim, rnn_dim=rnn_dim)
    if attention:
        return AttentionSeq2Seq(BahdanauConfig.from_vocab(*vocabs, **sizes, attn_dim=attn_dim))
    return Seq2Seq(Seq2SeqConfig.from_vocab(*vocabs, **sizes))


@torch.no_grad()
def evaluate(model: nn.Module, data: TranslationPairs, batch_size: int = 125) -> dict[str, float]:
    """Greedy translations of ``data`` -> ``{"bleu": corpus BLEU, "exact_match": share}``.

    Each output may run to ``2 * source length + 5`` tokens, so scores do not depend on
    ``batch_size``.

    >>> splits = make_splits(40, 5, 5, lengths=range(4, 8), seed=0)
    >>> sorted(evaluate(build_model(attention=True), splits["test"]))
    ['bleu', 'exact_match']
    """
    if not isinstance(data, TranslationPairs):
        raise TypeError(f"data must be TranslationPairs, got {type(data).__name__}")
    device, vocab = next(model.parameters()).device, data.vocab
    hypotheses, hits = [], 0
    for start in range(0, len(data), batch_size):
        batch = make_batch(
            [data[i] for i in range(start, min(start + batch_size, len(data)))], vocab
        )
        batch = batch.to(device)
        limit = 2 * batch.src_len + 5  # (B,)
        ids = greedy_decode(model, batch, max_steps=int(limit.max())).ids  # (B, T)
        ids = ids.masked_fill(
            torch.arange(ids.shape[1], device=device) >= limit[:, None], vocab.pad_id
        )
        hits += int(exact_match(ids, batch.tgt_out, vocab.eos_id, vocab.pad_id).sum())
        hypotheses += [detokenize(vocab.decode(row)) for row in ids]
    references = [detokenize(p.tgt) for p in data.pairs]
    return {"bleu": corpus_bleu(hypotheses, references), "exact_match": hits / len(data)}
