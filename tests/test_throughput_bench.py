"""bench/throughput.py: its --quick run prints the promised JSON, a failing torch.compile is recorded, not raised,
and a sweep (--batch-size, --compile-mode, --phases) records what it ran."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES
from octlm.train import device as octlm_device
from tests.conftest import REPO

BENCH = REPO / "bench" / "throughput.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("throughput_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_prints_every_scheme_with_mfu_in_range():
    # one thread: other programs on a shared machine stall a multi-threaded matmul far more; batches of 2 blocks, not
    # day1's 32: the test checks what the JSON holds, not the speed, in a sixteenth of the time
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--threads", "1", "--batch-size", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    result = json.loads(done.stdout)
    for key in (
        "device",
        "device_name",
        "dtype",
        "threads",
        "torch",
        "peak_flops",
        "memory_method",
        "load_average_before",
        "shapes",
    ):
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
        # a scheme that forms its own weights (PositionScheme.attend) must not also call SDPA, the others must
        calls_sdpa = bool(row["sdpa"]["train_ops"]) and bool(row["sdpa"]["eval_ops"])
        assert calls_sdpa != row["own_attention"], (row["position"], row["sdpa"])
        assert row["own_attention"] == SCHEMES[row["position"]].attends
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
    args = SimpleNamespace(warmup=0, repeats=1, compile_mode="default", phases=["train", "eval"])
    optimizer = bench.make_optimizer(model, torch.device("cpu"))

    def broken(*a, **k):
        raise RuntimeError("inductor exploded")

    monkeypatch.setattr(bench.torch, "compile", broken)
    result = bench.measure_compile(model, optimizer, ids, bench.contextlib.nullcontext(), args, torch.device("cpu"), 16)
    assert result == {"mode": "default", "error": "RuntimeError: inductor exploded"}
    monkeypatch.setattr(octlm_device, "has_cpp_compiler", lambda: False)
    assert (
        "no C++ compiler"
        in bench.measure_compile(model, optimizer, ids, bench.contextlib.nullcontext(), args, torch.device("cpu"), 16)[
            "error"
        ]
    )


def _tiny_shapes(bench, monkeypatch):
    """One tiny CPU shape (default batch 3) and one that needs CUDA, so a sweep runs in seconds."""
    tiny = dict(vocab_size=300, context_length=16, d_model=16, n_heads=2, n_layers=1)
    monkeypatch.setattr(bench, "SHAPES", {"tiny": (tiny, 3, False), "big": (tiny, 5, True)})


def test_batch_sizes_compile_mode_and_phases_parse_and_default():
    bench = _bench_module()
    args = bench.parse_args([])
    assert args.batch_sizes is None and args.compile_mode == "default" and args.phases == ["train", "eval"]
    args = bench.parse_args(
        [
            "--batch-sizes",
            "32",
            "16",
            "--phases",
            "eval",
            "train",
            "--compile",
            "--compile-mode",
            "max-autotune-no-cudagraphs",
        ]
    )
    assert args.batch_sizes == [32, 16]  # the order given is the order run
    assert args.phases == ["train", "eval"]
    assert args.compile_mode == "max-autotune-no-cudagraphs"
    assert bench.parse_args(["--batch-size", "8"]).batch_sizes == [8]
    for bad in (["--compile-mode", "max-autotune"], ["--batch-size", "0"], ["--compile", "--compile-mode", "fast"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


@pytest.mark.slow
def test_a_batch_sweep_writes_one_entry_per_shape_and_batch(monkeypatch, tmp_path):
    bench = _bench_module()
    _tiny_shapes(bench, monkeypatch)
    out = tmp_path / "sweep.json"
    result = bench.run(
        [
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "big",
            "--schemes",
            "none",
            "--batch-size",
            "4",
            "2",
            "--phases",
            "train",
            "--quick",
            "--matmul-size",
            "64",
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == result and result["complete"]
    assert result["phases"] == ["train"] and result["compile_mode"] is None
    entries = [(e["name"], e["batch_size"], e["default_batch_size"]) for e in result["shapes"]]
    assert entries == [("tiny", 4, 3), ("tiny", 2, 3), ("big", 4, 5), ("big", 2, 5)]
    assert all("skipped" in e for e in result["shapes"][2:])
    for entry in result["shapes"][:2]:
        (row,) = entry["schemes"]
        assert row["train_tokens_per_second"] > 0
        assert row["train_mfu"] == round(row["train_flops_per_second"] / result["peak_flops"]["measured"], 4)
        assert not [key for key in row if key.startswith("eval")]
        assert list(row["sdpa"]) == ["train_ops", "backends_that_run"]
    # without --batch-size every shape keeps its own batch, as before
    result = bench.run(["--device", "cpu", "--shapes", "tiny", "--schemes", "none", "--quick", "--matmul-size", "64"])
    (entry,) = result["shapes"]
    assert entry["batch_size"] == entry["default_batch_size"] == 3
    assert result["phases"] == ["train", "eval"] and "eval_mfu" in entry["schemes"][0]


def test_the_compile_mode_reaches_torch_compile_and_the_json(monkeypatch):
    bench = _bench_module()
    _tiny_shapes(bench, monkeypatch)
    modes = []

    def fake_compile(model, **kwargs):
        modes.append(kwargs.get("mode"))
        return model  # eager: this test is about what is passed and recorded, not about inductor

    monkeypatch.setattr(bench.torch, "compile", fake_compile)
    monkeypatch.setattr(octlm_device, "has_cpp_compiler", lambda: True)
    result = bench.run(
        [
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "--schemes",
            "none",
            "rope",
            "--batch-size",
            "2",
            "--quick",
            "--matmul-size",
            "64",
            "--compile",
            "--compile-schemes",
            "rope",
            "--compile-mode",
            "max-autotune-no-cudagraphs",
        ]
    )
    assert modes == ["max-autotune-no-cudagraphs"]
    assert result["compile_mode"] == "max-autotune-no-cudagraphs"
    none, rope = result["shapes"][0]["schemes"]
    assert "compile" not in none
    compiled = rope["compile"]
    assert compiled["mode"] == "max-autotune-no-cudagraphs"
    for name in ("train", "eval"):
        assert compiled[f"{name}_tokens_per_second"] > 0 and compiled[f"{name}_peak_memory_bytes"] > 0
        assert compiled[f"{name}_speedup"] == round(
            compiled[f"{name}_tokens_per_second"] / rope[f"{name}_tokens_per_second"], 2
        )
        per_token = rope[f"{name}_flops_per_second"] / rope[f"{name}_tokens_per_second"]
        assert compiled[f"{name}_mfu"] == round(
            compiled[f"{name}_tokens_per_second"] * per_token / result["peak_flops"]["measured"], 4
        )


def test_a_batch_that_runs_out_of_memory_is_a_row_and_the_sweep_goes_on(monkeypatch):
    bench = _bench_module()
    _tiny_shapes(bench, monkeypatch)
    measure = bench.measure_scheme

    def measure_or_oom(shape, position, batch_size, *rest):
        if batch_size > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return measure(shape, position, batch_size, *rest)

    monkeypatch.setattr(bench, "measure_scheme", measure_or_oom)
    result = bench.run(
        [
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "--schemes",
            "none",
            "--batch-size",
            "8",
            "2",
            "--quick",
            "--matmul-size",
            "64",
        ]
    )
    big, small = result["shapes"]
    assert big["schemes"] == [
        {"position": "none", "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB"}
    ]
    assert small["batch_size"] == 2 and "train_mfu" in small["schemes"][0] and result["complete"]


@pytest.mark.slow
def test_forward_ab_alternates_the_two_forwards_and_restores_the_current_one(capsys):
    spec = importlib.util.spec_from_file_location("forward_ab_bench", REPO / "bench" / "forward_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    from octlm.model.blocks import CausalSelfAttention

    current, calls = CausalSelfAttention.forward, []

    def counted(self, *args, **kwargs):
        calls.append(self)
        return current(self, *args, **kwargs)

    row = ab.measure("none", {"base": counted, "current": current}, pairs=2)
    assert len(calls) == 2 * (ab.WARMUP_PAIRS + 2)  # two layers, one base step per pair
    assert CausalSelfAttention.forward is current and row["current_over_base"] > 0
    result = ab.main(
        ["--base-blocks", str(REPO / "src" / "octlm" / "model" / "blocks.py"), "--pairs", "1", "--schemes", "rope"]
    )
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(result))
    assert set(result["schemes"]["rope"]) == {
        "base_train_tokens_per_second",
        "current_train_tokens_per_second",
        "current_over_base",
    }


def test_forward_ab_swaps_a_canon_layer_s_forward_in_a_model_with_canon_layers(capsys):
    spec = importlib.util.spec_from_file_location("forward_ab_canon", REPO / "bench" / "forward_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    from octlm.model.canon import CanonConv

    current, calls = CanonConv.forward, []

    def counted(self, *args, **kwargs):
        calls.append(self.point)
        return current(self, *args, **kwargs)

    ab.measure("none", {"base": counted, "current": current}, 1, CanonConv, "AD")
    assert sorted(set(calls)) == ["A", "D"] and len(calls) == 2 * 2 * (ab.WARMUP_PAIRS + 1)  # 2 layers x 2 points
    assert CanonConv.forward is current
    base = str(REPO / "src" / "octlm" / "model" / "canon.py")
    result = ab.main(["--base-canon", base, "--canon", "A", "--pairs", "1", "--schemes", "none"])
    assert result["canon"] == "A" and result["schemes"]["none"]["current_over_base"] > 0
