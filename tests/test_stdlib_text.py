"""course_utils.stdlib_text: the fixed character vocabulary, the standard-library text, the bigram baseline."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.stdlib_text import (
    CharVocab,
    bigram_log_probs,
    bigram_loss,
    evenly_spaced_windows,
    random_windows,
    stdlib_text,
)


def test_vocab_round_trips_ascii_and_maps_the_rest_to_unknown():
    v = CharVocab()
    text = "def f(x):\n    return x ~ 1\n"
    assert v.decode(v.encode(text)) == text
    assert v.encode("é€").tolist() == [0, 0]
    assert v.label(v.stoi["\n"]) == "\\n" and v.label(v.stoi[" "]) == "␣"
    with pytest.raises(TypeError, match="text must be a str"):
        v.encode(b"abc")


def test_stdlib_text_is_split_by_file_without_overlap(tmp_path):
    for i in range(12):
        (tmp_path / f"m{i:02d}.py").write_text(f"# module {i}\n")
    (tmp_path / "notes.txt").write_text("not python")
    splits = stdlib_text(tmp_path, val_every=4)
    assert splits.val_files == ["m03.py", "m07.py", "m11.py"]
    assert len(splits.train_files) == 9 and not set(splits.train_files) & set(splits.val_files)
    assert splits.val == "# module 3\n# module 7\n# module 11\n"
    with pytest.raises(ValueError, match="too few"):
        stdlib_text(tmp_path, val_every=20)


def test_the_running_pythons_stdlib_is_read():
    splits = stdlib_text()
    assert len(splits.train) > 1_000_000 and "def " in splits.val


def test_windows_are_next_character_pairs():
    ids = torch.arange(100)
    batch = random_windows(ids, 5, 7, torch.Generator().manual_seed(0))
    assert batch.x.shape == (5, 7) and torch.equal(batch.y, batch.x + 1)
    fixed = evenly_spaced_windows(ids, 4, 9)
    assert fixed[:, 0].tolist() == [0, 30, 60, 90] and fixed.shape == (4, 10)
    with pytest.raises(ValueError, match="fewer than length"):
        random_windows(ids[:5], 1, 5, torch.Generator())


def test_bigram_table_equals_counting_by_hand():
    ids = torch.tensor([0, 1, 1, 2, 0, 1, 2, 2])
    table = bigram_log_probs(ids, 3, smoothing=0.0)
    # after 1: 1, 2, 2; after 2: 0, 2
    assert torch.allclose(table[1].exp(), torch.tensor([0.0, 1 / 3, 2 / 3]))
    assert torch.allclose(table[2].exp(), torch.tensor([0.5, 0.0, 0.5]))
    windows = torch.tensor([[1, 2, 0]])
    assert math.isclose(
        bigram_loss(table, windows), -(math.log(2 / 3) + math.log(0.5)) / 2, rel_tol=1e-6
    )
    smoothed = bigram_log_probs(ids, 3, smoothing=1.0)
    assert torch.allclose(smoothed[1].exp(), torch.tensor([1 / 6, 2 / 6, 3 / 6]))
    with pytest.raises(ValueError, match="outside vocab_size"):
        bigram_log_probs(ids, 2)


def test_windows_with_a_start_token_begin_with_it_and_keep_the_text_after():
    ids = torch.arange(5, 105)
    batch = random_windows(ids, 4, 6, torch.Generator().manual_seed(1), start_token=0)
    assert (batch.x[:, 0] == 0).all() and torch.equal(batch.y[:, 1:], batch.x[:, 1:] + 1)
    assert torch.equal(batch.y[:, 0], batch.x[:, 1])  # after the start token: the first character
    fixed = evenly_spaced_windows(ids, 3, 8, start_token=0)
    assert (
        fixed.shape == (3, 9)
        and (fixed[:, 0] == 0).all()
        and fixed[0, 1:].tolist() == list(range(5, 13))
    )
    with pytest.raises(ValueError, match="start_token must be an id"):
        random_windows(ids, 1, 4, torch.Generator(), start_token=-1)
