"""The tab-separated sentence-pair loader, on files the test writes itself."""

import pytest

from course_utils.apps.corpus import UNK, build_vocab, load_corpus, read_pairs, tokenize
from course_utils.data import length_bucketed_batches

GOOD = (
    "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (CM)\n"
    "\n"
    "I won!\tJ'ai gagné !\n"
    "The cat sleeps.\tLe chat dort.\textra\tcolumns\r\n"
    "The dog sleeps.\tLe chien dort.\n"
    "Tom doesn't know the cat, the dog or the bird.\tTom ne connaît pas le chat, le chien ou l'oiseau.\n"
)


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(GOOD, encoding="utf-8")
    return path


def test_tokenize_splits_punctuation_keeps_inner_apostrophes():
    assert tokenize("Tom doesn't know.") == ["tom", "doesn't", "know", "."]
    assert tokenize("J'ai gagné !") == ["j'ai", "gagné", "!"]
    assert tokenize("Hi, Tom", lowercase=False) == ["Hi", ",", "Tom"]
    with pytest.raises(TypeError, match="text"):
        tokenize(3)


def test_read_pairs_well_formed_file(good):
    pairs = read_pairs(good)
    assert len(pairs) == 5  # the blank line is skipped, extra columns ignored
    assert pairs[0] == (["go", "."], ["va", "!"])
    assert pairs[2] == (["the", "cat", "sleeps", "."], ["le", "chat", "dort", "."])  # CRLF
    assert all(isinstance(tok, str) for s, t in pairs for tok in s + t)


def test_length_filter_keeps_pairs_whose_both_sides_fit(good):
    pairs = read_pairs(good, min_tokens=3, max_tokens=4)
    assert [len(s) for s, _ in pairs] == [3, 4, 4]
    for s, t in pairs:
        assert 3 <= len(s) <= 4 and 3 <= len(t) <= 4
    assert len(read_pairs(good, max_tokens=100)) == 5


def test_columns_can_be_chosen(good):
    swapped = read_pairs(good, src_column=1, tgt_column=0)
    assert swapped[0] == (["va", "!"], ["go", "."])


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("only one column", "line 3: expected at least 2 tab-separated columns, got 1"),
        ("\tnothing on the left", "line 3: empty source"),
        ("right side is punctuation-free?\t   ", "line 3: empty target"),
    ],
)
def test_malformed_line_names_number_and_content(tmp_path, bad_line, message):
    path = tmp_path / "bad.tsv"
    path.write_text(f"Go.\tVa !\nHi.\tSalut !\n{bad_line}\nOk.\tD'accord.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        read_pairs(path)
    assert repr(bad_line) in str(info.value)
    assert "bad.tsv" in str(info.value)


def test_bad_arguments(good):
    with pytest.raises(ValueError, match="min_tokens"):
        read_pairs(good, min_tokens=0)
    with pytest.raises(ValueError, match="min_tokens"):
        read_pairs(good, min_tokens=5, max_tokens=3)
    with pytest.raises(ValueError, match="column"):
        read_pairs(good, src_column=1, tgt_column=1)
    with pytest.raises(ValueError, match="min_freq"):
        build_vocab([["a"]], min_freq=0)
    with pytest.raises(ValueError, match="reserved"):
        build_vocab([["<pad>", "a"]])


def test_build_vocab_min_frequency_and_unknown_token():
    sentences = [["the", "cat", "sleeps"], ["the", "dog", "sleeps"], ["the", "cat"]]
    vocab = build_vocab(sentences, min_freq=2)
    assert vocab.symbols == [UNK, "the", "cat", "sleeps"]  # by count, ties by name
    ids = vocab.encode(["the", "dog", "zebra"])
    assert ids[1] == ids[2] == vocab.unk_id
    assert vocab.decode(ids) == ["the", UNK, UNK]
    assert vocab.itos[:3] == ["<pad>", "<bos>", "<eos>"]
    assert build_vocab(sentences).symbols == [UNK, "the", "cat", "sleeps", "dog"]


def test_load_corpus_encodes_and_batches(good):
    data = load_corpus(good, min_freq=1)
    assert len(data) == 5
    assert data.src_vocab.decode(data.src[2]) == ["the", "cat", "sleeps", "."]
    assert data.tgt_vocab.decode(data.tgt[0]) == ["va", "!"]
    batch = next(length_bucketed_batches(data, batch_size=2))
    assert batch.src.shape[0] == 2


def test_load_corpus_with_given_vocabularies_maps_new_words_to_unk(good, tmp_path):
    train = load_corpus(good, min_freq=2)
    other = tmp_path / "test.tsv"
    other.write_text("The zebra sleeps.\tLe zèbre dort.\n", encoding="utf-8")
    test = load_corpus(other, src_vocab=train.src_vocab, tgt_vocab=train.tgt_vocab)
    assert train.src_vocab.decode(test.src[0]) == ["the", UNK, "sleeps", "."]
    assert train.tgt_vocab.decode(test.tgt[0]) == ["le", UNK, "dort", "."]


def test_load_corpus_empty_after_filtering(good):
    with pytest.raises(ValueError, match="no sentence pair"):
        load_corpus(good, min_tokens=50)
