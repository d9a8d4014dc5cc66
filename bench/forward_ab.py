"""Training speed of two versions of the attention layer's forward, or of a Canon layer's, alternated step by step in
one process; prints JSON.

    git show main:src/octlm/model/blocks.py > /tmp/main_blocks.py
    .venv/bin/python bench/forward_ab.py --base-blocks /tmp/main_blocks.py [--pairs 60] [--schemes rope alibi]
    [--threads 1]
    git show main:src/octlm/model/canon.py > /tmp/main_canon.py
    .venv/bin/python bench/forward_ab.py --base-canon /tmp/main_canon.py --canon ABCD --schemes rope none

``CausalSelfAttention.forward`` of the ``blocks.py`` given (A, "base"), or ``CanonConv.forward`` of the ``canon.py``
given (with ``--canon`` points in the model), and of
the installed octlm (B, "current") take turns inside one training loop: the
Day-1 shape (vocab 1,024, d_model 128, 4 heads, 2 layers, T 128, batch 32),
octlm's AdamW and training step as ``bench/throughput.py`` times them
(forward, loss, backward, clipping, optimizer step), untrained, on random ids.
Each pair of steps runs A then B or B then A (alternating), so a shared
machine's load falls on both alike; after 3 untimed pairs, ``--pairs`` pairs
are timed and tokens per second is B x T over each side's median step. The
base file is loaded as a module of its own and imports the rest of octlm from
the installed tree, so only the forward differs.

This is how a change to the attention forward is checked for cost on a busy
machine, where two separate ``bench/throughput.py`` runs differ by tens of
per cent between themselves.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402  (bench/throughput.py: the shape, the optimizer and the step)

from octlm.model import Decoder, DecoderConfig, blocks, canon  # noqa: E402
from octlm.model.positions import SCHEMES  # noqa: E402

WARMUP_PAIRS = 3


def load_forward(path: str, module_name: str = "blocks", cls: str = "CausalSelfAttention"):
    """``cls.forward`` of the octlm module file at ``path`` (``blocks.py``: ``CausalSelfAttention``; ``canon.py``:
    ``CanonConv``)."""
    spec = importlib.util.spec_from_file_location(f"octlm_base_{module_name}", path)
    module = importlib.util.module_from_spec(spec)
    # a dataclass in it (blocks.LayerPass) looks its module up in sys.modules while the class is made
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, cls).forward


def measure(position: str, forwards: dict, pairs: int, target=blocks.CausalSelfAttention, points: str = "") -> dict:
    """Tokens per second of each forward of ``target`` on one scheme (Canon layers at ``points``), alternated step
    by step."""
    fields, batch, _ = throughput.SHAPES["day1"]
    config = DecoderConfig(position=position, canon=points, **fields)
    torch.manual_seed(0)
    model = Decoder(config)
    params = list({id(p): p for p in model.parameters()}.values())
    optimizer = throughput.make_optimizer(model, torch.device("cpu"))
    autocast, _ = throughput.autocast_for(torch.device("cpu"))
    ids = torch.randint(0, config.vocab_size, (batch, config.context_length + 1))
    train_step, _ = throughput.step_functions(model, params, optimizer, ids, autocast)
    times: dict[str, list[float]] = {side: [] for side in forwards}
    try:
        for i in range(WARMUP_PAIRS + pairs):
            for side in list(forwards) if i % 2 == 0 else list(forwards)[::-1]:
                target.forward = forwards[side]
                start = time.perf_counter()
                train_step()
                if i >= WARMUP_PAIRS:
                    times[side].append(time.perf_counter() - start)
    finally:
        target.forward = forwards["current"]
    tokens = batch * config.context_length
    row = {f"{side}_train_tokens_per_second": round(tokens / statistics.median(t), 1) for side, t in times.items()}
    row["current_over_base"] = round(row["current_train_tokens_per_second"] / row["base_train_tokens_per_second"], 4)
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    base = parser.add_mutually_exclusive_group(required=True)
    base.add_argument("--base-blocks", help="a blocks.py whose CausalSelfAttention.forward is the base (A)")
    base.add_argument("--base-canon", help="a canon.py whose CanonConv.forward is the base (A); with --canon")
    parser.add_argument("--canon", default="ABCD", help="Canon points of the model with --base-canon")
    parser.add_argument("--pairs", type=int, default=60, help="timed pairs of steps per scheme")
    parser.add_argument(
        "--schemes", nargs="+", default=sorted(SCHEMES), choices=sorted(SCHEMES), help="position schemes"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.base_canon:
        target, points = canon.CanonConv, args.canon
        forwards = {"base": load_forward(args.base_canon, "canon", "CanonConv"), "current": target.forward}
    else:
        target, points = blocks.CausalSelfAttention, ""
        forwards = {"base": load_forward(args.base_blocks), "current": target.forward}
    result = {
        "benchmark": "forward_ab",
        "base": args.base_canon or args.base_blocks,
        "canon": points,
        "pairs": args.pairs,
        "threads": args.threads,
        "torch": torch.__version__,
        "load_average_before": os.getloadavg(),
        "schemes": {},
    }
    for position in args.schemes:
        result["schemes"][position] = measure(position, forwards, args.pairs, target, points)
    result["load_average_after"] = os.getloadavg()
    ratios = [row["current_over_base"] for row in result["schemes"].values()]
    result["geometric_mean_current_over_base"] = round(statistics.geometric_mean(ratios), 4)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
