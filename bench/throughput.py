"""Training and evaluation throughput per position scheme, with MFU; prints JSON.

    .venv/bin/python bench/throughput.py [--quick] [--compile [--compile-schemes rope] [--compile-mode MODE]]
        [--schemes rope alibi] [--shapes day1] [--batch-size N [N ...]] [--phases train eval] [--device cpu]

Shapes: the Day-1 decoder (vocab 1,024, d_model 128, 4 heads, 2 layers,
T 128, batch 32) everywhere, and a GPT-2-small decoder (vocab 50,257,
d_model 768, 12 heads, 12 layers, T 1,024, batch 16) on CUDA only. Every
scheme in :data:`octlm.model.positions.SCHEMES` runs on each shape, untrained, on
random token ids (speed does not depend on the weights or the text).
``--batch-size 16 32`` (or ``--batch-sizes``) runs every shape named at each
of those batch sizes instead of its own, one after another in the same
process, so a sweep shares one measured peak; each (shape, batch size) is its
own entry of ``shapes`` in the JSON, with ``batch_size`` and
``default_batch_size``. A batch that runs out of GPU memory is recorded as the
row's ``error`` and the sweep goes on.

What is timed:
  * a training step: forward, next-token cross entropy, ``zero_grad``,
    backward, gradient clipping at 1.0 and an AdamW step, with octlm's own
    optimizer (:func:`octlm.train.optim.make_optimizer`, ``--optimizer adamw``, the other options default; fused on
    CUDA) and autocast (:func:`octlm.train.device.autocast_for` with ``auto``:
    bfloat16 on CUDA, float32 on CPU). The
    learning rate stays at the peak: no schedule, no data loading, no
    logging, so this is the model's and the optimizer's speed, an upper
    bound on ``octlm train``'s;
  * evaluation: a forward pass under ``torch.no_grad`` in eval mode.
``--phases train`` times training alone (eager and compiled), which saves the
evaluation graph's compile (12 of GPT-2-small's 38 s on an H200); the JSON
then has no ``eval_*`` keys.
Each is run ``--warmup`` times untimed, then ``--repeats`` times, each
repeat one step between device synchronisations; tokens per second is
B x T over the median step time.

FLOPs per token, from the shape (not from a profiler):
  * N counts every parameter that multiplies: the blocks' weights and biases
    (LayerNorm gains included, negligible) and the token table once, because
    the output head *is* the token table (tied) and the head's matmul is
    2 x V x C FLOPs per token; the table's lookup costs nothing. A learned
    position table is left out (a lookup, no multiply), so every scheme has
    the same count. RoPE's rotation, ALiBi's bias, softmax, LayerNorm and
    GELU arithmetic are left out too (elementwise, a few % at most).
  * training: ``6N + 12 L H Q T`` per token, PaLM (Chowdhery et al. 2022),
    appendix B, with L layers, H heads, Q head size and T the sequence
    length: 2 FLOPs per multiply-add, backward twice the forward, and
    attention's score and value matmuls over all T keys (the causal half
    that kernels skip is counted anyway, as PaLM and nanoGPT do).
  * evaluation: a third of that, ``2N + 4 L H Q T``. Kaplan et al. 2020,
    section 2.1 (table 1), give ``C_forward ~ 2N + 2 n_layer n_ctx d_attn``,
    counting the attention term once; the JSON reports it beside ours as
    ``eval_kaplan``. Kaplan's N excludes the embeddings; ours adds the tied
    head because at vocab 1,024 and width 128 it is a quarter of the work.
MFU (model FLOPs utilisation) is FLOPs per token x tokens per second over
the device's peak FLOP/s, *measured in the same run*: the fastest of many
square matmuls (1,024 on CPU, 8,192 on CUDA) in the step's dtype (float32 on
CPU, bfloat16 on CUDA), timed before, between and after the timed steps
(:class:`PeakFlops`). On a known GPU a datasheet peak (dense, no sparsity)
is printed beside it.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats`` (tensors only, not the allocator's cache); on
Linux CPUs the process's peak resident set size, ``VmHWM`` in
``/proc/self/status``, reset before each measurement by writing 5 to
``/proc/self/clear_refs``: it includes the interpreter and torch
themselves (``rss_before_bytes`` says how much). Elsewhere it falls back to
``ru_maxrss``, the peak of the whole process so far.

Which SDPA kernel runs: one training step and one evaluation pass are
recorded with ``torch.profiler``, and the ``aten::_scaled_dot_product_*``
operators they call are named (``sdpa.train_ops``, ``sdpa.eval_ops``); each
backend is also forced alone with ``torch.nn.attention.sdpa_kernel`` to list
the ones that can run the scheme's call (``sdpa.backends_that_run``). A
scheme that forms attention's weights itself (``PositionScheme.attend``:
stick-breaking, PaTH) calls no SDPA operator; its row says so
(``own_attention``), and its lists of operators are empty by design.

``--compile`` also times ``torch.compile(model, mode=--compile-mode)``
(inductor; on CPU it needs a C++ compiler) in the same run, with the compile
time, the peak memory and the ratio to eager; a failure is recorded in the
JSON, not raised. The mode (``default``, ``reduce-overhead``: CUDA graphs,
``max-autotune``: matmul autotuning and CUDA graphs, or
``max-autotune-no-cudagraphs``) is recorded at the top (``compile_mode``) and
in each row's ``compile``. Only the model is compiled: the loss, clipping and
the optimizer step run eagerly around it, as in ``octlm train --compile``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared timing
from device_timing import PeakFlops, PeakMemory, median_seconds  # noqa: E402
from timed_steps import PHASES, autocast_for, make_optimizer, measure_compile, sdpa_kernels, step_functions  # noqa: E402

from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES

#: The shapes: name -> (DecoderConfig fields, default batch size, needs CUDA).
SHAPES = {
    "day1": (dict(vocab_size=1024, context_length=128, d_model=128, n_heads=4, n_layers=2), 32, False),
    "gpt2-small": (dict(vocab_size=50257, context_length=1024, d_model=768, n_heads=12, n_layers=12), 16, True),
}

#: Timed matmuls per peak measurement; many small ones beat a few big ones on a shared machine.
PEAK_REPEATS = 20
#: torch.compile's modes (``torch._inductor.list_mode_options``), ``default`` first.
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def flops_per_token(config: DecoderConfig) -> dict[str, float]:
    """Model FLOPs per token for training and evaluation (see the module docstring for the formula)."""
    model = Decoder(config)
    n = model.num_parameters(exclude_embeddings=True) + model.token_embedding.weight.numel()
    attention = config.n_layers * config.d_model * config.context_length  # L H Q T
    return {
        "parameters_counted": n,
        "train": 6 * n + 12 * attention,
        "eval": 2 * n + 4 * attention,
        "eval_kaplan": 2 * n + 2 * attention,
    }


def measure_scheme(
    shape: str, position: str, batch_size: int, args, device: torch.device, memory: PeakMemory, peak: PeakFlops
) -> dict:
    """One scheme on one shape at one batch size: tokens/s, achieved FLOP/s and peak memory for ``args.phases``, the
    SDPA kernels."""
    fields = SHAPES[shape][0]
    config = DecoderConfig(position=position, **fields)
    torch.manual_seed(0)
    model = Decoder(config).to(device)
    params = list({id(p): p for p in model.parameters()}.values())
    optimizer = make_optimizer(model, device)
    autocast, _ = autocast_for(device)
    ids = torch.randint(0, config.vocab_size, (batch_size, config.context_length + 1), device=device)
    tokens = batch_size * config.context_length
    flops = flops_per_token(config)
    train_step, eval_step = step_functions(model, params, optimizer, ids, autocast)
    row: dict = {"position": position, "own_attention": SCHEMES[position].attends}
    for name, fn in (("train", train_step), ("eval", eval_step)):
        if name not in args.phases:
            continue
        row[f"rss_before_{name}_bytes" if device.type == "cpu" else f"allocated_before_{name}_bytes"] = memory.reset()
        seconds = median_seconds(fn, args.warmup, args.repeats, device, between=peak.sample)
        row[f"{name}_peak_memory_bytes"] = memory.read()
        row[f"{name}_tokens_per_second"] = round(tokens / seconds, 1)
        row[f"{name}_flops_per_second"] = flops[name] * tokens / seconds
    row["sdpa"] = sdpa_kernels(model, ids, train_step, eval_step, autocast, args.phases)
    if args.compile and position in (args.compile_schemes or args.schemes):
        compiled = measure_compile(model, optimizer, ids, autocast, args, device, tokens, memory)
        for name in args.phases:
            if f"{name}_tokens_per_second" in compiled:
                compiled[f"{name}_speedup"] = round(
                    compiled[f"{name}_tokens_per_second"] / row[f"{name}_tokens_per_second"], 2
                )
        row["compile"] = compiled
    return row


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda[:N]")
    parser.add_argument(
        "--schemes", nargs="+", default=sorted(SCHEMES), choices=sorted(SCHEMES), help="position schemes"
    )
    parser.add_argument(
        "--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), help="shapes (gpt2-small needs CUDA)"
    )
    parser.add_argument(
        "--batch-size",
        "--batch-sizes",
        dest="batch_sizes",
        nargs="+",
        type=int,
        default=None,
        metavar="N",
        help="run every shape at each of these batch sizes, in this order (default: the shape's own, "
        + ", ".join(f"{name} {batch}" for name, (_, batch, _) in SHAPES.items())
        + ")",
    )
    parser.add_argument(
        "--phases", nargs="+", default=PHASES, choices=PHASES, help="what to time: training steps, evaluation passes"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps; the median counts")
    parser.add_argument(
        "--matmul-size", type=int, default=None, help="side of the peak matmul (default 1024, 8192 on CUDA)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(model) against eager")
    parser.add_argument(
        "--compile-schemes",
        nargs="+",
        choices=sorted(SCHEMES),
        help="with --compile: compile only these (default: all of --schemes)",
    )
    parser.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default=None,
        help="with --compile: torch.compile's mode (default: default)",
    )
    parser.add_argument("--out", help="also write the JSON to this file, rewritten after every scheme")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 warm-up, 3 repeats")
    args = parser.parse_args(argv)
    if args.compile_mode and not args.compile:
        parser.error("--compile-mode needs --compile")
    if args.batch_sizes and min(args.batch_sizes) < 1:
        parser.error("--batch-size must be at least 1")
    args.compile_mode = args.compile_mode or "default"
    args.phases = [phase for phase in PHASES if phase in args.phases]  # train first, whatever the order given
    if args.quick:
        args.warmup, args.repeats = 1, 3
    return args


def summary(
    args,
    device: torch.device,
    dtype: torch.dtype,
    peak: PeakFlops,
    memory: PeakMemory,
    shapes: list,
    load_before,
    complete: bool,
) -> dict:
    """The JSON-ready result of the rows measured so far, their MFU against the best peak so far."""
    for row in (row for entry in shapes for row in entry.get("schemes", [])):
        # not the phases left out, nor a row that failed
        for name in (name for name in PHASES if f"{name}_flops_per_second" in row):
            row[f"{name}_mfu"] = round(row[f"{name}_flops_per_second"] / peak.measured, 4)
            compiled = row.get("compile", {})
            if f"{name}_tokens_per_second" in compiled:
                per_token = row[f"{name}_flops_per_second"] / row[f"{name}_tokens_per_second"]
                compiled[f"{name}_mfu"] = round(compiled[f"{name}_tokens_per_second"] * per_token / peak.measured, 4)
    return {
        "benchmark": "throughput",
        "complete": complete,
        "device": str(device),
        "device_name": device_name(device),
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "quick": args.quick,
        "phases": args.phases,
        "compile_mode": args.compile_mode if args.compile else None,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "peak_flops": peak.as_dict(),
        "memory_method": memory.method,
        "shapes": shapes,
    }


def run(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, measure, return the JSON-ready result (with ``--out``, also written there after every scheme)."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()
    _, dtype = autocast_for(device)
    peak = PeakFlops(device, dtype, args.matmul_size or (8192 if device.type == "cuda" else 1024))
    peak.sample(PEAK_REPEATS)
    memory = PeakMemory(device)
    shapes: list[dict] = []

    def write(complete: bool) -> dict:
        result = summary(args, device, dtype, peak, memory, shapes, load_before, complete)
        if args.out:
            # a run stopped by a time limit still leaves the schemes it measured
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        return result

    for shape, batch_size in ((name, batch) for name in args.shapes for batch in args.batch_sizes or [SHAPES[name][1]]):
        fields, default_batch_size, needs_cuda = SHAPES[shape]
        entry: dict = {
            "name": shape,
            "config": fields,
            "batch_size": batch_size,
            "default_batch_size": default_batch_size,
        }
        shapes.append(entry)
        if needs_cuda and device.type != "cuda":
            entry["skipped"] = "needs a CUDA device; none was used in this run"
            continue
        entry["flops_per_token"] = flops_per_token(DecoderConfig(**fields))
        entry["schemes"] = []
        for scheme in args.schemes:
            try:
                row = measure_scheme(shape, scheme, batch_size, args, device, memory, peak)
            except torch.cuda.OutOfMemoryError as error:
                # a batch too large for this GPU is a result of the sweep; the next, smaller or not, still runs
                row = {"position": scheme, "error": f"OutOfMemoryError: {str(error)[:300]}"}
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            entry["schemes"].append(row)
            write(complete=False)
    peak.sample(PEAK_REPEATS)
    return write(complete=True)


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
