"""Reading what a model holds: what each attention head looks at, attention rollout across
layers, and linear probes of hidden states.

Every function takes attention weights as a model returns them, ``(B, H, L, L)`` per layer
(row ``i`` of a head's matrix: how query ``i`` spreads its attention over the keys), and
returns numbers per head, or a mixing matrix per sentence. They need no model, so they work
for any attention in the course: notebook 04 reads its toy model's heads, notebook 11
all-MiniLM-L6-v2's (:mod:`course_utils.pretrained`).

- head scores: :func:`offset_scores` (previous or next token), :func:`attention_to_scores`
  (a chosen set of keys, e.g. [CLS]), :func:`pair_scores` (chosen query-key pairs);
- :func:`attention_rollout` (Abnar & Zuidema, 2020): attention multiplied through the layers;
- :func:`head_pattern_scores`: one layer's heads scored for previous token, first token and
  self, as notebook 04 reads its toy model. Its "previous" is not ``offset_scores(...,
  offset=-1)``: it leaves out query 1 (whose previous token is also the first) and has no
  padding mask, so the two give different numbers on the same weights.
- :func:`probe_accuracy`: how well a linear classifier reads a label (e.g. the letter at
  one input position) back from hidden states, on held-out examples; notebook 01 probes
  its encoder's final state;
- :func:`stack_attentions`: the per-layer list as one checked tensor.

Attributions (gradients, integrated gradients, occlusion, attention read as one) live in
:mod:`course_utils.attribution`, which builds on these; interventions on heads (removing
one, patching its output) in :mod:`course_utils.circuits`.

Shapes as in the glossary of :mod:`course_utils` (``B`` batch, ``H`` heads, ``L`` tokens,
``R`` the size of a hidden state); ``num_layers`` counts the layers and ``num_examples`` the
examples a probe reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from course_utils._validate import check_positive, check_tensor, check_token_mask

# Attention weights of every layer: one (B, H, L, L) tensor per layer, or them stacked
Attentions = Sequence[torch.Tensor] | torch.Tensor


def stack_attentions(attentions: Attentions) -> torch.Tensor:
    """A list of ``(B, H, L, L)`` per layer -> ``(num_layers, B, H, L, L)``, checked.

    Every function here (and :mod:`course_utils.attribution`) reads attentions through it.

    >>> stack_attentions([torch.rand(2, 4, 3, 3)] * 5).shape
    torch.Size([5, 2, 4, 3, 3])
    """
    if isinstance(attentions, torch.Tensor):
        attentions = list(attentions)
    if not attentions or not all(isinstance(a, torch.Tensor) for a in attentions):
        raise TypeError(
            "attentions must be a non-empty list of (B, H, L, L) tensors, one per layer"
        )
    shapes = {tuple(a.shape) for a in attentions}
    first = attentions[0]
    if len(shapes) != 1 or first.dim() != 4 or first.shape[-1] != first.shape[-2]:
        raise ValueError(
            f"attentions must all be (B, H, L, L) with one shape, got {sorted(shapes)}"
        )
    return torch.stack(list(attentions))


def offset_scores(
    attentions: Attentions, attention_mask: torch.Tensor | None = None, offset: int = -1
) -> torch.Tensor:
    """Per layer and head, the mean weight a token puts on the token ``offset`` places away.

    ``offset=-1``: previous token; ``+1``: next token. Averaged over every real query ``i``
    whose ``i + offset`` is a real token, across the batch. Returns ``(num_layers, H)``.
    :func:`head_pattern_scores` is this score at ``offset=-1`` from ``t = 2`` on (it says why).

    >>> A = torch.eye(4).roll(1, dims=1)[None, None]  # (1, 1, 4, 4): each token -> the next
    >>> offset_scores([A], offset=1), offset_scores([A], offset=-1)
    (tensor([[1.]]), tensor([[0.]]))
    """
    A = stack_attentions(attentions)  # (num_layers, B, H, L, L)
    L = A.shape[-1]
    if not isinstance(offset, int) or offset == 0 or abs(offset) >= L:
        raise ValueError(f"offset must be a nonzero int with |offset| < L = {L}, got {offset!r}")
    if attention_mask is None:
        attention_mask = torch.ones(A.shape[1], L, dtype=torch.bool)
    check_token_mask("attention_mask", attention_mask, (A.shape[1], A.shape[-1]))
    real = attention_mask.to(A.device).bool()
    # weights from i to i + offset: a diagonal of each (L, L) matrix
    diag = A.diagonal(offset=offset, dim1=-2, dim2=-1)  # (num_layers, B, H, L - |offset|)
    if offset > 0:
        pair_ok = real[:, :-offset] & real[:, offset:]  # query i and key i + offset both real
    else:
        pair_ok = real[:, -offset:] & real[:, :offset]
    w = pair_ok[None, :, None, :].to(A.dtype)  # (1, B, 1, L - |offset|)
    return (diag * w).sum((1, 3)) / w.sum((1, 3)).clamp(min=1)  # (num_layers, H)


def attention_to_scores(
    attentions: Attentions, key_mask: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per layer and head, the mean total weight a real query puts on the keys in ``key_mask``.

    ``key_mask (B, L)`` picks keys, e.g. the [CLS] position or the [SEP] position.
    Returns ``(num_layers, H)``.

    >>> A = torch.full((1, 1, 4, 4), 0.25)  # uniform attention over 4 tokens
    >>> attention_to_scores([A], torch.tensor([[True, False, False, False]]))
    tensor([[0.2500]])
    """
    A = stack_attentions(attentions)  # (num_layers, B, H, L, L)
    check_token_mask("key_mask", key_mask, (A.shape[1], A.shape[-1]))
    if attention_mask is not None:
        check_token_mask("attention_mask", attention_mask, (A.shape[1], A.shape[-1]))
    to_keys = (A * key_mask.to(A)[None, :, None, None, :]).sum(-1)  # (num_layers, B, H, L)
    real = torch.ones_like(key_mask) if attention_mask is None else attention_mask
    q = real.to(A)[None, :, None, :]  # (1, B, 1, L)
    return (to_keys * q).sum((1, 3)) / q.sum((1, 3)).clamp(min=1)  # (num_layers, H)


def pair_scores(attentions: Attentions, pairs: Sequence[tuple[int, int, int]]) -> torch.Tensor:
    """Per layer and head, the mean weight from query ``i`` to key ``j`` over ``pairs``.

    ``pairs`` lists ``(batch index, i, j)``, e.g. (sentence, determiner, its noun).
    Returns ``(num_layers, H)``.

    >>> A = torch.eye(3)[None, None]  # each token attends to itself
    >>> pair_scores([A], [(0, 1, 1), (0, 2, 0)])
    tensor([[0.5000]])
    """
    A = stack_attentions(attentions)  # (num_layers, B, H, L, L)
    if len(pairs) == 0:
        raise ValueError("pairs is empty: give at least one (batch index, i, j)")
    B, L = A.shape[1], A.shape[-1]
    for pair in pairs:
        if len(pair) != 3 or not (0 <= pair[0] < B and 0 <= pair[1] < L and 0 <= pair[2] < L):
            raise ValueError(f"pairs must be (batch index < {B}, i < {L}, j < {L}), got {pair}")
    b, i, j = (torch.tensor(c) for c in zip(*pairs, strict=True))
    per_pair = A.permute(1, 3, 4, 0, 2)[b, i, j]  # -> (len(pairs), num_layers, H)
    return per_pair.mean(0)  # (num_layers, H)


def attention_rollout(attentions: Attentions, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each output token draws on each
    input token through all layers.

    Each layer's heads are averaged, the residual connection is added as
    ``residual * I + (1 - residual) * A`` (rows still sum to 1), and the layers are
    multiplied: ``R = A_N ... A_2 A_1``. Returns ``(B, L, L)``; row ``i`` says how token
    ``i`` at the top mixes the input tokens.

    >>> A = torch.tensor([[0.0, 1.0], [0.0, 1.0]])[None, None]  # both tokens read token 1
    >>> attention_rollout([A, A])
    tensor([[[0.2500, 0.7500],
             [0.0000, 1.0000]]])
    """
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must lie in [0, 1], got {residual!r}")
    A = stack_attentions(attentions).mean(2)  # heads averaged: (num_layers, B, L, L)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    rollout = eye.expand_as(A[0])
    for layer in A:  # bottom layer first
        mixed = residual * eye + (1.0 - residual) * layer  # (B, L, L)
        rollout = mixed @ rollout  # (B, L, L) @ (B, L, L): this layer on top of those below
    return rollout


def attention_flow(
    attentions: Attentions,
    residual: float = 0.5,
    attention_mask: torch.Tensor | None = None,
    resolution: int = 2**24,
) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema, 2020): the layers as a flow network, ``(B, L, L)``.

    Node ``(l, t)`` is token ``t`` after layer ``l`` (``l = 0`` the input). Token ``t`` of
    layer ``l`` receives from token ``s`` of layer ``l - 1`` along an edge of capacity
    ``residual * I + (1 - residual) * A_l`` (heads averaged), the matrix rollout multiplies.
    Entry ``[b, i, j]`` is the **maximum flow** from input token ``j`` to token ``i`` of the
    top layer. Where rollout adds up every path's product, flow lets each edge carry at most
    its capacity once, so it is bounded by the network's narrowest cut. Padding tokens
    (``attention_mask`` False) are left out of the network and get 0. Solved with scipy's
    ``maximum_flow`` on capacities rounded to multiples of ``1 / resolution``.

    >>> A = torch.tensor([[1.0, 0.0], [0.5, 0.5]])[None, None]  # one layer: each edge alone
    >>> attention_flow([A], residual=0.0)
    tensor([[[1.0000, 0.0000],
             [0.5000, 0.5000]]])
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must lie in [0, 1], got {residual!r}")
    check_positive("resolution", resolution)
    stacked = stack_attentions(attentions)
    A = stacked.mean(2).double().cpu()  # heads averaged: (num_layers, B, L, L)
    N, B, L = A.shape[0], A.shape[1], A.shape[-1]
    if attention_mask is None:
        attention_mask = torch.ones(B, L, dtype=torch.bool)
    check_token_mask("attention_mask", attention_mask, (A.shape[1], A.shape[-1]))
    eye = torch.eye(L, dtype=A.dtype)
    capacity = residual * eye + (1.0 - residual) * A  # (N, B, L, L): [l, b, to, from]
    flow = torch.zeros(B, L, L, dtype=torch.float64)
    for b in range(B):
        real = attention_mask[b].bool().cpu().nonzero().flatten()  # (n,): the tokens kept
        n = len(real)
        if n == 0:
            continue
        c = capacity[:, b][:, real][:, :, real]  # (N, n, n)
        # edges (l - 1, s) -> (l, t) with node index l * n + t; integer capacities
        layer, to, src = torch.nonzero(c > 0, as_tuple=True)
        weight = (c[layer, to, src] * resolution).round().to(torch.int64)
        graph = csr_matrix(
            (
                weight.numpy().astype("int32"),
                ((layer * n + src).numpy(), ((layer + 1) * n + to).numpy()),
            ),
            shape=((N + 1) * n, (N + 1) * n),
        )
        for t in range(n):
            for s in range(n):
                value = maximum_flow(graph, s, N * n + t).flow_value
                flow[b, real[t], real[s]] = value / resolution
    return flow.to(stacked.dtype)


def head_pattern_scores(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """How much each head looks at the previous token, the first token, and itself.

    ``weights (B, H, L, L)`` -> ``{"previous": (H,), "first": (H,), "self": (H,)}``: the
    mean weight a query at position ``t`` puts on key ``t - 1``, on key ``0`` and on key
    ``t``, over the batch and over ``t = 2 .. L-1`` (at ``t = 1`` the previous token *is*
    the first, so those queries would count for both).

    Its ``"previous"`` is :func:`offset_scores` at ``offset=-1`` with the queries at
    ``t = 1`` left out: one score, two windows. ``offset_scores`` reads padded text (a
    pretrained model's heads, every real query); this one reads the unpadded sequences of
    the toy models, beside the two scores a previous-token score is confused with.

    >>> w = torch.zeros(1, 2, 4, 4)
    >>> t = torch.arange(4)
    >>> w[0, 0, t, (t - 1).clamp(min=0)] = 1.0  # head 0 looks one back
    >>> w[0, 1, :, 0] = 1.0  # head 1 looks at the start
    >>> {k: v.tolist() for k, v in head_pattern_scores(w).items()}
    {'previous': [1.0, 0.0], 'first': [0.0, 1.0], 'self': [0.0, 0.0]}
    >>> w = torch.rand(2, 3, 5, 5).softmax(dim=-1)
    >>> torch.allclose(head_pattern_scores(w)["previous"], offset_scores([w[..., 1:, 1:]])[0])
    True
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
        shape = (
            tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        )
        raise ValueError(f"weights must be (B, H, L, L), got {shape}")
    L = weights.shape[-1]
    if weights.shape[-2] != L or L < 3:
        raise ValueError(
            f"weights must be square (B, H, L, L) with L >= 3, got {tuple(weights.shape)}"
        )
    t = torch.arange(2, L, device=weights.device)
    return {
        "previous": weights[:, :, t, t - 1].mean(dim=(0, 2)),
        "first": weights[:, :, t, 0].mean(dim=(0, 2)),
        "self": weights[:, :, t, t].mean(dim=(0, 2)),
    }


def probe_accuracy(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    steps: int = 200,
    lr: float = 0.1,
) -> torch.Tensor:
    """Fit linear probes on the training examples; return their accuracy on the test examples.

    A probe is multinomial logistic regression, ``softmax(x W + b)`` with ``W (R,
    num_classes)``: it reads a label back from a feature vector ``x`` only if the label is
    *linearly* decodable from it. Labels ``(num_examples,)`` give one probe; labels
    ``(num_examples, P)`` give ``P`` probes on the same features (e.g. the letter at each of
    ``P`` input positions), fitted together: they share no parameter, and each one's loss
    enters the sum alone, so each is fitted as it would be on its own. Labels are ints in
    ``0 .. num_classes - 1``.

    Features ``(num_examples, R)`` are standardised with the training mean and standard
    deviation; ``W`` and ``b`` start at zero and take ``steps`` full-batch Adam steps on the
    mean cross-entropy, so the result is deterministic (no seed). The accuracy is measured
    on the test examples only, which the probes never saw. Returns a scalar tensor for
    labels ``(num_examples,)``, else ``(P,)``.

    >>> x = torch.tensor([[0.0], [1.0], [2.0], [3.0]])  # label 1 exactly when x > 1.5
    >>> y = torch.tensor([0, 0, 1, 1])
    >>> probe_accuracy(x, y, torch.tensor([[0.5], [2.5]]), torch.tensor([0, 1]), num_classes=2)
    tensor(1.)
    """
    check_positive("num_classes", num_classes)
    if num_classes < 2:
        raise ValueError(f"num_classes must be at least 2, got {num_classes}")
    check_positive("steps", steps)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    parts = (("train", train_features, train_labels), ("test", test_features, test_labels))
    for part, x, y in parts:
        check_tensor(f"{part}_features", x, dims=2)
        check_tensor(f"{part}_labels", y)
        if not x.is_floating_point():
            raise TypeError(f"{part}_features must be floating point, got dtype {x.dtype}")
        if y.dtype.is_floating_point or y.dtype == torch.bool:
            raise TypeError(f"{part}_labels must hold integer class ids, got dtype {y.dtype}")
        if y.dim() not in (1, 2) or len(x) != len(y) or len(y) == 0 or y.numel() == 0:
            raise ValueError(
                f"{part}_features (num_examples, R) and {part}_labels (num_examples,) or "
                f"(num_examples, P) must hold the same number (>= 1) of examples, got "
                f"{tuple(x.shape)} and {tuple(y.shape)}"
            )
        if int(y.min()) < 0 or int(y.max()) >= num_classes:
            raise ValueError(
                f"{part}_labels must lie in 0..{num_classes - 1}, got min {int(y.min())} "
                f"and max {int(y.max())}"
            )
    if test_features.shape[1] != train_features.shape[1]:
        raise ValueError(
            f"train_features and test_features must have the same size R, got "
            f"{tuple(train_features.shape)} and {tuple(test_features.shape)}"
        )
    if train_labels.shape[1:] != test_labels.shape[1:]:
        raise ValueError(
            f"train_labels and test_labels must hold the same number of probes, got "
            f"{tuple(train_labels.shape)} and {tuple(test_labels.shape)}"
        )
    one = train_labels.dim() == 1
    y_train = train_labels.reshape(len(train_labels), -1).to(train_features.device)  # (N, P)
    y_test = test_labels.reshape(len(test_labels), -1).to(train_features.device)  # (n, P)
    x_train, x_test = train_features.detach().float(), test_features.detach().float()
    x_test = x_test.to(x_train.device)
    mean, std = x_train.mean(0), x_train.std(0, unbiased=False).clamp(min=1e-6)  # (R,) each
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std  # standardised by train
    N, R = x_train.shape
    P, K = y_train.shape[1], num_classes
    W = torch.zeros(R, P * K, device=x_train.device, requires_grad=True)  # P probes (R, K)
    b = torch.zeros(P * K, device=x_train.device, requires_grad=True)
    optimizer = torch.optim.Adam([W, b], lr=lr)
    with torch.enable_grad():  # also inside a caller's torch.no_grad()
        for _ in range(steps):
            logits = (x_train @ W + b).view(N * P, K)  # (N, R) @ (R, P*K) -> (N*P, K)
            # each probe's mean cross-entropy over the examples, summed over the probes
            loss = F.cross_entropy(logits, y_train.reshape(N * P), reduction="sum") / N
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        predicted = (x_test @ W + b).view(len(x_test), P, K).argmax(-1)  # (n, P)
        accuracy = (predicted == y_test).float().mean(0).cpu()  # (P,)
    return accuracy[0] if one else accuracy
