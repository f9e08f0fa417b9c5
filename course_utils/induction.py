"""Induction heads (Olsson et al., 2022): how a two-layer attention-only model copies.

A sequence whose second half repeats its first half cannot be predicted in its first half
(its tokens are random) but can in its second: at a repeated token, look back for where that
token occurred before and copy the token that followed it. Two heads do this together: a
previous-token head in layer 0 writes "the token before me" into each position, and an
induction head in layer 1 uses it to attend to the position *after* the earlier occurrence
of the current token, then copies what it finds there to the output.

- :func:`repeated_sequences`: seeded rows ``segment, segment, filler`` whose half length
  ``n`` varies per row, so no fixed position offset can stand in for the lookup;
- :func:`half_losses`: the next-token loss on the first half and on the repeated half;
- :func:`prefix_matching_scores`: per head, the attention from each repeated token to the
  token right after its earlier occurrence (1 for a perfect induction head);
- :func:`ov_circuits` and :func:`copying_scores`: what each head writes to the logits when it
  attends to a token, and how often that raises the attended token itself above all others;
- :func:`train_induction`: the training loop, recording both losses and both head scores;
- :func:`corrupt_segment`: the same rows with their first segment replaced, so that nothing
  repeats: the corrupted input of activation patching;
- :func:`path_patched_logits`: layer 0's heads replaced in one of layer 1's inputs only
  (queries, keys, values, or the direct path to the logits), to measure how layer 1 reads
  them (Elhage et al.'s Q-, K- and V-composition).

The model is notebook 04's :class:`~course_utils.toy_models.AttentionOnlyTransformer` with
two layers and one output per vocabulary entry, so :mod:`course_utils.circuits` removes and
patches its heads. Shapes as in the glossary of :mod:`course_utils` (``B`` batch, ``L``
tokens, ``H`` heads, ``V`` vocabulary, ``E`` the model width); ``num_layers`` counts layers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_utils._validate import check_positive, check_tensor
from course_utils.circuits import patch_heads
from course_utils.data import TensorBatch, split_of
from course_utils.interpret import Attentions, offset_scores, stack_attentions
from course_utils.toy_models import AttentionOnlyTransformer
from course_utils.training import fit

SPLITS = ("train", "val", "test")


# ---------------------------------------------------------------------------------------
# Data: a random segment, the same segment again, random filler
# ---------------------------------------------------------------------------------------
@dataclass
class Repeats(TensorBatch):
    """Token ids ``(B, L)`` and each row's half length ``half (B,)``: in row ``b``, tokens
    ``half[b] .. 2 half[b] - 1`` repeat tokens ``0 .. half[b] - 1``; the rest is filler."""

    ids: torch.Tensor
    half: torch.Tensor


def _check_half(half: object, batch: int, seq_len: int) -> None:
    check_tensor("half", half, dims=1)
    if half.dtype.is_floating_point or half.dtype == torch.bool or half.shape != (batch,):
        raise ValueError(
            f"half must be a (B,) = ({batch},) integer tensor, got shape {tuple(half.shape)} "
            f"and dtype {half.dtype}"
        )
    if batch and (int(half.min()) < 2 or 2 * int(half.max()) > seq_len):
        raise ValueError(
            f"half must lie in 2..L/2 = 2..{seq_len // 2}, got min {int(half.min())} and "
            f"max {int(half.max())}"
        )


def repeated_sequences(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    min_half: int = 4,
    split: str = "train",
    generator: torch.Generator | None = None,
) -> Repeats:
    """Rows of ``seq_len`` tokens: ``n`` random tokens, the same ``n`` again, then filler.

    ``n`` is drawn per row from ``min_half .. seq_len // 2``. A row's tokens are distinct
    (drawn without replacement) apart from the repeat, so each repeated token has exactly
    one earlier occurrence. A row belongs to ``split`` by a hash of its ids
    (:func:`course_utils.data.split_of`), so the splits never share a row.

    >>> r = repeated_sequences(1, 10, 20, split="test", generator=torch.Generator().manual_seed(0))
    >>> r.ids.tolist(), r.half.tolist()  # 7 15 5 0 | 7 15 5 0 | filler
    ([[7, 15, 5, 0, 7, 15, 5, 0, 12, 10]], [4])
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("min_half", min_half)):
        check_positive(name, value)
    check_positive("vocab_size", vocab_size)
    if not 2 <= min_half <= seq_len // 2:
        raise ValueError(f"min_half must lie in 2..seq_len // 2 = {seq_len // 2}, got {min_half}")
    if vocab_size < seq_len - min_half:
        raise ValueError(
            f"vocab_size must be at least seq_len - min_half = {seq_len - min_half} so that a "
            f"row's tokens can be distinct, got {vocab_size}"
        )
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rows, halves, kept = [], [], 0
    pos = torch.arange(seq_len)[None]  # (1, L)
    while kept < batch_size:
        m = 2 * (batch_size - kept) + 8  # candidates; about 80 % are "train", 10 % "test"
        perm = torch.rand(m, vocab_size, generator=generator).argsort(dim=1)  # (m, V)
        n = torch.randint(min_half, seq_len // 2 + 1, (m,), generator=generator)  # (m,)
        # position p copies perm[p] in the segment, perm[p - n] after it: the repeat
        # (p - n < n), then fresh tokens perm[n .. L - n - 1] as filler
        src = torch.where(pos < n[:, None], pos, pos - n[:, None])  # (m, L)
        ids = perm.gather(1, src)  # (m, L)
        keep = torch.tensor([split_of(row) == split for row in ids.tolist()])
        rows.append(ids[keep])
        halves.append(n[keep])
        kept += int(keep.sum())
    return Repeats(torch.cat(rows)[:batch_size], torch.cat(halves)[:batch_size])


def half_masks(half: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which next-token targets ``1 .. L-1`` lie in each half: two ``(B, L - 1)`` masks.

    Column ``p`` is the target ``p + 1``, predicted at position ``p``. The first half holds
    targets ``1 .. n-1``; the repeated half ``n+1 .. 2n-1``. Target ``n`` is in neither: it
    starts the repeat, and nothing before it says that a repeat starts there.

    >>> first, repeated = half_masks(torch.tensor([3]), 8)
    >>> first.int().tolist(), repeated.int().tolist()
    ([[1, 1, 0, 0, 0, 0, 0]], [[0, 0, 0, 1, 1, 0, 0]])
    """
    check_positive("seq_len", seq_len)
    _check_half(half, half.shape[0] if isinstance(half, torch.Tensor) else 0, seq_len)
    t = torch.arange(1, seq_len, device=half.device)[None]  # (1, L - 1): the targets
    n = half[:, None]  # (B, 1)
    return t < n, (t > n) & (t < 2 * n)


def half_losses(
    logits: torch.Tensor, ids: torch.Tensor, half: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token cross-entropy on the first half and on the repeated half (nats).

    ``logits (B, L, V)`` are a model's outputs for ``ids (B, L)``; position ``p`` predicts
    ``ids[:, p + 1]``. The halves are those of :func:`half_masks`.
    """
    check_tensor("logits", logits, dims=3)
    check_tensor("ids", ids, dims=2)
    if logits.shape[:2] != ids.shape:
        raise ValueError(
            f"logits (B, L, V) and ids (B, L) must agree on B and L, got logits "
            f"{tuple(logits.shape)} and ids {tuple(ids.shape)}"
        )
    _check_half(half, ids.shape[0], ids.shape[1])
    first, repeated = half_masks(half, ids.shape[1])
    # (B, V, L - 1) against (B, L - 1): one loss per target
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return (loss * first).sum() / first.sum(), (loss * repeated).sum() / repeated.sum()


# ---------------------------------------------------------------------------------------
# Head scores: where a head looks (prefix matching) and what it writes (copying)
# ---------------------------------------------------------------------------------------
def prefix_matching_scores(attentions: Attentions, half: torch.Tensor) -> torch.Tensor:
    """Per layer and head, the mean attention from a repeated token to the token right
    after its earlier occurrence: ``(num_layers, H)``.

    In a row with half length ``n``, query ``i`` in ``n .. 2n-1`` holds the token of
    position ``i - n``; an induction head attends to key ``i - n + 1``. The score averages
    ``A[i, i - n + 1]`` over every such query of every row: 1 for a perfect induction head,
    0 for a head that never looks there (a previous-token head, for ``n > 2``).

    >>> n, L = 3, 6
    >>> A = torch.zeros(1, 1, L, L)
    >>> A[0, 0, torch.arange(n, L), torch.arange(1, L - n + 1)] = 1.0  # query i -> key i-n+1
    >>> prefix_matching_scores([A], torch.tensor([n]))
    tensor([[1.]])
    """
    A = stack_attentions(attentions)  # (num_layers, B, H, L, L)
    num_layers, B, H, L, _ = A.shape
    _check_half(half, B, L)
    i = torch.arange(L, device=A.device)[None]  # (1, L): queries
    n = half.to(A.device)[:, None]  # (B, 1)
    queries = (i >= n) & (i < 2 * n)  # (B, L)
    keys = (i - n + 1).clamp(min=0)  # (B, L): the key each query should read
    index = keys[None, :, None, :, None].expand(num_layers, B, H, L, 1)
    w = A.gather(-1, index).squeeze(-1)  # (num_layers, B, H, L): A[..., i, keys[i]]
    q = queries[None, :, None, :].to(A.dtype)  # (1, B, 1, L)
    return (w * q).sum((1, 3)) / q.sum((1, 3))  # (num_layers, H)


def ov_circuits(model: AttentionOnlyTransformer) -> torch.Tensor:
    """Every head's OV circuit read from token to logits: ``(num_layers, H, V, V)``.

    Row ``s`` of head ``h`` is what the head adds to the output logits when it attends
    only to token ``s`` and the token reaches it straight from the embedding:
    ``W_E[s] W_V^h W_O^h W_U`` (the direct path; biases and the other layers left out).
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    W_E = model.token_embedding.weight  # (V, E)
    W_U = model.readout.weight  # (V, E): logits = x @ W_U.T
    circuits = []
    for mha in model.layers:
        H, D = mha.num_heads, mha.head_dim
        # nn.Linear computes x @ W.T: v_proj's rows h*D .. (h+1)*D make head h's values,
        # out_proj's columns h*D .. (h+1)*D read head h's output
        W_V = mha.v_proj.weight.view(H, D, -1)  # (H, D, E)
        W_O = mha.out_proj.weight.view(-1, H, D).transpose(0, 1)  # (H, E, D)
        # (V, E) @ (H, E, D) @ (H, D, E) @ (E, V) -> (H, V, V)
        circuits.append(W_E @ W_V.transpose(1, 2) @ W_O.transpose(1, 2) @ W_U.T)
    return torch.stack(circuits).detach()


def copying_scores(ov: torch.Tensor) -> torch.Tensor:
    """The share of tokens ``s`` whose own logit is the largest in row ``s`` of ``ov``.

    ``ov (..., V, V) -> (...)``: 1 for a head that always raises the token it attends to
    above every other (a copying head), 0 when it never does (ties count for the lowest
    index, as ``argmax`` does).

    >>> copying_scores(torch.eye(4)), copying_scores(torch.eye(4).roll(1, dims=1))
    (tensor(1.), tensor(0.))
    """
    check_tensor("ov", ov)
    if ov.dim() < 2 or ov.shape[-1] != ov.shape[-2] or not ov.is_floating_point():
        raise ValueError(
            f"ov must be a floating-point (..., V, V) tensor, got shape {tuple(ov.shape)} "
            f"and dtype {ov.dtype}"
        )
    V = ov.shape[-1]
    own = ov.argmax(dim=-1) == torch.arange(V, device=ov.device)  # (..., V)
    return own.float().mean(-1)


# ---------------------------------------------------------------------------------------
# Training, with both losses and both head scores recorded as it goes
# ---------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate_induction(model: AttentionOnlyTransformer, data: Repeats) -> dict[str, float]:
    """Both half losses and the heads' best scores on ``data``: ``first_half_loss``,
    ``repeated_half_loss``, ``induction_score`` (the last layer's highest prefix-matching
    score) and ``previous_token_score`` (layer 0's highest previous-token score)."""
    was_training = model.training
    model.eval()
    data = data.to(next(model.parameters()).device)
    logits, attentions = model(data.ids)
    first, repeated = half_losses(logits, data.ids, data.half)
    model.train(was_training)
    return {
        "first_half_loss": first.item(),
        "repeated_half_loss": repeated.item(),
        "induction_score": prefix_matching_scores(attentions, data.half)[-1].max().item(),
        "previous_token_score": offset_scores(attentions, offset=-1)[0].max().item(),
    }


def train_induction(
    model: AttentionOnlyTransformer,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-2,
    min_half: int = 4,
    seed: int = 0,
    eval_every: int = 50,
    eval_size: int = 256,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Train ``model`` on :func:`repeated_sequences` (next token at every position, Adam,
    no clipping) with :func:`course_utils.training.fit`.

    Every ``eval_every`` steps (and at step 0) it evaluates on ``eval_size`` rows of the
    "test" split (:func:`evaluate_induction`). Returns the history: ``step``,
    ``train_loss`` (the mean since the last evaluation; NaN at step 0) and one list per
    figure of :func:`evaluate_induction`.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    for name, value in (("steps", steps), ("batch_size", batch_size), ("eval_every", eval_every)):
        check_positive(name, value)
    check_positive("eval_size", eval_size)
    V, L = model.config.vocab_size, model.config.max_len
    train_stream = torch.Generator().manual_seed(seed)
    test = repeated_sequences(
        eval_size, L, V, min_half, "test", torch.Generator().manual_seed(seed)
    )

    def rows() -> Iterator[Repeats]:  # fresh training rows at every step, from one stream
        while True:
            yield repeated_sequences(batch_size, L, V, min_half, "train", train_stream)

    def next_token_loss(model: AttentionOnlyTransformer, batch: Repeats) -> torch.Tensor:
        logits, _ = model(batch.ids)  # (B, L, V)
        # (B * (L - 1), V) against (B * (L - 1),): every next token, filler included
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), batch.ids[:, 1:].reshape(-1))

    return fit(
        model,
        rows(),
        next_token_loss,
        steps,
        lr=lr,
        eval_fn=lambda m: evaluate_induction(m, test),
        eval_every=eval_every,
        clip_grad=None,
        desc="induction",
        progress=progress,
        eval_at_start=True,
    )


# ---------------------------------------------------------------------------------------
# Interventions: a corrupted input, and layer 0's heads removed from one path of layer 1
# ---------------------------------------------------------------------------------------
def corrupt_segment(
    data: Repeats, vocab_size: int, generator: torch.Generator | None = None
) -> Repeats:
    """The same rows with tokens ``0 .. n - 1`` (the first segment) replaced by distinct
    tokens that occur nowhere else in the row: the repeat and the filler stay, but the
    repeat no longer repeats anything.

    >>> r = Repeats(torch.tensor([[3, 1, 3, 1, 0, 2]]), torch.tensor([2]))
    >>> c = corrupt_segment(r, 8, torch.Generator().manual_seed(0))
    >>> c.ids[0, 2:].tolist(), set(c.ids[0, :2].tolist()) & {0, 1, 2, 3}
    ([3, 1, 0, 2], set())
    """
    if not isinstance(data, Repeats):
        raise TypeError(f"data must be a Repeats, got {type(data).__name__}")
    B, L = data.ids.shape
    _check_half(data.half, B, L)
    check_positive("vocab_size", vocab_size)
    ids = data.ids.clone()
    for b in range(B):
        n = int(data.half[b])
        present = set(ids[b].tolist())
        unused = [t for t in range(vocab_size) if t not in present]
        if len(unused) < n:
            raise ValueError(
                f"row {b} leaves {len(unused)} of vocab_size={vocab_size} tokens unused, "
                f"fewer than its half length {n}"
            )
        pick = torch.randperm(len(unused), generator=generator)[:n]
        ids[b, :n] = torch.tensor(unused, dtype=ids.dtype)[pick]
    return Repeats(ids, data.half.clone())


PATHS = ("query", "key", "value", "direct")


def path_patched_logits(
    model: AttentionOnlyTransformer,
    ids: torch.Tensor,
    values: dict[int, torch.Tensor],
    paths: tuple[str, ...],
) -> torch.Tensor:
    """Logits ``(B, L, V)`` of a 2-layer model in which layer-0 head ``h`` writes
    ``values[h]`` (``(B, L, D)`` or broadcastable, e.g. its mean) instead of its output, but
    **only** into the inputs of layer 1 named in ``paths``: its queries, keys or values, or
    the direct path (the residual stream the read-out sees). The other inputs see the real
    output. With every path, it equals the model's logits inside
    :func:`~course_utils.circuits.patch_heads`.
    """
    if not isinstance(model, AttentionOnlyTransformer) or model.config.num_layers != 2:
        raise ValueError("model must be an AttentionOnlyTransformer with num_layers=2")
    if not isinstance(paths, tuple) or not paths or not set(paths) <= set(PATHS):
        raise ValueError(f"paths must be a non-empty tuple drawn from {PATHS}, got {paths!r}")
    causal = model.config.causal
    x0 = model.embed(ids)  # (B, L, E)
    first, second = model.layers
    real = x0 + first(x0, x0, x0, is_causal=causal)[0]  # (B, L, E): the residual after layer 0
    with patch_heads(model, {(0, h): v for h, v in values.items()}):
        patched = x0 + first(x0, x0, x0, is_causal=causal)[0]

    def read(path: str) -> torch.Tensor:
        return patched if path in paths else real

    out = second(read("query"), read("key"), read("value"), is_causal=causal)[0]  # (B, L, E)
    return model.readout(read("direct") + out)
