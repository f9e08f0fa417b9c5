"""Questions about the digit scenes of notebook 09, with their answers and supporting boxes
(notebook 15, visual question answering).

Five templates, each read off a scene's digits (left to right) and boxes::

    left      what digit is left of the seven ?   the digit just before the seven, reading
                                                   left to right
    right     what digit is right of the seven ?  the digit just after it
    exists    is there a seven ?                  yes / no
    count     how many digits ?                   two, three or four
    largest   which digit is largest ?            the digit whose box has the largest area

``left`` and ``right`` are the **relational** questions: the answer is a digit that the
question does not name, found next to one it does. A relational question is asked only when
the named digit occurs once in the scene (so "the seven" means one digit) and has a neighbour
on that side; ``largest`` only when the largest box beats the next by a clear margin
(:data:`LARGEST_MARGIN`). Each question keeps the indices of the digits it is **about**
(``support``): the named digit and the answer for a relational question, every copy of the
digit for ``exists`` with answer yes (none for no), all digits for ``count``, the largest
for ``largest``. A model that answers by looking should look at one of their boxes.

>>> scene = make_scenes(1, split="train", seed=3)[0]
>>> scene.digits
[0, 2, 3, 1]
>>> [(" ".join(q.words), q.answer, q.support) for q in every_question(scene)[:3]]
[('what digit is left of the two ?', 'zero', [0, 1]), ('what digit is left of the three ?', 'two', [1, 2]), ('what digit is left of the one ?', 'three', [2, 3])]

**Compositional split.** :data:`HELD_OUT` lists (template, digit) pairs that training never
asks ("what digit is left of the three ?"), though it asks the same template about other
digits and other templates about the three. :func:`make_questions` leaves them out of the
train, validation and test questions and asks only them in the ``"compositional"`` split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from course_utils._validate import check_positive
from course_utils.apps.scenes import DIGIT_WORDS, Scene, make_scenes
from course_utils.data import SPLITS, TensorBatch, Vocab, pad_sequences

TEMPLATES = ("left", "right", "exists", "count", "largest")
RELATIONAL = ("left", "right")
ANSWERS = tuple(DIGIT_WORDS) + ("yes", "no")
HELD_OUT = frozenset({("left", 3), ("right", 7), ("exists", 5)})
LARGEST_MARGIN = 1.2  # the largest box's area must be this many times the next one's
QUESTION_SPLITS = SPLITS + ("compositional",)


@dataclass
class Question:
    """One question about one scene: ``template`` (one of :data:`TEMPLATES`), ``digit`` the
    digit it names (-1 if none), ``words``, ``answer`` (one of :data:`ANSWERS`) and
    ``support``, the indices (in the scene's reading order) of the digits it is about."""

    template: str
    digit: int
    words: list[str]
    answer: str
    support: list[int]


def question_words(template: str, digit: int = -1) -> list[str]:
    """The words of a question.

    >>> " ".join(question_words("exists", 8)), " ".join(question_words("count"))
    ('is there an eight ?', 'how many digits ?')
    """
    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
    names_digit = template in ("left", "right", "exists")
    if names_digit != (0 <= digit <= 9):
        raise ValueError(
            f"template {template!r} takes a digit in 0-9 only if it names one, got {digit}"
        )
    if template in RELATIONAL:
        return ["what", "digit", "is", template, "of", "the", DIGIT_WORDS[digit], "?"]
    if template == "exists":
        return ["is", "there", "an" if digit == 8 else "a", DIGIT_WORDS[digit], "?"]
    return (
        ["how", "many", "digits", "?"]
        if template == "count"
        else "which digit is largest ?".split()
    )


def question_vocab() -> Vocab:
    """Every word of every question (one vocabulary for all templates)."""
    words = "what digit is left right of the there a an how many digits which largest ?".split()
    return Vocab(words + DIGIT_WORDS)


def every_question(scene: Scene) -> list[Question]:
    """Every question the templates can ask about ``scene``, in template order (relational
    ones by the named digit's position; ``exists`` for all ten digits)."""
    digits, boxes = scene.digits, scene.boxes
    out = []
    for template, step in (("left", -1), ("right", 1)):
        for k, d in enumerate(digits):
            if digits.count(d) == 1 and 0 <= k + step < len(digits):
                answer = DIGIT_WORDS[digits[k + step]]
                support = sorted([k, k + step])
                out.append(Question(template, d, question_words(template, d), answer, support))
    for d in range(10):
        where = [k for k, e in enumerate(digits) if e == d]
        answer = "yes" if where else "no"
        out.append(Question("exists", d, question_words("exists", d), answer, where))
    n = len(digits)
    count_answer = DIGIT_WORDS[n]
    out.append(Question("count", -1, question_words("count"), count_answer, list(range(n))))
    areas = [(b - t) * (r - le) for t, le, b, r in boxes]
    order = sorted(range(n), key=lambda k: -areas[k])
    if n == 1 or areas[order[0]] >= LARGEST_MARGIN * areas[order[1]]:
        best = order[0]
        words = question_words("largest")
        out.append(Question("largest", -1, words, DIGIT_WORDS[digits[best]], [best]))
    return out


GROUNDING_ON = ("support", "named", "answer")


def grounding_boxes(question: Question, scene: Scene, on: str = "support") -> list[tuple]:
    """The boxes of ``scene`` that a glimpse for ``question`` may peak on: ``on="support"``
    every digit the question is about (``question.support``), ``"named"`` those of the
    digit the question names (none for ``count``, ``largest``), ``"answer"`` those of the
    digit that is the answer (none for yes / no and ``count``).

    >>> scene = make_scenes(1, split="train", seed=3)[0]  # digits 0 2 3 1, left to right
    >>> q = [q for q in every_question(scene) if q.template == "left" and q.digit == 3][0]
    >>> q.answer, q.support, grounding_boxes(q, scene, "named") == [scene.boxes[2]]
    ('two', [1, 2], True)
    """
    if on not in GROUNDING_ON:
        raise ValueError(f"on must be one of {GROUNDING_ON}, got {on!r}")
    keep = {
        "support": lambda k: True,
        "named": lambda k: scene.digits[k] == question.digit,
        "answer": lambda k: (
            question.answer == DIGIT_WORDS[scene.digits[k]] and question.template != "count"
        ),
    }[on]
    return [scene.boxes[k] for k in question.support if keep(k)]


def ask(scene: Scene, rng: np.random.Generator, n: int = 1) -> list[Question]:
    """Up to ``n`` questions about ``scene``, each of another template, never a
    :data:`HELD_OUT` pair: the templates drawn uniformly (without replacement) among those it
    can ask, then one question of each (for ``exists``, yes or no with equal chance first)."""
    candidates = [q for q in every_question(scene) if (q.template, q.digit) not in HELD_OUT]
    templates = [t for t in TEMPLATES if any(q.template == t for q in candidates)]
    out = []
    for k in rng.permutation(len(templates))[:n]:
        pool = [q for q in candidates if q.template == templates[int(k)]]
        if pool[0].template == "exists":
            answer = ("yes", "no")[int(rng.integers(2))]
            pool = [q for q in pool if q.answer == answer] or pool
        out.append(pool[int(rng.integers(len(pool)))])
    return out


# ---------------------------------------------------------------------------------------
# Questions as model input: (scene, question) pairs, batches
# ---------------------------------------------------------------------------------------
@dataclass
class VQABatch(TensorBatch):
    """``images`` (B, 1, H, W); ``questions`` (B, L) word ids padded with ``<pad>``;
    ``answers`` (B,) indices into :data:`ANSWERS`; ``features`` (B, P, C) the images' CNN
    features when the data holds them (:meth:`VQAData.encode`), else None."""

    images: torch.Tensor
    questions: torch.Tensor
    answers: torch.Tensor
    features: torch.Tensor | None = None


class VQAData:
    """(scene, question) pairs: ``scenes``, ``questions`` (one per pair) and ``scene_of``
    (the scene each question is about); images stacked ``(N_scenes, 1, H, W)``."""

    def __init__(
        self, scenes: list[Scene], questions: list[Question], scene_of: list[int], split: str
    ):
        if not questions or len(questions) != len(scene_of):
            raise ValueError(
                f"questions and scene_of must be non-empty and as long, got {len(questions)} "
                f"and {len(scene_of)}"
            )
        self.scenes, self.questions, self.scene_of = list(scenes), list(questions), list(scene_of)
        self.split, self.vocab = split, question_vocab()
        self.images = torch.stack([s.image for s in self.scenes])[:, None]  # (N, 1, H, W)
        self.ids = [self.vocab.encode(q.words) for q in self.questions]
        self.answers = torch.tensor([ANSWERS.index(q.answer) for q in self.questions])
        self.features: torch.Tensor | None = None  # (N_scenes, P, C) once encoded

    @torch.no_grad()
    def encode(self, encoder: torch.nn.Module, batch_size: int = 500) -> VQAData:
        """Store every scene's features from ``encoder`` (images (B, 1, H, W) -> (B, P, C)),
        run once in eval mode: a frozen encoder need not run again at every training step."""
        was_training, device = encoder.training, next(encoder.parameters()).device
        encoder.eval()
        parts = [encoder(self.images[i : i + batch_size].to(device)).cpu()
                 for i in range(0, len(self.scenes), batch_size)]  # fmt: skip
        encoder.train(was_training)
        self.features = torch.cat(parts)
        return self

    def __len__(self) -> int:
        return len(self.questions)

    def batch(self, indices: list[int]) -> VQABatch:
        """The questions at ``indices`` with their scenes' images, as one :class:`VQABatch`."""
        scenes = [self.scene_of[i] for i in indices]
        return VQABatch(
            self.images[scenes],
            pad_sequences([self.ids[i] for i in indices], self.vocab.pad_id),
            self.answers[indices],
            None if self.features is None else self.features[scenes],
        )

    def select(self, indices: list[int]) -> VQAData:
        """The questions at ``indices`` (e.g. one template's), with the scenes they need."""
        part = VQAData(
            self.scenes,
            [self.questions[i] for i in indices],
            [self.scene_of[i] for i in indices],
            self.split,
        )
        part.features = self.features
        return part


def make_questions(n: int, split: str = "train", seed: int = 0, per_scene: int = 2) -> VQAData:
    """``n`` questions about scenes of 2-4 digits from ``make_scenes(split=...)``, each scene
    asked ``per_scene`` questions of different templates (:func:`ask`). Seeded by
    ``(seed, split)``.

    The ``"compositional"`` split asks only the :data:`HELD_OUT` pairs, about test scenes
    drawn apart from the test split's: a third of the questions for each pair, and for
    ``exists`` as many yes as no.

    >>> data = make_questions(4, "train", seed=0)
    >>> [" ".join(q.words) + " " + q.answer for q in data.questions[:2]]
    ['how many digits ? four', 'what digit is right of the eight ? five']
    """
    check_positive("n", n)
    check_positive("per_scene", per_scene)
    if split not in QUESTION_SPLITS:
        raise ValueError(f"split must be one of {QUESTION_SPLITS}, got {split!r}")
    if split == "compositional":
        return _held_out_questions(n, seed)
    rng = np.random.default_rng([seed, QUESTION_SPLITS.index(split), 15])
    scenes, questions, scene_of = [], [], []
    for scene in make_scenes(-(-n // per_scene), split, seed):
        asked = ask(scene, rng, per_scene)[: n - len(questions)]
        scene_of += [len(scenes)] * len(asked)
        scenes.append(scene)
        questions += asked
    if len(questions) < n:  # a scene of one template only: top up from more scenes
        more = make_questions(n - len(questions), split, seed + 7919, per_scene)
        offset = len(scenes)
        scenes += more.scenes
        questions += more.questions
        scene_of += [offset + i for i in more.scene_of]
    return VQAData(scenes, questions, scene_of, split)


def _held_out_questions(n: int, seed: int) -> VQAData:
    """``n`` questions of the :data:`HELD_OUT` pairs about test scenes (see make_questions)."""
    pairs = sorted(HELD_OUT)
    buckets = [(t, d, a) for t, d in pairs for a in (("yes", "no") if t == "exists" else ("",))]
    quota = {b: n // len(pairs) // (2 if b[0] == "exists" else 1) for b in buckets}
    for b in buckets[: n - sum(quota.values())]:
        quota[b] += 1
    scenes, questions, scene_of, chunk = [], [], [], 0
    while sum(quota.values()):
        if chunk == 50:
            raise ValueError(f"could not find {n} held-out questions in {chunk * 500} scenes")
        for scene in make_scenes(500, "test", seed + 1000 + chunk):
            asked = []
            for q in every_question(scene):
                bucket = (q.template, q.digit, q.answer if q.template == "exists" else "")
                if quota.get(bucket):
                    quota[bucket] -= 1
                    asked.append(q)
            if asked:
                scene_of += [len(scenes)] * len(asked)
                scenes.append(scene)
                questions += asked
        chunk += 1
    return VQAData(scenes, questions, scene_of, "compositional")
