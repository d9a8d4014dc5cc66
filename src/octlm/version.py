"""The version octlm reports and records: the release, and from a git checkout the commit it runs.

A result is only as citable as the code that made it, and between two releases the code changes
many times; so ``octlm --version``, every run's ``config.json`` and every study's ``study`` record
name the commit too when octlm runs from a checkout.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

#: The release, as pyproject.toml's ``version`` says (tests/test_version.py keeps the two equal).
RELEASE = "0.1.0"


def _git(root: Path, *args: str) -> str:
    """One git command's output in ``root``; raises OSError or SubprocessError when git is missing or fails."""
    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout.strip()


def describe(root: Path) -> str:
    """The version of the checkout at ``root``: ``RELEASE+g<commit>``, with ``.dirty`` when a tracked file differs.

    The commit is git's 12-character short hash. ``+`` starts a PEP 440 local label (which allows one ``+``),
    so a changed checkout reads ``0.1.0+g5dd0de7cf20e.dirty``; untracked files (run folders) do not count.
    Returns ``RELEASE`` alone when ``root`` is no git checkout or git cannot read it.
    """
    if not (root / ".git").exists():
        return RELEASE
    try:
        commit = _git(root, "rev-parse", "--short=12", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return RELEASE
    return f"{RELEASE}+g{commit}" + (".dirty" if changed else "")


@functools.cache
def build_version() -> str:
    """This octlm's version: :func:`describe` of the checkout it runs from, else ``RELEASE`` (an installed copy).

    Read once a process (it runs git twice, about a tenth of a second).
    """
    package = Path(__file__).resolve().parent
    # src/octlm/version.py in a checkout; site-packages/octlm/version.py when installed
    return describe(package.parents[1]) if package.parent.name == "src" else RELEASE


__all__ = ["RELEASE", "build_version", "describe"]
