"""The task study's tables and figures: exact match by scheme and size (mean ± sd over seeds), and passkey by needle depth."""

from __future__ import annotations

import numpy as np

from octlm.studies.core import mean_std
from octlm.studies.tasks import Task



def _multipliers(sizes: list[int]) -> list[int]:
    """Each size as a multiple of the first, the longest training size L."""
    return [s // sizes[0] for s in sizes]


Grid = dict[str, list[float | None]]


def mean_accuracy(records: list[dict], schemes: list[str], sizes: list[int]) -> tuple[Grid, Grid]:
    """``({scheme: [mean exact match over seeds at each size]}, {scheme: [their sample std]})``.

    ``None`` where no model could read the size (a learned table's end); the
    std is ``None`` with a single seed too, where there is no spread to show.
    """
    means: Grid = {}
    spreads: Grid = {}
    for scheme in schemes:
        means[scheme], spreads[scheme] = [], []
        for size in sizes:
            values = [r["exact_match"] for r in records if r["record"] == "eval" and r["position"] == scheme and r["size"] == size]
            mean, std = mean_std(values) if values and None not in values else (None, None)
            means[scheme].append(mean)
            spreads[scheme].append(std)
    return means, spreads


def _cell(value: float | None, std: float | None = None) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" + ("" if std is None else f" ± {100 * std:.1f}")


def terminal_table(grid: Grid, spread: Grid, task: Task, sizes: list[int]) -> str:
    """The exact-match table for the terminal: one row per scheme, one column per size (mean ± std over seeds)."""
    width = 14 if any(v is not None for row in spread.values() for v in row) else 12
    lines = [f"{task.name}: exact match of the whole answer (trained on sizes 1..{sizes[0]})",
             f"{'scheme':>10} " + " ".join(f"{f'{m}x ({s})':>{width}}" for m, s in zip(_multipliers(sizes), sizes))]
    lines += [f"{scheme:>10} " + " ".join(f"{_cell(v, d):>{width}}" for v, d in zip(row, spread[scheme])) for scheme, row in grid.items()]
    return "\n".join(lines)


def markdown_table(grid: Grid, spread: Grid, task: Task, sizes: list[int], seeds: list[int], eval_count: int) -> str:
    """The same table in Markdown, with the protocol in a sentence."""
    over = f"mean ± sample std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f"seed {seeds[0]}"
    lines = [f"# Task study: {task.name}", "", f"{task.description}. Exact match of the whole answer on {eval_count} fresh instances "
             f"per size, {over}; trained on sizes 1..{sizes[0]}.", "",
             "| scheme | " + " | ".join(f"{m}x ({s})" for m, s in zip(_multipliers(sizes), sizes)) + " |",
             "| --- |" + " ---: |" * len(sizes)]
    lines += [f"| `{scheme}` | " + " | ".join(_cell(v, d) for v, d in zip(row, spread[scheme])) + " |" for scheme, row in grid.items()]
    return "\n".join(lines) + "\n"


def plot(grid: dict, task: Task, sizes: list[int]) -> bytes:
    """PNG bytes: exact match against size, one line per scheme."""
    from octlm.inspect.figures import Figure  # matplotlib, whatever MPLBACKEND says

    fig = Figure(figsize=(7, 4.5), dpi=110)
    ax = fig.subplots()
    for scheme, row in grid.items():
        xs = [s for s, v in zip(sizes, row) if v is not None]
        ax.plot(xs, [100 * v for v in row if v is not None], marker="o", label=scheme)
    ax.axvline(sizes[0], color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_ylim(-2, 102)
    ax.set_xlabel(f"instance size (items); dotted: longest trained size {sizes[0]}")
    ax.set_ylabel("exact match (%)")
    ax.set_title(f"{task.name}: exact match past the training length")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from octlm.inspect.figures import png_bytes

    return png_bytes(fig)




def depth_grid(depths: list[dict], sizes: list[int]) -> dict[str, np.ndarray]:
    """``{scheme: exact match [depth bins, sizes]}``, the mean over seeds; NaN where a bin or size has no score."""
    out: dict[str, np.ndarray] = {}
    for scheme in dict.fromkeys(r["position"] for r in depths):
        rows = [r for r in depths if r["position"] == scheme]
        bins = len(rows[0]["exact_match"])
        grid = np.full((bins, len(sizes)), np.nan)
        for j, size in enumerate(sizes):
            at = [r["exact_match"] for r in rows if r["size"] == size]
            for b in range(bins):
                values = [a[b] for a in at if a[b] is not None]
                if values:
                    grid[b, j] = mean_std(values)[0]
        out[scheme] = grid
    return out


def depth_markdown(depths: list[dict], sizes: list[int]) -> str:
    """Exact match by needle depth (rows, start to end) and size (columns), one table per scheme."""
    lines = ["## Passkey by needle depth", "", "Exact match of the whole key with the needle in each tenth of the filler "
             "(0-10%: at the start, farthest from the question), mean over seeds.", ""]
    for scheme, grid in depth_grid(depths, sizes).items():
        lines += [f"`{scheme}`", "", "| depth | " + " | ".join(f"{m}x ({s})" for m, s in zip(_multipliers(sizes), sizes)) + " |",
                  "| --- |" + " ---: |" * len(sizes)]
        for b, row in enumerate(grid):
            lo, hi = 100 * b // len(grid), 100 * (b + 1) // len(grid)
            lines.append(f"| {lo}-{hi}% | " + " | ".join("n/a" if np.isnan(v) else f"{100 * v:.0f}%" for v in row) + " |")
        lines.append("")
    return "\n".join(lines)


def depth_plot(depths: list[dict], sizes: list[int]) -> bytes:
    """PNG bytes: one heatmap per scheme of exact match by needle depth (rows) and size (columns), as needle-in-a-haystack evaluations draw it."""
    from octlm.inspect.figures import Figure, png_bytes

    grids = depth_grid(depths, sizes)
    cols = min(4, len(grids))
    rows = -(-len(grids) // cols)
    fig = Figure(figsize=(2.6 * cols + 1.2, 2.6 * rows + 0.8), dpi=110, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for ax, (scheme, grid) in zip(axes.flat, grids.items()):
        image = ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set_yticks(range(len(grid)), [f"{100 * b // len(grid)}%" for b in range(len(grid))], fontsize=7)
        ax.axvline(0.5, color="black", linewidth=0.8, linestyle=":")
        ax.set_title(scheme, fontsize=9)
    for ax in axes.flat[len(grids):]:
        ax.set_visible(False)
    # One label per figure: a label per panel ran into its neighbours.
    fig.supylabel("needle depth (start of the filler at the top)", fontsize=9)
    fig.supxlabel("size (filler tokens); dotted: past the longest trained; blank: no rows (learned)", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="exact match")
    fig.suptitle("passkey: exact match by needle depth and size", fontsize=10)
    return png_bytes(fig)


__all__ = ["depth_grid", "depth_markdown", "depth_plot", "markdown_table", "mean_accuracy", "plot", "terminal_table"]
