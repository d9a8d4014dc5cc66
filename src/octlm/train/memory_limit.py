"""How much memory this process may still take: the least of the device's memory and the limits set on the process.

A machine's physical memory is not what a process can allocate when it runs
under ``ulimit -v`` (``RLIMIT_AS``), ``ulimit -d`` (``RLIMIT_DATA``) or in a
container whose cgroup caps its memory (cgroup v2 ``memory.max``, v1
``memory.limit_in_bytes``): the allocator fails, or the kernel's OOM killer
stops the process, long before the machine's memory is used. Every memory
refusal (training, sampling, attention) compares its estimate with
:func:`memory_limit`, which names the limit that binds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from octlm.report import memory_size

#: Where the cgroup file systems are mounted, and where the kernel says which cgroups this process is in.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
#: The kernel's account of this process's memory (``VmSize``: all it maps; ``VmData``: its data and heap).
PROC_STATUS = Path("/proc/self/status")
#: A cgroup v1 limit this large is the kernel's "no limit" (``PAGE_COUNTER_MAX`` in bytes, 2**63 rounded to pages).
NO_CGROUP_LIMIT = 2**60


@dataclass(frozen=True)
class MemoryLimit:
    """Bytes a process may still allocate on a device, and where that figure comes from.

    ``owner`` reads before the amount ("this machine's"), or ``source`` after
    it names the limit and what is already used under it.
    """

    n_bytes: int
    owner: str = ""
    source: str = ""

    def describe(self, digits: int = 0) -> str:
        """The amount in a sentence: "this machine's 64 GiB of memory", "the 412 MiB left under ... (...)"."""
        if self.owner:
            return f"{self.owner} {memory_size(self.n_bytes, digits)} of memory"
        return f"the {memory_size(self.n_bytes, digits)} {self.source}"


def _status_bytes() -> dict[str, int]:
    """``VmSize`` and ``VmData`` of this process in bytes; empty where ``/proc`` does not say."""
    try:
        text = PROC_STATUS.read_text(encoding="ascii", errors="replace")
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmSize", "VmData") and value.split() and value.split()[0].isdigit():
            found[key] = int(value.split()[0]) * 1024  # the kernel writes kB
    return found


def rlimit_rooms() -> list[MemoryLimit]:
    """Room left under ``RLIMIT_AS`` (less ``VmSize``) and ``RLIMIT_DATA`` (less ``VmData``), where either is set."""
    try:
        import resource
    except ImportError:  # no resource limits on this system (Windows)
        return []
    status, rooms = _status_bytes(), []
    for name, command, used_key, kind, use in (
        ("RLIMIT_AS", "ulimit -v", "VmSize", "address-space", "mapped"),
        ("RLIMIT_DATA", "ulimit -d", "VmData", "data", "in data"),
    ):
        soft = resource.getrlimit(getattr(resource, name))[0]
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = status.get(used_key, 0)
        already = f", {memory_size(used)} {use} already" if used_key in status else ""
        rooms.append(
            MemoryLimit(
                max(0, soft - used),
                source=f"left under this process's {kind} limit ({name}, `{command}`: {memory_size(soft)}{already}; "
                "raise it to allow more)",
            )
        )
    return rooms


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _reclaimable(stat: Path, key: str) -> int:
    """The inactive page cache in a cgroup's ``memory.stat``: counted as in use, yet given back on demand."""
    try:
        for line in stat.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except (OSError, UnicodeDecodeError):
        pass
    return 0


def _cgroup_rooms(mount: Path, group: str, files: tuple[str, str, str]) -> list[MemoryLimit]:
    """Room under the memory limit of ``group`` and of each cgroup above it, as mounted at ``mount``.

    A limit higher up caps everything under it; a path the mount does not hold
    (v1 inside a container, which mounts its own cgroup as the root) is skipped
    up to the mount's root.
    """
    limit_name, usage_name, stat_key = files
    parts = [p for p in group.strip("/").split("/") if p]
    rooms = []
    for depth in range(len(parts), -1, -1):
        folder = mount.joinpath(*parts[:depth])
        limit = _read_number(folder / limit_name)
        if limit is None or limit >= NO_CGROUP_LIMIT:
            continue
        usage = _read_number(folder / usage_name) or 0
        used = max(0, usage - _reclaimable(folder / "memory.stat", stat_key))
        rooms.append(
            MemoryLimit(
                max(0, limit - used),
                source=f"left in this process's cgroup ({folder / limit_name}: {memory_size(limit)}, "
                f"{memory_size(used)} in use; give the container more memory to allow more)",
            )
        )
    return rooms


def cgroup_rooms() -> list[MemoryLimit]:
    """Room under the cgroup memory limits this process lives in (cgroup v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), less what the group already uses beyond reclaimable page cache."""
    try:
        lines = PROC_CGROUP.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    rooms = []
    for line in lines:
        hierarchy, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:  # v2, mounted alone or as "unified" beside v1
            for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
                rooms += _cgroup_rooms(mount, group, ("memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            rooms += _cgroup_rooms(CGROUP_ROOT / "memory", group, files)
    return rooms


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` in bytes (GPU memory, or the machine's RAM); ``None`` when the system will not say."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(device: torch.device) -> MemoryLimit | None:
    """What a process may still allocate on ``device``: the least of its memory and the process's limits.

    A GPU's memory is its own (``device_memory_bytes``); the CPU (and Apple's
    MPS, which shares it) is also capped by the process's ``RLIMIT_AS`` and
    ``RLIMIT_DATA`` and its cgroups' memory limits, less what is already used
    under each. ``None`` when nothing can be read.
    """
    total = device_memory_bytes(device)
    owner = "this machine's" if device.type == "cpu" else f"this {device.type} device's"
    found = [] if total is None else [MemoryLimit(total, owner=owner)]
    if device.type != "cuda":
        found += rlimit_rooms() + cgroup_rooms()
    return min(found, key=lambda limit: limit.n_bytes, default=None)


__all__ = ["device_memory_bytes", "MemoryLimit", "cgroup_rooms", "memory_limit", "rlimit_rooms"]
