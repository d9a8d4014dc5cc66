"""Training step cost of learned sinks and the output gate against plain RoPE, interleaved in one process; prints JSON.

    .venv/bin/python bench/sinks_gate.py [--steps 30] [--threads 1] [--device cpu]

Four models of the Day-1 shape (vocab 1,024, d_model 128, 4 heads, 2 layers,
T 128, batch 32) with ``--position rope``: plain, ``--attention-sinks``,
``--output-gate`` and both. Each takes one training step in turn (forward,
loss, backward, clipping, octlm's AdamW step, as ``bench/throughput.py``
times them), the order rotating every round, so a shared machine's load falls
on all alike; after 3 untimed rounds ``--steps`` rounds are timed. Each row
gives training tokens per second (batch x T over the median step) and
``step_over_rope``: its median step over plain RoPE's. Issue 35 asks for at
most 2.

Sinks change the kernel, not just the arithmetic: plain causal attention goes
to SDPA with ``is_causal`` (a fused kernel), a sink needs a float mask with
one more key, which the flash kernels do not take.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402  (bench/throughput.py: the shape, the optimizer and the step)

from octlm.model import Decoder, DecoderConfig  # noqa: E402

WARMUP_ROUNDS = 3
VARIANTS = {
    "rope": {},
    "sinks": {"attention_sinks": True},
    "gate": {"output_gate": True},
    "sinks_and_gate": {"attention_sinks": True, "output_gate": True},
}


def step_for(fields: dict, device: torch.device):
    """One training step of a fresh Day-1 RoPE model with ``fields``, on fixed random ids."""
    shape, batch, _ = throughput.SHAPES["day1"]
    config = DecoderConfig(position="rope", **shape, **fields)
    torch.manual_seed(0)
    model = Decoder(config).to(device)
    params = list({id(p): p for p in model.parameters()}.values())
    optimizer = throughput.make_optimizer(model, device)
    autocast, _ = throughput.autocast_for(device)
    ids = torch.randint(0, config.vocab_size, (batch, config.context_length + 1), device=device)
    train_step, _ = throughput.step_functions(model, params, optimizer, ids, autocast)
    return train_step, batch * config.context_length


def measure(steps: int, device: torch.device) -> dict:
    """Median step time of each variant, stepped in rotating order."""
    runs = {name: step_for(fields, device) for name, fields in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(WARMUP_ROUNDS + steps):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            runs[name][0]()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= WARMUP_ROUNDS:
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["rope"])
    rows = {}
    for name, t in times.items():
        step = statistics.median(t)
        rows[name] = {
            "median_step_ms": round(1000 * step, 2),
            "train_tokens_per_second": round(runs[name][1] / step, 1),
            "step_over_rope": round(step / base, 3),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed rounds (each variant one step per round)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = {
        "bench": "sinks_gate",
        "shape": "day1",
        "device": str(device),
        "threads": args.threads,
        "steps": args.steps,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "variants": measure(args.steps, device),
        "limit_step_over_rope": 2.0,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
