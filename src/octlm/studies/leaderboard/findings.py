"""The README's findings, written from the leaderboard's records so that every sentence carries its own evidence.

Each finding is one corpus and one question (which row is best at T; past T; which untrained RoPE scaling; what
learned sinks and the output gate do to RoPE), answered at the lengths that matter for it in the reading of
non-overlapping windows: the best row's bits per byte, the rows the 95% interval does not separate from it, and the
nearest row it is ahead of, with its difference, interval and how many seeds alone agree. Nothing is said that a
column record does not hold, so a finding can be no stronger than its interval and seeds.
"""

from __future__ import annotations

from octlm.studies.length.findings import signed

#: The reading the findings speak of: windows of L read from their start (the README table's).
READING = "bpb"
#: The questions, in order: (title, group or None for the whole board, multipliers of T).
QUESTIONS = (
    ("At T", None, (1,)),
    ("Past T", None, (4, 16)),
    ("RoPE's untrained scalings", "scalings", (4, 16)),
    ("RoPE with learned sinks or the output gate", "sinks and gate", (1, 16)),
)


def _difference(cell: dict, seeds: int) -> str:
    return (
        f"{signed(cell['difference'])} [{signed(cell['low'])}, {signed(cell['high'])}], "
        f"{cell['seeds_agreeing']}/{seeds} seeds"
    )


def clause(col: dict) -> str:
    """What one column says: ``at 4x `alibi` 2.1110; not separated: `kerple` (+0.0020 [-0.0040, +0.0080], 1/3
    seeds); next `fox` +0.0310 [+0.0200, +0.0420], 3/3 seeds``."""
    where = f"at {col['multiplier']}x"
    if col["best"] is None:
        return f"{where} not run on every seed"
    cells = [c for c in col["cells"] if c["status"] not in ("best", "n/a", "not run", "equal")]
    best = next(c for c in col["cells"] if c["status"] == "best")
    seeds = len(best["seeds"])
    text = f"{where} `{best['label']}` {best['bpb']:.4f}"
    tied = [c for c in cells if c["status"] == "not separated"]
    if tied:
        text += "; not separated: " + ", ".join(f"`{c['label']}` ({_difference(c, seeds)})" for c in tied)
    behind = sorted((c for c in cells if c["status"] == "behind"), key=lambda c: c["difference"])
    if behind:
        text += f"; next `{behind[0]['label']}` {_difference(behind[0], seeds)}"
    return text


def findings(records: list[dict]) -> str:
    """The findings as Markdown bullets, per corpus, from ``leaderboard.jsonl``'s records."""
    head = next(r for r in records if r["record"] == "leaderboard")
    lines = []
    for corpus, title in head["corpora"].items():
        found = [
            r
            for r in records
            if r["record"] in ("column", "group") and r["corpus"] == corpus and r["reading"] == READING
        ]
        seeds = sorted({s for r in found for c in r["cells"] for s in c.get("seeds", [])})
        for question, group, multipliers in QUESTIONS:
            said = [clause(c) for m in multipliers if (c := _column(found, m, group)) is not None]
            if said:
                lines.append(f"* **{question}**, {title}, seeds {_seeds(seeds)}: " + "; ".join(said) + ".")
    return "\n".join(lines)


def _column(found: list[dict], multiplier: int, group: str | None) -> dict | None:
    """The whole board's column at ``multiplier`` (``group`` None), or that group's; None where there is none."""
    kind = "column" if group is None else "group"
    return next(
        (r for r in found if r["multiplier"] == multiplier and r["record"] == kind and r.get("group") == group), None
    )


def _seeds(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 else ", ".join(map(str, seeds))


__all__ = ["QUESTIONS", "READING", "clause", "findings"]
