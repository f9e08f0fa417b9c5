"""The eight applications of the course behind the protocol of :mod:`course_utils.apps.protocol`.

:data:`APPLICATIONS` maps a name to its :class:`~course_utils.apps.protocol.Application`: the
reversal task of notebooks 01 and 03 and the applications of notebooks 07, 08, 09, 10, 14, 15
and 16, each with its notebook's data sizes, model sizes and recipe as ``"full"`` and a
shorter ``"small"``. Each application module keeps its own ``make_splits`` / ``build_model``
/ ``evaluate`` with the options its notebook needs (counts, kinds, switches); the entries
here call them with the notebooks' settings. Seeds: ``seed`` draws the data (the speech clips
are stored, so only the training order and the weights move with it) and the batches; the
weights are drawn in ``build_model``, after :func:`~course_utils.training.set_seed`.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils.apps import (
    captioning,
    memory,
    rationales,
    speech,
    summarisation,
    translation,
    vqa,
)
from course_utils.apps.news import NewsData, news_batches
from course_utils.apps.protocol import Application, Recipe
from course_utils.apps.scenes import CaptionData, caption_batches
from course_utils.apps.stories import StoryData, story_batches
from course_utils.bahdanau import AttentionSeq2Seq, BahdanauConfig
from course_utils.data import (
    SequencePairs,
    TranslationPairs,
    Vocab,
    length_bucketed_batches,
    letter_vocab,
)
from course_utils.data import make_splits as sequence_splits
from course_utils.metrics import accuracy_by_length
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig
from course_utils.training import seq2seq_loss, set_seed, train_or_load


# ---------------------------------------------------------------------------------------
# The sequence tasks: reversal (notebooks 01, 03) and translation (07)
# ---------------------------------------------------------------------------------------
def _gru(attention: bool, src_vocab: Vocab, tgt_vocab: Vocab | None, **sizes) -> nn.Module:
    sizes = {"emb_dim": 32, "rnn_dim": 64, **sizes}
    if attention:
        config = BahdanauConfig.from_vocab(src_vocab, tgt_vocab, **{"attn_dim": 32, **sizes})
        return AttentionSeq2Seq(config)
    return Seq2Seq(Seq2SeqConfig.from_vocab(src_vocab, tgt_vocab, **sizes))


def _reverse_splits(seed: int, size: str) -> dict:
    lengths, counts = {"full": (range(4, 31), (20_000, 540, 2_700)),
                       "small": (range(4, 16), (3_000, 100, 340))}[size]  # fmt: skip
    return sequence_splits("reverse", lengths, *counts, vocab=letter_vocab(10), seed=seed)


def _exact_match(model: nn.Module, data: SequencePairs) -> dict[str, float]:
    """The share of inputs whose greedy output is exactly right."""
    by_length = accuracy_by_length(model, data, batch_size=540)
    counts = {n: int((data.lengths() == n).sum()) for n in by_length}
    return {"exact_match": sum(by_length[n] * counts[n] for n in counts) / len(data)}


def _pairs_subset(data: SequencePairs, rows: list[int]) -> SequencePairs:
    kept = {"src": [data.src[i] for i in rows], "tgt": [data.tgt[i] for i in rows]}
    if isinstance(data, TranslationPairs):
        pairs = [data.pairs[i] for i in rows] if data.pairs else []
        return TranslationPairs(**kept, vocab=data.vocab, task=data.task, split=data.split,
                                src_vocab=data.src_vocab, pairs=pairs)  # fmt: skip
    return SequencePairs(**kept, vocab=data.vocab, task=data.task, split=data.split)


def _translation_splits(seed: int, size: str) -> dict:
    lengths, counts = {"full": (range(4, 31), (6_000, 100, 250)),
                       "small": (range(4, 21), (2_000, 50, 200))}[size]  # fmt: skip
    return translation.make_splits(*counts, lengths=lengths, seed=seed)


# ---------------------------------------------------------------------------------------
# Summarisation (08), captioning (09), speech (10)
# ---------------------------------------------------------------------------------------
def _summary_splits(seed: int, size: str) -> dict:
    counts = {"full": (4_000, 100, 800), "small": (1_000, 50, 200)}[size]
    return summarisation.make_splits(*counts, seed=seed)


def _summariser(attention: bool | str, splits: dict, **sizes) -> nn.Module:
    """``True``: the pointer-generator (its copying is attention too); ``"no pointer"``:
    attention without copying, notebook 08's baseline; ``False``: neither."""
    sizes = {"emb_dim": 48, "rnn_dim": 64, "attn_dim": 64, **sizes}
    vocab = splits["train"].vocab
    if attention == "no pointer":
        return summarisation.build_model(True, vocab, pointer=False, **sizes)
    return summarisation.build_model(attention, vocab, **sizes)


_CAPTION_SIZES = {"channels": 64, "emb_dim": 16, "rnn_dim": 128, "attn_dim": 64}  # notebook 09's


def _caption_splits(seed: int, size: str) -> dict:
    counts = {"full": (4_000, 100, 3_000), "small": (1_000, 50, 300)}[size]
    return captioning.make_splits(*counts, seed=seed)


def _captioner(attention: bool | str, splits: dict, **sizes) -> nn.Module:
    sizes = {**_CAPTION_SIZES, **sizes}
    if attention == "grid":
        return captioning.build_model(False, "grid", **sizes)
    return captioning.build_model(attention, **sizes)


def _caption_loss(model: nn.Module, batch: object) -> torch.Tensor:
    lam = 0.001 if model.config.attention == "spatial" else 0.0  # notebook 09's lambda
    return captioning.caption_loss(model, batch, lam)


def _speech_splits(seed: int, size: str) -> dict:
    splits = speech.make_splits()  # stored clips: the same for every seed
    if size == "small":
        splits = {name: data.select(list(range(len(data) // 2))) for name, data in splits.items()}
    return splits


def _speller(attention: bool, splits: dict, **sizes) -> nn.Module:
    sizes = {"listener_dim": 64, "rnn_dim": 128, "attn_dim": 64, "emb_dim": 16, **sizes}
    return speech.build_model(attention, **sizes)


# ---------------------------------------------------------------------------------------
# Memory (14), visual questions (15), rationales (16)
# ---------------------------------------------------------------------------------------
def _story_splits(seed: int, size: str) -> dict:
    counts = {"full": (4_000, 100, 600), "small": (2_000, 50, 300)}[size]
    return memory.make_splits(*counts, seed=seed)


def _memn2n(attention: bool, splits: dict, **sizes) -> nn.Module:
    return memory.build_model(attention, **{"hops": 2, "d_model": 32, **sizes})


def _vqa_splits(seed: int, size: str) -> dict:
    counts = {"full": (8_000, 100, 2_400, 300), "small": (3_000, 50, 500, 50)}[size]
    splits = vqa.make_splits(*counts, seed=seed)
    encoder = _scene_encoder(size)
    for data in splits.values():
        data.encode(encoder)
    return {name: splits[name] for name in ("train", "val", "test")}


_ENCODERS: dict[str, nn.Module] = {}


def _scene_encoder(size: str) -> nn.Module:
    """The frozen feature extractor every VQA model reads: the CNN of notebook 09's spatial
    captioner, trained with seed 0 once per size and kept in the cache of trained weights
    (at ``"full"`` under notebook 09's own key, so a run of 09 or 15 has trained it)."""
    if size not in _ENCODERS:
        app = APPLICATIONS["captioning"]
        captions = app.make_splits(0, size)
        set_seed(0)
        captioner = app.build_model(True, captions)
        recipe = app.recipes[size]
        counts = [len(captions["train"]), len(captions["val"]), 300 if size == "full" else 0]
        config = dict(kind="spatial", splits=[*counts, 0], sizes=_CAPTION_SIZES,
                      batch=recipe.batch_size, steps=recipe.steps, lr=recipe.lr, lam=0.001,
                      seed=0)  # fmt: skip
        train_or_load(captioner, lambda: app.train(captioner, captions, 0, size), config,
                      modules=["course_utils.apps.scenes"],
                      name="09-spatial" if size == "full" else "12-scene-encoder")  # fmt: skip
        _ENCODERS[size] = captioner.encoder.eval()
    return _ENCODERS[size]


def _vqa_model(attention: bool | str, splits: dict, **sizes) -> nn.Module:
    sizes = {"d_model": 64, "emb_dim": 32, "attn_dim": 64, "num_heads": 4, **sizes}
    if attention == "grid":
        return vqa.build_model(False, "grid", **sizes)
    return vqa.build_model(attention, **sizes)


def _vqa_subset(data: object, rows: list[int]) -> object:
    picked = type(data)(data.scenes, [data.questions[i] for i in rows],
                        [data.scene_of[i] for i in rows], data.split)  # fmt: skip
    picked.features = data.features
    return picked


def _rationale_splits(seed: int, size: str) -> dict:
    counts = {"full": (2_000, 200, 200), "small": (1_000, 100, 200)}[size]
    return rationales.make_splits(*counts, seed=seed)


def _rationale_model(attention: bool, splits: dict, **sizes) -> nn.Module:
    sizes = {"num_layers": 2, "d_model": 32, "num_heads": 2, "d_ff": 64, **sizes}
    return rationales.build_model(attention, **sizes)


# ---------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------
def _seq_length(data: SequencePairs) -> list[int]:
    return [len(s) for s in data.src]


APPLICATIONS: dict[str, Application] = {
    "reverse": Application(
        name="reverse", notebook="01, 03", metric="exact_match", higher_is_better=True,
        difficulty_name="input length", variants=(),
        recipes={"full": Recipe(1_000, 64, 5e-3, decay=True),
                 "small": Recipe(250, 128, 1e-2, decay=True)},
        splits_fn=_reverse_splits,
        build_fn=lambda attention, splits, **sizes: _gru(
            attention, splits["train"].vocab, None, **sizes),
        batches_fn=length_bucketed_batches, loss_fn=seq2seq_loss, evaluate_fn=_exact_match,
        difficulty_fn=_seq_length, subset_fn=_pairs_subset,
    ),
    "translation": Application(
        name="translation", notebook="07", metric="bleu", higher_is_better=True,
        difficulty_name="source length", variants=(),
        recipes={"full": Recipe(400, 64, 5e-3, decay=True),
                 "small": Recipe(120, 128, 1e-2, decay=True)},
        splits_fn=_translation_splits,
        build_fn=lambda attention, splits, **sizes: _gru(
            attention, translation.source_vocab(), translation.target_vocab(), **sizes),
        batches_fn=length_bucketed_batches, loss_fn=seq2seq_loss,
        evaluate_fn=translation.evaluate, difficulty_fn=_seq_length, subset_fn=_pairs_subset,
    ),
    "summarisation": Application(
        name="summarisation", notebook="08", metric="rougeL", higher_is_better=True,
        difficulty_name="document length", variants=("no pointer",),
        recipes={"full": Recipe(400, 32, 3e-3), "small": Recipe(150, 32, 3e-3)},
        splits_fn=_summary_splits, build_fn=_summariser, batches_fn=news_batches,
        loss_fn=summarisation.summary_loss, evaluate_fn=summarisation.evaluate,
        difficulty_fn=lambda data: [len(r.document) for r in data.reports],
        subset_fn=lambda data, rows: NewsData(
            [data.reports[i] for i in rows], data.vocab, data.split),
    ),
    "captioning": Application(
        name="captioning", notebook="09", metric="exact_match", higher_is_better=True,
        difficulty_name="digits", variants=("grid",),
        recipes={"full": Recipe(800, 32, 3e-3), "small": Recipe(200, 32, 3e-3)},
        splits_fn=_caption_splits, build_fn=_captioner, batches_fn=caption_batches,
        loss_fn=_caption_loss, evaluate_fn=captioning.evaluate,
        difficulty_fn=lambda data: [len(s.digits) for s in data.scenes],
        subset_fn=lambda data, rows: CaptionData(
            [data.scenes[i] for i in rows], data.vocab, data.split),
    ),
    "speech": Application(
        name="speech", notebook="10", metric="cer", higher_is_better=False,
        difficulty_name="characters", variants=(),
        recipes={"full": Recipe(250, 32, 5e-3, decay=True),
                 "small": Recipe(100, 32, 5e-3, decay=True)},
        splits_fn=_speech_splits, build_fn=_speller,
        batches_fn=lambda data, batch_size, seed: data.batches(batch_size, seed),
        loss_fn=speech.speech_loss, evaluate_fn=speech.evaluate,
        difficulty_fn=lambda data: [len(t) for t in data.texts],
        subset_fn=lambda data, rows: data.select(list(rows)),
    ),
    "memory": Application(
        name="memory", notebook="14", metric="accuracy", higher_is_better=True,
        difficulty_name="facts", variants=(),
        recipes={"full": Recipe(1_500, 32, 1e-2), "small": Recipe(600, 32, 1e-2)},
        splits_fn=_story_splits, build_fn=_memn2n, batches_fn=story_batches,
        loss_fn=memory.story_loss, evaluate_fn=memory.evaluate,
        difficulty_fn=lambda data: [len(s.sentences) for s in data.stories],
        subset_fn=lambda data, rows: StoryData(
            [data.stories[i] for i in rows], data.vocab, data.max_sentences),
    ),
    "vqa": Application(
        name="vqa", notebook="15", metric="accuracy", higher_is_better=True,
        difficulty_name="digits", variants=("grid",),
        recipes={"full": Recipe(800, 64, 3e-3), "small": Recipe(300, 64, 3e-3)},
        splits_fn=_vqa_splits, build_fn=_vqa_model, batches_fn=caption_batches,
        loss_fn=vqa.vqa_loss, evaluate_fn=vqa.evaluate,
        difficulty_fn=lambda data: [len(data.scenes[i].digits) for i in data.scene_of],
        subset_fn=_vqa_subset,
    ),
    "rationales": Application(
        name="rationales", notebook="16", metric="accuracy", higher_is_better=True,
        difficulty_name="sentence length", variants=(),
        recipes={"full": Recipe(600, 64, 3e-3), "small": Recipe(200, 64, 3e-3)},
        splits_fn=_rationale_splits, build_fn=_rationale_model,
        batches_fn=rationales.batches, loss_fn=rationales.loss,
        evaluate_fn=rationales.evaluate,
        difficulty_fn=lambda data: [len(ex.tokens) for ex in data.examples],
        subset_fn=lambda data, rows: rationales.encode(
            [data.examples[i] for i in rows], data.vocab),
    ),
}  # fmt: skip
