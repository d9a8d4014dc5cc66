"""``--processes``: a study's models split by their work between processes of this machine.

The split is checked against the best split found by trying every one (Graham's bound for the
longest-first rule), the plan against what the option's help promises, and a child's interrupt. A
two-process study against the rows of one process, and a failed share, are in
tests/test_spread_study.py beside its one-process reference.
"""

from __future__ import annotations

import itertools
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.errors import OctlmError
from octlm.studies.length.models import base_models, model_weights
from octlm.studies.length.options import LengthOptions
from octlm.studies.shared import processes
from octlm.studies.shared.processes import Workers, plan
from octlm.studies.shared.spread import Share, balanced


def best_split(weights: list[float], count: int) -> float:
    """The least possible load of the busiest share, by trying every assignment."""
    best = float("inf")
    for owners in itertools.product(range(count), repeat=len(weights)):
        loads = [0.0] * count
        for w, s in zip(weights, owners, strict=True):
            loads[s] += w
        best = min(best, max(loads))
    return best


@given(
    st.lists(st.integers(1, 1000), min_size=1, max_size=7),
    st.integers(2, 3),
)
def test_the_busiest_share_carries_at_most_four_thirds_of_the_best_split(weights, count):
    owners = balanced(weights, count)
    assert len(owners) == len(weights) and set(owners) <= set(range(count))
    loads = [sum(w for w, s in zip(weights, owners, strict=True) if s == share) for share in range(count)]
    assert max(loads) <= (4 / 3 - 1 / (3 * count)) * best_split(weights, count) + 1e-9


def test_equal_work_goes_round_the_shares_and_heavy_work_goes_first():
    assert balanced([1.0] * 7, 3) == tuple(k % 3 for k in range(7))
    # the heaviest model first and alone while the other four together weigh less (k % 2 would give it two more)
    owners = balanced([1, 1, 5, 1, 1], 2)
    assert owners == (1, 1, 0, 1, 1)
    share = Share(1, 2, "shard").weighed([1, 1, 5, 1, 1])
    assert [k for k in range(5) if share.owns(k)] == [0, 1, 3, 4]


def test_each_base_model_weighs_its_fine_tunes():
    opts = LengthOptions(out="x", max_steps=679).resolved()
    seeds = [1337]
    weight = dict(zip([row for _, row in base_models(opts, seeds)], model_weights(opts, seeds), strict=True))
    # rope is fine-tuned five times (plain and four scalings), learned, alibi and none once, sinusoidal never
    one_fine_tune = weight["learned"] - weight["sinusoidal"]
    assert one_fine_tune > 0 and weight["alibi"] == weight["none"] == weight["learned"]
    assert weight["rope"] - weight["sinusoidal"] == pytest.approx(5 * one_fine_tune)
    unextended = LengthOptions(out="x", max_steps=679, extend_to=0).resolved()
    assert len(set(model_weights(unextended, seeds))) == 1


def test_the_default_is_one_process_per_free_cpu_on_a_cpu(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    free = lambda: 2  # noqa: E731
    assert plan(None, 5, "cpu", None, free) == Share(0, 2, "local", threads=1)
    assert plan(None, 5, "cpu", None, lambda: 16) == Share(0, 5, "local", threads=3)  # one per model at most
    assert plan(None, 5, "cpu", 2, free) == Share()  # two threads fill both CPUs
    assert plan(None, 1, "cpu", None, free) == Share()
    assert plan(None, 5, "cuda", None, free) == Share()
    assert plan(3, 2, "cpu", None, lambda: 4) == Share(0, 2, "local", threads=2)
    assert plan(1, 5, "cpu", None, free) == Share()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert plan(None, 5, "cpu", None, free) == Share()  # the job's threads were set: one process of them
    assert plan(2, 5, "cpu", 1, free) == Share(0, 2, "local", threads=1)  # asked for, still given


def test_a_lowered_request_is_said():
    from octlm.studies.shared.processes import side_by_side

    three = plan(50, 3, "cpu", None, lambda: 2)
    assert (
        side_by_side(three, 50)
        == ", in 3 processes of 1 thread each (--processes 50 asked: there are only 3 base models)"
    )
    assert side_by_side(three, 3) == side_by_side(three) == ", in 3 processes of 1 thread each"


def test_processes_beside_another_launcher_are_refused(tmp_path):
    from octlm.cli import main

    out = tmp_path / "s"
    code = main(["length", "--out", str(out), "--max-steps", "2", "--processes", "2", "--shard", "0/2"])
    assert code == 1 and not out.exists()
    with pytest.raises(OctlmError, match="--processes 2 with --shard 0/2: .* drop --processes"):
        processes.refuse_with_other_launcher(2, Share(0, 2, "shard"))
    with pytest.raises(OctlmError, match="--processes must be at least 1"):
        plan(0, 5, "cpu", None, lambda: 2)


def test_an_interrupted_share_is_told_once_and_waited_for(tmp_path):
    # the child counts the interrupts it receives and takes a moment to stop, as a model saving its checkpoint would
    script = (
        "import signal, sys, time, pathlib\n"
        "seen = pathlib.Path(sys.argv[1])\n"
        "def stop(*_):\n"
        "    seen.write_text(seen.read_text() + 'x' if seen.exists() else 'x')\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print('ready', flush=True)\n"
        "while not seen.exists(): time.sleep(0.05)\n"
        "time.sleep(0.5)\n"
        "sys.exit(130)\n"
    )
    seen = tmp_path / "interrupts"
    workers = Workers([[sys.executable, "-c", script, str(seen)]], tmp_path)
    log = tmp_path / "share-1.log"
    deadline = time.monotonic() + 60
    while "ready" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    workers.stop()
    assert seen.read_text() == "x"  # one interrupt
    assert workers.children[0][1].returncode == 130  # waited for until it stopped by itself
    with pytest.raises(OctlmError, match=r"share 1/2 of the study stopped with exit status 130 .*share-1.log; go on"):
        workers.check(["a"], "go on")
