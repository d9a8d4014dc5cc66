"""Cached versus naive greedy decoding: tokens per second; prints JSON.

    .venv/bin/python bench/decode.py [--schemes rope alibi learned] [--lengths 128 512 1024] [--device cpu]

For each position scheme, an untrained Day-1 decoder (vocab_size 1024,
context_length 128, d_model 128, 4 heads, 2 layers; speed does not depend on
the weights) continues a one-token prompt by N tokens, greedily, twice: with
the key/value cache (``use_cache=True``, one new token per step) and naively
(``use_cache=False``, the whole sequence recomputed at every step). Both runs
must give the same tokens. Each is timed ``--repeats`` times and the fastest
run counts, on two clocks: wall time, and the CPU time of this process
(``time.process_time``), which other programs on a shared machine disturb far
less; with ``--threads 1`` the two agree on a quiet machine. ``speedup`` is
cached over naive tokens per second on each clock, measured in the same
process.

A learned position table has 128 rows: past them the window slides, every
position in it moves, and the cached run re-prefills the window at each step,
so for N > 128 its cache saves only the first 128 steps. The other schemes
keep their cache to any length.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import torch

from octlm import Decoder, DecoderConfig


def timed_generate(
    model: Decoder, prompt: torch.Tensor, n: int, use_cache: bool, device: torch.device, repeats: int
) -> tuple[float, float, torch.Tensor]:
    """Fastest of ``repeats`` greedy generations of ``n`` tokens: (wall seconds, CPU seconds, tokens)."""
    wall, cpu = math.inf, math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        out = model.generate(prompt, n, use_cache=use_cache)
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def run(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--schemes", nargs="+", default=["rope", "alibi", "learned"], help="position schemes to time")
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 512, 1024], help="generated tokens per run")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences decoded together")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each configuration; the fastest counts")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    for scheme in args.schemes:
        torch.manual_seed(0)
        model = Decoder(DecoderConfig(position=scheme)).to(device).eval()
        prompt = torch.zeros(args.batch_size, 1, dtype=torch.long, device=device)
        model.generate(prompt, 8)  # warm-up: allocations and kernel choice
        for n in args.lengths:
            cached_wall, cached_cpu, cached = timed_generate(model, prompt, n, True, device, args.repeats)
            naive_wall, naive_cpu, naive = timed_generate(model, prompt, n, False, device, args.repeats)
            tokens = args.batch_size * n
            row = {
                "position": scheme,
                "new_tokens": n,
                "cached_tokens_per_second": round(tokens / cached_wall, 1),
                "naive_tokens_per_second": round(tokens / naive_wall, 1),
                "speedup": round(naive_wall / cached_wall, 2),
                "cached_tokens_per_cpu_second": round(tokens / cached_cpu, 1),
                "naive_tokens_per_cpu_second": round(tokens / naive_cpu, 1),
                "speedup_cpu": round(naive_cpu / cached_cpu, 2),
                "identical_tokens": bool(torch.equal(cached, naive)),
            }
            if model.max_length is not None and prompt.shape[1] + n - 1 > model.max_length:
                row["note"] = (
                    f"past {model.max_length} tokens the learned window slides and the cache re-prefills it every step"
                )
            rows.append(row)
    return {
        "benchmark": "decode",
        "model": "Day-1 shape, untrained",
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "results": rows,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
