"""A row of one length study against a row of another, with the study's paired bootstrap: the numbers of
docs/content-positions.md where a variant (RoPE with an output gate, with learned sinks) ran as its own study.

    .venv/bin/python scripts/cross_study.py STUDY_A:ROW_A STUDY_B:ROW_B [--reading bpb sliding_bpb]

Two studies of the same text, tokenizer, training length and seeds score the same validation windows, so their rows
pair window by window and seed by seed, as two rows of one study do (:mod:`octlm.studies.confidence`). The script
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

from octlm.studies.confidence import compare_many


def rows(study: Path, label: str) -> tuple[dict, list[dict], dict]:
    """The study record, the eval records of ``label`` (base models, any seed) and the window bytes by reading and
    length."""
    records = [json.loads(line) for line in (study / "length.jsonl").read_text().splitlines() if line.strip()]
    head = next(r for r in records if r["record"] == "study")
    evals = [r for r in records if r["record"] == "eval" and r["label"] == label and r.get("rope_scaling") is None]
    if not evals:
        sys.exit(f"{study}: no eval rows labelled {label!r}")
    nbytes = {(r["reading"], r["eval_length"]): r["bytes"] for r in records if r["record"] == "window_bytes"}
    mass = {}
    for r in records:
        if r["record"] == "attention" and r["label"] == label:
            mass.setdefault(r["eval_length"], []).append(float(np.mean(r["sink_mass"])))
    return head, evals, {"bytes": nbytes, "mass": {k: float(np.mean(v)) for k, v in mass.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--reading", nargs="+", default=["bpb", "sliding_bpb"])
    args = parser.parse_args()
    (study_a, label_a), (study_b, label_b) = (arg.rsplit(":", 1) for arg in (args.a, args.b))
    head_a, evals_a, extra_a = rows(Path(study_a), label_a)
    head_b, evals_b, extra_b = rows(Path(study_b), label_b)
    if (head_a["targets"], head_a["train_length"]) != (head_b["targets"], head_b["train_length"]):
        sys.exit("the studies scored different validation targets or trained at different lengths")
    nats_key = {"bpb": "window_nats", "sliding_bpb": "sliding_window_nats"}
    for reading in args.reading:
        for length in sorted({r["eval_length"] for r in evals_a} & {r["eval_length"] for r in evals_b}):
            a = sorted((r for r in evals_a if r["eval_length"] == length), key=lambda r: r["seed"])
            b = sorted((r for r in evals_b if r["eval_length"] == length), key=lambda r: r["seed"])
            if [r["seed"] for r in a] != [r["seed"] for r in b]:
                sys.exit(f"the rows have different seeds: {[r['seed'] for r in a]} and {[r['seed'] for r in b]}")
            if any(r.get(nats_key[reading]) is None for r in a + b):
                continue  # a learned table past T
            nbytes = extra_a["bytes"][(reading, length)]
            if nbytes != extra_b["bytes"][(reading, length)]:
                sys.exit(f"the studies' windows at {length} differ: not the same text or tokenizer")
            pair = (np.array([r[nats_key[reading]] for r in a]), np.array([r[nats_key[reading]] for r in b]))
            got = compare_many([pair], np.asarray(nbytes))[0].combined
            out = {"reading": reading, "eval_length": length, "a": f"{study_a}:{label_a}", "b": f"{study_b}:{label_b}"}
            out |= {"seeds": len(a), **{k: round(v, 4) for k, v in got.as_dict().items()}}
            out |= {"mass_a": extra_a["mass"].get(length), "mass_b": extra_b["mass"].get(length)}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
