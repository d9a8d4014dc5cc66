"""The page's reference for playground 11 (octlm.export.first_layer_parity) against the modules a model trains with:
the bigram rows against ``octlm.model.value_embeddings.bigram_index`` and the decoder's first layer, the value gate
and its added rows against ``ValueEmbedding``, the Canon output against ``octlm.model.canon.CanonConv``; so the page
(held to the reference by web/test/firstLayer.test.ts), the reference and the model agree."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.export.first_layer_parity import (
    BIGRAM_CASES,
    BIGRAM_MULTIPLIER,
    CANON_CASES,
    CANON_TAPS,
    VALUE_CASES,
    VALUE_GATE_CHANNELS,
    add_value_rows,
    bigram_rows_read,
    canon,
    first_layer_fixtures,
    value_gates,
)
from octlm.model import canon as canon_module
from octlm.model import value_embeddings
from octlm.model.canon import CanonConv
from octlm.model.value_embeddings import ValueEmbedding, bigram_index

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def test_the_references_constants_are_the_models():
    assert BIGRAM_MULTIPLIER == value_embeddings.BIGRAM_PRIME
    assert VALUE_GATE_CHANNELS == value_embeddings.GATE_WIDTH
    assert CANON_TAPS == canon_module.CANON_KERNEL


def _model_rows(ids: list[int], rows: int, before: int | None) -> list[int]:
    start = None if before is None else torch.tensor([[before]])
    return bigram_index(torch.tensor([ids]), start, rows)[0].tolist()


@pytest.mark.parametrize("case", BIGRAM_CASES, ids=lambda c: f"{len(c[0])} ids, {c[1]} rows")
def test_the_fixtures_bigram_rows_are_the_models(case):
    ids, rows, before = case
    assert bigram_rows_read(ids, rows, before) == _model_rows(ids, rows, before)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 200_000), min_size=1, max_size=12),
    st.integers(2, 1_000_000),
    st.none() | st.integers(0, 200_000),
)
def test_bigram_rows_match_the_model_for_any_vocabulary(ids, rows, before):
    assert bigram_rows_read(ids, rows, before) == _model_rows(ids, rows, before)


def test_only_the_first_token_reads_the_reserved_row():
    read = bigram_rows_read(list(range(50)) * 3, 7)
    assert read[0] == 6 and all(0 <= r < 6 for r in read[1:])
    assert bigram_rows_read([4, 2, 5], 7, before=1)[0] != 6  # a cache's last token is a previous token
    with pytest.raises(ValueError, match="2 rows"):
        bigram_rows_read([1], 1)


def test_the_decoders_first_layer_adds_the_bigram_row_the_reference_reads():
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=40, context_length=12, d_model=8, n_heads=2, n_layers=1, dropout=0.0,
                           position="none", bigram_rows=23)  # fmt: skip
    model = Decoder(config).eval()
    ids = torch.randint(0, 40, (3, 10))
    with torch.no_grad():
        model.bigram.table.normal_()
        expected = (
            model.token_embedding.weight[ids]
            + model.bigram.table[torch.tensor([bigram_rows_read(row, 23) for row in ids.tolist()])]
        )
        torch.testing.assert_close(model._embed(ids), expected)


def _value_module(table: list[list[float]], weights: list[list[float]]) -> ValueEmbedding:
    vocab, width = len(table), len(table[0])
    module = ValueEmbedding(vocab, width, len(weights)).double()
    with torch.no_grad():
        module.table.copy_(torch.tensor(table, dtype=torch.float64))
        module.gate.copy_(torch.tensor(weights, dtype=torch.float64))
    return module


def _as_heads(rows: list[list[float]], heads: int) -> torch.Tensor:
    """[T, C] -> the module's values [1, H, T, D]."""
    t = torch.tensor(rows, dtype=torch.float64)
    return t.view(1, t.shape[0], heads, -1).transpose(1, 2)


@pytest.mark.parametrize("case", range(len(VALUE_CASES)))
def test_the_value_rows_and_gates_are_the_models(case):
    c = first_layer_fixtures()["value"][case]
    heads = len(c["gate_weights"])
    module = _value_module(c["table"], c["gate_weights"])
    x = torch.tensor([c["inputs"]], dtype=torch.float64)
    ids = torch.tensor([c["ids"]])
    got = module(_as_heads(c["values"], heads), x, ids)
    torch.testing.assert_close(got, _as_heads(c["out"], heads), rtol=0, atol=1e-12)
    # With zero values and a table of ones, the module's output on every channel of a head is that head's gate.
    ones = _value_module([[1.0] * len(c["table"][0])] * len(c["table"]), c["gate_weights"])
    gated = ones(torch.zeros_like(_as_heads(c["values"], heads)), x, ids)[0, :, :, 0].T
    torch.testing.assert_close(gated, torch.tensor(c["gates"], dtype=torch.float64), rtol=0, atol=1e-12)


def test_every_gate_starts_at_one_and_reads_only_the_first_32_channels():
    inputs = [[float(i % 5) for i in range(40)]]
    assert value_gates(inputs, [[0.0] * 32, [0.0] * 32]) == [[1.0, 1.0]]
    changed = [inputs[0][:32] + [99.0] * 8]
    weights = [[0.1 * i for i in range(32)]]
    assert value_gates(changed, weights) == value_gates(inputs, weights)
    with pytest.raises(ValueError, match="32 channels"):
        value_gates(inputs, [[0.0] * 40])
    assert add_value_rows([[1.0, 2.0]], [[0.0, 0.0]], [[5.0, 7.0]], [[0.0, 0.0]], [0]) == [[6.0, 9.0]]


def _canon_module(kernel: list[list[float]]) -> CanonConv:
    layer = CanonConv(len(kernel), "A").double()
    with torch.no_grad():
        for c, taps in enumerate(kernel):
            for back, w in enumerate(taps):  # the module's last tap is the token itself
                layer.weight[c, 0, CANON_TAPS - 1 - back] = w
    return layer


@pytest.mark.parametrize("case", range(len(CANON_CASES)))
def test_the_fixtures_canon_output_is_the_modules(case):
    c = first_layer_fixtures()["canon"][case]
    got = _canon_module(c["kernel"])(torch.tensor([c["hidden"]], dtype=torch.float64))[0]
    torch.testing.assert_close(got, torch.tensor(c["out"], dtype=torch.float64), rtol=0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 10), st.integers(1, 5), st.integers(0, 2**16))
def test_canon_matches_the_module_on_random_weights(length, width, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(length, width, generator=g, dtype=torch.float64).tolist()
    kernel = (torch.rand(width, CANON_TAPS, generator=g, dtype=torch.float64) * 2 - 1).tolist()
    got = _canon_module(kernel)(torch.tensor([hidden], dtype=torch.float64))[0]
    torch.testing.assert_close(got, torch.tensor(canon(hidden, kernel), dtype=torch.float64), rtol=0, atol=1e-12)


def test_canon_gives_a_token_the_order_of_its_neighbours():
    """The same row at two positions comes out different when the rows before it differ, and the same when the three
    before it are the same; a zero kernel leaves every row as it was."""
    a, b, c, d = [1.0, 0.0], [0.0, 1.0], [2.0, -1.0], [0.5, 0.5]
    kernel = [[0.0, 1.0, 0.5, 0.25]] * 2
    out = canon([a, b, c, d, b, a, b, c, d], kernel)
    assert out[1] != out[4] and out[1] != out[6] and out[4] != out[6]  # b after (nothing) a, after b c d, after d b a
    assert out[3] == out[8]  # d after a b c at both: the kernel sees three tokens back and no further
    assert canon([a, b, c], [[0.0] * 4] * 2) == [a, b, c]


def test_the_fixtures_cover_what_the_page_meets():
    fixtures = first_layer_fixtures()
    assert any(c["before"] is not None for c in fixtures["bigram"]), "a cache's last token"
    assert any(max(c["ids"]) * BIGRAM_MULTIPLIER > 2**53 for c in fixtures["bigram"]), "products past float64"
    assert any(max(c["ids"]) >= 50256 for c in fixtures["bigram"]), "ids up to GPT-2's vocabulary"
    assert any(len(c["table"][0]) > VALUE_GATE_CHANNELS for c in fixtures["value"]), "a gate reading part of a row"
    assert any(c["pattern"] == "zero" for c in fixtures["canon"]) and any(
        len(c["hidden"]) < CANON_TAPS for c in fixtures["canon"]
    ), "a zero kernel and a sequence shorter than the kernel"
