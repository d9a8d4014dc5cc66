"""The task study's tables and figures: exact match by row and size (mean ± sd over seeds), randomized against plain,
passkey by needle depth (:mod:`~octlm.studies.tasks.summary` gathers them with the ranking across tasks)."""

from __future__ import annotations

import numpy as np

from octlm.studies.shared.core import mean_std
from octlm.studies.shared.rows import layout_rows
from octlm.studies.tasks.generators import Task, as_flags
from octlm.studies.tasks.needle import DEFAULT_TEXT, VARIANTS
from octlm.studies.tasks.ranking import SEPARATED, separated
from octlm.studies.tasks.records import row_label


def multipliers(sizes: list[int]) -> list[int]:
    """Each size as a multiple of the first, the longest training size L."""
    return [s // sizes[0] for s in sizes]


Grid = dict[str, list[float | None]]


def mean_accuracy(
    records: list[dict], labels: list[str], sizes: list[int], task: str | None = None
) -> tuple[Grid, Grid]:
    """``({label: [mean exact match over seeds at each size]}, {label: [their sample std]})`` of ``task``'s records (all
    when ``None``).

    ``None`` where no model could read the size (a learned table's end); the
    std is ``None`` with a single seed too, where there is no spread to show.
    Records without a label (studies written before randomized rows) are
    labelled by their scheme.
    """
    means: Grid = {}
    spreads: Grid = {}
    for label in labels:
        means[label], spreads[label] = [], []
        for size in sizes:
            values = [
                r["exact_match"]
                for r in records
                if r["record"] == "eval"
                and row_label(r) == label
                and r["size"] == size
                and (task is None or r.get("task", task) == task)
            ]
            mean, std = mean_std(values) if values and None not in values else (None, None)
            means[label].append(mean)
            spreads[label].append(std)
    return means, spreads


def _cell(value: float | None, std: float | None = None, mark: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" + ("" if std is None else f" ± {100 * std:.1f}") + (f" {SEPARATED}" if mark else "")


def _marks(grid: Grid, spread: Grid, sizes: list[int]) -> dict[str, list[bool]]:
    """Which cells of the 2x column (where the study has one) are separated from the row ranked below them
    (:func:`separated`)."""
    column = multipliers(sizes).index(2) if 2 in multipliers(sizes) else None
    marked = (
        set()
        if column is None
        else separated({k: v[column] for k, v in grid.items()}, {k: v[column] for k, v in spread.items()})
    )
    return {label: [j == column and label in marked for j in range(len(sizes))] for label in grid}


def terminal_table(grid: Grid, spread: Grid, task: Task, sizes: list[int]) -> str:
    """The exact-match table for the terminal: one row per scheme, one column per size (mean ± std over seeds; † as
    :func:`markdown_table`)."""
    width = 16 if any(v is not None for row in spread.values() for v in row) else 12
    marks = _marks(grid, spread, sizes)
    lines = [
        f"{task.name}: exact match of the whole answer (trained on sizes 1..{sizes[0]})",
        f"{'scheme':>12} "
        + " ".join(f"{f'{m}x ({s})':>{width}}" for m, s in zip(multipliers(sizes), sizes, strict=True)),
    ]
    lines += [
        f"{label:>12} "
        + " ".join(f"{_cell(v, d, k):>{width}}" for v, d, k in zip(row, spread[label], marks[label], strict=True))
        for label, row in grid.items()
    ]
    return "\n".join(lines)


def markdown_table(
    grid: Grid, spread: Grid, task: Task, sizes: list[int], seeds: list[int], eval_count: int, heading: str = "#"
) -> str:
    """The same table in Markdown, with the protocol in a sentence and what † means."""
    over = f"mean ± sample std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f"seed {seeds[0]}"
    marks = _marks(grid, spread, sizes)
    lines = [
        f"{heading} Task study: {task.name}",
        "",
        f"{task.description[0].upper()}{task.description[1:]}. Exact match of the whole answer on {eval_count} fresh "
        f"instances per size, {over}; trained on sizes 1..{sizes[0]}."
        + (
            f" {SEPARATED} at 2x: the row's mean ± sd lies wholly above that of the row ranked just below it at 2x "
            "(by mean, not the table's order), a difference larger than the spread over seeds."
            if len(seeds) > 1 and any(any(row) for row in marks.values())
            else ""
        ),
        "",
        "| scheme | " + " | ".join(f"{m}x ({s})" for m, s in zip(multipliers(sizes), sizes, strict=True)) + " |",
        "| --- |" + " ---: |" * len(sizes),
    ]
    lines += [
        f"| `{label}` | "
        + " | ".join(_cell(v, d, k) for v, d, k in zip(row, spread[label], marks[label], strict=True))
        + " |"
        for label, row in grid.items()
    ]
    return "\n".join(lines) + "\n"


def randomized_markdown(records: list[dict], task: str, labels: list[str], sizes: list[int], seeds: list[int]) -> str:
    """Randomized minus plain exact match per scheme and size, in points: mean ± sd over seeds of each seed's
    difference; empty without randomized rows."""
    pairs = [(label.removesuffix("+rand"), label) for label in labels if label.endswith("+rand")]
    if not pairs:
        return ""
    lines = [
        "Randomized positions minus plain (Ruoss et al. 2023), exact-match points, mean ± sd over seeds:",
        "",
        "| scheme | " + " | ".join(f"{m}x ({s})" for m, s in zip(multipliers(sizes), sizes, strict=True)) + " |",
        "| --- |" + " ---: |" * len(sizes),
    ]
    for plain, rand in pairs:
        cells = []
        for size in sizes:
            diffs = [
                _one(records, task, rand, seed, size) - _one(records, task, plain, seed, size)
                for seed in seeds
                if _one(records, task, rand, seed, size) is not None
                and _one(records, task, plain, seed, size) is not None
            ]
            mean, std = mean_std(diffs) if diffs else (None, None)
            cells.append(
                "n/a" if mean is None else f"{100 * mean:+.1f}" + ("" if std is None else f" ± {100 * std:.1f}")
            )
        lines.append(f"| `{plain}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _one(records: list[dict], task: str, label: str, seed: int, size: int) -> float | None:
    found = [
        r["exact_match"]
        for r in records
        if r["record"] == "eval"
        and r.get("task", task) == task
        and row_label(r) == label
        and r["seed"] == seed
        and r["size"] == size
    ]
    return found[0] if found else None


def plot(grids: dict[str, Grid], sizes: dict[str, list[int]]) -> bytes:
    """PNG bytes: exact match against size, one panel per task (``grids``: ``{task: {label: [mean at each size]}}``,
    ``sizes``: ``{task: its sizes}``), one line per row."""
    from octlm.inspect.figures import Figure, png_bytes  # matplotlib, whatever MPLBACKEND says

    cols = min(3, len(grids))
    rows = -(-len(grids) // cols)
    fig = Figure(
        figsize=(7 if cols == 1 else 4.2 * cols, 4.5 if rows == 1 and cols == 1 else 3.4 * rows + 0.6),
        dpi=110,
        layout="constrained",
    )
    axes = fig.subplots(rows, cols, squeeze=False)
    # the grid may have spare panels past the last figure
    for ax, (name, grid) in zip(axes.flat, grids.items(), strict=False):
        at = sizes[name]
        for label, row in grid.items():
            xs = [s for s, v in zip(at, row, strict=True) if v is not None]
            ax.plot(
                xs,
                [100 * v for v in row if v is not None],
                marker="o",
                label=label,
                linestyle="--" if label.endswith("+rand") else "-",
            )
        ax.axvline(at[0], color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(at, [str(s) for s in at])
        ax.set_ylim(-2, 102)
        ax.set_title(f"{name}: exact match past the training length" if len(grids) == 1 else name, fontsize=10)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(grids) :]:
        ax.set_visible(False)
    longest = {at[0] for at in sizes.values()}
    said = f" {longest.pop()}" if len(longest) == 1 else " (each task's own)"
    fig.supxlabel(f"instance size (items); dotted: longest trained size{said}", fontsize=9)
    fig.supylabel("exact match (%)", fontsize=9)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if len(grids) == 1:
        axes.flat[0].legend(fontsize=8)
    else:
        fig.legend(handles, labels, fontsize=8, loc="outside right upper")
    return png_bytes(fig)


def protocol_sentence(opts) -> str:
    """One sentence of what every model of a task study (its :class:`~octlm.studies.tasks.options.TaskOptions`) was: for
    ``tasks.md``, so that a short trial cannot pass for the default. A study of one task with its own training says
    that training (its models have no other)."""
    names, own = opts.task_names(), _own_training_said(opts)
    if len(names) == 1 and opts.own_training(names[0]):
        opts, own = opts.for_task(names[0]), ""
    rand = (
        (
            f"; rows +rand at positions drawn from {opts.randomize_positions} x the longest training sequence "
            "(schemes that read no positions train plain only)"
        )
        if opts.randomize_positions > 1
        else ""
    )
    preset = f"; --preset {opts.preset}" if opts.preset else ""
    if any(name in VARIANTS for name in opts.task_names()):
        preset += (
            f"; needles in the bytes of {' '.join(opts.text or [DEFAULT_TEXT])} (evaluation: its validation split)"
        )
    block = "".join(
        [
            f", the {opts.block} block" if opts.block != "gpt2" else "",
            ", QK-norm" if opts.qk_norm else "",
            ", learned attention sinks" if opts.attention_sinks else "",
            ", an output gate" if opts.output_gate else "",
            _layouts_said(opts.layouts),
        ]
    )
    return (
        f"Each model: {opts.steps_said()} of {opts.optimizer} (batch {opts.batch_size}), d_model {opts.d_model}, "
        f"{opts.n_layers} layers, {opts.n_heads} heads{block}{rand}{preset}{own}."
    )


def _own_training_said(opts) -> str:
    """The tasks trained otherwise (their own training, as flags): ``; recall trained with --n-layers 2 ...``."""
    said = [
        f"{name} trained with " + as_flags({k: v for k, v in own.items() if k != "max_steps"})
        for name, own in (opts.task_training or {}).items()
        if set(own) - {"max_steps"}
    ]
    return "".join(f"; {s}" for s in said)


def _layouts_said(layouts: list[str]) -> str:
    """The layout rows in the protocol sentence: ``; layout rows `name` = `layout`, ...`` (``""`` without any)."""
    rows = layout_rows(layouts)
    return "; layout rows " + ", ".join(f"`{row.label}` = `{row.layers}`" for row in rows) if rows else ""


def depth_grid(depths: list[dict], sizes: list[int]) -> dict[str, np.ndarray]:
    """``{scheme: exact match [depth bins, sizes]}``, the mean over seeds; NaN where a bin or size has no score."""
    out: dict[str, np.ndarray] = {}
    for scheme in dict.fromkeys(row_label(r) for r in depths):
        rows = [r for r in depths if row_label(r) == scheme]
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


def depth_markdown(depths: list[dict], sizes: list[int], task: str = "passkey") -> str:
    """Exact match by needle depth (rows, start to end) and size (columns), one table per scheme."""
    lines = [
        f"## {task[0].upper()}{task[1:]} by needle depth",
        "",
        f"Exact match of the whole {'key' if task == 'passkey' else 'answer'} with the needle in each tenth of the "
        "filler (0-10%: at the start, farthest from the question), mean over seeds.",
        "",
    ]
    for scheme, grid in depth_grid(depths, sizes).items():
        lines += [
            f"`{scheme}`",
            "",
            "| depth | " + " | ".join(f"{m}x ({s})" for m, s in zip(multipliers(sizes), sizes, strict=True)) + " |",
            "| --- |" + " ---: |" * len(sizes),
        ]
        for b, row in enumerate(grid):
            lo, hi = 100 * b // len(grid), 100 * (b + 1) // len(grid)
            lines.append(
                f"| {lo}-{hi}% | " + " | ".join("n/a" if np.isnan(v) else f"{100 * v:.0f}%" for v in row) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def depth_plot(depths: list[dict], sizes: list[int], task: str = "passkey") -> bytes:
    """PNG bytes: one heatmap per scheme of exact match by needle depth (rows) and size (columns), as
    needle-in-a-haystack evaluations draw it."""
    from octlm.inspect.figures import Figure, png_bytes

    grids = depth_grid(depths, sizes)
    cols = min(4, len(grids))
    rows = -(-len(grids) // cols)
    fig = Figure(figsize=(2.6 * cols + 1.2, 2.6 * rows + 0.8), dpi=110, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    # the grid may have spare panels past the last figure
    for ax, (scheme, grid) in zip(axes.flat, grids.items(), strict=False):
        image = ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set_yticks(range(len(grid)), [f"{100 * b // len(grid)}%" for b in range(len(grid))], fontsize=7)
        ax.axvline(0.5, color="black", linewidth=0.8, linestyle=":")
        ax.set_title(scheme, fontsize=9)
    for ax in axes.flat[len(grids) :]:
        ax.set_visible(False)
    # One label per figure: a label per panel ran into its neighbours.
    fig.supylabel("needle depth (start of the filler at the top)", fontsize=9)
    fig.supxlabel("size (filler tokens); dotted: past the longest trained; blank: no rows (learned)", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="exact match")
    fig.suptitle(f"{task}: exact match by needle depth and size", fontsize=10)
    return png_bytes(fig)


__all__ = [
    "multipliers",
    "protocol_sentence",
    "depth_grid",
    "depth_markdown",
    "depth_plot",
    "markdown_table",
    "mean_accuracy",
    "plot",
    "randomized_markdown",
    "terminal_table",
]
