"""Faults of the command line and its output, one test each: what a person or script gave, and what octlm now does.

Each test's docstring states the fault it holds fixed.
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.model.sampling import sample_next


def test_top_k_keeps_k_tokens_and_breaks_ties_toward_the_lowest_id():
    """Fault: top-k kept every token tied with the k-th, so ``top_k=1`` over ``[1, 3, 3, 3, 0.5]`` drew among ids 1, 2
    and 3."""
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.5]])
    generator = torch.Generator().manual_seed(0)
    drawn = {int(sample_next(logits, 1.0, 1, generator)) for _ in range(200)}
    assert drawn == {1}
    drawn = {int(sample_next(logits, 1.0, 2, generator)) for _ in range(200)}
    assert drawn == {1, 2}
    # torch.topk itself keeps no such rule on ties: on CPU its k=2 here is ids 1 and 3.
    drawn = {int(sample_next(logits, 1.0, 3, generator)) for _ in range(300)}
    assert drawn == {1, 2, 3}


@given(
    values=st.lists(st.integers(-3, 3), min_size=1, max_size=40),
    k=st.integers(1, 45),
    rows=st.integers(1, 3),
)
def test_exactly_k_ids_can_ever_be_drawn(values, k, rows):
    """Fault (property): with ties at the k-th logit more than k ids could be drawn; now exactly min(k, V) can, the k
    largest with ties to the lowest id."""
    from octlm.model.sampling import top_k_mask

    logits = torch.tensor([values] * rows, dtype=torch.float32)
    kept = top_k_mask(logits, k)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    assert [sorted(torch.nonzero(row).flatten().tolist()) for row in kept] == [sorted(expected)] * rows
    generator = torch.Generator().manual_seed(len(values) * 100 + k)
    for _ in range(5):
        assert set(sample_next(logits, 1.0, k, generator).flatten().tolist()) <= set(expected)
