"""``octlm bench``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="forward-pass timing and the nearest-neighbour diagnostic",
        formatter_class=Formatter,
        description="Time the forward pass at several context lengths and print the nearest tokens to token 0 (and to\n"
        "each --token) and the nearest positions to position 0, by cosine similarity.",
    )
    p.add_argument("--run", metavar="RUN_DIR", help="run folder (default: an untrained Day-1 model)")
    p.add_argument("--token", nargs="+", action="extend", default=[], help="tokens, as text or as ids, whose neighbours to show (e.g. --token ' the' ROMEO 5)")
    p.add_argument("--k", type=int, default=5, help="neighbours to show")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per timed forward pass")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per length (the median is reported)")
    p.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--seed", type=int, default=0, help="seed of the untrained model")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.bench import bench

    bench(args, report)
    return 0
