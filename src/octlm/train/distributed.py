"""Several processes, one run: what ``torchrun`` sets up and what the training loop needs from it.

``torchrun --nproc_per_node N -m octlm train ...`` starts N copies of octlm with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their
environment. :func:`setup` reads them and joins the process group: NCCL when the
processes train on CUDA GPUs (one GPU each, ``cuda:LOCAL_RANK``), gloo on CPUs.
Without those variables it returns a one-process :class:`Group` whose collectives
do nothing, so the training loop has one code path.

Rank 0 alone prepares the corpus, writes files and prints; the others wait for
it (:meth:`Group.run_on_main`) and read what it wrote, so the run folder must be
on a filesystem every node sees.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from octlm.errors import OctlmError


class RankZeroFailed(OctlmError):
    """Raised on ranks > 0 when rank 0 failed; rank 0 prints the reason, the others stay quiet."""


@dataclass
class Group:
    """This process's place among the processes of one run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def run_on_main(self, work: Callable[[], Any]) -> Any:
        """Run ``work()`` on rank 0 only, then let every rank go on (a barrier that carries errors).

        Returns ``work()``'s value on rank 0 and ``None`` elsewhere.

        Raises:
            The error ``work`` raised, on rank 0; :class:`RankZeroFailed` on the others.
        """
        result, failure = None, None
        if self.is_main:
            try:
                result = work()
            except BaseException as err:  # the others must hear of it or they wait forever
                failure = err
        if self.active:
            box = [None if failure is None else f"{type(failure).__name__}: {failure}"]
            dist.broadcast_object_list(box, src=0)
            if box[0] is not None and not self.is_main:
                raise RankZeroFailed(f"rank 0 failed: {box[0]}")
        if failure is not None:
            raise failure
        return result

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        """Sum ``values`` over all ranks (float64); the values themselves in one process."""
        if not self.active:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self.active and dist.is_initialized():
            dist.destroy_process_group()


def launched_by_torchrun() -> bool:
    """Whether torchrun (or another launcher setting ``WORLD_SIZE``) started this process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device_name: str) -> tuple[Group, str]:
    """Join the process group when launched by torchrun; returns the group and the device to use.

    ``device_name`` is ``--device``: under torchrun, ``auto`` and ``cuda`` mean
    ``cuda:LOCAL_RANK`` when GPUs exist (NCCL), ``cpu`` (or no GPU) means gloo.

    Raises:
        OctlmError: for ``--device cuda:N`` or ``mps`` under torchrun, or more
            processes on a node than it has GPUs.
    """
    if not launched_by_torchrun():
        return Group(), device_name
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_name.startswith("cuda:") or device_name == "mps":
        raise OctlmError(
            f"--device {device_name}: under torchrun each process takes its own GPU (cuda:LOCAL_RANK); use --device "
            "auto, cuda or cpu"
        )
    use_cuda = device_name in ("auto", "cuda") and torch.cuda.is_available()
    if device_name == "cuda" and not use_cuda:
        raise OctlmError(
            "--device cuda: this machine has no CUDA GPU (or this torch build has no CUDA); use --device cpu"
        )
    if use_cuda:
        if local >= torch.cuda.device_count():
            raise OctlmError(
                f"LOCAL_RANK={local} but this node has {torch.cuda.device_count()} GPU(s); start at most that many "
                "processes per node"
            )
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=30))
    return Group(rank, world, local, backend), device


__all__ = ["Group", "RankZeroFailed", "launched_by_torchrun", "setup"]
