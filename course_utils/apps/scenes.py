"""Scenes of real handwritten digits with captions and boxes (notebook 09), and a loader for
real captioning folders.

The digits are scikit-learn's 1,797 handwritten 8 x 8 images (``sklearn.datasets.load_digits``,
shipped inside the package: nothing is downloaded). A scene places 2-4 of them on a square
canvas, each scaled to a random size and put at a random place where it overlaps no other,
adds a little Gaussian noise, and keeps the **bounding box** of every digit (the rows and
columns its ink covers). The caption names the digits in reading order, left to right, with
"and" before the last one; ``relations=True`` (the harder captions) says between two
neighbours where the first lies from the second: ``left of``, ``above`` or ``below``.

>>> scene = make_scenes(1, split="train", seed=3)[0]
>>> " ".join(scene.caption), scene.digits
('zero two three and one', [0, 2, 3, 1])
>>> scene.boxes  # (top, left, bottom, right) in pixels, bottom and right excluded
[(21, 2, 33, 12), (3, 14, 16, 21), (5, 28, 17, 36), (29, 36, 41, 40)]
>>> scene.word_digit  # the digit each caption word names (-1: "and")
[0, 1, 2, -1, 3]
>>> " ".join(make_scenes(1, split="train", seed=3, relations=True)[0].caption)
'zero below two left of three above one'

Every digit image belongs to one split, fixed once for all seeds (80% train, 10% val, 10%
test), so a test scene is made of digit images that no training scene contains.
:func:`load_caption_folder` reads a real dataset in the same spirit: a folder of images and a
captions file with one ``filename<TAB>caption`` a line. Shapes: ``H``, ``W`` image height and
width in pixels.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from course_utils._validate import check_positive
from course_utils.data import (
    SPLITS,
    TensorBatch,
    Vocab,
    pad_sequences,
    shuffled_batches,
    split_by_hash,
)

DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
RELATION_WORDS = ["left", "of", "above", "below"]
CANVAS = 48  # pixels per side
INK = 0.15  # a pixel of a scaled digit darker than this counts as ink for its box


@dataclass
class Scene:
    """One image, its digits in reading order, their boxes and the caption.

    ``image`` (H, W) floats in [0, 1]; ``digits`` the labels left to right; ``boxes`` one
    ``(top, left, bottom, right)`` per digit (bottom and right excluded); ``sources`` the index
    of each digit's image in ``load_digits``; ``caption`` the words; ``word_digit`` for each
    word, the index of the digit it names, or -1.
    """

    image: torch.Tensor
    digits: list[int]
    boxes: list[tuple[int, int, int, int]]
    sources: list[int]
    caption: list[str]
    word_digit: list[int]


@functools.lru_cache(maxsize=1)
def digit_images() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's handwritten digits: ``(images (1797, 8, 8) in [0, 1], labels (1797,))``."""
    from sklearn.datasets import load_digits  # read from the installed package, no download

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    return images, torch.tensor(digits.target, dtype=torch.long)


def image_split(index: int) -> str:
    """The split a digit image belongs to, from a stable hash of its index (80/10/10).

    >>> [image_split(i) for i in range(5)]
    ['test', 'train', 'train', 'train', 'test']
    """
    return split_by_hash(f"digit-{index}")


@functools.lru_cache(maxsize=16)
def _scaled(size: int) -> torch.Tensor:
    """Every digit image resized to ``size`` x ``size`` (bilinear): (1797, size, size)."""
    images, _ = digit_images()
    out = F.interpolate(images[:, None], size=(size, size), mode="bilinear", align_corners=False)
    return out[:, 0].clamp(0, 1)


def caption_for(
    digits: list[int], boxes: list[tuple[int, int, int, int]], relations: bool = False
) -> tuple[list[str], list[int]]:
    """The caption of digits already in reading order -> ``(words, word_digit)``.

    Without ``relations``: ``"three seven and one"``. With them, between neighbours ``a`` and
    ``b`` (``b`` to the right of ``a``): ``left of`` when ``b`` is more to the right than it is
    higher or lower, else ``above`` (``a`` is above ``b``) or ``below``.

    >>> caption_for([3, 7], [(0, 0, 10, 10), (20, 4, 30, 14)], relations=True)
    (['three', 'above', 'seven'], [0, -1, 1])
    """
    if not digits or len(digits) != len(boxes):
        raise ValueError(
            f"digits and boxes must be non-empty and as long, got {len(digits)} and {len(boxes)}"
        )
    words, word_digit = [DIGIT_WORDS[digits[0]]], [0]
    for k in range(1, len(digits)):
        if relations:
            (t0, l0, b0, r0), (t1, l1, b1, r1) = boxes[k - 1], boxes[k]
            dy = (t1 + b1 - t0 - b0) / 2  # how much lower the second digit's centre is
            dx = (l1 + r1 - l0 - r0) / 2
            link = ["left", "of"] if dx >= abs(dy) else (["above"] if dy > 0 else ["below"])
        else:
            link = ["and"] if k == len(digits) - 1 else []
        words += link + [DIGIT_WORDS[digits[k]]]
        word_digit += [-1] * len(link) + [k]
    return words, word_digit


def _place(rng: np.random.Generator, sizes: list[int], canvas: int) -> list[tuple[int, int]] | None:
    """Top-left corners for squares of ``sizes`` with a pixel of space between any two,
    or None when 100 tries did not fit one of them."""
    corners: list[tuple[int, int]] = []
    for size in sizes:
        for _ in range(100):
            top, left = (int(v) for v in rng.integers(0, canvas - size + 1, size=2))
            if all(
                top + size + 1 <= t
                or t + s + 1 <= top
                or left + size + 1 <= le
                or le + s + 1 <= left
                for (t, le), s in zip(corners, sizes, strict=False)
            ):
                corners.append((top, left))
                break
        else:
            return None
    return corners


def _ink_box(patch: torch.Tensor, top: int, left: int) -> tuple[int, int, int, int]:
    """The box of the pixels of ``patch`` (placed at ``top``, ``left``) darker than INK."""
    rows = (patch > INK).any(dim=1).nonzero()[:, 0]
    cols = (patch > INK).any(dim=0).nonzero()[:, 0]
    return (
        top + int(rows[0]),
        left + int(cols[0]),
        top + int(rows[-1]) + 1,
        left + int(cols[-1]) + 1,
    )


def make_scene(
    rng: np.random.Generator,
    pool: list[int],
    n_digits: int,
    canvas: int = CANVAS,
    sizes: tuple[int, int] = (12, 16),
    noise: float = 0.05,
    relations: bool = False,
) -> Scene:
    """One scene of ``n_digits`` digit images drawn from ``pool`` (indices into
    :func:`digit_images`), each scaled to a side in ``sizes`` (both ends included).

    Reading order is the order of the boxes' centres from left to right; a layout where two
    centres are less than 3 pixels apart (one digit nearly above another) is drawn again.
    """
    images, labels = digit_images()
    while True:
        side = [int(s) for s in rng.integers(sizes[0], sizes[1] + 1, size=n_digits)]
        corners = _place(rng, side, canvas)
        if corners is None:
            continue
        sources = [pool[int(i)] for i in rng.choice(len(pool), size=n_digits, replace=False)]
        boxes = [
            _ink_box(_scaled(s)[i], *c) for i, s, c in zip(sources, side, corners, strict=True)
        ]
        centres = sorted(left + right for _, left, _, right in boxes)  # twice the centre
        if all(b - a >= 6 for a, b in zip(centres, centres[1:], strict=False)):
            break
    image = torch.zeros(canvas, canvas)
    for i, s, (top, left) in zip(sources, side, corners, strict=True):
        region = image[top : top + s, left : left + s]
        region.copy_(torch.maximum(region, _scaled(s)[i]))  # (s, s)
    order = sorted(range(n_digits), key=lambda k: boxes[k][1] + boxes[k][3])  # left to right
    noisy = image + noise * torch.from_numpy(rng.standard_normal((canvas, canvas))).float()
    digits = [int(labels[sources[k]]) for k in order]
    boxes = [boxes[k] for k in order]
    words, word_digit = caption_for(digits, boxes, relations)
    return Scene(noisy.clamp(0, 1), digits, boxes, [sources[k] for k in order], words, word_digit)


def make_scenes(
    n: int,
    split: str = "train",
    seed: int = 0,
    n_digits: tuple[int, int] = (2, 4),
    canvas: int = CANVAS,
    sizes: tuple[int, int] = (12, 16),
    noise: float = 0.05,
    relations: bool = False,
) -> list[Scene]:
    """``n`` scenes of ``n_digits[0]`` to ``n_digits[1]`` digits (uniformly), whose digit
    images all belong to ``split`` (see :func:`image_split`). Seeded by ``(seed, split)``."""
    check_positive("n", n)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    lo, hi = n_digits
    if not 1 <= lo <= hi <= 4:
        raise ValueError(f"n_digits must be (lo, hi) with 1 <= lo <= hi <= 4, got {n_digits}")
    if not 4 <= sizes[0] <= sizes[1] <= canvas // 3:
        raise ValueError(
            f"sizes must be (lo, hi) with 4 <= lo <= hi <= canvas // 3 = {canvas // 3}, got {sizes}"
        )
    pool = [i for i in range(len(digit_images()[1])) if image_split(i) == split]
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    return [
        make_scene(rng, pool, int(rng.integers(lo, hi + 1)), canvas, sizes, noise, relations)
        for _ in range(n)
    ]


# ---------------------------------------------------------------------------------------
# Scenes as model input: image tensors, caption ids, batches
# ---------------------------------------------------------------------------------------
def caption_vocab() -> Vocab:
    """The words of every caption, with and without relations (one vocabulary for both)."""
    return Vocab(DIGIT_WORDS + ["and"] + RELATION_WORDS)


@dataclass
class CaptionBatch(TensorBatch):
    """``images`` (B, 1, H, W); ``tgt_in`` (B, T) = ``<bos> w1 .. wn``; ``tgt_out`` (B, T) =
    ``w1 .. wn <eos>``, both padded with ``<pad>``."""

    images: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor


class CaptionData:
    """Scenes with their images stacked ``(N, 1, H, W)`` and captions as ids (no specials)."""

    def __init__(self, scenes: list[Scene], vocab: Vocab, split: str = "train"):
        if not scenes:
            raise ValueError("scenes must not be empty")
        self.scenes, self.vocab, self.split = list(scenes), vocab, split
        self.images = torch.stack([s.image for s in self.scenes])[:, None]  # (N, 1, H, W)
        self.captions = [vocab.encode(s.caption) for s in self.scenes]

    def __len__(self) -> int:
        return len(self.scenes)

    def batch(self, indices: list[int]) -> CaptionBatch:
        """The scenes at ``indices`` as one padded :class:`CaptionBatch`."""
        v = self.vocab
        return CaptionBatch(
            self.images[indices],
            pad_sequences([[v.bos_id] + self.captions[i] for i in indices], v.pad_id),
            pad_sequences([self.captions[i] + [v.eos_id] for i in indices], v.pad_id),
        )

    def select(self, indices: list[int]) -> CaptionData:
        """The scenes at ``indices``, e.g. those with three digits."""
        return CaptionData([self.scenes[i] for i in indices], self.vocab, self.split)


def caption_batches(data: CaptionData, batch_size: int, seed: int = 0) -> Iterator[CaptionBatch]:
    """Shuffled batches forever, a new seeded order each epoch, the last incomplete batch kept
    (:func:`~course_utils.data.shuffled_batches`)."""
    return shuffled_batches(data, batch_size, seed, drop_last=False, reseed_each_epoch=True)


# ---------------------------------------------------------------------------------------
# A real captioning folder: images plus "filename<TAB>caption" lines
# ---------------------------------------------------------------------------------------
@dataclass
class CaptionedImage:
    """One line of a captions file: the image's file name, its pixels and the caption words."""

    name: str
    image: np.ndarray  # (H, W) grey or (H, W, 3|4) colour, floats in [0, 1]
    caption: list[str]


def load_caption_folder(
    folder: str | Path, captions_file: str = "captions.txt", lowercase: bool = True
) -> list[CaptionedImage]:
    """Read ``folder/captions_file`` (UTF-8, one ``filename<TAB>caption`` a line) and each
    image it names (PNG, read with matplotlib). An image may have several lines (captions).

    Blank lines are skipped. A line without exactly one tab or with an empty caption raises
    ``ValueError`` with its line number and content; a missing file ``FileNotFoundError``.
    """
    import matplotlib.image as mpimg

    folder = Path(folder)
    path = folder / captions_file
    if not path.is_file():
        raise FileNotFoundError(f"no captions file {path} (one 'filename<TAB>caption' a line)")
    out, cache = [], {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip():
            raise ValueError(
                f"{path}, line {number}: expected 'filename<TAB>caption', got {line!r}"
            )
        name, text = parts[0].strip(), parts[1].strip()
        words = (text.lower() if lowercase else text).split()
        if not words:
            raise ValueError(f"{path}, line {number}: the caption of {name} is empty")
        if name not in cache:
            image_path = folder / name
            if not image_path.is_file():
                raise FileNotFoundError(f"{path}, line {number}: image {image_path} not found")
            image = np.asarray(mpimg.imread(image_path), dtype=np.float32)
            cache[name] = image / 255.0 if image.max() > 1.0 else image
        out.append(CaptionedImage(name, cache[name], words))
    return out
