"""The leaderboard's columns: per corpus, reading and length, the best row and every other row against it.

The rows of one corpus come from several length studies (:func:`octlm.studies.leaderboard.protocol.studies`) of the
same text, tokenizer, training length and seeds, so they score the same validation windows and pair window by window
and seed by seed, as two rows of one study do. In each column the best row is the one with the lowest mean bits per
byte over the seeds; every other row is compared with it by the study's paired bootstrap over the windows crossed
with the seeds (:func:`octlm.studies.shared.confidence.compare_many`, all of a column's pairs under the same window
draws), giving its difference from the best with a 95% interval, and the verdict of
:func:`octlm.studies.length.comparisons.verdict`: ``behind`` (the whole interval above zero), ``not separated``
(the interval holds zero: the row may be as good as the best) or ``equal`` (it computes the same numbers, such as
every RoPE scaling at 1x). ``seeds_agreeing`` counts the seeds whose own interval gives the same verdict. The menu
board also compares each option's row with its controls the same way (:func:`pair_records`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from octlm.errors import OctlmError
from octlm.studies.length.comparisons import WINDOWS, restored, verdict
from octlm.studies.shared.confidence import BOOTSTRAP_SEED, CONFIDENCE, RESAMPLES, compare_many
from octlm.studies.shared.progress import PROGRESS

#: The options that decide which validation windows and seeds a study scores: a corpus's studies agree on all.
SAME_WINDOWS = ("text", "vocab_size", "train_length", "multipliers", "eval_tokens", "eval_stride", "val_fraction")
SAME_SEEDS = ("seed", "seeds")
#: The verdicts of :func:`octlm.studies.length.comparisons.verdict` for "row minus best", as the board says them.
SAID = {"b": "behind", "neither": "not separated", "equal": "equal", "a": "ahead"}


@dataclass(frozen=True)
class Source:
    """One finished length study of a corpus, and the rows it gives the board (study label -> board label; empty:
    every row that is no fine-tune, under its own label)."""

    corpus: str
    folder: Path
    rows: dict[str, str] = field(default_factory=dict)


def read_source(source: Source) -> tuple[dict, list[dict]]:
    """The study record and the eval rows (window bytes restored, labelled as the board names them) of a study.

    Raises:
        OctlmError: for a folder that holds no finished length study, naming it and the fix.
    """
    folder = Path(source.folder)
    if (folder / PROGRESS).is_dir():
        raise OctlmError(f"{folder}: the study is unfinished ({PROGRESS}/ remains); run its octlm length command again")
    try:
        lines = (folder / "length.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    except OSError:
        raise OctlmError(f"{folder}: no length.jsonl; run the leaderboard's study there first") from None
    except ValueError:
        raise OctlmError(f"{folder}/length.jsonl is not JSON Lines: cut short or edited; run its study again") from None
    head = next((r for r in records if r.get("record") == "study" and "train_length" in r), None)
    if head is None:
        raise OctlmError(f"{folder}/length.jsonl has no study record: not a length study of text")
    rows = []
    for row in restored(records):
        if "@" in row["label"] or (source.rows and row["label"] not in source.rows):
            continue
        rows.append({**row, "label": source.rows.get(row["label"], row["label"]), "study": str(folder)})
    missing = sorted(set(source.rows) - {r["label"] for r in restored(records)})
    if missing:
        raise OctlmError(f"{folder}: has no row {missing[0]!r}; is it the leaderboard's study?")
    return head, rows


def check_same_protocol(heads: list[tuple[Path, dict]]) -> None:
    """Refuse studies of one corpus that score different windows or seeds, naming the option and both studies."""
    (first, head), *others = heads
    for folder, other in others:
        for name in (*SAME_WINDOWS, *SAME_SEEDS):
            a, b = head["options"].get(name), other["options"].get(name)
            if a != b:
                raise OctlmError(
                    f"{first} and {folder} differ in --{name.replace('_', '-')} ({a!r} and {b!r}), so their rows do "
                    "not pair window by window; run both with the leaderboard's options"
                )


def _by_column(rows: list[dict]) -> dict[tuple[str, int], dict[str, dict[int, dict]]]:
    """``{(reading, length): {label: {seed: row}}}``."""
    found: dict[tuple[str, int], dict[str, dict[int, dict]]] = {}
    for row in rows:
        for reading in WINDOWS:
            found.setdefault((reading, row["eval_length"]), {}).setdefault(row["label"], {})[row["seed"]] = row
    return found


def _cell(label: str, seeds: dict[int, dict], reading: str) -> dict:
    values = [seeds[s][reading] for s in sorted(seeds)]
    spread = statistics.stdev(values) if len(values) > 1 else None
    return {"label": label, "bpb": statistics.fmean(values), "sd": spread, "seeds": sorted(seeds)}


def column(corpus: str, reading: str, length: int, labels: dict[str, dict[int, dict]], all_seeds: list[int]) -> dict:
    """One column's record: its best row, and each row's cell (``status``: ``best``, one of :data:`SAID`'s values,
    ``n/a`` for a row with no score there, such as a learned table past T, or ``not run`` for a row that lacks some
    seeds).

    Raises:
        OctlmError: when two rows' windows hold different bytes (not the same text or tokenizer).
    """
    nats_key, bytes_key = WINDOWS[reading]
    scored = {k: v for k, v in labels.items() if all(r.get(nats_key) is not None for r in v.values())}
    complete = [k for k, v in scored.items() if sorted(v) == all_seeds]
    windows = {k: np.array([scored[k][s][nats_key] for s in all_seeds], dtype=np.float64) for k in complete}
    nbytes = {tuple(r[bytes_key]) for k in complete for r in scored[k].values()}
    if len(nbytes) > 1:
        raise OctlmError(f"{corpus}: the rows' windows at {length} tokens differ in bytes: not the same text")
    record = {"record": "column", "corpus": corpus, "reading": reading, "eval_length": length, "best": None}
    record["multiplier"] = next(iter(next(iter(labels.values())).values()))["multiplier"]
    if not complete:
        return record | {"alone": False, "cells": [_status(k, labels, scored) for k in labels]}
    total = np.asarray(next(iter(nbytes)), dtype=np.float64)
    mean_bpb = {k: float((w.sum(axis=1) / total.sum()).mean() / math.log(2)) for k, w in windows.items()}
    best = min(complete, key=lambda k: (mean_bpb[k], k))
    others = [k for k in complete if k != best]
    results = dict(zip(others, compare_many([(windows[k], windows[best]) for k in others], total), strict=True))
    cells = []
    for label in labels:
        if label not in complete:
            cells.append(_status(label, labels, scored))
            continue
        cell = _cell(label, scored[label], reading)
        if label == best:
            cells.append(cell | {"status": "best"})
            continue
        combined, said = results[label].combined, verdict(results[label].combined.low, results[label].combined.high)
        agreeing = sum(verdict(s.low, s.high) == said for s in results[label].per_seed)
        cells.append(cell | {"status": SAID[said], **combined.as_dict(), "seeds_agreeing": agreeing})
    alone = all(c["status"] in ("behind", "equal") for c in cells if c["status"] not in ("best", "n/a", "not run"))
    return record | {"best": best, "alone": alone, "cells": cells}


def _status(label: str, labels: dict, scored: dict) -> dict:
    if label not in scored:
        return {"label": label, "status": "n/a"}
    return {"label": label, "status": "not run", "seeds": sorted(labels[label])}


def corpus_columns(
    corpus: str,
    sources: list[Source],
    groups: dict[str, Callable[[str], bool]] | None = None,
    controls: dict[str, tuple[str, ...]] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Every column of one corpus (by reading, then length), then each group's columns, and each study's record
    (folder, version, options).

    ``groups`` maps a sub-board's name to the rows it holds; its columns are records of kind ``group`` (the
    ``group`` field names it), compared within the group as a column is within the board, at the lengths where the
    group has two rows or more. ``controls`` (board label -> the labels it is compared with) adds the records of
    :func:`pair_records` after the columns.

    Raises:
        OctlmError: from :func:`read_source` and :func:`check_same_protocol`.
    """
    heads, rows = [], []
    for source in sources:
        head, found = read_source(source)
        heads.append((Path(source.folder), head))
        rows += found
    check_same_protocol(heads)
    all_seeds = sorted({r["seed"] for r in rows})
    by = _by_column(rows)
    order = sorted(by, key=lambda key: (list(WINDOWS).index(key[0]), key[1]))
    studies = [
        {"record": "source", "corpus": corpus, "folder": str(folder), "octlm_version": head.get("octlm_version")}
        | {"options": head["options"]}
        for folder, head in heads
    ]
    columns = [column(corpus, reading, length, by[(reading, length)], all_seeds) for reading, length in order]
    for name, holds in (groups or {}).items():
        for reading, length in order:
            labels = {k: v for k, v in by[(reading, length)].items() if holds(k)}
            if len(labels) > 1:
                columns.append(column(corpus, reading, length, labels, all_seeds) | {"record": "group", "group": name})
    return columns + pair_records(corpus, rows, controls or {}, all_seeds), studies


def pair_records(
    corpus: str, rows: list[dict], controls: dict[str, tuple[str, ...]], all_seeds: list[int]
) -> list[dict]:
    """Each row against each of its ``controls`` (board label -> labels), per reading and length where both rows
    hold every seed's windows: records of kind ``pair`` with the difference (row minus control) in bits per byte, its
    95% interval from the paired bootstrap over the windows crossed with the seeds (all of a column's pairs under the
    same window draws), the verdict (``ahead``: the whole interval below zero, ``behind``, ``not separated``,
    ``equal``) and ``seeds_agreeing``, as a column gives them against its best."""
    by, records = _by_column(rows), []
    for reading, length in sorted(by, key=lambda key: (list(WINDOWS).index(key[0]), key[1])):
        labels, (nats_key, bytes_key) = by[(reading, length)], WINDOWS[reading]
        scored = {
            k
            for k, v in labels.items()
            if sorted(v) == all_seeds and all(r.get(nats_key) is not None for r in v.values())
        }
        chosen = [(row, c) for row, cs in controls.items() for c in cs if row in scored and c in scored]
        if not chosen:
            continue
        windows = {
            k: np.array([labels[k][s][nats_key] for s in all_seeds], np.float64) for pair in chosen for k in pair
        }
        total = np.asarray(labels[chosen[0][0]][all_seeds[0]][bytes_key], dtype=np.float64)
        results = compare_many([(windows[a], windows[b]) for a, b in chosen], total)
        for (row, control), result in zip(chosen, results, strict=True):
            said = verdict(result.combined.low, result.combined.high)
            records.append(
                {"record": "pair", "corpus": corpus, "reading": reading, "eval_length": length}
                | {"multiplier": labels[row][all_seeds[0]]["multiplier"], "row": row, "control": control}
                | {"status": SAID[said], **result.combined.as_dict()}
                | {"seeds_agreeing": sum(verdict(s.low, s.high) == said for s in result.per_seed)}
            )
    return records


def method() -> dict:
    """How every interval of the board was computed."""
    return {"confidence": CONFIDENCE, "resamples": RESAMPLES, "bootstrap_seed": BOOTSTRAP_SEED}


__all__ = ["SAID", "Source", "check_same_protocol", "column", "corpus_columns", "method", "pair_records", "read_source"]
