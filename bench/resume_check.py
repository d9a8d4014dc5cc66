"""Is an interrupted and resumed run the same as an uninterrupted one, on this device? Prints JSON.

    .venv/bin/python bench/resume_check.py [--device cuda] [--steps 60] [--stop-at 30] [--deterministic] [--optimizer
    muon]

Three runs of ``octlm train`` on the built-in tinyshakespeare corpus with
dropout 0.1 (so the device's random generator must come back too):
``straight`` and ``again`` train ``--steps`` steps uninterrupted; ``resumed``
is stopped by a Ctrl-C (the real SIGINT handler) before step ``--stop-at`` of
the same ``--steps``-step run, so its learning-rate schedule is the same, and
is then resumed to the end. ``straight`` against ``again`` says whether the
device's kernels repeat themselves at all (``--deterministic`` asks them to);
``straight`` against ``resumed`` says what resume adds. On a CPU all three
are bitwise equal (tests/test_resume.py checks that on every commit); on a GPU
this is the check to run. Not a unit test: it needs the device.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import signal
import tempfile
from pathlib import Path

from safetensors.torch import load_file

from octlm.report import Reporter
from octlm.train.launch import train
from octlm.train.options import TrainOptions


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def max_gap(a: Path, b: Path) -> float:
    """The largest absolute difference between two runs' weights."""
    x, y = load_file(a), load_file(b)
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--stop-at", type=int, default=30)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--compile", default="off", choices=["auto", "on", "off"])
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "muon"])
    args = parser.parse_args()
    quiet = Reporter(json_mode=True)

    def options(out: Path) -> TrainOptions:
        return TrainOptions.of(
            text=["tinyshakespeare"],
            out=str(out),
            max_steps=args.steps,
            dropout=0.1,
            device=args.device,
            deterministic=args.deterministic,
            compile=args.compile,
            optimizer=args.optimizer,
            save_every=0,
            eval_interval=10**6,
            sample_tokens=0,
        )

    def ctrl_c(step: int) -> None:
        if step == args.stop_at - 1:
            os.kill(os.getpid(), signal.SIGINT)  # the step in flight finishes, then the run saves and stops

    # the runs' own --json lines would bury the result
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        root = Path(tmp)
        train(options(root / "straight"), quiet)
        train(options(root / "again"), quiet)
        stopped = train(options(root / "resumed"), quiet, step_hook=ctrl_c)
        resumed = train(TrainOptions(), quiet, resume=root / "resumed", given=set())
        weights = {name: root / name / "model.safetensors" for name in ("straight", "again", "resumed")}
        return {
            "benchmark": "resume_check",
            "device": resumed.get("device", args.device),
            "deterministic": args.deterministic,
            "optimizer": args.optimizer,
            "steps": args.steps,
            "stopped_at": stopped["steps"],
            "resumed_from": resumed["resumed_from"],
            "sha256": {name: sha256(path) for name, path in weights.items()},
            "max_abs_difference": {
                "again": max_gap(weights["straight"], weights["again"]),
                "resumed": max_gap(weights["straight"], weights["resumed"]),
            },
        }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
