"""What the needle tasks add to the task study: the effective retrieval context, and attention mass by segment.

* **Effective context** (Hsieh et al. 2024, RULER §4: the longest length at
  which a model's score stays above a threshold, theirs Llama-2-7B's 85.6% at
  4K): here the longest evaluated size at which exact match is at least
  :data:`THRESHOLD` in every depth bin, and at every shorter size too.
* **Attention mass by segment** (Yang et al. 2025, arXiv 2501.18795, Figure 1:
  the share of attention that the answer's queries give the begin, the needle,
  the context and the end, against length): for each position that predicts a
  scored value, its attention probabilities summed over the keys of each
  segment (:func:`~octlm.studies.tasks.needle.needle_segments`), then the mean over
  heads, those queries and :data:`ATTENTION_COUNT` validation instances, per
  layer. Each query's four masses sum to 1.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from octlm.model.attention_maps import record_attention
from octlm.studies.tasks.needle import SEGMENTS, VARIANTS, needle_segments
from octlm.studies.tasks.tables import depth_grid, depth_markdown, depth_plot

#: Exact match a size must reach in every depth bin to count as retrieved. RULER's bar is a baseline model's score
#: (Llama-2-7B at 4K, 85.6%); there is no baseline model here, so its value rounded down is kept as a fixed bar.
THRESHOLD = 0.85
#: Validation instances whose attention is recorded, per size and model.
ATTENTION_COUNT = 32
#: The attention generator's seed sits this far from the evaluation's, clear of every size's and depth bin's.
ATTENTION_SEED = 7 * 10**6
ATTENTION_PLOT = "tasks-needle-attention.png"
#: Every file the needle tasks add to a task study's folder: one depth heatmap per task, and the attention figure.
NEEDLE_FILES = (*(f"tasks-depth-{task}.png" for task in VARIANTS), ATTENTION_PLOT)


def effective_length(grid: np.ndarray, sizes: list[int], threshold: float = THRESHOLD) -> int | None:
    """The longest of ``sizes`` up to which exact match ``grid`` [depth bins, sizes] (NaN: no score) is at least
    ``threshold`` in every bin; ``None`` when the first size already falls short.

    A size without a single score (a learned table's end) ends the run, as a
    miss would: nothing was retrieved there.
    """
    best = None
    for j, size in enumerate(sizes):
        column = grid[:, j][~np.isnan(grid[:, j])]
        if column.size == 0 or bool((column < threshold).any()):
            break
        best = size
    return best


def segment_masses(probabilities: Tensor, kinds: list[str], queries: list[int]) -> Tensor:
    """Attention mass of each query in each of :data:`~.needle.SEGMENTS`, float [..., len(queries), 4].

    Args:
        probabilities: attention probabilities [..., T, S] (rows sum to 1 over the keys).
        kinds: the segment of each of the S keys.
        queries: the query rows to read.
    """
    onehot = torch.tensor([[float(k == s) for s in SEGMENTS] for k in kinds], dtype=probabilities.dtype)
    return probabilities[..., queries, :] @ onehot


@torch.no_grad()
def attention_by_segment(model, task, size: int, seed: int, device: torch.device) -> list[list[float]] | None:
    """Mean mass per segment of the answer's queries in ``size``-byte validation instances of needle ``task``, per
    layer: ``[layers][4]``; ``None`` past a learned table."""
    if model.max_length is not None and task.sequence_length(size) - 1 > model.max_length:
        return None
    g = torch.Generator().manual_seed(seed + ATTENTION_SEED + size)
    tokens = task.evaluation().batch(size, ATTENTION_COUNT, size, g)
    with record_attention(model) as maps:
        model(tokens[:, :-1].to(device))
    total = torch.zeros(len(maps.probabilities), len(SEGMENTS))
    for b, row in enumerate(tokens.tolist()):
        kinds, queries = needle_segments(VARIANTS[task.name], row)
        layers = torch.stack([p[b].cpu() for p in maps.probabilities])  # [layers, H, T, S]
        total += segment_masses(layers, kinds[:-1], queries).mean(dim=(1, 2))
    return (total / len(tokens)).tolist()


def attention_records(model, task, row: dict, seed: int, multipliers, sizes, device) -> list[dict]:
    """One ``needle_attention`` record per size of a needle task's model (``[]`` for any other task)."""
    if task.name not in VARIANTS:
        return []
    out = []
    for m, size in zip(multipliers, sizes, strict=True):
        masses = attention_by_segment(model, task, size, seed, device)
        base = {"record": "needle_attention", "task": task.name, **row, "seed": seed, "multiplier": m, "size": size}
        out.append({**base, "segments": list(SEGMENTS), "mass_by_layer": masses})
    return out


def mean_masses(records: list[dict], task: str, sizes: list[int]) -> dict[str, np.ndarray]:
    """``{row label: mass [sizes, 4]}``, the mean over layers and seeds; NaN where no model could read the size."""
    rows = [r for r in records if r["record"] == "needle_attention" and r["task"] == task]
    out: dict[str, np.ndarray] = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        grid = np.full((len(sizes), len(SEGMENTS)), np.nan)
        for j, size in enumerate(sizes):
            got = [
                np.mean(r["mass_by_layer"], axis=0)
                for r in rows
                if r["label"] == label and r["size"] == size and r["mass_by_layer"] is not None
            ]
            if got:
                grid[j] = np.mean(got, axis=0)
        out[label] = grid
    return out


def needle_markdown(task: str, grids: dict[str, np.ndarray], masses: dict[str, np.ndarray], sizes: list[int]) -> str:
    """The effective context of each row, and its attention mass by segment against size, for ``task``."""
    lines = [
        f"## {task}: effective retrieval context",
        "",
        f"The longest size at which exact match is at least {100 * THRESHOLD:.0f}% in every depth bin and at every "
        f"shorter size (RULER's rule; its bar, Llama-2-7B's 85.6% at 4K, rounded down), mean over seeds:",
        "",
        "| scheme | effective context |",
        "| --- | ---: |",
    ]
    for label, grid in grids.items():
        best = effective_length(grid, sizes)
        lines.append(f"| `{label}` | {'below the bar at ' + str(sizes[0]) if best is None else best} |")
    lines += [
        "",
        "Attention mass of the answer's queries by segment (start: the first 4 tokens; needle: the asked needles; "
        "filler: the text and any distractor needles; question: the query and answer so far), mean over layers, "
        "heads, queries and instances:",
        "",
        "| scheme | size | " + " | ".join(SEGMENTS) + " |",
        "| --- | ---: |" + " ---: |" * len(SEGMENTS),
    ]
    for label, grid in masses.items():
        for size, row in zip(sizes, grid, strict=True):
            cells = " | ".join("n/a" if np.isnan(v) else f"{v:.3f}" for v in row)
            lines.append(f"| `{label}` | {size} | {cells} |")
    return "\n".join(lines) + "\n"


def attention_plot(masses_by_task: dict[str, dict[str, np.ndarray]], sizes: list[int]) -> bytes:
    """PNG bytes: one panel per (task, row), the mass of each segment against size."""
    from octlm.inspect.figures import Figure, png_bytes

    panels = [(task, label, grid) for task, by in masses_by_task.items() for label, grid in by.items()]
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(2.8 * cols + 0.6, 2.4 * rows + 0.8), dpi=110, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    # the grid may have spare panels past the last figure
    for ax, (task, label, grid) in zip(axes.flat, panels, strict=False):
        for k, segment in enumerate(SEGMENTS):
            ax.plot(sizes, grid[:, k], marker="o", label=segment)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task}: {label}" if len(masses_by_task) > 1 else label, fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    fig.supxlabel("size (filler bytes)", fontsize=9)
    fig.supylabel("attention mass of the answer's queries", fontsize=9)
    axes.flat[0].legend(fontsize=7)
    return png_bytes(fig)


def needle_summary(records: list[dict], depths: list[dict], sizes: list[int]):
    """Each needle task's tables (by depth, effective context, attention by segment), its figures (of
    :data:`NEEDLE_FILES`) and its rows' effective context: ``(sections, {file: png}, {task: {label: size or None}})``.
    """
    sections, extra, masses, result = [], {}, {}, {}
    for task in (t for t in dict.fromkeys(r["task"] for r in depths) if t in VARIANTS):
        mine = [r for r in depths if r["task"] == task]
        grids = depth_grid(mine, sizes)
        masses[task] = mean_masses(records, task, sizes)
        sections += [depth_markdown(mine, sizes, task), needle_markdown(task, grids, masses[task], sizes)]
        extra[NEEDLE_FILES[list(VARIANTS).index(task)]] = depth_plot(mine, sizes, task)
        result[task] = {label: effective_length(grid, sizes) for label, grid in grids.items()}
    if any(masses.values()):
        extra[ATTENTION_PLOT] = attention_plot({t: m for t, m in masses.items() if m}, sizes)
    return sections, extra, result


__all__ = [
    "ATTENTION_COUNT",
    "ATTENTION_PLOT",
    "NEEDLE_FILES",
    "THRESHOLD",
    "attention_by_segment",
    "attention_records",
    "effective_length",
    "mean_masses",
    "needle_markdown",
    "needle_summary",
    "segment_masses",
]
