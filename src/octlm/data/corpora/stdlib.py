"""The standard library corpus: the running interpreter's own ``.py`` files, octlm train's default text.

Nothing is shipped for it: every Python installation has these files, written
by people, prose (docstrings, comments) and code together, in a fixed order,
so the default run is reproducible on one interpreter. ``--text stdlib`` names
it (:data:`octlm.data.corpora.STDLIB`).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

#: Folders of the standard library that hold test suites or third-party code.
NOT_STDLIB = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def default_corpus_root() -> Path:
    """The running interpreter's standard library folder (the embedded default corpus)."""
    return Path(sysconfig.get_paths()["stdlib"])


def default_corpus_files() -> list[Path]:
    """The standard library's ``.py`` files outside its test suites, sorted by path.

    Every Python installation has them, they are written by people, and the
    order is fixed, so the default run is reproducible on one interpreter.
    """
    root = default_corpus_root()
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts[:-1]
        if any(part in NOT_STDLIB or part.startswith(".") for part in parts):
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


__all__ = ["NOT_STDLIB", "default_corpus_files", "default_corpus_root"]
