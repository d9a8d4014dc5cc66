"""The page's reference for FoX and stick-breaking attention (octlm.export.gate_parity) against closed forms worked out
by hand: a constant gate makes FoX a geometric decay, a constant score makes stick-breaking one."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.export.gate_parity import GATE_CASES, fox_weights, gate_fixtures, stick_breaking_weights


@given(size=st.integers(1, 12), gate=st.floats(0.05, 1.0), score=st.floats(-5, 5))
def test_fox_with_one_gate_and_one_score_decays_geometrically(size, gate, score):
    weights = fox_weights([[score] * size for _ in range(size)], [gate] * size)
    for i, row in enumerate(weights):
        total = sum(gate**m for m in range(i + 1))
        expected = [gate ** (i - j) / total for j in range(i + 1)] + [0.0] * (size - i - 1)
        assert row == pytest.approx(expected, rel=1e-9, abs=1e-12)


@given(scores=st.lists(st.floats(-6, 6), min_size=4, max_size=4))
def test_fox_with_gates_of_one_is_causal_softmax(scores):
    z = [scores] * 4
    weights = fox_weights(z, [1.0] * 4)
    last = [math.exp(v) / sum(math.exp(u) for u in scores) for v in scores]
    assert weights[3] == pytest.approx(last, rel=1e-9)
    assert weights[0] == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_a_token_that_forgets_hides_the_keys_before_it():
    weights = fox_weights([[0.0] * 5 for _ in range(5)], [1.0, 1.0, 1e-6, 1.0, 1.0])
    assert sum(weights[4][:2]) < 1e-5 and weights[4][2:] == pytest.approx([1 / 3] * 3, rel=1e-5)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        fox_weights([[0.0]], [0.0])


@given(size=st.integers(1, 12), score=st.floats(-5, 5))
def test_stick_breaking_with_one_score_is_geometric_from_the_query_back(size, score):
    s = 1 / (1 + math.exp(-score))
    weights = stick_breaking_weights([[score] * size for _ in range(size)])
    for i, row in enumerate(weights):
        expected = [s * (1 - s) ** (i - 1 - j) for j in range(i)] + [(1 - s) ** i] + [0.0] * (size - i - 1)
        assert row == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert sum(row) == pytest.approx(1.0, abs=1e-9)  # the rest of the stick is the query's own


def test_the_nearest_sure_key_takes_the_whole_stick():
    z = [[0.0, 0.0, 0.0, 0.0] for _ in range(4)]
    z[3] = [50.0, -50.0, 50.0, 0.0]  # key 2 is sure (sigmoid 1) and nearer than key 0
    assert stick_breaking_weights(z)[3] == pytest.approx([0.0, 0.0, 1.0, 0.0], abs=1e-12)


def test_fixture_cases_are_the_listed_ones():
    cases = gate_fixtures()
    assert [c["pattern"] for c in cases] == [p for _, _, p in GATE_CASES]
    assert all(
        len(c["fox_weights"]) == len(c["stick_breaking_weights"]) == len(c["gates"]) == len(c["scores"]) for c in cases
    )
    assert min(cases[2]["gates"]) == 0.01 and cases[1]["gates"] == [1.0] * 5


def test_the_models_fox_and_stick_breaking_give_the_formulas_weights():
    """octlm.model.positions.recency (the schemes a model trains with) against this term-by-term reference."""
    import torch

    from octlm.model.positions.recency import forget_bias
    from octlm.model.positions.recency import stick_breaking_weights as model_stick_breaking

    g = torch.Generator().manual_seed(7)
    size, dim = 9, 4
    q, k = torch.randn(1, 1, size, dim, generator=g) * 2, torch.randn(1, 1, size, dim, generator=g) * 2
    scores = (q @ k.transpose(-2, -1))[0, 0] / dim**0.5
    gates = torch.rand(size, generator=g) * 0.9 + 0.05
    causal = torch.ones(size, size, dtype=torch.bool).tril()
    logits = (scores + forget_bias(gates.log()[None, None], size, size)[0, 0]).masked_fill(~causal, -1e30)
    z = scores.double().tolist()
    fox = torch.tensor(fox_weights(z, gates.double().tolist()), dtype=torch.float64)
    assert torch.allclose(logits.softmax(-1).double(), fox, atol=1e-5)
    stick = torch.tensor(stick_breaking_weights(z), dtype=torch.float64)
    assert torch.allclose(model_stick_breaking(q, k, causal)[0, 0].double(), stick, atol=1e-5)
