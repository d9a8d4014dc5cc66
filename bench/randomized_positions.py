"""Where a model trained at randomized positions is scored, and what its loss is there; prints JSON.

    .venv/bin/python bench/randomized_positions.py RUN_DIR [--draws 8] [--max-blocks 256] [--threads 1]

RUN_DIR is a run trained with ``--randomize-positions F`` (F > 1): each training
block sat at a sorted random subset of the positions ``0 .. F * T - 1``
(Ruoss et al. 2023). Its validation blocks are scored, in nats per token, at:

* ``test_positions``: what octlm's evaluation and sampling use, the scheme's
  test-time draw (one sorted subset of ``0 .. F * T - 1`` per sequence length,
  from a generator seeded with the length);
* ``other_draws``: the same with ``--draws`` other seeds (mean, min, max), to
  show how much the one draw matters;
* ``first_positions``: ``0 .. T - 1``, what evaluation used before issue 21:
  positions a randomized model almost never trained on.
"""

from __future__ import annotations

import argparse
import json
from unittest import mock

import torch

from octlm.run.folder import RunFolder
from octlm.run.load import load_run
from octlm.train.evaluate import evaluate


def score(model, folder: RunFolder, tokenizer, max_blocks: int | None) -> float:
    """Validation loss (nats per token) over ``max_blocks`` evenly spaced blocks."""
    return evaluate(
        model, folder.tokens("val"), tokenizer.bytes_per_token, model.config.context_length, 32, max_blocks
    ).loss


def drawn_with_seed(scheme, seed: int):
    """The scheme's test-time draw, from a generator seeded with ``seed`` and the length instead of the length alone."""

    def positions(length: int):
        if not scheme.randomized or length >= scheme.random_range:
            return None
        generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
        return torch.randperm(scheme.random_range, generator=generator)[:length].sort().values

    return positions


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run trained with --randomize-positions F > 1")
    parser.add_argument("--draws", type=int, default=8, help="other test-time draws to score")
    parser.add_argument("--max-blocks", type=int, default=256, help="evenly spaced validation blocks per score")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_run(args.run)
    scheme, folder = model.positions, RunFolder(args.run)
    if not scheme.randomized:
        parser.error(f"{args.run} was trained without --randomize-positions")
    result = {
        "run": args.run,
        "position": model.config.position,
        "randomize_positions": model.config.randomize_positions,
        "context_length": model.config.context_length,
        "blocks": args.max_blocks,
        "test_positions": score(model, folder, tokenizer, args.max_blocks),
    }
    others = []
    for seed in range(1, args.draws + 1):
        with mock.patch.object(scheme, "test_positions", drawn_with_seed(scheme, seed)):
            others.append(score(model, folder, tokenizer, args.max_blocks))
    result["other_draws"] = {
        "mean": sum(others) / len(others),
        "min": min(others),
        "max": max(others),
        "count": len(others),
    }
    with mock.patch.object(scheme, "test_positions", lambda length: None):
        result["first_positions"] = score(model, folder, tokenizer, args.max_blocks)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
