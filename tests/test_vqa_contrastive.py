"""The tiny CLIP of course_utils.apps.contrastive: its loss against a loop over the pairs,
retrieval against a brute-force search, unit embeddings, padding that changes nothing."""

import math

import pytest
import torch

from course_utils.apps.contrastive import DualEncoder, clip_loss, pair_batches, retrieval_accuracy


def loop_loss(images, texts, temperature):
    """-log p(own caption | image) and -log p(own image | caption), averaged, one by one."""
    B, total = len(images), 0.0
    for i in range(B):
        sims = [float(images[i] @ texts[j]) / temperature for j in range(B)]
        total += -(sims[i] - math.log(sum(math.exp(s) for s in sims))) / (2 * B)
        sims = [float(images[j] @ texts[i]) / temperature for j in range(B)]
        total += -(sims[i] - math.log(sum(math.exp(s) for s in sims))) / (2 * B)
    return total


@pytest.mark.parametrize("seed", range(3))
def test_clip_loss_equals_a_loop_over_the_pairs(seed):
    g = torch.Generator().manual_seed(seed)
    B, D, t = 3 + seed, 4 + seed, 0.1 + 0.4 * seed
    images = torch.nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
    texts = torch.nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
    assert clip_loss(images, texts, t).item() == pytest.approx(
        loop_loss(images, texts, t), rel=1e-5
    )


def test_clip_loss_is_low_for_matching_pairs_and_high_for_swapped_ones():
    e = torch.eye(5)
    assert clip_loss(e, e, 0.05).item() < 1e-3
    assert clip_loss(e, e[torch.tensor([1, 2, 3, 4, 0])], 0.05).item() > 10


def brute_force_retrieval(images, texts, captions):
    hits = chance = 0
    for i in range(len(texts)):
        sims = [float(texts[i] @ images[j]) for j in range(len(images))]
        best = max(range(len(sims)), key=sims.__getitem__)
        hits += captions[best] == captions[i]
        chance += captions.count(captions[i]) / len(captions)
    return hits / len(texts), chance / len(texts)


def test_retrieval_equals_a_brute_force_search_with_shared_captions():
    g = torch.Generator().manual_seed(4)
    images, texts = torch.randn(12, 5, generator=g), torch.randn(12, 5, generator=g)
    captions = [["one", "and", "two"], ["three"], ["one", "and", "two"], ["four"]] * 3
    got = retrieval_accuracy(images, texts, captions)
    hit, chance = brute_force_retrieval(images, texts, captions)
    assert got["retrieval"] == pytest.approx(hit) and got["chance"] == pytest.approx(chance)
    unit = torch.nn.functional.normalize(images, dim=-1)  # each its own nearest neighbour
    assert retrieval_accuracy(unit, unit, captions)["retrieval"] == 1.0


def test_dual_encoder_gives_unit_vectors_and_ignores_padding():
    torch.manual_seed(0)
    m = DualEncoder(vocab_size=20, pad_id=0, cells=9, channels=4, dim=6).eval()
    features = torch.randn(3, 9, 4)
    torch.testing.assert_close(m.images(features).norm(dim=-1), torch.ones(3))
    captions = torch.tensor([[5, 6, 7], [8, 9, 0]])
    torch.testing.assert_close(m.texts(captions)[1], m.texts(captions[1:, :2])[0])
    moved = features[:, torch.randperm(9, generator=torch.Generator().manual_seed(1))]
    assert not torch.allclose(m.images(features), m.images(moved))  # where things are counts


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="must both be"):
        clip_loss(torch.eye(3), torch.eye(4))
    with pytest.raises(ValueError, match="temperature must be a positive number"):
        clip_loss(torch.eye(3), torch.eye(3), temperature=0)
    with pytest.raises(TypeError, match="images must be a torch.Tensor"):
        clip_loss([[1.0]], torch.eye(1))
    m = DualEncoder(vocab_size=20, pad_id=0, cells=9, channels=4, dim=6)
    with pytest.raises(ValueError, match=r"features must be \(B, P=9, C=4\)"):
        m.images(torch.randn(2, 8, 4))
    with pytest.raises(ValueError, match="N = len"):
        retrieval_accuracy(torch.eye(3), torch.eye(3), ["a", "b"])
    with pytest.raises(ValueError, match="cells must be"):
        DualEncoder(vocab_size=20, pad_id=0, cells=0)


def test_pair_batches_keep_each_scene_with_its_caption():
    features = torch.arange(10.0)[:, None, None].expand(10, 2, 3)  # scene i is filled with i
    captions = [[4 + i] * (1 + i % 3) for i in range(10)]
    batches = pair_batches(features, captions, pad_id=0, batch_size=4, seed=1)
    seen = []
    for _ in range(2):  # one epoch: 10 // 4 full batches
        b = next(batches)
        assert b.features.shape == (4, 2, 3)
        for row in range(4):
            i = int(b.features[row, 0, 0])
            assert b.captions[row, : len(captions[i])].tolist() == captions[i]
            seen.append(i)
    assert len(set(seen)) == 8
    with pytest.raises(ValueError, match="one caption per scene"):
        next(pair_batches(features, captions[:5], 0, 4))
