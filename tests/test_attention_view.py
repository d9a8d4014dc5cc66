"""The page's attention maps: pooling, quantising, one pass serving several lengths, and a run's view.

Pooled maps are checked against a loop over cells; the maps and statistics
of every length are checked against a separate forward pass at that length
(:func:`octlm.inspect.attention.record` and ``attention_statistics``), for
every scheme in the registry, so the shortcut that serves shorter lengths
from one longer pass is held to what a pass of that length records.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.inspect import attention_view
from octlm.inspect.attention import record
from octlm.inspect.attention_statistics import attention_statistics
from octlm.inspect.attention_view import (
    MAP_SIDE,
    MIN_SIDE,
    attention_views,
    block_size,
    map_side,
    pool_attention,
    quantise_map,
    run_attention,
)
from octlm.inspect.frequencies import frequency_usage
from octlm.model.positions import SCHEMES


def pooled_by_loop(p: np.ndarray, k: int) -> np.ndarray:
    """Cell (r, c): the keys of block c summed, the queries of block r averaged; blocks of k positions, the last cut at
    T."""
    T = p.shape[-1]
    n = math.ceil(T / k)
    out = np.zeros(p.shape[:-2] + (n, n))
    for r in range(n):
        queries = range(r * k, min(T, (r + 1) * k))
        for c in range(n):
            keys = range(c * k, min(T, (c + 1) * k))
            out[..., r, c] = sum(p[..., i, j] for i in queries for j in keys) / len(queries)
    return out


def causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    T = scores.shape[-1]
    return torch.softmax(scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), dim=-1)


@given(T=st.integers(1, 40), side=st.integers(1, 12), seed=st.integers(0, 1000))
def test_pooling_sums_keys_and_averages_queries(T, side, seed):
    p = causal_softmax(torch.randn(2, T, T, generator=torch.Generator().manual_seed(seed)) * 3)
    pooled = pool_attention(p, side)
    k = block_size(T, side)
    assert pooled.shape[-1] == math.ceil(T / k) <= max(side, 1)
    np.testing.assert_allclose(pooled.numpy(), pooled_by_loop(p.double().numpy(), k), atol=1e-5)
    np.testing.assert_allclose(pooled.sum(dim=-1).numpy(), 1.0, atol=1e-5)  # still a distribution over key blocks
    assert torch.all(pooled.triu(1) == 0)  # no query block attends to a later key block


def test_a_map_that_fits_is_not_pooled():
    p = causal_softmax(torch.randn(3, MAP_SIDE, MAP_SIDE))
    assert pool_attention(p) is p
    assert block_size(MAP_SIDE) == 1 and block_size(MAP_SIDE + 1) == 2 and block_size(2048) == 16


def test_pooling_refuses_a_map_that_is_not_square():
    with pytest.raises(ValueError, match="square maps"):
        pool_attention(torch.zeros(4, 3))


@given(n=st.integers(1, 10), seed=st.integers(0, 1000))
def test_quantised_cells_are_the_lower_triangle_on_the_square_root_scale(n, seed):
    p = causal_softmax(torch.randn(2, 3, n, n, generator=torch.Generator().manual_seed(seed)) * 4)
    raw = np.frombuffer(quantise_map(p), dtype=np.uint8)
    assert raw.size == 2 * 3 * n * (n + 1) // 2
    expected = [
        p[layer, h, r, c].item() for layer in range(2) for h in range(3) for r in range(n) for c in range(r + 1)
    ]
    # round(255 sqrt(p)) is within half a step of 255 sqrt(p): p comes back within sqrt(p) / 255 + (1 / 510)^2.
    assert np.all(np.abs(raw / 255 - np.sqrt(expected)) <= 0.5 / 255 + 1e-7)


def unpacked(view: dict, layers: int, heads: int) -> np.ndarray:
    """A view's maps as [layer, head, side, side] probabilities, as the page reads them."""
    n = view["side"]
    raw = np.frombuffer(base64.b64decode(view["maps"]), dtype=np.uint8).reshape(layers, heads, -1)
    out = np.zeros((layers, heads, n, n))
    rows, cols = np.tril_indices(n)
    out[:, :, rows, cols] = (raw / 255.0) ** 2
    return out


def small_model(position: str, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    model = Decoder(
        DecoderConfig(vocab_size=50, context_length=16, d_model=16, n_heads=2, n_layers=2, position=position)
    )
    with torch.no_grad():  # wider than octlm's init, so attention is far from uniform and a wrong slice shows
        for name, parameter in model.named_parameters():
            if ".ln_" not in name and not name.startswith("ln_"):
                parameter.normal_(0.0, 0.5)
    return model.eval()


def check_against_separate_passes(model: Decoder, ids: list[int], lengths: list[int], side: int = 8) -> None:
    """Short lengths, still pooled past ``side``."""
    views = attention_views(model, ids, lengths, side=side)
    for length in lengths:
        maps = record(model, ids[:length], torch.device("cpu"))
        stats = attention_statistics(maps.probabilities, maps.logits)
        expected = np.stack([pool_attention(p[0], side).numpy() for p in maps.probabilities])
        got = unpacked(views[length], 2, 2)
        assert np.all(np.abs(np.sqrt(got) - np.sqrt(expected)) <= 0.5 / 255 + 1e-5), (model.config.position, length)
        shown = views[length]["statistics"]
        for name in ("mean_entropy", "mean_distance", "sink_mass", "max_logit"):
            np.testing.assert_allclose(
                shown[name], getattr(stats, name).numpy(), atol=2e-4, err_msg=f"{name} at {length}"
            )
        per_query = stats.entropy.numpy()
        k = views[length]["block"]
        np.testing.assert_allclose(
            shown["entropy"],
            [
                [
                    [per_query[layer, h, i * k : (i + 1) * k].mean() for i in range(views[length]["side"])]
                    for h in range(2)
                ]
                for layer in range(2)
            ],
            atol=2e-4,
        )
        uniform = np.log(np.arange(1, length + 1))
        np.testing.assert_allclose(
            shown["uniform_entropy"],
            [uniform[i * k : (i + 1) * k].mean() for i in range(views[length]["side"])],
            atol=2e-4,
        )
        check_frequencies(views[length].get("frequencies", []), frequency_usage(maps, model), length)


def check_frequencies(shown: list[dict], expected: list[dict], length: int) -> None:
    """The page's frequency probe against :func:`frequency_usage` of a separate pass, to its 4 significant digits."""
    assert [u["layer"] for u in shown] == [u["layer"] for u in expected], length
    for got, want in zip(shown, expected, strict=True):
        for name in ("frequency", "query_norm", "key_norm", "slowest_quarter", "fastest_quarter"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-9, err_msg=f"{name} at {length}")


@pytest.mark.parametrize("position", list(SCHEMES))
def test_each_length_is_what_a_pass_of_that_length_records(position):
    model = small_model(position)
    ids = torch.randint(0, 50, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    check_against_separate_passes(model, ids, [5, 8, 16])


def test_a_length_dependent_scaling_gets_a_pass_per_length():
    # Dynamic NTK's frequencies change with the sequence's length: the first 8 tokens of a 16-token
    # pass are not what an 8-token pass sees, so the shortcut must not be taken there.
    scaled = next(name for name, cls in SCHEMES.items() if "dynamic-ntk" in cls.scalings())
    model = small_model(scaled)
    model.set_rope_scaling("dynamic-ntk", 1.0)
    ids = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    check_against_separate_passes(model, ids, [16, 32, 40])


def test_run_view_shows_its_lengths_and_says_why_one_is_missing(trained_run):
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run

    model, tokenizer = load_run(trained_run)
    val = RunFolder(trained_run).tokens("val")
    view = run_attention(model, val, tokenizer)
    T = model.config.context_length
    assert [entry["length"] for entry in view["lengths"]] == [T, 2 * T, 4 * T] and view["train_length"] == T
    first, *past = view["lengths"]
    assert "note" not in first and first["side"] == T and first["block"] == 1
    for entry in past:  # a learned table: no rows past T, nothing recorded there
        assert "maps" not in entry and f"has {T} rows" in entry["note"] and f"no position {T}" in entry["note"]
    assert view["tokens"] == [tokenizer.token_str(int(i)) for i in val[:MAP_SIDE]]


def test_maps_past_the_memory_budget_are_left_out_with_a_note(monkeypatch):
    model = small_model(next(name for name, cls in SCHEMES.items() if cls.scalings()))
    monkeypatch.setattr(attention_view, "MAP_BUDGET_BYTES", attention_view.map_bytes(model, 20))
    view = run_attention(model, np.arange(100) % 50, type("Tokens", (), {"token_str": staticmethod(str)}))
    notes = {entry["length"]: entry.get("note") for entry in view["lengths"]}
    assert notes[16] is None and "would take" in notes[32] and "octlm attention --length 32" in notes[32]


@given(sets=st.integers(1, 400), maps=st.integers(1, 256), budget=st.integers(1, 50_000_000))
def test_map_side_is_the_largest_that_fits_the_page(sets, maps, budget):
    side = map_side(sets, maps, budget)
    assert MIN_SIDE <= side <= MAP_SIDE
    fits = lambda n: sets * maps * n * (n + 1) // 2 <= budget  # noqa: E731
    assert fits(side) or side == MIN_SIDE
    assert side == MAP_SIDE or not fits(side + 1)


def test_a_default_study_keeps_full_maps():
    # 16 models x 5 lengths, 2 layers x 4 heads: octlm length's defaults.
    assert map_side(16 * 5, 2 * 4) == MAP_SIDE
    assert map_side(16 * 5, 6 * 8) < MAP_SIDE


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory, small_corpus):
    """A tiny RoPE run of two layers (3 steps, context 16): the page's frequency probe needs turned pairs."""
    from octlm.cli import main
    from tests.conftest import flags

    out = tmp_path_factory.mktemp("runs") / "rope"
    shape = flags(vocab_size=280, context_length=16, d_model=32, n_heads=2, n_layers=2, batch_size=4, max_steps=3)
    args = ["train", "--text", str(small_corpus), "--out", str(out), "--position", "rope", *shape, "--threads", "1"]
    assert main([*args, "--sample-tokens", "0", "--quiet"]) == 0
    return out


def test_the_page_gets_the_frequency_probe_of_each_length(rope_run):
    """What the page receives for a RoPE run (``octlm serve --run``'s data) carries, at each of T, 2T and 4T, the
    frequency usage ``octlm attention --length L`` computes: :func:`frequency_usage` of a separate pass over the first L
    validation tokens, to 4 significant digits."""
    from octlm.export.web import page_view
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run

    lengths = page_view(str(rope_run), None)["attention"]["lengths"]
    model, _ = load_run(rope_run, "cpu")
    val = [int(i) for i in RunFolder(rope_run).tokens("val")]
    assert [entry["length"] for entry in lengths] == [16, 32, 64]
    for entry in lengths:
        expected = frequency_usage(record(model, val[: entry["length"]], torch.device("cpu")), model)
        shown = entry["frequencies"]
        assert [u["layer"] for u in shown] == [0, 1]
        check_frequencies(shown, expected, entry["length"])
        for got in shown:
            assert np.shape(got["query_norm"]) == (2, 8) and np.shape(got["slowest_quarter"]) == (2,)
            # small: no number keeps more than 4 significant digits
            numbers = np.ravel([got["frequency"], *got["query_norm"], *got["key_norm"]])
            assert all(float(f"{v:.4g}") == v for v in numbers)


def test_a_model_without_rope_gets_no_frequency_probe(trained_run):
    from octlm.export.web import page_view

    lengths = page_view(str(trained_run), None)["attention"]["lengths"]
    assert any("maps" in entry for entry in lengths)
    assert not any("frequencies" in entry for entry in lengths)
