"""``octlm train``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.data.corpora import builtin_help
from octlm.report import Reporter
from octlm.train.options import TrainOptions


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a decoder on text files (default: the Python standard library)",
        formatter_class=Formatter,
        description="Train a decoder end to end: tokenizer, packed blocks, Muon and AdamW (--optimizer), "
        "evaluation, run folder.",
        epilog="examples:\n  octlm train --text tinyshakespeare --time-budget 300 --out runs/shakespeare\n"
        "  octlm train --config recipe.toml --position rope\n"
        "  octlm train --text data/ train.jsonl.zst --text-field content --log-to tensorboard --out runs/mine   # "
        "records, a tracker\n"
        "  octlm train --resume runs/shakespeare                    # continue after Ctrl-C, a kill or a crash\n"
        "  octlm train --resume runs/shakespeare --max-steps 5000   # train further (the run's new total)\n"
        "  torchrun --nproc_per_node 4 -m octlm train --text data/ --out runs/ddp   # one process per GPU\n\n"
        + builtin_help(),
    )
    p.add_argument(
        "--config",
        metavar="FILE.toml",
        help="read options from a TOML file whose keys are these options (flags given here win)",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its checkpoint.safetensors; it keeps its own options, and only the limits, "
        "reporting, device and --learning-rate/--grad-clip may be given again",
    )
    add_dataclass_options(p, TrainOptions)
    add_common(p)
    p.options_class = TrainOptions
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.cli import given_options
    from octlm.train.launch import train

    given = None
    if args.resume or args.init_from:  # both refuse options that contradict the run they start from
        given = given_options(args.parser, args.argv[1:]) - {"config", "resume", "json", "quiet"}
    result = train(options_from(args, TrainOptions), report, resume=args.resume, given=given)
    return 130 if result["interrupted"] else 0
