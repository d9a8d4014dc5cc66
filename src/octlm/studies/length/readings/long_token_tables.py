"""The long-context tokens section of ``length.md`` (:mod:`~octlm.studies.length.readings.long_tokens`), from its
records alone.

How the targets were marked and how many, a few of them in context, then per
reading a table of every row's bits per byte on the marked targets beside its
figure on every target, and the study's differences and findings
(:mod:`octlm.studies.length.findings`) computed over the marked targets.
"""

from __future__ import annotations

import numpy as np

from octlm.studies.length.findings import comparison_markdown, findings_markdown
from octlm.studies.length.readings.long_tokens import COMPARISON, ROW, SUMMARY
from octlm.studies.length.tables import READINGS


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _grid(rows: list[dict]) -> dict[str, dict[int, list[dict]]]:
    """``{label: {length: [record per seed]}}`` in the records' order."""
    grid: dict[str, dict[int, list[dict]]] = {}
    for r in rows:
        grid.setdefault(r["label"], {}).setdefault(r["eval_length"], []).append(r)
    return grid


def _cell(seeds: list[dict] | None, reading: str) -> str:
    if not seeds:
        return "-"
    marked, plain = _mean([r.get(reading) for r in seeds]), _mean([r.get(f"plain_{reading}") for r in seeds])
    if marked is None:
        return "n/a"
    return f"{marked:.4f} ({'n/a' if plain is None else f'{plain:.4f}'})"


def marked_line(summary: dict) -> str:
    """How the targets were marked and how many, in sentences, from the ``long_tokens`` record."""
    seeds = len(summary["reference_seeds"])
    share = summary["marked"] / max(summary["text_targets"], 1)
    return (
        f"Reference: `{summary['reference']}`, the row with the lowest sliding bits per byte at the longest length "
        f"({summary['long_length']} tokens), its nats averaged over {seeds} seed{'s' if seeds > 1 else ''}. Short "
        f"context: sliding windows of {summary['short_length']} tokens, stride {summary['short_stride']} (each target "
        f"after the first window sees {summary['short_length'] - summary['short_stride']} to "
        f"{summary['short_length']} tokens); long: sliding windows of {summary['long_length']}, stride "
        f"{summary['long_stride']}. A target is marked when its nats fall by more than {summary['gain_nats']:g} from "
        f"short to long context and stay below {summary['loss_nats']:g} with long context (LongPPL's alpha = "
        f"{summary['gain_nats']:g} and beta = -{summary['loss_nats']:g}: Fang et al. 2024, arXiv 2410.23771). "
        f"**{summary['marked']:,} of {summary['text_targets']:,} text targets ({share:.2%}), "
        f"{summary['marked_bytes']:,} of {summary['text_bytes']:,} bytes.**"
    )


def example_lines(summary: dict) -> list[str]:
    """One bullet per example: the tokens before it, the marked token in brackets, the reference's nats."""
    if not summary["examples"]:
        return []
    lines = [
        "Marked targets evenly spread over the validation text: the tokens before each, the marked one in brackets, "
        "and the reference's nats with short → long context:",
        "",
    ]
    for e in summary["examples"]:
        lines.append(f"- `…{e['before']}[{e['token']}]` {e['short_nats']:.2f} → {e['long_nats']:.2f}")
    return [*lines, ""]


def long_tokens_markdown(records: list[dict], train_length: int, lengths: list[int]) -> str:
    """The section: :func:`marked_line`, :func:`example_lines`, a table per reading (each cell: bits per byte on the
    marked targets, in brackets on every target; the mean over seeds), then the differences and findings over the
    marked targets."""
    summary = next(r for r in records if r["record"] == SUMMARY)
    rows = [r for r in records if r["record"] == ROW]
    compared = [r for r in records if r["record"] == COMPARISON]
    lines = [
        "## Long-context tokens",
        "",
        "The validation targets a reference row predicts far better from long context than from short, and every "
        "row's bits per byte on those targets alone (`--long-tokens`).",
        "",
        marked_line(summary),
        "",
        *example_lines(summary),
    ]
    if not rows or summary["marked"] == 0:
        return "\n".join([*lines, "No target is marked, so there is nothing to read on them.", ""])
    grid = _grid(rows)
    for reading, name in READINGS.items():
        lines += [
            f"**Bits per byte on the marked targets, {name}** (in brackets: on every target, as in the tables "
            "above). The reference's own figure at the longest length is low by construction: its targets were "
            "chosen for a low loss there.",
            "",
            "| row | " + " | ".join(f"{L // train_length}x ({L})" for L in lengths) + " |",
            "| --- |" + " ---: |" * len(lengths),
        ]
        lines += [
            f"| `{label}` | " + " | ".join(_cell(cells.get(L), reading) for L in lengths) + " |"
            for label, cells in grid.items()
        ]
        lines.append("")
    if compared:
        lines += [
            "On the marked targets only (the same pairs and bootstrap as the study's comparisons, over the windows "
            "that hold a marked target):",
            "",
            comparison_markdown(compared, train_length, lengths),
            findings_markdown(compared, train_length),
        ]
    return "\n".join(lines)


__all__ = ["example_lines", "long_tokens_markdown", "marked_line"]
