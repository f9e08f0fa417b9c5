"""bAbI-like stories for multi-hop reasoning (notebook 14): people move between rooms and pick
up and drop objects; a question asks where a person or an object is.

A seeded simulation writes each story and keeps the world state, so every answer is right by
construction and the generator knows the **supporting facts** (the sentences a reader needs):

* a **one-fact** question, "where is mary", needs the last sentence that moved Mary;
* a **two-fact** question, "where is the apple", needs the sentence where the apple's holder
  picked it up (who holds it) and then the last sentence that moved the holder (where that
  person is). The apple is held when it is asked about.

>>> story = make_stories(2, split="train", seed=0)[1]
>>> for i, sentence in enumerate(story.sentences):
...     print(i, " ".join(sentence))
0 sandra went to the garden
1 sandra picked up the milk
2 john went to the bedroom
3 daniel went to the garden
4 mary went to the office
5 john picked up the apple
6 daniel went to the bedroom
7 sandra went to the bedroom
>>> " ".join(story.question), story.answer, story.supporting, story.kind
('where is the milk', 'bedroom', (1, 7), 'two-fact')

A story belongs to one split through a stable hash of its text (80% train, 10% validation, 10%
test), so no story is in two splits. Shapes: ``M`` sentences in a story's memory, ``W`` words
in a sentence.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from course_utils._validate import check_positive
from course_utils.data import TensorBatch, Vocab, shuffled_batches, split_by_hash

PEOPLE = ["mary", "john", "sandra", "daniel"]
ROOMS = ["kitchen", "garden", "office", "bedroom", "hallway", "bathroom"]
OBJECTS = ["apple", "football", "milk", "key"]
KINDS = ("one-fact", "two-fact")
SPLITS = ("train", "val", "test")
MAX_WORDS = 5  # "mary picked up the apple"


@dataclass
class Story:
    """One story: its sentences, a question, the answer, the supporting sentence indices
    (in the order a reader needs them) and the question's kind."""

    sentences: list[list[str]]
    question: list[str]
    answer: str
    supporting: tuple[int, ...]
    kind: str

    def text(self) -> str:
        lines = [f"{i:2d} {' '.join(s)}" for i, s in enumerate(self.sentences)]
        return "\n".join(lines + [f"Q: {' '.join(self.question)}?  A: {self.answer}"])


def story_split(story: Story) -> str:
    """The split a story belongs to, from a stable hash of its sentences and question."""
    text = " | ".join(" ".join(s) for s in story.sentences) + " ? " + " ".join(story.question)
    return split_by_hash(text)


def _events(rng: random.Random, n_sentences: int) -> list[list[str]]:
    """A random story of ``n_sentences``: moves, pick-ups (only by a person in a room) and drops."""
    location: dict[str, str] = {}
    holder: dict[str, str] = {}  # object -> person
    sentences = []
    for _ in range(n_sentences):
        person = rng.choice(PEOPLE)
        held = [o for o, p in holder.items() if p == person]
        free = [o for o in OBJECTS if o not in holder]
        roll = rng.random()
        if person in location and free and roll < 0.3:
            obj = rng.choice(free)
            holder[obj] = person
            sentences.append([person, "picked", "up", "the", obj])
        elif held and roll < 0.4:
            obj = rng.choice(held)
            del holder[obj]
            sentences.append([person, "dropped", "the", obj])
        else:
            room = rng.choice([r for r in ROOMS if r != location.get(person)])
            location[person] = room
            sentences.append([person, "went", "to", "the", room])
    return sentences


def all_questions(sentences: list[list[str]]) -> list[tuple]:
    """Every question the end of a story can answer: ``(question, answer, supporting, kind)``
    for each person who has moved (one-fact) and each object someone holds (two-fact).

    >>> all_questions([["mary", "went", "to", "the", "garden"], ["mary", "picked", "up", "the", "key"]])
    [(['where', 'is', 'mary'], 'garden', (0,), 'one-fact'), (['where', 'is', 'the', 'key'], 'garden', (1, 0), 'two-fact')]
    """
    last_move: dict[str, int] = {}
    last_pickup: dict[str, int] = {}
    holder: dict[str, str] = {}
    for i, s in enumerate(sentences):
        if s[1] == "went":
            last_move[s[0]] = i
        elif s[1] == "picked":
            holder[s[4]], last_pickup[s[4]] = s[0], i
        else:  # dropped
            del holder[s[3]]
    out = [
        (["where", "is", p], sentences[i][4], (i,), "one-fact")
        for p, i in sorted(last_move.items())
    ]
    for obj, person in sorted(holder.items()):
        move = last_move[person]  # a holder picked the object up in a room, so has moved
        out.append(
            (["where", "is", "the", obj], sentences[move][4], (last_pickup[obj], move), "two-fact")
        )
    return out


def _question(rng: random.Random, sentences: list[list[str]], kind: str) -> tuple | None:
    """(question, answer, supporting) of ``kind`` about the story's end, or None if none fits."""
    fitting = [q[:3] for q in all_questions(sentences) if q[3] == kind]
    return rng.choice(fitting) if fitting else None


def make_stories(
    n: int,
    split: str = "train",
    seed: int = 0,
    n_sentences: tuple[int, int] = (6, 10),
    kinds: tuple[str, ...] = KINDS,
) -> list[Story]:
    """``n`` stories of ``split`` (kinds taking turns), each of ``n_sentences`` sentences
    (a range, both ends included). The same arguments always give the same stories."""
    check_positive("n", n)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    low, high = n_sentences
    if not 2 <= low <= high:
        raise ValueError(
            f"n_sentences must be (low, high) with 2 <= low <= high, got {n_sentences}"
        )
    unknown = set(kinds) - set(KINDS)
    if not kinds or unknown:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds}")
    rng = random.Random(f"stories-{seed}-{split}")
    stories: list[Story] = []
    while len(stories) < n:
        kind = kinds[len(stories) % len(kinds)]
        sentences = _events(rng, rng.randint(low, high))
        found = _question(rng, sentences, kind)
        if found is None:
            continue
        story = Story(sentences, *found, kind=kind)
        if story_split(story) == split:
            stories.append(story)
    return stories


def story_vocab() -> Vocab:
    """Every word a story, a question or an answer uses."""
    words = ["went", "to", "the", "picked", "up", "dropped", "where", "is"]
    return Vocab(words + PEOPLE + ROOMS + OBJECTS)


@dataclass
class StoryBatch(TensorBatch):
    """Stories as ids: ``story (B, M, W)`` (padded sentences and words), ``story_mask (B, M)``
    True at real sentences, ``query (B, W)``, ``answer (B,)``."""

    story: torch.Tensor
    story_mask: torch.Tensor
    query: torch.Tensor
    answer: torch.Tensor


class StoryData:
    """A list of stories with their ids, ready to batch; ``max_sentences`` pads every story."""

    def __init__(self, stories: list[Story], vocab: Vocab, max_sentences: int = 10):
        longest = max(len(s.sentences) for s in stories)
        if longest > max_sentences:
            raise ValueError(
                f"a story has {longest} sentences, more than max_sentences={max_sentences}"
            )
        self.stories, self.vocab, self.max_sentences = stories, vocab, max_sentences
        N, M, W = len(stories), max_sentences, MAX_WORDS
        self.story = torch.full((N, M, W), vocab.pad_id)
        self.query = torch.full((N, W), vocab.pad_id)
        for n, s in enumerate(stories):
            for m, sentence in enumerate(s.sentences):
                self.story[n, m, : len(sentence)] = torch.tensor(vocab.encode(sentence))
            self.query[n, : len(s.question)] = torch.tensor(vocab.encode(s.question))
        self.story_mask = (self.story != vocab.pad_id).any(-1)  # (N, M)
        self.answer = torch.tensor([vocab.stoi[s.answer] for s in stories])

    def __len__(self) -> int:
        return len(self.stories)

    def batch(self, indices: list[int]) -> StoryBatch:
        i = torch.as_tensor(indices, dtype=torch.long)
        return StoryBatch(self.story[i], self.story_mask[i], self.query[i], self.answer[i])

    def kinds(self) -> list[str]:
        return [s.kind for s in self.stories]


def story_batches(data: StoryData, batch_size: int, seed: int = 0) -> Iterator[StoryBatch]:
    """Shuffled batches forever, the order fixed by ``seed`` (:func:`~course_utils.data.shuffled_batches`)."""
    return shuffled_batches(data, batch_size, seed)
