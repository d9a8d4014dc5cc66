"""Corpus preparation on text without spaces: bounded time, and a prompt stop on Ctrl-C, SIGTERM or SIGHUP."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _no_space_text(path: Path, megabytes: float) -> Path:
    rng = random.Random(0)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    path.write_text("".join(rng.choices(alphabet, k=int(megabytes * 1e6))), encoding="utf-8")
    return path


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_preparation_stops_within_seconds_and_leaves_nothing(tmp_path, signum):
    """Tokenizer training and encoding run in Rust; a signal must still stop the
    command at once, removing the half-prepared run folder."""
    text = _no_space_text(tmp_path / "blob.txt", 12)
    out = tmp_path / "runs" / "blob"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "train", "--text", str(text), "--out", str(out), "--max-steps", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # Wait until the corpus is read: tokenizer training has begun.
    seen = ""
    while '"event": "corpus"' not in seen:
        line = proc.stdout.readline()
        assert line, f"octlm ended before preparing the corpus: {seen}{proc.stderr.read()}"
        seen += line
    time.sleep(1.0)
    assert proc.poll() is None, "preparation ended before the signal; the test needs a longer text"
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("octlm did not stop within 20 s of the signal during corpus preparation")
    waited = time.monotonic() - sent
    rest = proc.stderr.read()
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    assert not out.exists()
    assert list(out.parent.iterdir()) == [], f"left behind: {list(out.parent.iterdir())} (stopped after {waited:.1f}s)"
