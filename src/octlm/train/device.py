"""Where training and sampling compute: the device, its number format, its memory, its threads."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import torch

from octlm.errors import OctlmError
from octlm.model import DecoderConfig


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


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` in bytes (GPU memory, or the machine's RAM); ``None`` when the system will not say."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(config: DecoderConfig, batch_size: int, device: torch.device) -> None:
    """Refuse a batch whose activations alone would not fit the device's memory (instead of being OOM-killed)."""
    total = device_memory_bytes(device)
    if total is None:
        return
    need = step_memory_bytes(config, batch_size)
    if need > total:
        logits = 3 * config.vocab_size
        layers = config.n_layers * (24 * config.d_model + 2 * config.n_heads * config.context_length)
        fix = "--batch-size, or " + ("--vocab-size" if logits >= layers else "--n-layers or --d-model")
        raise OctlmError(
            f"this model and batch need about {need / 2**30:,.0f} GiB of activations per step, more than this "
            f"{device.type} "
            f"has ({total / 2**30:.0f} GiB): --batch-size {batch_size} x --context-length {config.context_length} "
            "tokens, "
            f"each holding about 3 x --vocab-size {config.vocab_size} logits and --n-layers {config.n_layers} x "
            f"(24 x --d-model {config.d_model} + 2 x --n-heads {config.n_heads} x --context-length) activations; lower "
            f"{fix}"
        )


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the system has one, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_threads() -> int:
    """torch's CPU threads when ``--threads`` is not given: half the CPUs this process may use, at least 1;
    ``OMP_NUM_THREADS`` when set.

    A parallel torch operator waits for its slowest thread, so with a thread
    on every CPU one busy CPU elsewhere stalls every operator: 500 sampled
    tokens took 14.6 s instead of 3.8 s beside one busy process on a 2-CPU
    machine (issue 21; ``bench/threads.py`` measures it). Half the CPUs keeps
    the job fast while up to half of them do other work.
    """
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(1, available_cpus() // 2)


def set_threads(threads: int | None) -> None:
    """Use ``threads`` CPU threads for torch's operators (``None``: :func:`default_threads`)."""
    torch.set_num_threads(threads or default_threads())


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
    "default_threads",
    "device_memory_bytes",
    "resolve_device",
    "set_threads",
    "step_memory_bytes",
    "torch_settings",
]
