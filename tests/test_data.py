"""The seeded task generators, the vocabulary and batching."""

import dataclasses
import random
import re
import zlib

import pytest
import torch

from course_utils import data


def test_module_docstring_examples_are_what_the_generator_gives():
    lines = re.findall(r"^\s+(\w+):\s+([a-z ]+?)\s+->\s+([a-z ]+)$", data.__doc__, re.M)
    assert {task for task, _, _ in lines} == set(data.TASKS)
    for task, src, tgt in lines:
        made = data.make_split(task, "train", n=1, lengths=[6], seed=1)
        assert made.show(0) == f"{src} -> {tgt}"


@pytest.mark.parametrize("task", sorted(data.TASKS))
def test_targets_follow_the_task_rule(task):
    rule = {"copy": lambda s: s, "reverse": lambda s: s[::-1], "sort": sorted}[task]
    pairs = data.make_split(task, "val", n=50, lengths=range(1, 12), seed=3)
    for src, tgt in zip(pairs.src, pairs.tgt, strict=True):
        assert tgt == list(rule(src))


def test_same_seed_same_data_other_seed_other_data():
    a = data.make_splits("reverse", range(4, 10), 100, 20, 20, seed=7)
    b = data.make_splits("reverse", range(4, 10), 100, 20, 20, seed=7)
    c = data.make_splits("reverse", range(4, 10), 100, 20, 20, seed=8)
    for split in data.SPLITS:
        assert a[split].src == b[split].src and a[split].tgt == b[split].tgt
    assert a["train"].src != c["train"].src


def test_splits_never_overlap_and_are_internally_distinct():
    # Short sequences over 3 symbols: only 3^2 + 3^3 + 3^4 = 117 exist, so overlap would show.
    vocab = data.letter_vocab(3)
    splits = data.make_splits("copy", range(2, 5), 60, 6, 6, vocab=vocab, seed=0)
    sets = {name: {tuple(s) for s in split.src} for name, split in splits.items()}
    for name, split in splits.items():
        assert len(sets[name]) == len(split), f"{name} repeats an example"
    assert not sets["train"] & sets["val"]
    assert not sets["train"] & sets["test"]
    assert not sets["val"] & sets["test"]


def test_a_split_does_not_depend_on_the_size_of_the_others():
    small = data.make_splits("reverse", range(4, 8), 10, 5, 5, seed=0)
    large = data.make_splits("reverse", range(4, 8), 10, 50, 500, seed=0)
    assert small["train"].src == large["train"].src


def test_lengths_are_the_ones_asked_for():
    pairs = data.make_split("copy", "train", n=300, lengths=[4, 9, 30], seed=0)
    assert set(pairs.lengths().tolist()) == {4, 9, 30}


def test_impossible_request_says_why():
    with pytest.raises(ValueError, match="could not draw 50 distinct"):
        data.make_split("copy", "train", n=50, lengths=[1], vocab=data.letter_vocab(3))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"task": "shuffle"}, ["task", "shuffle"]),
        ({"split": "dev"}, ["split", "dev"]),
        ({"lengths": []}, ["lengths"]),
        ({"lengths": [0, 3]}, ["lengths"]),
        ({"n": 0}, ["n must be positive"]),
    ],
)
def test_bad_arguments_are_named(kwargs, words):
    args = {"task": "copy", "split": "train", "n": 5, "lengths": [4], "seed": 0} | kwargs
    with pytest.raises(ValueError) as info:
        data.make_split(**args)
    for word in words:
        assert word in str(info.value)


def test_vocab_round_trip_and_specials():
    v = data.letter_vocab(5)
    assert v.itos[:3] == list(data.SPECIALS) and v.symbols == list("abcde")
    ids = v.encode(list("cab"))
    assert v.decode(ids) == list("cab")
    assert v.decode([v.bos_id] + ids + [v.eos_id, 5, v.pad_id]) == list("cab")
    assert v.decode([v.bos_id, 3, v.eos_id], strip=False) == ["<bos>", "a", "<eos>"]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        v.encode(["z"])
    with pytest.raises(ValueError, match="unique"):
        data.Vocab(["a", "a"])
    with pytest.raises(ValueError, match="special"):
        data.Vocab(["a", "<pad>"])


def test_batch_layout_for_teacher_forcing():
    v = data.letter_vocab(5)
    pairs = [
        (v.encode(list("abc")), v.encode(list("cba"))),
        (v.encode(list("de")), v.encode(list("ed"))),
    ]
    b = data.make_batch(pairs, v)
    assert b.src.shape == (2, 3) and b.src_len.tolist() == [3, 2]
    assert b.src[1, 2] == v.pad_id
    # tgt_in is <bos> + target, tgt_out is target + <eos>: the decoder predicts one step ahead
    assert b.tgt_in[0].tolist() == [v.bos_id] + v.encode(list("cba"))
    assert b.tgt_out[0].tolist() == v.encode(list("cba")) + [v.eos_id]
    assert b.tgt_out[1].tolist() == v.encode(list("ed")) + [v.eos_id, v.pad_id]
    assert torch.equal(
        b.tgt_in[:, 1:], b.tgt_out[:, :-1].masked_fill(b.tgt_out[:, :-1] == v.eos_id, v.pad_id)
    )
    assert b.src_mask.tolist() == [[True, True, True], [True, True, False]]


def test_batches_cover_every_example_once_and_shuffle_is_seeded():
    pairs = data.make_split("copy", "train", n=23, lengths=range(3, 6), seed=0)
    seen = [
        tuple(row[:n].tolist())
        for b in data.batches(pairs, 5)
        for row, n in zip(b.src, b.src_len, strict=True)
    ]
    assert sorted(seen) == sorted(tuple(s) for s in pairs.src)
    first = [b.src for b in data.batches(pairs, 5, shuffle=True, seed=1)]
    again = [b.src for b in data.batches(pairs, 5, shuffle=True, seed=1)]
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    stream = data.infinite_batches(pairs, 5, seed=0)
    assert sum(next(stream).src.shape[0] for _ in range(10)) == 23 * 2  # 10 batches = 2 epochs


def test_pad_sequences():
    out = data.pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]] and out.dtype == torch.long
    with pytest.raises(ValueError, match="seqs"):
        data.pad_sequences([], pad_id=0)


# --- one hash split for every data set (issue 34) ---
def _old_split(data: bytes, train: float = 0.8, val: float = 0.1) -> str:
    """The formula each data set used to write out for itself: CRC-32 over 2^32, 80/10/10."""
    h = zlib.crc32(data) / 2**32
    return "train" if h < train else ("val" if h < train + val else "test")


def test_every_data_set_splits_exactly_as_before():
    from course_utils.apps import news, rationales, scenes, stories, translation

    rng = random.Random(0)
    words = ["the", "cat", "two", "red", "saw", "a", "farmer", "Robedo"]
    for _ in range(2000):
        sentence = [rng.choice(words) for _ in range(rng.randint(1, 8))]
        ids = [rng.randrange(40) for _ in range(rng.randint(1, 9))]
        assert data.split_of(ids) == _old_split(bytes(str(ids), "ascii"))
        assert translation.split_of(sentence) == _old_split(" ".join(sentence).encode())
        assert rationales.example_split(sentence) == _old_split(" ".join(sentence).encode())
        assert news.name_split(sentence[0]) == _old_split(sentence[0].lower().encode())
    for index in range(1797):
        assert scenes.image_split(index) == _old_split(f"digit-{index}".encode())
    for story in stories.make_stories(50, seed=0):
        text = " | ".join(" ".join(s) for s in story.sentences) + " ? " + " ".join(story.question)
        assert stories.story_split(story) == _old_split(text.encode())


def test_split_by_hash_rejects_bad_input():
    with pytest.raises(TypeError, match="key must be a str, got list"):
        data.split_by_hash([1, 2])
    with pytest.raises(ValueError, match="fractions must be three shares"):
        data.split_by_hash("a", (0.5, 0.5, 0.5))


# --- one way to move a batch (issue 34) ---
def test_every_batch_moves_its_tensors_and_keeps_the_rest():
    from course_utils.apps import news

    reports = news.make_reports(30, "train", seed=0)
    vocab = news.news_vocab(reports, min_freq=1)
    cases = [
        data.make_batch([([4, 5], [5, 4]), ([6], [6])], data.letter_vocab(5)),
        news.make_news_batch([news.encode(r, vocab) for r in reports[:2]], vocab),  # oovs: lists
    ]
    for batch in cases:
        moved = batch.to("meta")
        assert type(moved) is type(batch)
        for field in dataclasses.fields(batch):
            before, after = getattr(batch, field.name), getattr(moved, field.name)
            if isinstance(before, torch.Tensor):
                assert after.device.type == "meta" and after.shape == before.shape
            else:
                assert after is before  # lists of words stay where they are


# --- one home for shuffled batches, every caller drawing what it drew before (issue 34) ---
def _reseeded_orders(n, batch_size, seed, drop_last, epochs=3):
    """The rows each epoch-reseeded iterator used to draw (seed * 100_003 + epoch)."""
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=g).tolist()
        stop = n - batch_size + 1 if drop_last else n
        yield from (order[s : s + batch_size] for s in range(0, stop, batch_size))


def _one_stream_orders(n, batch_size, seed, epochs=3):
    """The rows training.shuffled_batches used to draw: one generator, last batch dropped."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(n, generator=g).tolist()
        yield from (order[s : s + batch_size] for s in range(0, n - batch_size + 1, batch_size))


class _Rows(list):
    def batch(self, rows):
        return list(rows)


@pytest.mark.parametrize("seed", [0, 3])
def test_shuffled_batches_draw_what_each_old_iterator_drew(seed):
    rows = _Rows(range(11))
    for drop_last in (True, False):
        stream = data.shuffled_batches(rows, 4, seed, drop_last, reseed_each_epoch=True)
        expected = list(_reseeded_orders(11, 4, seed, drop_last))
        assert [next(stream) for _ in expected] == expected
    stream = data.shuffled_batches(rows, 4, seed)
    expected = list(_one_stream_orders(11, 4, seed))
    assert [next(stream) for _ in expected] == expected
    # infinite_batches: the reseeded scheme over a task's pairs, the last batch kept
    pairs = data.make_split("reverse", "train", n=13, lengths=[3, 4], seed=seed)
    stream = data.infinite_batches(pairs, 5, seed=seed)
    for chosen in _reseeded_orders(13, 5, seed, drop_last=False):
        expected = data.make_batch([pairs[i] for i in chosen], pairs.vocab)
        got = next(stream)
        assert torch.equal(got.src, expected.src) and torch.equal(got.tgt_out, expected.tgt_out)


def test_too_little_data_for_one_batch_is_an_error_not_an_endless_loop():
    class Rows(list):
        def batch(self, rows):
            return [self[i] for i in rows]

    with pytest.raises(ValueError, match="3 rows, fewer than one batch of batch_size=4"):
        next(data.shuffled_batches(Rows("abc"), 4))
    assert len(next(data.shuffled_batches(Rows("abc"), 4, drop_last=False))) == 3
    with pytest.raises(ValueError, match="0 rows"):
        next(data.shuffled_batches(Rows(), 4, drop_last=False))
    with pytest.raises(ValueError, match="lengths is empty"):
        next(data.length_bucketed_chunks(torch.tensor([], dtype=torch.long), 4))
