"""Interactive attention heatmaps: move a control, the weights are recomputed and redrawn.

Nothing here trains: a widget only calls the ``compute`` function you give it (a forward
pass, a softmax at a new temperature, ...) and draws what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from course_utils.plotting import plot_attention, to_numpy


def heatmap_explorer(
    compute: Callable[..., object],
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str | Callable[..., str] | None = None,
    xlabel: str = "key position",
    ylabel: str = "query position",
    vmax: float | None = 1.0,
    colorbar_label: str = "attention weight",
    **controls,
) -> widgets.interactive:
    """An ``ipywidgets.interactive`` that redraws ``compute(**values)`` as a heatmap.

    ``compute`` receives the current value of every control by name and returns either a
    ``(Lq, Lk)`` weight matrix, or a tuple ``(weights, x_labels, y_labels)`` when the labels
    change with the controls. ``controls`` are ipywidgets controls or the abbreviations
    ``interactive`` accepts (``(0.1, 5.0, 0.1)`` for a float slider, a list for a dropdown).
    ``title`` may be a function of the same values; ``colorbar_label`` names what the
    colours measure.

    The returned object's ``.result`` holds the last weights as a NumPy array, so a test (or
    a learner) can set ``explorer.children[i].value`` and read what was drawn::

        explorer = heatmap_explorer(lambda t: softmax(scores / t), t=(0.1, 5.0, 0.1))
        display(explorer)
    """
    if not controls:
        raise ValueError(
            "heatmap_explorer needs at least one control, e.g. temperature=(0.1, 5, 0.1)"
        )

    def draw(**values):
        out = compute(**values)
        xl, yl = x_labels, y_labels
        if isinstance(out, tuple):
            out, xl, yl = out
        weights = to_numpy(out)
        text = title(**values) if callable(title) else title
        fig = plot_attention(
            weights,
            xl,
            yl,
            title=text,
            xlabel=xlabel,
            ylabel=ylabel,
            vmax=vmax,
            colorbar_label=colorbar_label,
        )
        display(fig)
        plt.close(fig)  # shown once in the widget's output, never again at the cell's end
        return weights

    explorer = widgets.interactive(draw, **controls)
    for control in explorer.children[:-1]:
        if hasattr(control, "style") and hasattr(control.style, "description_width"):
            control.style.description_width = "initial"  # "temperature", not "temperat..."
        if hasattr(control, "continuous_update"):
            # Redraw when the learner lets go of a slider, not at every step of a drag. This
            # also stops the page from sending a slider's first value back to the kernel when
            # a later cell sets it from code while the page is still creating the widget,
            # which would leave the slider showing one value and the heatmap another.
            control.continuous_update = False
    return explorer


def figure_explorer(make_figure: Callable[..., object], **controls) -> widgets.interactive:
    """An ``ipywidgets.interactive`` that shows ``make_figure(**values)``, a matplotlib figure.

    Like :func:`heatmap_explorer` (controls redraw on release, labels at full width) for any
    figure, e.g. :func:`course_utils.plotting.plot_head_view`. The figure is shown once in
    the widget's output and closed.
    """
    if not controls:
        raise ValueError("figure_explorer needs at least one control, e.g. layer=(1, 6)")

    def draw(**values):
        fig = make_figure(**values)
        display(fig)
        plt.close(fig)

    explorer = widgets.interactive(draw, **controls)
    for control in explorer.children[:-1]:
        if hasattr(control, "style") and hasattr(control.style, "description_width"):
            control.style.description_width = "initial"
        if hasattr(control, "continuous_update"):
            control.continuous_update = False  # see heatmap_explorer: redraw on release
    return explorer
