"""A scheme registered outside octlm works end to end: the plug-in promise of positions.py.

The toy scheme below is written the way a contributor would add one (one
class, one decorator) but lives in this file only; every other module must
handle it by asking it, never by its name. It is removed after each test.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from octlm import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES, PositionScheme, SchemeFacts, facts_of, register
from tests.test_generate import test_a_chunk_of_tokens_on_top_of_a_cache as chunk_check
from tests.test_generate import test_cached_logits_equal_full_recompute_at_every_step as cache_check
from tests.test_generate import test_greedy_generation_is_the_same_with_and_without_the_cache as greedy_check


class ToyDistanceBias(PositionScheme):
    """A fixed bias ``-0.5 (i - j)`` on the score of query ``i`` for key ``j``, the same in every head, [H, Tq, Tk]."""

    label = "the toy"
    description = "a fixed linear distance penalty on the attention scores (test only)"

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.n_heads = config.n_heads

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        i = torch.arange(offset, offset + q_len)
        j = torch.arange(offset + q_len - k_len, offset + q_len)
        return (-0.5 * (i[:, None] - j[None, :]).float()).expand(self.n_heads, q_len, k_len)


@pytest.fixture
def toy():
    register("toy")(ToyDistanceBias)
    yield "toy"
    SCHEMES.pop("toy")


def small(position: str) -> Decoder:
    return Decoder(
        DecoderConfig(position=position, context_length=12, d_model=32, n_heads=4, n_layers=2, vocab_size=50)
    ).eval()


def test_the_toy_is_not_registered_outside_its_tests():
    assert "toy" not in SCHEMES


def test_config_forward_and_the_bias_reaches_attention(toy):
    model = small(toy)
    assert isinstance(model.positions, ToyDistanceBias) and model.max_length is None
    ids = torch.randint(0, 50, (2, 30))  # past context_length: no table limit
    logits = model(ids)
    assert logits.shape == (2, 30, 50) and torch.isfinite(logits).all()
    # Without the bias (NoPE) the same weights give other logits, so the bias is used.
    plain = small("none")
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(ids), logits)


@pytest.mark.parametrize("prompt_length", [1, 5])
def test_cached_decoding_equals_recompute(toy, prompt_length):
    cache_check(toy, {}, None, prompt_length)
    greedy_check(toy, {}, None)
    chunk_check(toy)


def test_explorer_has_no_vectors_and_a_note(toy):
    from octlm.inspect.embeddings import position_note, run_position_vectors

    assert run_position_vectors(small(toy)) is None
    assert position_note(toy) == "This run's scheme (toy) adds no position vectors."


def test_cli_and_length_study_take_it_from_the_registry(toy):
    from octlm.cli import build_parser, options_from
    from octlm.model.positions import SCHEME_NAMES
    from octlm.studies.length.options import LengthOptions, check_options

    assert "toy" in SCHEME_NAMES and list(SCHEME_NAMES) == sorted(SCHEMES)
    assert build_parser().parse_args(["train", "--position", toy]).position == toy
    args = build_parser().parse_args(["length", "--text", "x.txt", "--out", "study"])
    assert options_from(args, LengthOptions).schemes[-1] == toy  # in the default study, in registration order
    assert LengthOptions().schemes == [
        *(s for s, cls in SCHEMES.items() if s != toy and facts_of(cls).in_length_study),
        toy,
    ]
    resolved = LengthOptions(schemes=[toy]).resolved()
    assert resolved.rope_scalings == []  # the toy takes no RoPE scaling
    from octlm.errors import OctlmError

    with pytest.raises(
        OctlmError, match="--rope-scalings needs the rope((, | or )[a-z0-9]+)* model: add rope to --schemes"
    ):
        check_options(LengthOptions(text=["x.txt"], out="study", schemes=[toy], rope_scalings=["yarn"]))
    ToyDistanceBias.in_length_study = False
    try:
        assert toy not in LengthOptions().schemes
    finally:
        del ToyDistanceBias.in_length_study


class Recorded(PositionScheme):
    """No hook of its own: what others read of it is the record it registers with."""


class Bare(PositionScheme):
    """No hook and no record: what others read of it is the defaults."""


def test_others_read_the_record_registered_beside_the_class_or_the_defaults():
    from octlm.model.positions import evicting_schemes, length_study_schemes

    register("recorded", facts=SchemeFacts(label="the record", in_length_study=False, evicts_cache=True))(Recorded)
    register("bare")(Bare)
    try:
        recorded, bare = facts_of("recorded"), facts_of(Bare)
        assert (recorded.label, recorded.in_length_study, recorded.evicts_cache) == ("the record", False, True)
        assert bare == SchemeFacts(label="bare", explorer_note="This run's scheme (bare) adds no position vectors.")
        assert "recorded" in evicting_schemes() and "bare" not in evicting_schemes()
        assert "bare" in length_study_schemes() and "recorded" not in length_study_schemes()
        assert facts_of(small("recorded").positions) == recorded  # an instance reads its class's record
        with pytest.raises(TypeError, match=r"register\(facts=.*\): give a SchemeFacts"):
            register("unrecorded", facts={"label": "x"})(Bare)
    finally:
        SCHEMES.pop("recorded")
        SCHEMES.pop("bare")


def test_sample_memory_check_counts_its_score_bias(toy, monkeypatch):
    import octlm.train.memory_limit
    from octlm.errors import OctlmError
    from octlm.inspect.sample import check_bias_memory

    model = small(toy)
    assert model.positions.score_bias_bytes(4, 100) == 12 * 4 * 100**2
    assert small("rope").positions.score_bias_bytes(4, 100) == 0
    monkeypatch.setattr(octlm.train.memory_limit, "device_memory_bytes", lambda device: 2**20)
    with pytest.raises(OctlmError, match="the toy's bias for that length needs about .* keep it under 147 tokens"):
        check_bias_memory(model, 400, torch.device("cpu"))
    check_bias_memory(model, 100, torch.device("cpu"))


def test_rope_scaling_and_gpt2_export_refuse_it(toy):
    from octlm.export.hf import InteropError, gpt2_config

    model = small(toy)
    with pytest.raises(
        ValueError,
        match=r"RoPE scaling \(linear\) needs position='rope'( or '[a-z0-9]+')*; this model uses position='toy'",
    ):
        model.set_rope_scaling("linear", 2.0)
    model.set_rope_scaling(None)  # turning no scaling off is allowed
    with pytest.raises(InteropError, match="position='toy' has no GPT-2 form.*--position learned"):
        gpt2_config(model.config, 0)
