"""``octlm compare``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.inspect.compare import CompareOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="runs side by side: the options that differ, the final figures, and one figure of their curves",
        formatter_class=Formatter,
        description="Print a table of the options in which the runs differ and their final validation loss, "
        "bits per byte and\n"
        "perplexity; with --out, also write compare.png (loss and bits per byte against step), "
        "compare.md and compare.json.\n"
        "A study folder (octlm length --text) stands for the runs it trained.",
        epilog="examples:\n  octlm compare runs/learned runs/rope runs/alibi --out runs/compare\n"
        "  octlm compare runs/length-study --json",
    )
    add_dataclass_options(p, CompareOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.inspect.compare import compare

    compare(options_from(args, CompareOptions), report)
    return 0
