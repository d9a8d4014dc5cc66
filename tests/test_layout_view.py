"""What the page gets of a run's layer layout: each layer's scheme, window and settings, and window layers' maps.

The layers are checked against values written out by hand from the layout
string (and the config's defaults); a window layer's maps against the
definition of the window itself, query ``i`` sees key ``j`` only when
``i - W < j <= i``, on the bytes the page unpacks.
"""

from __future__ import annotations

import base64

import numpy as np
import torch

from octlm import Decoder, DecoderConfig
from octlm.inspect.attention_view import layout_view, run_attention

SMALL = {"vocab_size": 64, "d_model": 16, "n_heads": 2, "context_length": 16, "dropout": 0.0}


class Labels:
    """The one tokenizer method :func:`run_attention` asks (its hover labels)."""

    def token_str(self, i: int) -> str:
        return f"t{i}"


def test_a_run_without_a_layout_has_no_layout_view():
    assert layout_view(DecoderConfig(**SMALL, n_layers=2, position="rope")) is None


def test_each_layer_with_the_defaults_it_runs_under():
    config = DecoderConfig(
        **SMALL, n_layers=4, position="rope", rope_theta=10000.0, layers="w8*2 none/logn rope/theta500/qknorm"
    )
    assert layout_view(config) == [
        {
            "layer": 0,
            "position": "rope",
            "window": 8,
            "rope_theta": 10000.0,
            "log_scale": False,
            "qk_norm": False,
            "description": "rope, window 8",
        },
        {
            "layer": 1,
            "position": "rope",
            "window": 8,
            "rope_theta": 10000.0,
            "log_scale": False,
            "qk_norm": False,
            "description": "rope, window 8",
        },
        {
            "layer": 2,
            "position": "none",
            "window": None,
            "rope_theta": None,
            "log_scale": True,
            "qk_norm": False,
            "description": "none, global, log-scaled queries",
        },
        {
            "layer": 3,
            "position": "rope",
            "window": None,
            "rope_theta": 500.0,
            "log_scale": False,
            "qk_norm": True,
            "description": "rope, global, base 500, QK-norm",
        },
    ]


def test_model_wide_settings_reach_every_layer():
    """--qk-norm and --attention-scale log apply to the layers that do not say otherwise."""
    config = DecoderConfig(
        **SMALL, n_layers=2, position="alibi", qk_norm=True, attention_scale="log", layers="w4 alibi/noqknorm"
    )
    view = layout_view(config)
    assert [(v["qk_norm"], v["log_scale"], v["rope_theta"]) for v in view] == [(True, True, None), (False, True, None)]


def lower_triangles(view: dict, layers: int, heads: int) -> np.ndarray:
    """The quantised maps of one length as [layer, head, query, key] probabilities (0 above the diagonal)."""
    n = view["side"]
    raw = np.frombuffer(base64.b64decode(view["maps"]), dtype=np.uint8).reshape(layers, heads, -1)
    maps = np.zeros((layers, heads, n, n))
    rows, cols = np.tril_indices(n)
    maps[..., rows, cols] = (raw / 255.0) ** 2
    return maps


def test_a_window_layers_maps_show_only_its_band():
    """At 1x, 2x and 4x T, a window layer puts nothing on keys W or more back; the global layer does."""
    torch.manual_seed(0)
    W = 4
    config = DecoderConfig(**SMALL, n_layers=3, position="rope", layers=f"w{W}*2 none")
    model = Decoder(config).eval()
    val = np.arange(200) % config.vocab_size
    view = run_attention(model, val, Labels())
    for entry in view["lengths"]:
        L = entry["length"]
        assert entry["block"] == 1  # 64 tokens or fewer: unpooled, so a cell is one (query, key) pair
        maps = lower_triangles(entry, 3, 2)
        i, j = np.meshgrid(np.arange(L), np.arange(L), indexing="ij")
        outside = j <= i - W
        band = (i - W < j) & (j <= i)
        assert np.all(maps[:2][..., outside] == 0), L
        # Each query's whole unit of attention lies inside its band (up to the quantisation, 1/255 a cell at most).
        assert np.allclose(np.where(band, maps[:2], 0).sum(-1), 1, atol=W / 255), L
        assert maps[2][..., outside].sum() > 0.1 * L, L  # the global layer reaches further back
