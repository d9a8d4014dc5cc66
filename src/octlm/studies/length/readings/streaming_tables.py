"""The ``--streaming`` section of ``length.md`` and its figure, ``streaming.png``, from the reading's records
(:mod:`octlm.studies.length.readings.streaming`), and what those records are."""

from __future__ import annotations

import math

import numpy as np

from octlm.studies.shared.core import mean_std

#: Record kinds: the streams' bytes (once), each model's segments, the refusals, the comparisons.
STREAMS, SEGMENTS, REFUSED, COMPARED = "streaming_streams", "streaming", "streaming_refused", "streaming_comparison"


def segments_of(records: list[dict]) -> dict[str, dict[int, np.ndarray]]:
    """``{label: {sinks: nats [seeds, K, segments]}}`` of the ``streaming`` records, seeds in order."""
    found: dict[str, dict[int, dict[int, list]]] = {}
    for r in records:
        if r["record"] == SEGMENTS:
            found.setdefault(r["label"], {}).setdefault(r["sinks"], {})[r["seed"]] = r["segment_nats"]
    return {
        label: {s: np.array([seeds[k] for k in sorted(seeds)], dtype=np.float64) for s, seeds in by_sinks.items()}
        for label, by_sinks in found.items()
    }


def _bpb(nats: np.ndarray, nbytes: np.ndarray, n: int) -> list[float]:
    """Bits per byte of each seed over the first ``n`` segments of every stream (nats [seeds, K, segments])."""
    return [float(seed[:, :n].sum() / math.log(2) / nbytes[:, :n].sum()) for seed in nats]


def _cell(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.4f}" + (f"±{std:.4f}" if std is not None else "")


def _interval(r: dict) -> str:
    text = f"{r['difference']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]"
    return f"**{text}**" if r["low"] > 0 or r["high"] < 0 else text


def _said(r: dict, T: int) -> str:
    """One sentence on sinks against none for a model at the longest length, from its comparison record."""
    where = f"at {r['eval_length'] // T}x T ({r['eval_length']} tokens)"
    numbers = f"{r['difference']:+.4f} bits per byte [{r['low']:+.4f}, {r['high']:+.4f}]"
    if r["high"] < 0:
        return f"`{r['label']}` {where}: keeping {r['sinks']} sinks lowers bits per byte ({numbers})."
    if r["low"] > 0:
        return f"`{r['label']}` {where}: keeping {r['sinks']} sinks raises bits per byte ({numbers})."
    return f"`{r['label']}` {where}: {r['sinks']} sinks and none do not differ at {r['confidence']:.0%} ({numbers})."


def streaming_markdown(records: list[dict], T: int, lengths: list[int]) -> str:
    """The section: bits per byte by length for each model and number of sinks (mean ± std over seeds), sinks minus
    none with its interval, a sentence per model at the longest length, and the models that cannot stream."""
    head = next(r for r in records if r["record"] == STREAMS)
    nbytes = np.asarray(head["segment_bytes"] or [[0]], dtype=np.float64)
    columns = [L for L in lengths if L % T == 0 and L <= head["stream_length"]]
    lines = [
        "## Streaming with sinks and a window",
        "",
        f"{head['streams']} streams of {head['stream_length']} validation targets, each target predicted by a decoder "
        f"whose cache holds the stream's first S tokens and its last {T} - S, at positions within the cache "
        f"(StreamingLLM, Xiao et al. 2023 §3.2; S = 0 is window attention). Bits per byte of the first L targets of "
        "every stream (lower is better; mean ± std over seeds):",
        "",
        "| model | S | " + " | ".join(f"{L // T}x ({L})" for L in columns) + " |",
        "| --- | ---: |" + " ---: |" * len(columns),
    ]
    found = segments_of(records)
    for label, by_sinks in found.items():
        for s, nats in sorted(by_sinks.items()):
            lines.append(
                f"| `{label}` | {s} | " + " | ".join(_cell(_bpb(nats, nbytes, L // T)) for L in columns) + " |"
            )
    compared = [r for r in records if r["record"] == COMPARED]
    if compared:
        first = compared[0]
        lines += [
            "",
            f"**{first['sinks']} sinks minus none**, bits per byte (negative: the sinks help), with "
            f"{first['confidence']:.0%} intervals from a paired bootstrap over the streams' segments of {T} targets "
            f"crossed with the seeds ({first['resamples']:,} resamples, generator seed {first['bootstrap_seed']}). "
            "In bold: the interval leaves out zero.",
            "",
            "| model | " + " | ".join(f"{L // T}x ({L})" for L in columns) + " |",
            "| --- |" + " ---: |" * len(columns),
        ]
        by_label: dict[str, dict[int, dict]] = {}
        for r in compared:
            by_label.setdefault(r["label"], {})[r["eval_length"]] = r
        for label, cells in by_label.items():
            lines.append(f"| `{label}` | " + " | ".join(_interval(cells[L]) if L in cells else "n/a" for L in columns))
            lines[-1] += " |"
        lines += ["", *(f"- {_said(cells[max(cells)], T)}" for cells in by_label.values())]
    refused = {r["label"]: r["reason"] for r in records if r["record"] == REFUSED}
    if refused:
        lines += ["", "Not streamed, and why:", ""]
        lines += [f"- `{label}`: {reason}" for label, reason in refused.items()]
    return "\n".join(lines) + "\n"


def streaming_plot(records: list[dict], T: int) -> bytes:
    """PNG bytes: bits per byte of each segment of ``T`` targets along the streams (mean over streams and seeds),
    one colour per model, solid without sinks and dashed with them, a dotted line at T."""
    from octlm.inspect.figures import Figure, png_bytes

    head = next(r for r in records if r["record"] == STREAMS)
    nbytes = np.asarray(head["segment_bytes"], dtype=np.float64)
    fig = Figure(figsize=(8, 5), dpi=110)
    ax = fig.subplots(1, 1)
    for k, (label, by_sinks) in enumerate(segments_of(records).items()):
        for s, nats in sorted(by_sinks.items()):
            ends = T * np.arange(1, nats.shape[2] + 1)
            ys = nats.sum(axis=1).mean(axis=0) / math.log(2) / nbytes.sum(axis=0)
            ax.plot(ends, ys, color=f"C{k % 10}", linestyle="-" if s == 0 else "--", label=f"{label}, S = {s}")
    ax.axvline(T, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel(f"targets along the stream (end of each segment of {T}; dotted: T)")
    ax.set_ylabel("validation bits per byte of the segment")
    ax.set_title(f"streaming: S sinks + the last {T} - S tokens in the cache")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return png_bytes(fig)


__all__ = ["COMPARED", "REFUSED", "SEGMENTS", "STREAMS", "segments_of", "streaming_markdown", "streaming_plot"]
