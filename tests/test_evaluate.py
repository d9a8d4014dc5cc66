"""Validation metrics against a direct computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.data.tokenizer import Tokenizer
from octlm.train.evaluate import evaluate, stratified, stratified_bpb_se


def test_bits_per_byte_matches_direct_computation(shakespeare):
    text = shakespeare.read_text(encoding="utf-8")
    tokenizer = Tokenizer.train([text[:50_000]], vocab_size=300)
    stream = np.array(tokenizer.encode(text[50_000:52_000]), dtype=np.uint16)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=300, context_length=16, d_model=32, n_heads=2, n_layers=1))
    result = evaluate(model, stream, tokenizer.bytes_per_token, 16, batch_size=5)

    n_blocks = (len(stream) - 1) // 16
    nats = 0.0
    with torch.no_grad():
        for b in range(n_blocks):
            block = torch.tensor(stream[b * 16 : b * 16 + 17], dtype=torch.long)
            logp = torch.log_softmax(model(block[None, :-1])[0].double(), dim=-1)
            nats -= logp[torch.arange(16), block[1:]].sum().item()
    scored = stream[1 : n_blocks * 16 + 1].tolist()
    n_bytes = len(tokenizer.decode(scored).encode("utf-8"))  # ASCII text: token edges are char edges
    assert result.tokens == n_blocks * 16 and result.bytes == n_bytes
    assert result.loss == pytest.approx(nats / (n_blocks * 16), rel=1e-5)
    assert result.bpb == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(result.loss), rel=1e-9)


def test_a_stratified_draw_takes_one_block_from_each_equal_stretch():
    for n, k in [(100, 3), (3657, 512), (10, 10), (7, 6)]:
        picked = stratified(n, k)
        edges = np.linspace(0, n, k + 1).round()
        assert len(picked) == k and np.all(picked >= edges[:-1]) and np.all(picked < edges[1:])
        assert np.array_equal(picked, stratified(n, k))  # the same blocks at every evaluation of a run
    assert stratified(5, None).tolist() == stratified(5, 9).tolist() == [0, 1, 2, 3, 4]
    assert not np.array_equal(stratified(10_000, 50, seed=0), stratified(10_000, 50, seed=1))


def test_the_stated_error_covers_the_estimates_spread_and_centres_on_the_whole():
    """Against the sampling distribution itself: 2,000 stratified draws from a population of blocks whose difficulty
    drifts along the corpus (files differ) and varies within it."""
    rng = np.random.default_rng(7)
    population = 3000
    nbytes = rng.integers(200, 500, size=population).astype(float)
    drift = 1.0 + 0.5 * np.sin(np.linspace(0, 12, population)) + 0.3 * (np.arange(population) // 250 % 2)
    nats = nbytes * drift * rng.gamma(4.0, 0.25, size=population)
    whole = nats.sum() / nbytes.sum() / math.log(2)
    estimates, errors = [], []
    for seed in range(2000):
        picked = stratified(population, 64, seed=seed)
        estimates.append(nats[picked].sum() / nbytes[picked].sum() / math.log(2))
        errors.append(stratified_bpb_se(nats[picked], nbytes[picked], population))
    estimates, errors = np.array(estimates), np.array(errors)
    spread = float(estimates.std())
    assert abs(estimates.mean() - whole) < 0.1 * spread  # no bias worth the name (the ratio's is O(1/k))
    # collapsed strata overstate the error where neighbouring strata differ; it is still the spread's size
    assert 0.85 * spread < math.sqrt(np.mean(errors**2)) < 1.2 * spread  # measured 1.00
    covered = np.mean(np.abs(estimates - whole) <= 2 * errors)
    assert 0.9 <= covered  # +-2 standard errors hold the whole split's figure about 95% of the time
    assert stratified_bpb_se(nats, nbytes, population) == 0.0  # the whole split: no sampling error
    assert stratified_bpb_se(nats[:1], nbytes[:1], population) is None  # one block has no spread: no error to state


@pytest.mark.parametrize("max_blocks, batch_size", [(None, 5), (7, 3), (64, 32)])
def test_progress_counts_every_scored_block_once(max_blocks, batch_size):
    """The final evaluation's bar (issue 25: 300,000 blocks of a GB's split) must reach exactly the blocks scored."""
    model = Decoder(DecoderConfig(vocab_size=300, context_length=16, d_model=32, n_heads=2, n_layers=1))
    stream = np.random.default_rng(0).integers(0, 300, size=16 * 40 + 1).astype(np.uint16)
    done = []
    result = evaluate(
        model,
        stream,
        np.ones(300, dtype=np.int64),
        16,
        batch_size=batch_size,
        max_blocks=max_blocks,
        progress=done.append,
    )
    assert sum(done) == result.blocks == min(40, max_blocks or 40)
    assert max(done) <= batch_size
    assert (result.bpb_se > 0) == (result.blocks < 40)  # an error is stated for a sample, none for the whole split


def test_evaluate_needs_a_block():
    model = Decoder(DecoderConfig(vocab_size=300, context_length=16, d_model=32, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="fewer than one block"):
        evaluate(model, np.zeros(10, dtype=np.uint16), np.ones(300, dtype=np.int64), 16)


def test_per_position_totals_match_direct_computation(shakespeare):
    text = shakespeare.read_text(encoding="utf-8")
    tokenizer = Tokenizer.train([text[:50_000]], vocab_size=300)
    stream = np.array(tokenizer.encode(text[50_000:51_000]), dtype=np.uint16)
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(vocab_size=300, context_length=8, d_model=32, n_heads=2, n_layers=1, position="alibi")
    )
    result = evaluate(model, stream, tokenizer.bytes_per_token, 24, batch_size=3, per_position=True)
    assert "val_position_nats" not in result.as_dict()
    n_blocks = (len(stream) - 1) // 24
    nats, nbytes = np.zeros(24), np.zeros(24, dtype=np.int64)
    with torch.no_grad():
        for b in range(n_blocks):
            block = torch.tensor(stream[b * 24 : b * 24 + 25], dtype=torch.long)
            logp = torch.log_softmax(model(block[None, :-1])[0].double(), dim=-1)
            nats -= logp[torch.arange(24), block[1:]].numpy()
            nbytes += [len(tokenizer.decode([t]).encode("utf-8")) for t in block[1:].tolist()]
    np.testing.assert_allclose(result.position_nats, nats, rtol=1e-5)
    assert result.position_bytes == nbytes.tolist()
    assert result.loss == pytest.approx(nats.sum() / (24 * n_blocks), rel=1e-5)


# -- the sliding-window reading (issue 22) -----------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from octlm.model.positions import SCHEMES  # noqa: E402
from octlm.train.evaluate import evaluate_sliding, sliding_windows  # noqa: E402

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


@given(n=st.integers(1, 400), length=st.integers(1, 64), stride_fraction=st.floats(0.0, 1.0))
def test_every_target_is_scored_once_and_sees_at_least_length_minus_stride_tokens(n, length, stride_fraction):
    stride = max(1, round(stride_fraction * length))
    if n < length:
        with pytest.raises(ValueError, match="needs at least"):
            sliding_windows(n, length, stride)
        return
    starts, first = sliding_windows(n, length, stride)
    scored = np.zeros(n, dtype=int)
    for start, skip in zip(starts, first, strict=True):
        assert 0 <= start and start + length <= n
        scored[start + skip : start + length] += 1
        if start > 0:  # past the first window: target at window position p is predicted from p + 1 tokens
            assert skip + 1 >= length - stride + 1
    assert (scored == 1).all()


def _small_model(position: str, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(
        DecoderConfig(vocab_size=40, context_length=8, d_model=16, n_heads=2, n_layers=1, position=position)
    ).eval()


def _stream(n: int) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 40, n + 1).astype(np.uint16)


@pytest.mark.parametrize("position", sorted(SCHEMES))
def test_a_stride_of_the_whole_window_is_the_non_overlapping_reading(position):
    model, stream, nbytes = _small_model(position), _stream(8 * 7), np.arange(1, 41)
    blocks = evaluate(model, stream, nbytes, 8, batch_size=3)
    slid = evaluate_sliding(model, stream, nbytes, 8, 8, batch_size=3)
    assert (slid.tokens, slid.bytes, slid.blocks) == (blocks.tokens, blocks.bytes, blocks.blocks)
    # float32 losses (octlm.model.cross_entropy), summed in another order: equal to float32 rounding
    assert slid.loss == pytest.approx(blocks.loss, rel=1e-5) and slid.bpb == pytest.approx(blocks.bpb, rel=1e-5)


@pytest.mark.parametrize(
    "position", sorted(name for name, cls in SCHEMES.items() if not cls.has_table_limit) + ["learned"]
)
def test_a_stride_of_one_scores_each_target_after_the_window_before_it(position):
    # Recomputed token by token: target j is predicted from the (at most) `length` tokens that end at j, each its own
    # forward pass.
    length = 8 if position == "learned" else 6
    model, stream, nbytes = _small_model(position), _stream(23), np.arange(1, 41)
    slid = evaluate_sliding(model, stream, nbytes, length, 1, batch_size=4)
    nats, n_bytes = 0.0, 0
    with torch.no_grad():
        for j in range(len(stream) - 1):
            start = max(0, j + 1 - length)
            context = torch.tensor(stream[start : j + 1], dtype=torch.long)[None]
            logp = torch.log_softmax(model(context)[0, -1], dim=-1)
            nats -= float(logp[int(stream[j + 1])])
            n_bytes += int(nbytes[stream[j + 1]])
    assert slid.tokens == len(stream) - 1 and slid.bytes == n_bytes
    assert slid.loss == pytest.approx(nats / slid.tokens, rel=1e-5)
    assert slid.bpb == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-5)


@pytest.mark.parametrize("stride", [None, 3])  # None: the non-overlapping reading
def test_bits_per_byte_leaves_out_the_end_of_text_targets_and_the_loss_keeps_them(stride):
    # Issue 21: <|endoftext|> stands for no bytes, so its loss is no part of the text's bits per byte (as The Pile and
    # nanochat count);
    # the loss per token, what training minimises, keeps every target.
    eot, length = 0, 8
    stream = np.random.default_rng(1).integers(1, 40, length * 6 + 1).astype(np.uint16)
    stream[::5] = eot  # many short documents
    nbytes = np.arange(40)  # token 0, the marker, stands for no bytes
    model = _small_model("rope")
    if stride is None:
        result = evaluate(model, stream, nbytes, length, batch_size=4, per_position=True)
        starts, first = np.arange(0, len(stream) - 1, length), np.zeros(6, dtype=int)
    else:
        result = evaluate_sliding(model, stream, nbytes, length, stride)
        # 48 targets, windows of 8 every 3, written out by hand: each scores from where the one before ended
        # (start + 8), and the last is pulled back from 42 to 40 to end at the last target (index 47).
        starts = [*range(0, 40, 3), 40]
        first = [0, *[5] * 13, 39 + 8 - 40]
    all_nats, text_nats, n_bytes = 0.0, 0.0, 0
    with torch.no_grad():
        for start, skip in zip(starts, first, strict=True):
            logp = torch.log_softmax(
                model(torch.tensor(stream[start : start + length], dtype=torch.long)[None])[0], dim=-1
            )
            for p in range(skip, length):
                target = int(stream[start + p + 1])
                nats = -float(logp[p, target])
                all_nats += nats
                text_nats += nats if nbytes[target] > 0 else 0.0
                n_bytes += int(nbytes[target])
    assert (stream[1:] == eot).sum() > 5 and result.bytes == n_bytes
    assert result.loss == pytest.approx(all_nats / (len(stream) - 1), rel=1e-5)
    assert result.bpb == pytest.approx(text_nats / math.log(2) / n_bytes, rel=1e-5)
    assert result.bpb < all_nats / math.log(2) / n_bytes  # what counting the marker would have said


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_a_stride_of_half_the_window_against_windows_written_out_by_hand(position):
    """22 targets, windows of 8 every 4: the layout and every target's context, written out without sliding_windows,
    give the reading's windows, loss and bits per byte."""
    length, stride = 8, 4
    # (start, first scored window position): 0-7 from window 0, then four new targets per window, and the last window
    # pulled back from 16 to 14 so that it ends at target 21, scoring 20 and 21 (positions 6 and 7).
    hand = [(0, 0), (4, 4), (8, 4), (12, 4), (14, 6)]
    assert [list(a) for a in sliding_windows(22, length, stride)] == [[s for s, _ in hand], [f for _, f in hand]]
    model, stream, nbytes = _small_model(position), _stream(22), np.arange(1, 41)
    slid = evaluate_sliding(model, stream, nbytes, length, stride, batch_size=2)
    # target j (stream[j + 1]) is read from its window's start: its own forward pass of stream[start .. j]
    context_start = [0] * 8 + [4] * 4 + [8] * 4 + [12] * 4 + [14] * 2
    nats, n_bytes = 0.0, 0
    with torch.no_grad():
        for j, start in enumerate(context_start):
            logp = torch.log_softmax(model(torch.tensor(stream[start : j + 1], dtype=torch.long)[None])[0, -1], dim=-1)
            nats -= float(logp[int(stream[j + 1])])
            n_bytes += int(nbytes[stream[j + 1]])
    assert (slid.tokens, slid.blocks, slid.bytes) == (22, 5, n_bytes)
    # float32 losses summed in another order: equal to float32 rounding
    assert slid.loss == pytest.approx(nats / 22, rel=1e-5)
    assert slid.bpb == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-5)
