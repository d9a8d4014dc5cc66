"""Figures of ``octlm attention``: every head's attention map, and the statistics per layer and head.

* :func:`layer_heatmaps`: one layer's heads side by side, query position
  down, key position across, labelled with the tokens when they fit;
* :func:`statistics_figure`: entropy against query position for every head
  next to uniform attention's ``ln(i + 1)``, and the mean distance,
  first-token mass and largest logit of every layer and head as tables.

Both return a :class:`matplotlib.figure.Figure` built without pyplot (see
:mod:`octlm.inspect.figures`, whose :func:`~octlm.inspect.figures.save_png` writes them).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from torch import Tensor

from octlm.inspect.attention_statistics import AttentionStatistics
from octlm.inspect.figures import shown_label

#: Side of one head's map (inches); tokens label its axes when this many or fewer fit (at 5 points a line).
PANEL_INCHES, MAX_LABELLED = 4.2, 48
#: Probabilities in viridis; the keys a query may not see (NaN) in light grey.
_HIDDEN_BLANK = colormaps["viridis"].with_extremes(bad="#f2f2f2")


def _label_axes(axes, labels: list[str]) -> None:
    """Ticks on every position, each labelled with its token, at a font size the panel holds."""
    size = min(8.0, 0.8 * PANEL_INCHES * 72 / len(labels) / 1.25)
    shown = [shown_label(text) for text in labels]
    positions = range(len(labels))
    axes.set_xticks(positions, [text for text, _ in shown], rotation=90, fontsize=size)
    axes.set_yticks(positions, [text for text, _ in shown], fontsize=size)
    for ticks in (axes.get_xticklabels(), axes.get_yticklabels()):
        for tick, (_, families) in zip(ticks, shown, strict=True):
            tick.set_fontfamily(families)


def layer_heatmaps(
    probabilities: Tensor, stats: AttentionStatistics, layer: int, labels: list[str], title: str
) -> Figure:
    """Every head's attention map of one layer, on one figure.

    Args:
        probabilities: one sequence's maps of the layer, float [H, T, S]
            (``AttentionMaps.probabilities[layer][b]``); keys a query may not
            see are drawn blank.
        stats: the pass's statistics, for each head's caption.
        layer: which layer (0-based), for the title and captions.
        labels: the text of the S key tokens (the queries are the last T);
            drawn on the axes when S <= :data:`MAX_LABELLED`.
        title: names the run.
    """
    heads, T, S = probabilities.shape
    columns = math.ceil(math.sqrt(heads))
    rows = math.ceil(heads / columns)
    figure = Figure(
        figsize=(columns * (PANEL_INCHES + 1.0), rows * (PANEL_INCHES + 1.4) + 0.6), dpi=100, layout="constrained"
    )
    grid = np.atleast_1d(figure.subplots(rows, columns, squeeze=False).ravel())
    distance = np.arange(T)[:, None] + (S - T) - np.arange(S)
    for head, axes in enumerate(grid):
        if head >= heads:
            axes.set_visible(False)
            continue
        shown = np.where(distance >= 0, probabilities[head].float().numpy(), np.nan)
        image = axes.imshow(
            shown, cmap=_HIDDEN_BLANK, norm=PowerNorm(0.5, vmin=0.0, vmax=1.0), interpolation="nearest", aspect="auto"
        )
        if S <= MAX_LABELLED:
            _label_axes(axes, labels[-S:])
        else:
            axes.set_xlabel("key position")
            axes.set_ylabel("query position")
        axes.set_title(
            f"head {head}: entropy {stats.mean_entropy[layer, head]:.2f} nats, distance "
            f"{stats.mean_distance[layer, head]:.1f}\nfirst-token mass {stats.sink_mass[layer, head]:.3g}, "
            f"max logit {stats.max_logit[layer, head]:.1f}",
            fontsize=9,
        )
    figure.colorbar(image, ax=grid[:heads].tolist(), label="attention probability (square-root scale)", shrink=0.8)
    figure.suptitle(f"{title}\nlayer {layer}: row = query, column = the key it attends to", fontsize=11)
    return figure


def _table(figure: Figure, axes, values: Tensor, name: str, fmt: str, cmap: str) -> None:
    """A [layers, heads] table of one statistic, coloured by value, each cell written out."""
    data = values.float().numpy()
    image = axes.imshow(data, cmap=cmap, aspect="auto")
    layers, heads = data.shape
    small = 9 if layers * heads <= 64 else 6
    for (row, column), value in np.ndenumerate(data):
        axes.text(
            column,
            row,
            format(value, fmt),
            ha="center",
            va="center",
            fontsize=small,
            color="white" if image.norm(value) < 0.5 else "black",
        )
    axes.set_xticks(range(heads))
    axes.set_yticks(range(layers))
    axes.set_xlabel("head")
    axes.set_ylabel("layer")
    axes.set_title(name, fontsize=10)
    figure.colorbar(image, ax=axes, shrink=0.8)


def _smoothed(values: np.ndarray, window: int) -> np.ndarray:
    """Each value averaged with up to ``window // 2`` neighbours a side, fewer near the start (at most an eighth of its
    position), so the first queries, a decade of their own on a log axis, stay as they are; ``values`` as they are for
    1."""
    if window <= 1:
        return values
    i = np.arange(len(values))
    half = np.minimum(window // 2, i // 8)
    lo, hi = i - half, np.minimum(i + half, len(values) - 1)
    sums = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    return (sums[hi + 1] - sums[lo]) / (hi - lo + 1)


def statistics_figure(stats: AttentionStatistics, title: str, context_length: int | None = None) -> Figure:
    """Entropy against query position for every head (log axis; a dashed line at ``context_length``, the length trained
    at),
    and the other statistics as [layer, head] tables."""
    layers, heads, T = stats.entropy.shape
    figure = Figure(figsize=(13, 8.5), dpi=100, layout="constrained")
    top, bottom = figure.subfigures(2, 1, height_ratios=[1.15, 1])
    axes = top.subplots()
    colours = [f"C{layer % 10}" for layer in range(layers)]
    positions = np.arange(1, T + 1)
    window = max(1, T // 64)  # one sequence's entropy jumps from query to query; a long one is unreadable unsmoothed
    styles = ["-", "--", ":", "-."]
    for layer in range(layers):
        for head in range(heads):
            axes.plot(
                positions,
                _smoothed(stats.entropy[layer, head].float().numpy(), window),
                color=colours[layer],
                linestyle=styles[head % 4],
                linewidth=1.2,
                label=f"layer {layer} head {head}" if layers * heads <= 16 else None,
            )
    axes.plot(
        positions,
        np.log(positions),
        color="black",
        linewidth=1.5,
        linestyle=(0, (1, 1)),
        label="uniform over the visible keys, ln(i + 1)",
    )
    if context_length is not None and context_length < T:
        axes.axvline(
            context_length, color="grey", linestyle="--", linewidth=1, label=f"trained length {context_length}"
        )
    # A log axis: entropy grows like ln i, and the first tokens would otherwise be a sliver at long lengths.
    axes.set_xscale("log")
    axes.set_xlabel("query position i + 1 (tokens, log scale)")
    axes.set_ylabel("attention entropy (nats)")
    axes.set_xlim(1, max(T, 2))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_title(
        "entropy of each query's attention"
        + (f" (mean over up to {window} neighbouring queries)" if window > 1 else ""),
        fontsize=10,
    )
    tables = bottom.subplots(1, 3)
    _table(bottom, tables[0], stats.mean_distance, "mean attention distance (tokens)", ".1f", "viridis")
    _table(bottom, tables[1], stats.sink_mass, "probability on the first token", ".3g", "magma")
    _table(bottom, tables[2], stats.max_logit, "largest attention logit", ".1f", "cividis")
    figure.suptitle(title, fontsize=12)
    return figure


__all__ = ["MAX_LABELLED", "layer_heatmaps", "statistics_figure"]
