"""The length study's attention record and tables: many short windows read in batches give each window's own
statistics, and the tables by layer show n/a where a layer's scheme has no logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.inspect.attention_statistics import attention_entropy
from octlm.model.attention_maps import record_attention
from octlm.studies.length import attention


def model(position: str = "rope", layers: str = "") -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        position=position, vocab_size=50, context_length=16, d_model=32, n_heads=4, n_layers=2, layers=layers
    )
    return Decoder(config).eval()


@pytest.mark.parametrize("per_batch_cells", [8 * 8, 3 * 8 * 8, attention.ATTENTION_BATCH_CELLS])
def test_windows_read_in_batches_average_each_windows_own_entropy(per_batch_cells, monkeypatch):
    """Against a loop that runs the model on one window at a time and averages the entropy by hand: batches of one,
    of three (the last one short) and of every window agree with it."""
    monkeypatch.setattr(attention, "ATTENTION_BATCH_CELLS", per_batch_cells)
    monkeypatch.setattr(attention, "ATTENTION_TOKENS", 7 * 8)
    decoder, length = model(), 8
    scored = np.random.default_rng(1).integers(0, 50, 7 * length + 1)
    record = attention.attention_record(
        decoder, scored, length, length, torch.device("cpu"), {"label": "rope", "position": "rope"}
    )
    entropies, largest = [], []
    with torch.no_grad():
        for w in range(7):
            with record_attention(decoder) as maps:
                decoder(torch.from_numpy(scored[None, w * length : (w + 1) * length]))
            entropies.append(torch.stack([attention_entropy(p[0]).mean(dim=-1) for p in maps.probabilities]))
            largest.append(torch.stack([s[0].amax(dim=(-2, -1)) for s in maps.logits]))
    assert record["windows"] == 7
    torch.testing.assert_close(torch.tensor(record["mean_entropy"]), torch.stack(entropies).mean(0), atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(record["max_logit"]), torch.stack(largest).amax(0), atol=1e-4, rtol=0)


def test_the_tables_by_layer_show_n_a_for_a_layer_without_logits():
    """A layout row beside stick-breaking, whose weights are its own (no largest logit): the by-layer tables still
    have a row per layer, n/a in the largest-logit table (this raised KeyError 'max_logit' before)."""
    scored = np.random.default_rng(2).integers(0, 50, 17)
    records = [
        attention.attention_record(
            model(p, layers), scored, 8, 8, torch.device("cpu"), {"label": p or layers, "position": p}
        )
        for p, layers in (("stickbreaking", ""), ("rope", "rope/w4 none"))
    ]
    text = attention.layer_markdown(records, 8, [8])
    largest = text.split("**largest logit, by layer**")[1].split("\n\n")[1]
    rows = [line for line in largest.splitlines() if line.startswith("| `")]
    assert len(rows) == 4  # two models, two layers each
    assert all(r.endswith("| n/a |") for r in rows if "stickbreaking" in r)
    assert not any(r.endswith("| n/a |") for r in rows if "stickbreaking" not in r)
