"""``octlm train``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.options import TrainOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a decoder on text files (default: the Python standard library)",
        formatter_class=Formatter,
        description="Train a decoder end to end: tokenizer, packed blocks, AdamW, evaluation, run folder.",
        epilog="examples:\n  octlm train --text ../shared/corpora/tinyshakespeare.txt --time-budget 300 --out runs/shakespeare\n"
        "  octlm train --config recipe.toml --position rope",
    )
    p.add_argument("--config", metavar="FILE.toml", help="read options from a TOML file whose keys are these options (flags given here win)")
    add_dataclass_options(p, TrainOptions)
    add_common(p)
    p.options_class = TrainOptions
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.train import train

    train(options_from(args, TrainOptions), report)
    return 0
