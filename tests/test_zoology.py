"""Zoology's multi-query associative recall (octlm.studies.tasks.zoology): the format their paper describes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.studies.tasks.zoology import IGNORE, gap_weights, mqar


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.sampled_from([32, 64, 128]), st.sampled_from([64, 256, 8192]), st.integers(0, 2**16))
def test_each_key_is_asked_once_and_its_target_is_its_value(pairs, length, vocab, seed):
    inputs, targets = mqar(20, length, pairs, vocab, seed)
    assert inputs.shape == targets.shape == (20, length) and int(inputs.max()) < vocab
    for x, y in zip(inputs.tolist(), targets.tolist(), strict=True):
        keys, values = x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2]
        assert len(set(keys)) == len(set(values)) == pairs
        assert all(1 <= k < vocab // 2 <= v < vocab for k, v in zip(keys, values, strict=True))
        scored = [t for t in range(length) if y[t] != IGNORE]
        assert len(scored) == pairs and all(t >= 2 * pairs and (t - 2 * pairs) % 2 == 0 for t in scored)
        assert {x[t]: y[t] for t in scored} == dict(zip(keys, values, strict=True))
        assert all(y[t] == IGNORE for t in range(2 * pairs))


def test_the_gaps_follow_the_power_law():
    p = gap_weights(28)
    assert p.sum() == pytest.approx(1.0) and all(np.diff(p) < 0)  # nearer gaps likelier
    assert p[1] / p[0] == pytest.approx(2 ** (0.01 - 1))
    _, targets = mqar(4000, 64, 1, 256, seed=3)
    where = (targets != IGNORE).float().argmax(dim=1) - 2
    counts = torch.bincount(where // 2, minlength=31).float()
    assert counts[0] / counts[1] == pytest.approx(1 / 2 ** (0.01 - 1), rel=0.15)


def test_impossible_shapes_are_refused():
    with pytest.raises(ValueError, match="must be even"):
        mqar(1, 63, 4, 256, 0)
    with pytest.raises(ValueError, match="hold 40 pairs twice"):
        mqar(1, 64, 40, 256, 0)
