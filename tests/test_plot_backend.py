"""A plotting backend inherited from a notebook does not break the commands that draw.

Jupyter and Colab set ``MPLBACKEND=module://matplotlib_inline.backend_inline``;
a shell started from them passes it on to octlm, whose environment may not
have that backend (matplotlib 3.9 and later then refuse the name at import).
octlm draws files, so it must not care.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import small_run

REPO = Path(__file__).resolve().parents[1]
TINY = small_run(max_steps=2, eval_interval=50, eval_blocks=2, final_eval_blocks=2, sample_tokens=0, threads=1)
JUPYTER = "module://matplotlib_inline.backend_inline"


def run_with_backend(command: list[str], backend: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MPLBACKEND": backend}
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_train_and_embeddings_finish_under_a_notebooks_backend(small_corpus, tmp_path):
    run = tmp_path / "run"
    trained = run_with_backend(
        ["-m", "octlm", "train", "--text", str(small_corpus), "--out", str(run), *TINY, "--json"], JUPYTER
    )
    assert trained.returncode == 0 and "Traceback" not in trained.stderr, trained.stderr[-2000:]
    assert json.loads(trained.stdout.splitlines()[-1])["event"] == "result"  # the final row
    assert (run / "loss.png").read_bytes().startswith(b"\x89PNG")
    drawn = run_with_backend(
        ["-m", "octlm", "embeddings", "--run", str(run), "--out", str(tmp_path / "figures"), "--json"], JUPYTER
    )
    assert drawn.returncode == 0 and "Traceback" not in drawn.stderr, drawn.stderr[-2000:]
    assert (tmp_path / "figures" / "tokens-pca.png").read_bytes().startswith(b"\x89PNG")


#: Draws a figure as octlm does; prints MPLBACKEND and matplotlib's backend setting as they are afterwards.
DRAW = """
import json, os
from octlm.inspect.figures import Figure, png_bytes
import matplotlib
figure = Figure()
figure.add_subplot().plot([0, 1])
assert png_bytes(figure).startswith(b"\\x89PNG")
print(json.dumps([os.environ.get("MPLBACKEND"), dict.__getitem__(matplotlib.rcParams, "backend")], default=repr))
"""


@pytest.mark.parametrize("backend", ["module://nonexistent", "nonexistent", "agg"])
@pytest.mark.slow
def test_figures_draw_on_their_own_canvas_and_leave_a_usable_backend_alone(backend):
    drawn = run_with_backend(["-c", DRAW], backend)
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    environment, setting = json.loads(drawn.stdout)
    assert environment == backend  # passed on unchanged to what octlm starts
    if backend != "nonexistent":  # a name matplotlib accepts stays its setting, for a notebook's pyplot
        assert setting == backend
