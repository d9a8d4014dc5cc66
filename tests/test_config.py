"""Invalid configurations and model inputs get a ValueError that names the field and value."""

from __future__ import annotations

import pytest
import torch

from octlm import Decoder, DecoderConfig


@pytest.mark.parametrize(
    "kwargs,names",
    [
        ({"d_model": 130, "n_heads": 4}, ["d_model=130", "n_heads=4"]),
        ({"d_model": 20, "n_heads": 4, "position": "rope"}, ["head_dim=5"]),
        ({"d_model": 12, "n_heads": 4, "position": "rope"}, ["head_dim=3"]),
        ({"vocab_size": 0}, ["vocab_size", "0"]),
        ({"n_layers": -1}, ["n_layers", "-1"]),
        ({"context_length": 0}, ["context_length"]),
        ({"n_heads": 1.5}, ["n_heads", "1.5"]),
        ({"position": "absolute"}, ["'absolute'", "learned", "rope", "sinusoidal"]),
        ({"dropout": 1.0}, ["dropout", "1.0"]),
        ({"position": "rope", "rope_theta": 0.0}, ["rope_theta"]),
    ],
)
def test_invalid_config_names_field_and_value(kwargs, names):
    with pytest.raises(ValueError) as err:
        DecoderConfig(**kwargs)
    for name in names:
        assert name in str(err.value)


def test_odd_head_dim_is_fine_without_rope():
    assert DecoderConfig(d_model=12, n_heads=4).head_dim == 3


def test_config_round_trips_through_dict():
    config = DecoderConfig(vocab_size=500, position="rope", rope_theta=500.0)
    assert DecoderConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="bogus"):
        DecoderConfig.from_dict({**config.to_dict(), "bogus": 1})


@pytest.mark.parametrize(
    "ids,match",
    [
        (torch.tensor([[1, 2, 1024]]), "1024 is outside the vocabulary"),
        (torch.tensor([[1, -3, 4]]), "-3 is outside the vocabulary"),
        (torch.tensor([1, 2, 3]), "rank 2"),
        (torch.zeros(1, 2, 3, dtype=torch.long), "rank 3"),
        (torch.zeros(1, 3), "integer"),
        (torch.zeros(1, 0, dtype=torch.long), "empty"),
    ],
)
def test_bad_model_input_is_a_clear_value_error(ids, match):
    model = Decoder(DecoderConfig(n_layers=1))
    with pytest.raises(ValueError, match=match):
        model(ids)
