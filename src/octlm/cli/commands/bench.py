"""``octlm bench``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.inspect.bench import BenchOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="forward-pass timing and the nearest-neighbour diagnostic",
        formatter_class=Formatter,
        description="Time the forward pass at several context lengths and print the nearest tokens to token 0 (and to\n"
        "each --token) and the nearest positions to position 0, by cosine similarity.",
        epilog="examples:\n  octlm bench                                     # an untrained Day-1 model\n"
        "  octlm bench --run runs/shakespeare --token ' king' ROMEO --k 8",
    )
    add_dataclass_options(p, BenchOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.inspect.bench import bench
    from octlm.train.device import torch_settings

    opts = options_from(args, BenchOptions)
    with torch_settings(opts.threads, False):
        bench(opts, report)
    return 0
