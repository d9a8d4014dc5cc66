"""bench/window_cache.py: its JSON has one row per layout and length, and the cache bytes follow from the shapes.

Cache sizes are deterministic, so they are checked against the formula
``rows x batch x d_model x 2 (keys and values) x 4 bytes (float32)`` per layer,
where a global layer's buffer has prompt + N rows (``generate``'s capacity)
and a window layer keeps W - 1. Times are only checked to be there: they
belong to the bench's own output, never to a test.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO

D_MODEL, T, BATCH = 16, 8, 1
TINY = ["--vocab-size", "64", "--context-length", str(T), "--d-model", str(D_MODEL), "--n-heads", "2"]
TINY += ["--n-layers", "2", "--repeats", "1", "--threads", "1", "--span", "4", "--multiples", "1", "3"]
LAYOUTS = ["rope*2", "rope/w4*2", "rope/w4 none"]
ROW_BYTES = BATCH * D_MODEL * 2 * 4  # one token's key and value in one layer, float32


def _bench():
    spec = importlib.util.spec_from_file_location("window_cache_bench", REPO / "bench" / "window_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result() -> dict:
    return json.loads(json.dumps(_bench().run([*TINY, "--layouts", *LAYOUTS])))  # what the script prints


def rows(result: dict) -> dict:
    return {(row["layout"], row["new_tokens"]): row for row in result["results"]}


def test_one_row_per_layout_and_length_with_every_field(result):
    assert result["benchmark"] == "window_cache" and result["baseline"] == "rope*2"
    assert result["threads"] == 1 and result["repeats"] == 1
    assert set(rows(result)) == {(layout, n) for layout in LAYOUTS for n in (T, 3 * T)}
    for row in result["results"]:
        assert len(row["layers"]) == len(row["held_tokens"]) == 2
        for field in ("ms_per_token", "cpu_ms_per_token", "step_ms", "cpu_step_ms", "cache_bytes"):
            assert isinstance(row[field], (int, float)) and f"{field}_ratio" in row  # present; its value is the bench's


def test_an_all_window_models_cache_does_not_grow_with_length(result):
    by = rows(result)
    short, long = by["rope/w4*2", T], by["rope/w4*2", 3 * T]
    assert short["cache_bytes"] == long["cache_bytes"] == 2 * (4 - 1) * ROW_BYTES
    assert short["held_tokens"] == long["held_tokens"] == [3, 3]


@pytest.mark.parametrize("n", [T, 3 * T])
def test_global_and_hybrid_caches_follow_the_formula_and_their_ratio(result, n):
    by = rows(result)
    full = 2 * (1 + n) * ROW_BYTES  # two global layers, each allocated for the prompt + n tokens
    assert by["rope*2", n]["cache_bytes"] == full and by["rope*2", n]["held_tokens"] == [n, n]
    assert by["rope/w4 none", n]["cache_bytes"] == (3 + 1 + n) * ROW_BYTES
    assert by["rope/w4 none", n]["held_tokens"] == [3, n]
    assert by["rope*2", n]["cache_bytes_ratio"] == 1.0 and by["rope*2", n]["ms_per_token_ratio"] == 1.0
    assert by["rope/w4*2", n]["cache_bytes_ratio"] == pytest.approx(2 * 3 * ROW_BYTES / full, abs=1e-4)


def test_the_layer_descriptions_name_the_windows(result):
    assert rows(result)["rope/w4 none", T]["layers"] == ["rope, window 4", "none, global"]
    assert rows(result)["rope*2", T]["layers"] == ["rope, global", "rope, global"]
