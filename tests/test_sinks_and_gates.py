"""Learned attention sinks and the output gate (``--attention-sinks``, ``--output-gate``) against hand computations.

The reference never goes through octlm's attention: it takes the input each
attention layer receives (a forward pre-hook), forms queries, keys and values
from the layer's own weights, and loops over heads and queries in float64:
``p_ij = exp(s_ij) / (exp(sink_h) + sum_j' exp(s_ij'))`` (GPT-OSS's sinks) and
``out = proj((sum_j p_ij v_j) * sigmoid(W_g x + b_g))`` (Qiu et al. 2025's gate
after SDPA). NoPE, so that no rotation needs writing out.
"""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.export.hf import mapper_for
from octlm.export.hf_common import InteropError
from octlm.model.attention_maps import record_attention
from octlm.model.blocks import LayerPass
from octlm.model.kvcache import KVCache
from octlm.report import Reporter
from octlm.train.launch import train
from octlm.train.options import TrainOptions

VOCAB, C, H = 40, 16, 2
QUIET = Reporter(json_mode=True)


def model_with(seed: int = 0, **fields) -> Decoder:
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=VOCAB, context_length=16, d_model=C, n_heads=H, n_layers=2, **fields)
    model = Decoder(config).eval()
    with torch.no_grad():
        for block in model.blocks:
            if block.attn.sinks is not None:  # sinks of either sign, so that they take a visible share
                block.attn.sinks.copy_(torch.randn(H) * 2)
            block.attn.qkv.weight.mul_(8)  # sharp attention, so a wrong weight shows
    return model


def layer_io(model: Decoder, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each attention layer's input [T, C] and output [T, C] (batch 1), float64."""
    seen, handles = [], []
    for block in model.blocks:
        handles.append(
            block.attn.register_forward_hook(lambda _, args, out: seen.append((args[0][0].double(), out[0].double())))
        )
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def hand_attention(attn, x: torch.Tensor, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor, list]:
    """The layer's output [T, C], its key weights [H, T, T] and the sink's share [H, T], by loops in float64."""
    T = x.shape[0]
    D = C // H
    W, b = attn.qkv.weight.detach().double(), attn.qkv.bias.detach().double()
    qkv = x @ W.T + b
    q, k, v = qkv[:, :C].view(T, H, D), qkv[:, C : 2 * C].view(T, H, D), qkv[:, 2 * C :].view(T, H, D)
    y = torch.zeros(T, H, D, dtype=torch.float64)
    weights = torch.zeros(H, T, T, dtype=torch.float64)
    shares = torch.zeros(H, T, dtype=torch.float64)
    for h in range(H):
        sink = None if attn.sinks is None else float(attn.sinks[h].detach())
        for i in range(T):
            first = 0 if window is None else max(0, i - window + 1)
            scores = [float(q[i, h] @ k[j, h]) / math.sqrt(D) for j in range(first, i + 1)]
            top = max(scores + ([] if sink is None else [sink]))
            denominator = sum(math.exp(s - top) for s in scores) + (0.0 if sink is None else math.exp(sink - top))
            for j, s in zip(range(first, i + 1), scores, strict=True):
                weights[h, i, j] = math.exp(s - top) / denominator
                y[i, h] += weights[h, i, j] * v[j, h]
            shares[h, i] = 0.0 if sink is None else math.exp(sink - top) / denominator
    y = y.reshape(T, C)
    if attn.gate is not None:
        gate = x @ attn.gate.weight.detach().double().T + attn.gate.bias.detach().double()
        y = y * (1.0 / (1.0 + torch.exp(-gate)))
    out = y @ attn.proj.weight.detach().double().T + attn.proj.bias.detach().double()
    return out, weights, shares


CASES = [
    dict(attention_sinks=True),
    dict(output_gate=True),
    dict(attention_sinks=True, output_gate=True),
    dict(attention_sinks=True, output_gate=True, layers="none/w3 none"),  # the band mask path
]


@pytest.mark.parametrize("fields", CASES)
@given(length=st.integers(1, 12), seed=st.integers(0, 3))
@settings(max_examples=8, deadline=None)
def test_each_layer_computes_the_hand_formula_and_records_the_weights_it_uses(fields, length, seed):
    model = model_with(seed, position="none", **fields)
    ids = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))
    windows = [spec.window for spec in model.config.layers] or [None] * 2
    with record_attention(model) as maps:
        io = layer_io(model, ids)
    for layer, ((x, out), window) in enumerate(zip(io, windows, strict=True)):
        hand, weights, shares = hand_attention(model.blocks[layer].attn, x, window)
        torch.testing.assert_close(out, hand, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(maps.probabilities[layer][0].double(), weights, atol=1e-6, rtol=1e-5)
        if fields.get("attention_sinks"):
            torch.testing.assert_close(maps.sink_share[layer][0].double(), shares, atol=1e-6, rtol=1e-5)
            sums = maps.probabilities[layer].sum(-1) + maps.sink_share[layer]
            torch.testing.assert_close(sums, torch.ones_like(sums))
        else:
            assert maps.sink_share[layer] is None


def test_the_sinks_learn_with_the_gradient_of_the_hand_formula():
    model = model_with(1, position="none", attention_sinks=True).train()
    ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(1))
    attn = model.blocks[0].attn
    x = layer_io(model, ids)[0][0].float().requires_grad_(False)
    sinks = attn.sinks.detach().double().clone().requires_grad_(True)
    # By hand in float64: the extra denominator term, over a causal mask.
    T, D = x.shape[0], C // H
    qkv = x.double() @ attn.qkv.weight.detach().double().T + attn.qkv.bias.detach().double()
    q, k, v = (qkv[:, i * C : (i + 1) * C].view(T, H, D).transpose(0, 1) for i in range(3))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~torch.ones(T, T).tril().bool(), float("-inf"))
    weights = scores.exp() / (scores.exp().sum(-1, keepdim=True) + sinks.exp()[:, None, None])
    (weights @ v).square().sum().backward()
    y = {}
    hook = attn.proj.register_forward_hook(lambda _, args, out: y.setdefault("y", args[0]))
    attn(x[None], LayerPass(model.positions))
    hook.remove()
    y["y"].square().sum().backward()
    torch.testing.assert_close(attn.sinks.grad.double(), sinks.grad, atol=1e-4, rtol=1e-4)
    assert sinks.grad.abs().min() > 0  # the sinks do move


@pytest.mark.parametrize("layers", ["", "rope/w4 rope"])
@given(prefill=st.integers(1, 10), steps=st.integers(1, 5), seed=st.integers(0, 5))
@settings(max_examples=6, deadline=None)
def test_cached_decoding_equals_a_full_recompute(layers, prefill, steps, seed):
    model = model_with(seed, position="rope", block="llama", attention_sinks=True, output_gate=True, layers=layers)
    ids = torch.randint(0, VOCAB, (2, prefill + steps), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(len(model.blocks))
        parts = [model(ids[:, :prefill], cache=cache)]
        for t in range(prefill, prefill + steps):
            parts.append(model(ids[:, t : t + 1], offset=t, cache=cache))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)


def test_off_by_default_the_model_has_the_parameters_it_always_had():
    plain = DecoderConfig(vocab_size=VOCAB, d_model=C, n_heads=H)
    assert not plain.attention_sinks and not plain.output_gate
    names = set(Decoder(plain).state_dict())
    assert not any("sinks" in n or "gate" in n for n in names)
    both = Decoder(DecoderConfig(vocab_size=VOCAB, d_model=C, n_heads=H, attention_sinks=True, output_gate=True))
    added = set(both.state_dict()) - names
    assert added == {f"blocks.{i}.attn.{p}" for i in range(2) for p in ("sinks", "gate.weight", "gate.bias")}


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(output_gate=True), r"output_gate=True: .*Qwen3-Next"),
        (dict(block="gpt2", attention_sinks=True), r"attention_sinks=True with block='gpt2': GPT-OSS"),
        (dict(attention_sinks=True, layers="rope none"), r"attention_sinks with NoPE on layer\(s\) 2: GPT-OSS"),
        (dict(attention_sinks=True, qk_norm=True), r"attention_sinks with QK-norm: GPT-OSS"),
    ],
)
def test_export_refuses_by_name_what_no_architecture_carries(fields, match):
    config = DecoderConfig(vocab_size=VOCAB, d_model=C, n_heads=H, **{"position": "rope", "block": "llama", **fields})
    with pytest.raises(InteropError, match=match):
        mapper_for(config).check(config, None)


def test_the_options_are_saved_and_a_resume_is_exact(small_corpus, tmp_path):
    shape = dict(vocab_size=280, context_length=16, d_model=16, n_heads=2, n_layers=1, batch_size=4, threads=1)
    shape |= dict(eval_interval=5, eval_blocks=2, final_eval_blocks=2, sample_tokens=0, save_every=0)
    shape |= dict(attention_sinks=True, output_gate=True, position="rope")

    def options(out, **extra) -> TrainOptions:
        return TrainOptions.of(text=[str(small_corpus)], out=str(out), **{**shape, **extra})

    train(options(tmp_path / "whole", max_steps=9), QUIET)

    def ctrl_c(step):
        if step == 4:
            os.kill(os.getpid(), signal.SIGINT)

    run = tmp_path / "run"
    assert train(options(run, max_steps=9, save_every=3), QUIET, step_hook=ctrl_c)["interrupted"]
    assert train(TrainOptions(), QUIET, resume=run, given=set())["steps"] == 9
    model = json.loads((run / "config.json").read_text())["model"]
    assert model["attention_sinks"] is True and model["output_gate"] is True
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors").read_bytes()


def test_the_flags_reach_the_run_and_octlm_attention_reads_it(small_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    flags = "--max-steps 2 --d-model 16 --n-heads 2 --n-layers 1 --vocab-size 280 --batch-size 2 --threads 1"
    argv = ["train", "--text", str(small_corpus), "--out", str(run), *flags.split(), "--context-length", "16"]
    assert main([*argv, "--attention-sinks", "--output-gate", "--sample-tokens", "0", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["attention", "--run", str(run), "--length", "8", "--out", str(tmp_path / "a"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["event"] == "result"


def test_the_length_studys_attention_record_gives_the_sinks_share():
    import numpy as np

    from octlm.studies.length.attention import attention_record

    model = model_with(2, position="none", attention_sinks=True)
    scored = np.random.default_rng(2).integers(0, VOCAB, 13)
    row = {"label": "sinks", "position": "none"}
    record = attention_record(model, scored, 12, 16, torch.device("cpu"), row)
    assert record["windows"] == 1
    for layer, (x, _) in enumerate(layer_io(model, torch.from_numpy(scored[None, :12]))):
        shares = hand_attention(model.blocks[layer].attn, x)[2]
        assert record["sink_share"][layer] == pytest.approx(shares.mean(dim=1).tolist(), abs=1e-4)
    plain = attention_record(model_with(2, position="none"), scored, 12, 16, torch.device("cpu"), row)
    assert "sink_share" not in plain


@pytest.mark.parametrize("fields", [dict(position="stickbreaking"), dict(position="rope", layers="rope stickbreaking")])
def test_sinks_beside_a_scheme_without_a_softmax_are_refused_by_name(fields):
    with pytest.raises(
        ValueError, match=r"attention_sinks=True with stickbreaking, which forms its attention weights itself"
    ):
        DecoderConfig(vocab_size=VOCAB, d_model=C, n_heads=H, attention_sinks=True, **fields)


@pytest.mark.parametrize("position", ["fox", "stickbreaking"])
def test_the_gate_multiplies_the_output_of_a_scheme_that_attends_itself(position):
    model = model_with(3, position=position, output_gate=True)
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(3))
    attn = model.blocks[0].attn
    seen = {}
    hook = attn.proj.register_forward_hook(lambda _, args, out: seen.setdefault("y", args[0]))
    with torch.no_grad():
        model(ids)
        gate = attn.gate
        attn.gate = None
        seen_plain = {}
        hook.remove()
        hook = attn.proj.register_forward_hook(lambda _, args, out: seen_plain.setdefault("y", args[0]))
        model(ids)
        attn.gate = gate
    hook.remove()
    x = layer_io(model, ids)[0][0].float()
    torch.testing.assert_close(seen["y"][0], seen_plain["y"][0] * torch.sigmoid(x @ gate.weight.T + gate.bias))


def softmax_schemes() -> list[str]:
    from octlm.model.positions import SCHEMES

    return sorted(name for name, cls in SCHEMES.items() if not cls.attends)


@pytest.mark.parametrize("position", softmax_schemes())
@pytest.mark.parametrize("document_mask", [False, True])
def test_every_softmax_scheme_takes_sinks_and_the_gate_and_caches_exactly(position, document_mask):
    from octlm.model.positions import SCHEMES

    if document_mask and not SCHEMES[position].takes_document_positions:
        pytest.skip(f"{position} takes no document mask")
    model = model_with(4, position=position, attention_sinks=True, output_gate=True, document_mask=document_mask)
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))
    ids[:, 4] = model.config.eot_id  # a second document from token 4 on
    with torch.no_grad(), record_attention(model) as maps:
        full = model(ids)
        sums = [p.sum(-1) + share for p, share in zip(maps.probabilities, maps.sink_share, strict=True)]
        cache = KVCache(len(model.blocks))
        parts = [model(ids[:, :7], cache=cache)] + [
            model(ids[:, t : t + 1], offset=t, cache=cache) for t in range(7, 12)
        ]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    if document_mask:  # the second document attends to itself alone, its sinks included, as if it came first
        with torch.no_grad():
            torch.testing.assert_close(full[:, 4:], model(ids[:, 4:]), atol=1e-5, rtol=1e-5)
    for total in sums:
        torch.testing.assert_close(total, torch.ones_like(total))


def test_a_stream_applies_the_gate_and_refuses_learned_sinks_by_name():
    from octlm.model.streaming import StreamingCache, check_streaming, stream_logits

    model = model_with(5, position="rope", output_gate=True)
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(5))
    check_streaming(model, 0, 16)
    with torch.no_grad():  # a window wider than the stream evicts nothing: the stream is the full pass
        streamed = torch.cat(list(stream_logits(model, ids, StreamingCache(2, 0, 16), 4)), dim=1)
        torch.testing.assert_close(streamed, model(ids), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"learned sinks \(--attention-sinks\)"):
        check_streaming(model_with(5, position="rope", attention_sinks=True), 4, 8)


@pytest.mark.slow  # a whole study end to end
def test_the_length_study_trains_every_model_with_the_flags_and_says_so(small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    shape = "--train-length 16 --d-model 16 --n-heads 2 --n-layers 1 --vocab-size 280 --batch-size 2 --threads 1"
    argv = ["length", "--text", str(small_corpus), "--out", str(out), "--schemes", "rope", "none", *shape.split()]
    argv += ["--max-steps", "2", "--multipliers", "1", "2", "--extend-to", "0", "--rope-scalings", "--quiet"]
    assert main([*argv, "--attention-sinks", "--output-gate"]) == 0
    for scheme in ("rope", "none"):
        model = json.loads((out / "runs" / scheme / "config.json").read_text())["model"]
        assert model["attention_sinks"] is True and model["output_gate"] is True, scheme
    markdown = (out / "length.md").read_text()
    assert markdown.startswith("Every model of this study has learned attention sinks (--attention-sinks; docs/")
    assert "**learned-sink share**" in markdown
    records = [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines()]
    shares = [r["sink_share"] for r in records if r["record"] == "attention"]
    assert len(shares) == 4 and all(0 < v < 1 for share in shares for layer in share for v in layer)


def test_the_task_study_passes_the_flags_to_its_models():
    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions

    opts = TaskOptions(task="flip-flop", attention_sinks=True, output_gate=True)
    train_opts = opts.train_options(TASKS["flip-flop"], "rope", 0)
    assert train_opts.model.attention_sinks and train_opts.model.output_gate
    assert not TaskOptions(task="flip-flop").train_options(TASKS["flip-flop"], "rope", 0).model.output_gate


def test_a_study_of_sinks_beside_stick_breaking_is_refused_and_writes_nothing(small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["length", "--text", str(small_corpus), "--out", str(out), "--schemes", "stickbreaking", "--max-steps", "2"]
    assert main([*argv, "--attention-sinks"]) != 0
    err = capsys.readouterr().err
    assert "--attention-sinks=True with stickbreaking" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
