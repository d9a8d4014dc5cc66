"""The streaming cache (StreamingLLM, Xiao et al. 2023): sinks and a recent window, placed at positions within the
cache.

Each test checks against something written out here: attention by hand over the kept keys, the ordinary cache, the
one-token-at-a-time decoder.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.model import Decoder
from octlm.model.blocks import CausalSelfAttention, LayerPass
from octlm.model.config import DecoderConfig
from octlm.model.kvcache import KVCache
from octlm.model.positions import SCHEMES, build, evicting_schemes, facts_of
from octlm.model.streaming import SinkWindowCache, StreamingCache, check_streaming, stream_logits
from tests.conftest import TINY_MODEL


def tiny(position: str, context: int = 16, **extra) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab_size=40, d_model=16, n_heads=2, n_layers=2, context_length=context, position=position, **extra
    )
    return Decoder(config).eval()


def kept(t: int, sinks: int, window: int) -> list[int]:
    """The text positions token ``t`` attends to: the first ``sinks`` and the last ``window``, itself included."""
    return sorted(set(range(min(sinks, t + 1))) | set(range(max(0, t - window + 1), t + 1)))


def rotate_by_hand(x: torch.Tensor, position: int, theta: float = 10000.0) -> torch.Tensor:
    """RoPE of one vector [D] at ``position``, interleaved pairs (Su et al. 2021, eq. 34)."""
    d = x.shape[-1]
    out = x.clone().double()
    for i in range(d // 2):
        angle = position * theta ** (-2 * i / d)
        a, b = float(x[2 * i]), float(x[2 * i + 1])
        out[2 * i], out[2 * i + 1] = (
            a * math.cos(angle) - b * math.sin(angle),
            a * math.sin(angle) + b * math.cos(angle),
        )
    return out


def attention_by_hand(attn: CausalSelfAttention, x: torch.Tensor, sinks: int, window: int, position: str):
    """Each token's output [T, C] from its kept keys at positions ``0 .. len - 1``, the query last: RoPE rotates
    both at those positions, ALiBi adds ``-m_h (i - j)`` with ``m_h = 2 ** (-8 h / H)`` (Press et al. 2022, §3)."""
    T, C = x.shape
    H, D = attn.n_heads, C // attn.n_heads
    q, k, v = (attn.qkv(x).double().view(T, 3, H, D)[:, n] for n in range(3))  # [T, H, D] each
    out = torch.zeros(T, H, D, dtype=torch.float64)
    for t in range(T):
        seen = kept(t, sinks, window)
        last = len(seen) - 1
        for h in range(H):
            scores = []
            for p, s in enumerate(seen):
                if position == "rope":
                    score = rotate_by_hand(q[t, h], last) @ rotate_by_hand(k[s, h], p)
                else:
                    score = q[t, h] @ k[s, h]
                score = score / math.sqrt(D)
                if position == "alibi":
                    score = score - 2 ** (-8 * (h + 1) / H) * (last - p)
                scores.append(score)
            weights = torch.softmax(torch.stack(scores), dim=0)
            out[t, h] = sum(w * v[s, h] for w, s in zip(weights, seen, strict=True))
    return attn.proj(out.reshape(T, C).float())


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize(("sinks", "window"), [(0, 3), (2, 3), (4, 5), (1, 1)])
def test_each_step_attends_to_the_sinks_and_window_at_positions_within_the_cache(position, sinks, window):
    config = DecoderConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, context_length=16, position=position)
    torch.manual_seed(1)
    attn, scheme = CausalSelfAttention(config).eval(), build(config).eval()
    x = torch.randn(14, 16)
    cache = SinkWindowCache(sinks, window)
    with torch.no_grad():
        steps = [attn(x[None, t : t + 1], LayerPass(scheme, offset=t, cache=cache))[0, 0] for t in range(len(x))]
        expected = attention_by_hand(attn, x, sinks, window, position)
    torch.testing.assert_close(torch.stack(steps), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", evicting_schemes())
def test_a_window_over_the_whole_sequence_is_the_ordinary_cache(position):
    model, ids = tiny(position), torch.randint(0, 40, (2, 14))
    streaming, ordinary = StreamingCache(2, 0, 16), KVCache(2)
    with torch.no_grad():
        for t in range(ids.shape[1]):
            got = model(ids[:, t : t + 1], offset=t, cache=streaming)
            want = model(ids[:, t : t + 1], offset=t, cache=ordinary)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        whole = torch.cat(list(stream_logits(model, ids, StreamingCache(2, 0, 16), 16)), dim=1)  # one causal pass
        torch.testing.assert_close(whole, model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", evicting_schemes())
@pytest.mark.parametrize("sinks", [0, 3])
def test_chunks_give_the_logits_of_one_token_at_a_time(position, sinks):
    model, ids, cache = tiny(position), torch.randint(0, 40, (2, 45)), StreamingCache(2, sinks, 5)
    with torch.no_grad():
        one = torch.cat([model(ids[:, t : t + 1], offset=t, cache=cache) for t in range(ids.shape[1])], dim=1)
        for chunk in (5, 7, 45):
            chunked = torch.cat(list(stream_logits(model, ids, StreamingCache(2, sinks, 5), chunk)), dim=1)
            torch.testing.assert_close(chunked, one, atol=1e-5, rtol=1e-5)


@given(st.integers(0, 4), st.integers(1, 6), st.integers(1, 9), st.integers(1, 60))
def test_pieces_fill_the_cache_then_stay_within_the_chunk(sinks, window, chunk, n):
    cache = StreamingCache(1, sinks, window)
    pieces = cache.pieces(n, chunk)
    assert sum(pieces) == n and all(p >= 1 for p in pieces) and all(p <= chunk for p in pieces[1:])
    held = 0
    for p in pieces:  # each pass fits the cache whole or starts on a full one (streamed_attention's two cases)
        assert held + p <= sinks + window or held == sinks + window - 1
        held = min(held + p, sinks + window - 1)


def test_memory_stays_within_sinks_and_window_however_long_the_stream():
    model, sinks, window = tiny("rope", context=12), 4, 8
    cache, held = StreamingCache(2, sinks, window), []
    with torch.no_grad():
        for t, token in enumerate(torch.randint(0, 40, (300,))):
            model(token.view(1, 1), offset=t, cache=cache)
            held.append(max(layer.keys.shape[-2] for layer in cache.layers))
    assert max(held) == sinks + window - 1 and held[-1] == sinks + window - 1
    assert cache.length == 300


def test_the_sinks_are_the_stream_s_first_keys():
    cache = SinkWindowCache(2, 3)
    for t in range(10):
        cache.extend(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
    assert cache.keys.flatten().tolist() == [0.0, 1.0, 8.0, 9.0]


def test_generate_decodes_with_a_streaming_cache_as_with_the_ordinary_one_inside_the_window():
    model, prompt = tiny("alibi"), torch.randint(0, 40, (1, 3))
    ordinary = model.generate(prompt, 10)
    assert torch.equal(model.generate(prompt, 10, cache=StreamingCache(2, 0, 16)), ordinary)
    assert model.generate(prompt, 30, cache=StreamingCache(2, 4, 8)).shape == (1, 33)


@pytest.mark.parametrize("position", [name for name in SCHEMES if not facts_of(name).evicts_cache])
def test_a_scheme_whose_cache_cannot_evict_is_refused_with_its_reason(position):
    with pytest.raises(ValueError, match="cannot evict") as err:
        check_streaming(tiny(position), 4, 8)
    assert facts_of(position).eviction_refusal in str(err.value) and "\n" not in str(err.value)
    # each says its own why, not the default that names the flag it left unset
    assert "evicts_cache" not in facts_of(position).eviction_refusal


@pytest.mark.parametrize(
    ("extra", "sinks", "window", "match"),
    [
        ({}, 0, 17, "sinks \\+ window <= 16"),
        ({}, 4, 13, "4 sinks \\+ a window of 13 = 17 tokens"),  # the cache's positions would run to 16, past T
        ({}, 0, 0, "from 1 to 16"),
        ({}, -1, 4, "0 or more"),
        ({"randomize_positions": 4}, 0, 8, "randomized"),
        ({"document_mask": True}, 0, 8, "document"),
        ({"attention_scale": "log"}, 0, 8, "attention scale"),
    ],
)
def test_bad_combinations_are_refused_in_one_line(extra, sinks, window, match):
    with pytest.raises(ValueError, match=match) as err:
        check_streaming(tiny("rope", **extra), sinks, window)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("position", "extra", "sinks", "window", "match"),
    [
        ("rope", {"attention_sinks": True}, 0, 8, "learned sinks"),  # its logits would silently differ
        ("fox", {}, 0, 8, "FoX's cache cannot evict"),
        ("pathattn", {}, 0, 8, "PaTH's cache cannot evict"),
        ("rope", {}, 4, 13, "sinks \\+ window <= 16"),
    ],
)
def test_a_model_given_a_streaming_cache_it_cannot_use_refuses_it_on_the_first_pass(
    position, extra, sinks, window, match
):
    """The Python API checks what ``octlm sample --cache-window`` checks: a StreamingCache handed straight to the
    model or to generate is refused before any key is stored, not decoded wrongly or failing inside the cache."""
    model = tiny(position, **extra)
    for call in (
        lambda cache: model(torch.tensor([[1, 2, 3]]), cache=cache),
        lambda cache: model.generate(torch.tensor([[1, 2, 3]]), 2, cache=cache),
    ):
        cache = StreamingCache(2, sinks, window)
        with pytest.raises(ValueError, match=match):
            call(cache)
        assert cache.length == 0 and all(layer.keys is None for layer in cache.layers)


@pytest.mark.parametrize(("sinks", "window"), [(0, 0), (-1, 8), (2, 2.5), (True, 8)])
def test_a_streaming_cache_of_no_size_is_refused_when_made(sinks, window):
    with pytest.raises(ValueError, match="give an integer >="):
        StreamingCache(2, sinks, window)


def test_streaming_bpb_sums_the_one_token_decoder_s_losses():
    from octlm.studies.length.readings.streams import streaming_bpb

    model, tokens = tiny("rope"), np.random.default_rng(0).integers(0, 40, 61)
    nbytes = np.arange(40) % 3  # tokens 0, 3, 6, ... stand for no bytes (as <|endoftext|>)
    result = streaming_bpb(model, tokens, nbytes, 2, 6, chunk=4)
    ids, cache, nats = torch.from_numpy(tokens)[None], StreamingCache(2, 2, 6), 0.0
    with torch.no_grad():
        for t in range(60):
            logits = model(ids[:, t : t + 1], offset=t, cache=cache)[0, 0].double()
            if nbytes[tokens[t + 1]]:
                nats -= float(torch.log_softmax(logits, -1)[tokens[t + 1]])
    assert result.bpb == pytest.approx(nats / math.log(2) / nbytes[tokens[1:]].sum(), rel=1e-5)
    assert result.blocks == 10 and sum(result.block_bytes) == result.bytes
    assert sum(result.block_nats) == pytest.approx(nats, rel=1e-5)


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory, small_corpus):
    from octlm.cli import main

    out = tmp_path_factory.mktemp("runs") / "rope"
    args = ["train", "--text", str(small_corpus), "--out", str(out), "--position", "rope", "--context-length", "16"]
    assert main([*args, *TINY_MODEL, "--quiet"]) == 0
    return out


def _files(folder):
    return sorted((p.relative_to(folder).as_posix(), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_sample_decodes_with_sinks_and_a_window(rope_run, capsys):
    from octlm.cli import main

    base = ["sample", "--run", str(rope_run), "--prompt", "ROMEO:", "--temperature", "0", "--json"]
    assert main([*base, "--max-new-tokens", "6"]) == 0
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    assert main([*base, "--max-new-tokens", "6", "--cache-window", "16"]) == 0
    windowed = capsys.readouterr().out.strip().splitlines()[-1]
    assert '"cache_window": 16' in windowed and '"cache_sinks": 0' in windowed
    assert plain.split('"samples"')[1].split("]")[0] == windowed.split('"samples"')[1].split("]")[0]
    assert main([*base, "--max-new-tokens", "60", "--cache-window", "8", "--cache-sinks", "4"]) == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cache-sinks", "4"], "--cache-sinks 4 needs --cache-window W"),
        (["--cache-window", "17"], "--cache-window 17: the cache holds 0 sinks + a window of 17 = 17 tokens"),
        (["--cache-window", "8", "--no-cache"], "--cache-window decodes with a cache and --no-cache without one"),
        (["--cache-window", "0"], "--cache-window must be"),
        # issue 52, point 8: accepted in silence before, though the cache keeps every position below T
        (
            ["--cache-window", "12", "--cache-sinks", "4", "--rope-scaling", "yarn", "--rope-factor", "4"],
            "--rope-scaling yarn with --cache-window: the streaming cache keeps every position below the 16 tokens",
        ),
        (["--cache-window", "8", "--rope-scaling", "dynamic-ntk"], "--rope-scaling dynamic-ntk with --cache-window"),
    ],
)
def test_sample_refuses_bad_cache_flags_in_one_line_writing_nothing(rope_run, capsys, flags, message):
    from octlm.cli import main

    before = _files(rope_run)
    assert main(["sample", "--run", str(rope_run), *flags]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert _files(rope_run) == before


def test_sample_refuses_a_window_for_a_learned_table(trained_run, capsys):
    from octlm.cli import main

    before = _files(trained_run)
    assert main(["sample", "--run", str(trained_run), "--cache-window", "8", "--cache-sinks", "4"]) == 1
    err = capsys.readouterr().err
    assert (
        "the learned table's cache cannot evict: it adds position to the token vectors" in err
        and len(err.strip().splitlines()) == 1
    )
    assert _files(trained_run) == before


def test_stream_segments_read_each_length_as_a_stream_of_its_own():
    from octlm.studies.length.readings.streams import stream_segments, streaming_bpb

    # T = 10: two sinks and a window of 8 keep the cache's positions within it
    model, tokens = tiny("alibi", context=10), np.random.default_rng(1).integers(0, 40, (2, 41))
    nbytes = 1 + np.arange(40) % 4
    for sinks in (0, 2):
        nats, got = stream_segments(model, tokens, nbytes, sinks, 10 - sinks, 5)
        assert nats.shape == got.shape == (2, 8)
        for k in range(2):
            for length in (5, 20, 40):  # a stream of its own, as long as the first segments
                alone = streaming_bpb(model, tokens[k, : length + 1], nbytes, sinks, 10 - sinks)
                assert nats[k, : length // 5].sum() / math.log(2) / got[k, : length // 5].sum() == pytest.approx(
                    alone.bpb, rel=1e-5
                )
                assert got[k, : length // 5].sum() == alone.bytes == nbytes[tokens[k, 1 : length + 1]].sum()
    with pytest.raises(ValueError, match="do not split into segments of 6"):
        stream_segments(model, tokens, nbytes, 0, 8, 6)


def test_a_layout_streams_when_every_layer_can_and_its_window_layers_are_refused():
    model, ids = tiny("rope", layers="rope alibi"), torch.randint(0, 40, (1, 30))
    cache = StreamingCache(2, 2, 4)
    with torch.no_grad():
        one = torch.cat([model(ids[:, t : t + 1], offset=t, cache=cache) for t in range(30)], dim=1)
        chunked = torch.cat(list(stream_logits(model, ids, StreamingCache(2, 2, 4), 4)), dim=1)
    torch.testing.assert_close(chunked, one, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="window layers keep their own cache"):
        check_streaming(tiny("rope", layers="rope/w4 none"), 0, 8)
