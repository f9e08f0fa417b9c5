"""apps.memory: the soft read against softmax(q K^T) V worked by hand and against
scaled_dot_product_attention, gradients into keys and values, the hard read, the capacity
formula against measurement, associative recall data, and the memory network's hops."""

import math

import pytest
import torch

from course_utils.apps import memory
from course_utils.apps.stories import StoryData, make_stories, story_vocab
from course_utils.attention import scaled_dot_product_attention


def test_soft_read_on_a_hand_worked_case():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    values = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    read, weights = memory.memory_read(torch.tensor([2.0, 0.0]), keys, values)
    e = torch.tensor([math.exp(2), 1.0, math.exp(2)])  # scores 2, 0, 2
    torch.testing.assert_close(weights, e / e.sum())
    torch.testing.assert_close(read, (e / e.sum()) @ values)


@pytest.mark.parametrize("seed", range(3))
def test_soft_read_equals_attention_with_one_query(seed):
    g = torch.Generator().manual_seed(seed)
    B, N, D, Dv = 3, 5 + seed, 4, 6
    q, k, v = (
        torch.randn(B, D, generator=g),
        torch.randn(B, N, D, generator=g),
        torch.randn(B, N, Dv, generator=g),
    )
    beta = 0.7 + seed
    read, weights = memory.memory_read(q, k, v, beta)
    # SDPA divides by sqrt(D): give it beta * sqrt(D) * q to get beta q K^T
    out, w = scaled_dot_product_attention((beta * math.sqrt(D) * q).unsqueeze(1), k, v)
    torch.testing.assert_close(read, out.squeeze(1))
    torch.testing.assert_close(weights, w.squeeze(1))


def test_gradients_reach_keys_and_values_through_the_soft_read_only():
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(4, 3, generator=g, requires_grad=True)
    values = torch.randn(4, 2, generator=g, requires_grad=True)
    query = torch.randn(3, generator=g)
    memory.memory_read(query, keys, values)[0].sum().backward()
    assert keys.grad.abs().sum() > 0 and values.grad.abs().sum() > 0
    keys.grad, values.grad = None, None
    hard = memory.hard_read(query, keys, values)[0]
    hard.sum().backward()
    assert keys.grad is None  # argmax cuts the path to the keys
    assert values.grad.abs().sum() == 1 * values.shape[1]  # only the chosen row gets 1s


def random_memory(seed, batch, slots, key_dim, value_dim):
    """Queries ``(batch, key_dim)``, keys ``(batch, slots, key_dim)`` and values ``(batch,
    slots, value_dim)``, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, key_dim, generator=g),
        torch.randn(batch, slots, key_dim, generator=g),
        torch.randn(batch, slots, value_dim, generator=g),
    )


def test_hard_read_is_the_value_of_the_best_key_and_the_soft_limit():
    q, k, v = random_memory(seed=1, batch=5, slots=7, key_dim=4, value_dim=3)
    read, weights = memory.hard_read(q, k, v)
    for b in range(5):
        best = max(range(7), key=lambda i: float(k[b, i] @ q[b]))
        torch.testing.assert_close(read[b], v[b, best])
        assert weights[b, best] == 1 and weights[b].sum() == 1
    torch.testing.assert_close(memory.memory_read(q, k, v, beta=1e4)[0], read)


@pytest.mark.parametrize("num_pairs, key_dim", [(16, 64), (128, 64), (512, 256)])
def test_measured_weight_matches_the_closed_form(num_pairs, key_dim):
    measured = memory.read_recall(num_pairs, key_dim, beta=5.0, trials=400)["weight"]
    assert abs(measured - memory.predicted_weight(num_pairs, key_dim, 5.0)) < 0.03


def test_read_recall_against_a_loop():
    out = memory.read_recall(6, 5, beta=2.0, trials=30, seed=4)
    g = torch.Generator().manual_seed(4)
    keys = torch.nn.functional.normalize(torch.randn(30, 6, 5, generator=g), dim=-1)
    values = torch.randn(30, 6, 5, generator=g)
    pick = torch.randint(6, (30,), generator=g)
    weights, hits = [], 0
    for t in range(30):
        w = torch.softmax(2.0 * keys[t] @ keys[t, pick[t]], 0)
        weights.append(float(w[pick[t]]))
        cos = [float(torch.cosine_similarity(w @ values[t], values[t, i], 0)) for i in range(6)]
        hits += max(range(6), key=cos.__getitem__) == int(pick[t])
    assert abs(out["weight"] - sum(weights) / 30) < 1e-6
    assert out["recall"] == pytest.approx(hits / 30) and 0 < hits < 30


def test_linear_read_is_the_sum_of_values_weighted_by_raw_matches():
    q, k, v = random_memory(seed=5, batch=4, slots=9, key_dim=6, value_dim=3)
    g = torch.Generator().manual_seed(5)
    expected = torch.stack(
        [sum(float(k[b, i] @ q[b]) * v[b, i] for i in range(9)) for b in range(4)]
    )
    torch.testing.assert_close(memory.linear_read(q, k, v), expected, atol=1e-5, rtol=1e-5)
    # orthonormal keys (N <= D): the read returns the queried value exactly
    keys = torch.linalg.qr(torch.randn(8, 8, generator=g))[0][:5]  # (5, 8), orthonormal rows
    torch.testing.assert_close(
        memory.linear_read(keys[2], keys, v[0, :5]), v[0, 2], atol=1e-5, rtol=1e-5
    )
    with pytest.raises(ValueError):
        memory.linear_read(q, k, v[:, :8])  # 9 keys, 8 values


def test_linear_recall_against_a_loop_on_read_recalls_memories():
    out = memory.linear_recall(7, 5, trials=40, seed=6)
    g = torch.Generator().manual_seed(6)  # the draws of read_recall
    keys = torch.nn.functional.normalize(torch.randn(40, 7, 5, generator=g), dim=-1)
    values = torch.randn(40, 7, 5, generator=g)
    pick = torch.randint(7, (40,), generator=g)
    hits = 0
    for t in range(40):
        read = sum(float(keys[t, i] @ keys[t, pick[t]]) * values[t, i] for i in range(7))
        cos = [float(torch.cosine_similarity(read, values[t, i], 0)) for i in range(7)]
        hits += max(range(7), key=cos.__getitem__) == int(pick[t])
    assert out == pytest.approx(hits / 40) and 0 < hits < 40
    assert memory.linear_recall(4, 256, trials=50) == 1.0  # nearly orthogonal keys: exact enough


def test_recall_data_and_models():
    b = memory.make_recall(50, 5, seed=2)
    assert all(len(set(row.tolist())) == 5 for row in b.keys)  # distinct keys
    rows = torch.arange(50)
    assert torch.equal(b.keys[rows, b.position], b.query)
    assert torch.equal(b.values[rows, b.position], b.answer)
    for model in (memory.RecallAttention(), memory.RecallGRU()):
        logits, weights = model(b)
        assert logits.shape == (50, 16)
    assert weights is None
    assert memory.RecallAttention()(b)[1].shape == (50, 5)
    batches = memory.recall_batches(8, (2, 4), seed=0)
    assert {next(batches).keys.shape[1] for _ in range(30)} == {2, 3, 4}


def test_position_encoding_formula():
    pe = memory.position_encoding(5, 4)
    J, d = 5, 4
    for j in range(1, J + 1):
        for k in range(1, d + 1):
            assert abs(pe[j - 1, k - 1] - ((1 - j / J) - (k / d) * (1 - 2 * j / J))) < 1e-6


def _stories():
    return StoryData(make_stories(8, "test", seed=0), story_vocab())


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_memnet_hops_weights_and_a_loop(hops):
    torch.manual_seed(hops)
    model = memory.build_model(True, hops=hops).eval()
    data = _stories()
    batch = data.batch(list(range(len(data))))
    logits, weights = model.forward_with_attention(batch)
    assert logits.shape == (8, len(story_vocab())) and weights.shape == (8, hops, 10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(8, hops))
    assert (weights[~batch.story_mask.unsqueeze(1).expand_as(weights)] == 0).all()
    for n, s in enumerate(data.stories):  # one story at a time, sentence by sentence
        M = len(s.sentences)

        def embed(k, words, age):
            e = sum(model.pe[j] * model.embed[k].weight[w] for j, w in enumerate(words))
            return e + (model.temporal[k].weight[age] if age is not None else 0)

        u = embed(0, story_vocab().encode(s.question), None)
        for k in range(1, hops + 1):
            ids = [story_vocab().encode(x) for x in s.sentences]
            m = torch.stack([embed(k - 1, w, M - 1 - i) for i, w in enumerate(ids)])
            c = torch.stack([embed(k, w, M - 1 - i) for i, w in enumerate(ids)])
            p = torch.softmax(m @ u, 0)
            torch.testing.assert_close(p, weights[n, k - 1, :M], atol=1e-5, rtol=1e-4)
            u = u + p @ c
        torch.testing.assert_close(model.out(u), logits[n], atol=1e-5, rtol=1e-4)


def test_memnet_without_attention_reads_the_mean():
    data = _stories()
    _, weights = memory.build_model(False, hops=2).forward_with_attention(data.batch([0, 1]))
    n = data.story_mask[:2].sum(-1, keepdim=True)
    torch.testing.assert_close(weights[:, 0], data.story_mask[:2] / n)


def test_support_hits_on_made_up_weights():
    data = _stories()
    N, M = len(data), 10
    weights = torch.zeros(N, 2, M)
    for n, s in enumerate(data.stories):
        if s.kind == "two-fact":
            weights[n, 0, s.supporting[0]] = weights[n, 1, s.supporting[1]] = 1
    hits = memory.support_hits(weights, data)
    assert hits["hop1"] == 1 and hits["hop2"] == 1
    two = [s for s in data.stories if s.kind == "two-fact"]
    assert abs(hits["chance"] - sum(1 / len(s.sentences) for s in two) / len(two)) < 1e-9
    assert memory.support_hits(weights.flip(1), data)["hop1"] < 1


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="query and key"):
        memory.memory_read(torch.randn(3), torch.randn(4, 2), torch.randn(4, 2))
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        memory.hard_read([1.0], torch.randn(4, 2), torch.randn(4, 2))
    with pytest.raises(ValueError, match="num_pairs"):
        memory.make_recall(2, 20, n_keys=16)
    with pytest.raises(TypeError, match="attention must be a bool"):
        memory.build_model("yes")
    with pytest.raises(ValueError, match="hops must be positive"):
        memory.build_model(True, hops=0)
    with pytest.raises(TypeError, match="data must be StoryData"):
        memory.evaluate(memory.build_model(True), [])
    with pytest.raises(ValueError, match="2 or more hops"):
        memory.support_hits(torch.zeros(8, 1, 10), _stories())
