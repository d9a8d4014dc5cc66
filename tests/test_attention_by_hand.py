"""The attention statistics the length study and ``octlm attention`` report, against a hand computation.

The reference here never goes through ``record_attention`` or
``octlm.inspect.attention_statistics``: it takes the input each attention
layer receives (a forward pre-hook), forms the queries and keys from the
layer's ``qkv`` weights itself, and computes the softmax, entropy (nats),
distance ``i - j`` and first-token mass in float64 numpy. One layer is also
given weights that make its attention exactly uniform, whose statistics are
closed forms: entropy ``ln(i + 1)``, distance ``i / 2``, first-token mass
``1 / (i + 1)`` for query ``i``.
"""

from __future__ import annotations

import itertools
import math
import shutil

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig

# The model runs in float32, the reference in float64: they agree to ~1e-6 of the logits' size, and the reports round
# to 4 decimals (5e-5); 2e-4 holds both with room, and no float rounding can cross it.
ATOL = 2e-4


def layer_inputs(model: Decoder, ids: list[int]) -> list[np.ndarray]:
    """What each block's attention received for ``ids`` (batch 1), float64 [T, C] per layer."""
    seen, handles = [], []
    for block in model.blocks:
        handles.append(block.attn.register_forward_pre_hook(lambda _, args: seen.append(args[0][0].double().numpy())))
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for handle in handles:
            handle.remove()
    return seen


def hand_statistics(model: Decoder, ids: list[int]) -> dict[str, np.ndarray]:
    """Per layer and head: entropy by query [L, H, T], its mean, mean distance, first-token mass, largest logit [L, H].

    Learned or no positions only: attention is ``softmax(q k^T / sqrt(D))`` under the causal mask, with no rotation
    and no bias.
    """
    H = model.config.n_heads
    out = {"entropy": [], "mean_distance": [], "sink_mass": [], "max_logit": []}
    for block, x in zip(model.blocks, layer_inputs(model, ids), strict=True):
        T, C = x.shape
        D = C // H
        qkv = x @ block.attn.qkv.weight.detach().double().numpy().T + block.attn.qkv.bias.detach().double().numpy()
        q, k = qkv[:, :C].reshape(T, H, D), qkv[:, C : 2 * C].reshape(T, H, D)
        rows = {name: [] for name in out}
        for h in range(H):
            logits = q[:, h] @ k[:, h].T / math.sqrt(D)
            logits[np.triu_indices(T, 1)] = -np.inf  # query i sees keys 0 .. i
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            safe = np.where(p > 0, p, 1.0)  # 0 ln 0 = 0
            distance = np.subtract.outer(np.arange(T), np.arange(T))  # query i to key j: i - j tokens back
            rows["entropy"].append(-(p * np.log(safe)).sum(axis=1))
            rows["mean_distance"].append((p * np.maximum(distance, 0)).sum(axis=1).mean())
            rows["sink_mass"].append(p[:, 0].mean())
            rows["max_logit"].append(logits.max())
        for name in out:
            out[name].append(rows[name])
    result = {name: np.array(value) for name, value in out.items()}
    result["mean_entropy"] = result["entropy"].mean(axis=-1)
    return result


def make_uniform(model: Decoder, layer: int) -> None:
    """Zero the layer's query projection: every logit is 0, so each query spreads evenly over the keys it sees."""
    C = model.config.d_model
    with torch.no_grad():
        model.blocks[layer].attn.qkv.weight[:C] = 0.0
        model.blocks[layer].attn.qkv.bias[:C] = 0.0


def sharp_model(position: str = "learned", seed: int = 0) -> Decoder:
    """2 layers of 2 heads, weights drawn N(0, 0.5) so attention is far from uniform; layer 0 made uniform."""
    torch.manual_seed(seed)
    model = Decoder(
        DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=2, position=position)
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".ln_" not in name and not name.startswith("ln_"):
                parameter.normal_(0.0, 0.5)
    make_uniform(model, 0)
    return model.eval()


def test_the_hand_reference_is_uniform_where_the_weights_make_it_so():
    """The reference itself: a zeroed query projection gives ln(i + 1), i / 2 and 1 / (i + 1) exactly."""
    model = sharp_model()
    ids = list(range(3, 19))
    ref = hand_statistics(model, ids)
    i = np.arange(16)
    np.testing.assert_allclose(ref["entropy"][0], np.broadcast_to(np.log(i + 1), (2, 16)), atol=1e-12)
    np.testing.assert_allclose(ref["mean_distance"][0], [np.mean(i / 2)] * 2, atol=1e-12)
    np.testing.assert_allclose(ref["sink_mass"][0], [np.mean(1 / (i + 1))] * 2, atol=1e-12)
    assert ref["entropy"][1, :, -1].min() < 0.8 * math.log(16)  # layer 1 is far from uniform, so it tests something


@pytest.mark.rounding
def test_the_length_studys_attention_record_matches_the_hand_computation():
    """attention_record at length 16 over 3 windows: means over windows and queries, entropy per log bucket, and the
    largest logit's maximum over windows, per layer and head, equal the hand computation."""
    from octlm.studies.length.attention import attention_record

    model = sharp_model("none")
    scored = np.random.default_rng(3).integers(0, 64, size=3 * 16 + 5)
    row = {"label": "none", "position": "none", "seed": 0}
    record = attention_record(model, scored, 16, 16, torch.device("cpu"), row)
    assert record["windows"] == 3  # (53 - 1) // 16
    refs = [hand_statistics(model, scored[w * 16 : (w + 1) * 16].tolist()) for w in range(3)]
    # log_buckets(16, first=1): each edge max(previous + 1, round(previous * 2 ** 0.25)), written out by hand
    edges = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert record["query_positions"] == [round(math.sqrt((a + 1) * b), 2) for a, b in itertools.pairwise(edges)]
    by_query = np.mean([r["entropy"] for r in refs], axis=0)
    buckets = np.stack([by_query[..., a:b].mean(axis=-1) for a, b in itertools.pairwise(edges)], axis=-1)
    np.testing.assert_allclose(record["entropy"], buckets, atol=ATOL)
    for name in ("mean_entropy", "mean_distance", "sink_mass"):
        np.testing.assert_allclose(record[name], np.mean([r[name] for r in refs], axis=0), atol=ATOL, err_msg=name)
    np.testing.assert_allclose(record["max_logit"], np.max([r["max_logit"] for r in refs], axis=0), atol=ATOL)
    # the uniform layer's closed forms, as the tables read them
    i = np.arange(16)
    np.testing.assert_allclose(record["mean_entropy"][0], [np.mean(np.log(i + 1))] * 2, atol=ATOL)
    np.testing.assert_allclose(record["mean_distance"][0], [7.5 / 2] * 2, atol=ATOL)
    np.testing.assert_allclose(record["sink_mass"][0], [np.mean(1 / (i + 1))] * 2, atol=ATOL)
    assert record["max_logit"][0] == [0.0, 0.0]


@pytest.mark.rounding
def test_the_attention_command_reports_the_hand_computation(trained_run, tmp_path, capsys):
    """``octlm attention --prompt``: every layer and head's entropy by query, mean distance, first-token mass and
    largest logit equal the hand computation from the run's own weights."""
    import json

    from octlm.cli import main
    from octlm.run.load import load_run

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    model, tokenizer = load_run(run)
    prompt = "ROMEO: But soft, what light"  # 32 tokens at most: the learned table has 32 rows
    ids = tokenizer.encode(prompt)
    assert main(["attention", "--run", str(run), "--prompt", prompt, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out.splitlines()[-1])["statistics"]
    ref = hand_statistics(model.eval(), ids)
    for name in ("entropy", "mean_entropy", "mean_distance", "sink_mass", "max_logit"):
        np.testing.assert_allclose(stats[name], ref[name], atol=ATOL, err_msg=name)
