"""Digit scenes: seeded, boxes around their digits' ink, splits that share no digit image,
captions that say what the layout shows; and the captioning-folder loader."""

import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from course_utils.apps import scenes
from course_utils.apps.scenes import DIGIT_WORDS, INK, make_scenes


def test_same_seed_same_scenes_and_another_seed_others():
    a, b = make_scenes(5, seed=7), make_scenes(5, seed=7)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.image, y.image)
        assert (x.caption, x.boxes, x.sources) == (y.caption, y.boxes, y.sources)
    c = make_scenes(5, seed=8)
    assert any(not torch.equal(x.image, z.image) for x, z in zip(a, c, strict=True))


def test_a_split_does_not_depend_on_what_else_was_drawn():
    alone = make_scenes(3, split="test", seed=1)
    make_scenes(4, split="train", seed=1)
    again = make_scenes(3, split="test", seed=1)
    assert all(torch.equal(x.image, y.image) for x, y in zip(alone, again, strict=True))


def test_boxes_hold_every_ink_pixel_and_are_tight():
    for scene in make_scenes(40, seed=2, noise=0.0):
        inside = torch.zeros_like(scene.image, dtype=torch.bool)
        for top, left, bottom, right in scene.boxes:
            box = scene.image[top:bottom, left:right] > INK
            # tight: ink on each of the box's four edges
            assert box[0].any() and box[-1].any() and box[:, 0].any() and box[:, -1].any()
            assert not inside[top:bottom, left:right].any(), "boxes overlap"
            inside[top:bottom, left:right] = True
        assert not ((scene.image > INK) & ~inside).any(), "ink outside every box"


def test_no_digit_image_is_in_two_splits():
    used = {s: set() for s in ("train", "val", "test")}
    for split in used:
        for scene in make_scenes(150, split=split, seed=0):
            used[split].update(scene.sources)
            assert all(scenes.image_split(i) == split for i in scene.sources)
    assert not used["train"] & used["test"] and not used["train"] & used["val"]
    assert not used["val"] & used["test"]


def test_captions_name_the_digits_left_to_right():
    _, labels = scenes.digit_images()
    for scene in make_scenes(60, seed=3):
        assert scene.digits == [int(labels[i]) for i in scene.sources]
        centres = [left + right for _, left, _, right in scene.boxes]
        assert centres == sorted(centres) and len(set(centres)) == len(centres)
        named = [w for w in scene.caption if w in DIGIT_WORDS]
        assert named == [DIGIT_WORDS[d] for d in scene.digits]
        assert [scene.caption[t] for t, d in enumerate(scene.word_digit) if d >= 0] == named
        assert [d for d in scene.word_digit if d >= 0] == list(range(len(scene.digits)))
        if len(scene.digits) > 1:
            assert scene.caption[-2] == "and"


def test_relation_captions_match_the_boxes():
    for scene in make_scenes(60, seed=4, relations=True):
        words = " ".join(scene.caption)
        for k in range(1, len(scene.digits)):
            (t0, l0, b0, r0), (t1, l1, b1, r1) = scene.boxes[k - 1], scene.boxes[k]
            dx, dy = (l1 + r1) - (l0 + r0), (t1 + b1) - (t0 + b0)
            pair = f"{DIGIT_WORDS[scene.digits[k - 1]]} {{}} {DIGIT_WORDS[scene.digits[k]]}"
            if dx >= abs(dy):
                assert pair.format("left of") in words
            else:
                assert pair.format("above" if dy > 0 else "below") in words


def test_digit_counts_come_from_the_range():
    counts = {len(s.digits) for s in make_scenes(60, seed=5, n_digits=(3, 4))}
    assert counts == {3, 4}


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(n=0), ValueError, "n must be positive"),
        (dict(n=2, split="dev"), ValueError, "split"),
        (dict(n=2, n_digits=(0, 3)), ValueError, "n_digits"),
        (dict(n=2, n_digits=(2, 5)), ValueError, "n_digits"),
        (dict(n=2, sizes=(12, 30)), ValueError, "sizes"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, text):
    with pytest.raises(error, match=text):
        make_scenes(**kwargs)


def test_caption_data_batches_pad_and_frame_the_captions():
    data = scenes.CaptionData(make_scenes(4, seed=0), scenes.caption_vocab())
    batch = data.batch([0, 1, 2, 3])
    v = data.vocab
    assert batch.images.shape == (4, 1, 48, 48)
    for row, scene in enumerate(data.scenes):
        assert v.decode(batch.tgt_out[row]) == scene.caption
        assert batch.tgt_in[row, 0] == v.bos_id
        assert batch.tgt_out[row, len(scene.caption)] == v.eos_id
    with pytest.raises(ValueError, match="scenes must not be empty"):
        scenes.CaptionData([], v)


# ---------------------------------------------------------------------------------------
# The loader of captioning folders
# ---------------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png"):
        mpimg.imsave(tmp_path / name, rng.random((8, 6)), cmap="gray")
    (tmp_path / "captions.txt").write_text(
        "a.png\tA dog on grass\n\nb.png\ttwo cats\na.png\tthe dog runs\n", encoding="utf-8"
    )
    return tmp_path


def test_loader_reads_images_and_captions(folder):
    items = scenes.load_caption_folder(folder)
    assert [(i.name, i.caption) for i in items] == [
        ("a.png", ["a", "dog", "on", "grass"]),
        ("b.png", ["two", "cats"]),
        ("a.png", ["the", "dog", "runs"]),
    ]
    expected = mpimg.imread(folder / "a.png")
    assert items[0].image.shape[:2] == (8, 6) and np.array_equal(items[0].image, expected)
    assert items[0].image is items[2].image  # read once
    assert 0.0 <= items[1].image.min() and items[1].image.max() <= 1.0


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("a.png A dog\n", ValueError, "line 1: expected 'filename<TAB>caption'"),
        ("a.png\tok\nb.png\tx\ty\n", ValueError, "line 2"),
        ("a.png\t   \n", ValueError, "line 1: the caption of a.png is empty"),
        ("a.png\tfine\nmissing.png\ta cat\n", FileNotFoundError, "line 2: image .*missing.png"),
    ],
)
def test_loader_names_the_bad_line(folder, text, error, match):
    (folder / "captions.txt").write_text(text, encoding="utf-8")
    with pytest.raises(error, match=match):
        scenes.load_caption_folder(folder)


def test_loader_without_captions_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no captions file"):
        scenes.load_caption_folder(tmp_path)
