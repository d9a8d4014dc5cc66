"""``octlm serve``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.report import Reporter
from octlm.export.web import ServeOptions


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the explainer page with a trained run's embeddings",
        formatter_class=Formatter,
        description="Serve the explainer page (eight playgrounds) and a run's position similarity map, nearest tokens,\n"
        "embedding scatter and loss curve at http://HOST:PORT/. Listens on loopback unless --host says otherwise;\n"
        "serves only the page's own files. Ctrl-C stops it.",
        epilog="example:\n  octlm serve --run runs/shakespeare --port 8000",
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
