"""The length study's tables and figures: bits per byte by length and by window position, mean ± std over seeds.

Rows are the ``eval`` records of ``length.jsonl`` (:mod:`octlm.studies.length.study`); with
several seeds :func:`mean_rows` folds them into one row per label and length.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np

from octlm.studies.length.records import TrainRecord
from octlm.studies.shared.core import mean_std

#: The two readings of bits per byte at each length (octlm.studies.length.scoring), by the key of an eval row.
READINGS = {"bpb": "non-overlapping windows", "sliding_bpb": "sliding windows"}

NOT_AVAILABLE = "n/a (no rows past T)"


def position_curve(row: dict, first: int = 1, per_octave: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Bits per byte along a window, in buckets evenly spaced on a log scale of the position.

    Returns ``(centres, bpb)``: the geometric centre of each bucket of window
    positions, counted from 1 (the first prediction), and the bits per byte of
    the targets in it. Every bucket holds at least ``first`` positions, and
    each ends ``2 ** (1 / per_octave)`` times further along than the one
    before it when that is more, which averages out the noise of a few dozen
    windows.
    """
    nats = np.asarray(row["position_loss"]) * row["windows"]
    nbytes = np.asarray(row["position_bytes"])
    edges = log_buckets(len(nats), first, per_octave)
    centres, curve = [], []
    for a, b in pairwise(edges):
        centres.append(math.sqrt((a + 1) * b))
        curve.append(nats[a:b].sum() / math.log(2) / max(nbytes[a:b].sum(), 1))
    return np.asarray(centres), np.asarray(curve)


def log_buckets(n: int, first: int = 1, per_octave: int = 4) -> list[int]:
    """Edges of buckets of the positions ``0 .. n - 1``, evenly spaced on a log scale: ``[0, e1, e2, ..., n]``.

    Every bucket holds at least ``first`` positions, and each ends
    ``2 ** (1 / per_octave)`` times further along than the one before it when
    that is more, which averages out the noise of a few dozen windows.
    """
    first, edges = max(1, first), [0]
    while edges[-1] < n:
        edges.append(min(n, max(edges[-1] + first, round(edges[-1] * 2 ** (1 / per_octave)))))
    return edges


def position_buckets(train_length: int, length: int) -> list[tuple[int, int]]:
    """Window position ranges [start, end): [0, T), [T, 2T), [2T, 4T), ... up to ``length``."""
    edges = [0, train_length]
    while edges[-1] < length:
        edges.append(min(2 * edges[-1], length))
    return [(a, b) for a, b in pairwise(edges) if a < length]


def doubling_bins(length: int) -> list[tuple[int, int]]:
    """Window position ranges [start, end) of positions counted from 1 (the first prediction) in doublings: 1, 2-3,
    4-7, ..., the last reaching ``length`` (so a power-of-two length ends in ``L/2 .. L``, not a bin of one)."""
    edges = [1]
    while 2 * edges[-1] < length:
        edges.append(2 * edges[-1])
    return [(a - 1, b - 1) for a, b in pairwise([*edges, length + 1])]


def bucket_bpb(row: dict, buckets: list[tuple[int, int]]) -> list[float | None]:
    """Bits per byte of the targets at window positions within each bucket."""
    nats = np.asarray(row["position_loss"]) * row["windows"]
    nbytes = np.asarray(row["position_bytes"])
    return [float(nats[a:b].sum() / math.log(2) / max(nbytes[a:b].sum(), 1)) for a, b in buckets]


def mean_rows(rows: list[dict]) -> list[dict]:
    """One row per label and length: with several seeds the mean bits per byte of both readings, their sample std
    (``bpb_std``, ``sliding_bpb_std``) and the mean per-position loss.

    Rows of a single seed come back as they are.
    """
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["label"], row["eval_length"]), []).append(row)
    if all(len(g) == 1 for g in groups.values()):
        return rows
    out = []
    for group in groups.values():
        first = dict(group[0])
        first["seeds"] = [r.get("seed") for r in group]
        for key in READINGS:
            values = [r[key] for r in group if r.get(key) is not None]
            if values:
                first[key], std = mean_std(values)
                first[f"{key}_std"] = std or 0.0
        if first["bpb"] is not None:
            first["position_loss"] = list(np.mean([r["position_loss"] for r in group], axis=0))
        out.append(first)
    return out


def _cell(row: dict | None, key: str = "bpb") -> str:
    if row is None:
        return "-"
    if row.get(key) is None:
        return "n/a"
    return f"{row[key]:.4f}" + (f"±{row[key + '_std']:.4f}" if row.get(key + "_std") is not None else "")


def _stride_note(rows: list[dict]) -> str:
    """How the sliding reading's stride was chosen, from the rows: ``L / 2`` or a fixed number of tokens."""
    strides = {(r["eval_length"], r["eval_stride"]) for r in rows if r.get("eval_stride")}
    if strides and all(s == max(1, L // 2) for L, s in strides):
        return "stride L/2: every target after the first window sees at least L/2 tokens"
    fixed = sorted({s for _, s in strides})
    return (
        f"stride {', '.join(map(str, fixed))} tokens (at most L): "
        "every target after the first window sees at least L - stride tokens"
    )


def _grid(rows: list[dict], lengths: list[int]) -> dict[str, dict[int, dict]]:
    grid: dict[str, dict[int, dict]] = {}
    for row in rows:
        grid.setdefault(row["label"], {})[row["eval_length"]] = row
    return grid


def format_tables(rows: list[dict], T: int, lengths: list[int], train_rows: list[TrainRecord]) -> str:
    """The terminal tables: bits per byte by length, and by window position at the longest length."""
    grid = _grid(rows, lengths)
    width = max(len(label) for label in grid) + 2
    cell = 16 if any(r.get("bpb_std") is not None for r in rows) else 12
    head = "".join(f"{f'{L // T}x={L}':>{cell}}" for L in lengths)
    lines = []
    for key, title in READINGS.items():
        if not any(row.get(key) is not None for row in rows):
            continue  # a study written before the sliding reading
        note = f"; {_stride_note(rows)}" if key == "sliding_bpb" else ""
        lines += [""] if lines else []
        lines += [
            f"validation bits per byte by evaluation length, {title}{note}, trained at T={T} (lower is better)",
            f"{'scheme':<{width}}{head}",
        ]
        for label, cells in grid.items():
            lines.append(f"{label:<{width}}" + "".join(f"{_cell(cells.get(L), key):>{cell}}" for L in lengths))
        if key == "bpb" and any(row["bpb"] is None for row in rows):
            # The reason is too long for a cell and would push the row out of its columns.
            lines.append(f"n/a: no rows past T={T} (a learned position table has T rows)")
    longest = max(lengths)
    buckets = position_buckets(T, longest)
    if len(buckets) > 1:
        lines += ["", f"where each scheme breaks: bits per byte by position in {longest}-token windows"]
        lines.append(f"{'scheme':<{width}}" + "".join(f"{f'{a}-{b - 1}':>12}" for a, b in buckets))
        for label, cells in grid.items():
            row = cells.get(longest)
            if row is None or row["bpb"] is None:
                continue
            lines.append(f"{label:<{width}}" + "".join(f"{v:>12.4f}" for v in bucket_bpb(row, buckets)))
    lines += [
        "",
        "trained: " + "; ".join(f"{r.label} {r.steps} steps ({r.tokens_per_second:,.0f} tokens/s)" for r in train_rows),
    ]
    return "\n".join(lines)


def markdown_tables(rows: list[dict], T: int, lengths: list[int], train_rows: list[TrainRecord]) -> str:
    """The same tables as Markdown, for a README."""
    grid = _grid(rows, lengths)
    lines = []
    for key, title in READINGS.items():
        if not any(row.get(key) is not None for row in rows):
            continue
        note = f" ({_stride_note(rows)})" if key == "sliding_bpb" else ""
        lines += [
            f"Validation bits per byte by evaluation length, {title}{note} (trained at T = {T}; lower is better):",
            "",
        ]
        lines.append("| scheme | " + " | ".join(f"{L // T}x ({L})" for L in lengths) + " |")
        lines.append("| --- |" + " ---: |" * len(lengths))
        for label, cells in grid.items():
            values = []
            for L in lengths:
                row = cells.get(L)
                values.append(
                    NOT_AVAILABLE
                    if row is not None and row.get(key) is None and row["bpb"] is None
                    else _cell(row, key)
                )
            lines.append(f"| `{label}` | " + " | ".join(values) + " |")
        lines.append("")
    longest = max(lengths)
    buckets = position_buckets(T, longest)
    if len(buckets) > 1:
        lines += ["", f"Bits per byte by position within {longest}-token windows:", ""]
        lines.append("| scheme | " + " | ".join(f"{a}-{b - 1}" for a, b in buckets) + " |")
        lines.append("| --- |" + " ---: |" * len(buckets))
        for label, cells in grid.items():
            row = cells.get(longest)
            if row is not None and row["bpb"] is not None:
                lines.append(f"| `{label}` | " + " | ".join(f"{v:.4f}" for v in bucket_bpb(row, buckets)) + " |")
    lines += _doubling_table(grid, longest)
    lines += [
        "",
        "Training: "
        + "; ".join(
            f"`{r.label}` {r.steps} steps, {r.val_bpb:.4f} bits per byte at its training length" for r in train_rows
        )
        + " (T for the base models, M x T for the fine-tuned ones).",
    ]
    return "\n".join(lines) + "\n"


def _doubling_table(grid: dict[str, dict[int, dict]], longest: int) -> list[str]:
    """Markdown lines: bits per byte by position (from 1) in doubling bins of the ``longest``-token windows (or the
    longest each row reached: a learned table's T), how much context a window's target had."""
    bins = doubling_bins(longest)
    lines = [
        "",
        f"Bits per byte by position within the longest windows each row reads ({longest} tokens; a learned table's "
        "T), in doubling bins (position 1 is the first prediction, made from one token):",
        "",
        "| scheme | " + " | ".join(str(a + 1) if b - a == 1 else f"{a + 1}-{b}" for a, b in bins) + " |",
        "| --- |" + " ---: |" * len(bins),
    ]
    for label, cells in grid.items():
        reached = [L for L, row in cells.items() if row.get("bpb") is not None and row.get("position_loss")]
        if reached:
            row = cells[max(reached)]
            shown = [bucket_bpb(row, [(a, b)])[0] if b <= len(row["position_loss"]) else None for a, b in bins]
            lines.append(f"| `{label}` | " + " | ".join("-" if v is None else f"{v:.4f}" for v in shown) + " |")
    return lines


def plot(rows: list[dict], T: int, lengths: list[int]) -> bytes:
    """PNG bytes: bits per byte against evaluation length (log x) in both readings, and per position at the longest
    length."""
    from octlm.inspect.figures import Figure  # matplotlib, whatever MPLBACKEND says

    grid = _grid(rows, lengths)
    fig = Figure(figsize=(18, 5.2), dpi=110)
    left, middle, right = fig.subplots(1, 3)
    middle.sharey(left)
    longest = max(lengths)
    # A fine-tuned model ("rope+yarn@4x") shares its method's colour and differs in line style, so each
    # pair reads at a glance and the nine methods stay within the ten colours of the default cycle.
    families = list(dict.fromkeys(label.split("@")[0] for label in grid))
    for label, cells in grid.items():
        scaled, extended = "+" in label, "@" in label
        xs = [L for L in lengths if L in cells and cells[L]["bpb"] is not None]
        ys = [cells[L]["bpb"] for L in xs]
        style = dict(
            linestyle="--" if scaled else "-", marker="o" if not scaled else ".", linewidth=1.2 if scaled else 2.0
        )
        if extended:
            style = dict(linestyle=":", marker="s", linewidth=1.6)
        colour = f"C{families.index(label.split('@')[0]) % 10}"
        (line,) = left.plot(xs, ys, label=label, color=colour, **style)
        spread = [cells[L].get("bpb_std") for L in xs]
        if xs and None not in spread:  # mean ± std over seeds
            left.fill_between(xs, np.subtract(ys, spread), np.add(ys, spread), color=line.get_color(), alpha=0.15)
        slid = [L for L in xs if cells[L].get("sliding_bpb") is not None]
        middle.plot(slid, [cells[L]["sliding_bpb"] for L in slid], color=colour, **style)
        if xs:  # per position at the longest length this label reached (a learned table stops at T)
            centres, curve = position_curve(cells[xs[-1]], first=max(1, T // 16))
            right.plot(centres, curve, color=line.get_color(), linestyle=style["linestyle"], linewidth=1.0, label=label)
    for ax in (left, middle, right):
        ax.axvline(T, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("validation bits per byte")
    for ax in (left, middle):
        ax.set_xticks(lengths, [str(L) for L in lengths])
        ax.set_xlabel(f"evaluation length (tokens); dotted: training length T={T}")
    left.set_title("non-overlapping windows (each starts from nothing)")
    middle.set_title(f"sliding windows ({_stride_note(rows).split(':')[0]}): context, not position in a window")
    left.legend(fontsize=8, ncol=2 if len(grid) > 9 else 1)  # one column of 16 labels would hide the lines
    right.set_xlabel(f"position in a {longest}-token window (1 = first prediction; log buckets)")
    right.set_title("where each scheme breaks: bits per byte along the window")
    fig.tight_layout()
    from octlm.inspect.figures import png_bytes

    return png_bytes(fig)


__all__ = [
    "NOT_AVAILABLE",
    "bucket_bpb",
    "doubling_bins",
    "log_buckets",
    "format_tables",
    "markdown_tables",
    "mean_rows",
    "plot",
    "position_buckets",
    "position_curve",
]
