"""The length study's comparisons in ``length.md``: a table of differences with their intervals, and the findings.

The findings are sentences the study writes from its ``comparison`` records
(:mod:`octlm.studies.length.comparisons`): for each pair of rows and each
length, the ordering when its interval leaves out zero, that the two do not
differ when it holds zero, or that they agree to the tables' four decimals.
Every number in them is a record's, so no one reads an ordering off the
tables that the windows and seeds do not support.
"""

from __future__ import annotations

from octlm.studies.length.comparisons import comparisons
from octlm.studies.length.tables import READINGS
from octlm.studies.shared.confidence import BOOTSTRAP_SEED, CONFIDENCE, RESAMPLES

#: What each kind of comparison sets against what (octlm.studies.length.comparisons.reference).
KINDS = {
    "schemes": "both as trained at T",
    "scaling": "a RoPE scaling against none",
    "attention scale": "an attention scale against none",
    "fine-tune": "fine-tuned against untrained at the new length",
}


def signed(value: float) -> str:
    """A difference in bits per byte to 4 decimals with its sign (``+0.0123``, ``-0.0123``; zero unsigned)."""
    text = f"{value:+.4f}"
    return "0.0000" if text in ("+0.0000", "-0.0000") else text


def _interval(record: dict) -> str:
    return f"[{signed(record['low'])}, {signed(record['high'])}]"


def method_note(records: list[dict]) -> str:
    """How the intervals were computed, in one sentence, from the records."""
    seeds = max(len(r["seeds"]) for r in records)
    crossed = (
        f"; with {seeds} seeds, each resample also draws the seeds with replacement, crossed with the windows, and "
        "averages their differences"
        if seeds > 1
        else ""
    )
    return (
        f"{CONFIDENCE:.0%} intervals from a paired bootstrap over the validation windows of each length: "
        f"the same windows for both rows, resampled with replacement, {RESAMPLES:,} resamples, "
        f"generator seed {BOOTSTRAP_SEED}{crossed}"
    )


def _grouped(records: list[dict]) -> dict[str, dict[tuple[str, str, str], dict[int, dict]]]:
    """``{reading: {(kind, a, b): {length: record}}}`` in the records' order."""
    grouped: dict[str, dict[tuple[str, str, str], dict[int, dict]]] = {}
    for r in records:
        grouped.setdefault(r["reading"], {}).setdefault((r["kind"], r["a"], r["b"]), {})[r["eval_length"]] = r
    return grouped


def comparison_markdown(records: list[dict], train_length: int, lengths: list[int]) -> str:
    """One table per reading: a row per comparison (row a minus row b, bits per byte), a column per length, each cell
    the difference and its interval, the difference in bold when the interval leaves out zero."""
    if not records:
        return ""
    lines = []
    for reading, compared in _grouped(records).items():
        lines += [
            f"**Differences in bits per byte, {READINGS[reading]}**, first row minus second (negative: the first "
            f"predicts better), with {method_note(records)}. In bold: the interval leaves out zero.",
            "",
            "| comparison | " + " | ".join(f"{L // train_length}x ({L})" for L in lengths) + " |",
            "| --- |" + " ---: |" * len(lengths),
        ]
        for (_, a, b), cells in compared.items():
            shown = []
            for L in lengths:
                r = cells.get(L)
                bold = r is not None and r["verdict"] in ("a", "b")
                shown.append(
                    "-"
                    if r is None
                    else f"{'**' if bold else ''}{signed(r['difference'])}{'**' if bold else ''} {_interval(r)}"
                )
            lines.append(f"| `{a}` − `{b}` | " + " | ".join(shown) + " |")
        lines.append("")
    return "\n".join(lines)


def sentence(record: dict, train_length: int) -> str:
    """What one comparison says, as a sentence: the ordering with its size and interval, or that there is none."""
    a, b, length = record["a"], record["b"], record["eval_length"]
    at = f"At {length // train_length}x T ({length} tokens)"
    said, n_seeds = record["verdict"], len(record["seeds"])
    difference = f"difference {signed(record['difference'])} {_interval(record)}"
    if said == "equal":
        return f"{at}, `{a}` and `{b}` agree to 4 decimals ({difference})."
    if said == "neither":
        return f"{at}, `{a}` and `{b}` do not differ at {record['confidence']:.0%} ({difference})."
    better, worse = (a, b) if said == "a" else (b, a)
    sign = -1 if said == "a" else 1  # the lead and its interval as positive numbers: a - b < 0 when a is better
    size = sign * record["difference"]
    low, high = sorted([sign * record["low"], sign * record["high"]])
    agreeing = record["seeds_agreeing"]
    seeds = ""
    if n_seeds > 1:
        every = "both" if n_seeds == 2 else f"all {n_seeds}"
        seeds = f", in {every} seeds" if agreeing == n_seeds else f", in {agreeing} of the {n_seeds} seeds"
        seeds += " taken one by one"
    return (
        f"{at}, `{better}` predicts better than `{worse}` by {size:.4f} bits per byte [{low:.4f}, {high:.4f}]{seeds}."
    )


def findings_markdown(records: list[dict], train_length: int) -> str:
    """The findings section: per reading a count, then per comparison one bullet of :func:`sentence`, one per
    length."""
    if not records:
        return ""
    confidence = f"{records[0]['confidence']:.0%}"
    lines = [
        f"**Findings**, written by the study from the comparisons above: at each length, the ordering of two rows "
        f"when its {confidence} interval leaves out zero, and that they do not differ when it does not (lower bits "
        "per byte predicts better).",
        "",
    ]
    for reading, compared in _grouped(records).items():
        found = [r for cells in compared.values() for r in cells.values()]
        held = sum(r["verdict"] in ("a", "b") for r in found)
        equal = sum(r["verdict"] == "equal" for r in found)
        lines += [
            f"In {READINGS[reading]}, {len(found)} comparisons: an ordering at {confidence} in {held}, no difference "
            f"at {confidence} in {len(found) - held - equal}, agreement to 4 decimals in {equal}.",
            "",
        ]
        for (kind, a, b), cells in compared.items():
            told = " ".join(sentence(r, train_length) for r in cells.values())
            lines.append(f"- `{a}` against `{b}` ({KINDS.get(kind, kind)}). {told}")
        lines.append("")
    return "\n".join(lines)


def confidence_section(rows: list[dict], train_length: int, lengths: list[int]) -> tuple[list[dict], str]:
    """The ``comparison`` records of a study's eval rows and what ``length.md`` ends with: the table of differences
    and the findings (empty for rows without per-window losses, from an octlm older than this one)."""
    records = comparisons(rows)
    if not records:
        return records, ""
    table = comparison_markdown(records, train_length, lengths)
    return records, f"{table}\n{findings_markdown(records, train_length)}"


__all__ = [
    "KINDS",
    "comparison_markdown",
    "confidence_section",
    "findings_markdown",
    "method_note",
    "sentence",
    "signed",
]
