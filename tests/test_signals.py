"""SIGHUP and SIGUSR1 stop a training run the way Ctrl-C and SIGTERM do: a checkpoint, the resume command, status 130.

SIGHUP is what a closed terminal or ssh session sends; SIGUSR1 is what SLURM
sends ahead of a job's time limit. Python's default for both is to die at
once, without a checkpoint or a word.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from octlm.cli import main
from octlm.train.checkpoint import CHECKPOINT, load_checkpoint
from tests.conftest import SMALL_RUN, flags

REPO = Path(__file__).resolve().parents[1]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
FLAGS = flags(**SMALL_RUN)


def train_command(corpus: Path, run: Path) -> list[str]:
    """``octlm train`` that would run for a long time, with no periodic checkpoint: only a stop can save one."""
    return [
        sys.executable,
        "-m",
        "octlm",
        "train",
        "--text",
        str(corpus),
        "--out",
        str(run),
        "--max-steps",
        "100000",
        "--save-every",
        "100000",
        *FLAGS,
    ]


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1], ids=["SIGHUP", "SIGUSR1"])
@pytest.mark.slow
def test_the_signal_saves_and_says_how_to_resume(small_corpus, tmp_path, signum):
    run = tmp_path / "run"
    child = subprocess.Popen(
        train_command(small_corpus, run), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CHILD_ENV
    )
    seen = ""
    while "training for" not in seen:
        line = child.stdout.readline()
        assert line, f"octlm ended before training: {seen}{child.stderr.read()}"
        seen += line
    time.sleep(0.5)
    child.send_signal(signum)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Traceback" not in err
    step = load_checkpoint(run / CHECKPOINT).step
    assert step >= 1 and f"interrupted at step {step}" in out + err
    assert f"octlm train --resume {run}" in out


@pytest.mark.slow
def test_a_closed_terminal_leaves_a_checkpoint_to_resume(small_corpus, tmp_path, capsys):
    """The terminal goes away (its controlling pty is closed): the kernel sends SIGHUP and every later write fails with
    EIO."""
    run = tmp_path / "run"
    pid, terminal = pty.fork()
    if pid == 0:  # the child, its terminal the pty
        os.execve(sys.executable, train_command(small_corpus, run), CHILD_ENV)
    seen, deadline = b"", time.monotonic() + 120
    while b"training for" not in seen:
        assert time.monotonic() < deadline, seen.decode(errors="replace")
        if select.select([terminal], [], [], 0.5)[0]:
            try:
                seen += os.read(terminal, 65536)
            except OSError:  # the child ended and closed the pty
                pytest.fail(f"octlm ended before training: {seen.decode(errors='replace')}")
    time.sleep(0.5)
    os.close(terminal)
    deadline = time.monotonic() + 120
    while not (ended := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("octlm went on training after its terminal closed")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(ended[1]) == 130
    step = load_checkpoint(run / CHECKPOINT).step
    assert step >= 1
    # past the warm-up the run keeps (the default 50 steps): on a busy machine the terminal can close before step 49
    end = max(step, 50) + 2
    assert main(["train", "--resume", str(run), "--max-steps", str(end), "--quiet"]) == 0
    assert load_checkpoint(run / CHECKPOINT).step == end


def test_ctrl_c_while_torch_imports_exits_130_without_a_traceback(monkeypatch, capsys):
    """A Ctrl-C in the seconds before the program starts (torch importing) is the same clean stop as one after."""
    import builtins

    from octlm.console import main

    real_import = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "octlm.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert main() == 130
    err = capsys.readouterr().err
    assert err == "octlm: interrupted before it started; nothing was written\n"


def test_import_octlm_leaves_torch_for_later():
    """The entry point can only catch that Ctrl-C if importing the package itself does not import torch."""
    import subprocess
    import sys

    code = (
        "import sys, octlm; assert 'torch' not in sys.modules; from octlm import Decoder, load_run; "
        "assert 'torch' in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_ctrl_c_while_the_parser_imports_torch_exits_130_without_a_traceback(monkeypatch, capsys):
    """The program imports torch while it builds its parser; a Ctrl-C there is the same one clean line (a new user's
    trial found a traceback)."""
    import octlm.cli.program as program

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(program, "build_parser", interrupted)
    assert program.main(["attention", "--run", "nowhere"]) == 130
    assert capsys.readouterr().err == "octlm: interrupted before it started; nothing was written\n"


class _GoneTerminal:
    """A stream whose every write fails as a closed terminal's (EIO) or a full disk's (ENOSPC) does."""

    def __init__(self, errno_: int) -> None:
        self.errno = errno_

    def write(self, text: str) -> int:
        raise OSError(self.errno, os.strerror(self.errno))

    def flush(self) -> None:
        raise OSError(self.errno, os.strerror(self.errno))


def test_a_terminal_gone_before_the_hangup_handler_ran_drops_the_write(monkeypatch):
    # A fresh clone's test run once saw the run above end with status 1: under load, a write reached the closed
    # terminal (EIO) before the SIGHUP handler had wrapped the streams.
    import errno

    from octlm.train.signals import StopSignals

    gone, full = _GoneTerminal(errno.EIO), _GoneTerminal(errno.ENOSPC)
    monkeypatch.setattr(sys, "stdout", gone)
    monkeypatch.setattr(sys, "stderr", full)
    with StopSignals(force_on_repeat=True):
        print("step 200: val loss 1.0", flush=True)  # dropped: the terminal is gone
        with pytest.raises(OSError, match="No space"):
            print("a full disk is not a hung-up terminal", file=sys.stderr, flush=True)
    assert sys.stdout is gone and sys.stderr is full  # put back as they were
