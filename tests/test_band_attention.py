"""Window layers attend block by block past a size: the same outputs as the whole score matrix, scores that grow with
T x window, and a memory check that counts them (issue 52: two w4 layers took 2,333 MB more at 16,384 tokens)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from octlm import Decoder, DecoderConfig
from octlm.model import band, blocks
from octlm.model.kvcache import KVCache
from octlm.model.positions import SCHEMES
from octlm.model.positions.base import SCORE_BIAS_BYTES

W = 5


def layout_model(position: str, layers: str) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        position=position, vocab_size=60, context_length=96, d_model=32, n_heads=4, n_layers=2, layers=layers
    )
    return Decoder(config).eval()


def models() -> list[str]:
    """Every scheme that a window layer takes, each as ``S/w5 S``."""
    found = []
    for name in SCHEMES:
        try:
            layout_model(name, f"{name}/w{W} {name}")
        except Exception:  # a scheme that adds its signal to the embeddings has no window layer
            continue
        found.append(name)
    return found


def blocked(monkeypatch, on: bool) -> None:
    """Blocks of 7 queries from the first pass on, or never."""
    monkeypatch.setattr(band, "BAND_CELLS", 0 if on else 10**12)
    monkeypatch.setattr(blocks, "band_block", lambda window: 7)


@pytest.mark.parametrize("position", models())
def test_blocked_window_attention_gives_the_whole_matrixs_logits(position, monkeypatch):
    model = layout_model(position, f"{position}/w{W} {position}")
    for module in model.modules():  # FIRE: a threshold below the queries' positions, so the bias reads them
        if hasattr(module, "threshold_scale"):
            module.threshold_scale.data.fill_(1e-3)
    ids = torch.randint(0, 60, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        blocked(monkeypatch, False)
        whole = model(ids)
        blocked(monkeypatch, True)
        torch.testing.assert_close(model(ids), whole, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_a_blocked_pass_on_top_of_a_window_cache_gives_the_full_passs_logits(position, monkeypatch):
    """A 23-token prompt, then 17 tokens in one cached pass (the window cache holds the last W - 1 keys, so keys and
    queries differ in number), against one pass over all 40 without blocks."""
    model = layout_model(position, f"{position}/w{W} {position}")
    ids = torch.randint(0, 60, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        blocked(monkeypatch, False)
        whole = model(ids)
        blocked(monkeypatch, True)
        cache = KVCache(len(model.blocks))
        model(ids[:, :23], cache=cache)
        torch.testing.assert_close(model(ids[:, 23:], offset=23, cache=cache), whole[:, 23:], atol=2e-5, rtol=1e-5)


def test_no_attention_call_of_a_window_layer_holds_more_than_one_block(monkeypatch):
    """The score matrices SDPA gets in the window layers of a long pass: none larger than
    :func:`~octlm.model.band.window_score_cells` (the whole pass's T x T before blocks)."""
    T, seen = 1200, []
    real = F.scaled_dot_product_attention

    def counting(q, k, v, *args, **kwargs):
        seen.append(q.shape[-2] * k.shape[-2])
        return real(q, k, v, *args, **kwargs)

    model = layout_model("rope", f"rope/w{W}*2")
    monkeypatch.setattr(blocks.F, "scaled_dot_product_attention", counting)
    with torch.no_grad():
        model(torch.zeros(1, T, dtype=torch.long))
    assert seen and max(seen) <= band.window_score_cells(T, W) < T * T // 4
    assert band.window_score_cells(T, W) == 256 * (256 + W - 1)


def test_the_memory_check_counts_a_window_layers_blocks_and_a_global_biass_whole_matrix():
    H, T = 4, 16_384
    rope = layout_model("rope", f"rope/w{W} rope").positions
    assert rope.score_bias_bytes(H, T) == SCORE_BIAS_BYTES * H * 256 * (256 + W - 1)  # was 0: nothing refused it
    alibi = layout_model("alibi", f"alibi/w{W} alibi").positions
    assert alibi.score_bias_bytes(H, T) == SCORE_BIAS_BYTES * H * T * T  # the global ALiBi layer's bias
    fox = layout_model("fox", f"fox/w{W} rope").positions  # FoX reads the input: its window layer keeps the matrix
    assert fox.score_bias_bytes(H, T) == SCORE_BIAS_BYTES * H * T * T
    assert rope.score_bias_bytes(H, 64) == SCORE_BIAS_BYTES * H * 64 * 64  # short: one matrix, not blocked
