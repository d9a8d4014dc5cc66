"""Where training and sampling compute: the device, its number format, its memory, its threads."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from octlm.errors import OctlmError
from octlm.model import DecoderConfig
from octlm.report import memory_size
from octlm.train.memory_limit import memory_limit


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA, then Apple MPS, then the CPU; other names are checked.

    Raises:
        OctlmError: for a device that does not exist on this machine.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise OctlmError(f"--device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OctlmError(
            f"--device {name}: this machine has no CUDA GPU (or this torch build has no CUDA); use --device cpu"
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise OctlmError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise OctlmError(f"--device {name}: MPS is not available here; use --device cpu")
    return device


def autocast_for(device: torch.device, dtype: str):
    """The autocast context for ``--dtype`` (bfloat16 on CUDA by default)."""
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if dtype == "float32":
        return contextlib.nullcontext(), "float32"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16), "bfloat16"


def step_memory_bytes(config: DecoderConfig, batch_size: int) -> int:
    """A rough upper estimate of one training step's activation memory (bytes, float32).

    Per token: the logits with their softmax and gradient (3 x vocab_size
    floats) and, per layer, about 24 x d_model floats of saved activations
    plus two rows of attention weights per head when the fused kernel is
    not used. Weights and optimizer state are small beside it at octlm's sizes.
    """
    tokens = batch_size * config.context_length
    per_token = 3 * config.vocab_size + config.n_layers * (
        24 * config.d_model + 2 * config.n_heads * config.context_length
    )
    return 4 * tokens * per_token


def check_memory(config: DecoderConfig, batch_size: int, device: torch.device) -> None:
    """Refuse a batch whose activations alone would not fit the memory this process may take (instead of being
    OOM-killed): the device's, or less under a process limit (:func:`octlm.train.memory_limit.memory_limit`).

    Raises:
        OctlmError: naming the estimate, the limit that binds and the options to lower.
    """
    limit = memory_limit(device)
    if limit is None:
        return
    need = step_memory_bytes(config, batch_size)
    if need > limit.n_bytes:
        logits = 3 * config.vocab_size
        scores, rest = 2 * config.n_heads * config.context_length, 24 * config.d_model
        layers = config.n_layers * (rest + scores)
        # name the term that dominates: at long contexts the T x T scores, which --d-model cannot shrink
        model = "--context-length, --n-heads or --n-layers" if scores > rest else "--n-layers or --d-model"
        fix = "--batch-size, or " + ("--vocab-size" if logits >= layers else model)
        raise OctlmError(
            f"this model and batch need about {memory_size(need)} of activations per step, more than "
            f"{limit.describe()}: --batch-size {batch_size} x --context-length {config.context_length} tokens, "
            f"each holding about 3 x --vocab-size {config.vocab_size} logits and --n-layers {config.n_layers} "
            f"x (24 x --d-model {config.d_model} + 2 x --n-heads {config.n_heads} x --context-length) activations; "
            f"lower {fix}"
        )


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the system has one, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: How long :func:`idle_cpus` watches the CPUs: 20 of the kernel's 10 ms ticks, short beside any job octlm runs.
PROBE_SECONDS = 0.2
#: A CPU counts as free when it was idle at least this share of the probe: a parallel torch operator waits for its
#: slowest thread, so a thread on a CPU that is a quarter busy already slows every operator.
FREE_SHARE = 0.75


@dataclass(frozen=True)
class ThreadChoice:
    """How many CPU threads torch uses, and why, in words for the model line (``"2 CPUs idle"``, ``"one per idle CPU,
    1 of 2 CPUs idle"``)."""

    threads: int
    reason: str


def _cpu_ticks(cpus: set[int], stat: str) -> dict[int, tuple[int, int]]:
    """(busy, total) kernel ticks of each CPU in ``cpus`` from the text of ``/proc/stat``."""
    ticks = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            ticks[int(name[3:])] = (sum(values) - values[3] - values[4], sum(values))
    return ticks


def _read_proc_stat() -> str:
    with open("/proc/stat", encoding="ascii") as f:
        return f.read()


def idle_cpus(before: str, after: str, cpus: set[int]) -> float:
    """CPUs' worth of idle time in ``cpus`` between two readings of ``/proc/stat`` (0 .. ``len(cpus)``).

    Each CPU counts as its idle share of the interval (a CPU busy half the time is 0.5 idle); a CPU with no tick in
    the interval counts as idle.
    """
    first, second = _cpu_ticks(cpus, before), _cpu_ticks(cpus, after)
    idle = 0.0
    for cpu in cpus & first.keys() & second.keys():
        busy = second[cpu][0] - first[cpu][0]
        total = second[cpu][1] - first[cpu][1]
        idle += 1.0 - busy / total if total > 0 else 1.0
    return idle


def free_cpus(idle: float) -> int:
    """Threads worth starting with ``idle`` CPUs' worth of idle time: whole CPUs at least :data:`FREE_SHARE` idle,
    at least 1."""
    return max(1, math.floor(idle + (1.0 - FREE_SHARE)))


def choose_threads() -> ThreadChoice:
    """torch's CPU threads when ``--threads`` is not given: ``OMP_NUM_THREADS`` when set (at most the CPUs this
    process may use), else the CPUs free now.

    "Free" is measured, not assumed: over :data:`PROBE_SECONDS` the CPUs this process may run on are watched in
    ``/proc/stat`` (Linux), or else the 1-minute load average is taken from their count. A quiet machine gets all
    its CPUs; beside a busy process each busy CPU is left to it, since a parallel operator waits for its slowest
    thread and one busy CPU among its threads stalled every operator (500 sampled tokens took 14.6 s instead of
    3.8 s on 2 CPUs, issue 21; ``bench/threads.py`` measures it). Where neither reading exists, half the CPUs.

    Raises:
        OctlmError: when ``OMP_NUM_THREADS`` is set but not a positive whole number.
    """
    cpus = available_cpus()
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given:
        if not (given.isdigit() and int(given) > 0):
            raise OctlmError(
                f"OMP_NUM_THREADS={given!r} is not a positive whole number; unset it (octlm then takes the idle "
                "CPUs) or give --threads N"
            )
        if int(given) > cpus:  # more threads than CPUs make every operator wait on the oversubscribed ones
            return ThreadChoice(cpus, f"OMP_NUM_THREADS={given}, at most the {_cpus(cpus)} this process may use")
        return ThreadChoice(int(given), "OMP_NUM_THREADS")
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(cpus))
    try:
        before = _read_proc_stat()
        time.sleep(PROBE_SECONDS)
        idle = idle_cpus(before, _read_proc_stat(), set(mask))
    except (OSError, ValueError):
        try:
            idle = max(0.0, cpus - os.getloadavg()[0])
        except (OSError, AttributeError):
            return ThreadChoice(max(1, cpus // 2), f"half of {cpus} CPUs: their load is unknown here")
    threads = min(cpus, free_cpus(idle))
    allowed = f" (this process may use {_cpus(cpus)} of {os.cpu_count()})" if cpus < (os.cpu_count() or cpus) else ""
    # "1 of 2 CPUs idle" alone read to a newcomer as if a CPU sat unused: say that the busy ones were left alone
    idle_ones = f"one per idle CPU, {threads} of {_cpus(cpus)}" if threads < cpus else f"{_cpus(cpus)}"
    return ThreadChoice(threads, f"{idle_ones} idle{allowed}")


def _cpus(n: int) -> str:
    return f"{n} CPU" if n == 1 else f"{n} CPUs"


def default_threads() -> int:
    """torch's CPU threads when ``--threads`` is not given (:func:`choose_threads`)."""
    return choose_threads().threads


# torch's thread count is process-wide state, and so is why it was chosen: the model line reads it back.
_last_choice: ThreadChoice | None = None


def set_threads(threads: int | None) -> ThreadChoice:
    """Use ``threads`` CPU threads for torch's operators (``None``: :func:`choose_threads`); returns the choice."""
    global _last_choice
    _last_choice = ThreadChoice(threads, "--threads") if threads else choose_threads()
    torch.set_num_threads(_last_choice.threads)
    return _last_choice


def thread_choice() -> ThreadChoice:
    """The threads torch uses now and why: the last :func:`set_threads` choice while it still holds, else torch's
    own count."""
    if _last_choice is not None and _last_choice.threads == torch.get_num_threads():
        return _last_choice
    return ThreadChoice(torch.get_num_threads(), "set outside octlm")


def has_cpp_compiler() -> bool:
    """Whether inductor can build CPU code here: it needs ``$CXX``, ``g++``, ``c++`` or ``clang++``."""
    return any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c)


#: ``--compile auto`` compiles on CUDA a run whose step is at least this many FLOPs
#: (6 x parameters x tokens per step) and which is long (:data:`COMPILE_MIN_STEPS`, :data:`COMPILE_MIN_SECONDS`).
#: Measured on an H200 (docs/results.md): the GPT-2-small step (about 1.2e13 FLOPs) ran 1.88x faster compiled
#: after 26 s of compiling; the Day-1 step (about 1e10) gained nothing in ``octlm train`` and its 20 s
#: compile made the main job 45 s instead of 17 to 22 s.
COMPILE_FLOPS_PER_STEP = 1e12
#: GPT-2-small saves about 44 ms a step compiled and compiles in about 38 s (training and evaluation
#: graphs): it pays from about 900 steps. A 300-step run of a 25M-parameter model took 40 s compiled, 17 s eager.
COMPILE_MIN_STEPS = 1000
COMPILE_MIN_SECONDS = 300.0


def compiles(
    setting: str, device: torch.device, flops_per_step: float, steps: int | None, seconds: float | None
) -> bool:
    """Whether ``--compile SETTING`` compiles a run of ``steps`` steps or ``seconds`` of training (whichever is set).

    ``auto`` compiles on a CUDA GPU when the step is at least
    :data:`COMPILE_FLOPS_PER_STEP` and the run at least :data:`COMPILE_MIN_STEPS`
    steps or :data:`COMPILE_MIN_SECONDS` seconds: a small model's step is bound
    by kernel launches the GPU already overlaps, and a short run spends more
    compiling than it saves. The CPU stays eager: the Day-1 step gained nothing
    measurable there (bench/throughput.py --compile).

    Raises:
        OctlmError: for ``on`` with a CPU and no C++ compiler, or with MPS.
    """
    if setting == "auto":
        long_run = (steps is not None and steps >= COMPILE_MIN_STEPS) or (
            seconds is not None and seconds >= COMPILE_MIN_SECONDS
        )
        return device.type == "cuda" and flops_per_step >= COMPILE_FLOPS_PER_STEP and long_run
    if setting == "off":
        return False
    if device.type == "cpu" and not has_cpp_compiler():
        raise OctlmError(
            "--compile on: torch.compile builds C++ for the CPU and no compiler was found (g++, c++, clang++ or $CXX); "
            "install one, or use --compile off"
        )
    if device.type == "mps":
        raise OctlmError("--compile on: torch.compile does not support MPS well enough to train on; use --compile off")
    return True


def compile_model(module: torch.nn.Module, setting: str) -> torch.nn.Module:
    """``torch.compile(module)`` (inductor); the weights stay ``module``'s, so saving and sampling use the eager module.

    Under ``auto`` a graph that inductor cannot build runs eagerly instead of
    stopping the run (torch logs why); ``on`` lets the error through.
    """
    if setting == "auto":
        torch._dynamo.config.suppress_errors = True
    return torch.compile(module)


def set_deterministic(on: bool) -> None:
    """``--deterministic``: kernels that give the same bits on every run (slower on a GPU; off by default).

    cuBLAS needs a fixed workspace for that (``CUBLAS_WORKSPACE_CONFIG``, read
    when its first handle is made, so this runs before the model's first
    matmul). Strict, not warn-only: in warn-only mode cuDNN's attention keeps its
    non-deterministic backward (seen on an H200), while strict mode selects a
    deterministic one; an operator with none then stops the run with torch's error naming it.
    """
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


@contextlib.contextmanager
def torch_settings(threads: int | None, deterministic: bool) -> Iterator[None]:
    """``--threads`` and ``--deterministic`` for one run or study, put back as they were when it ends.

    Both are process-wide torch settings; without this, a Python program that
    trains twice (a notebook, a test) would keep the first run's.
    """
    before = (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )
    set_threads(threads)
    set_deterministic(deterministic)
    try:
        yield
    finally:
        threads_before, strict, warn_only, torch.backends.cudnn.benchmark = before
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(strict, warn_only=warn_only)


def defers_host_sync(device: torch.device, group) -> bool:
    """Whether a training step leaves its loss and norm on the device: on a GPU in one process (ranks agree every
    step)."""
    return device.type == "cuda" and not group.active


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on ``device``: on a GPU from pinned memory, without waiting for the copy."""
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


__all__ = [
    "COMPILE_FLOPS_PER_STEP",
    "COMPILE_MIN_SECONDS",
    "COMPILE_MIN_STEPS",
    "autocast_for",
    "available_cpus",
    "compile_model",
    "compiles",
    "defers_host_sync",
    "has_cpp_compiler",
    "set_deterministic",
    "to_device",
    "check_memory",
    "ThreadChoice",
    "choose_threads",
    "default_threads",
    "idle_cpus",
    "resolve_device",
    "set_threads",
    "thread_choice",
    "step_memory_bytes",
    "torch_settings",
]
