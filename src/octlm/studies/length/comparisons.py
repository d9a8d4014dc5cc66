"""Which rows of the length study are compared, and the ``comparison`` records of ``length.jsonl``.

Every comparison is of two rows at one length and in one reading
(:data:`octlm.studies.length.tables.READINGS`), as a paired bootstrap over
that reading's windows, crossed with the seeds (:mod:`octlm.studies.shared.confidence`):

* ``schemes``: every pair of rows trained as they are (the schemes, and the ``--layouts`` rows), in the tables'
  order;
* ``scaling``: a row under a RoPE scaling against the same row plain (``rope+yarn`` against ``rope``);
* ``attention scale``: a row under ``--attention-scales`` against the same row plain (``rope+logn`` against ``rope``);
* ``fine-tune``: a fine-tuned model against the model it started from, under the same method and untrained at the
  new length (``rope+yarn@4x`` against ``rope+yarn``: the curve's step 0).

The per-window losses these need are in the eval rows: ``window_nats`` and
``sliding_window_nats`` (summed nats of each window's text targets, rounded to
1e-4 nats, a change of at most 1e-8 bits per byte on the shortest split), and
the bytes of each window's targets, which are the same for every row at a
length (the same targets), once per length and reading in a ``window_bytes``
record (:func:`stored`). :func:`recompute` gives the comparisons again from
those records.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np

from octlm.studies.shared.confidence import BOOTSTRAP_SEED, CONFIDENCE, RESAMPLES, compare_many

#: Per reading (the key of its bits per byte in an eval row): the keys of its per-window nats and bytes.
WINDOWS = {"bpb": ("window_nats", "window_bytes"), "sliding_bpb": ("sliding_window_nats", "sliding_window_bytes")}
#: Differences whose interval lies within ± half the tables' last digit (4 decimals) are reported equal: rows that
#: compute the same thing (every RoPE scaling at 1x) differ by float rounding alone.
TIE = 5e-5


def window_fields(reading: str, result) -> dict:
    """The per-window nats (rounded to 1e-4) and bytes of an :class:`octlm.train.evaluate.EvalResult` read with
    ``per_block``, under the keys of ``reading``."""
    nats, nbytes = WINDOWS[reading]
    return {nats: [round(float(v), 4) for v in result.block_nats], nbytes: [int(v) for v in result.block_bytes]}


def reference(row: dict) -> tuple[str, str] | None:
    """``(kind, label)`` of the row an eval row is compared against, or ``None`` for a row of its own (a scheme, or a
    ``--layouts`` row), which is compared with every other such row.

    Labels say it (octlm.studies.length.scoring.eval_row): ``X@Mx`` is ``X`` fine-tuned at M x T, ``X+method`` is
    ``X`` under a RoPE scaling or an attention scale.
    """
    label = row["label"]
    if "@" in label:
        return "fine-tune", label.rsplit("@", 1)[0]
    if "+" in label:
        return ("attention scale" if row.get("attention_scale") else "scaling"), label.rsplit("+", 1)[0]
    return None


def pairs(rows: list[dict]) -> list[tuple[str, str, str]]:
    """``(kind, a, b)`` of every comparison of the study's rows, in the tables' order: a minus b."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    first = {}
    for row in rows:
        first.setdefault(row["label"], row)
    base = [label for label in labels if reference(first[label]) is None]
    found = [("schemes", a, b) for a, b in combinations(base, 2)]
    for label in labels:
        if (ref := reference(first[label])) is not None and ref[1] in first:
            found.append((ref[0], label, ref[1]))
    return found


def _windows(rows: list[dict], reading: str) -> dict[tuple[str, int], dict[int, dict]]:
    """``{(label, length): {seed: row}}`` of the rows that hold this reading's windows."""
    nats, _ = WINDOWS[reading]
    found: dict[tuple[str, int], dict[int, dict]] = {}
    for row in rows:
        if row.get(nats) is not None:
            found.setdefault((row["label"], row["eval_length"]), {})[row.get("seed")] = row
    return found


def _paired(a: dict[int, dict], b: dict[int, dict], reading: str) -> tuple[list, np.ndarray, np.ndarray, list] | None:
    """The seeds both rows have, their nats [S, N] each and the windows' bytes; ``None`` when they cannot be paired
    (no common seed, or other windows)."""
    nats, nbytes = WINDOWS[reading]
    seeds = sorted((s for s in a if s in b), key=lambda s: (s is None, s))
    if not seeds:
        return None
    byte_lists = [r[nbytes] for s in seeds for r in (a[s], b[s])]
    if any(other != byte_lists[0] for other in byte_lists[1:]):
        return None
    return seeds, np.array([a[s][nats] for s in seeds]), np.array([b[s][nats] for s in seeds]), byte_lists[0]


def verdict(low: float, high: float) -> str:
    """``a`` (row a predicts better: the whole interval below zero), ``b``, ``equal`` (within :data:`TIE`) or
    ``neither`` (the interval holds zero)."""
    if max(abs(low), abs(high)) < TIE:
        return "equal"
    return "a" if high < 0 else "b" if low > 0 else "neither"


def comparisons(rows: list[dict]) -> list[dict]:
    """The ``comparison`` records of a study's eval rows (every seed's, with their window fields): per reading, per
    length, each pair of :func:`pairs` whose rows both hold that reading's windows there."""
    records, compared = [], pairs(rows)
    for reading in WINDOWS:
        scored = _windows(rows, reading)
        for length in sorted({L for _, L in scored}):
            found = [
                (kind, a, b, paired)
                for kind, a, b in compared
                if (a, length) in scored
                and (b, length) in scored
                and (paired := _paired(scored[(a, length)], scored[(b, length)], reading)) is not None
            ]
            by_bytes: dict[tuple, list] = {}  # pairs over the same windows share the window draws
            for entry in found:
                by_bytes.setdefault(tuple(entry[3][3]), []).append(entry)
            for nbytes, group in by_bytes.items():
                results = compare_many([(p[1], p[2]) for *_, p in group], np.array(nbytes))
                for (kind, a, b, paired), result in zip(group, results, strict=True):
                    multiplier = next(iter(scored[(a, length)].values()))["multiplier"]
                    records.append(_record(reading, length, multiplier, kind, a, b, paired, result))
    return records


def _record(reading: str, length: int, multiplier: int, kind: str, a: str, b: str, paired: tuple, result) -> dict:
    seeds, nats_a, _, _ = paired
    combined = result.combined
    said = verdict(combined.low, combined.high)
    agreeing = sum(verdict(s.low, s.high) == said for s in result.per_seed)
    return {
        "record": "comparison",
        "reading": reading,
        "eval_length": length,
        "multiplier": multiplier,
        "kind": kind,
        "a": a,
        "b": b,
        **combined.as_dict(),
        "verdict": said,
        "better": {"a": a, "b": b}.get(said),
        "seeds": [{"seed": s, **i.as_dict()} for s, i in zip(seeds, result.per_seed, strict=True)],
        "seeds_agreeing": agreeing,
        "windows": nats_a.shape[1],
        "confidence": CONFIDENCE,
        "resamples": RESAMPLES,
        "bootstrap_seed": BOOTSTRAP_SEED,
    }


def stored(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The eval rows as ``length.jsonl`` keeps them, and the ``window_bytes`` records: each length's and reading's
    window bytes once, and left out of every row that shares them."""
    shared: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        for reading, (_, nbytes) in WINDOWS.items():
            if row.get(nbytes) is not None:
                shared.setdefault((reading, row["eval_length"]), row[nbytes])
    kept = []
    for row in rows:
        row = dict(row)
        for reading, (_, nbytes) in WINDOWS.items():
            if row.get(nbytes) is not None and row[nbytes] == shared[(reading, row["eval_length"])]:
                del row[nbytes]
        kept.append(row)
    records = [{"record": "window_bytes", "reading": r, "eval_length": L, "bytes": b} for (r, L), b in shared.items()]
    return kept, records


def restored(records: list[dict]) -> list[dict]:
    """The eval rows of ``length.jsonl`` records with their window bytes back in them (:func:`stored` undone)."""
    shared = {(r["reading"], r["eval_length"]): r["bytes"] for r in records if r["record"] == "window_bytes"}
    rows = []
    for record in (r for r in records if r["record"] == "eval"):
        row = dict(record)
        for reading, (nats, nbytes) in WINDOWS.items():
            if row.get(nats) is not None and nbytes not in row:
                row[nbytes] = shared[(reading, row["eval_length"])]
        rows.append(row)
    return rows


def recompute(study: str | Path) -> list[dict]:
    """The comparison records of a finished study folder, computed again from its ``length.jsonl``."""
    text = (Path(study) / "length.jsonl").read_text(encoding="utf-8")
    return comparisons(restored([json.loads(line) for line in text.splitlines() if line.strip()]))


__all__ = ["TIE", "WINDOWS", "comparisons", "pairs", "recompute", "reference", "restored", "stored", "verdict"]
