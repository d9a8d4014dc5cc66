"""bench/throughput.py: its --quick run prints the promised JSON, and a failing torch.compile is recorded, not raised."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import torch

from octlm.model import Decoder, DecoderConfig
from octlm.positions import SCHEMES
from tests.conftest import REPO

BENCH = REPO / "bench" / "throughput.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("throughput_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_every_scheme_with_mfu_in_range():
    # one thread: other programs on a shared machine stall a multi-threaded matmul far more
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--threads", "1"], capture_output=True, text=True, env=env, timeout=600, check=True)
    result = json.loads(done.stdout)
    for key in ("device", "device_name", "dtype", "threads", "torch", "peak_flops", "memory_method", "load_average_before", "shapes"):
        assert key in result, key
    assert result["threads"] == 1 and result["quick"] is True
    assert result["peak_flops"]["measured"] > 0
    day1, gpt2 = result["shapes"]
    assert day1["name"] == "day1" and gpt2["name"] == "gpt2-small"
    if not torch.cuda.is_available():
        assert "skipped" in gpt2
    flops = day1["flops_per_token"]
    assert flops["train"] == 3 * flops["eval"] > flops["eval_kaplan"] > 0
    assert [row["position"] for row in day1["schemes"]] == sorted(SCHEMES)
    for row in day1["schemes"]:
        for name in ("train", "eval"):
            assert row[f"{name}_tokens_per_second"] > 0
            assert 0 < row[f"{name}_mfu"] <= 1, (row["position"], name, row[f"{name}_mfu"])
            assert row[f"{name}_peak_memory_bytes"] > 0
        assert row["sdpa"]["train_ops"] and row["sdpa"]["eval_ops"]
        assert "MATH" in row["sdpa"]["backends_that_run"]


def test_flops_per_token_counts_the_tied_table_once_and_no_position_table():
    bench = _bench_module()
    config = DecoderConfig(position="learned")
    flops = bench.flops_per_token(config)
    model = Decoder(config)
    blocks = sum(p.numel() for p in model.blocks.parameters()) + sum(p.numel() for p in model.ln_final.parameters())
    assert flops["parameters_counted"] == blocks + config.vocab_size * config.d_model
    attention = config.n_layers * config.d_model * config.context_length
    assert flops["train"] == 6 * flops["parameters_counted"] + 12 * attention


def test_a_failing_compile_is_recorded_not_raised(monkeypatch):
    bench = _bench_module()
    model = Decoder(DecoderConfig(vocab_size=300, context_length=8, d_model=16, n_heads=2, n_layers=1))
    ids = torch.randint(0, 300, (2, 9))
    args = SimpleNamespace(warmup=0, repeats=1)
    optimizer = bench.make_optimizer(model, torch.device("cpu"))

    def broken(*a, **k):
        raise RuntimeError("inductor exploded")

    monkeypatch.setattr(bench.torch, "compile", broken)
    result = bench.measure_compile(model, optimizer, ids, bench.contextlib.nullcontext(), args, torch.device("cpu"), 16)
    assert result == {"error": "RuntimeError: inductor exploded"}
    monkeypatch.setattr(bench.octlm_device, "has_cpp_compiler", lambda: False)
    assert "no C++ compiler" in bench.measure_compile(model, optimizer, ids, bench.contextlib.nullcontext(), args, torch.device("cpu"), 16)["error"]
