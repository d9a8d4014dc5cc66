"""``octlm export-web``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-web",
        help="write the explainer page with a run's data, to open from disk",
        formatter_class=Formatter,
        description="Write the page octlm serve shows, with the run's data embedded, into a folder: open\n"
        "OUT/index.html in a browser straight from disk (no server, no network).",
        epilog="example:\n  octlm export-web --run runs/shakespeare --out shakespeare-page",
    )
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="run folder made by octlm train")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (must be new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.web import export_site, load_view, site_files

    files = site_files(load_view(args.run))
    out = export_site(files, args.out, args.overwrite)
    index = (out / "index.html").resolve()
    size = sum(len(b) for b in files.values())
    report.result(
        {"out": str(out), "index": str(index), "url": index.as_uri(), "files": sorted(files), "bytes": size},
        f"wrote {out}/ ({size / 1e6:.1f} MB); open {index.as_uri()}",
    )
    return 0
