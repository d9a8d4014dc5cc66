"""Shared fixtures: the test corpus and one small trained run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OCTLM_SHARED", REPO.parent / "shared"))

settings.register_profile("octlm", deadline=None, max_examples=60)
settings.load_profile("octlm")


@pytest.fixture(scope="session")
def shakespeare() -> Path:
    path = SHARED / "corpora" / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.fail(f"test corpus missing: {path} (set OCTLM_SHARED to the folder holding corpora/)")
    return path


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory, shakespeare) -> Path:
    """The first 120 kB of tinyshakespeare: enough for a tokenizer and a few hundred blocks."""
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text(shakespeare.read_text(encoding="utf-8")[:120_000], encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, small_corpus) -> Path:
    """A run folder from a short CLI training run (learned positions, small shape)."""
    from octlm.cli import main

    out = tmp_path_factory.mktemp("runs") / "small"
    code = main([
        "train", "--text", str(small_corpus), "--out", str(out), "--vocab-size", "300",
        "--context-length", "32", "--d-model", "32", "--n-heads", "2", "--max-steps", "30",
        "--eval-interval", "10", "--batch-size", "8", "--sample-tokens", "8", "--quiet",
    ])
    assert code == 0
    return out
