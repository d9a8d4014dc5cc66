"""T5 bias, FIRE, xPos and randomized positions against formulas written from their papers.

Each reference below is computed entry by entry with Python floats from the
paper's equations, not from octlm's code.
"""

from __future__ import annotations

import math

import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.model.positions import FIREBias, T5RelativeBias, XPosRotation, random_position_schemes
from tests.test_positions import rotate_by_hand

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def t5_bucket(n, num_buckets=32, max_distance=128):
    """Raffel et al. 2020 §2.1 (causal): half the buckets one distance each, the rest log-spaced up to max_distance."""
    exact = num_buckets // 2
    if n < exact:
        return n
    return min(
        exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)), num_buckets - 1
    )


def test_t5_bucket_reference_values():
    # By hand: 16 exact buckets; 20 -> 16 + floor(16 ln 1.25 / ln 8) = 17; 127 -> 31; everything from 128 on: 31.
    assert [t5_bucket(n) for n in (0, 1, 15, 16, 20, 64, 127, 128, 5000)] == [0, 1, 15, 16, 17, 26, 31, 31, 31]


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 20)])
@pytest.mark.parametrize("q_len,k_len,offset", [(40, 40, 0), (1, 300, 299), (5, 9, 4)])
def test_t5_bias_is_the_bucket_row_of_each_head(buckets, max_distance, q_len, k_len, offset):
    torch.manual_seed(0)
    scheme = T5RelativeBias(
        DecoderConfig(position="t5", n_heads=4, t5_num_buckets=buckets, t5_max_distance=max_distance)
    )
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
    hidden = [max(0.0, w * x + b) for w, b in zip(w1, b1, strict=True)]
    w2, b2 = scheme.mlp[2].weight.tolist(), scheme.mlp[2].bias.tolist()
    return [sum(w * h for w, h in zip(row, hidden, strict=True)) + b for row, b in zip(w2, b2, strict=True)]


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


def xpos_score_by_hand(q, k, n, m, gamma=0.4, scale_base=512.0):
    """Sun et al. 2023 §3.2: a query at n and a key at m score sum_i zeta_i ** ((n - m) / scale_base) (RoPE pair i's
    product).

    zeta_i = (i / (d/2) + gamma) / (1 + gamma); q and k are one head's vectors [d], in float64.
    """
    d = q.shape[-1]
    rq, rk = rotate_by_hand(q, n), rotate_by_hand(k, m)
    return sum(
        ((i / (d / 2) + gamma) / (1 + gamma)) ** ((n - m) / scale_base)
        * float(rq[2 * i] * rk[2 * i] + rq[2 * i + 1] * rk[2 * i + 1])
        for i in range(d // 2)
    )


def xpos_scheme():
    return XPosRotation(DecoderConfig(d_model=32, n_heads=2, position="xpos"))


@pytest.mark.parametrize("offset", [0, 7, 900, 50_000, 10**6])
def test_xpos_scores_match_the_paper_at_any_offset(offset):
    g = torch.Generator().manual_seed(offset % 1000)
    q, k = torch.randn(1, 1, 3, 16, generator=g), torch.randn(1, 1, 8, 16, generator=g)
    rq, rk = xpos_scheme().rotate(q, k, offset + 5)  # queries at offset+5.., 8 keys from offset, ending with them
    assert rq.isfinite().all() and rk.isfinite().all()
    scores = rq[0, 0].double() @ rk[0, 0].double().T
    for t in range(3):
        for s in range(8):
            expected = xpos_score_by_hand(q[0, 0, t], k[0, 0, s], offset + 5 + t, offset + s)
            assert scores[t, s].item() == pytest.approx(expected, rel=1e-4, abs=1e-4), (t, s)


def test_xpos_decodes_exactly_with_a_cache_up_to_its_span_and_refuses_past_it():
    from octlm.model.positions.xpos import MAX_SPAN

    scheme, g = xpos_scheme(), torch.Generator().manual_seed(3)
    length = MAX_SPAN - 1
    q, k = torch.randn(1, 1, length + 1, 16, generator=g), torch.randn(1, 1, length + 1, 16, generator=g)
    scheme.start_pass(length, 0, cached=True)
    _, cached_keys = scheme.rotate(q[:, :, :length], k[:, :, :length], 0)  # the prefill fills the cache
    scheme.start_pass(1, length, cached=True)
    rq, rk = scheme.rotate(q[:, :, length:], k[:, :, length:], length)  # one cached step at the last position
    scores = rq[0, 0].double() @ torch.cat((cached_keys, rk), dim=2)[0, 0].double().T
    assert scores.isfinite().all()
    for m in (0, 1, length // 2, length - 100, length - 1, length):
        expected = xpos_score_by_hand(q[0, 0, length], k[0, 0, m], length, m)
        assert scores[0, m].item() == pytest.approx(expected, rel=1e-4, abs=1e-5), m
    with pytest.raises(
        ValueError,
        match=f"xPos: a cached sequence of {MAX_SPAN + 1:,} tokens is longer than the {MAX_SPAN:,} positions",
    ):
        scheme.rotate(q[:, :, :1], k[:, :, :1], MAX_SPAN)
    scheme.start_pass(MAX_SPAN + 1, 0, cached=False)
    with pytest.raises(ValueError, match=f"{MAX_SPAN + 1:,} keys in one pass are more than the {MAX_SPAN:,} positions"):
        scheme.rotate(q[:, :, :1], torch.zeros(1, 1, MAX_SPAN + 1, 16), MAX_SPAN)
    with pytest.raises(ValueError, match="position='xpos' spans at most 32,768 positions"):
        DecoderConfig(position="xpos", context_length=2**14, randomize_positions=4)


#: schemes whose scores depend on the distance between tokens only: the same logits at any offset
RELATIVE_SCHEMES = ["alibi", "cope", "kerple", "none", "prope", "rope", "t5", "xpos"]


@pytest.mark.parametrize(
    "position", ["alibi", "cope", "fire", "kerple", "none", "prope", "rope", "sinusoidal", "t5", "xpos"]
)
def test_every_scheme_is_finite_at_far_offsets_and_relative_ones_give_the_same_logits(position):
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(position=position, vocab_size=50, context_length=32, d_model=32, n_heads=2, n_layers=2)
    ).eval()
    with torch.no_grad():
        for p in model.positions.parameters():
            # CoPE's table starts at zero, where it adds nothing: the logits would agree at any offset whatever the
            # scheme did with the offset. Values make what it encodes count.
            if not p.any():
                p.normal_(0, 0.5)
    ids = torch.randint(0, 50, (1, 24))
    with torch.no_grad():
        near = model(ids)
        for offset in (40_000, 10**6):
            far = model(ids, offset=offset)
            assert far.isfinite().all(), (position, offset)
            if position in RELATIVE_SCHEMES:
                torch.testing.assert_close(
                    far, near, rtol=0, atol=1e-4, msg=lambda m, offset=offset: f"{position} at offset {offset}: {m}"
                )


def passes_positions(model, ids):
    """``model(ids)`` and the positions the pass placed its tokens at (the scheme's draw, else ``0 .. T - 1``)."""
    seen, end_pass = [], model.positions.end_pass
    model.positions.end_pass = lambda: (seen.append(model.positions.drawn), end_pass())
    try:
        out = model(ids)
    finally:
        del model.positions.end_pass
    return out, torch.arange(ids.shape[1]) if seen[0] is None else seen[0]


def is_sorted_subset(drawn, length, of):
    return (
        len(drawn) == length
        and len(set(drawn.tolist())) == length
        and torch.equal(drawn, drawn.sort().values)
        and 0 <= drawn.min()
        and drawn.max() < of
    )


@pytest.mark.parametrize("position", random_position_schemes())
def test_randomized_positions_are_drawn_in_training_and_at_test_time(position):
    config = DecoderConfig(
        position=position, context_length=16, d_model=32, n_heads=2, n_layers=1, vocab_size=40, randomize_positions=4
    )
    model = Decoder(config)
    if position == "learned":
        assert model.position_embedding.num_embeddings == 64 and model.max_length == 64
    ids = torch.randint(0, 40, (2, 16))
    torch.manual_seed(5)
    trained, drawn = passes_positions(model.train(), ids)
    assert is_sorted_subset(drawn, 16, 64) and drawn.max() >= 16  # P(all 16 below 16 of 64) is negligible
    torch.manual_seed(5)
    assert torch.equal(passes_positions(model, ids)[0], trained)  # the seed reproduces the draw
    # At test time too (Ruoss et al. 2023): a sorted subset of the training range, one per length, not 0..T-1,
    # drawn without touching torch's generator; from the range's length on, 0 .. T - 1.
    model.eval()
    state = torch.get_rng_state()
    for length in (1, 9, 16, 63):
        first, tested = passes_positions(model, ids[:1, :1].repeat(1, length))
        assert is_sorted_subset(tested, length, 64) and not torch.equal(tested, torch.arange(length)), length
        assert torch.equal(passes_positions(model, ids[:1, :1].repeat(1, length))[0], first)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(passes_positions(model, torch.zeros(1, 64, dtype=torch.long))[1], torch.arange(64))
    # the explorer asks the scheme outside a pass: positions 0, 1, 2, ...
    assert torch.equal(model.positions.position_ids(16, 0, ids.device), torch.arange(16))


@pytest.mark.parametrize("position", random_position_schemes())
def test_a_model_without_randomization_trains_shorter_sequences_at_0_1_2(position):
    # The task study trains sequences shorter than the context; they drew random positions when only F > 1 should.
    model = Decoder(
        DecoderConfig(position=position, context_length=16, d_model=32, n_heads=2, n_layers=1, vocab_size=40)
    ).train()
    for length in (5, 16):
        assert torch.equal(passes_positions(model, torch.randint(0, 40, (2, length)))[1], torch.arange(length)), length


def test_a_randomized_model_samples_the_same_with_and_without_a_cache():
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(
            position="rope", context_length=16, d_model=32, n_heads=2, n_layers=1, vocab_size=40, randomize_positions=4
        )
    ).eval()
    prompt = torch.randint(0, 40, (1, 3))
    assert torch.equal(model.generate(prompt, 70), model.generate(prompt, 70, use_cache=False))


def test_randomized_rope_rotates_by_the_drawn_positions():
    model = Decoder(
        DecoderConfig(position="rope", context_length=8, d_model=32, n_heads=2, n_layers=1, randomize_positions=10)
    ).train()
    torch.manual_seed(0)
    model.positions.draw_positions(8)
    q = torch.randn(1, 1, 8, 16)
    rq, _ = model.positions.rotate(q, q, 0)
    for t, p in enumerate(model.positions.drawn.tolist()):
        torch.testing.assert_close(rq[:, :, t].double(), rotate_by_hand(q[:, :, t], p), atol=1e-5, rtol=1e-5)


def test_randomized_learned_embedding_adds_the_drawn_rows():
    model = Decoder(
        DecoderConfig(position="learned", context_length=8, d_model=16, n_heads=2, n_layers=1, randomize_positions=3)
    ).train()
    ids = torch.randint(0, 100, (1, 8))
    model.positions.draw_positions(8)
    added = model._embed(ids) - model.token_embedding(ids)
    torch.testing.assert_close(added[0], model.position_embedding.weight[model.positions.drawn], rtol=0, atol=1e-7)


@pytest.mark.parametrize("position", ["none", "cope"])  # nothing in them reads a token's index
def test_randomized_positions_need_a_scheme_that_reads_positions(position):
    with pytest.raises(
        ValueError, match=f"randomize_positions=2 needs a scheme that reads positions .*not position='{position}'"
    ):
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
