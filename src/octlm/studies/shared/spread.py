"""One study, its models spread over several processes that write into the same study folder.

Two ways to start the processes, one rule for what each does:

* ``torchrun --nproc-per-node N -m octlm length ...``: process ``RANK`` of
  ``WORLD_SIZE`` (each on ``cuda:LOCAL_RANK`` when GPUs exist, else on
  ``available CPUs // LOCAL_WORLD_SIZE`` threads unless ``--threads`` says);
* ``octlm length ... --shard I/N``: share ``I`` of ``N`` (0-based), for
  schedulers that start processes themselves (a SLURM job array), in any
  order, together or one after another;
* ``octlm length ... --processes N`` (on CPUs, by default one per free CPU):
  share 0 in this process, which starts the others on this machine
  (:mod:`octlm.studies.shared.processes`) and, like torchrun's rank 0,
  writes the tables.

Each base model of the study goes to one share with every fine-tune of
it: a fine-tune needs its base model's weights, and keeping it with its
base means no share ever waits for another (shares run one after another
would otherwise wait forever). The study weighs each base model with its
fine-tunes and scoring (:func:`balanced`: the heaviest first, each to the
share with the least work so far), so that the shares finish together;
every share computes the same split from the study's recorded options. Each share trains and scores its models
alone, whole, recording each part in ``progress/``
(:mod:`octlm.studies.shared.progress`); the tables are written from the records
once every part is recorded: under torchrun by rank 0, which polls the
records; with ``--shard`` by whichever share finds them complete, or by
a later plain run of the same command.

Processes coordinate only through the folder: no model trains with DDP.
torchrun's process group is joined once, with gloo, for the barrier after
rank 0 prepares the folder, and left before any model trains (a barrier
at the end would time out while one rank still trains). Shares
take an exclusive ``flock`` on the study folder's parent while they
prepare the folder or write the tables, so two never prepare it or write
the tables at once; the kernel drops the lock of a killed process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from octlm.errors import OctlmError
from octlm.report import Reporter

T = TypeVar("T")

#: What torchrun sets that would make a model's training join a process group of its own.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
#: ``--shard``'s help, the same in the text and the task study.
SHARD_HELP = (
    "run share I (0-based) of N of the study's models in this process, into the same --out as the other shares "
    "(a SLURM job array: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT); the share that finds every model recorded "
    "writes the tables"
)
#: Seconds between two looks at ``progress/`` while rank 0 waits for the other ranks.
POLL_SECONDS = 1.0


def balanced(weights: Sequence[float], count: int) -> tuple[int, ...]:
    """The share (0 .. ``count`` - 1) of each item of work weighing ``weights[k]``: the heaviest first (the earlier on
    a tie), each to the share with the least work so far (the lowest-numbered on a tie).

    Graham's longest-processing-time rule (Graham 1969, "Bounds on multiprocessing timing anomalies", SIAM J. Appl.
    Math. 17(2)): the busiest share carries at most 4/3 - 1/(3 ``count``) times what it would in the best split.
    Equal weights give ``k % count``. Deterministic, so every share of a study computes the same split.
    """
    loads = [0.0] * count
    owner = [0] * len(weights)
    for k in sorted(range(len(weights)), key=lambda k: (-weights[k], k)):
        share = min(range(count), key=lambda s: (loads[s], s))
        owner[k] = share
        loads[share] += weights[k]
    return tuple(owner)


@dataclass(frozen=True)
class Share:
    """This process's part of a study: base models ``k`` with ``owners[k] == index`` (``k % count`` until the study
    has weighed its models, :meth:`weighed`).

    Attributes:
        index: 0-based share (torchrun's ``RANK``, or ``I`` of ``--shard I/N``).
        count: number of shares (``WORLD_SIZE`` or ``N``); 1 for a plain study.
        launcher: ``"one"``, ``"torchrun"``, ``"shard"``, ``"local"`` (``--processes``: share 0, which started the
            others) or ``"worker"`` (one of those others).
        local_rank, local_count: torchrun's ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (0 and 1 otherwise).
        threads: torch's CPU threads in this share, set by ``--processes`` (``None``: the study's ``--threads``).
        owners: each base model's share (:func:`balanced`), once weighed.
    """

    index: int = 0
    count: int = 1
    launcher: str = "one"
    local_rank: int = 0
    local_count: int = 1
    threads: int | None = None
    owners: tuple[int, ...] | None = None

    @property
    def spread(self) -> bool:
        return self.count > 1

    @property
    def speaks(self) -> bool:
        """Whether this process prints the study's events: all but torchrun's ranks > 0 (the others of
        ``--processes`` write theirs into their logs)."""
        return not (self.launcher == "torchrun" and self.index > 0)

    @property
    def gathers(self) -> bool:
        """Whether this process waits for every share and writes the tables: torchrun's rank 0, ``--processes``'s
        first."""
        return self.launcher in ("torchrun", "local") and self.index == 0

    def weighed(self, weights: Sequence[float]) -> Share:
        """This share with the study's base models split by their work (``weights``, in the study's order)."""
        return dataclasses.replace(self, owners=balanced(weights, self.count))

    def owns(self, k: int) -> bool:
        """Whether base model ``k`` (0-based, in the study's order) and its fine-tunes are this share's."""
        return (k % self.count if self.owners is None else self.owners[k]) == self.index


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, 0 <= I < N.

    Raises:
        OctlmError: naming the value and the form it must take.
    """
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not int(match[1]) < int(match[2]):
        raise OctlmError(
            f"--shard {text!r}: give I/N, this process's share I (0-based) of N shares, with 0 <= I < N, e.g. "
            "--shard 0/4 (SLURM: --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)"
        )
    return int(match[1]), int(match[2])


def share_of(shard: str | None, overwrite: bool) -> Share:
    """This process's share, from torchrun's variables or ``--shard``; removes torchrun's variables from the
    environment so that each model trains in this process alone.

    Raises:
        OctlmError: for ``--shard`` under torchrun, a bad ``--shard``, or ``--shard`` with ``--overwrite``
            (every share would empty the folder the others write into).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        if shard is not None:
            raise OctlmError(
                f"--shard {shard}: torchrun already gives each process its share (RANK of WORLD_SIZE); drop --shard"
            )
        env = {name: os.environ.pop(name, None) for name in LAUNCH_VARIABLES}
        local_count = int(env["LOCAL_WORLD_SIZE"] or world)
        return Share(int(env["RANK"] or 0), world, "torchrun", int(env["LOCAL_RANK"] or 0), local_count)
    if shard is None:
        return Share()
    index, count = parse_shard(shard)
    if overwrite:
        raise OctlmError(
            f"--shard {shard} --overwrite: each share would empty the folder the others write into; delete the "
            "study folder once, then start every share without --overwrite"
        )
    return Share(index, count, "shard")


def placed_device(device: str, threads: int | None, share: Share) -> tuple[str, int | None]:
    """``(device, threads)`` of one torchrun rank: ``cuda:LOCAL_RANK`` for ``auto``/``cuda`` when GPUs exist, and
    on CPUs the available cores divided between the node's ranks unless ``--threads`` gave a number."""
    if share.launcher in ("local", "worker"):
        return device, share.threads
    if share.launcher != "torchrun":
        return device, threads
    import torch

    if device in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{share.local_rank % torch.cuda.device_count()}", threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return device, threads or max(1, cores // share.local_count)


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``out``'s parent folder (created if missing) while the block runs."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; start the shards one after another there
        yield
        return
    parent = Path(out).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def first_on_rank_zero(share: Share, work: Callable[[], T]) -> T | None:
    """Under torchrun: ``work()`` on rank 0, the others waiting for it (gloo, then the group is left); a plain
    call otherwise.

    Only a flag crosses between the processes (a tensor broadcast; nothing is pickled): rank 0 prints its
    own error, the others say that rank 0 failed.

    Returns ``work()``'s value on rank 0, ``None`` on the others.

    Raises:
        What ``work`` raised, on rank 0; :class:`octlm.train.distributed.RankZeroFailed` on the others.
    """
    if share.launcher != "torchrun":
        return work()
    import datetime

    import torch
    import torch.distributed as dist

    from octlm.train.distributed import RankZeroFailed

    # A long timeout: the ranks wait here while rank 0 times a --time-budget study's steps.
    dist.init_process_group("gloo", rank=share.index, world_size=share.count, timeout=datetime.timedelta(hours=24))
    try:
        result, failure = None, None
        if share.index == 0:
            try:
                result = work()
            except BaseException as err:  # the others must hear of it or they wait forever
                failure = err
        failed = torch.tensor([int(failure is not None)])
        dist.broadcast(failed, src=0)
        if failure is not None:
            raise failure
        if failed.item():
            raise RankZeroFailed("rank 0 failed to prepare the study folder; its error says why")
        return result
    finally:
        dist.destroy_process_group()


def wait_for(
    missing: Callable[[], list[str]],
    on_count: Callable[[int], None],
    check: Callable[[list[str]], None] = lambda left: None,
) -> None:
    """Poll until ``missing()`` is empty, calling ``on_count(n)`` whenever the number missing changes and
    ``check(missing)`` at every look (which raises when what is missing will never come)."""
    last = None
    while remaining := missing():
        if len(remaining) != last:
            on_count(len(remaining))
            last = len(remaining)
        check(remaining)
        time.sleep(POLL_SECONDS)


def open_share(share: Share, out: str, overwrite: bool, begin: Callable[[bool], T]) -> T:
    """Open (prepare or continue) the study folder for this share: ``begin(overwrite)`` makes or continues it.

    One process prepares, the others continue what it prepared: under
    torchrun rank 0 first (with ``overwrite``), the others after it; a
    ``--shard`` share under :func:`folder_lock` (the first prepares, the
    next find the study begun and continue it, refused when its options differ);
    with ``--processes`` the first, before it starts the others, which continue.
    """
    if share.launcher in ("shard", "worker"):
        with folder_lock(Path(out)):
            return begin(False)
    if share.launcher == "torchrun":
        got = first_on_rank_zero(share, lambda: begin(overwrite))
        return got if got is not None else begin(False)
    return begin(overwrite)


def count_models(progress, models: list[str], report: Reporter) -> Callable[[], None]:
    """A reporter of the models done out of the study's (``models``: the unit recorded last of each, whichever
    process recorded it), also called as each of this process's models is recorded."""

    def count() -> None:
        done = sum((progress.folder / f"{u}.json").is_file() for u in models)
        report.event("models", f"{done} of {len(models)} models of the study done", done=done, models=len(models))

    progress.recorded = lambda unit: count() if unit in models else None
    return count


def finish_share(
    share: Share,
    progress,
    units: list[str],
    models: list[str],
    report: Reporter,
    tables: Callable[[], dict],
    check: Callable[[list[str]], None] = lambda left: None,
) -> dict:
    """After this share's models: the study's tables (``tables()``, its result) once ``units`` (every unit of the
    study; ``models`` the last of each model) are all recorded in ``progress``, or a short result saying what waits
    for other shares.

    Under torchrun rank 0 waits for every record (reporting models done out
    of the study's, by the ``score-`` records; ``check(missing)`` at every
    look), the other ranks return, and so with ``--processes``; a
    ``--shard`` share writes the tables only when it finds every record there.
    """
    count = count_models(progress, models, report)

    def missing() -> list[str]:
        return [u for u in units if not (progress.folder / f"{u}.json").is_file()]

    mine = {"out": str(progress.out), "share": share.index, "shares": share.count}
    if share.launcher in ("torchrun", "local", "worker"):
        if not share.gathers:
            return mine
        wait_for(missing, lambda n: count(), check)
        count()
        progress.recorded = lambda unit: None
        return tables()
    with folder_lock(progress.out):
        if not progress.folder.is_dir():
            report.result({**mine, "tables": True}, f"share {share.index}/{share.count} done; another wrote the tables")
            return mine
        if left := missing():
            count()
            report.result(
                {**mine, "waiting": len(left)},
                f"share {share.index}/{share.count} done; {len(left)} parts of the study are other shares': the share "
                "that finishes last, or the same command without --shard, writes the tables",
            )
            return mine
        return tables()


__all__ = [
    "Share",
    "balanced",
    "count_models",
    "finish_share",
    "open_share",
    "first_on_rank_zero",
    "folder_lock",
    "parse_shard",
    "placed_device",
    "share_of",
    "wait_for",
]
