"""bench/train_tinyshakespeare.py's command line (its training is octlm train's, tested there)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_help_says_the_other_flags_go_to_octlm_train():
    """The speed run's commands give octlm train's flags to the benchmark; its --help has to say they pass through."""
    shown = subprocess.run(
        [sys.executable, str(REPO / "bench" / "train_tinyshakespeare.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--time-budget" in shown
    assert "Every other flag goes to `octlm train`" in " ".join(shown.split())
