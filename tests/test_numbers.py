"""A refactor moves no number: fixed short runs land where they were recorded.

Each fixed run is

    octlm train --text tinyshakespeare --position P --max-steps 60 --log-interval 1 --threads 2 --out DIR --quiet

(``--threads 1`` on a one-CPU machine) for the four schemes of :data:`SCHEMES`, with
``octlm train``'s default optimizer, Muon (AdamW until issue 26). Float results depend
on the kernels torch picks, the thread count and the CPU, and 60 steps amplify rounding
differences of 5e-7 nats in the first steps to as much as 1.3e-3 nats by step 60 (RoPE;
Muon orthogonalises in bfloat16, AdamW had reached 0.06), so no check here asks for the
same bits everywhere. Two checks:

* **Everywhere**: the training loss of every step (``metrics.jsonl``), the final
  validation loss and a fingerprint of the final weights (:func:`weight_sketch`: 16
  random +-1 projections of all the weights divided by the square root of their
  number, so a change of RMS size ``d`` in the weights moves them by about ``d``)
  lie within :data:`FACTOR` times the recorded float noise of the record in
  ``tests/fixtures/numbers.json``.
* **On the recording machine** (:func:`machine`: torch version, CPU kernels, CPU
  vendor, family, model and name, thread count, all equal): ``model.safetensors``
  has the recorded sha256, byte for byte.

The float noise is measured by ``python tests/test_numbers.py --record``: it trains
each run as recorded (``--threads 2``) and again under :data:`VARIANTS` (one thread;
AVX2 kernels in torch, MKL and oneDNN instead of AVX-512, as another CPU would pick;
both), each of which only reorders float sums. For each quantity it keeps the largest
difference from the record, and for the training loss the largest up to each step
(the noise grows along a run). A deliberate change of numbers re-records in its own
commit, with its measurement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm.cli import main

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "numbers.json"
SCHEMES = ("alibi", "learned", "rope", "sinusoidal")
STEPS = 60
#: projections in the weight fingerprint, and the seed of their signs (NumPy's legacy
#: RandomState, whose stream is fixed across versions and machines)
SKETCH_SIZE, SKETCH_SEED = 16, 20240601
#: how the recording measures float noise: another thread count, other CPU kernels, both
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
VARIANTS = {"threads 1": (1, {}), "AVX2 kernels": (2, AVX2), "threads 1, AVX2 kernels": (1, AVX2)}
#: Allowed difference from the record: this many times the noise the variants showed. For one
#: quantity the variants differ by up to 8 times (fixture "variants": RoPE's validation loss,
#: 1.1e-5 with one thread, 8.4e-5 with one thread and AVX2 kernels; with AdamW, before issue 26,
#: up to 100 times), so another CPU may well sit above all of them; ten times the largest leaves
#: it that room. The training loss's noise passes 3e-6 nats between step 5 (alibi, RoPE) and step
#: 17 (sinusoidal) and grows to 3.4e-5 (sinusoidal) to 1.3e-3 nats (RoPE) by step 60. A real change
#: lands far outside: one more warm-up step (--warmup-steps 7 instead of 6) moves the validation
#: loss by 0.006 to 0.094 nats, 84 (learned) to 5,800 (sinusoidal) times its noise, and the
#: training loss by 0.81 to 0.93 nats at some step (fixture "sensitivity_warmup_steps_7").
FACTOR = 10.0
#: below these the noise is no longer rounding of the sums (the first steps of a run can agree to the bit)
FLOOR = {"train_loss": 1e-6, "val_loss": 1e-6, "weights": 1e-7}


def threads() -> int:
    """The fixed runs' --threads: 2, or 1 on a machine with one CPU."""
    return min(2, os.cpu_count() or 1)


#: environment variables that choose other CPU kernels (in torch, MKL, oneDNN) without changing the CPU
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "DNNL_MAX_CPU_ISA")


def machine() -> dict:
    """What the bits of a run depend on besides octlm: torch, its CPU kernels, the CPU, the thread count and any kernel
    settings."""
    cpu = {"vendor_id": "", "cpu family": "", "model": "", "model name": platform.processor()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in cpu and not cpu[key.strip()]:
                cpu[key.strip()] = value.strip()
    except OSError:
        pass
    return {
        "torch": torch.__version__.split("+")[0],
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "cpu": " / ".join(cpu[k] for k in ("vendor_id", "cpu family", "model", "model name")),
        "threads": threads(),
        "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)},
    }


def weight_sketch(path: Path) -> list[float]:
    """:data:`SKETCH_SIZE` projections of every weight in a safetensors file (names sorted) on random +-1 vectors, /
    sqrt(N)."""
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    flat = np.concatenate([tensors[name].astype(np.float64).ravel() for name in sorted(tensors)])
    signs = np.random.RandomState(SKETCH_SEED).randint(0, 2, size=(SKETCH_SIZE, flat.size)).astype(np.float64) * 2 - 1
    return (signs @ flat / math.sqrt(flat.size)).tolist()


def command(position: str, out: Path, n_threads: int, *extra: str) -> list[str]:
    return [
        "train",
        "--text",
        "tinyshakespeare",
        "--position",
        position,
        "--max-steps",
        str(STEPS),
        "--log-interval",
        "1",
        "--threads",
        str(n_threads),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def read_run(out: Path) -> dict:
    """What the checks compare, from a fixed run's folder."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
        "train_loss": [r["loss"] for r in records if r["kind"] == "train"],
        "val_loss": next(r["val_loss"] for r in records if r["kind"] == "eval" and r["step"] == STEPS),
        "weights": weight_sketch(out / "model.safetensors"),
    }


def differences(a: dict, b: dict) -> dict:
    """How far two runs' numbers are apart: the loss at each step, the validation loss, the RMS of the sketch
    difference."""
    return {
        "train_loss": [abs(x - y) for x, y in zip(a["train_loss"], b["train_loss"], strict=True)],
        "val_loss": abs(a["val_loss"] - b["val_loss"]),
        "weights": math.sqrt(np.mean((np.array(a["weights"]) - np.array(b["weights"])) ** 2)),
    }


def tolerances(noise: dict) -> dict:
    """:data:`FACTOR` times the recorded noise, at least :data:`FLOOR`."""
    return {
        "train_loss": [FACTOR * max(n, FLOOR["train_loss"]) for n in noise["train_loss"]],
        "val_loss": FACTOR * max(noise["val_loss"], FLOOR["val_loss"]),
        "weights": FACTOR * max(noise["weights"], FLOOR["weights"]),
    }


#: The fixed runs scripts/test.sh trains again under other CPU kernels and threads (``rounding``): RoPE, whose noise
#: grows the most along a run, and sinusoidal, whose is the smallest (the tightest tolerance); 10 s each there.
AGAIN_ELSEWHERE = ("rope", "sinusoidal")


@pytest.mark.slow
@pytest.mark.parametrize(
    "position", [pytest.param(p, marks=[pytest.mark.rounding] if p in AGAIN_ELSEWHERE else []) for p in SCHEMES]
)
def test_fixed_runs_land_where_they_were_recorded(tmp_path, capsys, position):
    record = json.loads(FIXTURE.read_text())
    recorded, allowed = record["runs"][position], tolerances(record["noise"][position])
    assert main(command(position, tmp_path / position, threads())) == 0, f"the fixed {position} run failed"
    got = read_run(tmp_path / position)
    moved = differences(got, recorded)
    steps = [s + 1 for s, (d, t) in enumerate(zip(moved["train_loss"], allowed["train_loss"], strict=True)) if d > t]
    assert not steps, (
        f"{position}: the training loss moved past float noise at steps {steps[:5]} (first: "
        f"{moved['train_loss'][steps[0] - 1]:.3g} nats, allowed {allowed['train_loss'][steps[0] - 1]:.3g}); "
        "a refactor must not change numbers"
    )
    for key in ("val_loss", "weights"):
        assert moved[key] <= allowed[key], (
            f"{position}: {key} moved by {moved[key]:.3g}, past float noise ({allowed[key]:.3g})"
        )
    if machine() == record["machine"]:
        assert got["sha256"] == recorded["sha256"], (
            f"{position}: the weights moved on the recording machine {record['machine']}"
        )


def run_in_child(position: str, out: Path, n_threads: int, env: dict, *extra: str) -> dict:
    """A fixed run in a fresh process (the kernel choice is read when torch loads)."""
    child = [sys.executable, "-m", "octlm", *command(position, out, n_threads, *extra)]
    subprocess.run(child, env={**os.environ, "PYTHONPATH": str(REPO / "src"), **env}, check=True, capture_output=True)
    return read_run(out)


def record() -> dict:
    """Train every fixed run as recorded, under each variant and with one more warm-up step (a real change); return the
    fixture."""
    runs, noise, variants, sensitivity = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for position in SCHEMES:
            runs[position] = run_in_child(position, Path(tmp) / position, 2, {})
            found = {
                name: differences(run_in_child(position, Path(tmp) / f"{position}-variant-{i}", n, env), runs[position])
                for i, (name, (n, env)) in enumerate(VARIANTS.items())
            }
            variants[position] = {
                name: {"train_loss_max": max(d["train_loss"]), "val_loss": d["val_loss"], "weights": d["weights"]}
                for name, d in found.items()
            }
            changed = differences(
                run_in_child(position, Path(tmp) / f"{position}-w7", 2, {}, "--warmup-steps", "7"), runs[position]
            )
            sensitivity[position] = {
                "train_loss_max": max(changed["train_loss"]),
                "val_loss": changed["val_loss"],
                "weights": changed["weights"],
            }
            per_step = np.max([d["train_loss"] for d in found.values()], axis=0)
            noise[position] = {
                "train_loss": np.maximum.accumulate(per_step).tolist(),
                "val_loss": max(d["val_loss"] for d in found.values()),
                "weights": max(d["weights"] for d in found.values()),
            }
    return {
        "about": "Written by `python tests/test_numbers.py --record`; read by tests/test_numbers.py. "
        "Do not edit by hand.",
        "command": " ".join(command("P", Path("DIR"), 2)),
        "machine": {**machine(), "threads": 2},
        "noise": noise,
        "variants": variants,
        "sensitivity_warmup_steps_7": sensitivity,
        "runs": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Record the fixed runs' numbers and their float noise (tests/fixtures/numbers.json)."
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="train the fixed runs as recorded and under each variant; write the fixture",
    )
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    if not args.record:
        parser.error("nothing to do; pass --record")
    if (os.cpu_count() or 1) < 2 or torch.backends.cpu.get_cpu_capability() != "AVX512":
        sys.exit("--record needs 2 CPUs or more with AVX-512 (its variants are one thread and AVX2 kernels)")
    fixture = record()
    args.out.write_text(json.dumps(fixture, indent=1) + "\n")
    print(json.dumps({"wrote": str(args.out), "machine": fixture["machine"], "variants": fixture["variants"]}))
