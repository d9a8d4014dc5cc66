"""What ``octlm length --context-curve`` costs per model: CPU seconds at each context length c.

    .venv/bin/python bench/context_curve.py [--targets 64] [--schemes rope learned] [--threads 1]

For each scheme an untrained decoder of the default study's shape (vocab_size
1024, T = 128, d_model 128, 4 heads, 2 layers; speed does not depend on the
weights) scores ``--targets`` targets of a random token stream with exactly c
tokens of context, c = 1, 2, 4, ... to 16 x T (a learned table to T), as the
reading does (:func:`octlm.studies.length.readings.context_curve.score_at`, batches of
8192 / c windows). Times are on this process's CPU clock (``time.process_time``,
which other programs disturb far less than the wall clock).

The baseline, measured in the same run, is the study's own non-overlapping
reading at 16 x T (one batch of four 2048-token windows) (:func:`octlm.train.evaluate.evaluate`):
``ratio`` is the reading's CPU time per target over the baseline's. Prints one
JSON object; ``per_model_seconds_at_default`` scales the measured time to the
default ``--context-targets``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from octlm.model import Decoder, DecoderConfig
from octlm.studies.length.readings.context_curve import DEFAULT_TARGETS, context_grid, score_at
from octlm.train.evaluate import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=64)
    parser.add_argument("--schemes", nargs="+", default=["rope", "learned"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    T, longest = 128, 2048
    tokens = np.random.default_rng(0).integers(0, 1024, longest * (args.targets + 2)).astype(np.int64)
    targets = np.sort(np.random.default_rng(1).choice(np.arange(longest, len(tokens)), args.targets, replace=False))
    rows = []
    for scheme in args.schemes:
        model = Decoder(DecoderConfig(position=scheme, context_length=T)).eval()
        per_c = {}
        for c in context_grid(longest, model.max_length):
            t0 = time.process_time()
            score_at(model, tokens, targets, c, max(1, 8192 // c), "cpu")
            per_c[c] = round(time.process_time() - t0, 3)
        total = sum(per_c.values())
        rows.append(
            {
                "scheme": scheme,
                "cpu_seconds": round(total, 2),
                "per_c": per_c,
                "per_model_seconds_at_default": round(total * DEFAULT_TARGETS / args.targets, 1),
            }
        )
    model = Decoder(DecoderConfig(position="rope", context_length=T)).eval()
    t0 = time.process_time()
    windows = 4  # one batch of the study's reading: 8192 targets
    evaluate(model, tokens[: windows * longest + 1], np.ones(1024, dtype=np.int64), longest, windows)
    base = (time.process_time() - t0) / (windows * longest)
    for row in rows:
        row["ratio"] = round(row["cpu_seconds"] / args.targets / base, 1)
    print(json.dumps({"targets": args.targets, "baseline_cpu_seconds_per_target": base, "schemes": rows}))


if __name__ == "__main__":
    main()
