"""Faults found by trying other projects' public bug reports on layouts, streaming, FoX and Parquet (issue 52).

Each test failed before its fix; docs/reliability.md has a row for each.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from octlm.model.layout import LayoutError, read_entries
from octlm.model.scheme_catalog import SCHEMES

ROOT = Path(__file__).resolve().parent.parent
#: A layout entry as written: scheme or key, then /keys, then *repeat.
ENTRY = re.compile(r"[a-z][a-z0-9_]*(?:/[a-z0-9.+-]+)*(?:\*[0-9]+)?")
KEY_START = re.compile(r"w[0-9]|global$|theta|logn$|qknorm$|noqknorm$")


def _looks_like_a_layout(text: str) -> bool:
    """Every word an entry that begins with a scheme or a key (so file paths and prose in code spans are left out)."""
    words = text.split()
    heads = [w.split("/")[0].split("*")[0] for w in words]
    return (
        bool(words)
        and all(ENTRY.fullmatch(w) for w in words)
        and all(h in SCHEMES or KEY_START.match(h) for h in heads)
    )


def layouts_the_docs_show() -> list[tuple[str, str]]:
    """``(file, layout)`` for every layout README.md and docs/*.md show: the values of ``--layers`` and ``--layouts``
    (after ``NAME=``) in commands, and every code span that reads as a layout (``w1e2``, ``rope/w64*3 none``)."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in path.read_text(encoding="utf-8").splitlines():
            for match in re.finditer(r"--layers[= ]+(\"[^\"]*\"|'[^']*'|\S+)", line):
                value = match.group(1)
                if value[0] in "\"'" or _looks_like_a_layout(value):
                    found.add((path.name, shlex.split(value)[0] if value[0] in "\"'" else value))
            for match in re.finditer(r"--layouts((?:\s+(?:\"[^\"]*\"|'[^']*'))+)", line):
                found |= {(path.name, arg.split("=", 1)[-1]) for arg in shlex.split(match.group(1))}
            found |= {(path.name, span) for span in re.findall(r"`([^`]+)`", line) if _looks_like_a_layout(span)}
    return sorted(found)


def test_every_layout_the_docs_show_is_read():
    shown = layouts_the_docs_show()
    assert ("layouts.md", "w1e2") in shown and ("README.md", "w32*3 none") in shown  # the walk finds them
    refused = []
    for where, layout in shown:
        try:
            read_entries(layout)
        except LayoutError as err:  # the docs show a form octlm refuses
            refused.append(f"{where}: {layout!r}:{err}")
    assert not refused, refused
    window = next(e.keys["window"] for e in read_entries("rope/w1e1 rope") if e.keys)
    assert window == 10 and read_entries("w1e2")[0].keys == {"window": 100}


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_text_column_named_twice_is_one_line_naming_file_and_column(tmp_path, capsys, kind):
    from octlm.cli import main

    path = tmp_path / f"two.{kind}"
    if kind == "parquet":  # mloda #1360: KeyError 'Column text does not exist in schema'
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        texts = pa.array(["to be or not to be"] * 50)
        pq.write_table(pa.Table.from_arrays([texts, pa.array([1] * 50), texts], names=["text", "n", "text"]), path)
    else:  # the csv module would take the first in silence
        path.write_text("text,n,text\n" + "to be,1,or not\n" * 50, encoding="utf-8")
    assert main(["train", "--text", str(path), "--out", str(tmp_path / "run"), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: 2 columns are named 'text' (columns 1, 3)" in err and "--text-field" in err
    assert not (tmp_path / "run").exists()
