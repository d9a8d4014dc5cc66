"""AdamW against Muon (``--optimizer``) at equal steps and at equal wall time, in one run; prints JSON.

    .venv/bin/python bench/optimizers.py [--parts main reach tinyshakespeare] [--main-steps 1200]
        [--reach-steps 480 720] [--time-budget 300] [-- extra octlm train flags]

Every training runs alone, one after another, in this process's machine
state (``--threads`` as octlm's default unless given among the extra flags):

* ``main``: the main job (``octlm train`` on its default corpus, the Day-1
  model) for ``--main-steps`` steps with each optimizer: final validation bits
  per byte (every validation block), wall seconds, tokens per second;
* ``reach``: Muon on the main job for each of ``--reach-steps`` steps, a whole
  schedule each; ``steps_to_reach_adamw`` is the fewest of them whose final bits
  per byte is at or below AdamW's after ``--main-steps`` (null when none is),
  and ``share_of_adamw_steps`` that count over ``--main-steps``;
* ``tinyshakespeare``: ``bench/train_tinyshakespeare.py`` for ``--time-budget``
  seconds with each optimizer: bits per byte, steps, tokens per second.

``muon_step_cost`` is AdamW's tokens per second over Muon's in each part
(above 1: a Muon step takes that much longer). Other work on the machine
slows every timing: ``load_average`` is read before each training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_tinyshakespeare  # noqa: E402  (the benchmark beside this one)

from octlm.cli import main as octlm_main  # noqa: E402

OPTIMIZERS = ("adamw", "muon")


def main_job(optimizer: str, steps: int, extra: list[str]) -> dict:
    """One main-job training of ``steps`` steps; its final evaluation, wall seconds and mean training tokens per
    second."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # stdout is this benchmark's JSON
            code = octlm_main(
                [
                    "train",
                    "--out",
                    str(out),
                    "--max-steps",
                    str(steps),
                    "--eval-interval",
                    str(steps),
                    "--sample-tokens",
                    "0",
                    "--quiet",
                    "--optimizer",
                    optimizer,
                    *extra,
                ]
            )
        wall = time.perf_counter() - start
        if code:
            raise SystemExit(f"octlm train --optimizer {optimizer} failed with exit status {code}")
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if r["kind"] == "eval"][-1]
    speeds = [r["tokens_per_second"] for r in records if r["kind"] == "train"]
    return {
        "optimizer": optimizer,
        "steps": steps,
        "val_bpb": round(final["val_bpb"], 4),
        "val_loss": round(final["val_loss"], 4),
        "wall_s": round(wall, 1),
        "tokens_per_second": round(sum(speeds) / len(speeds), 1),
        "load_average": load,
    }


def tinyshakespeare(optimizer: str, seconds: float, extra: list[str]) -> dict:
    """``bench/train_tinyshakespeare.py`` with ``--optimizer``: bits per byte, steps and tokens per second in
    ``seconds``."""
    load = os.getloadavg()[0]
    result = train_tinyshakespeare.run(
        ["--time-budget", str(seconds), "--optimizer", optimizer, "--sample-tokens", "0", *extra]
    )
    keep = ("steps", "tokens_per_second", "val_bpb", "val_loss", "baseline_unigram_val_bpb", "eval_curve")
    return {"optimizer": optimizer, **{key: result[key] for key in keep}, "load_average": load}


def run(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--parts", nargs="+", choices=["main", "reach", "tinyshakespeare"], default=["main", "reach", "tinyshakespeare"]
    )
    parser.add_argument("--main-steps", type=int, default=1200, help="steps of the main job (its default)")
    parser.add_argument(
        "--reach-steps",
        type=int,
        nargs="+",
        default=[480, 720],
        help="Muon runs of these many steps, against AdamW's final",
    )
    parser.add_argument("--time-budget", type=float, default=300.0, help="seconds of each tinyshakespeare training")
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    else:
        extra = []
    args = parser.parse_args(argv)
    result: dict = {"benchmark": "optimizers", "extra_flags": extra}
    if "main" in args.parts or "reach" in args.parts:
        main = {name: main_job(name, args.main_steps, extra) for name in OPTIMIZERS}
        main["muon_step_cost"] = round(main["adamw"]["tokens_per_second"] / main["muon"]["tokens_per_second"], 3)
        main["bpb_gain"] = round(main["adamw"]["val_bpb"] - main["muon"]["val_bpb"], 4)
        result["main"] = main
    if "reach" in args.parts:
        target = result["main"]["adamw"]["val_bpb"]
        rows = [main_job("muon", steps, extra) for steps in sorted(args.reach_steps)]
        reached = [row["steps"] for row in rows if row["val_bpb"] <= target]
        result["reach"] = {
            "adamw_val_bpb": target,
            "muon_runs": rows,
            "steps_to_reach_adamw": min(reached) if reached else None,
            "share_of_adamw_steps": round(min(reached) / args.main_steps, 3) if reached else None,
        }
    if "tinyshakespeare" in args.parts:
        runs = {name: tinyshakespeare(name, args.time_budget, extra) for name in OPTIMIZERS}
        runs["muon_step_cost"] = round(runs["adamw"]["tokens_per_second"] / runs["muon"]["tokens_per_second"], 3)
        result["tinyshakespeare"] = runs
    return result


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:]), indent=2))
