"""``octlm serve``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the explainer page with a trained run's embeddings",
        formatter_class=Formatter,
        description="Serve the explainer page (five playgrounds) and a run's position similarity map, nearest tokens,\n"
        "embedding scatter and loss curve at http://HOST:PORT/. Listens on loopback unless --host says otherwise;\n"
        "serves only the page's own files. Ctrl-C stops it.",
        epilog="example:\n  octlm serve --run runs/shakespeare --port 8000",
    )
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="run folder made by octlm train")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; anything but loopback lets other machines read the run")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one, printed at start)")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.web import is_loopback, load_view, make_server, site_files

    files = site_files(load_view(args.run))
    server = make_server(files, args.host, args.port)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    if not is_loopback(args.host):
        report.warn(f"listening on {args.host}: anyone who can reach this machine on port {port} can read the run's embeddings")
    report.event("serving", f"serving {args.run} at {url} (Ctrl-C stops)", url=url, host=host, port=port, run=str(args.run))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    report.result({"url": url, "stopped": True}, "stopped")
    return 0
