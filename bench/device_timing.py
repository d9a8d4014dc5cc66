"""Timing on a device, for the benchmarks: the median of timed calls between device synchronisations, the device's
measured peak FLOP/s (with a datasheet figure on a known GPU) and peak memory of what runs between two points.
:mod:`throughput` (``bench/throughput.py``) documents how its figures use them."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

#: Dense bfloat16 tensor-core peaks from NVIDIA's datasheets (FLOP/s, without sparsity), by name fragment.
DATASHEET_BF16 = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(
    fn: Callable[[], object],
    warmup: int,
    repeats: int,
    device: torch.device,
    between: Callable[[], object] | None = None,
) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones; ``between()`` runs untimed
    after each."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
        if between is not None:
            between()
    return statistics.median(times)


class PeakFlops:
    """The device's peak FLOP/s: the best of many [size, size] @ [size, size] matmuls in the step's dtype.

    Sampled before the first scheme, after every timed step (:meth:`sample`
    as ``median_seconds``' ``between``) and at the end, so that the peak and
    the steps see the same machine: on a shared machine another program's
    burst slows both, and a quiet moment that speeds a step also lets a
    matmul reach the peak beside it. A datasheet figure is added on a known GPU.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype, size: int) -> None:
        self.device, self.dtype, self.size = device, dtype, size
        self.a = torch.randn(size, size, device=device, dtype=dtype)
        self.b = torch.randn(size, size, device=device, dtype=dtype)
        self.inner = 10 if device.type == "cuda" else 1  # amortise launch and sync on a GPU
        self.best, self.samples = float("inf"), 0
        torch.mm(self.a, self.b)  # warm-up

    def sample(self, repeats: int = 1) -> None:
        for _ in range(repeats):
            synchronize(self.device)
            t0 = time.perf_counter()
            for _ in range(self.inner):
                torch.mm(self.a, self.b)
            synchronize(self.device)
            self.best = min(self.best, (time.perf_counter() - t0) / self.inner)
            self.samples += 1

    @property
    def measured(self) -> float:
        return 2 * self.size**3 / self.best

    def as_dict(self) -> dict:
        result = {
            "measured": self.measured,
            "matmul_size": self.size,
            "samples": self.samples,
            "dtype": str(self.dtype).removeprefix("torch."),
            "datasheet": None,
        }
        if self.device.type == "cuda" and self.dtype == torch.bfloat16:
            name = torch.cuda.get_device_name(self.device)
            result["datasheet"] = next((v for k, v in DATASHEET_BF16.items() if k in name), None)
        return result


class PeakMemory:
    """Peak memory of what runs between :meth:`reset` and :meth:`read`; ``method`` says how it is measured."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        clear_refs = Path("/proc/self/clear_refs")
        if device.type == "cuda":
            self.method = "torch.cuda.max_memory_allocated (tensors, after reset_peak_memory_stats)"
        elif clear_refs.exists() and os.access(clear_refs, os.W_OK):
            self.method = "VmHWM: peak resident set size of the whole process, reset through /proc/self/clear_refs"
        else:
            self.method = "ru_maxrss: peak resident set size of the whole process since it started"

    def reset(self) -> int:
        """Start a measurement; returns the current resident set (CPU) or allocated bytes (CUDA)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        gc.collect()
        with contextlib.suppress(OSError, AttributeError):
            # hand freed heap back to the OS, so the peak is this measurement's and not an earlier one's
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        if self.method.startswith("VmHWM"):
            Path("/proc/self/clear_refs").write_text("5")
        return self._status("VmRSS") or 0

    def read(self) -> int:
        """The peak since :meth:`reset` (bytes)."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        if self.method.startswith("VmHWM"):
            return self._status("VmHWM")
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    @staticmethod
    def _status(field: str) -> int | None:
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return None
