"""Cached decoding with sliding-window layers against a global model: time per token and key/value cache bytes.

    .venv/bin/python bench/window_cache.py [--layouts "rope*4" "rope/w64*3 none" "rope/w32*4"]
        [--multiples 1 4 16] [--repeats 3] [--threads 1]

Each layout (``DecoderConfig.layers``, docs/layouts.md) builds an untrained
decoder of the Day-1 shape made ``--n-layers`` deep (vocab_size 1024,
context_length T = 128, d_model 128, 4 heads, 4 layers; speed and cache size
do not depend on the weights) that continues a one-token prompt greedily by
N = m x T tokens for each multiple m in ``--multiples``. The loop is the one
``Decoder.generate(use_cache=True)`` runs (``next_token_logits`` with a
:class:`~octlm.model.kvcache.KVCache` of capacity prompt + N), written out so
each step is timed and the cache can be read when the N tokens are done.

Per layout and N it reports, as medians over ``--repeats`` runs:

* ``ms_per_token``: wall time of the N steps over N (what a caller waits per
  token), and ``cpu_ms_per_token`` on this process's CPU clock
  (``time.process_time``, which other programs disturb far less);
* ``step_ms``: the median step among the last ``--span`` steps, the cost of
  one more token at length N (a global layer attends to all N keys there, a
  window layer to its W), and ``cpu_step_ms`` on the CPU clock;
* ``cache_bytes``: bytes of the key and value tensors the caches hold after
  the N steps (``numel x element_size``, summed over layers; a global layer's
  buffer is allocated for prompt + N rows up front, as ``generate`` does), and
  ``held_tokens``, the keys each layer keeps (``LayerCache.held``). A window
  layer keeps W - 1 keys whatever N is, so its bytes stay flat.

The first layout is the baseline: every row carries its ``*_ratio`` to the
baseline's row at the same N, measured in the same run. Runs are interleaved
(each repeat times every layout at every N before the next repeat), so a
change in the machine's load falls on all of them alike; ``load_average``
before and after says how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time

import torch

from octlm import Decoder, DecoderConfig
from octlm.model.kvcache import KVCache
from octlm.model.layout import describe

#: The rows' measured fields that get a ratio to the baseline.
RATIO_FIELDS = ("ms_per_token", "cpu_ms_per_token", "step_ms", "cpu_step_ms", "cache_bytes")


def cache_bytes(cache: KVCache) -> int:
    """Bytes of the key and value tensors ``cache`` holds (all layers; 0 for a layer that saw nothing)."""
    return sum(
        tensor.numel() * tensor.element_size()
        for layer in cache.layers
        for tensor in (layer.keys, layer.values)
        if tensor is not None
    )


def decode(model: Decoder, n: int, batch_size: int) -> dict:
    """One greedy cached generation of ``n`` tokens after a one-token prompt: step times (s, wall and CPU), totals,
    the cache.

    The steps are ``Decoder.generate``'s: ``next_token_logits`` on the ids so
    far with a cache of capacity prompt + ``n``, then the argmax.
    """
    ids = torch.zeros(batch_size, 1, dtype=torch.long)
    cache = KVCache(len(model.blocks), ids.shape[1] + n)
    steps, cpu_steps = [], []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        start, cpu_start = time.perf_counter(), time.process_time()
        logits = model.next_token_logits(ids, cache)
        ids = torch.cat((ids, logits.argmax(-1, keepdim=True)), dim=1)
        steps.append(time.perf_counter() - start)
        cpu_steps.append(time.process_time() - cpu_start)
    return {
        "wall": time.perf_counter() - wall0,
        "cpu": time.process_time() - cpu0,
        "steps": steps,
        "cpu_steps": cpu_steps,
        "cache_bytes": cache_bytes(cache),
        "held_tokens": [layer.held for layer in cache.layers],
    }


def summarize(layout: str, model: Decoder, n: int, runs: list[dict], span: int) -> dict:
    """One row: the medians over ``runs`` of one layout at ``n`` tokens (ms, bytes, tokens)."""
    last = min(span, n)
    return {
        "layout": layout,
        "layers": describe(model.config.layers) or [f"{model.config.position}, global"] * model.config.n_layers,
        "new_tokens": n,
        "ms_per_token": round(1e3 * statistics.median(r["wall"] for r in runs) / n, 4),
        "cpu_ms_per_token": round(1e3 * statistics.median(r["cpu"] for r in runs) / n, 4),
        "step_ms": round(1e3 * statistics.median(statistics.median(r["steps"][-last:]) for r in runs), 4),
        "cpu_step_ms": round(1e3 * statistics.median(statistics.median(r["cpu_steps"][-last:]) for r in runs), 4),
        # deterministic: the same in every run
        "cache_bytes": runs[0]["cache_bytes"],
        "held_tokens": runs[0]["held_tokens"],
    }


def add_ratios(rows: list[dict], baseline: str) -> None:
    """Each row's ``<field>_ratio``: its value over the baseline layout's at the same ``new_tokens``."""
    base = {row["new_tokens"]: row for row in rows if row["layout"] == baseline}
    for row in rows:
        for field in RATIO_FIELDS:
            reference = base[row["new_tokens"]][field]
            row[f"{field}_ratio"] = round(row[field] / reference, 4) if reference else None


def build(layout: str, args: argparse.Namespace) -> Decoder:
    """The untrained decoder of ``layout`` in the bench's shape, in eval mode."""
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab_size=args.vocab_size,
        context_length=args.context_length,
        d_model=args.d_model,
        n_heads=args.n_heads,
        n_layers=args.n_layers,
        position=args.position,
        block=args.block,
        layers=layout,
    )
    return Decoder(config).eval()


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=["rope*4", "rope/w64*3 none", "rope/w32*4"],
        help="layer layouts to time (--layers' grammar; '' is --position in every layer); the first is the baseline",
    )
    parser.add_argument(
        "--multiples", nargs="+", type=int, default=[1, 4, 16], help="generated tokens, in multiples of T"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each layout and length; medians count")
    parser.add_argument("--span", type=int, default=32, help="last steps whose median is step_ms (tokens)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (none: torch's choice)")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences decoded together")
    parser.add_argument("--position", default="rope", help="the scheme of layout entries without one")
    parser.add_argument("--block", default="gpt2", help="gpt2 or llama")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--context-length", type=int, default=128, help="T, tokens")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=4)
    args = parser.parse_args(argv)
    if min(args.multiples) < 1 or args.repeats < 1 or args.span < 1:
        parser.error("--multiples, --repeats and --span must be at least 1")
    return args


def run(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        models = {layout: build(layout, args) for layout in args.layouts}
    except ValueError as err:  # a layout DecoderConfig refuses: its one-line message, not a traceback
        raise SystemExit(f"window_cache.py: {err}") from None
    lengths = [m * args.context_length for m in args.multiples]
    for model in models.values():
        decode(model, min(16, lengths[0]), args.batch_size)  # warm-up: allocations and kernel choice
    load_before = os.getloadavg()
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeats):
        for layout, model in models.items():
            for n in lengths:
                runs.setdefault((layout, n), []).append(decode(model, n, args.batch_size))
    rows = [summarize(layout, models[layout], n, runs[layout, n], args.span) for layout, n in runs]
    add_ratios(rows, args.layouts[0])
    return {
        "benchmark": "window_cache",
        "command": shlex.join([".venv/bin/python", "bench/window_cache.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": {f: getattr(args, f) for f in ("vocab_size", "context_length", "d_model", "n_heads", "n_layers")}
        | {"position": args.position, "block": args.block, "weights": "untrained"},
        "baseline": args.layouts[0],
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "span": args.span,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "results": rows,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
