"""``octlm length``."""

from __future__ import annotations

import argparse
from pathlib import Path

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.data.corpora import builtin_help
from octlm.studies.length import RUNS, LengthOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "length",
        help="train one model per position scheme and compare them past the training length",
        formatter_class=Formatter,
        description="The length study. Trains one decoder per position scheme (same text, seed, shape and budget),\n"
        "then measures validation bits per byte at 1x, 2x, 4x, 8x and 16x the training length T, and the\n"
        "RoPE model again under each context-extension method (factor = length / T). Every length scores\n"
        "the same validation targets, in non-overlapping windows of that length. Learned positions show\n"
        "n/a past T (their table has no rows there). Then the extension stage fine-tunes copies of the rope\n"
        "(plain, linear, NTK, YaRN), learned, alibi and none models at 4 x T for 100 steps (--extend-to,\n"
        "--extend-steps; --extend-to 0 skips it) and scores them at every length. Writes tables, PNG plots\n"
        "and JSONL into --out.",
        epilog="examples:\n  octlm length --text tinyshakespeare --out runs/length\n"
        "  octlm length --text notes.txt --out runs/quick --time-budget 30 --train-length 64 --schemes rope alibi --extend-to 0\n"
        "  octlm length --task copy --out runs/copy --seeds 3\n\n"
        + builtin_help(),
    )
    add_dataclass_options(p, LengthOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.studies.length import length_study
    from octlm.studies.task import task_study

    opts = options_from(args, LengthOptions)
    try:
        (task_study if opts.task else length_study)(opts, report)
    except KeyboardInterrupt:
        runs = Path(opts.out or "") / RUNS
        if not opts.task and runs.is_dir() and any(runs.iterdir()):
            report.warn(f"the models trained so far stay in {runs} (each an octlm run: sample, embeddings); a study is not continued "
                        f"where it stopped: the same command with --overwrite starts it again")
        raise
    return 0
