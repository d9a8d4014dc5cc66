"""Training-step cost of PaTH against RoPE's, on the Day-1 shape, steps interleaved in one process; prints JSON.

    .venv/bin/python bench/path_attention.py [--rounds 10] [--schemes rope pathattn] [--threads 1]

The same measurement as ``bench/recency_schemes.py`` (its ``measure``: a
fresh untrained Day-1 model per scheme, octlm's AdamW, the training step of
``bench/throughput.py``, rounds interleaved with the order turned each round,
3 untimed rounds first). Issue 35 point 3 excepts PaTH from the 2x bound the
other new schemes meet: its CPU form is a Python loop over the ``T`` tokens of
each layer (:func:`octlm.model.positions.path.path_logits`, O(T^2 D) per head),
so this benchmark states its cost (``over_rope``) rather than checking it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recency_schemes  # noqa: E402  (bench/recency_schemes.py: the interleaved Day-1 step timing)

from octlm.model.positions import SCHEMES  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (one step of every scheme each)")
    parser.add_argument(
        "--schemes",
        nargs="+",
        default=["rope", "pathattn"],
        choices=sorted(SCHEMES),
        help="position schemes; the first is the baseline the ratios divide by",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "benchmark": "path_attention",
        "shape": "day1",
        "rounds": args.rounds,
        "threads": args.threads,
        "torch": torch.__version__,
        "load_average_before": os.getloadavg(),
    }
    times = recency_schemes.measure(args.schemes, args.rounds)
    baseline = statistics.median(times[args.schemes[0]])
    result["schemes"] = {
        name: {
            "median_step_ms": round(1000 * statistics.median(t), 2),
            f"over_{args.schemes[0]}": round(statistics.median(t) / baseline, 3),
        }
        for name, t in times.items()
    }
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
