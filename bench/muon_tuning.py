"""Muon's settings on the main job, one change at a time from a base; prints JSON, one line per variant.

    .venv/bin/python bench/muon_tuning.py [--steps 600] [--jobs 4] [--only NAME ...] [--text CORPUS] [--out
    build/muon-tuning]

Each variant is ``octlm train`` on the main job's corpus (the Python standard
library, the Day-1 model; ``--text`` names another, such as ``tinyshakespeare``,
whose 300 s runs are limited by over-fitting rather than steps) for ``--steps``
steps with ``--threads 1`` and the
flags in :data:`VARIANTS`, ``--jobs`` at a time in separate processes; the
figure is the final validation bits per byte (every validation block).
Bits per byte do not depend on how busy the machine is (one thread, fixed
seed), so variants may run side by side; the seconds printed do.

``positions-on-muon`` also hands the position scheme's 2-D parameters (the
learned table) to Muon, by replacing :func:`octlm.train.optim.muon_parameters`
in its process: the question the tuning asks of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: The reference every Muon row changes one thing of: Muon as it became the default on 2026-12-02, its weight decay
#: named so that the rows keep their meaning after the default's change (issue 53: 0.25 since 2026-12-05).
BASE = ["--optimizer", "muon", "--muon-weight-decay", "0"]

#: name -> (flags, what changes); a later flag wins over BASE's.
VARIANTS = {
    "adamw": (["--optimizer", "adamw"], "AdamW alone (octlm's default before Muon)"),
    "base": (BASE, "Muon lr 0.02, momentum 0.95, no Muon weight decay, 50 warm-up steps"),
    "lr-0.01": ([*BASE, "--muon-lr", "0.01"], "Muon lr 0.01"),
    "lr-0.04": ([*BASE, "--muon-lr", "0.04"], "Muon lr 0.04"),
    "momentum-0.9": ([*BASE, "--muon-momentum", "0.9"], "momentum 0.9"),
    "wd-0.1": ([*BASE, "--muon-weight-decay", "0.1"], "Muon weight decay 0.1"),
    "wd-0.25": ([*BASE, "--muon-weight-decay", "0.25"], "Muon weight decay 0.25 (the default since issue 53)"),
    "wd-0.5": ([*BASE, "--muon-weight-decay", "0.5"], "Muon weight decay 0.5"),
    "wd-1.0": ([*BASE, "--muon-weight-decay", "1.0"], "Muon weight decay 1.0"),
    "warmup-0": ([*BASE, "--warmup-steps", "0"], "no warm-up"),
    "adamw-lr-0.01": ([*BASE, "--learning-rate", "0.01"], "the AdamW side (table, biases, gains) at lr 0.01"),
    "positions-on-muon": (BASE, "the learned position table on Muon too"),
}

POSITIONS_ON_MUON = (
    "import octlm.train.optim as o; from octlm.cli import main; "
    "o.muon_parameters = lambda model: [n for n, p in model.named_parameters() if p.requires_grad and p.dim() == 2 "
    "and (n.startswith('blocks.') or n.startswith('positions.'))]; "
    "raise SystemExit(main(__import__('sys').argv[1:]))"
)


def train(
    name: str, steps: int, out: Path, text: list[str], eval_interval: int | None = None, seed: int | None = None
) -> dict:
    """One ``octlm train`` of variant ``name`` for ``steps`` steps (a whole schedule) into ``out / name``.

    Returns ``{"records": metrics.jsonl's records, "result": the --json result event, "wall_s": seconds}``, or
    ``{"error": the end of stderr}`` when the run failed. ``eval_interval`` (default: ``steps``) sets the periodic
    evaluations; the last evaluation covers every validation block. ``seed`` (default: octlm's) is ``--seed``.
    """
    flags, _ = VARIANTS[name]
    args = [
        "train",
        *(["--text", *text] if text else []),
        "--out",
        str(out / name),
        "--overwrite",
        "--threads",
        "1",
        "--sample-tokens",
        "0",
        "--max-steps",
        str(steps),
        "--eval-interval",
        str(eval_interval or steps),
        "--json",
        *flags,
        *(["--seed", str(seed)] if seed is not None else []),
    ]
    command = (
        [sys.executable, "-c", POSITIONS_ON_MUON, *args]
        if name == "positions-on-muon"
        else [sys.executable, "-m", "octlm", *args]
    )
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {
        "records": [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()],
        "result": next(e for e in events if e.get("event") == "result"),
        "wall_s": round(time.perf_counter() - start, 1),
    }


def run(name: str, steps: int, out: Path, text: list[str]) -> dict:
    """Variant ``name`` trained for ``steps`` steps: its final validation bits per byte and loss, and wall seconds."""
    flags, what = VARIANTS[name]
    done = train(name, steps, out, text)
    if "error" in done:
        return {"variant": name, **done}
    final = [r for r in done["records"] if r["kind"] == "eval"][-1]
    return {
        "variant": name,
        "change": what,
        "flags": " ".join(flags),
        "steps": steps,
        "val_bpb": round(final["val_bpb"], 4),
        "val_loss": round(final["val_loss"], 4),
        "wall_s": done["wall_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("build/muon-tuning"))
    parser.add_argument(
        "--text", nargs="+", default=[], help="octlm train --text for every variant (default: the main job's corpus)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        json.dumps({"load_average": os.getloadavg(), "jobs": args.jobs, "text": args.text or "the main job's corpus"}),
        flush=True,
    )
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda name: run(name, args.steps, args.out, args.text), args.only):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
