"""apps.stories: seeded bAbI-like stories whose answers and supporting facts are checked here
against an independent replay of the world, sentence by sentence."""

import pytest
import torch

from course_utils.apps import stories
from course_utils.apps.stories import StoryData, make_stories, story_batches, story_vocab


def replay(sentences):
    """Where each person is and who holds each object after every sentence, with the index
    of the sentence that last set each fact: a second, independent reading of the story."""
    where, holds = {}, {}
    for i, words in enumerate(sentences):
        text = " ".join(words)
        person = words[0]
        if " went to the " in text:
            where[person] = (text.split(" went to the ")[1], i)
        elif " picked up the " in text:
            obj = text.split(" picked up the ")[1]
            assert obj not in holds, f"{obj} picked up while held: {text}"
            assert person in where, f"{person} picks up before being anywhere: {text}"
            holds[obj] = (person, i)
        elif " dropped the " in text:
            obj = text.split(" dropped the ")[1]
            assert holds.pop(obj)[0] == person, f"{person} drops what they do not hold"
        else:
            raise AssertionError(f"unknown sentence {text}")
    return where, holds


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_answers_and_supporting_facts_follow_from_the_story(split):
    for story in make_stories(300, split, seed=5):
        where, holds = replay(story.sentences)
        *_, name = story.question
        if story.kind == "one-fact":
            assert story.question == ["where", "is", name]
            room, i = where[name]
            assert (story.answer, story.supporting) == (room, (i,))
        else:
            assert story.question == ["where", "is", "the", name]
            person, pick = holds[name]
            room, move = where[person]
            assert (story.answer, story.supporting) == (room, (pick, move))


def test_same_seed_same_stories_and_seeds_differ():
    a, b = make_stories(40, "train", seed=1), make_stories(40, "train", seed=1)
    assert [s.text() for s in a] == [s.text() for s in b]
    assert [s.text() for s in a] != [s.text() for s in make_stories(40, "train", seed=2)]


def test_no_story_is_in_two_splits_and_kinds_take_turns():
    texts = {s: {x.text() for x in make_stories(400, s, seed=0)} for s in stories.SPLITS}
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["val"]
    assert not texts["val"] & texts["test"]
    kinds = [s.kind for s in make_stories(10, "test", seed=0)]
    assert kinds == ["one-fact", "two-fact"] * 5


def test_lengths_and_kinds_are_respected():
    for s in make_stories(50, "val", seed=3, n_sentences=(4, 5), kinds=("two-fact",)):
        assert 4 <= len(s.sentences) <= 5 and s.kind == "two-fact"


def test_story_data_ids_masks_and_batches():
    vocab = story_vocab()
    data = StoryData(make_stories(6, "train", seed=0), vocab)
    for n, s in enumerate(data.stories):
        assert data.story_mask[n].sum() == len(s.sentences)
        assert vocab.decode(data.story[n, 0]) == s.sentences[0]
        assert vocab.decode(data.query[n]) == s.question
        assert vocab.itos[int(data.answer[n])] == s.answer
    batch = next(story_batches(data, 4, seed=0))
    assert batch.story.shape == (4, 10, stories.MAX_WORDS) and batch.answer.shape == (4,)
    assert torch.equal(batch.story, next(story_batches(data, 4, seed=0)).story)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="split"):
        make_stories(3, "dev")
    with pytest.raises(ValueError, match="n_sentences"):
        make_stories(3, n_sentences=(5, 4))
    with pytest.raises(ValueError, match="kinds"):
        make_stories(3, kinds=("three-fact",))
    with pytest.raises(TypeError, match="n must be an int"):
        make_stories(2.0)
    with pytest.raises(ValueError, match="max_sentences"):
        StoryData(make_stories(3, n_sentences=(8, 8)), story_vocab(), max_sentences=5)


def test_all_questions_covers_every_located_person_and_held_object():
    for story in make_stories(100, "train", seed=7):
        where, holds = replay(story.sentences)
        questions = stories.all_questions(story.sentences)
        assert {q[0][-1] for q in questions} == set(where) | set(holds)
        for question, answer, supporting, kind in questions:
            name = question[-1]
            if kind == "one-fact":
                assert (answer, supporting) == (where[name][0], (where[name][1],))
            else:
                person, pick = holds[name]
                assert (answer, supporting) == (where[person][0], (pick, where[person][1]))
        assert (story.question, story.answer, story.supporting, story.kind) in questions
