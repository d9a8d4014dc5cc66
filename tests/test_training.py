"""A short real training run lowers validation loss."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.train.optim import decay_progress, lr_at
from octlm.train.options import TrainOptions
from tests.conftest import small_run


@pytest.mark.slow
def test_short_run_on_shakespeare_lowers_validation_loss(shakespeare, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--text",
            str(shakespeare),
            "--out",
            str(out),
            "--max-steps",
            "40",
            "--eval-interval",
            "10",
            "--eval-blocks",
            "16",
            "--final-eval-blocks",
            "32",
            "--sample-tokens",
            "0",
            "--json",
        ]
    )
    assert code == 0
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if r["kind"] == "eval"]
    first, last = evals[0], evals[-1]
    # an untrained model sits near ln(1024) = 6.93 nats; 40 steps (4.7 nats on the project's machine) must be well
    # below that and improving
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


@given(
    max_steps=st.integers(2, 400),
    warmup_share=st.floats(0.0, 0.999),
    peak=st.floats(1e-6, 1.0),
    ratio=st.floats(0.0, 0.99),
)
def test_the_schedule_peaks_at_one_step_and_its_last_step_is_exactly_the_floor(max_steps, warmup_share, peak, ratio):
    warmup = int(warmup_share * max_steps)  # below max_steps, as the options require
    opts = TrainOptions(learning_rate=peak, min_lr_ratio=ratio, warmup_steps=warmup, max_steps=max_steps)
    rates = [lr_at(step, decay_progress(step, max_steps, warmup), opts) for step in range(max_steps)]
    top = max(range(max_steps), key=rates.__getitem__)
    assert rates[top] == peak and rates.count(peak) == 1 and top == max(warmup - 1, 0)
    assert rates[-1] == peak * ratio
    assert all(a < b for a, b in pairwise(rates[: top + 1])) and all(a >= b for a, b in pairwise(rates[top:]))


@pytest.mark.parametrize("warmup", ["3", "0"])
def test_metrics_record_one_step_at_the_peak_and_the_floor_at_the_last(small_corpus, tmp_path, warmup):
    # issue 21: the last step's rate was 0.00134 for a floor of 0.001, and two steps sat at the peak
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(out),
                "--max-steps",
                "12",
                "--warmup-steps",
                warmup,
                "--learning-rate",
                "0.01",
                "--min-lr-ratio",
                "0.1",
                "--log-interval",
                "1",
                "--quiet",
                *TINY_FLAGS,
            ]
        )
        == 0
    )
    rates = [r["lr"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    # one step at the peak
    assert len(rates) == 12 and max(rates) == 0.01 and sum(rate > 0.01 * (1 - 1e-9) for rate in rates) == 1
    assert rates[-1] == 0.01 * 0.1


TINY_FLAGS = small_run(eval_interval=5, eval_blocks=4, final_eval_blocks=8, sample_tokens=0)


def test_without_a_terminal_each_log_interval_prints_a_line_and_the_run_draws_its_loss(small_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(out),
                "--max-steps",
                "12",
                "--log-interval",
                "4",
                *TINY_FLAGS,
            ]
        )
        == 0
    )
    stdout = capsys.readouterr().out  # pytest's stderr is no terminal, like nohup's or a CI log's
    lines = [line for line in stdout.splitlines() if line.startswith("step ") and ": loss " in line]
    assert [line.split(":")[0] for line in lines] == ["step 4", "step 8", "step 12"]
    assert "lr " in lines[0] and lines[0].endswith("tokens/s")
    figure = out / "loss.png"
    assert figure.read_bytes().startswith(b"\x89PNG") and f"loss curve: {figure}" in stdout


@pytest.mark.parametrize("mode", ["--json", "--quiet"])
def test_json_and_quiet_modes_print_no_step_lines(small_corpus, tmp_path, capsys, mode):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(out),
                "--max-steps",
                "6",
                "--log-interval",
                "2",
                mode,
                *TINY_FLAGS,
            ]
        )
        == 0
    )
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert (out / "loss.png").exists()


def test_a_warmup_not_below_the_runs_steps_is_refused(small_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--text", str(small_corpus), "--out", str(out), *TINY_FLAGS]
    assert main([*args, "--max-steps", "30", "--warmup-steps", "100"]) == 1
    err = capsys.readouterr().err
    assert "--warmup-steps 100" in err and "30 steps" in err and not out.exists()
    assert main([*args, "--max-steps", "30", "--warmup-steps", "30"]) == 1
    assert "--warmup-steps 30 is not below the run's 30 steps" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,warmup",
    [
        (["--max-steps", "30"], 3),
        (["--max-steps", "50"], 5),
        (["--max-steps", "60"], 50),
        (["--max-steps", "30", "--warmup-steps", "7"], 7),
    ],
)
def test_the_default_warmup_fits_the_run_and_config_json_records_it(flags, warmup):
    from octlm.train.option_checks import check_options
    from octlm.train.options import resolved

    opts = TrainOptions.of(
        **{name.lstrip("-").replace("-", "_"): int(value) for name, value in zip(flags[::2], flags[1::2], strict=True)}
    )
    check_options(opts)
    assert resolved(opts).warmup_steps == warmup
    assert resolved(TrainOptions()).warmup_steps == 50  # the default 1200-step run
    assert resolved(TrainOptions(time_budget=60.0)).warmup_steps == 50
    if warmup < 10:  # a short run still peaks and decays to the floor, as --help describes
        rates = [
            lr_at(step, decay_progress(step, opts.max_steps, warmup), resolved(opts)) for step in range(opts.max_steps)
        ]
        assert max(rates) == pytest.approx(opts.learning_rate)
        assert rates[-1] < 0.2 * opts.learning_rate


def test_config_json_records_the_warmup_used_and_a_run_ending_in_warmup_warns(small_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(["train", "--text", str(small_corpus), "--out", str(out), "--max-steps", "12", "--quiet", *TINY_FLAGS])
        == 0
    )
    assert json.loads((out / "config.json").read_text())["train"]["warmup_steps"] == 1
    capsys.readouterr()
    budget = tmp_path / "budget"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(budget),
                "--time-budget",
                "1",
                "--warmup-steps",
                "1000000",
                "--quiet",
                *TINY_FLAGS,
            ]
        )
        == 0
    )
    assert "still in its 1000000-step warm-up" in capsys.readouterr().err
