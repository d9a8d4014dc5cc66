"""Which RoPE frequencies a model uses (``octlm attention``'s frequencies.png; Barbero et al. 2024)."""

from __future__ import annotations

import json

import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.inspect.frequencies import frequency_usage, pair_norms
from octlm.model.attention_maps import record_attention

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

SHAPE = {"vocab_size": 40, "context_length": 16, "d_model": 32, "n_heads": 2, "n_layers": 2}


def _model(**extra):
    torch.manual_seed(0)
    return Decoder(DecoderConfig(**SHAPE, **extra)).eval()


@pytest.mark.parametrize("extra", [{"rope_layout": "interleaved"}, {"rope_layout": "half"},
                                   {"rope_layout": "half", "partial_rotary_factor": 0.5}])  # fmt: skip
def test_the_pairs_are_the_ones_the_rotation_turns(extra):
    """A rotation keeps the length of each pair it turns: the pair norms of the scored (turned) queries equal those of
    the queries straight from the projection, which would not hold for pairs the rotation does not turn together."""
    model = _model(position="rope", **extra)
    raw = []
    model.blocks[0].attn.qkv.register_forward_hook(lambda m, a, out: raw.append(out.detach()))
    ids = torch.randint(0, 40, (2, 12))
    with record_attention(model) as maps:
        model(ids)
    first, second, frequency = model.positions.channel_pairs()
    B, T, _ = raw[0].shape
    q = raw[0].view(B, T, 3, 2, 16)[:, :, 0].transpose(1, 2)  # [B, H, T, head_dim], before the rotation
    torch.testing.assert_close(pair_norms(maps.queries[0], first, second), pair_norms(q, first, second))
    assert not torch.allclose(maps.queries[0], q)  # the queries were turned
    rotary = int(16 * extra.get("partial_rotary_factor", 1.0))
    want = [10000.0 ** (-2 * i / rotary) for i in range(rotary // 2)]  # Su et al. 2021: theta^(-2i/d)
    assert frequency.tolist() == pytest.approx(want)


def test_the_shares_follow_the_norms():
    model = _model(position="rope")
    with record_attention(model) as maps:
        model(torch.randint(0, 40, (1, 10)))
    first, second, frequency = model.positions.channel_pairs()
    for layer in range(2):  # all the length in the slowest pair (the last: the lowest frequency)
        for x in (maps.queries[layer], maps.keys[layer]):
            x.zero_()
            x[..., first[-1]] = 1.0
    usage = frequency_usage(maps, model)
    assert [u["layer"] for u in usage] == [0, 1]
    assert all(v == pytest.approx(1.0) for u in usage for v in u["slowest_quarter"])
    assert all(v == 0 for u in usage for v in u["fastest_quarter"])


def test_models_without_turned_pairs_have_none_and_a_layout_only_its_rope_layers():
    for position in ("learned", "alibi", "none"):
        model = _model(position=position)
        with record_attention(model) as maps:
            model(torch.randint(0, 40, (1, 6)))
        assert frequency_usage(maps, model) == []
    model = _model(position="rope", layers="none rope")
    with record_attention(model) as maps:
        model(torch.randint(0, 40, (1, 6)))
    assert [u["layer"] for u in frequency_usage(maps, model)] == [1]


def test_octlm_attention_draws_them_for_rope_and_not_for_a_learned_table(trained_run, tmp_path, capsys):
    from octlm.cli import main

    assert main(["attention", "--run", str(trained_run), "--out", str(tmp_path / "learned"), "--quiet"]) == 0
    assert not (tmp_path / "learned" / "frequencies.png").exists()
    stored = json.loads((tmp_path / "learned" / "statistics.json").read_text())
    assert stored["frequencies"] == []
    rope = tmp_path / "rope"
    small = ["--max-steps", "2", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--context-length", "16"]
    assert (
        main(["train", "--text", "tinyshakespeare", "--position", "rope", *small, "--out", str(rope), "--quiet"]) == 0
    )
    assert main(["attention", "--run", str(rope), "--quiet"]) == 0
    assert (rope / "attention" / "frequencies.png").is_file()
    usage = json.loads((rope / "attention" / "statistics.json").read_text())["frequencies"]
    assert len(usage) == 1 and len(usage[0]["query_norm"]) == 2 and len(usage[0]["frequency"]) == 4
