"""``octlm sample``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.inspect.sample import SampleOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sample",
        help="generate text from a trained run",
        formatter_class=Formatter,
        description="Generate text from a run, with a key/value cache. A learned-position model sees only the last\n"
        "context_length tokens once the text is longer (the window slides); other schemes see all of it.\n"
        "A RoPE model can be stretched past its training length with --rope-scaling and --rope-factor, or\n"
        "kept within it by --cache-window and --cache-sinks: a cache of the first S and last W tokens (StreamingLLM).",
        epilog="examples:\n  octlm sample --run runs/rope --max-new-tokens 1000 --rope-scaling yarn --rope-factor 8\n"
        "  octlm sample --run runs/rope --max-new-tokens 4000 --cache-window 124 --cache-sinks 4   # S + W <= T = 128",
    )
    add_dataclass_options(p, SampleOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.inspect.sample import sample
    from octlm.train.device import torch_settings

    opts = options_from(args, SampleOptions)
    with torch_settings(opts.threads, False):
        sample(opts, report)
    return 0
