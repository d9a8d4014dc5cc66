"""A study spread over this machine's CPUs: ``--processes N``, by default one process per free CPU.

A study's models are independent, and the models a CPU study trains are
small: two processes on one thread each train two models in about the time
one process on two threads trains one (a small model's operators gain
little from a second thread). So on CPUs the study runs as ``N`` shares
(:mod:`octlm.studies.shared.spread`): this process prepares the folder
(timing the budget's steps, alone on the machine), starts shares 1 to
N - 1 as child processes of ``python -m octlm.studies.shared.worker``,
trains its own share, waits for the others' records and writes the
tables. Each model's numbers are those the one-process study computes on
the same threads.

The children run in their own session, so a Ctrl-C in the terminal
reaches this process alone; it passes one interrupt on to each child
(which saves its checkpoint, as a study does on Ctrl-C) and waits for
them, so the same command continues the study where every share
stopped. Each child writes what it prints into ``progress/share-I.log``;
a child that fails is named with its log and the command that continues.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from octlm.errors import OctlmError
from octlm.studies.shared.spread import LAUNCH_VARIABLES, Share

#: ``--processes``'s help, the same in the text and the task study.
PROCESSES_HELP = (
    "processes that train the study's models side by side on this machine's CPUs, each on --threads threads "
    "(default: one per free CPU on a CPU, each on one thread; 1 on a GPU or when OMP_NUM_THREADS is set; never more "
    "than the base models); the first prepares the folder, starts the others and writes the tables. A model's "
    "numbers depend on its threads, not on the processes: give --threads to compare studies run either way"
)
#: How long a child may take to save its checkpoint and stop after the interrupt, in seconds, before it is killed.
STOP_SECONDS = 120.0


def plan(processes: int | None, models: int, device: str, threads: int | None, free: Callable[[], int]) -> Share:
    """The share of this process for ``--processes`` (``None``: one per free CPU): ``Share()`` for one process.

    Args:
        processes: ``--processes``, or ``None`` for the default.
        models: the study's base models (more processes than models would have nothing to do).
        device: ``--device``: anything but ``cpu`` or ``auto`` on a machine without CUDA keeps one process by
            default (one GPU; several are torchrun's).
        threads: ``--threads``: each process's threads; ``None``: the free CPUs divided between the processes.
        free: the free CPUs now (:func:`octlm.train.device.default_threads`, which also reads ``OMP_NUM_THREADS``).

    Raises:
        OctlmError: for ``--processes`` below 1.
    """
    if processes is not None and processes < 1:
        raise OctlmError(f"--processes must be at least 1, got {processes}; 1 trains every model in this process")
    if processes is None:
        if models < 2 or os.environ.get("OMP_NUM_THREADS") or not _on_cpu(device):
            return Share()
        cpus = free()
        processes = max(1, cpus // (threads or 1))
    else:
        cpus = None
    count = min(processes, models)
    if count <= 1:
        return Share()
    each = threads or max(1, (cpus if cpus is not None else free()) // count)
    return Share(0, count, "local", threads=each)


def local_share(opts, share: Share, models: int) -> Share:
    """This process's share: ``share`` (torchrun's or ``--shard``'s) when another launcher set one, else the plan of
    ``opts.processes`` for ``models`` base models (:func:`plan`).

    Raises:
        OctlmError: for ``--processes`` beside ``--shard`` or torchrun, or below 1.
    """
    refuse_with_other_launcher(opts.processes, share)
    if share.launcher != "one":
        return share
    from octlm.train.device import default_threads

    return plan(opts.processes, models, opts.device, opts.threads, default_threads)


def side_by_side(share: Share, asked: int | None = None) -> str:
    """``", in 2 processes of 1 thread"`` for the study's first line of a ``--processes`` study, else ``""``; with
    ``asked`` (``--processes``) above the count, it says that the study has only that many base models."""
    lowered = asked is not None and asked > max(share.count, 1)
    said = f" (--processes {asked} asked: there are only {max(share.count, 1)} base models)" if lowered else ""
    if share.launcher != "local":
        return said and f", in one process{said}"
    return f", in {share.count} processes of {share.threads} thread{'' if share.threads == 1 else 's'} each{said}"


def checker(workers: Workers | None) -> Callable[[list[str]], None]:
    """What the first process calls while it waits for the others' records (:meth:`Workers.check`)."""
    if workers is None:
        return lambda missing: None
    return lambda missing: workers.check(missing, "the same command continues the study where it stopped")


def _on_cpu(device: str) -> bool:
    if device == "cpu":
        return True
    if device != "auto":
        return False
    import torch

    return not (torch.cuda.is_available() or torch.backends.mps.is_available())


def refuse_with_other_launcher(processes: int | None, share: Share) -> None:
    """``--processes`` beside ``--shard`` or torchrun, which already say the study's processes.

    Raises:
        OctlmError: naming both and the fix.
    """
    if processes is not None and processes > 1 and share.launcher in ("shard", "torchrun"):
        other = f"--shard {share.index}/{share.count}" if share.launcher == "shard" else "torchrun"
        raise OctlmError(
            f"--processes {processes} with {other}: {other} already starts the study's processes; drop --processes"
        )


def worker_command(kind: str, options: dict, index: int, share: Share) -> list[str]:
    """The command line of share ``index`` of ``share.count``: the study ``kind`` (``length``, ``tasks``) with
    ``options`` (as :func:`~octlm.declare.plain_dict` gives them)."""
    shard = f"{index}/{share.count}"
    return [sys.executable, "-m", "octlm.studies.shared.worker", kind, shard, str(share.threads), json.dumps(options)]


class Workers:
    """The child processes of a ``--processes`` study (shares 1 .. N - 1), started by :func:`started`."""

    def __init__(self, commands: list[list[str]], logs: Path) -> None:
        self.logs = logs
        self.children: list[tuple[int, subprocess.Popen, Path]] = []
        env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
        for index, command in enumerate(commands, start=1):
            log = logs / f"share-{index}.log"
            with open(log, "ab") as sink:
                child = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True,
                )  # fmt: skip
            self.children.append((index, child, log))

    def check(self, missing: list[str], continue_with: str) -> None:
        """Raise when a child failed, or when every child ended and ``missing`` parts will never be recorded.

        Raises:
            OctlmError: naming the share, its exit status and its log, and ``continue_with``.
        """
        count = len(self.children) + 1
        for index, child, log in self.children:
            if (code := child.poll()) not in (None, 0):
                tail = _last_line(log)
                raise OctlmError(
                    f"share {index}/{count} of the study stopped with exit status {code}"
                    + (f" ({tail})" if tail else "")
                    + f"; its output is in {log}; {continue_with}"
                )
        if missing and all(child.poll() == 0 for _, child, _ in self.children):
            raise OctlmError(
                f"every share of the study ended but {len(missing)} parts were not recorded (first: {missing[0]}); "
                f"{continue_with}"
            )

    def stop(self) -> None:
        """Interrupt every child still running (once: it saves its checkpoint) and wait for it; kill it after
        :data:`STOP_SECONDS`."""
        for _, child, _ in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT)
        for _, child, _ in self.children:
            try:
                child.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def wait(self) -> None:
        """Wait for the children to exit once their parts are recorded."""
        for _, child, _ in self.children:
            child.wait()


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")


@contextlib.contextmanager
def started(share: Share, kind: str, options: dict, logs: Path) -> Iterator[Workers | None]:
    """Shares 1 .. N - 1 of a ``--processes`` study running while the block runs (``None`` for any other share).

    On leaving the block normally the children are waited for; on an error or an interrupt each is interrupted once
    and waited for, so every part it finished is recorded.
    """
    if share.launcher != "local":
        yield None
        return
    workers = Workers([worker_command(kind, options, i, share) for i in range(1, share.count)], logs)
    try:
        yield workers
    except BaseException:
        workers.stop()
        raise
    workers.wait()


__all__ = [
    "PROCESSES_HELP",
    "Workers",
    "checker",
    "local_share",
    "plan",
    "refuse_with_other_launcher",
    "side_by_side",
    "started",
    "worker_command",
]
