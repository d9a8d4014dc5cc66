"""The version octlm reports and records names the code that ran: the release, and from a checkout its commit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib

import pytest

import octlm
from octlm.version import RELEASE, build_version, describe
from tests.conftest import REPO

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(folder, *args: str) -> str:
    identity = ["-c", "user.name=octlm test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *identity, *args], cwd=folder, capture_output=True, text=True, check=True).stdout


def test_the_release_is_pyprojects_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert RELEASE == octlm.__version__ == project["version"]


@needs_git
def test_a_checkout_names_its_commit_and_whether_tracked_files_changed(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-q", "-m", "first")
    full = git(tmp_path, "rev-parse", "HEAD").strip()
    clean = describe(tmp_path)
    release, _, label = clean.partition("+g")
    assert release == RELEASE and len(label) == 12 and full.startswith(label)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "config.json").write_text("{}")  # untracked: a run folder does not make the code dirty
    assert describe(tmp_path) == clean
    (tmp_path / "a.py").write_text("x = 2\n")
    assert describe(tmp_path) == clean + ".dirty"
    git(tmp_path, "commit", "-q", "-am", "second")
    assert describe(tmp_path) not in (clean, clean + ".dirty")  # a new commit, a new version


def test_a_folder_that_is_no_checkout_has_the_release_alone(tmp_path):
    assert describe(tmp_path) == RELEASE


def test_octlm_version_prints_what_runs_record():
    done = subprocess.run([sys.executable, "-m", "octlm", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout == f"octlm {build_version()}\n"
    readable = (REPO / ".git").exists() and shutil.which("git")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True) if readable else None
    if head is not None and head.returncode == 0:  # git reads this checkout (it may refuse another user's)
        assert build_version().startswith(f"{RELEASE}+g") and head.stdout.startswith(
            build_version()[len(RELEASE) + 2 :][:12]
        )


#: Every key the Citation File Format 1.2.0 schema allows at the top level (its ``properties``).
CFF_KEYS = {
    "abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers", "keywords",
    "license", "license-url", "message", "preferred-citation", "references", "repository", "repository-artifact",
    "repository-code", "title", "type", "url", "version",
}  # fmt: skip


def test_citation_cff_is_valid_cff_1_2_and_names_this_release_and_licence():
    yaml = pytest.importorskip("yaml")  # in the test extras
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert {"cff-version", "message", "title", "authors"} <= set(cff) <= CFF_KEYS, set(cff) ^ CFF_KEYS
    assert cff["cff-version"] == "1.2.0" and cff["type"] in ("software", "dataset")
    assert cff["authors"] and all(
        isinstance(a, dict) and (a.get("name") or a.get("family-names")) for a in cff["authors"]
    )
    assert str(cff["version"]) == RELEASE  # a release bumps both
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert cff["license"] == project["license"]["text"] == "MIT"
    licence = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License") and "the octlm authors" in licence
