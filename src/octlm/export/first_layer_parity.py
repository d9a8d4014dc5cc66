"""The first layer's other half, from the formulas, for the page's playground 11.

The page (``web/src/firstLayer.ts``) computes three things beside the plain token table; this module writes each out
term by term, in plain Python numbers, without calling octlm's modules, so that the fixture checks the page against
the formulas and ``tests/test_first_layer_parity.py`` checks the formulas against the modules a model trains with
(:mod:`octlm.model.value_embeddings`, :mod:`octlm.model.canon`):

* **The hashed bigram row** (Huang et al. 2025, "Over-Tokenized Transformer", arXiv 2501.16975: n-gram input tables
  hashed into a fixed number of rows): token ``t`` reads row ``(x_{t-1} * 1000003 + x_t) mod (N - 1)`` of an ``N``-row
  table; a token with no previous one reads row ``N - 1``, which no pair hashes to.
* **The value embedding** (Zhou et al. 2024, "Value Residual Learning", arXiv 2410.17897, in its token-table form):
  head ``h`` of token ``t`` adds ``g_t,h * E[x_t]_h`` to its values, ``g_t,h = 2 sigmoid(w_h . u_t[:k])`` with
  ``u_t`` the layer's input and ``k = min(32, C)``.
* **The Canon layer** (Allen-Zhu 2025, "Physics of Language Models: Part 4.1", arXiv 2512.17351): per channel
  ``c``, ``h'_t = h_t + sum_{j=0}^{K-1} w_{c,j} h_{t-j}`` with ``K = 4`` and nothing before the sequence.
"""

from __future__ import annotations

import math

import torch

from octlm.model.positions.parity import float_lists

#: The multiplier of the previous token in octlm's bigram hash (a prime larger than any vocabulary).
BIGRAM_MULTIPLIER = 1_000_003
#: How many of the layer input's first channels the value gate reads.
VALUE_GATE_CHANNELS = 32
#: Tokens a Canon layer mixes: the current one and three before it.
CANON_TAPS = 4


def bigram_rows_read(ids: list[int], rows: int, before: int | None = None) -> list[int]:
    """The bigram table's row read by each token, [T] ints in ``0 .. rows - 1``, from token ids [T] and the table's
    ``rows`` (at least 2). ``before`` is the token before ``ids[0]`` (a cache's last token), ``None`` at the start.

    Python's integers are exact at any size, which is what the page must match with BigInt.
    """
    if rows < 2:
        raise ValueError(f"a bigram table needs 2 rows or more, got {rows}")
    read = []
    for t, current in enumerate(ids):
        previous = before if t == 0 else ids[t - 1]
        if previous is None:
            read.append(rows - 1)  # the reserved row: nothing came before this token
        else:
            read.append((previous * BIGRAM_MULTIPLIER + current) % (rows - 1))
    return read


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def value_gates(inputs: list[list[float]], weights: list[list[float]]) -> list[list[float]]:
    """Each token's gate per head, [T, H]: ``2 sigmoid(sum_i weights[h][i] * inputs[t][i])`` over the first
    ``k = min(32, C)`` channels, from the layer's inputs [T, C] and the gate weights [H, k]."""
    width = min(VALUE_GATE_CHANNELS, len(inputs[0]))
    if any(len(w) != width for w in weights):
        raise ValueError(f"the gate reads {width} channels; every head's weights must have that many")
    gates = []
    for u in inputs:
        gates.append([2.0 * _sigmoid(sum(w[i] * u[i] for i in range(width))) for w in weights])
    return gates


def add_value_rows(
    values: list[list[float]],
    inputs: list[list[float]],
    table: list[list[float]],
    weights: list[list[float]],
    ids: list[int],
) -> list[list[float]]:
    """The values after the value embedding, [T, C]: values [T, C] (head ``h`` holds channels ``h*D .. h*D + D - 1``,
    ``D = C / H``) plus each head's gate times that head's slice of the table's row [V, C] for the token."""
    heads = len(weights)
    size = len(values[0]) // heads
    gates = value_gates(inputs, weights)
    out = []
    for t, token in enumerate(ids):
        row = []
        for c in range(heads * size):
            head = c // size  # the table's row is cut into the heads as the values are
            row.append(values[t][c] + gates[t][head] * table[token][c])
        out.append(row)
    return out


def canon(hidden: list[list[float]], kernel: list[list[float]]) -> list[list[float]]:
    """A Canon layer's output, [T, W], from the hidden rows [T, W] and the kernel [W, K]: ``kernel[c][j]`` weighs
    channel ``c`` of the token ``j`` places back (``j = 0`` the token itself); tokens before the first are zeros."""
    out = []
    for t, row in enumerate(hidden):
        mixed = []
        for c, own in enumerate(row):
            total = own  # the residual
            for j, w in enumerate(kernel[c]):
                if t - j >= 0:
                    total += w * hidden[t - j][c]
            mixed.append(total)
        out.append(mixed)
    return out


#: (ids, rows, before): the page's sentence, ids up to GPT-2's vocabulary with 5 x its rows, a cache's last token,
#: repeated bigrams that must share a row, and ids whose product with the multiplier passes 2^53 (float64 would round).
BIGRAM_CASES = [
    ([0, 1, 2, 3, 0, 4], 40, None),
    ([50256, 0, 50255, 198, 50256, 50256, 13], 5 * 50257, None),
    ([7, 7, 7, 3], 2, None),
    ([3, 9, 3, 9, 3, 9], 17, 9),
    ([200_018, 199_999, 1], 1_000_000, 100_276),
    ([12_345_678_901, 9_876_543_210, 4_503_599_627], 987_654_323, 10_000_000_019),
]

#: (tokens, vocab, width C, heads H, seed): the page's shape (k = C = 6) and a wide one whose gate reads 32 of 48.
VALUE_CASES = [(6, 8, 6, 2, 0), (5, 11, 48, 4, 1), (1, 3, 4, 1, 2)]

#: (tokens, width, seed, kernel): random kernels, zero (the residual alone), and a sequence shorter than the kernel.
CANON_CASES = [(7, 3, 0, "random"), (5, 4, 1, "zero"), (2, 2, 2, "random"), (9, 6, 3, "random")]


def _cases_of_values() -> list[dict]:
    cases = []
    for length, vocab, width, heads, seed in VALUE_CASES:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        inputs, values = torch.randn(length, width, generator=g), torch.randn(length, width, generator=g)
        table = torch.randn(vocab, width, generator=g)
        weights = torch.randn(heads, min(VALUE_GATE_CHANNELS, width), generator=g) * 0.5
        u, v, e, w = float_lists(inputs), float_lists(values), float_lists(table), float_lists(weights)
        cases.append(
            {
                "ids": ids,
                "inputs": u,
                "values": v,
                "table": e,
                "gate_weights": w,
                "gates": value_gates(u, w),
                "out": add_value_rows(v, u, e, w, ids),
            }
        )
    return cases


def first_layer_fixtures() -> dict:
    """Playground 11's cases, JSON-ready: ``bigram`` (ids, rows, before, the rows read), ``value`` (inputs, values,
    table, gate weights, ids; the gates and the values after) and ``canon`` (hidden rows, kernel; the output)."""
    canon_cases = []
    for length, width, seed, pattern in CANON_CASES:
        g = torch.Generator().manual_seed(seed)
        hidden = float_lists(torch.randn(length, width, generator=g))
        kernel = float_lists(torch.rand(width, CANON_TAPS, generator=g) * 2 - 1)
        if pattern == "zero":
            kernel = [[0.0] * CANON_TAPS for _ in range(width)]
        canon_cases.append({"pattern": pattern, "hidden": hidden, "kernel": kernel, "out": canon(hidden, kernel)})
    return {
        "bigram": [
            {"ids": ids, "rows": rows, "before": before, "read": bigram_rows_read(ids, rows, before)}
            for ids, rows, before in BIGRAM_CASES
        ],
        "value": _cases_of_values(),
        "canon": canon_cases,
    }
