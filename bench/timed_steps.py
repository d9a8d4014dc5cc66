"""What the throughput benchmark times and how: octlm's AdamW step and evaluation pass on token ids, the SDPA kernels
they call, and the same steps under ``torch.compile``. ``bench/throughput.py`` documents the figures."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared timing
from device_timing import PeakMemory, median_seconds, synchronize  # noqa: E402

from octlm.model import Decoder, cross_entropy  # noqa: E402
from octlm.train import device as octlm_device  # noqa: E402
from octlm.train import optim  # noqa: E402
from octlm.train.options import TrainOptions  # noqa: E402

#: SDPA's aten operators -> the backend they are.
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}
BACKENDS = [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
PHASES = ["train", "eval"]


def make_optimizer(model: Decoder, device: torch.device) -> torch.optim.AdamW:
    """octlm's own AdamW (:func:`octlm.train.optim.make_optimizer`) with the default options otherwise.

    AdamW, not ``octlm train``'s default since issue 26 (Muon): every figure this
    benchmark has published timed AdamW's step; ``bench/optimizers.py`` compares the two.
    """
    return optim.make_optimizer(model, TrainOptions(optimizer="adamw"), device)


def autocast_for(device: torch.device):
    """``--dtype auto`` (:func:`octlm.train.device.autocast_for`): the autocast context and the compute dtype."""
    context, name = octlm_device.autocast_for(device, "auto")
    return context, getattr(torch, name)


def step_functions(
    model: torch.nn.Module, params: list, optimizer: torch.optim.Optimizer, ids: torch.Tensor, autocast
) -> tuple[Callable, Callable]:
    """(one training step, one evaluation pass) on token ids [B, T + 1]."""
    grad_clip = TrainOptions().grad_clip

    def train_step() -> None:
        model.train()
        with autocast:
            loss = cross_entropy(model(ids[:, :-1]), ids[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()

    @torch.no_grad()
    def eval_step() -> None:
        model.eval()
        with autocast:
            model(ids[:, :-1])

    return train_step, eval_step


@contextlib.contextmanager
def quiet_stderr():
    """Silence file descriptor 2: the profiler's C++ side logs every start and stop there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def sdpa_kernels(
    model: Decoder, ids: torch.Tensor, train_step: Callable, eval_step: Callable, autocast, phases: list[str] = PHASES
) -> dict:
    """Which SDPA operators the steps of ``phases`` call, and which backends can run alone (in the step's dtype)."""
    found = {}
    for name, fn in (
        (f"{phase}_ops", step) for phase, step in (("train", train_step), ("eval", eval_step)) if phase in phases
    ):
        with quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn()
        names = sorted({e.key for e in prof.key_averages() if e.key in SDPA_OPS})
        found[name] = [f"{SDPA_OPS[n]}: {n}" for n in names]
    found["backends_that_run"] = []
    for backend in BACKENDS:
        try:
            # under the step's autocast: flash and cuDNN take 16-bit inputs only
            with warnings.catch_warnings(), sdpa_kernel([backend]), autocast:
                warnings.simplefilter("ignore")  # SDPA warns for every backend it cannot use
                model.train()
                loss = cross_entropy(model(ids[:, :-1]), ids[:, 1:])
            loss.backward()
            found["backends_that_run"].append(backend.name)
        except RuntimeError:
            pass
        model.zero_grad(set_to_none=True)
    return found


def measure_compile(
    model: Decoder,
    optimizer,
    ids: torch.Tensor,
    autocast,
    args,
    device: torch.device,
    tokens: int,
    memory: PeakMemory | None = None,
) -> dict:
    """Tokens per second of ``torch.compile(model, mode=args.compile_mode)`` for ``args.phases``, with ``"mode"``.

    A failure adds ``"error"`` to what was measured before it (a compiled
    training step's figures stay when the evaluation graph fails).
    """
    result: dict = {"mode": args.compile_mode}
    if device.type == "cpu" and not octlm_device.has_cpp_compiler():
        return {**result, "error": "no C++ compiler (g++, c++, clang++ or $CXX) for inductor's CPU code"}
    # a fresh cache per scheme and batch size: the Decoder's code objects are shared between models
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, mode=args.compile_mode)
        params = list({id(p): p for p in model.parameters()}.values())
        train_step, eval_step = step_functions(compiled, params, optimizer, ids, autocast)
        for name, fn in (("train", train_step), ("eval", eval_step)):
            if name not in args.phases:
                continue
            if memory is not None:
                memory.reset()
            synchronize(device)
            t0 = time.perf_counter()
            fn()  # compiles
            synchronize(device)
            result[f"{name}_compile_seconds"] = round(time.perf_counter() - t0, 1)
            seconds = median_seconds(fn, args.warmup, args.repeats, device)
            result[f"{name}_tokens_per_second"] = round(tokens / seconds, 1)
            if memory is not None:
                result[f"{name}_peak_memory_bytes"] = memory.read()
        return result
    except Exception as error:  # noqa: BLE001 -- any compiler failure is a result to record
        return {**result, "error": f"{type(error).__name__}: {str(error)[:600]}"}
