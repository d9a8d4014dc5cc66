"""A short real training run lowers validation loss."""

from __future__ import annotations

import json

import pytest

from octlm.cli import main
from octlm.options import TrainOptions
from octlm.optim import lr_at


@pytest.mark.slow
def test_short_run_on_shakespeare_lowers_validation_loss(shakespeare, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--text", str(shakespeare), "--out", str(out), "--max-steps", "120", "--eval-interval", "40",
                 "--eval-blocks", "32", "--final-eval-blocks", "64", "--sample-tokens", "0", "--json"])
    assert code == 0
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if r["kind"] == "eval"]
    first, last = evals[0], evals[-1]
    # an untrained model sits near ln(1024) = 6.93 nats; 120 steps must be well below that and improving
    assert last["val_loss"] < first["val_loss"] - 0.2
    assert last["val_loss"] < 5.5


def test_schedule_warms_up_then_decays_to_the_floor():
    opts = TrainOptions(learning_rate=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, 0.0, opts) == pytest.approx(1e-4)
    assert lr_at(9, 0.0, opts) == pytest.approx(1e-3)
    assert lr_at(10, 0.0, opts) == pytest.approx(1e-3)
    assert lr_at(50, 0.5, opts) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert lr_at(99, 1.0, opts) == pytest.approx(1e-4)
    assert lr_at(500, 3.0, opts) == pytest.approx(1e-4)
