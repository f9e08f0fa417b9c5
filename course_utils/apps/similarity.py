"""Sentence similarity with all-MiniLM-L6-v2: explain a score (notebook 16), ablate its heads
(notebook 18).

Two questions about the pretrained encoder of :mod:`course_utils.pretrained`:

- **Which words make sentence A similar to sentence B?** :func:`similarity_task` turns
  ``cos(embed(A), embed(B))`` into a function of A's word vectors ``x (B, L, E)``, so the
  attribution methods of :mod:`course_utils.attribution` can explain it.
  :func:`embed_word_vectors` is the model's forward pass from word vectors on (positions
  and token types added, LayerNorm, the encoder, mean pool, unit length); it equals
  ``model.embed``. "Removing" a word means putting the **[MASK]** word vector in its place,
  at the same position: the occlusion baseline and the integrated-gradients baseline are
  the sentence with every word masked, ``[CLS] [MASK] ... [MASK] [SEP]``. [CLS] and [SEP]
  are never removed, and so never scored (``words`` marks the scored tokens).
- **Which heads matter?** :data:`PAIRS` is a small similarity benchmark written for the
  course: sentence pairs graded 0 (unrelated) to 5 (same meaning). :func:`benchmark_score`
  is the Spearman correlation between the model's cosine similarities and the grades;
  :func:`head_ablation_sweep` removes each head (and each layer's heads together) with
  :func:`course_utils.circuits.ablate_heads` and measures how far the embeddings move and
  how the score changes.

>>> PAIRS[0]
('The cat is sleeping on the sofa.', 'A cat is napping on the couch.', 5)

Shapes as in the glossary of :mod:`course_utils`: ``B`` pairs (or sentences), ``L`` tokens
with [CLS] and [SEP], ``E`` = 384, ``H`` = 12 heads; ``num_layers`` = 6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from course_utils._validate import check_tensor
from course_utils.attribution import spearman
from course_utils.circuits import ablate_heads, patch_heads, record_heads
from course_utils.pretrained import MiniLM, mean_pool

# (sentence A, sentence B, grade): 5 same meaning, 4 same meaning but one detail differs,
# 3 same kind of event with an important difference, 2 same topic, 1 a shared word or a
# loose link, 0 unrelated. Each anchor sentence has partners from grade 5 down to 0.
GRADES = range(6)
ANCHORS: dict[str, tuple[tuple[str, int], ...]] = {
    "The cat is sleeping on the sofa.": (
        ("A cat is napping on the couch.", 5),
        ("The kitten is asleep on the sofa.", 4),
        ("The dog is sleeping on the sofa.", 3),
        ("My cat likes to chase birds in the garden.", 2),
        ("We bought a new sofa for the living room.", 1),
        ("The train to Glasgow leaves at noon.", 0),
    ),
    "She is learning to play the piano.": (
        ("She is taking piano lessons.", 5),
        ("She is learning to play the piano at school.", 4),
        ("She is learning to play the violin.", 3),
        ("He plays the piano in a jazz band on Fridays.", 2),
        ("Four men carried the piano into the hall.", 1),
        ("Heavy rain flooded the roads this morning.", 0),
    ),
    "The train to Glasgow was cancelled because of snow.": (
        ("Snow forced the cancellation of the Glasgow train.", 5),
        ("The Glasgow train was cancelled this morning.", 4),
        ("The train to Glasgow was delayed by snow.", 3),
        ("Heavy snow closed several roads in the north.", 2),
        ("Trains are a pleasant way to travel.", 1),
        ("The soup needs more salt.", 0),
    ),
    "The company reported higher profits this year.": (
        ("The firm's earnings rose this year.", 5),
        ("The company's profits grew this year.", 5),
        ("The company car is parked outside.", 1),
        ("The company reported lower profits this year.", 3),
        ("Shares in the bank fell sharply on Monday.", 2),
        ("The children built a sandcastle on the beach.", 0),
    ),
    "A man is riding a bicycle down the hill.": (
        ("A man cycles down the hill.", 5),
        ("A woman is riding a bicycle down the hill.", 4),
        ("A man is pushing his bicycle up the hill.", 3),
        ("Bicycles are cheaper than cars.", 1),
        ("She is taking piano lessons.", 0),
    ),
    "Attention lets each word look at every other word.": (
        ("With attention, every word can see all the others.", 5),
        ("A causal model lets each word see only earlier words.", 3),
        ("The Transformer is built from attention layers.", 2),
        ("A recurrent network reads one word at a time.", 2),
        ("Pay attention to the teacher in class.", 1),
        ("The cat is sleeping on the sofa.", 0),
    ),
    "The doctor told him to drink more water.": (
        ("His doctor advised him to drink more water.", 5),
        ("The doctor told him to drink more water every day.", 4),
        ("The doctor told him to eat less sugar.", 3),
        ("She works as a nurse at the city hospital.", 1),
        ("Water boils at one hundred degrees.", 1),
        ("The firm's earnings rose this year.", 0),
    ),
    "The children are playing football in the park.": (
        ("Kids are playing soccer in the park.", 5),
        ("The children are playing tennis in the park.", 3),
        ("Two dogs are running across the park.", 2),
        ("Football is popular in many countries.", 1),
        ("The doctor told him to eat less sugar.", 0),
    ),
}
PAIRS: tuple[tuple[str, str, int], ...] = tuple(
    (a, b, grade) for a, partners in ANCHORS.items() for b, grade in partners
)


def _check_model(model: object) -> None:
    if not isinstance(model, MiniLM):
        raise TypeError(
            f"model must be a pretrained.MiniLM (load_minilm()), got {type(model).__name__}"
        )


def _check_pairs(pairs: object) -> None:
    ok = isinstance(pairs, Sequence) and len(pairs) >= 2
    for p in pairs if ok else ():
        ok = ok and isinstance(p, (tuple, list)) and len(p) == 3
        ok = ok and isinstance(p[0], str) and isinstance(p[1], str)
        ok = ok and isinstance(p[2], int) and not isinstance(p[2], bool) and p[2] in GRADES
    if not ok:
        raise ValueError(
            "pairs must be a list of at least 2 (sentence A, sentence B, grade 0..5) triples, "
            f"got {str(pairs)[:120]}"
        )


def unique_sentences(pairs: Sequence[tuple[str, str, int]] = PAIRS) -> list[str]:
    """Every sentence of ``pairs`` once, in order of first appearance (what is embedded).

    >>> len(unique_sentences(PAIRS)) < 2 * len(PAIRS)  # anchors are shared by their pairs
    True
    """
    _check_pairs(pairs)
    return list(dict.fromkeys(s for a, b, _ in pairs for s in (a, b)))


def pair_similarities(
    embeddings: torch.Tensor, pairs: Sequence[tuple[str, str, int]] = PAIRS
) -> torch.Tensor:
    """Cosine similarity of each pair, ``(len(pairs),)``, from unit-length ``embeddings``
    ``(N, E)`` of :func:`unique_sentences` (``pairs``), in that order."""
    sentences = unique_sentences(pairs)
    check_tensor("embeddings", embeddings, dims=2)
    if embeddings.shape[0] != len(sentences):
        raise ValueError(
            f"embeddings must hold one row per unique sentence ({len(sentences)}), got shape "
            f"{tuple(embeddings.shape)}"
        )
    row = {s: i for i, s in enumerate(sentences)}
    a = embeddings[[row[p[0]] for p in pairs]]  # (B, E)
    b = embeddings[[row[p[1]] for p in pairs]]  # (B, E)
    return (a * b).sum(-1)  # unit vectors: the dot product is the cosine


def similarity_score(similarities: torch.Tensor, grades: Sequence[int]) -> float:
    """The benchmark's score: Spearman's correlation between a model's similarities
    ``(B,)`` and the human grades ``(B,)``; 1 when the model orders the pairs as the grades do.

    >>> similarity_score(torch.tensor([0.9, 0.2, 0.5]), [5, 0, 3])
    1.0
    """
    check_tensor("similarities", similarities, dims=1)
    if len(grades) != len(similarities):
        raise ValueError(
            f"grades must have one grade per similarity ({len(similarities)}), got {len(grades)}"
        )
    return float(spearman(similarities.detach().cpu().double(), torch.tensor(grades).double()))


@torch.no_grad()
def benchmark_score(model: MiniLM, pairs: Sequence[tuple[str, str, int]] = PAIRS) -> float:
    """:func:`similarity_score` of ``model`` on ``pairs`` (default: the course's benchmark)."""
    _check_model(model)
    embeddings = model.embed(unique_sentences(pairs))  # (N, E)
    return similarity_score(pair_similarities(embeddings, pairs), [g for _, _, g in pairs])


# ---------------------------------------------------------------------------------------
# The similarity as a function of sentence A's word vectors
# ---------------------------------------------------------------------------------------
def embed_word_vectors(
    model: MiniLM, word_vectors: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Sentence embeddings ``(B, E)`` from word vectors ``(B, L, E)``: ``model.embed`` with the
    word lookup taken out, so gradients can flow into the word vectors.

    ``LayerNorm(word + position + token type A)`` -> the encoder -> the mean over the real
    tokens of ``attention_mask (B, L)`` -> unit length.
    """
    _check_model(model)
    check_tensor("word_vectors", word_vectors, dims=3)
    check_tensor("attention_mask", attention_mask, dims=2)
    B, L, E = word_vectors.shape
    if E != model.config.d_model or attention_mask.shape != (B, L):
        raise ValueError(
            f"word_vectors must be (B, L, {model.config.d_model}) and attention_mask (B, L), got "
            f"{tuple(word_vectors.shape)} and {tuple(attention_mask.shape)}"
        )
    emb = model.embeddings
    positions = torch.arange(L, device=word_vectors.device)  # (L,)
    types = torch.zeros(B, L, dtype=torch.long, device=word_vectors.device)  # all sentence A
    x = emb.norm(word_vectors + emb.position(positions)[None] + emb.token_type(types))
    mask = attention_mask.bool()
    hidden, _ = model.encoder(x, mask[:, None, None, :])  # (B, L, E); keys masked as in forward
    return F.normalize(mean_pool(hidden, mask), dim=-1)  # (B, E)


class SimilarityTask(NamedTuple):
    """What the attribution methods need to explain ``cos(A, B)`` for a batch of pairs.

    ``f(x (B, L, E)) -> (B,)`` the similarity of each sentence A, given as word vectors,
    to its sentence B; ``x`` A's word vectors; ``baseline`` the same with every word
    replaced by [MASK] ([CLS], [SEP] and padding kept); ``input_ids`` and ``attention_mask``
    ``(B, L)``; ``words (B, L)`` True at the scored tokens (not [CLS], [SEP], padding);
    ``tokens`` A's token strings per pair.
    """

    f: Callable[[torch.Tensor], torch.Tensor]
    x: torch.Tensor
    baseline: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    words: torch.Tensor
    tokens: list[list[str]]


def similarity_task(
    model: MiniLM, sentences: Sequence[str], references: Sequence[str]
) -> SimilarityTask:
    """Explain ``cos(embed(sentences[i]), embed(references[i]))`` through sentence i's words.

    The references' embeddings are computed once and held fixed; only the sentences'
    word vectors are the input ``x``. See :class:`SimilarityTask`.
    """
    _check_model(model)
    if isinstance(references, str) or len(references) != len(sentences):
        raise ValueError(
            f"references must be a list of one str per sentence ({len(sentences)}), got "
            f"{references!r:.120}"
        )
    with torch.no_grad():
        target = model.embed(list(references))  # (B, E), unit length
    batch = model.tokenize(sentences)
    special = torch.tensor(
        [model.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]")], device=batch.input_ids.device
    )
    words = batch.attention_mask & ~torch.isin(batch.input_ids, special)  # (B, L)
    mask_id = model.tokenizer.token_to_id("[MASK]")
    with torch.no_grad():
        x = model.embeddings.word(batch.input_ids)  # (B, L, E)
        baseline = model.embeddings.word(batch.input_ids.masked_fill(words, mask_id))

    def f(word_vectors: torch.Tensor) -> torch.Tensor:
        emb = embed_word_vectors(model, word_vectors, batch.attention_mask)  # (B, E)
        return (emb * target).sum(-1)  # (B,): cosine, both unit length

    return SimilarityTask(
        f, x, baseline, batch.input_ids, batch.attention_mask, words, batch.tokens
    )


# ---------------------------------------------------------------------------------------
# Head ablation over the benchmark
# ---------------------------------------------------------------------------------------
class AblationSweep(NamedTuple):
    """:func:`head_ablation_sweep`'s result. ``shift (num_layers, H)``: the mean ``1 - cos``
    between each sentence's embedding with head ``(l, h)`` removed and without;
    ``score_change (num_layers, H)``: the benchmark score with the head removed minus
    ``score``; ``layer_shift`` and ``layer_score_change`` ``(num_layers,)``: the same with
    all of a layer's heads removed at once; ``score``: the unablated score. The pairs'
    cosine similarities behind the scores: ``similarities (num_layers, H, P)`` with each
    head removed, ``layer_similarities (num_layers, P)`` with each layer's heads removed,
    ``base_similarities (P,)`` with nothing removed."""

    shift: torch.Tensor
    score_change: torch.Tensor
    layer_shift: torch.Tensor
    layer_score_change: torch.Tensor
    score: float
    similarities: torch.Tensor
    layer_similarities: torch.Tensor
    base_similarities: torch.Tensor


@torch.no_grad()
def head_ablation_sweep(
    model: MiniLM,
    pairs: Sequence[tuple[str, str, int]] = PAIRS,
    progress: bool = True,
    replacement: str = "zero",
) -> AblationSweep:
    """Remove each head, then each layer's heads, and measure the embeddings and the score.
    ``replacement="zero"`` silences a head (:func:`~course_utils.circuits.ablate_heads`);
    ``"mean"`` makes it write its mean output over every real token of the benchmark's
    sentences instead (:func:`~course_utils.circuits.patch_heads`): mean ablation.

    All the sentences run as one batch. Removing a head in layer ``l`` cannot change
    layers below ``l``, so their outputs are computed once and each ablation runs only
    layers ``l`` and up: the same embeddings as ``model.embed`` inside
    :func:`~course_utils.circuits.ablate_heads`, running 3.5 of the 6 layers on average.
    """
    _check_model(model)
    if replacement not in ("zero", "mean"):
        raise ValueError(f"replacement must be 'zero' or 'mean', got {replacement!r}")
    sentences = unique_sentences(pairs)
    grades = [g for _, _, g in pairs]
    batch = model.tokenize(sentences)
    mask = batch.attention_mask
    keys = mask[:, None, None, :]  # (N, 1, 1, L)
    layers = model.encoder.layers
    inputs = [model.embeddings(batch.input_ids, torch.zeros_like(batch.input_ids))]
    with record_heads(model) as outputs:  # (N, H, L, D) per layer
        for layer in layers:  # inputs[l]: what layer l reads, (N, L, E)
            inputs.append(layer(inputs[-1], keys)[0])
    means = {  # (D,): each head's output averaged over the real tokens
        (lay, h): outputs[lay][:, h][mask.bool()].mean(0)
        for lay in outputs
        for h in range(outputs[lay].shape[1])
    }

    def run(start: int, heads: list[tuple[int, int]]) -> tuple[float, torch.Tensor]:
        x = inputs[start]
        zero = replacement == "zero"
        with (
            ablate_heads(model, heads) if zero else patch_heads(model, {k: means[k] for k in heads})
        ):
            for layer in layers[start:]:
                x = layer(x, keys)[0]
        emb = F.normalize(mean_pool(x, mask), dim=-1)  # (N, E)
        return float((1 - (emb * base).sum(-1)).mean()), pair_similarities(emb, pairs).cpu()

    base = F.normalize(mean_pool(inputs[-1], mask), dim=-1)  # (N, E)
    base_sims = pair_similarities(base, pairs).cpu()  # (P,)
    score = similarity_score(base_sims, grades)
    num_layers, H = len(layers), model.config.num_heads
    shift, sims = torch.zeros(num_layers, H), torch.zeros(num_layers, H, len(pairs))
    bar = tqdm(total=num_layers * (H + 1), desc="ablating heads", disable=not progress)
    layer_shift, layer_sims = torch.zeros(num_layers), torch.zeros(num_layers, len(pairs))
    for layer in range(num_layers):
        for h in range(H):
            shift[layer, h], sims[layer, h] = run(layer, [(layer, h)])
            bar.update()
        every_head = [(layer, h) for h in range(H)]
        layer_shift[layer], layer_sims[layer] = run(layer, every_head)
        bar.update()
    bar.close()
    change = torch.tensor([[similarity_score(s, grades) - score for s in row] for row in sims])
    layer_change = torch.tensor([similarity_score(s, grades) - score for s in layer_sims])
    return AblationSweep(
        shift, change, layer_shift, layer_change, score, sims, layer_sims, base_sims
    )


class ScoreChangeInterval(NamedTuple):
    """:func:`bootstrap_score_change`'s result: ``head (num_layers, H, 2)`` and ``layer
    (num_layers, 2)``, the low and high ends of each removal's interval for its score
    change."""

    head: torch.Tensor
    layer: torch.Tensor


def bootstrap_score_change(
    sweep: AblationSweep,
    grades: Sequence[int],
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> ScoreChangeInterval:
    """Paired bootstrap intervals for every removal's score change: draw the benchmark's
    pairs with replacement ``resamples`` times, score the model with and without the
    removal on the same draw, and keep the central ``level`` of the differences
    (percentile intervals). It says how much a change depends on which pairs the
    benchmark happened to hold; it cannot say anything about pairs of other kinds.
    """
    P = sweep.base_similarities.shape[-1]
    if len(grades) != P:
        raise ValueError(f"grades must have one grade per pair ({P}), got {len(grades)}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an int >= 2, got {resamples!r}")
    draws = torch.randint(P, (resamples, P), generator=torch.Generator().manual_seed(seed))
    y = torch.tensor(grades, dtype=torch.float64)[draws]  # (R, P): the drawn pairs' grades
    base = spearman(sweep.base_similarities.double()[draws], y)  # (R,)
    ends = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)

    def interval(similarities: torch.Tensor) -> torch.Tensor:  # (P,) -> (2,)
        change = spearman(similarities.double()[draws], y) - base  # (R,), paired
        return torch.nanquantile(change, ends)

    head = torch.stack([torch.stack([interval(s) for s in row]) for row in sweep.similarities])
    layer = torch.stack([interval(s) for s in sweep.layer_similarities])
    return ScoreChangeInterval(head, layer)
