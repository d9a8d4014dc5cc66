"""Nearest neighbours by cosine similarity, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.inspect.diagnostics import cosine_neighbours, nearest_positions, position_vectors

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


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


def test_cosine_neighbours_keep_to_the_allowed_rows():
    table = torch.randn(50, 8, generator=torch.Generator().manual_seed(2))
    allowed = np.zeros(50, dtype=bool)
    allowed[[3, 7, 11, 20]] = True
    got = cosine_neighbours(table, 3, k=5, allowed=allowed)
    assert sorted(i for i, _ in got) == [7, 11, 20]  # only the allowed rows, the query itself excluded
    # a query outside the mask is no candidate anyway
    assert len(cosine_neighbours(table, 0, k=5, allowed=allowed)) == 4


def test_the_end_of_run_diagnostic_asks_about_frequent_words_among_seen_tokens(small_corpus, tmp_path):
    from octlm.inspect.diagnostics import token_counts
    from octlm.report import Reporter
    from octlm.run.folder import RunFolder
    from octlm.train.launch import train
    from octlm.train.options import TrainOptions

    run = tmp_path / "run"
    opts = TrainOptions.of(
        text=[str(small_corpus)],
        out=str(run),
        vocab_size=400,
        context_length=16,
        d_model=16,
        n_heads=2,
        n_layers=1,
        batch_size=4,
        max_steps=4,
        sample_tokens=0,
        final_eval_blocks=4,
        threads=1,
    )
    result = train(opts, Reporter(json_mode=True))
    folder = RunFolder(run)
    tokenizer = folder.read_tokenizer()
    counts = token_counts(folder.tokens("train", folder.read_manifest()), tokenizer.vocab_size)
    assert (counts == 0).any()  # byte tokens the text never uses: the noise this test keeps out
    queries = result["nearest"]["tokens"]
    assert len(queries) == 3
    for query in queries:
        assert query["token"] != tokenizer.eot_id
        word = query["text"].lstrip(" ")
        assert word.isalpha() and len(word) >= 3, query["text"]
        assert all(counts[n["index"]] > 0 for n in query["neighbours"])
