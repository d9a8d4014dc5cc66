"""The default thread count follows what the machine has free when a command starts (issue 33)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from octlm.errors import OctlmError
from octlm.train import device
from octlm.train.device import free_cpus, idle_cpus


def stat(*cpus: tuple[int, int]) -> str:
    """A /proc/stat text whose CPU i has spent cpus[i] = (busy, idle) ticks (busy split over user and system)."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    for i, (busy, idle) in enumerate(cpus):
        lines.append(f"cpu{i} {busy // 2} 0 {busy - busy // 2} {idle} 0 0 0 0 0 0")
    return "\n".join(lines + ["intr 0", "ctxt 0"]) + "\n"


def test_idle_time_is_each_cpus_idle_share_summed():
    before = stat((100, 900), (500, 500), (0, 0))
    after = stat((100, 1000), (560, 540), (0, 0))  # cpu0 idle throughout, cpu1 60% busy, cpu2 no tick at all
    assert idle_cpus(before, after, {0, 1, 2}) == pytest.approx(1.0 + 0.4 + 1.0)
    assert idle_cpus(before, after, {1}) == pytest.approx(0.4)  # only the CPUs this process may use count


@pytest.mark.parametrize(
    "idle, threads", [(2.0, 2), (1.98, 2), (1.75, 2), (1.74, 1), (1.0, 1), (0.3, 1), (0.0, 1), (7.9, 8)]
)
def test_a_cpu_counts_as_free_when_three_quarters_idle(idle, threads):
    assert free_cpus(idle) == threads


def test_the_choice_follows_the_probe_and_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(device, "available_cpus", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(device.time, "sleep", lambda seconds: None)
    readings = iter([stat((0, 0), (0, 0)), stat((2, 18), (20, 0))])  # cpu1 busy throughout
    monkeypatch.setattr(device, "_read_proc_stat", lambda: next(readings))
    choice = device.choose_threads()
    assert (choice.threads, choice.reason) == (1, "one per idle CPU, 1 of 2 CPUs idle")
    readings = iter([stat((0, 0), (0, 0)), stat((1, 19), (0, 20))])
    assert device.choose_threads() == device.ThreadChoice(2, "2 CPUs idle")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert device.choose_threads() == device.ThreadChoice(1, "OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "999")  # 999 threads on 2 CPUs ran 60 times slower in a user's trial
    assert device.choose_threads() == device.ThreadChoice(
        2, "OMP_NUM_THREADS=999, at most the 2 CPUs this process may use"
    )


@pytest.mark.parametrize("given", ["abc", "0", "-1", "2.5"])
def test_a_malformed_omp_num_threads_is_refused_by_name(monkeypatch, given):
    monkeypatch.setenv("OMP_NUM_THREADS", given)
    with pytest.raises(OctlmError, match=f"OMP_NUM_THREADS='{re.escape(given)}' is not a positive whole number"):
        device.choose_threads()


def test_one_allowed_cpu_reads_in_the_singular_and_says_it_is_a_limit(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(device, "available_cpus", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(device.time, "sleep", lambda seconds: None)
    readings = iter([stat((0, 0), (0, 0)), stat((0, 20), (20, 0))])
    monkeypatch.setattr(device, "_read_proc_stat", lambda: next(readings))
    assert device.choose_threads() == device.ThreadChoice(1, "1 CPU idle (this process may use 1 CPU of 2)")


def test_without_proc_stat_the_load_average_decides(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(device, "available_cpus", lambda: 4)

    def missing():
        raise FileNotFoundError("/proc/stat")

    monkeypatch.setattr(device, "_read_proc_stat", missing)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.1, 0.0, 0.0))
    assert device.choose_threads().threads == 3  # 2.9 CPUs idle: the third is 90% idle, past three quarters


def test_set_threads_says_why_and_threads_overrides():
    before = device.torch.get_num_threads()
    try:
        assert device.set_threads(1) == device.ThreadChoice(1, "--threads")
        assert device.thread_choice() == device.ThreadChoice(1, "--threads")
        device.torch.set_num_threads(2)  # changed behind octlm's back: no stale reason
        assert device.thread_choice().reason == "set outside octlm"
    finally:
        device.torch.set_num_threads(before)


@pytest.mark.skipif(device.available_cpus() < 2, reason="needs two CPUs to leave one to a busy process")
@pytest.mark.slow
def test_a_busy_process_is_left_its_cpu():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it start spinning
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        code = "from octlm.train.device import choose_threads, available_cpus; print(choose_threads().threads)"
        threads = int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)
    finally:
        hog.kill()
        hog.wait()
    # other work on the machine can only lower the count further
    assert threads <= device.available_cpus() - 1
