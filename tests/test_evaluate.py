"""Validation metrics against a direct computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.train.evaluate import evaluate, evenly_spaced
from octlm.data.tokenizer import Tokenizer


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


def test_evenly_spaced():
    assert evenly_spaced(5, None).tolist() == [0, 1, 2, 3, 4]
    assert evenly_spaced(100, 3).tolist() == [0, 50, 99]
    assert evenly_spaced(3, 10).tolist() == [0, 1, 2]


def test_evaluate_needs_a_block():
    model = Decoder(DecoderConfig(vocab_size=300, context_length=16, d_model=32, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="fewer than one block"):
        evaluate(model, np.zeros(10, dtype=np.uint16), np.ones(300, dtype=np.int64), 16)


def test_per_position_totals_match_direct_computation(shakespeare):
    text = shakespeare.read_text(encoding="utf-8")
    tokenizer = Tokenizer.train([text[:50_000]], vocab_size=300)
    stream = np.array(tokenizer.encode(text[50_000:51_000]), dtype=np.uint16)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=300, context_length=8, d_model=32, n_heads=2, n_layers=1, position="alibi"))
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
    assert result.loss == pytest.approx(nats.sum() / (24 * n_blocks), rel=1e-6)
