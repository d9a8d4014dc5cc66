"""Nearest neighbours by cosine similarity, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.diagnostics import cosine_neighbours, nearest_positions, position_vectors


def test_cosine_neighbours_match_numpy():
    table = torch.randn(50, 8, generator=torch.Generator().manual_seed(1))
    got = cosine_neighbours(table, 3, k=4)
    t = table.numpy().astype(np.float64)
    sims = t @ t[3] / (np.linalg.norm(t, axis=1) * np.linalg.norm(t[3]))
    sims[3] = -np.inf
    order = np.argsort(-sims)[:4]
    assert [i for i, _ in got] == order.tolist()
    assert [s for _, s in got] == pytest.approx(sims[order].tolist(), abs=1e-6)


def test_position_vectors_per_scheme():
    learned = Decoder(DecoderConfig())
    torch.testing.assert_close(position_vectors(learned), learned.position_embedding.weight)
    sinusoidal = Decoder(DecoderConfig(position="sinusoidal"))
    neighbours = nearest_positions(sinusoidal, 0, 3)
    assert [n.index for n in neighbours] == [1, 2, 3]  # sinusoidal rows are most alike for nearby positions
    assert nearest_positions(Decoder(DecoderConfig(position="rope")), 0) is None


def test_out_of_range_row():
    with pytest.raises(ValueError, match="outside"):
        cosine_neighbours(torch.zeros(4, 2), 4)
