"""The task study across tasks (issue 24): several tasks and the ranking, randomized rows beside plain ones, presets,
and what is refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.studies.tasks.ranking import fractional_ranks, mean_reciprocal_ranks, separated
from tests.conftest import flags

TINY = flags(d_model=16, n_heads=2, n_layers=1, max_steps=3, task_length=2, device="cpu")


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1))
def test_fractional_ranks_follow_the_textbook_formula(scores):
    ranks = fractional_ranks(scores)
    for label, score in scores.items():
        above = sum(s > score for s in scores.values())
        tied = sum(s == score for s in scores.values())
        assert ranks[label] == pytest.approx(above + (tied + 1) / 2)  # the mean of places above+1 .. above+tied
    assert sum(ranks.values()) == pytest.approx(len(scores) * (len(scores) + 1) / 2)


def _eval(task, label, seed, m, value):
    return {
        "record": "eval",
        "task": task,
        "label": label,
        "position": label,
        "seed": seed,
        "multiplier": m,
        "size": 4 * m,
        "exact_match": value,
    }


def test_mean_reciprocal_rank_of_a_scheme_first_everywhere_is_one_and_a_table_past_its_rows_counts_as_zero():
    records = []
    for seed in (0, 1):
        for task in ("copy", "count"):
            records += [
                _eval(task, "alibi", seed, 2, 0.9),
                _eval(task, "rope", seed, 2, 0.1 * (seed + 1)),
                _eval(task, "learned", seed, 2, None),
                _eval(task, "alibi", seed, 1, 1.0),  # learned at 1x, so the task ranks
            ]
    mrr = mean_reciprocal_ranks(records, ["alibi", "rope", "learned"], ["copy", "count"], [0, 1], 2)
    assert mrr["alibi"] == (1.0, 0.0) and mrr["rope"] == (0.5, 0.0) and mrr["learned"][0] == pytest.approx(1 / 3)


def test_mean_reciprocal_rank_is_taken_per_seed_and_its_spread_shown():
    records = [
        _eval("copy", "a", 0, 2, 1.0),
        _eval("copy", "b", 0, 2, 0.0),
        _eval("copy", "a", 1, 2, 0.0),
        _eval("copy", "b", 1, 2, 1.0),
        *(_eval("copy", label, seed, 1, 1.0) for label in "ab" for seed in (0, 1)),
    ]
    mrr = mean_reciprocal_ranks(records, ["a", "b"], ["copy"], [0, 1], 2)
    # ranks 1 and 2: sd of 1 and 0.5
    assert mrr["a"][0] == pytest.approx(0.75) and mrr["a"][1] == pytest.approx(0.3535, abs=1e-3)


def test_separated_marks_only_rows_whose_interval_clears_the_next():
    means = {"a": 0.9, "b": 0.5, "c": 0.45, "d": None}
    spreads = {"a": 0.1, "b": 0.1, "c": 0.1, "d": None}
    assert separated(means, spreads) == {"a"}  # 0.8 > 0.6; b's 0.4 < c's 0.55
    assert separated(means, {k: None for k in means}) == set()  # one seed: no spread, no claim


@pytest.mark.slow  # a whole study end to end
def test_several_tasks_write_one_table_each_and_the_ranking(tmp_path, capsys):
    from octlm.cli import main

    out = tmp_path / "tasks"
    assert (
        main(
            [
                "length",
                "--task",
                "copy",
                "flip-flop",
                "count",
                "--schemes",
                "rope",
                "alibi",
                "--seeds",
                "2",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "mean reciprocal rank across tasks" in printed
    table = (out / "tasks.md").read_text()
    for name in ("copy", "flip-flop", "count"):
        assert f"## Task study: {name}" in table
    assert "## Ranking across tasks" in table and "| `rope` |" in table
    assert (out / "ranking.png").read_bytes()[:4] == b"\x89PNG"
    records = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert records[0]["tasks"] == ["copy", "flip-flop", "count"]
    evals = [r for r in records if r["record"] == "eval"]
    assert len(evals) == 3 * 2 * 2 * 4 and {r["task"] for r in evals} == {"copy", "flip-flop", "count"}
    ranked = [r for r in records if r["record"] == "ranking"]  # at 2x and 4x: which tasks decide, which are left out
    assert [r["multiplier"] for r in ranked] == [2, 4]
    assert all(
        sorted(r["tasks"] + [t["task"] for t in r["left_out"] + r["not_learned"]]) == ["copy", "count", "flip-flop"]
        for r in ranked
    )


def test_all_runs_every_task(tmp_path):
    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions

    opts = TaskOptions(task=["all"], out=str(tmp_path)).resolved()
    assert opts.task == [name for name, task in TASKS.items() if task.in_all] and len(opts.task) == 7
    assert TaskOptions(task=["copy"]).resolved().max_steps != opts.max_steps  # several tasks take the shorter default


def test_randomized_rows_sit_beside_plain_ones_and_none_stays_plain(tmp_path, capsys):
    from octlm.cli import main

    out = tmp_path / "rand"
    assert (
        main(
            [
                "length",
                "--task",
                "copy",
                "--schemes",
                "rope",
                "none",
                "--randomize-positions",
                "4",
                "--seeds",
                "2",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    assert "none plain only" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert records[0]["rows"] == ["rope", "rope+rand", "none"]
    table = (out / "tasks.md").read_text()
    assert "| `rope+rand` |" in table and "Randomized positions minus plain" in table


def test_a_randomized_model_trains_at_drawn_positions_and_a_plain_one_does_not():
    import torch

    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions, Variant

    opts = TaskOptions(task="copy", task_length=4, randomize_positions=8)
    plain, rand = (opts.train_options(TASKS["copy"], Variant("rope", r), 0) for r in (False, True))
    assert plain.model.randomize_positions == 1 and rand.model.randomize_positions == 8
    assert rand.model.context_length == TASKS["copy"].sequence_length(4)
    from octlm.model import Decoder

    model = Decoder(rand.model_config(12)).train()
    model(torch.zeros(2, 9, dtype=torch.long))
    assert model.positions.randomized and model.positions.random_range == 8 * 9


def test_a_preset_sets_the_papers_protocol(tmp_path):
    from octlm.studies.tasks.options import TaskOptions
    from octlm.studies.tasks.presets import PRESETS

    opts = TaskOptions(preset="ruoss2023", out=str(tmp_path)).resolved()
    for name, value in PRESETS["ruoss2023"].settings.items():
        assert getattr(opts, name) == value
    assert opts.randomize_positions > 1 and opts.task_length == 40 and opts.n_layers == 5 and opts.d_model == 64


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--task", "sorting"], "invalid choice: 'sorting'"),
        (["--task", "copy", "copy"], "--task lists a task twice"),
        (
            ["--preset", "ruoss2023", "--task-length", "20"],
            "--task-length 20 conflicts with --preset ruoss2023, which sets --task-length 40",
        ),
        (
            ["--preset", "ruoss2023", "--seeds", "3", "--n-layers", "2"],
            "--n-layers 2 conflicts with --preset ruoss2023",
        ),
        (
            ["--preset", "ruoss2023", "--task", "reverse"],
            "--task reverse conflicts with --preset ruoss2023, which sets --task copy",
        ),
        (
            ["--task", "copy", "--schemes", "none", "--randomize-positions", "8"],
            "--randomize-positions 8: none of --schemes none reads positions",
        ),
        (["--task", "copy", "--randomize-positions", "0"], "--randomize-positions must be >= 1, got 0"),
        (["--task", "copy", "--multipliers", "0"], "--multipliers must be integers >= 1"),
        (["--preset", "nobody2099"], "invalid choice: 'nobody2099'"),
    ],
)
def test_bad_task_study_input_is_refused_before_anything_is_written(tmp_path, capsys, flags, message):
    from octlm.cli import main

    out = tmp_path / "study"
    try:
        code = main(["length", "--out", str(out), *flags])
    except SystemExit as exit:  # argparse's own refusals (an unknown choice)
        code = exit.code
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_preset_flag_typed_with_its_default_value_still_conflicts():
    from octlm.errors import OctlmError
    from octlm.studies.tasks.options import TASK_SEEDS, TaskOptions

    with pytest.raises(OctlmError, match="conflicts with --preset kazemnejad2023"):
        TaskOptions(preset="kazemnejad2023", n_layers=3).resolved(given={"n_layers"})
    # the same value agrees
    assert TaskOptions(preset="ruoss2023", seeds=TASK_SEEDS).resolved(given={"seeds"}).seeds == 3


def test_the_trained_size_is_always_scored_and_the_sizes_come_in_order(tmp_path):
    from octlm.cli import main

    out = tmp_path / "sizes"
    assert (
        main(
            [
                "length",
                "--task",
                "copy",
                "--schemes",
                "rope",
                "--multipliers",
                "3",
                "2",
                "--seeds",
                "1",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    header = json.loads((out / "tasks.jsonl").read_text().splitlines()[0])
    assert header["sizes"] == [2, 4, 6] and "trained on sizes 1..2" in (out / "tasks.md").read_text()


def test_progress_in_json_names_each_model_and_tasks_md_states_the_protocol(tmp_path, capsys):
    from octlm.cli import main

    out = tmp_path / "json"
    assert (
        main(
            [
                "length",
                "--task",
                "copy",
                "count",
                "--schemes",
                "rope",
                "--seeds",
                "1",
                "--out",
                str(out),
                "--json",
                *TINY,
            ]
        )
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    progress = [line for line in lines if line.get("event") == "task"]
    assert [(p["model"], p["models"], p["task"], p["row"]) for p in progress] == [
        (1, 2, "copy", "rope"),
        (2, 2, "count", "rope"),
    ]
    assert set(progress[0]["exact_match"]) == {"1x", "2x", "3x", "4x"}
    assert "Each model: 3 steps of muon (batch 32), d_model 16, 1 layers, 2 heads." in (out / "tasks.md").read_text()


def test_a_task_with_its_own_budget_trains_for_it_alone_and_beside_others_unless_max_steps_is_given(monkeypatch):
    import dataclasses

    from octlm.studies.tasks import generators
    from octlm.studies.tasks.options import ALL_TASKS_STEPS, TaskOptions

    monkeypatch.setitem(
        generators.TASKS, "recall", dataclasses.replace(generators.TASKS["recall"], training={"max_steps": 3000})
    )
    both = TaskOptions(task=["passkey", "recall"]).resolved()
    assert both.steps_by_task() == {"passkey": ALL_TASKS_STEPS, "recall": 3000}
    assert both.max_steps is None  # no one budget to write out
    assert both.train_options(generators.TASKS["recall"], "rope", 0).max_steps == 3000
    assert both.train_options(generators.TASKS["passkey"], "rope", 0).max_steps == ALL_TASKS_STEPS
    assert both.steps_said() == f"steps passkey {ALL_TASKS_STEPS}, recall 3000"
    assert TaskOptions(task=["recall"]).resolved().max_steps == 3000
    given = TaskOptions(task=["passkey", "recall"], max_steps=40).resolved()
    assert given.steps_by_task() == {"passkey": 40, "recall": 40} and given.steps_said() == "40 steps"
