"""Plot helpers return labelled figures; widgets recompute when a control changes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils import plotting, widgets


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_attention_labels_both_axes():
    w = torch.softmax(torch.randn(3, 4), -1)
    fig = plotting.plot_attention(w, x_labels=list("abcd"), y_labels=list("xyz"), title="toy")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    assert ax.get_title() == "toy" and ax.get_xlabel() and ax.get_ylabel()
    np.testing.assert_allclose(ax.collections[0].get_array().reshape(3, 4), w.numpy(), rtol=1e-6)


def test_plot_attention_rejects_wrong_labels_and_shapes():
    with pytest.raises(ValueError, match="x_labels has 3 labels for 4 positions"):
        plotting.plot_attention(np.ones((2, 4)), x_labels=list("abc"))
    with pytest.raises(ValueError, match=r"2-D.*\(2, 3, 4\)"):
        plotting.plot_attention(np.ones((2, 3, 4)))


def test_to_numpy_takes_tensors_with_gradients_arrays_and_lists():
    x = torch.tensor([[0.25, 0.75]], requires_grad=True) * 1.0  # not a leaf: needs detach
    got = plotting.to_numpy(x)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, [[0.25, 0.75]])
    half = plotting.to_numpy(torch.tensor([1, 3], dtype=torch.float16))
    assert half.dtype == np.float32  # NumPy and matplotlib handle float32, not every dtype
    assert plotting.to_numpy([1, 2]).dtype == np.float64
    assert plotting.to_numpy(np.eye(2, dtype=np.int64)).dtype == np.float64


def test_plot_helpers_leave_global_settings_alone():
    before = dict(matplotlib.rcParams)
    plotting.plot_attention(np.eye(3))
    plotting.plot_history({"step": [1, 2], "train_loss": [2.0, 1.0], "acc": [0.1, 0.5]})
    plotting.plot_accuracy_by_length({"m": {4: 1.0, 5: 0.5}}, train_lengths=range(4, 6))
    assert dict(matplotlib.rcParams) == before


def test_plot_history_and_accuracy_by_length_are_labelled():
    fig = plotting.plot_history(
        {"step": [1, 2], "train_loss": [2.0, 1.0], "acc": [0.1, 0.5]}, title="run"
    )
    assert len(fig.axes) == 2 and all(ax.get_title() and ax.get_xlabel() for ax in fig.axes)
    fig = plotting.plot_accuracy_by_length({"small": {4: 1.0, 8: 0.2}, "big": {4: 1.0, 8: 0.9}})
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["small", "big"]
    assert list(ax.get_lines()[1].get_ydata()) == [1.0, 0.9]
    with pytest.raises(ValueError, match="history needs"):
        plotting.plot_history({"loss": [1.0]})


def test_heatmap_explorer_recomputes_when_a_control_moves():
    scores = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.5, 3.0]])
    calls = []

    def compute(temperature):
        calls.append(temperature)
        return torch.softmax(scores / temperature, -1)

    explorer = widgets.heatmap_explorer(
        compute, list("abc"), ["q1", "q2"], temperature=(0.1, 5.0, 0.1)
    )
    slider = explorer.children[0]
    slider.value = 0.2
    sharp = explorer.result
    slider.value = 5.0
    flat = explorer.result
    assert calls[-2:] == [0.2, 5.0]
    np.testing.assert_allclose(sharp, torch.softmax(scores / 0.2, -1).numpy(), rtol=1e-6)
    assert sharp.max() > flat.max()  # a low temperature sharpens attention
    assert not plt.get_fignums()  # each redraw closes its figure


def test_heatmap_explorer_labels_may_change_with_the_controls():
    def compute(n):
        return np.full((1, n), 1.0 / n), [f"k{i}" for i in range(n)], ["q"]

    explorer = widgets.heatmap_explorer(compute, n=[2, 3, 4], title=lambda n: f"{n} keys")
    explorer.children[0].value = 4
    assert explorer.result.shape == (1, 4)
    with pytest.raises(ValueError, match="at least one control"):
        widgets.heatmap_explorer(lambda: np.eye(2))


@pytest.fixture
def drawn(monkeypatch):
    """What each redraw shows: the title and the heatmap's values of every displayed figure."""
    shown = []

    def record(fig):
        ax = fig.axes[0]
        shown.append((ax.get_title(), np.asarray(ax.collections[0].get_array())))

    monkeypatch.setattr(widgets, "display", record)
    return shown


def test_heatmap_explorer_dropdown_and_checkbox_redraw_what_they_show(drawn):
    """Notebook 02's d_k explorer: a dropdown and a checkbox, each redraws once per change."""
    import ipywidgets

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 64, generator=g), torch.randn(5, 64, generator=g)

    def compute(d_k, scaled):
        scores = q[:, :d_k] @ k[:, :d_k].T  # (3, d_k) @ (d_k, 5) -> (3, 5)
        return torch.softmax(scores / (d_k**0.5 if scaled else 1.0), -1)

    explorer = widgets.heatmap_explorer(
        compute, title=lambda d_k, scaled: f"d_k={d_k} scaled={scaled}", d_k=[4, 64], scaled=False
    )
    dropdown, checkbox = explorer.children[:2]
    assert isinstance(dropdown, ipywidgets.Dropdown) and isinstance(checkbox, ipywidgets.Checkbox)
    assert [t for t, _ in drawn] == ["d_k=4 scaled=False"]  # drawn once when built

    dropdown.value = 64
    checkbox.value = True
    assert [t for t, _ in drawn] == [
        "d_k=4 scaled=False",
        "d_k=64 scaled=False",
        "d_k=64 scaled=True",
    ]
    reference = torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], torch.eye(5)[None]
    )[0]  # attention to one-hot values returns the weights themselves
    np.testing.assert_allclose(explorer.result, reference.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(drawn[-1][1].reshape(3, 5), explorer.result, rtol=1e-6)
    # scaling by sqrt(64) = 8 flattens the rows
    assert drawn[-1][1].max() < drawn[-2][1].max()


def test_heatmap_explorer_slider_value_reaches_title_and_heatmap(drawn):
    """Moving the slider redraws once, with the new value in the title and in the weights."""
    scores = torch.tensor([[3.0, 0.0, -1.0]])
    explorer = widgets.heatmap_explorer(
        lambda t: torch.softmax(scores / t, -1),
        title=lambda t: f"T = {t:.2f}",
        t=(0.1, 5.0, 0.1),
    )
    slider = explorer.children[0]
    n = len(drawn)
    slider.value = 0.5
    assert len(drawn) == n + 1
    title, heat = drawn[-1]
    assert title == "T = 0.50"
    np.testing.assert_allclose(heat.ravel(), torch.softmax(scores / 0.5, -1).numpy()[0], rtol=1e-6)
    slider.value = 0.5  # no change, no redraw
    assert len(drawn) == n + 1


def test_explorer_sliders_redraw_on_release_so_page_and_kernel_agree():
    """A slider set from code while the page builds the widget must not be reset by the page."""
    explorer = widgets.heatmap_explorer(lambda t: np.eye(2) * t, t=(0.1, 1.0, 0.1))
    assert explorer.children[0].continuous_update is False
    assert explorer.children[0].style.description_width == "initial"  # labels not cut off


def test_plot_attention_draws_one_mesh_without_drawing_the_figure(monkeypatch):
    # seaborn.heatmap drew the whole figure on every call (to test tick labels for overlap),
    # which made a three-panel figure of 30 x 30 maps take seconds; one pcolormesh does not.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    draws = []
    monkeypatch.setattr(FigureCanvasAgg, "draw", lambda canvas: draws.append(canvas))
    w = np.array([[0.9, 0.1], [0.3, 0.7]])
    fig = plotting.plot_attention(w, x_labels=["a", "b"], y_labels=["x", "y"], annot=True)
    ax = fig.axes[0]
    assert draws == []
    mesh = ax.collections[0]
    assert mesh.colorbar is not None and mesh.colorbar.ax.get_ylabel() == "attention weight"
    assert ax.get_ylim() == (2.0, 0.0)  # row 0 (query "x") on top, as seaborn draws it
    assert list(ax.get_xticks()) == [0.5, 1.5]
    assert [t.get_text() for t in ax.texts] == ["0.90", "0.10", "0.30", "0.70"]
    # a number on a dark cell is white, on a light cell black
    assert [t.get_color() for t in ax.texts] == ["white", "black", "black", "white"]


def test_model_view_labels_outer_panels_and_shares_one_colour_bar():
    tokens = ["[CLS]", "a", "cat", "sat", "[SEP]"]
    A = torch.softmax(torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0)), -1)
    fig = plotting.plot_model_view(A, tokens)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * 3
    grid = [panels[0:3], panels[3:6]]  # row by row: layers down, heads across
    for n, row in enumerate(grid):
        for h, ax in enumerate(row):
            keys = [t.get_text() for t in ax.get_xticklabels()]
            queries = [t.get_text() for t in ax.get_yticklabels()]
            assert keys == (tokens if n == 1 else [])  # keys under the bottom row only
            assert queries == (tokens if h == 0 else [])  # queries left of the first column
    sizes = {t.get_fontsize() for t in grid[1][0].get_xticklabels()}
    assert min(sizes) >= 7  # readable
    # one colour bar, shared: every panel maps 0..1 with the same colours
    bars = [im.colorbar for ax in panels for im in ax.images if im.colorbar is not None]
    assert len(bars) == 1 and bars[0].ax.get_ylabel() == "attention weight"
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, 1.0)}
    plt.close(fig)
    # too many tokens for one label each: every k-th token is labelled, still readable
    many = [f"t{i}" for i in range(40)]
    fig = plotting.plot_model_view(torch.full((1, 2, 40, 40), 1 / 40), many)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    stride = 40 // len(labels) if labels else 0
    assert 1 < len(labels) < 40 and labels == many[::stride]
    assert min(t.get_fontsize() for t in fig.axes[0].get_xticklabels()) >= 7
    plt.close(fig)
    # 12 tokens, as notebook 11's sentences: every second one, not all at 5 points
    twelve = [f"w{i}" for i in range(12)]
    fig = plotting.plot_model_view(torch.full((1, 2, 12, 12), 1 / 12), twelve)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == twelve[::2]
    assert min(t.get_fontsize() for t in fig.axes[0].get_xticklabels()) >= 7
