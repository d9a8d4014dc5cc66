"""The task study's score and tables against hand computation (issue 40, finding 2).

Exact match is scored on stand-in models whose answers are known: one that
reads the answer from the batch the task drew (right everywhere, or wrong at
positions chosen here), so the expected score is counted by hand, never taken
from the study. The tables (mean ± sd, randomized minus plain, the mean
reciprocal rank) are built from hand-made records whose cells are worked out
in the comments.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.studies.tasks.generators import TASKS, Task
from octlm.studies.tasks.scoring import EVAL_COUNT, exact_match, exact_match_by_depth
from octlm.studies.tasks.summary import summarize

CPU = torch.device("cpu")
LONGEST = 24


class AnswerKey(torch.nn.Module):
    """A stand-in model whose greedy choice at every position is the next token of the batch its task last drew, except
    where ``wrong`` [rows, answer tokens] is True: there it picks another symbol."""

    max_length = None  # no learned table: every size is scored

    def __init__(self, task: Task, size: int, wrong: torch.Tensor):
        super().__init__()
        self.vocab, self.answer, self.wrong, self.drawn = task.vocab_size(LONGEST), task.answer_length(size), wrong, []
        self.task = dataclasses.replace(task, make=self._recording(task.make))
        if task.make_at_depth is not None:
            self.task = dataclasses.replace(self.task, make_at_depth=self._recording(task.make_at_depth))

    def _recording(self, make):
        def draw(*args):
            self.drawn.append(make(*args))
            return self.drawn[-1]

        return draw

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        full = self.drawn[-1]
        assert torch.equal(ids, full[:, :-1])  # the model is shown the instance less its last token
        target = full[:, 1:].clone()
        answer = target[:, -self.answer :]
        answer[self.wrong] = (answer[self.wrong] + 1) % self.vocab
        return torch.nn.functional.one_hot(target, self.vocab).float()


def scored_places(task: Task, size: int) -> list[int]:
    """Indices of the scored tokens in the answer: recall's values (every second token), every token elsewhere."""
    answer = task.answer_length(size)
    return list(range(1, answer, 2)) if task.name == "recall" else list(range(answer))


def one_wrong_per_row(task: Task, size: int, rows: int = EVAL_COUNT) -> torch.Tensor:
    """Row ``r`` wrong at the ``r``-th scored place (cycling), so the first and the last scored token are each wrong in
    some rows."""
    places = scored_places(task, size)
    wrong = torch.zeros(rows, task.answer_length(size), dtype=torch.bool)
    wrong[torch.arange(rows), torch.tensor([places[r % len(places)] for r in range(rows)])] = True
    return wrong


def score(task: Task, size: int, wrong: torch.Tensor) -> float:
    model = AnswerKey(task, size, wrong)
    return exact_match(model, model.task, size, LONGEST, 0, CPU)


@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.parametrize("size", [1, 5, 12])
def test_a_model_always_right_scores_one_and_one_wrong_token_per_instance_scores_zero(name, size):
    """Exact match is 1.0 for a model right everywhere, and 0.0 when each instance has exactly one wrong scored
    token, whichever of its answer tokens that is."""
    task = TASKS[name]
    assert score(task, size, torch.zeros(EVAL_COUNT, task.answer_length(size), dtype=torch.bool)) == 1.0
    assert score(task, size, one_wrong_per_row(task, size)) == 0.0


@given(name=st.sampled_from(list(TASKS)), size=st.integers(1, 12), seed=st.integers(0, 2**31 - 1))
def test_the_score_is_the_share_of_instances_without_a_wrong_scored_token(name, size, seed):
    """With wrong tokens scattered at random over the scored places, the score is the share of rows that have none
    (counted here), unscored places (recall's asked keys) being wrong or not."""
    task = TASKS[name]
    g = torch.Generator().manual_seed(seed)
    wrong = torch.rand(EVAL_COUNT, task.answer_length(size), generator=g) < torch.rand(1, generator=g)
    scored = torch.zeros(task.answer_length(size), dtype=torch.bool)
    scored[scored_places(task, size)] = True
    clean_rows = sum(not bool((row & scored).any()) for row in wrong)
    assert score(task, size, wrong) == clean_rows / EVAL_COUNT


def test_recalls_asked_keys_are_not_scored():
    """Recall's asked keys are read, not predicted: a model wrong on every one of them but right on the values scores
    1.0; right on the keys and wrong on one value, 0.0."""
    task, size = TASKS["recall"], 12
    keys_wrong = torch.zeros(EVAL_COUNT, task.answer_length(size), dtype=torch.bool)
    keys_wrong[:, 0::2] = True
    assert score(task, size, keys_wrong) == 1.0
    assert score(task, size, one_wrong_per_row(task, size)) == 0.0


def test_each_needle_depth_is_scored_the_same_way():
    """By needle depth: 1.0 in every bin right everywhere, 0.0 with one wrong digit per instance, ``None`` in a bin
    no place of the needle lies in (5 filler tokens leave bins empty)."""
    task = TASKS["passkey"]
    for size in (5, 20):
        empty = [task.depth_slots(size, b / 10, (b + 1) / 10) == [] for b in range(10)]
        for wrong, want in ((torch.zeros(EVAL_COUNT, 5, dtype=torch.bool), 1.0), (one_wrong_per_row(task, size), 0.0)):
            model = AnswerKey(task, size, wrong)
            got = exact_match_by_depth(model, model.task, size, LONGEST, 0, CPU)
            assert got == [None if e else want for e in empty]
        assert any(empty) == (size == 5)


# -- the tables, from hand-made records ------------------------------------------------------------------------------

SIZES = [2, 4, 6, 8]  # L = 2: multipliers 1, 2, 3, 4
SEEDS = [0, 1]
LABELS = ["rope", "rope+rand", "learned"]
# exact match by task, row and seed at 1x .. 4x; the learned table has rows for L tokens only
SCORES = {
    "copy": {
        "rope": {0: [1.0, 0.5, 0.3, 0.3], 1: [1.0, 0.7, 0.2, 0.3]},
        "rope+rand": {0: [1.0, 0.9, 0.6, 0.1], 1: [0.8, 0.8, 0.4, 0.0]},
        "learned": {0: [0.9, None, None, None], 1: [0.7, None, None, None]},
    },
    "count": {
        # learned at 1x (rope 100% on both seeds), so count enters the ranking
        "rope": {0: [1.0, 0.25, 0.25, 0.0], 1: [1.0, 0.5, 0.25, 0.25]},
        "rope+rand": {0: [1.0, 0.5, 0.5, 0.5], 1: [0.75, 0.25, 0.25, 0.25]},
        "learned": {0: [0.25, None, None, None], 1: [0.25, None, None, None]},
    },
}


def hand_made_records() -> list[dict]:
    return [
        {
            "record": "eval",
            "task": task,
            "position": label.removesuffix("+rand"),
            "label": label,
            "randomized": label.endswith("+rand"),
            "seed": seed,
            "multiplier": size // SIZES[0],
            "size": size,
            "exact_match": value,
        }
        for task, rows in SCORES.items()
        for label, by_seed in rows.items()
        for seed, values in by_seed.items()
        for size, value in zip(SIZES, values, strict=True)
    ]


def table_rows(markdown: str, start: str, end: str | None = None) -> dict[str, list[str]]:
    """The cells of each ``| `label` | ... |`` row between the lines ``start`` and ``end`` begin with."""
    lines = markdown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next((i for i, line in enumerate(lines) if i > first and end and line.startswith(end)), len(lines))
    return {
        line.split("`")[1]: [cell.strip() for cell in line.split("|")[2:-1]]
        for line in lines[first:last]
        if line.startswith("| `")
    }


def test_the_task_tables_have_the_hand_computed_cells_and_signs():
    """Mean ± sample sd over two seeds is (a + b) / 2 ± |a - b| / sqrt 2; randomized minus plain is each seed's
    difference, so its sign says which row did better; † marks rope+rand at 2x, whose interval clears rope's."""
    summary = summarize(hand_made_records(), [], [TASKS["copy"], TASKS["count"]], LABELS, SIZES, SEEDS)
    copy = table_rows(summary.markdown, "## Task study: copy", "Randomized positions minus plain")
    assert copy == {
        # 1, 1 | 0.5, 0.7 | 0.3, 0.2 | 0.3, 0.3
        "rope": ["100.0% ± 0.0", "60.0% ± 14.1", "25.0% ± 7.1", "30.0% ± 0.0"],
        # 1, 0.8 | 0.9, 0.8 (85 - 7.1 > 60 + 14.1: †) | 0.6, 0.4 | 0.1, 0
        "rope+rand": ["90.0% ± 14.1", "85.0% ± 7.1 †", "50.0% ± 14.1", "5.0% ± 7.1"],
        "learned": ["80.0% ± 14.1", "n/a", "n/a", "n/a"],
    }
    # rope+rand minus rope, seed by seed: 0, -0.2 | 0.4, 0.1 | 0.3, 0.2 | -0.2, -0.3
    assert table_rows(summary.markdown, "Randomized positions minus plain", "## Task study: count") == {
        "rope": ["-10.0 ± 14.1", "+25.0 ± 21.2", "+25.0 ± 7.1", "-25.0 ± 7.1"]
    }
    # count: rope+rand minus rope is 0, -0.25 | 0.25, -0.25 | 0.25, 0 | 0.5, 0
    count_diff = table_rows(summary.markdown.split("## Task study: count")[1], "Randomized positions minus plain")
    assert count_diff == {"rope": ["-12.5 ± 17.7", "+0.0 ± 35.4", "+12.5 ± 17.7", "+25.0 ± 35.4"]}
    means = summary.result["accuracy"]["count"]
    assert means["rope"] == pytest.approx([1.0, 0.375, 0.25, 0.125]) and means["learned"][1:] == [None] * 3


def test_the_mean_reciprocal_rank_of_hand_made_records():
    """Ranked per task and seed by exact match (ties share their places, a size past the table counts as 0), 1 / rank
    averaged over the two tasks, then mean ± sd over seeds: worked out below."""
    summary = summarize(hand_made_records(), [], [TASKS["copy"], TASKS["count"]], LABELS, SIZES, SEEDS)
    mrr = summary.result["mean_reciprocal_rank"]
    # 2x, seed 0: copy rand 0.9 > rope 0.5 > learned 0; count rand 0.5 > rope 0.25 > learned 0
    #     seed 1: copy rand 0.8 > rope 0.7 > learned 0; count rope 0.5 > rand 0.25 > learned 0
    #     rand (1 + 1) / 2 = 1 and (1 + 1/2) / 2 = 0.75; rope 0.5 and 0.75; learned 1/3 both
    want_2x = {"rope+rand": (0.875, 0.25 / 2**0.5), "rope": (0.625, 0.25 / 2**0.5), "learned": (1 / 3, 0.0)}
    # 4x, seed 0: copy rope 0.3 > rand 0.1 > learned 0; count rand 0.5 > rope 0 = learned 0 (2.5 each)
    #     seed 1: copy rope 0.3 > rand 0 = learned 0 (2.5 each); count rope 0.25 = rand 0.25 (1.5 each) > learned 0
    #     rope (1 + 1/2.5) / 2 = 0.7 and (1 + 1/1.5) / 2 = 5/6;
    #     rand (1/2 + 1) / 2 = 0.75 and (1/2.5 + 1/1.5) / 2 = 8/15;
    #     learned (1/3 + 1/2.5) / 2 = 11/30 both
    want_4x = {
        "rope": ((0.7 + 5 / 6) / 2, (5 / 6 - 0.7) / 2**0.5),
        "rope+rand": ((0.75 + 8 / 15) / 2, (0.75 - 8 / 15) / 2**0.5),
        "learned": (11 / 30, 0.0),
    }
    for column, want in (("2x", want_2x), ("4x", want_4x)):
        got = {label: (cell["mean"], cell["std"]) for label, cell in mrr[column].items()}
        assert got.keys() == want.keys()
        for label, (mean, sd) in want.items():
            assert got[label] == pytest.approx((mean, sd), abs=1e-12), (column, label)
    ranking = summary.markdown.split("## Ranking across tasks")[1].split("## Task study")[0]
    # best MRR at 2x first; learned's cells, clear of any rounding edge: 1/3 and 11/30
    assert list(table_rows(ranking, "| scheme")) == ["rope+rand", "rope", "learned"]
    assert table_rows(ranking, "| scheme")["learned"] == ["0.33 ± 0.00", "0.37 ± 0.00"]
