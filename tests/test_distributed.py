"""Several processes: torchrun with two CPU ranks (gloo on loopback) against one process.

With the same seed and the same global batch (2 ranks x 4 blocks against 1 x 8),
both runs see the same blocks at every step (BlockSampler gives rank r the r-th
share of the global batch) and DDP averages the two ranks' gradients into the
gradient of the mean loss over all 8 blocks. The runs differ only in the order
float32 sums are taken: each rank averages 4 block losses and the two means are
averaged, where one process sums 8 at once; the all-reduce adds the two
gradient halves where backward adds all 8 rows. Measured differences are about
1e-6 nats over 20 steps; the tolerance of 1e-4 is a hundred times that, while
a rank that reads the wrong blocks or trains without averaging moves the loss
by 1e-3 or more within a few steps (see docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from octlm.cli import main

REPO = Path(__file__).resolve().parents[1]
STEPS = 20
FLAGS = [
    "--vocab-size",
    "280",
    "--context-length",
    "16",
    "--d-model",
    "16",
    "--n-heads",
    "2",
    "--n-layers",
    "1",
    "--eval-interval",
    "10",
    "--eval-blocks",
    "4",
    "--final-eval-blocks",
    "8",
    "--sample-tokens",
    "0",
    "--max-steps",
    str(STEPS),
    "--log-interval",
    "1",
    "--threads",
    "1",
    "--device",
    "cpu",
    "--save-every",
    "10",
    # AdamW, whose weights two ranks reproduce to 1e-3; Muon's orthogonalized steps carry the ranks' rounding
    # further (3e-3 after 20 steps), and its own test below compares loss curves
    "--optimizer",
    "adamw",
]
TOLERANCE = 1e-4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


def torchrun_octlm(args: list[str]) -> subprocess.CompletedProcess:
    """``octlm ARGS`` in two CPU processes under torchrun (gloo on loopback)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "octlm",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, small_corpus):
    root = tmp_path_factory.mktemp("ddp")
    done = torchrun_octlm(
        ["train", "--text", str(small_corpus), "--out", str(root / "ddp"), "--batch-size", "4", "--json", *FLAGS]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    code = main(
        ["train", "--text", str(small_corpus), "--out", str(root / "single"), "--batch-size", "8", "--quiet", *FLAGS]
    )
    assert code == 0
    return root, done.stdout


@pytest.mark.slow
def test_two_ranks_follow_the_single_process_loss_curve(runs):
    root, _ = runs
    ddp, single = losses(root / "ddp"), losses(root / "single")
    assert len(ddp) == len(single) == STEPS
    gaps = [abs(a - b) for a, b in zip(ddp, single, strict=True)]
    assert max(gaps) < TOLERANCE, gaps
    assert single[-1] < single[0] - 0.1  # the curve moves, so matching it means something
    a, b = load_file(str(root / "ddp" / "model.safetensors")), load_file(str(root / "single" / "model.safetensors"))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-3


def test_rank_zero_alone_prints_and_writes(runs):
    root, stdout = runs
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert [line["event"] for line in lines].count("result") == 1
    result = lines[-1]
    assert result["world_size"] == 2 and result["steps"] == STEPS
    # every step and every evaluation logged once
    records = [json.loads(line) for line in (root / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, STEPS + 1))
    assert not list((root / "ddp").glob(".*.tmp"))


def test_a_two_process_run_resumes_in_one_process_with_the_same_global_batch(runs, tmp_path, capsys):
    import shutil

    root, _ = runs
    run = tmp_path / "run"
    shutil.copytree(root / "ddp", run)
    assert main(["train", "--resume", str(run), "--max-steps", str(STEPS + 2)]) == 1
    assert "keep the global batch: --batch-size 8" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--max-steps", str(STEPS + 2), "--batch-size", "8", "--quiet"]) == 0
    assert len(losses(run)) == STEPS + 2
    # rank 1's saved generator has no process to go to, and the run says so
    assert (
        "the run had 2 process(es) and resumes with 1: the dropout generators of rank(s) 1 are dropped, "
        "so the dropout masks differ from an uninterrupted run's"
    ) in capsys.readouterr().err


@pytest.mark.slow
def test_a_one_process_run_resumes_in_two_and_says_rank_1_starts_a_fresh_generator(runs, tmp_path):
    """Only rank 0 prints (the others report to a SilentReporter), so rank 0 must say what happens on rank 1."""
    import shutil

    root, _ = runs
    run = tmp_path / "run"
    shutil.copytree(root / "single", run)
    done = torchrun_octlm(
        ["train", "--resume", str(run), "--max-steps", str(STEPS + 2), "--batch-size", "4", "--quiet"]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(losses(run)) == STEPS + 2
    note = "the run had 1 process(es) and resumes with 2: rank(s) 1 start fresh dropout generators"
    assert done.stderr.count(note) == 1, done.stderr[-3000:]


@pytest.mark.slow
def test_muon_on_two_ranks_follows_the_single_process_loss_curve(small_corpus, tmp_path):
    """Each rank orthogonalises the same all-reduced gradients, so Muon needs nothing of its own under DDP (measured:
    2.4e-6 nats)."""
    muon = [*FLAGS[:-2], "--optimizer", "muon"]
    done = torchrun_octlm(
        ["train", "--text", str(small_corpus), "--out", str(tmp_path / "ddp"), "--batch-size", "4", "--quiet", *muon]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(tmp_path / "single"),
                "--batch-size",
                "8",
                "--quiet",
                *muon,
            ]
        )
        == 0
    )
    ddp, single = losses(tmp_path / "ddp"), losses(tmp_path / "single")
    assert len(ddp) == len(single) == STEPS
    assert max(abs(a - b) for a, b in zip(ddp, single, strict=True)) < TOLERANCE
