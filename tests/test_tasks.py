"""The synthetic tasks of ``octlm length --task``: generators right by construction, and a model that learns copy."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.studies.tasks.generators import DIGITS, FILLER, PASSKEY_DIGITS, TASKS
from octlm.version import build_version


def draw(name, size, count=64, max_size=40, seed=0):
    return TASKS[name].batch(size, count, max_size, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.parametrize("size", [1, 2, 7, 40])
def test_lengths_vocabulary_and_seed(name, size):
    task = TASKS[name]
    batch = draw(name, size)
    assert batch.dtype == torch.long and batch.shape == (64, task.sequence_length(size))
    assert 0 <= int(batch.min()) and int(batch.max()) < task.vocab_size(40)
    assert torch.equal(batch, draw(name, size))  # the seed reproduces the data
    assert not torch.equal(batch, draw(name, size, seed=1))


def test_copy_and_reverse_answers():
    for size in (1, 5, 30):
        copy, reverse = draw("copy", size), draw("reverse", size)
        assert (copy[:, size] == DIGITS).all() and (reverse[:, size] == DIGITS).all()
        for row in copy.tolist():
            assert row[size + 1 :] == row[:size]
        for row in reverse.tolist():
            assert row[size + 1 :] == row[:size][::-1]


def test_recall_asks_every_key_once_and_answers_each_with_its_own_value():
    from octlm.studies.tasks.generators import RECALL_VALUES

    for size in (1, 3, 8, 40):
        task = TASKS["recall"]
        assert task.answer_mask(size).tolist() == [False, True] * size
        for row in draw("recall", size).tolist():
            pairs, sep, answer = row[: 2 * size], row[2 * size], row[2 * size + 1 :]
            keys, values = pairs[0::2], pairs[1::2]
            asked, told = answer[0::2], answer[1::2]
            assert sep == RECALL_VALUES + 40 and len(set(keys)) == size
            assert all(RECALL_VALUES <= k < RECALL_VALUES + 40 for k in keys)
            assert len(set(values)) == size and all(0 <= v < RECALL_VALUES for v in values)  # no value twice
            assert sorted(asked) == sorted(keys)  # every key, each once
            assert told == [values[keys.index(k)] for k in asked]
        rows = draw("recall", size).tolist()
        assert size < 3 or any(r[2 * size + 1 :: 2] != r[: 2 * size : 2] for r in rows)  # asked in a fresh order


def test_passkey_answer_is_the_hidden_number():
    marker = DIGITS + FILLER
    for size in (1, 9, 40):
        batch = draw("passkey", size)
        for row in batch.tolist():
            prompt, sep, answer = (
                row[: size + 1 + PASSKEY_DIGITS],
                row[size + 1 + PASSKEY_DIGITS],
                row[-PASSKEY_DIGITS:],
            )
            at = prompt.index(marker)
            assert sep == marker + 1 and prompt[at + 1 : at + 1 + PASSKEY_DIGITS] == answer
            filler = prompt[:at] + prompt[at + 1 + PASSKEY_DIGITS :]
            assert filler == [DIGITS + i % FILLER for i in range(size)]
        where = [row.index(marker) for row in batch.tolist()]
        assert len(set(where)) > 1 or size == 1  # the number is hidden at varying depths


def test_sizes_outside_the_range_are_refused():
    with pytest.raises(ValueError, match="1 <= size <= max_size"):
        TASKS["copy"].batch(0, 4, 10, torch.Generator())
    with pytest.raises(ValueError, match="1 <= size <= max_size"):
        TASKS["recall"].batch(11, 4, 10, torch.Generator())


def test_training_sizes_are_1_to_L_only(monkeypatch):
    from octlm.studies.tasks.options import TaskOptions
    from octlm.studies.tasks.study import train_task_model

    seen = []
    real = TASKS["copy"].make
    monkeypatch.setitem(
        TASKS,
        "copy",
        TASKS["copy"].__class__(
            **{**TASKS["copy"].__dict__, "make": lambda n, c, m, g: seen.append(n) or real(n, c, m, g)}
        ),
    )
    opts = TaskOptions(
        task="copy", task_length=3, d_model=16, n_heads=2, n_layers=1, max_steps=40, learning_rate=1e-2, batch_size=4
    )
    train_task_model(TASKS["copy"], "rope", 0, opts, torch.device("cpu"))
    assert len(seen) == 40 and set(seen) <= {1, 2, 3} and len(set(seen)) == 3


def test_a_small_model_learns_copy_beyond_chance():
    from octlm.studies.tasks.options import TaskOptions
    from octlm.studies.tasks.scoring import exact_match
    from octlm.studies.tasks.study import train_task_model

    opts = TaskOptions(
        task="copy", task_length=2, d_model=32, n_heads=2, n_layers=2, max_steps=150, learning_rate=1e-2, batch_size=32
    )
    model, record = train_task_model(TASKS["copy"], "rope", 0, opts, torch.device("cpu"))
    assert record["final_loss"] < 0.5 * math.log(DIGITS)  # uniform guessing costs ln 10 nats per answer symbol
    assert exact_match(model, TASKS["copy"], 1, 8, 0, torch.device("cpu")) > 0.5  # chance: 1 in 10
    assert exact_match(model, TASKS["copy"], 2, 8, 0, torch.device("cpu")) > 0.1  # chance: 1 in 100


@pytest.mark.slow  # a whole study end to end
def test_the_study_writes_its_table_plot_and_jsonl(tmp_path, capsys):
    import json

    from octlm.cli import main

    out = tmp_path / "copy"
    args = [
        "length",
        "--task",
        "copy",
        "--out",
        str(out),
        "--max-steps",
        "5",
        "--task-length",
        "2",
        "--schemes",
        "learned",
        "rope",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--seeds",
        "2",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    assert "1x (2)" in capsys.readouterr().out
    table = (out / "tasks.md").read_text()
    assert (out / "tasks.png").read_bytes()[:4] == b"\x89PNG" and "| `rope` |" in table
    # rope's four sizes, learned's 1x
    assert "mean ± sample std over seeds 1337, 1338" in table and table.count("% ± ") == 4 + 1
    records = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert records[0]["record"] == "study" and records[0]["sizes"] == [2, 4, 6, 8] and records[0]["steps"] == 5
    assert records[0]["octlm_version"] == build_version()
    evals = [r for r in records if r["record"] == "eval"]
    assert len(evals) == 2 * 2 * 4  # schemes x seeds x sizes
    # past the table
    assert all(r["exact_match"] is None for r in evals if r["position"] == "learned" and r["size"] > 2)
    assert all(0.0 <= r["exact_match"] <= 1.0 for r in evals if r["position"] == "rope")


def test_the_task_study_has_its_own_defaults_and_flags_still_win():
    from octlm.cli import build_parser
    from octlm.cli.commands.length import study_options
    from octlm.model.positions import SCHEMES, length_study_schemes, task_study_schemes
    from octlm.studies.length.options import LengthOptions
    from octlm.studies.tasks.options import TASK_SEEDS, TASK_TRAINING, TaskOptions
    from octlm.train.options import TrainOptions

    TASK_DEFAULTS = {name: TASK_TRAINING[name] for name in ("d_model", "n_layers", "learning_rate")}
    text, task = LengthOptions(), TaskOptions(task="copy")
    train = TrainOptions()
    assert (text.d_model, text.n_layers, text.learning_rate) == (
        train.model.d_model,
        train.model.n_layers,
        train.learning_rate,
    )
    assert text.schemes == length_study_schemes() and task.schemes == task_study_schemes()
    # The measured 24.1 minutes are for these 8 (t5, fire and xpos included); the schemes of issue 23 are opt-in by
    # name.
    assert task.schemes == ["learned", "sinusoidal", "rope", "alibi", "t5", "fire", "xpos", "none"]
    assert set(SCHEMES) - set(task.schemes) == {"kerple", "prope", "cope", "fox", "stickbreaking", "pathattn"}
    assert {name: getattr(task, name) for name in TASK_DEFAULTS} == TASK_DEFAULTS
    assert (text.seeds, task.seeds) == (1, TASK_SEEDS)
    assert TASK_DEFAULTS["d_model"] != train.model.d_model  # else this test checks nothing
    argv = ["length", "--task", "copy", "--out", "x", "--n-layers", "2", "--schemes", "rope"]
    args = build_parser().parse_args(argv)
    args.argv = argv
    parsed = study_options(args)
    assert (parsed.n_layers, parsed.d_model, parsed.schemes) == (2, TASK_DEFAULTS["d_model"], ["rope"])


def test_help_and_docs_give_the_measured_task_study(capsys):
    import re

    from octlm.cli import main
    from octlm.model.positions import task_study_schemes
    from octlm.studies.tasks.options import MEASURED_ALL_MINUTES, MEASURED_MINUTES, TASK_SEEDS, TASK_STEPS
    from tests.conftest import REPO

    docs = " ".join((REPO / "docs" / "tasks.md").read_text(encoding="utf-8").split())
    measured = docs[docs.index("### Measured: copy") :]
    minutes = re.search(r"took \*\*([\d.]+) minutes\*\*", measured)[1]
    assert float(minutes) == MEASURED_MINUTES <= 30  # the bar, as measured
    defaults = len(task_study_schemes())
    # measured with today's defaults
    assert f"{defaults} schemes x {TASK_SEEDS} seeds x {TASK_STEPS:,} steps" in measured
    every = docs[docs.index("### Measured: every task") :]
    all_minutes = re.search(r"took \*\*([\d.]+) minutes\*\*", every)[1]
    assert float(all_minutes) == MEASURED_ALL_MINUTES <= 60 and "copy and count 2,000 steps" in every
    with pytest.raises(SystemExit):
        main(["length", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"x {TASK_SEEDS} seeds x {TASK_STEPS} steps) took {minutes} minutes with --threads 1" in help_text
    assert f"--task all (each task's own training) {all_minutes} minutes in 2 processes" in help_text


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--max-steps", "0"], "--max-steps must be >= 1, got 0"),
        (["--max-steps", "-5"], "--max-steps must be >= 1, got -5"),
        (["--learning-rate", "nan"], "--learning-rate must be"),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--d-model", "0"], "--d-model must be a positive integer, got 0"),
        (["--text", "tinyshakespeare"], "--text means nothing with --task"),
        (["--time-budget", "30"], "--time-budget means nothing with --task"),
        (["--extend-to", "8"], "--extend-to means nothing with --task"),
        (["--rope-theta", "500"], "--rope-theta means nothing with --task"),
    ],
)
def test_bad_or_unread_task_options_are_refused_before_anything_is_written(tmp_path, capsys, flags, message):
    from octlm.cli import main

    out = tmp_path / "copy"
    assert main(["length", "--task", "copy", "--out", str(out), *flags]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


# -- passkey by needle depth (issue 22) ----------------------------------------------------------------


@given(size=st.integers(1, 80), bins=st.integers(1, 12))
def test_depth_bins_share_out_every_place_of_the_needle_once(size, bins):
    task = TASKS["passkey"]
    places = [w for b in range(bins) for w in task.depth_slots(size, b / bins, (b + 1) / bins)]
    assert sorted(places) == list(range(size + 1))


@pytest.mark.parametrize("size, low, high", [(16, 0.0, 0.1), (16, 0.5, 0.6), (16, 0.9, 1.0), (40, 0.3, 0.4)])
def test_a_needle_drawn_at_a_depth_sits_there_and_the_answer_is_its_key(size, low, high):
    task = TASKS["passkey"]
    batch = task.batch_at_depth(size, 64, 64, torch.Generator().manual_seed(5), low, high)
    marker = DIGITS + FILLER
    for row in batch.tolist():
        where = row.index(marker)  # filler tokens before the key
        assert low <= where / size < high or (high == 1.0 and where == size)
        assert row[where + 1 : where + 1 + PASSKEY_DIGITS] == row[-PASSKEY_DIGITS:]
        assert len(row) == task.sequence_length(size)


def test_only_a_needle_task_has_a_depth():
    # no place of 5 filler tokens lies there
    assert TASKS["passkey"].batch_at_depth(5, 4, 10, torch.Generator(), 0.1, 0.2) is None
    with pytest.raises(ValueError, match="hides no needle"):
        TASKS["copy"].batch_at_depth(4, 4, 10, torch.Generator(), 0.0, 0.5)


@pytest.mark.slow  # a whole study end to end
def test_the_passkey_study_scores_each_depth_and_draws_the_heatmap(tmp_path):
    import json

    from octlm.cli import main
    from octlm.studies.tasks.scoring import DEPTH_BINS

    out = tmp_path / "passkey"
    args = [
        "length",
        "--task",
        "passkey",
        "--out",
        str(out),
        "--max-steps",
        "3",
        "--task-length",
        "10",
        "--schemes",
        "learned",
        "alibi",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--seeds",
        "1",
        "--quiet",
    ]
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    depths = [r for r in records if r["record"] == "depth"]
    assert {(r["position"], r["size"]) for r in depths} == {
        (s, n) for s in ("learned", "alibi") for n in (10, 20, 30, 40)
    }
    for r in depths:
        assert len(r["exact_match"]) == DEPTH_BINS
        past_table = r["position"] == "learned" and r["size"] > 10
        assert all((v is None) if past_table else (0.0 <= v <= 1.0) for v in r["exact_match"])
    assert (out / "tasks-depth.png").read_bytes()[:4] == b"\x89PNG" and "## Passkey by needle depth" in (
        out / "tasks.md"
    ).read_text()


# -- the tasks of issue 24: selective copy, count, flip-flop -------------------------------------------


@given(size=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_selective_copy_answer_is_the_non_blank_symbols_in_order(size, seed):
    from octlm.studies.tasks.generators import marked

    batch = draw("selective-copy", size, count=8, max_size=60, seed=seed)
    assert batch.shape[1] == size + 1 + max(1, size // 4)
    for row in batch.tolist():
        slots, sep, answer = row[:size], row[size], row[size + 1 :]
        assert sep == DIGITS + 1
        assert answer == [x for x in slots if x != DIGITS]  # BLANK is DIGITS
        assert len(answer) == marked(size) and all(0 <= x < DIGITS for x in answer)


@given(size=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_count_answer_is_how_often_the_asked_symbol_occurs(size, seed):
    from octlm.studies.tasks.generators import MAX_COUNT

    batch = draw("count", size, count=16, max_size=60, seed=seed)
    for row in batch.tolist():
        x, sep, q, answer = row[:size], row[size], row[size + 1], row[size + 2]
        assert sep == DIGITS and 0 <= q < DIGITS and all(0 <= s < DIGITS for s in x)
        assert answer - (DIGITS + 1) == x.count(q) <= min(MAX_COUNT, size)


def test_count_draws_every_count_and_never_more_than_nine():
    batch = draw("count", 40, count=2000, max_size=40)
    counts = (batch[:, -1] - DIGITS - 1).tolist()
    # uniform over 0..9: each of 2,000 draws misses a count with probability 0.9^2000
    assert set(counts) == set(range(10))


@given(size=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_flip_flop_answer_is_the_last_written_bit(size, seed):
    from octlm.studies.tasks.generators import WRITE

    batch = draw("flip-flop", size, count=16, max_size=60, seed=seed)
    for row in batch.tolist():
        ops, bits, read, answer = row[0 : 2 * size : 2], row[1 : 2 * size : 2], row[2 * size], row[2 * size + 1]
        assert ops[0] == WRITE and set(ops) <= {WRITE, WRITE + 1} and set(bits) <= {0, 1} and read == WRITE + 2
        last = max(i for i, op in enumerate(ops) if op == WRITE)
        assert answer == bits[last]


def test_flip_flop_writes_about_one_instruction_in_nine():
    from octlm.studies.tasks.generators import FLIP_FLOP_WRITE, WRITE

    ops = draw("flip-flop", 200, count=200, max_size=200)[:, 2:400:2]  # after the first, which always writes
    share = float((ops == WRITE).float().mean())
    assert abs(share - FLIP_FLOP_WRITE) < 0.01  # 39,800 draws: sd of the share about 0.0016


@pytest.mark.parametrize(
    "name, length, steps, chance",
    [
        ("selective-copy", 4, 300, 0.1),  # one symbol of ten among four slots
        ("count", 4, 300, 0.25),  # best constant guess among 0..4 with the count drawn uniformly up to the size
        ("flip-flop", 4, 300, 0.5),
        # one pair of 128 values (its own AdamW at 3e-4): measured 98-100% on three seeds; at four pairs recall
        # stays near chance for thousands of steps before it jumps (docs/tasks.md), too long for a test
        ("recall", 1, 300, 1 / 128),
    ],
)
@pytest.mark.slow
def test_a_small_model_beats_chance_on_each_new_task(name, length, steps, chance):
    from octlm.studies.tasks.options import TaskOptions
    from octlm.studies.tasks.scoring import exact_match
    from octlm.studies.tasks.study import train_task_model

    opts = TaskOptions(task=name, task_length=length, d_model=32, n_heads=2, n_layers=2, max_steps=steps, batch_size=32)
    model, _ = train_task_model(TASKS[name], "rope", 0, opts, torch.device("cpu"))
    # 256 instances: at chance the score's sd is at most 0.03, so 0.15 above it is five sd; measured here 0.39 to 1.0
    assert exact_match(model, TASKS[name], length, 4 * length, 0, torch.device("cpu")) > chance + 0.15
