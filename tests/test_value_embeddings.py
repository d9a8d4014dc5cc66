"""``--value-embeddings`` and ``--bigram-rows``: token tables beyond the first layer's, against their formulas."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.model.value_embeddings import BIGRAM_PRIME, ValueEmbedding, bigram_index, value_layers

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

SHAPE = {"vocab_size": 40, "context_length": 12, "d_model": 16, "n_heads": 2, "dropout": 0.0}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 39), min_size=1, max_size=10), st.integers(2, 50), st.none() | st.integers(0, 39))
def test_each_token_hashes_with_the_one_before(ids, rows, before):
    got = bigram_index(torch.tensor([ids]), None if before is None else torch.tensor([[before]]), rows)[0].tolist()
    previous = [-1 if before is None else before, *ids[:-1]]
    assert got == [
        rows - 1 if p < 0 else (p * BIGRAM_PRIME + c) % (rows - 1) for p, c in zip(previous, ids, strict=True)
    ]


def test_the_bigram_rows_are_added_to_the_token_rows_and_start_at_zero():
    torch.manual_seed(0)
    plain = Decoder(DecoderConfig(**SHAPE, n_layers=1)).eval()
    bigram = Decoder(DecoderConfig(**SHAPE, n_layers=1, bigram_rows=23)).eval()
    bigram.load_state_dict(plain.state_dict(), strict=False)
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(bigram(ids), plain(ids), rtol=0, atol=0)  # a zero table: the plain decoder
        bigram.bigram.table.normal_()
        rows = bigram.bigram.table[bigram_index(ids, None, 23)]
        torch.testing.assert_close(bigram._embed(ids), plain._embed(ids) + rows)


@pytest.mark.parametrize("n_layers", [1, 2, 3, 4])
def test_every_other_layer_back_from_the_last_adds_its_table_to_its_values(n_layers):
    assert value_layers(n_layers) == [i for i in range(n_layers) if (n_layers - 1 - i) % 2 == 0]
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(**SHAPE, n_layers=n_layers, value_embeddings=True)).eval()
    called = []
    for name, module in model.value_embeddings.items():
        module.register_forward_hook(lambda m, args, kwargs, out, name=name: called.append((name, kwargs)),
                                     with_kwargs=True)  # fmt: skip
    ids = torch.randint(0, 40, (2, 7))
    model(ids)
    assert [int(name) for name, _ in called] == value_layers(n_layers)
    assert all(torch.equal(kwargs["token_ids"], ids) for _, kwargs in called)
    extra = len(value_layers(n_layers)) * (40 * 16 + 2 * 16)  # a table and a gate of min(32, C) per head
    plain = Decoder(DecoderConfig(**SHAPE, n_layers=n_layers))
    assert model.num_parameters() - plain.num_parameters() == extra
    assert model.num_parameters(exclude_embeddings=True) - plain.num_parameters(exclude_embeddings=True) == 2 * 16 * (
        len(value_layers(n_layers))
    )


def test_a_value_table_adds_each_heads_gated_row():
    """v[b, h, t] + 2 sigmoid(w_h . x[b, t, :k]) * E[ids[b, t], h * D:(h + 1) * D], written out."""
    torch.manual_seed(0)
    layer = ValueEmbedding(vocab_size=40, d_model=16, n_heads=2).double()
    with torch.no_grad():
        layer.gate.normal_()
    v, x, ids = torch.randn(2, 2, 5, 8).double(), torch.randn(2, 5, 16).double(), torch.randint(0, 40, (2, 5))
    want = v.clone()
    for b in range(2):
        for h in range(2):
            for t in range(5):
                g = 2 * torch.sigmoid(layer.gate[h] @ x[b, t, :16])
                want[b, h, t] += g * layer.table[ids[b, t], h * 8 : (h + 1) * 8]
    torch.testing.assert_close(layer(v, x, token_ids=ids), want)


@pytest.mark.parametrize(
    "extra,expected",
    [({"bigram_rows": 1}, "needs 2 rows or more"), ({"bigram_rows": 8, "document_mask": True}, "with document_mask")],
)
def test_a_bigram_table_that_cannot_work_is_refused_by_name(extra, expected, tmp_path, capsys):
    with pytest.raises(ValueError, match=expected):
        DecoderConfig(**extra)
    argv = ["train", "--out", str(tmp_path / "run"), "--bigram-rows", str(extra["bigram_rows"])]
    argv += ["--document-mask"] if extra.get("document_mask") else []
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bigram-rows" in err and not (tmp_path / "run").exists()


def test_a_negative_bigram_table_is_refused_with_what_the_flag_takes(tmp_path, capsys):
    """A new user's trial: -1 was told ">= 0 rows", and then 1 was refused too; the bound says both at once."""
    assert main(["train", "--out", str(tmp_path / "run"), "--bigram-rows", "-1"]) == 1
    err = capsys.readouterr().err
    assert "--bigram-rows must be 0 (none) or 2 rows or more, got -1" in err and not (tmp_path / "run").exists()
