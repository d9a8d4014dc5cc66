"""``octlm export-web``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.export.web import ExportWebOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-web",
        help="write the explainer page with a run's or a length study's data, to open from disk",
        formatter_class=Formatter,
        description="Write the page octlm serve shows, with the run's (--run) or the length study's (--study) data\n"
        "embedded, into a folder: open OUT/index.html in a browser straight from disk (no server, no network).\n"
        "Without --run or --study it writes the playgrounds alone (they need no model).",
        epilog="examples:\n  octlm export-web --out playgrounds-page\n"
        "  octlm export-web --run runs/shakespeare --out shakespeare-page\n  octlm export-web "
        "--study runs/length --out length-page",
    )
    add_dataclass_options(p, ExportWebOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.export.web import export_web
    from octlm.train.device import torch_settings

    opts = options_from(args, ExportWebOptions)
    with torch_settings(opts.threads, False):
        export_web(opts, report)
    return 0
