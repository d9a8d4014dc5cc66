"""bench/vocab_sizes.py: the compute per token grows by exactly 6 d_model FLOPs per vocabulary entry (the tied head)
and is Kaplan et al. 2020's 6 N + 6 n_layers T d_model with N about 12 n_layers d_model^2 for the Day-1 block; equal
compute gives each size its steps; the summary's differences are per seed against the base size."""

from __future__ import annotations

import importlib.util
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.train.options import TrainOptions
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("vocab_sizes", REPO / "bench" / "vocab_sizes.py")
vocab_sizes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vocab_sizes)


@settings(max_examples=10, deadline=None)
@given(low=st.integers(257, 4000), more=st.integers(1, 4000))
def test_each_vocabulary_entry_costs_the_head_s_six_d_model_flops_a_token(low, more):
    opts = TrainOptions()
    d = opts.model_config(low).d_model
    assert vocab_sizes.flops_per_token(low + more, opts) - vocab_sizes.flops_per_token(low, opts) == 6 * more * d


def test_the_day_1_model_s_compute_is_kaplan_s_count():
    opts = TrainOptions()
    c = opts.model_config(1024)
    kaplan = 6 * (12 * c.n_layers * c.d_model**2 + 1024 * c.d_model) + 6 * c.n_layers * c.context_length * c.d_model
    # 12 L C^2 leaves out the biases and norms (a few thousand parameters): within 1%
    assert abs(vocab_sizes.flops_per_token(1024, opts) / kaplan - 1) < 0.01


@pytest.mark.parametrize("size", [257, 512, 2048, 8192])
def test_equal_compute_steps_spend_the_base_s_compute_to_within_one_step(size):
    opts = TrainOptions()
    steps = vocab_sizes.equal_compute_steps(size, 1024, 1200, opts)
    base, each = vocab_sizes.flops_per_token(1024, opts) * 1200, vocab_sizes.flops_per_token(size, opts)
    assert abs(steps * each - base) <= each / 2
    assert (steps > 1200) == (size < 1024)


def test_the_summary_compares_each_seed_with_the_same_seed_at_the_base_size():
    runs = [
        {"vocab_size": 1024, "seed": 1, "val_bpb": 2.0},
        {"vocab_size": 1024, "seed": 2, "val_bpb": 2.2},
        {"vocab_size": 256, "seed": 1, "val_bpb": 2.3},
        {"vocab_size": 256, "seed": 2, "val_bpb": 2.1},
    ]
    got = vocab_sizes.summary(runs, 1024)
    assert got["256"]["minus_base"] == [0.3, -0.1] and got["256"]["seeds_agreeing"] == 1
    assert got["256"]["val_bpb_mean"] == 2.2 and got["1024"]["minus_base"] == [0.0, 0.0]
    assert got["1024"]["seeds_agreeing"] == 0


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--vocab-sizes", "100"], "must be >= 257, got 100"),
        (["--seeds", "0"], "must be >= 1, got 0"),
        (["--seeds", "abc"], "invalid integer value: 'abc'"),
    ],
)
def test_bad_arguments_end_with_one_line(capsys, argv, said):
    assert vocab_sizes._parser().parse_args(["--vocab-sizes", *map(str, vocab_sizes.SIZES)])  # the defaults typed pass
    with pytest.raises(SystemExit) as stop:
        vocab_sizes.run(argv)
    assert stop.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.slow  # two tiny trainings
def test_a_tiny_sweep_trains_each_size_at_its_steps_and_reads_a_finished_run_back(tmp_path):
    argv = ["--vocab-sizes", "300", "--seeds", "1", "--base-steps", "3", "--base-vocab", "400", "--out", str(tmp_path)]
    tiny = ["--", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--threads", "1"]
    got = vocab_sizes.run(argv + tiny)
    opts = vocab_sizes.options_from(vocab_sizes.build_parser().parse_args(["train", *tiny[1:]]), TrainOptions)
    steps = [(v, vocab_sizes.equal_compute_steps(v, 400, 3, opts)) for v in (300, 400)]
    assert [(r["vocab_size"], r["steps"]) for r in got["runs"]] == steps and steps[1] == (400, 3)
    assert all(r["bytes_per_token"] > 1 and 0 < r["rows_used"] <= r["vocab_size"] for r in got["runs"])
    kept = json.loads((tmp_path / "v300-seed1337" / "bench-result.json").read_text())
    assert vocab_sizes.run(argv + tiny)["runs"][0] == {**kept, "flops": got["runs"][0]["flops"]}
