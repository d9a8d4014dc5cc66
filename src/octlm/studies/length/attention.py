"""What each model's attention does at each length of the length study: recorded, tabled and drawn.

At every evaluation length ``L`` the study runs each model on the first
windows of the scored validation stream (:data:`ATTENTION_TOKENS` tokens,
at least one window) with :func:`octlm.model.attention_maps.record_attention`,
and keeps, per layer and head (:mod:`octlm.inspect.attention_statistics`):
the entropy of each query's attention (nats) in log-spaced buckets of the
query position, its mean, the mean attention distance (tokens), the mass on
the first token (the attention sink, Xiao et al. 2023) and the largest
attention logit. An entropy that grows with the length is attention spread
over more keys, the "dilution" that log-length scaling of the logits
(Chiang & Cholak 2022) counters; a largest logit that grows past ``T`` is a
scheme scoring distances it never saw.

The tables average over layers; a study with layout rows (``--layouts``) adds
the same tables layer by layer (:func:`layer_markdown`), since a layout's
layers differ by design: a NoPE or global layer beside RoPE or window layers
is exactly what pooling would hide. Each layout model's record names its
layers (``layers``: :func:`octlm.model.layout.describe`).
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import torch

from octlm.data.tokens import gather_blocks
from octlm.inspect.attention_statistics import attention_statistics
from octlm.model.attention_maps import record_attention
from octlm.model.layout import describe
from octlm.studies.length.tables import log_buckets
from octlm.studies.shared.core import mean_std

#: Validation tokens per evaluation length whose attention the study records (at least one window).
ATTENTION_TOKENS = 4096
#: Attention-map cells (windows x length**2) one batch of windows may hold: a 64-token window's worth of 64 windows.
ATTENTION_BATCH_CELLS = 64 * 64 * 64
#: The statistics kept per layer and head, and how the tables name them.
SUMMARY = {
    "mean_entropy": "entropy (nats)",
    "mean_distance": "distance (tokens)",
    "sink_mass": "first-token mass",
    "max_logit": "largest logit",
    # only models trained with --attention-sinks have it: the share of each query's softmax their learned sink takes
    "sink_share": "learned-sink share",
}


@torch.no_grad()
def attention_record(model, scored: np.ndarray, length: int, train_length: int, device, row: dict) -> dict:
    """The ``attention`` record of ``model`` at ``length`` tokens, for the eval ``row`` it sits beside in
    ``length.jsonl``.

    Windows of ``length`` tokens from the start of ``scored``, one at a time
    (a map takes ``8 * H * length**2`` bytes per layer). Entropy by query is
    averaged over windows and then over the query positions of each bucket
    (:func:`octlm.studies.length.tables.log_buckets`; ``query_positions`` are
    the buckets' centres, counted from 1); the largest logit is the maximum
    over windows, the other statistics the mean. With ``attention_sinks``
    ``sink_share`` [L, H] is the mean share of a query's softmax its learned
    sink takes (:class:`~octlm.model.attention_maps.AttentionMaps`). A
    model with a layer whose weights the scheme forms itself (stick-breaking,
    PaTH) has no ``max_logit``: the tables show n/a.
    """
    windows = max(1, min(ATTENTION_TOKENS // length, (len(scored) - 1) // length))
    # Short windows go through the model together (at 8 tokens a study reads 512 of them), as many as keep a batch's
    # maps near one long window's; each window's statistics are still taken alone and summed in window order.
    per_batch = max(1, ATTENTION_BATCH_CELLS // length**2)
    totals, largest, own_weights = None, None, False
    for first in range(0, windows, per_batch):
        starts = np.arange(first, min(windows, first + per_batch)) * length
        ids = torch.from_numpy(gather_blocks(scored, starts, length)[:, :-1]).to(device)
        with record_attention(model) as maps:
            model(ids)
        own_weights = own_weights or any(maps.own_weights)
        for b in range(len(starts)):
            part, window_largest = _window_statistics(model, maps, b)
            totals = part if totals is None else {name: totals[name] + part[name] for name in part}
            largest = window_largest if largest is None else torch.maximum(largest, window_largest)
    mean = {name: value / windows for name, value in totals.items()}
    edges = log_buckets(length, first=max(1, train_length // 16))
    entropy = torch.stack([mean["entropy"][..., a:b].mean(dim=-1) for a, b in pairwise(edges)], dim=-1)
    record = {
        "record": "attention",
        "label": row["label"],
        "position": row["position"],
        "seed": row.get("seed"),
        "eval_length": length,
        "windows": windows,
        "query_positions": [round(math.sqrt((a + 1) * b), 2) for a, b in pairwise(edges)],
        "entropy": entropy.tolist(),
    }
    if not own_weights:  # weights a scheme forms itself (stick-breaking, PaTH) have no logits: no largest logit
        record["max_logit"] = largest.tolist()
    record.update(
        {
            name: mean[name].tolist()
            for name in ("mean_entropy", "mean_distance", "sink_mass", "sink_share")
            if name in mean
        }
    )
    if model.config.layers:
        record["layers"] = describe(model.config.layers)
    return _rounded(record)


def _window_statistics(model, maps, b: int) -> tuple[dict, torch.Tensor]:
    """Window ``b`` of a batch's attention maps: its statistics (float64, as :func:`attention_record` sums them) and its
    largest logit per layer and head [L, H]."""
    one = slice(b, b + 1)
    stats = attention_statistics([p[one] for p in maps.probabilities], [s[one] for s in maps.logits])
    part = {
        name: getattr(stats, name).double().cpu() for name in ("entropy", "mean_entropy", "mean_distance", "sink_mass")
    }
    if model.config.attention_sinks:  # the learned sinks' share of the softmax, mean over queries [L, H]
        part["sink_share"] = torch.stack([share[one].mean(dim=(0, 2)) for share in maps.sink_share]).double().cpu()
    return part, stats.max_logit.cpu()


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _grid(records: list[dict]) -> dict[str, dict[int, list[dict]]]:
    """``{label: {length: [record of each seed]}}`` in record order."""
    grid: dict[str, dict[int, list[dict]]] = {}
    for r in records:
        grid.setdefault(r["label"], {}).setdefault(r["eval_length"], []).append(r)
    return grid


def _shown(records: list[dict]) -> list[tuple[str, str]]:
    """The statistics of :data:`SUMMARY` that some record carries, with their titles."""
    return [(name, title) for name, title in SUMMARY.items() if any(name in r for r in records)]


def _cell(value: float) -> str:
    """A statistic as the tables show it; n/a for a model that has none (a learned-sink share without sinks)."""
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def _over_heads(records: list[dict], name: str) -> float:
    """The statistic ``name`` averaged over layers and heads, then over seeds (the largest logit: its maximum)."""
    if any(name not in r for r in records):
        return math.nan
    values = [np.max(r[name]) if name == "max_logit" else float(np.mean(r[name])) for r in records]
    return max(values) if name == "max_logit" else mean_std(values)[0]


def _in_layer(records: list[dict], name: str, layer: int) -> float:
    """The statistic ``name`` of layer ``layer`` (0-based) averaged over its heads, then over seeds (the largest
    logit: its maximum)."""
    if any(name not in r for r in records):
        return math.nan
    values = [float(np.max(r[name][layer]) if name == "max_logit" else np.mean(r[name][layer])) for r in records]
    return max(values) if name == "max_logit" else mean_std(values)[0]


def layer_markdown(records: list[dict], train_length: int, lengths: list[int]) -> str:
    """The attention tables layer by layer, when the study has layout rows (records with ``layers``): a row per model
    and layer, a column per length, over each layer's heads and the seeds; ``""`` without layout rows.

    The models shown are those scored as trained: not the rows under a RoPE scaling or the log scale (``+`` in the
    label), which repeat their model's layers.
    """
    if not any("layers" in r for r in records):
        return ""
    grid = {label: cells for label, cells in _grid(records).items() if "+" not in label}
    lines = [
        "Attention by layer (the study has layout rows; each layer over its heads and the seeds, the largest logit the "
        "maximum; layers counted from 1 at the input).",
        "",
    ]
    for name, title in _shown(records):
        lines += [
            f"**{title}, by layer**",
            "",
            "| model | layer | " + " | ".join(f"{L // train_length}x ({L})" for L in lengths) + " |",
        ]
        lines.append("| --- | --- |" + " ---: |" * len(lengths))
        for label, cells in grid.items():
            first = next(iter(cells.values()))[0]
            # every record has the entropy; a scheme that forms its own weights has no largest logit (n/a)
            for layer in range(len(first["mean_entropy"])):
                said = f"{layer + 1}: {first['layers'][layer]}" if "layers" in first else str(layer + 1)
                shown = [_cell(_in_layer(cells[L], name, layer)) if L in cells else "n/a" for L in lengths]
                lines.append(f"| `{label}` | {said} | " + " | ".join(shown) + " |")
        lines.append("")
    return "\n".join(lines)


def attention_markdown(records: list[dict], train_length: int, lengths: list[int]) -> str:
    """Tables of the attention statistics, one per statistic: a row per model, a column per length (over layers and
    heads)."""
    grid = _grid(records)
    lines = [
        f"Attention by evaluation length (trained at T = {train_length}; over every layer and head, and the seeds; "
        "the largest logit is the maximum). Uniform attention over n keys has entropy ln n and distance (n - 1) / 2.",
        "",
    ]
    for name, title in _shown(records):
        lines += [
            f"**{title}**",
            "",
            "| model | " + " | ".join(f"{L // train_length}x ({L})" for L in lengths) + " |",
            "| --- |" + " ---: |" * len(lengths),
        ]
        for label, cells in grid.items():
            shown = [_cell(_over_heads(cells[L], name)) if L in cells else "n/a" for L in lengths]
            lines.append(f"| `{label}` | " + " | ".join(shown) + " |")
        lines.append("")
    return "\n".join(lines) + (f"\n{by_layer}" if (by_layer := layer_markdown(records, train_length, lengths)) else "")


def attention_plot(records: list[dict], train_length: int) -> bytes:
    """PNG bytes: one panel per model, one line per length: attention entropy (nats, over layers and heads) against
    query position."""
    from octlm.inspect.figures import Figure, png_bytes

    grid = _grid(records)
    cols = min(4, len(grid))
    rows = math.ceil(len(grid) / cols)
    fig = Figure(figsize=(3.6 * cols, 2.9 * rows), dpi=110)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    lengths = sorted({L for cells in grid.values() for L in cells})
    colours = {L: f"C{i % 10}" for i, L in enumerate(lengths)}
    # the grid may have spare panels past the last figure
    for ax, (label, cells) in zip(axes.flat, grid.items(), strict=False):
        for L, group in cells.items():
            curve = np.mean([np.mean(r["entropy"], axis=(0, 1)) for r in group], axis=0)
            ax.plot(group[0]["query_positions"], curve, color=colours[L], label=f"{L}")
        ends = np.array([1.0, max(cells)])
        ax.plot(ends, np.log(ends), color="grey", linestyle=":", linewidth=0.8)
        ax.axvline(train_length, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes.flat[len(grid) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("attention entropy (nats)")
    for ax in axes[-1, :]:
        ax.set_xlabel("query position")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[L], label=str(L)) for L in lengths]
    fig.legend(
        handles=handles,
        title="evaluation length (tokens)",
        loc="upper center",
        bbox_to_anchor=(0.5, 0.965),
        fontsize=7,
        title_fontsize=7,
        ncol=len(lengths),
    )
    fig.suptitle(
        f"attention entropy by query position at each evaluation length (dashed: T = {train_length}; dotted: ln n, "
        "uniform over n keys)",
        fontsize=10,
        y=0.995,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return png_bytes(fig)


__all__ = ["ATTENTION_TOKENS", "attention_markdown", "attention_plot", "attention_record", "layer_markdown"]
