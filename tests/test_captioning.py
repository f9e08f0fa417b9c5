"""The captioners: attention reads checked against loops written here, the gate, the doubly
stochastic term, teacher forcing equal to step-by-step decoding, beam 1 equal to greedy, the
application protocol, pointing against brute force, and clear errors."""

import pytest
import torch

from course_utils import alignment
from course_utils.apps import captioning as cap
from course_utils.apps.scenes import CaptionData, caption_vocab, make_scenes
from course_utils.attention import AdditiveScore, attend
from course_utils.decoding import beam_search, greedy_decode


@pytest.fixture(scope="module")
def batch():
    return CaptionData(make_scenes(6, seed=0), caption_vocab()).batch(list(range(6)))


def model_of(kind, seed=0):
    torch.manual_seed(seed)
    return cap.build_model(kind in ("spatial", "channel"), kind).eval()


def additive_loop(score, h, keys):
    """v . tanh(W_q h + W_k k) for every key, one key at a time -> (B, N)."""
    B, N = keys.shape[:2]
    out = torch.empty(B, N)
    for b in range(B):
        for n in range(N):
            hidden = torch.tanh(score.w_q.weight @ h[b] + score.w_k.weight @ keys[b, n])
            out[b, n] = score.v.weight[0] @ hidden
    return out


@pytest.mark.parametrize("seed", range(3))
def test_attend_over_the_grid_equals_a_loop_over_cells(seed):
    g = torch.Generator().manual_seed(seed)
    h, f = torch.randn(2, 5, generator=g), torch.randn(2, 9, 4, generator=g)
    torch.manual_seed(seed)
    score = AdditiveScore(5, 4, 3)
    context, weights = attend(h, f, score)
    expected = torch.softmax(additive_loop(score, h, f), dim=-1)  # (B, P)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, torch.einsum("bp,bpc->bc", expected, f))


@pytest.mark.parametrize("seed", range(3))
def test_channel_attend_equals_a_loop_over_channels(seed):
    g = torch.Generator().manual_seed(seed)
    h, f = torch.randn(2, 5, generator=g), torch.randn(2, 9, 4, generator=g)
    torch.manual_seed(seed)
    score = AdditiveScore(5, 9, 3)
    context, weights = cap.channel_attend(h, f, score)
    expected = torch.softmax(additive_loop(score, h, f.transpose(1, 2)), dim=-1)  # (B, C)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, 4 * expected * f.mean(dim=1))
    uniform = torch.full((2, 4), 0.25)  # uniform weights read the plain mean feature
    torch.testing.assert_close(4 * uniform * f.mean(dim=1), f.mean(dim=1))


@pytest.mark.parametrize("kind, last", [("spatial", 36), ("channel", 64)])
def test_weights_sum_to_one_and_the_gate_lies_in_0_1(batch, kind, last):
    logits, weights, betas = model_of(kind).forward_with_attention(batch.images, batch.tgt_in)
    B, T = batch.tgt_in.shape
    assert logits.shape == (B, T, len(caption_vocab())) and weights.shape == (B, T, last)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T))
    assert (weights >= 0).all() and betas.shape == (B, T)
    assert ((betas > 0) & (betas < 1)).all()


def test_the_model_without_attention_reads_the_mean_feature(batch):
    model = model_of("none")
    _, weights, betas = model.forward_with_attention(batch.images, batch.tgt_in)
    assert weights is None and betas is None
    state = model.start(batch)
    context, w, beta = model.look(state[0], state[2])
    torch.testing.assert_close(context, state[2].mean(dim=1))
    assert w is None and beta is None


def test_the_grid_baseline_reads_every_cell_in_place_without_attention(batch):
    model = model_of("grid")
    _, weights, betas = model.forward_with_attention(batch.images, batch.tgt_in)
    assert weights is None and betas is None
    h, _, features = model.start(batch)
    context, _, _ = model.look(h, features)
    B, P, C = features.shape
    W = model.flat.weight.view(C, P, C)  # (out, cell, channel)
    expected = torch.einsum("opc,bpc->bo", W, features) + model.flat.bias
    torch.testing.assert_close(context, expected)
    # the same features in other cells: the mean cannot tell, the grid baseline can
    moved = features.roll(1, dims=1)
    torch.testing.assert_close(moved.mean(dim=1), features.mean(dim=1))
    assert not torch.allclose(model.look(h, moved)[0], context)


def test_doubly_stochastic_penalty_by_hand_and_by_loop():
    w = torch.tensor([[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6]]])  # (1, 3, 3)
    mask = torch.tensor([[True, True, False]])  # the third step is padding
    # cells receive 0.5, 1.25 and 0.25: (0.5)^2 + (0.25)^2 + (0.75)^2 = 0.875
    torch.testing.assert_close(cap.doubly_stochastic_penalty(w, mask), torch.tensor([0.875]))
    g = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(3, 4, 5, generator=g), dim=-1)
    mask = torch.rand(3, 4, generator=g) > 0.3
    expected = torch.zeros(3)
    for b in range(3):
        for i in range(5):
            received = sum(float(w[b, t, i]) for t in range(4) if mask[b, t])
            expected[b] += (1 - received) ** 2
    torch.testing.assert_close(cap.doubly_stochastic_penalty(w, mask), expected)


def test_loss_adds_the_penalty_only_for_spatial_attention(batch):
    for kind in cap.KINDS:
        model = model_of(kind)
        plain, with_term = cap.caption_loss(model, batch), cap.caption_loss(model, batch, lam=1.0)
        if kind == "spatial":
            _, w, _ = model.forward_with_attention(batch.images, batch.tgt_in)
            term = cap.doubly_stochastic_penalty(w, batch.tgt_out != model.pad_id).mean()
            torch.testing.assert_close(with_term - plain, term)
        else:
            assert with_term == plain


@pytest.mark.parametrize("kind", cap.KINDS)
def test_teacher_forcing_equals_stepping(batch, kind):
    model = model_of(kind)
    logits, weights, _ = model.forward_with_attention(batch.images, batch.tgt_in)
    state = model.start(batch)
    for t in range(batch.tgt_in.shape[1]):
        log_probs, state, w = model.step(batch.tgt_in[:, t], state)
        torch.testing.assert_close(log_probs, logits[:, t].log_softmax(-1))
        if weights is not None:
            torch.testing.assert_close(w, weights[:, t])


@pytest.mark.parametrize("kind", cap.KINDS)
def test_beam_of_one_is_greedy(batch, kind):
    model = model_of(kind, seed=1)
    greedy, beam = greedy_decode(model, batch, 12), beam_search(model, batch, 12, beam_size=1)
    assert torch.equal(greedy.ids, beam.ids)
    torch.testing.assert_close(greedy.scores, beam.scores)


def test_encoder_gives_a_grid_of_cells():
    features = cap.ConvEncoder(channels=8)(torch.rand(2, 1, 48, 32))
    assert features.shape == (2, 6 * 4, 8)


@pytest.mark.parametrize(
    "images, match",
    [(torch.rand(2, 48, 48), "4 dims"), (torch.rand(2, 3, 48, 48), r"\(2, 3, 48, 48\)")],
)
def test_wrong_image_shapes_are_named(images, match):
    with pytest.raises(ValueError, match=match):
        cap.ConvEncoder()(images)


def test_bad_captions_and_arguments_are_named(batch):
    model = model_of("spatial")
    with pytest.raises(ValueError, match="T >= 1"):
        model.forward_with_attention(batch.images, batch.tgt_in[:, :0])
    with pytest.raises(ValueError, match="same batch size"):
        model.forward_with_attention(batch.images[:2], batch.tgt_in)
    with pytest.raises(TypeError, match="attention must be a bool"):
        cap.build_model("yes")
    with pytest.raises(ValueError, match="contradicts"):
        cap.build_model(False, "spatial")
    with pytest.raises(ValueError, match="attention must be one of"):
        cap.CaptionConfig.from_vocab(caption_vocab(), attention="global")
    with pytest.raises(ValueError, match="multiple of 8"):
        cap.CaptionConfig.from_vocab(caption_vocab(), image_size=50)
    with pytest.raises(ValueError, match="step_mask"):
        cap.doubly_stochastic_penalty(torch.rand(2, 3, 4), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="pointing needs spatial"):
        cap.pointing(model_of("none"), CaptionData(make_scenes(2, seed=0), caption_vocab()))


def test_make_splits_share_no_digit_image_and_evaluate_reports_every_measure():
    splits = cap.make_splits(30, 10, 10, seed=1)
    train = {i for s in splits["train"].scenes for i in s.sources}
    test = {i for s in splits["test"].scenes for i in s.sources}
    assert not train & test
    scores = cap.evaluate(model_of("spatial"), splits["test"])
    assert set(scores) == {"bleu", "exact_match", "pointing", "chance"}
    assert 0 <= scores["exact_match"] <= 1 and 0 <= scores["pointing"] <= 1
    assert set(cap.evaluate(model_of("channel"), splits["test"])) == {"bleu", "exact_match"}
    with pytest.raises(TypeError, match="CaptionData"):
        cap.evaluate(model_of("none"), splits["test"].scenes)


# ---------------------------------------------------------------------------------------
# Pointing: peaks against boxes
# ---------------------------------------------------------------------------------------
def brute_force_hit(w, box, size):
    G = w.shape[0]
    r, c = divmod(int(w.argmax()), G)
    y, x = (r + 0.5) * size[0] / G, (c + 0.5) * size[1] / G
    top, left, bottom, right = box
    return top <= y < bottom and left <= x < right


@pytest.mark.parametrize("seed", range(3))
def test_region_hits_and_chance_equal_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    G, size = 6, (48, 40)
    w = torch.rand(20, G, G, generator=g)
    boxes = []
    for _ in range(20):
        top, left = torch.randint(0, 30, (2,), generator=g).tolist()
        boxes.append((top, left, top + 4 + seed * 5, left + 6 + seed * 4))
    hits = alignment.region_hits(w, boxes, size)
    assert hits.tolist() == [brute_force_hit(w[n], boxes[n], size) for n in range(20)]
    chance = alignment.region_chance(boxes, G, size)
    for n, box in enumerate(boxes):
        share = sum(
            brute_force_hit(torch.eye(G * G)[k].reshape(G, G), box, size) for k in range(G * G)
        ) / (G * G)
        assert chance[n].item() == pytest.approx(share)


def test_pointing_counts_only_digit_words():
    data = CaptionData(make_scenes(8, seed=2), caption_vocab())
    scores = cap.pointing(model_of("spatial"), data)
    boxes = [s.boxes[d] for s in data.scenes for d in s.word_digit if d >= 0]
    expected = alignment.region_chance(boxes, 6, (48, 48)).mean().item()
    assert scores["chance"] == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"boxes must hold 2"):
        alignment.region_hits(torch.rand(2, 3, 3), [(0, 0, 1, 1)], (6, 6))


def test_overlay_draws_one_titled_panel_per_word_and_checks_shapes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.plotting import plot_attention_overlay

    weights = torch.softmax(torch.randn(3, 36), dim=-1).reshape(3, 6, 6)
    fig = plot_attention_overlay(
        torch.rand(48, 48), weights, ["one", "and", "two"], [(0, 0, 8, 8), None, (8, 8, 20, 20)]
    )
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split("  ")[0] for ax in titled] == ["1. one", "2. and", "3. two"]
    assert sum(len(ax.patches) for ax in titled) == 2  # a frame for each word with a box
    assert fig._suptitle.get_text()
    plt.close(fig)
    with pytest.raises(ValueError, match="T = len\\(words\\) = 2"):
        plot_attention_overlay(torch.rand(48, 48), weights, ["one", "two"])
    with pytest.raises(ValueError, match="image must be"):
        plot_attention_overlay(torch.rand(1, 48, 48), weights, ["a", "b", "c"])
