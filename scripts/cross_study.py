"""A row of one length study against a row of another, with the study's paired bootstrap: the numbers of
docs/content-positions.md where a variant (RoPE with an output gate, with learned sinks) ran as its own study.

    .venv/bin/python scripts/cross_study.py STUDY_A:ROW_A STUDY_B:ROW_B [--reading bpb sliding_bpb]

Two studies of the same text, tokenizer, training length and seeds score the same validation windows, so their rows
pair window by window and seed by seed, as two rows of one study do (:mod:`octlm.studies.shared.confidence`). The script
refuses studies whose windows or seeds differ. One JSON line per reading and length on stdout: row a minus row b in
bits per byte, its 95% interval over the windows crossed with the seeds, and each row's first-token mass (the
attention records' ``sink_mass``, mean over layers, heads and seeds) at that length.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from octlm.errors import OctlmError
from octlm.studies.length.readings.reading import load_study
from octlm.studies.shared.confidence import compare_many

#: The study options that decide which validation windows a study scores: two studies must agree on all of them.
WINDOW_OPTIONS = ("text", "vocab_size", "train_length", "multipliers", "eval_tokens", "eval_stride", "val_fraction")
NATS = {"bpb": "window_nats", "sliding_bpb": "sliding_window_nats"}


class Refused(Exception):
    """Input the script cannot compare: the message names it and the fix."""


def rows(study: Path, label: str) -> tuple[dict, list[dict], dict]:
    """The study record, the eval records of ``label`` (base models, any seed) and the window bytes by reading and
    length.

    Raises:
        Refused: for a folder that is no finished length study, or a row it does not have.
    """
    try:
        records = load_study(study, "cross_study.py").records
    except OctlmError as err:
        raise Refused(str(err)) from None
    head = next(r for r in records if r["record"] == "study")
    evals = [r for r in records if r["record"] == "eval" and r["label"] == label and r.get("rope_scaling") is None]
    if not evals:
        labels = sorted({r["label"] for r in records if r["record"] == "eval"})
        raise Refused(f"{study}: no eval rows labelled {label!r}; its rows are {', '.join(labels)}")
    nbytes = {(r["reading"], r["eval_length"]): r["bytes"] for r in records if r["record"] == "window_bytes"}
    mass = {}
    for r in records:
        if r["record"] == "attention" and r["label"] == label:
            mass.setdefault(r["eval_length"], []).append(float(np.mean(r["sink_mass"])))
    return head, evals, {"bytes": nbytes, "mass": {k: float(np.mean(v)) for k, v in mass.items()}}


def same_windows(head_a: dict, head_b: dict) -> None:
    """Refuse two studies whose options give them different validation windows, naming the first that differs."""
    a, b = head_a.get("options", {}), head_b.get("options", {})
    for name in WINDOW_OPTIONS:
        if a.get(name) != b.get(name):
            raise Refused(
                f"the studies differ in --{name.replace('_', '-')} ({a.get(name)} and {b.get(name)}), so they score "
                "different validation windows; compare studies run with the same text and evaluation options"
            )
    if (head_a["targets"], head_a["train_length"]) != (head_b["targets"], head_b["train_length"]):
        raise Refused("the studies scored different validation targets or trained at different lengths")


def compare(args: argparse.Namespace) -> list[dict]:
    """Every line the script prints, computed before any is printed (a refusal leaves no partial output)."""
    (study_a, label_a), (study_b, label_b) = args.a, args.b
    head_a, evals_a, extra_a = rows(Path(study_a), label_a)
    head_b, evals_b, extra_b = rows(Path(study_b), label_b)
    same_windows(head_a, head_b)
    lines = []
    for reading in args.reading:
        for length in sorted({r["eval_length"] for r in evals_a} & {r["eval_length"] for r in evals_b}):
            a = sorted((r for r in evals_a if r["eval_length"] == length), key=lambda r: r["seed"])
            b = sorted((r for r in evals_b if r["eval_length"] == length), key=lambda r: r["seed"])
            if [r["seed"] for r in a] != [r["seed"] for r in b]:
                raise Refused(
                    f"the rows have different seeds: {[r['seed'] for r in a]} and {[r['seed'] for r in b]}; run both "
                    "studies with the same --seed and --seeds"
                )
            if any(r.get(NATS[reading]) is None for r in a + b):
                continue  # a learned table past T
            nbytes = extra_a["bytes"][(reading, length)]
            if nbytes != extra_b["bytes"][(reading, length)]:
                raise Refused(f"the studies' windows at {length} differ: not the same text or tokenizer")
            pair = (np.array([r[NATS[reading]] for r in a]), np.array([r[NATS[reading]] for r in b]))
            got = compare_many([pair], np.asarray(nbytes))[0].combined
            out = {"reading": reading, "eval_length": length, "a": f"{study_a}:{label_a}", "b": f"{study_b}:{label_b}"}
            out |= {"seeds": len(a), **{k: round(v, 4) for k, v in got.as_dict().items()}}
            lines.append(out | {"mass_a": extra_a["mass"].get(length), "mass_b": extra_b["mass"].get(length)})
    return lines


def study_row(text: str) -> tuple[str, str]:
    """``STUDY:ROW`` split at its last colon."""
    study, colon, row = text.rpartition(":")
    if not colon or not study or not row:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not STUDY:ROW; give a study folder and a row, e.g. runs/length:rope"
        )
    return study, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("a", "b"):
        parser.add_argument(
            name, type=study_row, metavar=f"STUDY_{name.upper()}:ROW", help=f"row {name}: a study folder and its row"
        )
    parser.add_argument("--reading", nargs="+", default=list(NATS), choices=list(NATS), help="the readings to compare")
    args = parser.parse_args()
    try:
        lines = compare(args)
    except Refused as err:
        sys.exit(f"cross_study.py: error: {err}")
    for out in lines:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
