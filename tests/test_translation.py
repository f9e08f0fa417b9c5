"""The synthetic language pair: determinism, valid gold alignments, the target grammar, splits."""

import pytest
import sacrebleu
import torch

from course_utils.apps import translation
from course_utils.apps.translation import (
    ADJECTIVES,
    INTRANSITIVE,
    NOUNS,
    PLACES,
    PREPOSITIONS,
    TRANSITIVE,
    detokenize,
    make_pairs,
    make_splits,
)
from course_utils.data import length_bucketed_batches, make_batch
from course_utils.decoding import greedy_decode
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig
from course_utils.training import seq2seq_loss

PAIRS = make_pairs(400, seed=5)

# Independent facts about the lexicon, read off the tables once.
NOUN_BY_SOURCE = {}  # source form -> (target noun, class, plural?)
for sg, pl, tgt, cls in NOUNS + PLACES:
    NOUN_BY_SOURCE[sg] = (tgt, cls, False)
    NOUN_BY_SOURCE[pl] = (tgt, cls, True)
NOUN_CLASS = {tgt: cls for _, _, tgt, cls in NOUNS + PLACES}
VERBS = {**TRANSITIVE, **INTRANSITIVE}
VERB_WORDS = {w for ws in VERBS.values() for w in ws}


def test_same_seed_same_pairs_and_other_seed_other_pairs():
    a, b = make_pairs(50, seed=11), make_pairs(50, seed=11)
    assert [(p.src, p.tgt, p.alignment, p.possible) for p in a] == [
        (p.src, p.tgt, p.alignment, p.possible) for p in b
    ]
    assert [p.src for p in make_pairs(50, seed=12)] != [p.src for p in a]


def test_lengths_and_distinct_sources():
    lengths = range(4, 31)
    pairs = make_pairs(300, seed=0, lengths=lengths)
    assert all(len(p.src) in lengths for p in pairs)
    assert len({" ".join(p.src) for p in pairs}) == 300
    seen = {len(p.src) for p in pairs}
    assert min(seen) <= 6 and max(seen) >= 28  # short to long, not only the middle


def test_alignment_indices_in_range_and_every_target_token_aligned():
    for pair in PAIRS:
        S, T = len(pair.src), len(pair.tgt)
        assert all(0 <= s < S and 0 <= t < T for s, t in pair.possible), str(pair)
        assert set(pair.alignment) <= set(pair.possible)
        assert {t for _, t in pair.alignment} == set(range(T)), str(pair)
        assert len(set(pair.alignment)) == len(pair.alignment)


def _allowed_links():
    """(source word, target token) pairs a sure link may join, from the lexicon tables."""
    allowed = {("a", "ena"), ("some", "ena"), ("that", "ki")}
    for src, (tgt, _, plural) in NOUN_BY_SOURCE.items():
        allowed.add((src, tgt))
        if plural:
            allowed.add((src, "-le"))
    for src, tgt in ADJECTIVES.items():
        allowed |= {(src, tgt), (src, "-ko"), (src, "-ti")}
    for src, words in VERBS.items():
        allowed |= {(src, w) for w in words} | {(src, "-n"), (src, "-r")}
    for words, tgt in PREPOSITIONS.items():
        allowed |= {(w, tgt) for w in words}
    return allowed


def test_every_sure_link_joins_a_word_and_its_translation():
    allowed = _allowed_links()
    for pair in PAIRS:
        for s, t in pair.alignment:
            assert (pair.src[s], pair.tgt[t]) in allowed, (pair.src[s], pair.tgt[t], str(pair))
        assert all(pair.src[s] != "the" for s, _ in pair.possible)  # "the" is not translated


def _main_subject(src):
    """The main subject noun's source form: the first noun of the sentence."""
    return next(w for w in src if w in NOUN_BY_SOURCE)


def test_the_verb_comes_last_and_agrees_with_the_subject():
    for pair in PAIRS:
        verb_src = next(  # the main verb: the first verb not inside a relative clause
            w for i, w in enumerate(pair.src) if w in VERBS and pair.src[i - 1] != "that"
        )
        words = VERBS[verb_src]
        plural = NOUN_BY_SOURCE[_main_subject(pair.src)][2]
        assert pair.tgt[-len(words) - 1 : -1] == words, str(pair)
        assert pair.tgt[-1] == ("-r" if plural else "-n"), str(pair)


def test_relative_clause_verbs_agree_with_their_head_noun():
    checked = 0
    for pair in PAIRS:
        for i, w in enumerate(pair.src):
            if w != "that":
                continue
            head_plural = NOUN_BY_SOURCE[pair.src[i - 1]][2]  # "... cats that saw ..."
            verb = pair.src[i + 1]
            # the suffix linked to the relative verb
            suffixes = [
                pair.tgt[t] for s, t in pair.alignment if s == i + 1 and pair.tgt[t] in ("-n", "-r")
            ]
            assert suffixes == ["-r" if head_plural else "-n"], (verb, str(pair))
            checked += 1
    assert checked > 20


def test_adjectives_follow_their_noun_and_agree_with_its_class():
    checked = 0
    for pair in PAIRS:
        tgt = pair.tgt
        for j, tok in enumerate(tgt):
            if tok not in ADJECTIVES.values():
                continue
            noun_at = j - 2 if tgt[j - 1] == "-le" else j - 1
            noun = tgt[noun_at]
            assert noun in NOUN_CLASS, f"adjective {tok} not right after a noun in {tgt}"
            assert tgt[j + 1] == ("-ko" if NOUN_CLASS[noun] == 1 else "-ti"), str(pair)
            checked += 1
    assert checked > 100


def test_plurals_one_to_two_and_two_to_one_words():
    for pair in PAIRS:
        src, tgt = pair.src, pair.tgt
        plural_nouns = sum(w in NOUN_BY_SOURCE and NOUN_BY_SOURCE[w][2] for w in src)
        assert tgt.count("-le") == plural_nouns
        assert tgt.count("apo") == tgt.count("dar") == src.count("helped")
        assert all(tgt[j + 1] == "dar" for j, tok in enumerate(tgt) if tok == "apo")
        assert tgt.count("yoko") == src.count("next") == src.count("to")
        # every source verb gives exactly one agreement suffix
        assert tgt.count("-n") + tgt.count("-r") == sum(w in VERBS for w in src)


def test_postpositions_follow_their_noun_phrase():
    for pair in PAIRS:
        for j, tok in enumerate(pair.tgt):
            if tok in PREPOSITIONS.values():
                before = pair.tgt[j - 1]
                # a noun phrase ends with a noun, its plural, an adjective suffix or "ena"
                assert before in NOUN_CLASS or before in ("-le", "-ko", "-ti", "ena"), str(pair)


def test_detokenize_glues_suffixes():
    assert detokenize(["pela", "-le", "nimi", "-ti", "kesa", "-r"]) == "pelale nimiti kesar"
    assert detokenize(["-n"]) == "-n"  # nothing to glue onto


def test_splits_never_overlap_and_follow_the_hash():
    splits = make_splits(600, 100, 100, seed=3)
    sources = {name: {" ".join(p.src) for p in s.pairs} for name, s in splits.items()}
    assert not sources["train"] & sources["val"]
    assert not sources["train"] & sources["test"]
    assert not sources["val"] & sources["test"]
    for name, s in splits.items():
        assert all(translation.split_of(p.src) == name for p in s.pairs)


def test_a_split_does_not_depend_on_the_other_split_sizes():
    a = make_splits(50, 10, 10, seed=4)
    b = make_splits(50, 30, 40, seed=4)
    assert a["train"].src == b["train"].src and a["train"].tgt == b["train"].tgt


def test_ids_round_trip_and_batches():
    data = make_splits(64, 4, 4, seed=0)["train"]
    for i in range(5):
        assert data.src_vocab.decode(data.src[i]) == data.pairs[i].src
        assert data.tgt_vocab.decode(data.tgt[i]) == data.pairs[i].tgt
    assert " -> " in data.show(0)
    batch = next(length_bucketed_batches(data, batch_size=16, seed=0))
    assert batch.src.shape[0] == 16
    assert int(batch.src.max()) < len(data.src_vocab)
    assert int(batch.tgt_out.max()) < len(data.tgt_vocab)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="lengths"):
        make_pairs(3, lengths=[2])
    with pytest.raises(ValueError, match="n must"):
        make_pairs(0)
    with pytest.raises(ValueError, match="split"):
        make_pairs(3, split="dev")
    with pytest.raises(ValueError, match="special"):
        translation.to_ids(PAIRS[:2], translation.source_vocab(), _shifted_vocab())


def _shifted_vocab():
    from course_utils.data import Vocab

    class Shifted(Vocab):
        def __init__(self):
            super().__init__(["x"])
            self.itos = ["x"] + self.itos[:-1]

    return Shifted()


def test_seq2seq_with_its_own_target_vocabulary():
    data = make_splits(8, 2, 2, seed=0)["train"]
    sv, tv = data.src_vocab, data.tgt_vocab
    model = Seq2Seq(Seq2SeqConfig.from_vocab(sv, tv, emb_dim=8, rnn_dim=12))
    batch = make_batch([data[i] for i in range(4)], tv)
    logits = model(batch.src, batch.src_len, batch.tgt_in)
    assert logits.shape == (*batch.tgt_in.shape, len(tv))
    assert model.encoder.embedding.num_embeddings == len(sv)
    assert torch.isfinite(seq2seq_loss(model, batch))
    # from_vocab with one vocabulary uses it on both sides
    assert Seq2Seq(Seq2SeqConfig.from_vocab(sv)).decoder.out.out_features == len(sv)


@pytest.mark.parametrize("attention", [False, True])
def test_the_application_protocol(attention):
    splits = make_splits(60, 5, 12, lengths=range(4, 8), seed=1)
    torch.manual_seed(0)
    model = translation.build_model(attention)
    assert hasattr(model, "start") and hasattr(model, "step")
    assert (
        (model.decoder.attention is not None)
        if attention
        else not hasattr(model.decoder, "attention")
    )
    test = splits["test"]
    scores = translation.evaluate(model, test, batch_size=5)
    # the reference: each sentence decoded alone, scored by sacrebleu directly
    hyps, hits = [], 0
    for i in range(len(test)):
        one = make_batch([test[i]], test.vocab)
        ids = greedy_decode(model, one, 2 * len(test.src[i]) + 5).ids[0].tolist()
        hyps.append(detokenize(test.vocab.decode(ids)))
        hits += ids[: len(test.tgt[i]) + 1] == test.tgt[i] + [test.vocab.eos_id]
    refs = [detokenize(p.tgt) for p in test.pairs]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["exact_match"] == hits / len(test)
    with pytest.raises(TypeError, match="attention"):
        translation.build_model("yes")
    with pytest.raises(TypeError, match="data"):
        translation.evaluate(model, [])
