"""The news-report generator, the JSON-lines loader, the capped vocabulary and the ids."""

import json

import pytest

from course_utils.apps import news
from course_utils.apps.corpus import UnkVocab


def test_generator_is_deterministic_by_seed():
    a = news.make_reports(20, split="val", seed=4)
    b = news.make_reports(20, split="val", seed=4)
    c = news.make_reports(20, split="val", seed=5)
    assert [r.document for r in a] == [r.document for r in b]
    assert [r.document for r in a] != [r.document for r in c]


def test_name_pools_are_disjoint_and_splits_use_only_their_own():
    for kind in ("person", "place"):
        pools = {s: set(news.name_pool(kind, s)) for s in ("train", "val", "test")}
        assert not pools["train"] & pools["val"] and not pools["train"] & pools["test"]
        assert not pools["val"] & pools["test"]
    people = {s: set(news.name_pool("person", s)) for s in ("train", "test")}
    places = {s: set(news.name_pool("place", s)) for s in ("train", "test")}
    for r in news.make_reports(200, split="test", seed=0):
        names = [t for t in r.document if t[:1].isupper()]
        assert names and all(t in people["test"] or t in places["test"] for t in names)
        assert not any(t in people["train"] or t in places["train"] for t in r.document)


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_fact_is_in_its_document_and_summary(split):
    for r in news.make_reports(300, split=split, seed=1):
        assert len(r.facts) in (3, 6)
        for fact in r.facts:
            assert fact in r.document and fact in r.summary
        # the key sentences hold the facts: split the document at its full stops
        sentences, current = [], []
        for t in r.document:
            current.append(t)
            if t == ".":
                sentences.append(current)
                current = []
        assert len(r.key_sentences) == 2 * len(r.facts) // 3
        held = {t for i in r.key_sentences for t in sentences[i]}
        assert set(r.facts) <= held
        assert 3 <= len(sentences) <= 8 and 25 <= len(r.document) <= 160


def test_vocabulary_is_capped_and_leaves_names_out():
    reports = news.make_reports(1000, seed=0)
    vocab = news.news_vocab(reports, max_size=120, min_freq=5)
    assert len(vocab.symbols) == 1 + 120  # <unk> and the 120 kept words
    names = {t for r in reports for t in r.facts if not t.isdigit()}
    assert not names & set(vocab.itos)
    in_every_report = news.news_vocab(reports, max_size=1000, min_freq=1000).symbols
    assert in_every_report[0] == "<unk>" and "." in in_every_report and "Ada" not in in_every_report


def test_encode_extends_the_vocabulary_per_document():
    vocab = UnkVocab(["won", "in", "."])
    report = news.Report("Ada won in Rome . Ada won .".split(), "Ada won in Oslo .".split(), [], [])
    e = news.encode(report, vocab)
    V = len(vocab)
    assert e.oovs == ["Ada", "Rome"]
    assert e.src == [vocab.unk_id, 4, 5, vocab.unk_id, 6, vocab.unk_id, 4, 6]
    assert e.src_ext == [V, 4, 5, V + 1, 6, V, 4, 6]
    assert e.tgt_ext == [V, 4, 5, vocab.unk_id, 6]  # Oslo is not in the document: <unk>
    assert e.tgt == [vocab.unk_id, 4, 5, vocab.unk_id, 6]


def test_batches_pad_and_keep_each_documents_words():
    data = news.NewsData(news.make_reports(10, seed=0), news.news_vocab(news.make_reports(300)))
    chunk, batch = next(news.ordered_batches(data, batch_size=4))
    assert batch.src.shape == batch.src_ext.shape and batch.src.shape[0] == 4
    for row, i in enumerate(chunk):
        e = data.encoded[i]
        assert batch.src_ext[row, : len(e.src)].tolist() == e.src_ext
        assert batch.tgt_out_ext[row, : len(e.tgt) + 1].tolist() == e.tgt_ext + [data.vocab.eos_id]
        assert batch.oovs[row] == e.oovs
    stream = news.news_batches(data, batch_size=3, seed=0)
    assert sum(len(next(stream).oovs) for _ in range(4)) == 10  # one epoch: 3 + 3 + 3 + 1


def _write(path, lines):
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_read_jsonl_reads_and_tokenises(tmp_path):
    lines = [json.dumps({"document": "Ada won in Rome.", "summary": "Ada won."}) + "\n", "\n"]
    reports = news.read_jsonl(_write(tmp_path / "a.jsonl", lines))
    assert [(r.document, r.summary) for r in reports] == [
        (["Ada", "won", "in", "Rome", "."], ["Ada", "won", "."])
    ]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json\n", "line 2: not valid JSON"),
        ("[1, 2]\n", "line 2: expected a JSON object"),
        ('{"document": "x"}\n', "line 2: 'summary' must be a non-empty string"),
        ('{"document": "", "summary": "y"}\n', "line 2: 'document' must be a non-empty string"),
        ('{"document": 3, "summary": "y"}\n', "line 2: 'document' must be a non-empty string"),
    ],
)
def test_read_jsonl_names_the_bad_line(tmp_path, bad, message):
    good = json.dumps({"document": "a b", "summary": "a"}) + "\n"
    with pytest.raises(ValueError, match=message):
        news.read_jsonl(_write(tmp_path / "bad.jsonl", [good, bad]))


def test_read_jsonl_rejects_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        news.read_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="no document"):
        news.read_jsonl(_write(tmp_path / "empty.jsonl", ["\n"]))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="n must be positive, got 0"):
        news.make_reports(0)
    with pytest.raises(ValueError, match="split must be one of"):
        news.make_reports(3, split="dev")
    with pytest.raises(ValueError, match="non-empty document and summary"):
        news.encode(news.Report([], ["a"], [], []), UnkVocab(["a"]))
    with pytest.raises(TypeError, match="UnkVocab"):
        news.encode(news.Report(["a"], ["a"], [], []), object())
    with pytest.raises(ValueError, match="examples must not be empty"):
        news.make_news_batch([], UnkVocab(["a"]))
    with pytest.raises(TypeError, match="NewsData"):
        next(news.news_batches([1, 2], 2))
