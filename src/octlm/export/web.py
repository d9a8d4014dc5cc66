"""The explainer page with a run's data: ``octlm serve`` and ``octlm export-web``.

The page is built from ``web/`` by Vite into ``src/octlm/web_dist/``
(``index.html``, ``app.js``, ``app.css``), which is committed and installed
as package data, so a pip-installed octlm serves it without Node. The page
reads its data from ``run-data.js``: ``window.OCTLM_RUN = {...}`` for a run
(:func:`octlm.inspect.embeddings.run_view`) or ``window.OCTLM_STUDY = {...}``
for a length study (:func:`octlm.export.study_view.study_view`), and sets
neither when the page is served alone (no ``--run``, no ``--study``: the
playgrounds need no model, and the page says how to fill the rest); one file
name for all three, so an export's ``index.html`` never names a file that is
not there. Classic scripts rather than a fetched JSON
file keep an exported copy working straight from disk (``file://``), where
browsers refuse ``fetch`` and module scripts.

The server answers only from a fixed table of in-memory files made at
start-up (:mod:`octlm.export.page_handler`), and no client may hold a
connection's thread and file descriptor for ever
(:class:`octlm.export.page_server.PageServer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from octlm.declare import REQUIRED, option, same_as
from octlm.errors import OctlmError
from octlm.export.page_handler import is_loopback, make_server
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.train.options import TrainOptions

#: Where the built page lives inside the installed package.
WEB_DIST = Path(__file__).resolve().parents[1] / "web_dist"
PAGE_FILES = ("index.html", "app.js", "app.css")
RUN_DATA = "run-data.js"


def page_files(dist: Path = WEB_DIST) -> dict[str, bytes]:
    """The built page: ``{file name: bytes}`` for ``index.html``, ``app.js`` and ``app.css``.

    Raises:
        OctlmError: when a file is missing (the page was not built).
    """
    missing = [name for name in PAGE_FILES if not (dist / name).is_file()]
    if missing:
        raise OctlmError(
            f"{dist}: the built page is missing {', '.join(missing)}; build it with `npm ci && npm run build` in web/ "
            f"(or reinstall octlm)"
        )
    return {name: (dist / name).read_bytes() for name in PAGE_FILES}


#: ``run-data.js`` of a page served without a run or a study: it sets nothing, so the page shows how to fill it. The
#: built page carries the same file (web/run-data.js), so its index.html opens from disk as it is.
NO_DATA = (
    b"// No run and no study (octlm serve or export-web without --run or --study, or the built page opened as a file):"
    b" the playgrounds alone\n"
)


def run_data_script(view: dict | None) -> bytes:
    """``run-data.js``: a classic script that sets ``window.OCTLM_RUN`` to ``view``, or ``window.OCTLM_STUDY`` for a
    study's view (``kind: "study"``); for ``None`` (neither given), a script that sets nothing (:data:`NO_DATA`).

    ``<`` is escaped as ``\\u003c`` so a token such as ``</script>`` stays
    inert even if the script is ever inlined into HTML.
    """
    if view is None:
        return NO_DATA
    payload = json.dumps(view, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    variable = "OCTLM_STUDY" if view.get("kind") == "study" else "OCTLM_RUN"
    return f"window.{variable} = {payload};\n".encode()


def site_files(view: dict | None, dist: Path = WEB_DIST) -> dict[str, bytes]:
    """Every file of the page with the run, the study or neither (``None``): the built page plus ``run-data.js``."""
    return {**page_files(dist), RUN_DATA: run_data_script(view)}


def load_view(run_dir: str | Path) -> dict:
    """Load a run folder and compute what the page shows (:func:`octlm.inspect.embeddings.run_view`), with ``layout``:
    its layers' schemes and windows (:func:`octlm.inspect.attention_view.layout_view`; ``None`` without a layout).

    Raises:
        OctlmError: for a missing or damaged run, and for a length study (naming ``--study``).
    """
    from octlm.export.study_view import is_study
    from octlm.inspect.attention_view import layout_view
    from octlm.inspect.embeddings import run_view
    from octlm.run.load import load_run

    if Path(run_dir).is_dir() and is_study(Path(run_dir)) and not RunFolder(run_dir).is_octlm_run():
        raise OctlmError(
            f"--run {run_dir}: is a length study made by octlm length, not a run; show it with --study {run_dir}"
        )
    model, tokenizer = load_run(run_dir, "cpu")
    return {**run_view(run_dir, model, tokenizer), "layout": layout_view(model.config)}


def page_view(run: str | None, study: str | None, report: Reporter | None = None) -> dict | None:
    """The page's data: a run's view (``--run``), a length study's (``--study``, with a progress bar on ``report``),
    or ``None`` for neither (the playgrounds alone: they need no model).

    Raises:
        OctlmError: for both, and whatever :func:`load_view` or
            :func:`octlm.export.study_view.study_view` refuses.
    """
    from octlm.export.study_view import study_view

    if run is not None and study is not None:
        raise OctlmError(
            f"--run {run} and --study {study} are both given; the page shows one of them: "
            "give --run RUN_DIR or --study DIR"
        )
    if run is not None:
        return load_view(run)
    return study_view(study, report) if study is not None else None


#: Files an export of any octlm version may hold (its page and assets): --overwrite replaces them, and nothing else.
PAGE_SUFFIXES = {".html", ".js", ".css", ".map"}


def check_export_target(out: Path, overwrite: bool, names: set[str]) -> RunFolder:
    """Refuse an ``out`` that :func:`export_site` may not write ``names`` into; the folder when it may.

    Raises:
        OctlmError: see :func:`export_site`.
    """
    folder = RunFolder(out)

    def refuse(found: RunFolder) -> str | None:
        if not {"index.html", RUN_DATA} <= {p.name for p in found.path.iterdir()}:
            return (
                f"--out {out}: holds files that are not an exported page, which octlm never replaces, --overwrite or "
                "not; choose a new or empty folder"
            )
        return None

    folder.check_target(
        overwrite,
        refuse,
        f"--out {out}: holds an earlier export; add --overwrite to replace it, or choose another --out",
        foreign=lambda found: [
            p.name
            for p in found.path.iterdir()
            if not p.name.startswith(".") and p.name not in names and not (p.is_file() and p.suffix in PAGE_SUFFIXES)
        ],
    )
    return folder


def export_site(files: dict[str, bytes], out: str | Path, overwrite: bool = False) -> Path:
    """Write ``files`` into folder ``out`` so ``out/index.html`` opens from disk.

    The files go to a temporary folder beside ``out`` that is renamed into
    place, so ``out`` never holds half a page.

    Raises:
        OctlmError: when ``out`` holds anything but an earlier export (it
            holds ``index.html`` and ``run-data.js``), and for an earlier export
            without ``overwrite``.
    """
    out = Path(out)
    folder = check_export_target(out, overwrite, set(files))
    with folder.staged(mode=0o755) as staging:
        for name, data in files.items():
            target = staging / name
            target.write_bytes(data)
            target.chmod(0o644)
    return out


@dataclass
class ServeOptions:
    """Everything ``octlm serve`` takes."""

    run: str | None = option(
        None,
        "run folder made by octlm train (or give --study; without either, the playgrounds alone)",
        metavar="RUN_DIR",
    )
    study: str | None = option(None, "length study folder made by octlm length, instead of --run", metavar="STUDY_DIR")
    host: str = option("127.0.0.1", "address to listen on; anything but loopback lets other machines read the run")
    port: int = option(8000, "port to listen on (0: a free one, printed at start)")
    threads: int | None = same_as(TrainOptions, "threads")


@dataclass
class ExportWebOptions:
    """Everything ``octlm export-web`` takes."""

    out: str = option(REQUIRED, "folder to write (must be new or empty)", metavar="DIR")
    run: str | None = option(
        None,
        "run folder made by octlm train (or give --study; without either, the playgrounds alone)",
        metavar="RUN_DIR",
    )
    study: str | None = option(None, "length study folder made by octlm length, instead of --run", metavar="STUDY_DIR")
    overwrite: bool = option(False, "replace an earlier export in --out")
    threads: int | None = same_as(TrainOptions, "threads")


def serve(opts: ServeOptions, report: Reporter) -> dict:
    """Run ``octlm serve``: serve the page with the run's or the study's data (or the playgrounds alone, with neither)
    until Ctrl-C; returns the result dict (url, stopped).

    Raises:
        OctlmError: for both ``--run`` and ``--study``, a
            missing or damaged run or study (:func:`page_view`), or an
            address or port the server cannot listen on.
    """
    files: dict[str, bytes] = {}
    # Bound before the (for a study, slow) data is made, so a busy port is refused at once; nothing is
    # answered before serve_forever, by which time the table is full.
    server = make_server(files, opts.host, opts.port)
    try:
        files.update(site_files(page_view(opts.run, opts.study, report)))
    except BaseException:
        server.server_close()
        raise
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    what = "the run's data" if opts.run else "the study's data" if opts.study else "the page"
    if not is_loopback(opts.host):
        report.warn(f"listening on {opts.host}: anyone who can reach this machine on port {port} can read {what}")
    serving = opts.run or opts.study or "the playgrounds (no --run or --study; the page says how to add one)"
    report.event(
        "serving",
        f"serving {serving} at {url} (Ctrl-C stops)",
        url=url,
        host=host,
        port=port,
        run=opts.run,
        study=opts.study,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    result = {"url": url, "stopped": True}
    report.result(result, "stopped")
    return result


def export_web(opts: ExportWebOptions, report: Reporter) -> dict:
    """Run ``octlm export-web``: write the page with the run's or the study's data (or the playgrounds alone, with
    neither) into ``--out`` (:func:`export_site`); returns the result dict.

    Raises:
        OctlmError: for both ``--run`` and ``--study``, a
            missing or damaged run or study (:func:`page_view`), or an
            ``--out`` that :func:`export_site` refuses.
    """
    # before the data is made, which can take a while
    check_export_target(Path(opts.out), opts.overwrite, {*PAGE_FILES, RUN_DATA})
    files = site_files(page_view(opts.run, opts.study, report))
    out = export_site(files, opts.out, opts.overwrite)
    index = (out / "index.html").resolve()
    size = sum(len(b) for b in files.values())
    result = {"out": str(out), "index": str(index), "url": index.as_uri(), "files": sorted(files), "bytes": size}
    report.result(result, f"wrote {out}/ ({size / 1e6:.1f} MB); open {index.as_uri()}")
    return result


__all__ = [
    "ExportWebOptions",
    "ServeOptions",
    "export_web",
    "serve",
    "PAGE_FILES",
    "NO_DATA",
    "RUN_DATA",
    "WEB_DIST",
    "check_export_target",
    "export_site",
    "load_view",
    "page_files",
    "page_view",
    "run_data_script",
    "site_files",
]
