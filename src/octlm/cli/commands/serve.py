"""``octlm serve``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.export.web import ServeOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the explainer page: its playgrounds, with a trained run's embeddings and attention, or a study",
        formatter_class=Formatter,
        description="Serve the explainer page (eleven playgrounds) at http://HOST:PORT/ with either a run "
        "(--run: its position\n"
        "similarity map, nearest tokens, embedding scatter, attention at 1x, 2x and 4x its length and loss curve) or\n"
        "a length study (--study: bits per byte against length, fine-tuning curves, every model's attention at every\n"
        "length). Without --run or --study it serves the playgrounds alone (they need no model) and says there how\n"
        "to add one. Listens on loopback unless --host says otherwise; serves only the page's own files. Ctrl-C stops\n"
        "it.",
        epilog="examples:\n  octlm serve                          # the playgrounds, no training needed\n"
        "  octlm serve --run runs/shakespeare --port 8000\n  octlm serve --study runs/length",
    )
    add_dataclass_options(p, ServeOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.export.web import serve
    from octlm.train.device import torch_settings

    opts = options_from(args, ServeOptions)
    with torch_settings(opts.threads, False):
        serve(opts, report)
    return 0
