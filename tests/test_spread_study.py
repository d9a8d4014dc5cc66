"""A length study spread over processes (torchrun, or ``--shard I/N``) gives the rows of the one-process study.

Each process trains and scores whole models alone (no DDP), so a model's
numbers are those the one-process study computes for it, up to float noise
between processes (1e-6 relative on bits per byte, far below what a wrong
model, length or window moves: 1e-3 or more). The expectation is an
independent one-process study of the same options in its own folder.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from octlm.errors import OctlmError
from octlm.studies.shared.spread import Share, parse_shard, share_of
from tests.conftest import TINY_MODEL
from tests.fixtures.study_stops.stops import VARIABLE, child_env
from tests.test_study_continue import rows

REPO = Path(__file__).resolve().parents[1]
SPREAD = [
    "length",
    *TINY_MODEL,
    "--train-length",
    "16",
    "--multipliers",
    "1",
    "2",
    "--schemes",
    "rope",
    "alibi",
    "--extend-to",
    "2",
    "--extend-steps",
    "2",
    "--eval-tokens",
    "512",
    "--device",
    "cpu",
]
#: How far a float of a spread study may sit from the one-process study's, relatively.
RELATIVE = 1e-6


def env() -> dict:
    drop = {VARIABLE, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONPATH": str(REPO / "src")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def octlm(args: list[str], torchrun: bool = False) -> subprocess.CompletedProcess:
    launch = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master_addr", "127.0.0.1"]
    launch += ["--master_port", str(free_port())]
    command = [sys.executable, *(launch if torchrun else []), "-m", "octlm", *args]
    extra = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"} if torchrun else {}
    return subprocess.run(command, capture_output=True, text=True, env={**env(), **extra}, timeout=900)


def assert_close(got, want, where: str = "") -> None:
    """Equal structure and strings; floats within :data:`RELATIVE`."""
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=RELATIVE, abs_tol=1e-9), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: lengths differ"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_corpus) -> list[dict]:
    out = tmp_path_factory.mktemp("one") / "study"
    done = octlm([*SPREAD, "--text", str(small_corpus), "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return rows(out / "length.jsonl")


def finished(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


FILES = ["attention.png", "extend.png", "length.jsonl", "length.md", "length.png", "runs"]


@pytest.mark.slow
def test_torchrun_spreads_a_length_study_to_the_rows_of_one_process(reference, small_corpus, tmp_path):
    out = tmp_path / "study"
    done = octlm([*SPREAD, "--text", str(small_corpus), "--out", str(out)], torchrun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_close(rows(out / "length.jsonl"), reference)
    assert finished(out) == FILES
    assert "models of the study done" in done.stdout  # rank 0's count of the records
    # every model trained alone in one process: base models 0 (rope, with its fine-tunes) and 1 (alibi) apart
    assert (out / "runs" / "rope@2x").is_dir() and (out / "runs" / "alibi@2x").is_dir()


@pytest.mark.slow
def test_shards_run_one_after_another_give_the_rows_of_one_process(reference, small_corpus, tmp_path):
    out = tmp_path / "study"
    args = [*SPREAD, "--text", str(small_corpus), "--out", str(out)]
    first = octlm([*args, "--shard", "1/2"])  # the later share first: order must not matter
    assert first.returncode == 0, first.stderr
    assert "other shares'" in first.stdout and not (out / "length.jsonl").exists()
    assert (out / "progress" / "score-alibi-seed1337.json").is_file()
    assert not (out / "progress" / "train-rope-seed1337.json").exists()  # share 0's model, not trained by share 1
    second = octlm([*args, "--shard", "0/2"])
    assert second.returncode == 0, second.stderr
    assert_close(rows(out / "length.jsonl"), reference)
    assert finished(out) == FILES


@pytest.mark.slow
def test_shards_run_together_give_the_rows_of_one_process(reference, small_corpus, tmp_path):
    out = tmp_path / "study"
    args = [sys.executable, "-m", "octlm", *SPREAD, "--text", str(small_corpus), "--out", str(out)]
    shares = [
        subprocess.Popen([*args, "--shard", f"{i}/2"], env=env(), stdout=subprocess.PIPE, text=True) for i in (0, 1)
    ]
    assert [p.wait(timeout=900) for p in shares] == [0, 0]
    assert_close(rows(out / "length.jsonl"), reference)
    assert finished(out) == FILES


@pytest.mark.slow
def test_a_study_whose_ranks_were_killed_continues_in_one_process(reference, small_corpus, tmp_path):
    out = tmp_path / "study"
    args = [*SPREAD, "--text", str(small_corpus), "--out", str(out)]
    stopped = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master_addr", "127.0.0.1"]
        + ["--master_port", str(free_port()), "-m", "octlm", *args],
        capture_output=True,
        text=True,
        # every rank is killed in its model's second step
        env=child_env({**env(), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}, "step:2:KILL"),
        timeout=900,
    )
    assert stopped.returncode != 0 and not (out / "length.jsonl").exists()
    continued = octlm(args)
    assert continued.returncode == 0, continued.stderr
    assert "continuing the unfinished length study" in continued.stdout + continued.stderr
    assert_close(rows(out / "length.jsonl"), reference)
    assert finished(out) == FILES


@pytest.mark.slow
def test_two_processes_give_the_rows_of_one_process(reference, small_corpus, tmp_path):
    out = tmp_path / "study"
    done = octlm([*SPREAD, "--text", str(small_corpus), "--out", str(out), "--processes", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in 2 processes of 1 thread each" in done.stdout
    assert "models of the study done" in done.stdout
    assert_close(rows(out / "length.jsonl"), reference)
    assert finished(out) == FILES


@pytest.mark.slow
def test_a_failed_share_is_named_and_the_same_command_continues(reference, small_corpus, tmp_path, monkeypatch, capsys):
    from octlm.cli import main
    from octlm.studies.shared import processes

    out = tmp_path / "study"
    args = [*SPREAD, "--text", str(small_corpus), "--out", str(out), "--processes", "2"]
    failing = [sys.executable, "-c", "import sys; print('octlm: error: the disk is full'); sys.exit(3)"]
    monkeypatch.setattr(processes, "worker_command", lambda *a: failing)
    assert main(args) == 1
    said = capsys.readouterr().err
    assert "share 1/2 of the study stopped with exit status 3 (octlm: error: the disk is full)" in said
    assert "share-1.log; the same command continues the study where it stopped" in said
    assert (out / "progress" / "share-1.log").read_text().strip() == "octlm: error: the disk is full"
    assert (out / "progress" / "score-rope-seed1337.json").is_file()  # this process's share is kept
    assert not (out / "length.jsonl").exists()
    monkeypatch.undo()
    assert main(args) == 0
    assert_close(rows(out / "length.jsonl"), reference)


TASK = [
    *("length", "--task", "copy", "--schemes", "rope", "alibi", "--seeds", "2", "--d-model", "16"),
    *("--n-heads", "2", "--n-layers", "1", "--max-steps", "3", "--task-length", "2", "--device", "cpu"),
    *("--threads", "1"),
]


@pytest.mark.slow
def test_torchrun_spreads_a_task_study_to_the_rows_of_one_process(tmp_path):
    one = octlm([*TASK, "--out", str(tmp_path / "one")])
    assert one.returncode == 0, one.stderr
    spread = octlm([*TASK, "--out", str(tmp_path / "spread")], torchrun=True)
    assert spread.returncode == 0, spread.stderr[-3000:]
    assert_close(rows(tmp_path / "spread" / "tasks.jsonl"), rows(tmp_path / "one" / "tasks.jsonl"))
    assert "4 of 4 models of the study done" in spread.stdout
    assert not (tmp_path / "spread" / "progress").exists()


@pytest.mark.slow
def test_two_processes_give_the_rows_of_a_one_process_task_study(tmp_path):
    one = octlm([*TASK, "--out", str(tmp_path / "one"), "--processes", "1"])
    assert one.returncode == 0, one.stderr
    two = octlm([*TASK, "--out", str(tmp_path / "two"), "--processes", "2"])
    assert two.returncode == 0, two.stderr[-3000:]
    assert "in 2 processes of 1 thread each" in two.stdout and "4 of 4 models of the study done" in two.stdout
    assert_close(rows(tmp_path / "two" / "tasks.jsonl"), rows(tmp_path / "one" / "tasks.jsonl"))


def test_shares_refuse_what_would_break_the_others(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(OctlmError, match="--overwrite: each share would empty"):
        share_of("0/2", overwrite=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(OctlmError, match="torchrun already gives each process its share"):
        share_of("0/2", overwrite=False)


def test_a_share_is_named_i_of_n():
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "1", "-1/2", "a/b", "0/0"):
        with pytest.raises(OctlmError, match="--shard"):
            parse_shard(bad)
    assert [k for k in range(7) if Share(2, 3, "shard").owns(k)] == [2, 5]
