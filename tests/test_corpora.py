"""The corpora built into octlm: ``--text tinyshakespeare`` on a clone with nothing beside it."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import lzma
import tomllib
from pathlib import Path

import pytest

from octlm.cli import main
from octlm.data import corpora
from octlm.data.reading import read_documents
from octlm.errors import DataError
from tests.conftest import REPO

#: tinyshakespeare as published in karpathy/char-rnn (data/tinyshakespeare/input.txt).
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def test_shipped_tinyshakespeare_is_the_known_text():
    shipped = REPO / "src" / "octlm" / "data" / "corpora" / "tinyshakespeare.txt.xz"
    raw = lzma.decompress(shipped.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == TINYSHAKESPEARE_SHA256
    assert len(raw) == 1_115_394
    assert corpora.read_builtin("tinyshakespeare") == raw
    assert raw.decode("utf-8").startswith("First Citizen:\nBefore we proceed any further, hear me speak.")


def test_every_builtin_corpus_is_package_data():
    """A pip install carries the compressed files: pyproject's package data matches each one."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["octlm.data.corpora"]
    for corpus in corpora.BUILTIN_CORPORA.values():
        assert (REPO / "src" / "octlm" / "data" / "corpora" / corpus.filename).is_file()
        assert any(fnmatch.fnmatch(corpus.filename, p) for p in patterns), corpus.filename


def test_a_damaged_builtin_corpus_is_refused(monkeypatch):
    wrong = dataclasses.replace(corpora.BUILTIN_CORPORA["tinyshakespeare"], sha256="0" * 64)
    monkeypatch.setitem(corpora.BUILTIN_CORPORA, "tinyshakespeare", wrong)
    with pytest.raises(DataError, match="damaged: reinstall octlm"):
        read_documents(["tinyshakespeare"])


def test_a_path_on_disk_wins_over_a_builtin_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tinyshakespeare").write_text("my own notes, not Shakespeare\n", encoding="utf-8")
    docs, info = read_documents(["tinyshakespeare"])
    assert [d.text for d in docs] == ["my own notes, not Shakespeare\n"]
    assert "builtin" not in info["source"]


def test_a_missing_path_names_the_builtin_corpora(tmp_path):
    with pytest.raises(DataError, match=r"no such file or folder \(built-in corpora: tinyshakespeare, stdlib\)"):
        read_documents([str(tmp_path / "tinyshakespear")])


@pytest.mark.parametrize("command", ["train", "length"])
def test_help_lists_the_builtin_corpora(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = capsys.readouterr().out
    assert "--text tinyshakespeare" in help_text
    for name in corpora.BUILTIN_CORPORA:
        assert f"  {name} " in help_text
    assert "is read instead" in help_text
    assert "../shared" not in help_text


def test_text_tinyshakespeare_trains_and_the_manifest_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing called tinyshakespeare here: the built-in one is read
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--text",
            "tinyshakespeare",
            "--out",
            str(out),
            "--vocab-size",
            "300",
            "--context-length",
            "32",
            "--d-model",
            "32",
            "--n-heads",
            "2",
            "--max-steps",
            "3",
            "--eval-interval",
            "3",
            "--eval-blocks",
            "2",
            "--batch-size",
            "4",
            "--sample-tokens",
            "0",
            "--quiet",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["builtin"] == [
        {
            "name": "tinyshakespeare",
            "sha256": TINYSHAKESPEARE_SHA256,
            "source": corpora.BUILTIN_CORPORA["tinyshakespeare"].source,
        }
    ]
    assert manifest["files"] == [
        {
            "path": "tinyshakespeare",
            "bytes": 1_115_394,
            "sha256": TINYSHAKESPEARE_SHA256,
            "format": "text",
            "records": 1,
        }
    ]
    assert json.loads((out / "config.json").read_text())["train"]["text"] == ["tinyshakespeare"]
    assert (out / "model.safetensors").is_file()


def _small_stdlib(tmp_path, monkeypatch) -> Path:
    """A stand-in standard library of two modules and a test suite, so the test reads a few bytes."""
    root = tmp_path / "lib"
    (root / "json").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "abc.py").write_text("class ABC:\n    pass\n", encoding="utf-8")
    (root / "json" / "decoder.py").write_text("def decode(s):\n    return s\n", encoding="utf-8")
    (root / "test" / "test_abc.py").write_text("assert True\n", encoding="utf-8")
    monkeypatch.setattr("octlm.data.corpora.stdlib.default_corpus_root", lambda: root)
    return root


def test_text_stdlib_is_the_default_corpus(tmp_path, monkeypatch):
    _small_stdlib(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    named, named_info = read_documents(["stdlib"])
    default, default_info = read_documents(None)
    assert [d.text for d in named] == ["class ABC:\n    pass\n", "def decode(s):\n    return s\n"]
    assert [d.text for d in named] == [d.text for d in default]
    assert named_info["source"] == default_info["source"]
    assert named_info["source"]["kind"] == "python-stdlib"


def test_text_stdlib_beside_other_text_adds_its_files(tmp_path, monkeypatch):
    _small_stdlib(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("my notes\n", encoding="utf-8")
    docs, info = read_documents(["notes.txt", "stdlib"])
    assert [d.text for d in docs] == ["my notes\n", "class ABC:\n    pass\n", "def decode(s):\n    return s\n"]
    assert [b["name"] for b in info["source"]["builtin"]] == ["stdlib"]


def test_a_folder_called_stdlib_wins_over_the_name(tmp_path, monkeypatch):
    _small_stdlib(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stdlib").mkdir()
    (tmp_path / "stdlib" / "mine.txt").write_text("my own stdlib notes\n", encoding="utf-8")
    docs, info = read_documents(["stdlib"])
    assert [d.text for d in docs] == ["my own stdlib notes\n"]
    assert info["source"]["kind"] == "files"
