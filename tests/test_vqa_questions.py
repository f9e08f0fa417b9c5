"""Questions about digit scenes (course_utils.apps.questions), checked against an independent
reading of each scene: the labels of the digit scans it was made of, and its boxes' geometry."""

import collections

import pytest
import torch

from course_utils.apps import questions as qs
from course_utils.apps.scenes import DIGIT_WORDS, digit_images, make_scenes


def labels_of(scene):
    """The scene's digits read from the labels of the scans it was built from."""
    return [int(digit_images()[1][i]) for i in scene.sources]


def centre_x(box):
    top, left, bottom, right = box
    return (left + right) / 2


def named_digit(words):
    """The digit a question names, read from its words (None if it names none)."""
    named = [DIGIT_WORDS.index(w) for w in words if w in DIGIT_WORDS]
    return named[0] if named else None


def independent_answer(scene, words):
    """(answer, support) for question ``words``, or None when the question has no single
    answer; computed from the scans' labels and the boxes, without the generator's code."""
    labels, boxes = labels_of(scene), scene.boxes
    text = " ".join(words)
    if text == "how many digits ?":
        return ["zero", "one", "two", "three", "four"][len(boxes)], set(range(len(boxes)))
    if text == "which digit is largest ?":
        areas = [(b[2] - b[0]) * (b[3] - b[1]) for b in boxes]
        best = max(range(len(areas)), key=areas.__getitem__)
        others = [a for k, a in enumerate(areas) if k != best]
        if others and areas[best] < 1.2 * max(others):
            return None
        return DIGIT_WORDS[labels[best]], {best}
    d = named_digit(words)
    if words[:2] == ["is", "there"]:
        where = {k for k, label in enumerate(labels) if label == d}
        return ("yes" if where else "no"), where
    where = [k for k, label in enumerate(labels) if label == d]
    if len(where) != 1:
        return None
    me = centre_x(boxes[where[0]])
    if "left" in words:
        side = [k for k in range(len(boxes)) if centre_x(boxes[k]) < me]
        pick = max(side, key=lambda k: centre_x(boxes[k]), default=None)
    else:
        side = [k for k in range(len(boxes)) if centre_x(boxes[k]) > me]
        pick = min(side, key=lambda k: centre_x(boxes[k]), default=None)
    if pick is None:
        return None
    return DIGIT_WORDS[labels[pick]], {pick, where[0]}


def all_sentences():
    """Every question the templates can word, with the template and the digit."""
    out = [("count", -1), ("largest", -1)]
    out += [(t, d) for t in ("left", "right", "exists") for d in range(10)]
    return [(t, d, qs.question_words(t, d)) for t, d in out]


@pytest.fixture(scope="module")
def scenes():
    return make_scenes(60, split="train", seed=11) + make_scenes(30, split="test", seed=12)


def test_every_question_is_exactly_the_answerable_ones(scenes):
    for scene in scenes:
        made = {tuple(q.words): q for q in qs.every_question(scene)}
        for _, _, words in all_sentences():
            expected = independent_answer(scene, words)
            if expected is None:
                assert tuple(words) not in made, (scene.digits, words)
                continue
            q = made[tuple(words)]
            assert q.answer == expected[0], (scene.digits, words)
            assert set(q.support) == expected[1], (scene.digits, words)


def test_template_and_digit_match_the_words(scenes):
    for scene in scenes[:10]:
        for q in qs.every_question(scene):
            assert q.template in qs.TEMPLATES and q.answer in qs.ANSWERS
            assert (named_digit(q.words) if q.digit >= 0 else None) == (
                q.digit if q.digit >= 0 else None
            )
            assert q.words == qs.question_words(q.template, q.digit)


def test_supporting_boxes_hold_ink_of_the_right_digit(scenes):
    for scene in scenes[:30]:
        labels = labels_of(scene)
        for q in qs.every_question(scene):
            for k in q.support:
                top, left, bottom, right = scene.boxes[k]
                assert scene.image[top:bottom, left:right].mean() > 0.1  # a digit is drawn
            if q.template in qs.RELATIONAL:  # the named digit and its neighbour, side by side
                named = [k for k in q.support if labels[k] == q.digit]
                assert len(q.support) == 2 and abs(q.support[0] - q.support[1]) == 1
                assert len(named) >= 1
                other = next(k for k in q.support if k != named[0])
                assert DIGIT_WORDS[labels[other]] == q.answer


def test_made_questions_are_answered_correctly_for_every_split():
    for split in qs.QUESTION_SPLITS:
        data = qs.make_questions(120, split, seed=5)
        assert len(data) == 120 and data.split == split
        for q, s in zip(data.questions, data.scene_of, strict=True):
            answer, support = independent_answer(data.scenes[s], q.words)
            assert q.answer == answer and set(q.support) == support
            assert data.answers[data.questions.index(q)] == qs.ANSWERS.index(q.answer)


def test_compositional_split_is_unseen_in_training():
    train = qs.make_questions(3000, "train", seed=0)
    pairs = {(q.template, named_digit(q.words)) for q in train.questions}
    assert not pairs & qs.HELD_OUT
    for t, d in qs.HELD_OUT:  # the template and the digit are each seen, elsewhere
        assert any(q.template == t for q in train.questions)
        assert any(named_digit(q.words) == d and q.template != t for q in train.questions)
    for split in ("val", "test"):
        data = qs.make_questions(300, split, seed=0)
        assert not {(q.template, named_digit(q.words)) for q in data.questions} & qs.HELD_OUT
    comp = qs.make_questions(300, "compositional", seed=0)
    counts = collections.Counter((q.template, named_digit(q.words)) for q in comp.questions)
    assert set(counts) == set(qs.HELD_OUT) and set(counts.values()) == {100}
    exists = [q.answer for q in comp.questions if q.template == "exists"]
    assert exists.count("yes") == exists.count("no") == 50
    train_scans = {i for s in train.scenes for i in s.sources}
    assert not train_scans & {i for s in comp.scenes for i in s.sources}


def test_templates_and_exists_answers_are_balanced():
    data = qs.make_questions(2000, "train", seed=1)
    counts = collections.Counter(q.template for q in data.questions)
    assert set(counts) == set(qs.TEMPLATES)
    assert min(counts[t] for t in ("left", "right", "exists", "count")) > 300
    exists = [q.answer for q in data.questions if q.template == "exists"]
    assert 0.4 < exists.count("yes") / len(exists) < 0.6
    per_scene = collections.Counter(data.scene_of)
    assert set(per_scene.values()) <= {1, 2}
    for k in per_scene:  # two questions about one scene are of different templates
        asked = [q.template for q, s in zip(data.questions, data.scene_of, strict=True) if s == k]
        assert len(set(asked)) == len(asked)


def test_seeded_and_independent_of_call_order():
    a = qs.make_questions(50, "val", seed=3)
    qs.make_questions(20, "train", seed=9)
    b = qs.make_questions(50, "val", seed=3)
    assert [q.words for q in a.questions] == [q.words for q in b.questions]
    assert torch.equal(a.images, b.images)
    c = qs.make_questions(50, "val", seed=4)
    assert [q.words for q in a.questions] != [q.words for q in c.questions]


def test_batches_pad_questions_and_pick_the_right_image():
    data = qs.make_questions(10, "train", seed=2)
    batch = data.batch([0, 3, 7])
    assert batch.images.shape == (3, 1, 48, 48) and batch.answers.shape == (3,)
    vocab = data.vocab
    for row, i in enumerate([0, 3, 7]):
        assert vocab.decode(batch.questions[row]) == data.questions[i].words
        assert torch.equal(batch.images[row, 0], data.scenes[data.scene_of[i]].image)
    lengths = (batch.questions != vocab.pad_id).sum(1).tolist()
    assert lengths == [len(data.questions[i].words) for i in (0, 3, 7)]
    part = data.select([3, 7])
    assert part.questions == [data.questions[3], data.questions[7]]


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="split must be one of"):
        qs.make_questions(5, "dev")
    with pytest.raises(ValueError, match="n must be"):
        qs.make_questions(0)
    with pytest.raises(ValueError, match="per_scene must be"):
        qs.make_questions(4, per_scene=0)
    with pytest.raises(ValueError, match="template must be one of"):
        qs.question_words("smallest")
    with pytest.raises(ValueError, match="takes a digit"):
        qs.question_words("left")
    with pytest.raises(ValueError, match="takes a digit"):
        qs.question_words("count", 3)
    with pytest.raises(ValueError, match="as long"):
        qs.VQAData([], [], [0], "train")
