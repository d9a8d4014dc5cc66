"""bench/baselines.py: the unigram and bigram baselines are proper distributions and match their formulas."""

from __future__ import annotations

import importlib.util

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO


def _baselines():
    spec = importlib.util.spec_from_file_location("baselines_bench", REPO / "bench" / "baselines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=60), st.integers(6, 9))
def test_bigram_sums_to_one_for_every_previous_token(train, vocab_size):
    """For every previous token, seen in training or not, p(. | prev) over the vocabulary sums to 1."""
    bench = _baselines()
    train = np.array(train, dtype=np.int64)
    for prev_id in range(vocab_size):
        prev = np.full(vocab_size, prev_id)
        total = np.exp2(bench.bigram_log2p(train, vocab_size, prev, np.arange(vocab_size))).sum()
        assert abs(total - 1.0) < 1e-9


def test_bigram_matches_absolute_discounting_written_out():
    """One case by hand: train 0 1 0 2 0 1, D = 0.75, vocab 3."""
    bench = _baselines()
    train = np.array([0, 1, 0, 2, 0, 1])
    # unigram, add-one: counts 3, 2, 1 -> 4, 3, 2 over 9
    uni = {0: 4 / 9, 1: 3 / 9, 2: 2 / 9}
    # after 0: pairs (0,1) x2, (0,2) x1; 3 in all, 2 distinct followers
    expected_1_after_0 = (2 - 0.75) / 3 + 0.75 * 2 / 3 * uni[1]
    expected_0_after_0 = 0.75 * 2 / 3 * uni[0]
    got = np.exp2(bench.bigram_log2p(train, 3, np.array([0, 0]), np.array([1, 0])))
    assert np.allclose(got, [expected_1_after_0, expected_0_after_0], rtol=1e-12)
    assert np.allclose(np.exp2(bench.unigram_log2p(train, 3)), [uni[0], uni[1], uni[2]], rtol=1e-12)


def test_scored_pairs_are_each_target_with_the_token_before_it():
    """The targets are those of whole blocks of T, each paired with the token before it."""
    bench = _baselines()
    val = np.arange(20)
    prev, target = bench.scored_pairs(val, 4)
    assert len(target) % 4 == 0 and len(target) >= 12
    assert np.array_equal(target, prev + 1)
    assert prev[0] == 0


def test_a_folder_that_is_no_run_ends_with_one_line(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as stop:
        _baselines().main([str(tmp_path)])
    assert (
        stop.value.code == 2
        and "holds no config.json: give a run folder made by octlm train" in capsys.readouterr().err
    )
