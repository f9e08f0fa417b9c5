"""Notebook 08's from-scratch final distribution, coverage loss and decoder step equal the library."""

import pytest
import torch

from course_utils.apps import news
from course_utils.apps import summarisation as sm
from course_utils.attention import masked_softmax

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "08_summarisation.ipynb"


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "masked_softmax": masked_softmax})


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(
        NOTEBOOK, nb, {"final_distribution", "coverage_loss", "decoder_step", "summary_loss"}
    )


@pytest.mark.parametrize("seed", range(4))
def test_final_distribution_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, V, S = 2 + seed, 5 + seed, 3 + 2 * seed
    p_vocab = torch.softmax(torch.randn(B, V, generator=g), -1)
    attention = torch.softmax(torch.randn(B, S, generator=g), -1)
    src_ext = torch.randint(0, V + S, (B, S), generator=g)
    p_gen = torch.rand(B, generator=g)
    ours = nb["final_distribution"](p_vocab, attention, src_ext, p_gen)
    assert torch.allclose(
        ours, sm.final_distribution(p_vocab, attention, src_ext, p_gen), atol=1e-6
    )


@pytest.mark.parametrize("seed", range(3))
def test_coverage_loss_equals_library(nb, seed):
    a = torch.softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(seed)), -1)
    c = torch.cumsum(a, 0) - a
    assert torch.allclose(nb["coverage_loss"](a, c), sm.coverage_loss(a, c))


def _small_model_and_batch(switches, n_reports, seed):
    """A small library model (coverage weights made non-zero) and a batch of val reports."""
    vocab = news.news_vocab(news.make_reports(200, seed=0))
    data = news.NewsData(news.make_reports(n_reports, split="val", seed=seed), vocab)
    torch.manual_seed(0)
    model = sm.build_model(True, vocab, emb_dim=8, rnn_dim=12, attn_dim=10, **switches)
    if switches.get("coverage"):
        torch.nn.init.normal_(model.w_c.weight)
    return vocab, model, news.make_news_batch(data.encoded, vocab)


@pytest.mark.parametrize("switches", [dict(pointer=False), dict(), dict(coverage=True)])
def test_decoder_step_equals_library(nb, switches):
    vocab, model, batch = _small_model_and_batch(switches, 4, seed=1)
    state = model.start(batch)
    token = torch.full((4,), vocab.bos_id)
    with torch.no_grad():
        for _ in range(4):
            log_probs, new_state, _, _, _ = model._step(token, state)
            ours = nb["decoder_step"](model, token, state[0], *state[1:])
            assert torch.allclose(ours[0], log_probs, atol=1e-5)
            assert torch.allclose(ours[1], new_state[0], atol=1e-6)
            state, token = new_state, log_probs.argmax(-1)


@pytest.mark.parametrize(
    ("switches", "weight"), [(dict(pointer=False), 0.0), (dict(), 0.0), (dict(coverage=True), 1.0)]
)
def test_summary_loss_equals_library(nb, switches, weight):
    _, model, batch = _small_model_and_batch(switches, 5, seed=2)
    with torch.no_grad():
        ours = nb["summary_loss"](model, batch, weight)
        assert torch.allclose(ours, sm.summary_loss(model, batch, weight), atol=1e-6)
        # and the coverage term is really in it: another weight gives another loss
        if weight:
            assert not torch.allclose(ours, nb["summary_loss"](model, batch, 0.0))
