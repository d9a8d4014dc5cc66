"""The leaderboard: every position scheme and the named variants under one protocol, with intervals.

    .venv/bin/python scripts/leaderboard.py run --out runs/leaderboard [--corpus shakespeare stdlib] [--processes N]
    .venv/bin/python scripts/leaderboard.py write runs/leaderboard [--doc docs/leaderboard.md] [--readme README.md]
    .venv/bin/python scripts/leaderboard.py run --board menu --out runs/menu   # the first layer's menu, the same way
    .venv/bin/python scripts/leaderboard.py write --board menu runs/menu --partial   # the studies finished so far

``run`` runs the leaderboard's length studies of each corpus (:mod:`octlm.studies.leaderboard.protocol`) one after
another, each continued where it stopped when the command is given again (a finished one is kept), then writes
``leaderboard.jsonl`` and ``leaderboard.md`` into ``--out``. ``write`` writes them again from the finished studies,
and with ``--doc`` and ``--readme`` also docs/leaderboard.md and the README's table between its
``<!-- leaderboard:start -->`` and ``<!-- leaderboard:end -->`` lines; ``leaderboard.png`` (and a figure named after
the document beside it, such as ``docs/leaderboard.png``) draws every row against the length. The menu board's
document also holds each option against its controls (:func:`octlm.studies.leaderboard.protocol.menu_controls`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from octlm.errors import OctlmError
from octlm.fileio import atomic_write
from octlm.inspect.figures import save_png
from octlm.studies.leaderboard.board import Source, corpus_columns, method
from octlm.studies.leaderboard.figure import FIGURE, leaderboard_figure, pairs_figure
from octlm.studies.leaderboard.findings import findings
from octlm.studies.leaderboard.markdown import document, pairs_name, readme_table
from octlm.studies.leaderboard.protocol import (
    BOARDS,
    CORPORA,
    GROUPS,
    command,
    in_group,
    is_scaling,
    menu_controls,
    study_folder,
)
from octlm.studies.shared.progress import PROGRESS

START, END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"
FINDINGS_START, FINDINGS_END = "<!-- findings:start -->", "<!-- findings:end -->"


def commands(out: Path, corpora: list[str], board: str = "schemes") -> list[list[str]]:
    """``octlm``'s arguments for every study of ``board`` in ``out``, corpus by corpus."""
    return [command(out, CORPORA[name], study) for name in corpora for study in BOARDS[board]()]


#: How the documents write the interpreter's standard library folder, and the line that sets it.
STDLIB = "$STDLIB"
STDLIB_LINE = "STDLIB=$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])')"
#: Where the documents say each board's folder is (this machine's own folder is no reader's).
SHOWN_OUT = {"schemes": Path("runs/leaderboard"), "menu": Path("runs/menu")}


def shown(argv: list[str]) -> str:
    """A study's command as a person types it, the standard library's folder written as :data:`STDLIB`."""
    stdlib = sysconfig.get_paths()["stdlib"]
    words = [STDLIB + a[len(stdlib) :] if a.startswith(stdlib + "/") else shlex.quote(a) for a in argv]
    return "octlm " + " ".join(words)


def shown_commands(corpora: list[str], kind: str) -> list[str]:
    """The commands the documents give: the leaderboard's run, then each study's, in :data:`SHOWN_OUT`."""
    lines = [shown(argv) for argv in commands(SHOWN_OUT[kind], corpora, kind)]
    run = f"python scripts/leaderboard.py run --out {SHOWN_OUT[kind]} --corpus {' '.join(corpora)}"
    board = f" --board {kind}" if kind != "schemes" else ""
    head = [f"{run}{board}   # all of the below, then the board", "# or study by study:"]
    return head + ([STDLIB_LINE] if any(STDLIB in line for line in lines) else []) + lines


def finished(folder: Path) -> bool:
    """Whether ``folder`` holds a finished length study: its ``length.jsonl`` written and no progress left."""
    return (folder / "length.jsonl").is_file() and not (folder / PROGRESS).is_dir()


def board(out: Path, corpora: list[str], kind: str = "schemes", partial: bool = False) -> list[dict]:
    """The records of ``leaderboard.jsonl``: how intervals were computed, each study, every column.

    ``partial``: leave out the studies not finished yet (``unfinished`` in the head record lists them by corpus, and a
    corpus with none finished joins ``not_run``) instead of refusing them; a board is hours of training, and its
    finished half is worth reading while the rest runs.
    """
    if not partial:
        left = [study_folder(out, CORPORA[n], s) for n in corpora for s in BOARDS[kind]()]
        left = [folder.name for folder in left if not finished(folder)]
        if left:
            raise OctlmError(
                f"{out}: {len(left)} of the board's studies are not finished ({', '.join(left[:4])}"
                f"{', ...' if len(left) > 4 else ''}); run them with `scripts/leaderboard.py run --board {kind} --out "
                f"{out}`, or pass --partial to write from the finished ones"
            )
    head = {
        "record": "leaderboard",
        "board": kind,
        **method(),
        "asked": list(corpora),
        "corpora": {},
        "not_run": {},
        "unfinished": {},
    }
    records: list[dict] = [head]
    groups = {g: (lambda label, g=g: in_group(g, label)) for g in GROUPS} if kind == "schemes" else {}
    controls = menu_controls() if kind == "menu" else {}
    for name in [*corpora, *(other for other in CORPORA if other not in corpora)]:
        studies = [(s, study_folder(out, CORPORA[name], s)) for s in BOARDS[kind]()] if name in corpora else []
        ready = [(s, folder) for s, folder in studies if not partial or finished(folder)]
        if not ready:
            head["not_run"][name] = CORPORA[name].title
            continue
        head["corpora"][name] = CORPORA[name].title
        if len(ready) < len(studies):
            head["unfinished"][name] = [s.name for s, folder in studies if not finished(folder)]
        columns, found = corpus_columns(name, [Source(name, f, s.rows) for s, f in ready], groups, controls)
        records += found + columns
    if not head["corpora"]:
        raise OctlmError(
            f"{out}: no study of the board is finished yet; run `scripts/leaderboard.py run --board {kind} --out {out}`"
        )
    return records


def write(
    out: Path, corpora: list[str], doc: Path | None, readme: Path | None, kind: str = "schemes", partial: bool = False
) -> None:
    """Write ``leaderboard.jsonl`` and ``leaderboard.md`` into ``out`` (and ``doc`` and the README's table);
    ``partial``: from the studies finished so far (:func:`board`).

    Raises:
        OctlmError: before writing anything, when ``doc``'s folder or ``readme`` is missing, naming it; from
            :func:`board`.
    """
    if doc is not None and not doc.parent.is_dir():
        raise OctlmError(f"--doc {doc}: its folder {doc.parent} does not exist; make it, or name a file in another")
    if readme is not None and not readme.is_file():
        raise OctlmError(f"--readme {readme}: no such file; name the README that holds the board's markers")
    records = board(out, corpora, kind, partial)
    atomic_write(out / "leaderboard.jsonl", "".join(json.dumps(r) + "\n" for r in records).encode())
    atomic_write(out / "leaderboard.md", document(records, shown_commands(corpora, kind), FIGURE).encode())
    rows, pairs = leaderboard_figure(records), pairs_figure(records) if kind == "menu" else None
    for folder, figure in [(out, FIGURE)] + ([(doc.parent, doc.stem + ".png")] if doc is not None else []):
        save_png(rows, folder / figure)
        if pairs is not None:
            save_png(pairs, folder / pairs_name(figure))
    if doc is not None:
        atomic_write(doc, document(records, shown_commands(corpora, kind), doc.stem + ".png").encode())
    if readme is not None:
        text = readme.read_text(encoding="utf-8")
        # A scaling is a reading of its scheme's row: the document shows every one, the README their finding.
        columns = [r for r in records if r["record"] == "column"]
        table = readme_table(columns, {name: CORPORA[name].short for name in records[0]["corpora"]}, is_scaling)
        if records[0]["not_run"]:
            table += f"\n\nNot run yet, so not on this board: {'; '.join(records[0]['not_run'].values())}."
        text = between(text, START, END, table, readme)
        if kind == "schemes":
            text = between(text, FINDINGS_START, FINDINGS_END, findings(records), readme)
        atomic_write(readme, text.encode())


def between(text: str, start: str, end: str, inside: str, path: Path) -> str:
    """``text`` with what lies between its ``start`` and ``end`` lines replaced by ``inside``.

    Raises:
        OctlmError: when ``text`` does not hold each marker once, naming the file and both markers.
    """
    if text.count(start) != 1 or text.count(end) != 1:
        raise OctlmError(f"{path}: needs one {start} line and one {end} line around what the leaderboard writes")
    before, rest = text.split(start)
    return f"{before}{start}\n{inside}\n{end}{rest.split(end)[1]}"


def run(out: Path, corpora: list[str], processes: int | None, kind: str = "schemes") -> int:
    """Run every study not finished yet, in order; the exit status of the first that fails, else 0."""
    for argv in commands(out, corpora, kind):
        folder = Path(argv[argv.index("--out") + 1])
        if finished(folder):
            print(f"leaderboard: {folder} is finished; kept", flush=True)
            continue
        extra = ["--processes", str(processes)] if processes else []
        print(f"leaderboard: {shown(argv + extra)}", flush=True)
        code = subprocess.call([sys.executable, "-m", "octlm", *argv, *extra])
        if code:
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    said = {
        "run": "run the board's studies not finished yet (each continues where it stopped), then write the board",
        "write": "write the board from finished studies: leaderboard.md/.jsonl/.png, and the document and README",
    }
    for action in ("run", "write"):
        p = sub.add_parser(action, help=said[action], description=said[action])
        p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
        if action == "run":
            p.add_argument("--out", type=Path, required=True, help="the leaderboard's folder")
            p.add_argument("--processes", type=int, help="octlm length's --processes for each study")
        else:
            p.add_argument("out", type=Path, help="the leaderboard's folder")
            p.add_argument(
                "--doc",
                type=Path,
                help="also write the document here (docs/leaderboard.md; the menu's: docs/menu-board.md)",
            )
            p.add_argument("--readme", type=Path, help="also replace the table between the markers of this file")
            p.add_argument(
                "--partial",
                action="store_true",
                help="write from the studies finished so far and name the rest (without it, any missing is an error)",
            )
        p.add_argument(
            "--corpus",
            nargs="+",
            choices=list(CORPORA),
            default=list(CORPORA),
            help="the corpora: " + "; ".join(f"{name}, {c.title}" for name, c in CORPORA.items()),
        )
        p.add_argument(
            "--board", choices=list(BOARDS), default="schemes", help="the position schemes, or the first layer's menu"
        )
    args = parser.parse_args(argv)
    try:
        if args.action == "run":
            code = run(args.out, args.corpus, args.processes, args.board)
            if code:
                return code
            write(args.out, args.corpus, None, None, args.board)
        else:
            write(args.out, args.corpus, args.doc, args.readme, args.board, args.partial)
    except OctlmError as err:
        print(f"leaderboard.py: error: {err}", file=sys.stderr)
        return 1
    said = [args.out / "leaderboard.md"] + ([args.doc] if args.action == "write" and args.doc else [])
    print(f"leaderboard: wrote {', '.join(map(str, said))} and their figures", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
