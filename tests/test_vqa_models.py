"""The VQA models of course_utils.apps.vqa: the question encoder against torch's GRU, the
co-attention block against torch's MultiheadAttention, glimpses that sum to 1, padding that
changes nothing, grounding against a brute-force count, and clear errors."""

import pytest
import torch
from torch import nn

from course_utils.apps import vqa
from course_utils.apps.captioning import ConvEncoder
from course_utils.apps.questions import ANSWERS, grounding_boxes, make_questions, question_vocab
from course_utils.attention import MultiHeadAttention

SIZES = dict(channels=8, d_model=16, emb_dim=8, attn_dim=12, num_heads=2)
KINDS = [("blind", 1), ("mean", 1), ("grid", 1), ("stacked", 1), ("stacked", 2), ("coattention", 1)]


def model(kind, glimpses=1, seed=0):
    torch.manual_seed(seed)
    return vqa.build_model(kind in vqa.ATTENDING, kind, glimpses=glimpses, **SIZES).eval()


@pytest.fixture(scope="module")
def data():
    torch.manual_seed(0)
    return make_questions(12, "train", seed=3).encode(ConvEncoder(SIZES["channels"]))


def test_question_encoder_equals_a_gru_run_on_each_question_alone():
    torch.manual_seed(1)
    enc = vqa.QuestionEncoder(vocab_size=9, emb_dim=5, d_model=7, pad_id=0)
    gru = nn.GRU(5, 7, batch_first=True)
    gru.load_state_dict(enc.rnn.state_dict())
    questions = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0], [2, 0, 0, 0]])
    words, summary, mask = enc(questions)
    for b, n in enumerate([4, 2, 1]):
        alone, h = gru(enc.embedding(questions[b : b + 1, :n]))  # no padding at all
        torch.testing.assert_close(words[b, :n], alone[0])
        torch.testing.assert_close(summary[b], h[0, 0])
        assert torch.all(words[b, n:] == 0) and mask[b].tolist() == [True] * n + [False] * (4 - n)


def test_co_attention_equals_torch_layers_and_masks_padded_words():
    torch.manual_seed(2)
    B, L, P, E, H = 3, 5, 9, 8, 2
    words, regions = torch.randn(B, L, E), torch.randn(B, P, E)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4])
    look_w = nn.MultiheadAttention(E, H, batch_first=True)
    look_r = nn.MultiheadAttention(E, H, batch_first=True)
    block = vqa.CoAttention(E, H)
    block.words_look = MultiHeadAttention.from_torch(look_w)
    block.regions_look = MultiHeadAttention.from_torch(look_r)
    norm_w, norm_r = nn.LayerNorm(E), nn.LayerNorm(E)
    block.norm_words.load_state_dict(norm_w.state_dict())
    block.norm_regions.load_state_dict(norm_r.state_dict())
    got_w, got_r, w2r, r2w = block(words, regions, mask)
    read, ref_w2r = look_w(words, regions, regions, average_attn_weights=False)
    ref_words = norm_w(words + read)
    read, ref_r2w = look_r(
        regions, ref_words, ref_words, key_padding_mask=~mask, average_attn_weights=False
    )
    torch.testing.assert_close(got_w, ref_words)
    torch.testing.assert_close(got_r, norm_r(regions + read))
    torch.testing.assert_close(w2r, ref_w2r)
    torch.testing.assert_close(r2w, ref_r2w)
    assert torch.all(r2w.masked_select(~mask[:, None, None, :].expand_as(r2w)) == 0)
    torch.testing.assert_close(r2w.sum(-1), torch.ones(B, H, P))


@pytest.mark.parametrize("kind, glimpses", KINDS)
def test_glimpses_sum_to_one_over_regions_and_logits_have_every_answer(data, kind, glimpses):
    m = model(kind, glimpses)
    batch = data.batch(list(range(len(data))))
    logits, g, block = m.forward_with_attention(batch.features, batch.questions)
    assert logits.shape == (len(data), len(ANSWERS))
    if kind not in vqa.ATTENDING:
        assert g is None and block is None
        return
    assert g.shape == (len(data), glimpses, batch.features.shape[1])
    torch.testing.assert_close(g.sum(-1), torch.ones(len(data), glimpses))
    assert bool((g >= 0).all())
    assert (block is None) == (kind == "stacked")


@pytest.mark.parametrize("kind, glimpses", KINDS)
def test_padding_a_question_changes_nothing(data, kind, glimpses):
    m = model(kind, glimpses, seed=1)
    batch = data.batch(list(range(len(data))))
    lengths = (batch.questions != question_vocab().pad_id).sum(1)
    short = int(lengths.argmin())
    alone = m.forward_with_attention(batch.features[short : short + 1],
                                     batch.questions[short : short + 1, : lengths[short]])  # fmt: skip
    padded = m.forward_with_attention(batch.features, batch.questions)
    torch.testing.assert_close(alone[0][0], padded[0][short])
    if kind in vqa.ATTENDING:
        torch.testing.assert_close(alone[1][0], padded[1][short])


def test_stacked_glimpses_refine_the_query_as_written():
    """Two glimpses by hand: weights = softmax(v . tanh(W_q u + W_k r_i)), u += context."""
    m = model("stacked", 2, seed=4)
    torch.manual_seed(5)
    features, questions = torch.randn(2, 9, SIZES["channels"]), torch.tensor([[4, 5, 6], [7, 8, 9]])
    logits, g, _ = m.forward_with_attention(features, questions)
    regions = m.embed_regions(features)
    _, u, _ = m.question(questions)
    for k, score in enumerate(m.scores):
        s = score.w_q.weight, score.w_k.weight, score.v.weight[0]
        e = torch.stack([torch.tanh(s[0] @ u[b] + regions[b] @ s[1].T) @ s[2] for b in range(2)])
        weights = torch.softmax(e, dim=-1)  # (B, P)
        torch.testing.assert_close(g[:, k], weights)
        u = u + torch.einsum("bp,bpe->be", weights, regions)
    torch.testing.assert_close(logits, m.classifier(u))


def test_mean_model_sees_only_the_mean_region():
    m = model("mean", seed=6)
    torch.manual_seed(6)
    features, questions = torch.randn(2, 9, SIZES["channels"]), torch.tensor([[4, 5], [6, 7]])
    _, q, _ = m.question(questions)
    mean = m.embed_regions(features).mean(dim=1)  # (B, E)
    torch.testing.assert_close(m(features, questions), m.classifier(torch.cat([mean, q], -1)))
    shuffled = features[:, torch.randperm(9)]  # the same cells in other places
    torch.testing.assert_close(m(features, questions), m(shuffled, questions))  # blind to where
    attending = model("stacked", 1, seed=6)
    assert not torch.allclose(attending(features, questions), attending(shuffled, questions))


def test_blind_model_never_reads_the_image():
    m = model("blind", seed=7)
    torch.manual_seed(7)
    features, questions = torch.randn(2, 36, SIZES["channels"]), torch.tensor([[4, 5], [6, 7]])
    _, q, _ = m.question(questions)
    torch.testing.assert_close(m(features, questions), m.classifier(q))
    torch.testing.assert_close(m(features, questions), m(torch.randn_like(features), questions))


def test_grid_model_flattens_every_cell_in_its_own_slot():
    m = model("grid", seed=8)
    torch.manual_seed(8)
    features, questions = torch.randn(2, 36, SIZES["channels"]), torch.tensor([[4, 5], [6, 7]])
    _, q, _ = m.question(questions)
    regions = m.embed_regions(features)  # (B, P, E)
    cells = [regions[:, p] @ m.squeeze.weight.T + m.squeeze.bias for p in range(36)]  # P x (B, D)
    flat = torch.cat(cells, dim=-1)  # slot p holds cell p's numbers
    torch.testing.assert_close(m(features, questions), m.classifier(torch.cat([flat, q], -1)))
    assert m.classifier[0].in_features == 36 * m.config.cell_dim + SIZES["d_model"]
    swapped = features.clone()
    swapped[:, [0, 35]] = features[:, [35, 0]]  # the same cells, two of them moved
    assert not torch.allclose(m(features, questions), m(swapped, questions))  # it sees where
    with pytest.raises(ValueError, match="reads exactly P = 36 regions"):
        m(features[:, :9], questions)


def cell_centre(cell, G):
    return (cell // G + 0.5) * 48 / G, (cell % G + 0.5) * 48 / G


def inside_any(boxes, y, x):
    return any(t <= y < b and le <= x < r for t, le, b, r in boxes)


def brute_force_grounding(glimpses, data):
    """Walk every question, its peak cell and each supporting box, one by one."""
    G = int(glimpses.shape[-1] ** 0.5)
    hits = chance = counted = 0
    for n, (q, s) in enumerate(zip(data.questions, data.scene_of, strict=True)):
        if not q.support:
            continue
        counted += 1
        boxes = [data.scenes[s].boxes[k] for k in q.support]
        hits += inside_any(boxes, *cell_centre(int(glimpses[n, -1].argmax()), G))
        chance += sum(inside_any(boxes, *cell_centre(c, G)) for c in range(G * G)) / (G * G)
    return hits / counted, chance / counted, counted


def test_grounding_equals_a_brute_force_count(data):
    g = torch.Generator().manual_seed(7)
    for _ in range(3):
        glimpses = torch.softmax(3 * torch.randn(len(data), 2, 36, generator=g), dim=-1)
        got = vqa.grounding(glimpses, data)
        hit, chance, counted = brute_force_grounding(glimpses, data)
        assert got["questions"] == counted
        assert got["grounding"] == pytest.approx(hit) and got["chance"] == pytest.approx(chance)


def test_grounding_counts_a_peak_on_any_supporting_digit(data):
    glimpses, reachable, counted = torch.zeros(len(data), 1, 36), 0, 0
    for n, (q, s) in enumerate(zip(data.questions, data.scene_of, strict=True)):
        boxes = [data.scenes[s].boxes[k] for k in q.support]
        counted += bool(boxes)
        cells = [c for c in range(36) if inside_any(boxes, *cell_centre(c, 6))]
        if cells:  # a box narrower than a cell may hold no cell's centre
            glimpses[n, 0, cells[-1]] = 1.0
            reachable += 1
    assert reachable >= 0.6 * counted
    assert vqa.grounding(glimpses, data)["grounding"] == pytest.approx(reachable / counted)


def brute_force_on(glimpses, data, glimpse, on, templates):
    """The same count with the boxes chosen by hand: the named digit, or the answer's."""
    hits = chance = digits = counted = 0
    for n, (q, s) in enumerate(zip(data.questions, data.scene_of, strict=True)):
        scene = data.scenes[s]
        if q.template not in templates:
            continue
        if on == "named":
            boxes = [scene.boxes[k] for k in q.support if scene.digits[k] == q.digit]
        else:
            words = [ANSWERS[d] for d in scene.digits]
            boxes = [
                scene.boxes[k] for k in q.support if words[k] == q.answer and q.template != "count"
            ]
        if not boxes:
            continue
        counted += 1
        hits += inside_any(boxes, *cell_centre(int(glimpses[n, glimpse].argmax()), 6))
        chance += sum(inside_any(boxes, *cell_centre(c, 6)) for c in range(36)) / 36
        digits += sum(box in boxes for box in scene.boxes) / len(scene.boxes)  # a random digit
    return hits / counted, chance / counted, digits / counted, counted


@pytest.mark.parametrize("on", ["named", "answer"])
@pytest.mark.parametrize("templates", [("left", "right"), ("left", "right", "exists", "largest")])
def test_grounding_on_the_named_digit_or_the_answer_equals_a_brute_force_count(on, templates):
    torch.manual_seed(9)
    data = make_questions(60, "train", seed=4).encode(ConvEncoder(SIZES["channels"]))
    g = torch.Generator().manual_seed(9)
    glimpses = torch.softmax(3 * torch.randn(len(data), 2, 36, generator=g), dim=-1)
    for k in (0, 1):
        got = vqa.grounding(glimpses, data, glimpse=k, on=on, templates=templates)
        hit, chance, digits, counted = brute_force_on(glimpses, data, k, on, templates)
        assert got["questions"] == counted > 0
        assert got["grounding"] == pytest.approx(hit) and got["chance"] == pytest.approx(chance)
        assert got["digit_chance"] == pytest.approx(digits)


def test_grounding_boxes_of_a_relational_question_split_named_and_answer():
    data = make_questions(40, "train", seed=5)
    for q, s in zip(data.questions, data.scene_of, strict=True):
        scene = data.scenes[s]
        named = grounding_boxes(q, scene, "named")
        answer = grounding_boxes(q, scene, "answer")
        if q.template in ("left", "right"):
            k = scene.digits.index(q.digit)
            step = -1 if q.template == "left" else 1
            assert named == [scene.boxes[k]] and answer == [scene.boxes[k + step]]
            assert sorted(named + answer) == sorted(grounding_boxes(q, scene))
        if q.template == "count":
            assert named == answer == []


def test_evaluate_reports_accuracy_per_template_and_grounding(data):
    out = vqa.evaluate(model("stacked", 2), data)
    assert 0 <= out["accuracy"] <= 1 and "grounding" in out and "chance" in out
    templates = {q.template for q in data.questions}
    assert {k for k in out if k.startswith("accuracy_")} == {f"accuracy_{t}" for t in templates}
    assert "grounding" not in vqa.evaluate(model("mean"), data)


def test_splits_follow_the_application_protocol():
    splits = vqa.make_splits(6, 3, 3, 3, seed=1)
    assert list(splits) == ["train", "val", "test", "compositional"]
    assert [len(d) for d in splits.values()] == [6, 3, 3, 3]


def test_bad_input_gets_clear_errors(data):
    with pytest.raises(TypeError, match="attention must be a bool"):
        vqa.build_model("yes")
    with pytest.raises(ValueError, match="contradicts"):
        vqa.build_model(False, "stacked")
    with pytest.raises(ValueError, match="contradicts"):
        vqa.build_model(True, "grid")
    with pytest.raises(ValueError, match="attention must be one of"):
        vqa.build_model(False, "none")
    with pytest.raises(ValueError, match="attention must be one of"):
        vqa.VQAConfig(10, 0, attention="spatial")
    with pytest.raises(ValueError, match="glimpses must be"):
        vqa.VQAConfig(10, 0, glimpses=0)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        vqa.VQAConfig(10, 0, d_model=10, num_heads=4)
    m = model("stacked", 1)
    batch = data.batch([0, 1])
    with pytest.raises(ValueError, match=r"features must be \(B, P, C=8\)"):
        m(batch.features[:, :, :4], batch.questions)
    with pytest.raises(ValueError, match="with B = 2 questions"):
        m(batch.features[:1], batch.questions)
    with pytest.raises(TypeError, match="features must be a torch.Tensor"):
        m(None, batch.questions)
    with pytest.raises(ValueError, match="at least one real word"):
        m(batch.features, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="questions must be"):
        m(batch.features, batch.questions.float())
    with pytest.raises(ValueError, match=r"glimpses must be \(N=12"):
        vqa.grounding(torch.rand(3, 1, 36), data)
    with pytest.raises(ValueError, match="on must be one of"):
        vqa.grounding(torch.rand(12, 1, 36), data, on="box")
    with pytest.raises(ValueError, match="glimpse must index one of K=1"):
        vqa.grounding(torch.rand(12, 1, 36), data, glimpse=1)
    with pytest.raises(ValueError, match="templates must be among"):
        vqa.grounding(torch.rand(12, 1, 36), data, templates=("where",))
    with pytest.raises(TypeError, match="data must be VQAData"):
        vqa.predict(m, [batch])
