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


def test_a_config_is_checked_once_where_it_is_made(monkeypatch):
    """The run's model (the tokenizer's vocabulary set in) and each layer's scheme come from a checked config without
    checking it again (issue 48: a train checked it four times); the two tokenizer fields are still checked."""
    from octlm.model.layout import LayerSpec
    from octlm.train.options import TrainOptions

    opts = TrainOptions.of(n_layers=2, layers="rope/theta500 none", d_model=16, n_heads=2)
    checks = []
    made = DecoderConfig.__post_init__
    monkeypatch.setattr(DecoderConfig, "__post_init__", lambda self: (checks.append(1), made(self)))
    config = opts.model_config(300, eot_id=299)
    layer = config.layer_config(LayerSpec("rope", rope_theta=500.0))
    Decoder(config)
    assert checks == []
    assert (config.vocab_size, config.eot_id, opts.model.vocab_size) == (300, 299, 1024)
    assert (layer.position, layer.layers, layer.rope_theta, config.rope_theta) == ("rope", (), 500.0, 10000.0)
    with pytest.raises(ValueError, match=r"eot_id=300 is outside the vocabulary \[0, 300\)"):
        opts.model_config(300, eot_id=300)
