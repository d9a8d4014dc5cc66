"""Forgetting attention's and stick-breaking attention's weights, from the papers' formulas, for the page's playground.

The page's playground 10 (``web/src/gates.ts``) computes both in TypeScript, in log space; this module writes the same
weights out term by term, a loop per sum and per product, so that the fixture checks the page (and, later, a model's
implementation of either scheme) against the formula rather than against another implementation.

* **FoX** (Lin et al. 2025, *Forgetting Transformer*, §2): every token ``l`` has a forget gate ``f_l`` in (0, 1]
  (``sigmoid(w . x_l + b)`` in a model; given directly here). Query ``i`` attends to keys ``j <= i`` with
  ``softmax_j(z_ij + D_ij)``, ``D_ij = sum_{l=j+1..i} log f_l``: a key loses ``log f_l`` for every token after it.
* **Stick-breaking** (Tan et al. 2025, *Scaling Stick-Breaking Attention*, §2): query ``i`` walks back over the tokens
  before it, nearest first, breaking off ``beta_ij = sigmoid(z_ij)`` of what remains of a unit stick:
  ``A_ij = beta_ij * prod_{j<k<i} (1 - beta_ik)`` for ``j < i``. No softmax and no position signal: nearer keys are
  served first. What no earlier key took, ``prod_{j<i} (1 - beta_ij)``, goes to the query's own token, as the
  authors' code adds it to the output, so a row sums to 1 (row 0 is the first token attending to itself alone).
"""

from __future__ import annotations

import math

import torch

from octlm.model.positions.parity import float_lists


def fox_weights(scores: list[list[float]], gates: list[float]) -> list[list[float]]:
    """FoX's attention weights, [T, T] (query i, key j; 0 above the diagonal), from ``scores`` z [T, T] (any value
    above the diagonal is ignored) and forget gates ``gates`` [T] in (0, 1].

    Raises:
        ValueError: when a gate is not in (0, 1] (its log is the bias).
    """
    if any(not 0.0 < f <= 1.0 for f in gates):
        raise ValueError(f"forget gates must lie in (0, 1], got {gates}")
    size = len(gates)
    weights = []
    for i in range(size):
        logits = []
        for j in range(i + 1):
            decay = 0.0
            for l in range(j + 1, i + 1):  # noqa: E741 (l is the paper's index)
                decay += math.log(gates[l])
            logits.append(scores[i][j] + decay)
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        total = sum(exps)
        weights.append([e / total for e in exps] + [0.0] * (size - i - 1))
    return weights


def stick_breaking_weights(scores: list[list[float]]) -> list[list[float]]:
    """Stick-breaking attention weights, [T, T] (query i, key j; 0 above the diagonal), from ``scores`` z [T, T]:
    keys ``j < i`` as the paper's sum, the rest of the stick on the diagonal (the query's own token)."""
    size = len(scores)
    weights = []
    for i in range(size):
        row = [0.0] * size
        for j in range(i):
            left = 1.0
            for k in range(j + 1, i):  # the keys nearer to i than j break first
                left *= 1.0 - _sigmoid(scores[i][k])
            row[j] = _sigmoid(scores[i][j]) * left
        rest = 1.0
        for j in range(i):  # every earlier key broke its share
            rest *= 1.0 - _sigmoid(scores[i][j])
        row[i] = rest
        weights.append(row)
    return weights


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


#: (length, seed, gate pattern): random scores with gates drawn in (0.5, 1), gates all 1 (FoX is then plain softmax),
#: one token that forgets almost everything (gate 0.01) mid-sequence, and scores large enough that sigmoid saturates.
GATE_CASES = [(6, 0, "random"), (5, 1, "ones"), (9, 2, "reset"), (7, 3, "saturated"), (1, 4, "random")]


def gate_fixtures() -> list[dict]:
    """The playground's cases: scores and gates with FoX's and stick-breaking's weights, JSON-ready."""
    cases = []
    for length, seed, pattern in GATE_CASES:
        g = torch.Generator().manual_seed(seed)
        scores = torch.randn(length, length, generator=g, dtype=torch.float64) * 2
        gates = 0.5 + 0.5 * torch.rand(length, generator=g, dtype=torch.float64)
        if pattern == "ones":
            gates = torch.ones(length, dtype=torch.float64)
        elif pattern == "reset":
            gates[length // 2] = 0.01
        elif pattern == "saturated":
            scores = scores * 20
        z, f = float_lists(scores), float_lists(gates)
        cases.append(
            {
                "pattern": pattern,
                "scores": z,
                "gates": f,
                "fox_weights": fox_weights(z, f),
                "stick_breaking_weights": stick_breaking_weights(z),
            }
        )
    return cases
