"""The seed's claims about the first layer: lookup, gradients, shapes, offset, tied head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def test_day1_shapes_and_table_size():
    model = Decoder(DecoderConfig())
    assert model.token_embedding.weight.shape == (1024, 128)
    assert model.token_embedding.weight.numel() == 131_072  # V * C, as the seed counts
    assert isinstance(model.position_embedding, torch.nn.Embedding)
    assert model.position_embedding.weight.shape == (128, 128)
    ids = torch.randint(0, 1024, (3, 17))
    assert model._embed(ids).shape == (3, 17, 128)
    assert model(ids).shape == (3, 17, 1024)


def test_initialisation_is_normal_0_02():
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(d_model=256))
    w = model.token_embedding.weight.detach()
    assert abs(w.mean().item()) < 2e-3
    assert abs(w.std().item() - 0.02) < 1e-3


@given(token=st.integers(0, 1023), seed=st.integers(0, 2**16))
def test_one_hot_times_table_is_the_row(token, seed):
    torch.manual_seed(seed)
    model = Decoder(DecoderConfig(n_layers=1))
    table = model.token_embedding.weight.detach()
    one_hot = F.one_hot(torch.tensor(token), num_classes=1024).float()
    looked_up = model.token_embedding(torch.tensor([token]))[0].detach()
    torch.testing.assert_close(one_hot @ table, looked_up, rtol=0, atol=0)
    torch.testing.assert_close(looked_up, table[token], rtol=0, atol=0)


def test_absent_token_gets_zero_gradient_row():
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=64, context_length=16, d_model=32, n_heads=2, n_layers=1))
    # Only the lookup is differentiated: through the tied head every row would
    # get a softmax gradient, and the seed's claim is about the lookup.
    ids = torch.tensor([[3, 5, 7, 5, 3]])
    x = model._embed(ids)
    x.pow(2).sum().backward()
    grad = model.token_embedding.weight.grad
    used = {3, 5, 7}
    for row in range(64):
        if row in used:
            assert grad[row].abs().sum() > 0
        else:
            assert torch.count_nonzero(grad[row]) == 0


def test_same_token_at_two_positions_differs_only_by_position_row():
    model = Decoder(DecoderConfig())
    ids = torch.tensor([[42, 7, 42]])
    x = model._embed(ids)[0].detach()
    p = model.position_embedding.weight.detach()
    torch.testing.assert_close(x[2] - x[0], p[2] - p[0])


def test_head_is_the_token_table_parameter():
    model = Decoder(DecoderConfig())
    assert model.lm_head.weight is model.token_embedding.weight
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names  # stored once
    ids = torch.randint(0, 1024, (1, 5))
    hidden = model.ln_final(model._embed(ids))  # no blocks needed for the identity
    torch.testing.assert_close(model.lm_head(hidden), hidden @ model.token_embedding.weight.T)


def test_num_parameters_counts_tied_head_once():
    model = Decoder(DecoderConfig())
    expected = sum(p.numel() for p in model.parameters())  # parameters() yields shared ones once
    by_hand = (
        1024 * 128  # token table (also the head)
        + 128 * 128  # learned positions
        + 2 * (2 * 2 * 128 + (128 * 384 + 384) + (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128))
        + 2 * 128  # final norm
    )
    assert model.num_parameters() == expected == by_hand
