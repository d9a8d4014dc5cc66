"""Training-step cost of FoX and stick-breaking against RoPE's, on the Day-1 shape, steps interleaved in one process;
prints JSON.

    .venv/bin/python bench/recency_schemes.py [--rounds 40] [--schemes rope fox stickbreaking] [--threads 1]

Each scheme gets its own Day-1 model (vocab 1,024, d_model 128, 4 heads, 2
layers, T 128, batch 32: ``octlm train``'s defaults), octlm's AdamW and the
training step ``bench/throughput.py`` times (forward, loss, backward,
clipping, optimizer step), untrained, on the same random ids. One round runs
one step of every scheme, the order turned by one each round, so a shared
machine's load falls on all alike; after 3 untimed rounds, ``--rounds``
rounds are timed. Each scheme's row gives its median step (ms) and its ratio
to the first scheme's (RoPE: ``over_rope``); issue 35 asks each new scheme to
cost at most 2x RoPE's step on CPU (``within_2x``).
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
from octlm.model.positions import SCHEMES  # noqa: E402

WARMUP_ROUNDS = 3
#: The most a new scheme's step may cost, as a multiple of RoPE's (issue 35 point 3).
LIMIT = 2.0


def train_step_of(position: str, ids: torch.Tensor):
    """A training step of a fresh Day-1 model with scheme ``position`` on ``ids`` [B, T + 1]."""
    fields, _, _ = throughput.SHAPES["day1"]
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(position=position, **fields))
    params = list({id(p): p for p in model.parameters()}.values())
    optimizer = throughput.make_optimizer(model, torch.device("cpu"))
    autocast, _ = throughput.autocast_for(torch.device("cpu"))
    step, _ = throughput.step_functions(model, params, optimizer, ids, autocast)
    return step


def measure(schemes: list[str], rounds: int) -> dict[str, list[float]]:
    """Seconds of each timed step, per scheme, the schemes' steps interleaved round by round."""
    fields, batch, _ = throughput.SHAPES["day1"]
    ids = torch.randint(0, fields["vocab_size"], (batch, fields["context_length"] + 1))
    steps = {name: train_step_of(name, ids) for name in schemes}
    times: dict[str, list[float]] = {name: [] for name in schemes}
    for i in range(WARMUP_ROUNDS + rounds):
        turn = i % len(schemes)
        for name in schemes[turn:] + schemes[:turn]:
            start = time.perf_counter()
            steps[name]()
            if i >= WARMUP_ROUNDS:
                times[name].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=40, help="timed rounds (one step of every scheme each)")
    parser.add_argument(
        "--schemes",
        nargs="+",
        default=["rope", "fox", "stickbreaking"],
        choices=sorted(SCHEMES),
        help="position schemes; the first is the baseline the ratios divide by",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "benchmark": "recency_schemes",
        "shape": "day1",
        "rounds": args.rounds,
        "threads": args.threads,
        "torch": torch.__version__,
        "load_average_before": os.getloadavg(),
    }
    times = measure(args.schemes, args.rounds)
    baseline = statistics.median(times[args.schemes[0]])
    result["schemes"] = {
        name: {
            "median_step_ms": round(1000 * statistics.median(t), 2),
            f"over_{args.schemes[0]}": round(statistics.median(t) / baseline, 3),
            "within_2x": statistics.median(t) <= LIMIT * baseline,
        }
        for name, t in times.items()
    }
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
