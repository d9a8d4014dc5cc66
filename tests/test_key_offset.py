"""``--key-offset``: in the channels RoPE leaves unturned, each key carries the previous position's key."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.model.key_offset import shift_keys

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**16))
def test_the_passed_channels_move_one_position_later(length, passed, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(2, 3, length, 8, generator=g)
    out = shift_keys(k, passed)
    turned = 8 - passed
    assert torch.equal(out[..., :turned], k[..., :turned])
    assert torch.equal(out[..., 0, turned:], torch.zeros(2, 3, passed))
    for t in range(1, length):
        assert torch.equal(out[..., t, turned:], k[..., t - 1, turned:])


def _keys(model, ids):
    """Each layer's keys as attention scores them (after the scheme's rotation), through the block's record hook."""
    seen = []
    for block in model.blocks:
        block.attn.record = lambda q, k, bias, offset: seen.append(k.detach())
    model(ids)
    return seen


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_model_scores_the_shifted_keys_and_turns_the_rest_as_before(layout):
    shape = {"vocab_size": 40, "context_length": 12, "d_model": 32, "n_heads": 2, "n_layers": 1, "position": "rope"}
    shape |= {"partial_rotary_factor": 0.5, "rope_layout": layout}
    torch.manual_seed(0)
    plain = Decoder(DecoderConfig(**shape)).eval()
    offset = Decoder(DecoderConfig(**shape, key_offset=True)).eval()
    offset.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 40, (2, 10))
    (k_plain,), (k_offset,) = _keys(plain, ids), _keys(offset, ids)
    torch.testing.assert_close(k_offset[..., :8], k_plain[..., :8], rtol=0, atol=0)  # rotary_dim = 16 * 0.5
    torch.testing.assert_close(k_offset[..., 1:, 8:], k_plain[..., :-1, 8:], rtol=0, atol=0)
    assert not k_offset[..., 0, 8:].any()


@pytest.mark.parametrize(
    "extra,expected",
    [
        ({"position": "none"}, "position='none' turns no channel of the keys"),
        ({"position": "alibi"}, "position='alibi' turns no channel of the keys"),
        (
            {"position": "rope"},
            r"position='rope' passes no channel of each head through unturned \(partial_rotary_factor=1",
        ),
        ({"position": "prope"}, "position='prope' passes no channel"),  # its still pairs sit among the turned ones
        ({"position": "rope", "partial_rotary_factor": 0.5, "layers": "rope none"}, "position='none' turns no"),
        ({"position": "rope", "partial_rotary_factor": 0.5, "document_mask": True}, "with document_mask"),
    ],
)
def test_a_key_offset_that_cannot_work_is_refused_by_name(extra, expected, tmp_path, capsys):
    with pytest.raises(ValueError, match=expected):
        DecoderConfig(key_offset=True, **extra)
    argv = ["train", "--key-offset", "--out", str(tmp_path / "run")]
    for name, value in extra.items():
        argv += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--key-offset" in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "command,names,wrong",
    [
        (["train", "--position", "alibi"], "--position rope", "--schemes"),
        (["length", "--schemes", "rope", "alibi", "--partial-rotary-factor", "0.5"], "--schemes rope", "--position"),
    ],
)
def test_the_refusals_fix_names_the_commands_own_flags(command, names, wrong, small_corpus, tmp_path, capsys):
    # octlm length has no --position: its models' scheme is chosen by --schemes, and the fix must say so
    argv = [*command, "--key-offset", "--text", str(small_corpus), "--out", str(tmp_path / "out")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert names in err and wrong not in err and "--partial-rotary-factor below 1" in err
    assert "{field:" not in err and not (tmp_path / "out").exists()
