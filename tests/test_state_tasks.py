"""The state-tracking tasks s5 and parity: answers against a composition written out by hand, the seed, the
vocabulary, and their place beside the other tasks (named, not in --task all)."""

from __future__ import annotations

import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.studies.tasks.generators import TASKS

#: The 120 permutations of 0..4 in lexicographic order: token t is PERMS[t].
PERMS = list(itertools.permutations(range(5)))


def draw(name, size, count=16, max_size=60, seed=0):
    return TASKS[name].batch(size, count, max_size, torch.Generator().manual_seed(seed))


def arrange(elements):
    """Five cards 0..4 in a row; each element p moves the card at place p[k] to place k."""
    cards = [0, 1, 2, 3, 4]
    for t in elements:
        cards = [cards[PERMS[t][k]] for k in range(5)]
    return PERMS.index(tuple(cards))


def test_the_hand_arrangement_is_the_group_product():
    swap01, cycle = PERMS.index((1, 0, 2, 3, 4)), PERMS.index((1, 2, 3, 4, 0))
    assert arrange([]) == 0 and arrange([swap01, swap01]) == 0  # a swap undoes itself
    assert arrange([cycle] * 5) == 0 and arrange([cycle] * 2) == PERMS.index((2, 3, 4, 0, 1))
    assert arrange([swap01, cycle]) == PERMS.index((0, 2, 3, 4, 1))  # the swap first, then the shift


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_s5_answer_is_the_arrangement_after_every_element(size, seed):
    batch = draw("s5", size, seed=seed)
    assert batch.shape == (16, size + 2)
    for row in batch.tolist():
        elements, sep, answer = row[:size], row[size], row[size + 1]
        assert sep == 120 and all(0 <= t < 120 for t in elements)
        assert answer == arrange(elements)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_parity_answer_is_whether_an_odd_number_of_bits_are_one(size, seed):
    batch = draw("parity", size, seed=seed)
    for row in batch.tolist():
        bits, sep, answer = row[:size], row[size], row[size + 1]
        assert sep == 2 and set(bits) <= {0, 1}
        assert answer == bits.count(1) % 2


def test_seed_vocabulary_and_uniform_answers():
    for name, vocab in (("s5", 121), ("parity", 3)):
        task = TASKS[name]
        batch = draw(name, 30, count=3000, max_size=30)
        assert task.vocab_size(30) == vocab and int(batch.min()) == 0 and int(batch.max()) == vocab - 1
        assert torch.equal(batch, draw(name, 30, count=3000, max_size=30))
        assert not torch.equal(batch, draw(name, 30, count=3000, max_size=30, seed=1))
        assert task.answer_length(30) == 1 and task.sequence_length(30) == 32
    s5 = draw("s5", 30, count=3000, max_size=30)[:, -1]
    assert len(set(s5.tolist())) == 120  # 3,000 uniform draws miss one of 120 with probability about 120 e^-25
    parity = draw("parity", 30, count=3000, max_size=30)[:, -1].float().mean()
    assert abs(float(parity) - 0.5) < 0.05  # sd about 0.009


def test_named_but_not_in_all():
    from octlm.studies.tasks.options import TaskOptions

    assert TaskOptions(task=["s5", "parity"]).task_names() == ["s5", "parity"]
    every = TaskOptions(task=["all"]).task_names()
    assert "s5" not in every and "parity" not in every and every == list(TASKS)[: len(every)]


def test_a_small_model_learns_parity_of_a_few_bits():
    from octlm.studies.tasks.options import TaskOptions
    from octlm.studies.tasks.scoring import exact_match
    from octlm.studies.tasks.study import train_task_model

    opts = TaskOptions(task="parity", task_length=3, d_model=32, n_heads=2, n_layers=2, max_steps=300, batch_size=32)
    model, _ = train_task_model(TASKS["parity"], "rope", 0, opts, torch.device("cpu"))
    # 256 instances at chance 1/2: sd 0.03, so 0.7 is over six sd above it
    assert exact_match(model, TASKS["parity"], 3, 12, 0, torch.device("cpu")) > 0.7
