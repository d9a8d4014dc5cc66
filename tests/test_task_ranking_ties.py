"""A task on which every scheme scores the same carries no ranking (issue: the ranking carried by three tasks).

At 2x reverse, recall and selective copy were 0% for every scheme, yet they
entered the mean reciprocal rank as ties, pulling every scheme's MRR towards
1 / (mean place). Such a task is now left out at that multiplier and named
apart. The expectations below are worked out by hand in the comments.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.studies.tasks.generators import TASKS
from octlm.studies.tasks.ranking import mean_reciprocal_ranks, unlearned_tasks
from octlm.studies.tasks.summary import summarize

SIZES = [2, 4]  # L = 2: multipliers 1 and 2
SEEDS = [0, 1]
LABELS = ["alibi", "rope", "learned"]
# exact match at 1x and 2x by task, row and seed; the learned table reads no size past L (counts as 0)
SCORES = {
    "copy": {
        "alibi": {0: [1.0, 0.6], 1: [1.0, 0.4]},
        "rope": {0: [1.0, 0.2], 1: [1.0, 0.5]},
        "learned": {0: [1.0, None], 1: [1.0, None]},
    },
    "reverse": {  # at 2x every row 0% on every seed: ranks nobody there
        "alibi": {0: [0.5, 0.0], 1: [0.5, 0.0]},
        "rope": {0: [0.25, 0.0], 1: [0.5, 0.0]},
        "learned": {0: [1.0, None], 1: [1.0, None]},  # learned at 1x, so the tie at 2x is what leaves it out
    },
    "count": {
        "alibi": {0: [1.0, 0.5], 1: [0.9, 0.25]},
        "rope": {0: [0.5, 0.25], 1: [0.5, 0.25]},
        "learned": {0: [0.5, None], 1: [0.5, None]},
    },
}


def _records(scores: dict = SCORES) -> list[dict]:
    return [
        {
            "record": "eval",
            "task": task,
            "position": label,
            "label": label,
            "randomized": False,
            "seed": seed,
            "multiplier": size // SIZES[0],
            "size": size,
            "exact_match": value,
        }
        for task, rows in scores.items()
        for label, by_seed in rows.items()
        for seed, values in by_seed.items()
        for size, value in zip(SIZES, values, strict=True)
    ]


def test_a_task_every_scheme_ties_on_is_left_out_of_the_mean_reciprocal_rank():
    """MRR at 2x over copy and count only (reverse: every scheme 0% on both seeds), by hand:

    seed 0: copy alibi 0.6 > rope 0.2 > learned 0 (1, 2, 3); count alibi 0.5 > rope 0.25 > learned 0 (1, 2, 3)
            alibi (1 + 1) / 2 = 1, rope (1/2 + 1/2) / 2 = 1/2, learned 1/3
    seed 1: copy rope 0.5 > alibi 0.4 > learned 0 (1, 2, 3); count alibi = rope 0.25 (1.5 each) > learned 0 (3)
            alibi (1/2 + 2/3) / 2 = 7/12, rope (1 + 2/3) / 2 = 5/6, learned 1/3
    mean ± sample sd of two values a, b: (a + b) / 2 ± |a - b| / sqrt 2
    """
    summary = summarize(_records(), [], [TASKS[t] for t in SCORES], LABELS, SIZES, SEEDS)
    want = {
        "alibi": ((1 + 7 / 12) / 2, (1 - 7 / 12) / 2**0.5),
        "rope": ((1 / 2 + 5 / 6) / 2, (5 / 6 - 1 / 2) / 2**0.5),
        "learned": (1 / 3, 0.0),
    }
    got = {label: (cell["mean"], cell["std"]) for label, cell in summary.result["mean_reciprocal_rank"]["2x"].items()}
    assert got.keys() == want.keys()
    for label, (mean, sd) in want.items():
        assert got[label] == pytest.approx((mean, sd), abs=1e-12), label
    assert summary.result["ranking"]["2x"] == {
        "tasks": ["copy", "count"],
        "not_learned": [],
        "left_out": [{"task": "reverse", "exact_match": 0.0}],
    }

    line = "decided by 2 of 3 tasks; left out: reverse (every scheme 0%)"
    assert line in summary.markdown and line in summary.terminal


def test_the_ranking_record_of_tasks_jsonl_names_the_tasks_left_out():
    summary = summarize(_records(), [], [TASKS[t] for t in SCORES], LABELS, SIZES, SEEDS)
    records = [json.loads(json.dumps(r)) for r in summary.records]
    at_2x = next(r for r in records if r["record"] == "ranking" and r["multiplier"] == 2)
    assert at_2x["tasks"] == ["copy", "count"] and at_2x["left_out"] == [{"task": "reverse", "exact_match": 0.0}]
    assert set(at_2x["mean_reciprocal_rank"]) == set(LABELS)


def test_a_task_tied_on_one_seed_only_still_decides():
    """Ties are judged over every seed: copy ties on seed 0 only, so it still ranks on seed 1 and stays in."""
    scores = {
        "copy": {"a": {0: [1.0, 0.0], 1: [1.0, 0.5]}, "b": {0: [1.0, 0.0], 1: [1.0, 0.0]}},
        "count": {"a": {0: [1.0, 0.0], 1: [1.0, 0.0]}, "b": {0: [1.0, 1.0], 1: [1.0, 1.0]}},
    }
    # seed 0: copy a = b (1.5 each), count b > a: a (2/3 + 1/2) / 2 = 7/12, b (2/3 + 1) / 2 = 5/6
    # seed 1: copy a > b, count b > a: a (1 + 1/2) / 2 = 3/4, b 3/4
    mrr = mean_reciprocal_ranks(_records(scores), ["a", "b"], ["copy", "count"], SEEDS, 2)
    assert mrr["a"][0] == pytest.approx((7 / 12 + 3 / 4) / 2) and mrr["b"][0] == pytest.approx((5 / 6 + 3 / 4) / 2)


SCORE = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, None])


@given(
    scores=st.lists(st.lists(st.lists(SCORE, min_size=2, max_size=2), min_size=3, max_size=3), min_size=1, max_size=3),
    tied=st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=2, max_size=2),
    where=st.integers(0, 3),
)
def test_adding_a_task_every_scheme_ties_on_never_changes_the_ranking(scores, tied, where):
    """scores[task][label][seed]; the added task gives every scheme the same score on each seed (``tied[seed]``)."""
    labels, names = ["a", "b", "c"], ["copy", "reverse", "recall", "count"]
    table = {
        names[t]: {labels[k]: {s: [1.0, v] for s, v in enumerate(row)} for k, row in enumerate(task)}
        for t, task in enumerate(scores)
    }
    before = mean_reciprocal_ranks(_records(table), labels, list(table), SEEDS, 2)
    tasks = list(table)
    tasks.insert(min(where, len(tasks)), "flip-flop")
    table["flip-flop"] = {label: {s: [1.0, tied[s]] for s in SEEDS} for label in labels}
    assert mean_reciprocal_ranks(_records(table), labels, tasks, SEEDS, 2) == before


def test_when_every_task_ties_there_is_no_table_only_the_tasks_left_out():
    scores = {task: {label: {0: [1.0, 0.0], 1: [1.0, 0.0]} for label in LABELS} for task in ("copy", "count")}
    summary = summarize(_records(scores), [], [TASKS["copy"], TASKS["count"]], LABELS, SIZES, SEEDS)
    assert mean_reciprocal_ranks(_records(scores), LABELS, ["copy", "count"], SEEDS, 2) == {}
    assert "At 2x: decided by 0 of 2 tasks; left out: copy, count (every scheme 0%)." in summary.markdown
    assert "| scheme |" not in summary.markdown.split("## Task study: copy")[0]
    assert summary.extra_files["ranking.png"][:4] == b"\x89PNG"


def test_a_task_no_scheme_learns_at_1x_on_every_seed_is_left_out_at_every_size():
    """Learned means some scheme at 90% or more at 1x on every seed: 0.9 on both seeds counts, 0.95 and 0.85 do not."""
    scores = {
        "copy": {"a": {0: [0.9, 1.0], 1: [0.9, 0.0]}, "b": {0: [0.5, 0.0], 1: [0.5, 1.0]}},
        "count": {"a": {0: [0.95, 1.0], 1: [0.85, 1.0]}, "b": {0: [0.6, 0.0], 1: [0.8, 0.0]}},
    }
    labels = ["a", "b"]
    assert unlearned_tasks(_records(scores), labels, list(scores), SEEDS) == {"count": 0.85}
    # copy alone decides: a and b swap places between the seeds, so both average (1 + 1/2) / 2
    assert mean_reciprocal_ranks(_records(scores), labels, list(scores), SEEDS, 2) == {
        "a": (0.75, pytest.approx(0.5 / 2**0.5)),
        "b": (0.75, pytest.approx(0.5 / 2**0.5)),
    }
    summary = summarize(_records(scores), [], [TASKS[t] for t in scores], labels, SIZES, SEEDS)
    assert summary.result["ranking"]["2x"] == {
        "tasks": ["copy"],
        "not_learned": [{"task": "count", "best_at_1x": 0.85}],
        "left_out": [],
    }
    line = "decided by 1 of 2 tasks; not learned at 1x: count (best 85%)"
    assert line in summary.markdown and line in summary.terminal


@given(
    scores=st.lists(st.lists(st.lists(SCORE, min_size=2, max_size=2), min_size=3, max_size=3), min_size=1, max_size=3),
    failed=st.lists(st.lists(st.floats(0.0, 0.89), min_size=2, max_size=2), min_size=3, max_size=3),
    past=st.lists(st.lists(SCORE, min_size=2, max_size=2), min_size=3, max_size=3),
)
def test_adding_a_task_no_scheme_learns_never_changes_the_ranking(scores, failed, past):
    """Whatever its scores past 1x, a task below 90% at 1x for every scheme on some seed adds nothing to any MRR."""
    labels, names = ["a", "b", "c"], ["copy", "reverse", "recall"]
    table = {
        names[t]: {labels[k]: {s: [1.0, v] for s, v in enumerate(row)} for k, row in enumerate(task)}
        for t, task in enumerate(scores)
    }
    before = mean_reciprocal_ranks(_records(table), labels, list(table), SEEDS, 2)
    table["count"] = {labels[k]: {s: [failed[k][s], past[k][s]] for s in SEEDS} for k in range(3)}
    assert mean_reciprocal_ranks(_records(table), labels, list(table), SEEDS, 2) == before
