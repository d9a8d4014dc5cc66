"""T5 bias, FIRE, xPos and randomized positions against formulas written from their papers.

Each reference below is computed entry by entry with Python floats from the
paper's equations, not from octlm's code.
"""

from __future__ import annotations

import math

import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.model.positions import FIREBias, T5RelativeBias, XPosRotation
from tests.test_positions import rotate_by_hand


def t5_bucket(n, num_buckets=32, max_distance=128):
    """Raffel et al. 2020 §2.1 (causal): half the buckets one distance each, the rest log-spaced up to max_distance."""
    exact = num_buckets // 2
    if n < exact:
        return n
    return min(exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)), num_buckets - 1)


def test_t5_bucket_reference_values():
    # By hand: 16 exact buckets; 20 -> 16 + floor(16 ln 1.25 / ln 8) = 17; 127 -> 31; everything from 128 on: 31.
    assert [t5_bucket(n) for n in (0, 1, 15, 16, 20, 64, 127, 128, 5000)] == [0, 1, 15, 16, 17, 26, 31, 31, 31]


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 20)])
@pytest.mark.parametrize("q_len,k_len,offset", [(40, 40, 0), (1, 300, 299), (5, 9, 4)])
def test_t5_bias_is_the_bucket_row_of_each_head(buckets, max_distance, q_len, k_len, offset):
    torch.manual_seed(0)
    scheme = T5RelativeBias(DecoderConfig(position="t5", n_heads=4, t5_num_buckets=buckets, t5_max_distance=max_distance))
    torch.nn.init.normal_(scheme.bias_table.weight)
    bias = scheme.score_bias(q_len, k_len, offset)
    assert bias.shape == (4, q_len, k_len)
    table = scheme.bias_table.weight.tolist()
    for i in range(q_len):
        for j in range(k_len):
            qi, kj = offset + i, offset + q_len - k_len + j
            if kj <= qi:
                expected = [table[t5_bucket(qi - kj, buckets, max_distance)][h] for h in range(4)]
                assert bias[:, i, j].tolist() == pytest.approx(expected, abs=0)


def test_t5_is_one_table_for_all_layers_and_rejects_bad_buckets():
    model = Decoder(DecoderConfig(position="t5", n_layers=3, context_length=16, d_model=32))
    assert sum(p.numel() for n, p in model.named_parameters() if "bias_table" in n) == 32 * 4
    assert model.position_embedding is None and model.max_length is None
    with pytest.raises(ValueError, match="t5_max_distance"):
        DecoderConfig(position="t5", t5_num_buckets=32, t5_max_distance=16)


def fire_by_hand(scheme, i, j):
    """Li et al. 2023 eq. (4): f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), f a ReLU MLP, per head."""
    c = abs(scheme.c.item())
    L = abs(scheme.threshold_scale.item()) * 512.0
    x = math.log(c * (i - j) + 1) / math.log(c * max(L, i) + 1)
    w1, b1 = scheme.mlp[0].weight[:, 0].tolist(), scheme.mlp[0].bias.tolist()
    hidden = [max(0.0, w * x + b) for w, b in zip(w1, b1)]
    w2, b2 = scheme.mlp[2].weight.tolist(), scheme.mlp[2].bias.tolist()
    return [sum(w * h for w, h in zip(row, hidden)) + b for row, b in zip(w2, b2)]


@pytest.mark.parametrize("q_len,k_len,offset", [(30, 30, 0), (1, 60, 59), (4, 10, 6)])
def test_fire_bias_matches_the_paper(q_len, k_len, offset):
    torch.manual_seed(1)
    scheme = FIREBias(DecoderConfig(position="fire", n_heads=4))
    for p in scheme.mlp.parameters():
        torch.nn.init.normal_(p)
    with torch.no_grad():
        scheme.c.fill_(0.3)
        scheme.threshold_scale.fill_(-0.04)  # L = |l| * 512 = 20.48: positions on both sides of the threshold
    bias = scheme.score_bias(q_len, k_len, offset)
    assert bias.shape == (4, q_len, k_len)
    for i in range(q_len):
        for j in range(k_len):
            qi, kj = offset + i, offset + q_len - k_len + j
            if kj <= qi:
                assert bias[:, i, j].tolist() == pytest.approx(fire_by_hand(scheme, qi, kj), rel=1e-4, abs=1e-4)


def test_fire_inputs_stay_in_the_unit_interval_and_the_defaults_are_the_papers():
    scheme = FIREBias(DecoderConfig(position="fire", n_heads=2))
    assert scheme.c.item() == pytest.approx(0.1) and abs(scheme.threshold_scale.item()) * 512 == 512
    assert scheme.mlp[0].out_features == 32 and scheme.mlp[2].out_features == 2
    captured = []
    scheme.mlp.register_forward_hook(lambda module, inputs, output: captured.append(inputs[0]))
    scheme.score_bias(1, 5000, 4999)
    assert 0.0 <= captured[0].min() and captured[0].max() <= 1.0 + 1e-6


def xpos_by_hand(x, position, key, d=16, gamma=0.4, scale_base=512.0):
    """Sun et al. 2023 §3.2: RoPE, then pair i times zeta_i ** (+-n / scale_base), zeta_i = (i / (d/2) + gamma) / (1 + gamma)."""
    out = rotate_by_hand(x, position)
    for i in range(d // 2):
        zeta = (i / (d / 2) + gamma) / (1 + gamma)
        factor = zeta ** ((-position if key else position) / scale_base)
        out[..., 2 * i] *= factor
        out[..., 2 * i + 1] *= factor
    return out


@pytest.mark.parametrize("offset", [0, 7, 900])
def test_xpos_matches_the_paper(offset):
    scheme = XPosRotation(DecoderConfig(d_model=32, n_heads=2, position="xpos"))
    g = torch.Generator().manual_seed(offset)
    q, k = torch.randn(1, 2, 3, 16, generator=g), torch.randn(1, 2, 8, 16, generator=g)
    rq, rk = scheme.rotate(q, k, offset + 5)  # a cached step: queries at offset+5.., 8 keys from offset, ending with them
    for t in range(3):
        torch.testing.assert_close(rq[:, :, t].double(), xpos_by_hand(q[:, :, t], offset + 5 + t, key=False), atol=1e-5, rtol=1e-5)
    for t in range(8):
        torch.testing.assert_close(rk[:, :, t].double(), xpos_by_hand(k[:, :, t], offset + t, key=True), atol=1e-5, rtol=1e-4)


def test_xpos_score_decays_with_distance_only():
    scheme = XPosRotation(DecoderConfig(d_model=32, n_heads=2, position="xpos"))
    q = torch.ones(1, 1, 1, 16)

    def score(n, m):
        rq, _ = scheme.rotate(q, q, n)
        _, rk = scheme.rotate(q, q, m)
        return (rq * rk).sum().item()

    assert score(300, 100) == pytest.approx(score(1300, 1100), rel=1e-4)
    # at distance 0 the decay is 1: the RoPE score of equal vectors, |q|^2
    assert score(700, 700) == pytest.approx(16.0, rel=1e-5)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rope"])
def test_randomized_positions_are_a_sorted_draw_in_training_and_plain_in_evaluation(position):
    config = DecoderConfig(position=position, context_length=16, d_model=32, n_heads=2, n_layers=1, vocab_size=40, randomize_positions=4)
    model = Decoder(config)
    if position == "learned":
        assert model.position_embedding.num_embeddings == 64 and model.max_length == 64
    ids = torch.randint(0, 40, (2, 16))
    torch.manual_seed(5)
    model.train()
    trained = model(ids)
    drawn = model.positions.drawn
    assert len(drawn) == 16 and len(set(drawn.tolist())) == 16 and torch.equal(drawn, drawn.sort().values)
    assert 0 <= drawn.min() and drawn.max() < 64 and drawn.max() >= 16  # P(all 16 below 16 of 64) is negligible
    torch.manual_seed(5)
    assert torch.equal(model(ids), trained)  # the seed reproduces the draw
    model.eval()
    assert torch.equal(model.positions.position_ids(16, 0, ids.device), torch.arange(16))
    if position != "learned":  # same weights, no randomization: the same evaluation
        plain = Decoder(DecoderConfig(**{**config.to_dict(), "randomize_positions": 1})).eval()
        plain.load_state_dict(model.state_dict())
        torch.testing.assert_close(model(ids), plain(ids), rtol=0, atol=0)


def test_randomized_rope_rotates_by_the_drawn_positions():
    model = Decoder(DecoderConfig(position="rope", context_length=8, d_model=32, n_heads=2, n_layers=1, randomize_positions=10)).train()
    torch.manual_seed(0)
    model.positions.draw_positions(8)
    q = torch.randn(1, 1, 8, 16)
    rq, _ = model.positions.rotate(q, q, 0)
    for t, p in enumerate(model.positions.drawn.tolist()):
        torch.testing.assert_close(rq[:, :, t].double(), rotate_by_hand(q[:, :, t], p), atol=1e-5, rtol=1e-5)


def test_randomized_learned_embedding_adds_the_drawn_rows():
    model = Decoder(DecoderConfig(position="learned", context_length=8, d_model=16, n_heads=2, n_layers=1, randomize_positions=3)).train()
    ids = torch.randint(0, 100, (1, 8))
    model.positions.draw_positions(8)
    added = model._embed(ids) - model.token_embedding(ids)
    torch.testing.assert_close(added[0], model.position_embedding.weight[model.positions.drawn], rtol=0, atol=1e-7)


@pytest.mark.parametrize("position", ["alibi", "t5", "fire", "none"])
def test_randomized_positions_need_a_scheme_that_reads_positions(position):
    with pytest.raises(ValueError, match=f"randomize_positions=2 needs a scheme that reads positions .*not position='{position}'"):
        DecoderConfig(position=position, randomize_positions=2)


def test_the_option_is_declared_once_and_reaches_the_model():
    from octlm.cli import build_parser, options_from
    from octlm.declare import Resume
    from octlm.train.options import TrainOptions
    from octlm.train.resume import resume_policy

    args = build_parser().parse_args(["train", "--position", "rope", "--randomize-positions", "4"])
    opts = options_from(args, TrainOptions)
    assert opts.model_config(100).randomize_positions == 4
    assert resume_policy()["randomize_positions"] is Resume.FIXED
