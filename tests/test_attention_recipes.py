"""Attention scaled with length (--attention-scale log) and document masking (--document-mask), against their
definitions.

The log scale is checked against ``max(1, ln n / ln T)`` written here from
Qwen's LogN-Scaling (1-based ``n``), on the logits attention takes the softmax
of; the document mask against its defining property: a document inside a
packed sequence gets the logits it gets alone. Both must be exact under
cached decoding.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.model import Decoder, DecoderConfig, KVCache
from octlm.model.attention_maps import record_attention
from octlm.model.attention_recipes import log_length_scale
from octlm.model.positions import SCHEMES

EOT = 3
T = 8


def model(position="rope", context_length=T, **fields) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab_size=40,
        context_length=context_length,
        d_model=32,
        n_heads=4,
        n_layers=2,
        position=position,
        eot_id=EOT,
        **fields,
    )
    return Decoder(config).eval()


def taking(recipe: dict) -> list[str]:
    """The registered schemes a config with ``recipe`` accepts (the others refuse it by name, tested below)."""
    out = []
    for name in SCHEMES:
        try:
            DecoderConfig(vocab_size=40, context_length=T, d_model=32, n_heads=4, position=name, **recipe)
        except ValueError:
            continue
        out.append(name)
    return out


#: Every built-in scheme takes the log scale: it multiplies the logits, whatever added to them or rotated them.
LOG_SCALE_SCHEMES = [
    "learned",
    "sinusoidal",
    "rope",
    "alibi",
    "t5",
    "fire",
    "kerple",
    "xpos",
    "prope",
    "cope",
    "none",
    "fox",
    "stickbreaking",
    "pathattn",
]
#: The schemes whose signal restarts at each document: per-row position ids (learned, sinusoidal, rope, prope), a bias
#: of i - j alone (alibi, t5), or nothing (none). fire normalises by the query's position in the pass, xpos takes its
#: decay reference from the pass's positions as one row, and kerple and cope do not declare it.
DOCUMENT_MASK_SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "t5", "prope", "none"]


@pytest.mark.parametrize(
    "recipe, schemes",
    [
        ({"attention_scale": "log"}, LOG_SCALE_SCHEMES),
        ({"document_mask": True}, DOCUMENT_MASK_SCHEMES),
        ({"attention_scale": "log", "document_mask": True}, DOCUMENT_MASK_SCHEMES),
    ],
    ids=["log", "document", "both"],
)
def test_the_schemes_taking_each_recipe_are_the_ones_pinned_here(recipe, schemes):
    """taking() drops a scheme that refuses a recipe, so the tests looping over it would shrink silently: its set is
    pinned by hand, and the registry's declaration agrees with it."""
    from octlm.model.positions.registry import document_position_schemes

    assert taking(recipe) == schemes
    assert document_position_schemes() == DOCUMENT_MASK_SCHEMES


@given(n=st.integers(1, 10**6), length=st.integers(2, 10**4))
def test_log_scale_is_max_of_one_and_log_n_over_log_t(n, length):
    want = max(1.0, math.log(n) / math.log(length))
    assert float(log_length_scale(torch.tensor([n]), length)[0]) == pytest.approx(want, rel=1e-6)
    if n <= length:
        assert float(log_length_scale(torch.tensor([n]), length)[0]) == 1.0


@pytest.mark.parametrize("position", ["rope", "alibi", "none", "learned"])
def test_log_scale_changes_nothing_within_the_training_length(position):
    ids = torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(position, attention_scale="log")(ids), model(position)(ids), rtol=0, atol=0)


@pytest.mark.parametrize("position", ["none", "rope"])
def test_log_scale_multiplies_the_query_key_logits_past_t(position):
    """Layer 0 sees the same inputs either way, so its logits differ by the factor alone: row i (0-based) by ln(i + 1) /
    ln T."""
    ids = torch.randint(0, 40, (1, 5 * T), generator=torch.Generator().manual_seed(2))
    logits = {}
    for scale in ("none", "log"):
        m = model(position, attention_scale=scale)
        with record_attention(m) as maps:
            m(ids)
        logits[scale] = maps.logits[0]
    factor = torch.tensor([max(1.0, math.log(i + 1) / math.log(T)) for i in range(5 * T)])[:, None]
    want = torch.where(torch.isinf(logits["none"]), logits["none"], logits["none"] * factor)
    torch.testing.assert_close(logits["log"], want, rtol=1e-5, atol=1e-6)


@torch.inference_mode()  # no graph for a backward pass that never comes
def cached_gap(m: Decoder, ids: torch.Tensor) -> float:
    full = m(ids)
    cache = KVCache(len(m.blocks))
    return max(
        float((m.next_token_logits(ids[:, : n + 1], cache) - full[:, n]).abs().max()) for n in range(ids.shape[1])
    )


def packed(length: int, seed: int = 3) -> torch.Tensor:
    ids = torch.randint(4, 40, (2, length), generator=torch.Generator().manual_seed(seed))
    ids[0, [i for i in (5, 11, 30) if i < length]] = EOT
    ids[1, [i for i in (0, 17) if i < length]] = EOT
    return ids


@pytest.mark.parametrize(
    "recipe",
    [{"attention_scale": "log"}, {"document_mask": True}, {"attention_scale": "log", "document_mask": True}],
    ids=["log", "document", "both"],
)
def test_cached_decoding_is_exact_past_t(recipe):
    for position in DOCUMENT_MASK_SCHEMES if recipe.get("document_mask") else LOG_SCALE_SCHEMES:
        m = model(position, context_length=T if position != "learned" else 64, **recipe)
        assert cached_gap(m, packed(5 * T)) < 1e-5, position


@pytest.mark.parametrize("position", DOCUMENT_MASK_SCHEMES)
def test_a_document_in_a_packed_block_gets_the_logits_it_gets_alone(position):
    """The marker opens the document after it: from the marker on, the packed row computes what the document alone
    does."""
    m = model(position, context_length=64, document_mask=True)
    ids = packed(40)
    full = m(ids)
    for row, start, end in ((0, 11, 30), (0, 30, 40), (1, 17, 40), (0, 0, 5)):
        alone = m(ids[row : row + 1, start:end])
        torch.testing.assert_close(full[row : row + 1, start:end], alone, rtol=1e-5, atol=1e-5)
    # without the mask the same document reads the tokens before it
    plain = model(position, context_length=64)
    assert float((plain(ids)[0:1, 11:30] - plain(ids[0:1, 11:30])).abs().max()) > 1e-3


def test_without_a_marker_the_document_mask_changes_nothing():
    ids = torch.randint(4, 40, (2, T), generator=torch.Generator().manual_seed(4))
    for position in DOCUMENT_MASK_SCHEMES:
        torch.testing.assert_close(model(position, document_mask=True)(ids), model(position)(ids), rtol=1e-6, atol=1e-6)


def test_generation_opens_a_new_document_at_a_generated_marker():
    """A marker met while sampling opens a document, as in training: cached and uncached sampling agree across it."""
    m = model("rope", document_mask=True)
    prompt = packed(12)[:1]
    cached = m.generate(prompt, 20, use_cache=True)
    naive = m.generate(prompt, 20, use_cache=False)
    assert torch.equal(cached, naive)
    forced = torch.cat((prompt, torch.tensor([[EOT, 7, 9]])), dim=1)
    assert cached_gap(m, forced) < 1e-5


@pytest.mark.parametrize("position", sorted(set(SCHEMES) - set(DOCUMENT_MASK_SCHEMES)))
def test_schemes_that_cannot_restart_refuse_the_document_mask_by_name(position):
    with pytest.raises(ValueError, match=f"document_mask needs a scheme .* not position='{position}'"):
        DecoderConfig(vocab_size=40, context_length=T, d_model=32, n_heads=4, position=position, document_mask=True)


def test_bad_recipe_values_are_refused():
    with pytest.raises(ValueError, match="document_mask restarts positions .* randomize_positions=2"):
        DecoderConfig(position="rope", document_mask=True, randomize_positions=2)
    with pytest.raises(ValueError, match="attention_scale must be one of none, log, got 'sqrt'"):
        DecoderConfig(attention_scale="sqrt")
    with pytest.raises(ValueError, match="eot_id=5000 is outside the vocabulary"):
        DecoderConfig(eot_id=5000)


def test_train_refuses_a_document_mask_its_scheme_cannot_take(capsys, tmp_path):
    assert (
        main(["train", "--position", "fire", "--document-mask", "--max-steps", "1", "--out", str(tmp_path / "run")])
        == 1
    )
    err = capsys.readouterr().err
    assert "document_mask needs a scheme" in err and "fire" in err and "Traceback" not in err


@pytest.mark.slow  # a whole study end to end
def test_length_study_scores_logn_variants_and_trains_under_the_document_mask(small_corpus, tmp_path, capsys):
    import json

    out = tmp_path / "study"
    tiny = [
        "--vocab-size",
        "280",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--batch-size",
        "4",
        "--max-steps",
        "3",
        "--train-length",
        str(T),
        "--multipliers",
        "1",
        "2",
        "--extend-to",
        "0",
        "--rope-scalings",
    ]
    assert (
        main(
            [
                "length",
                "--text",
                str(small_corpus),
                "--out",
                str(out),
                "--schemes",
                "rope",
                "alibi",
                "--attention-scales",
                "log",
                "--document-mask",
                "--quiet",
                *tiny,
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines()]
    evals = {(r["label"], r["eval_length"]): r for r in records if r["record"] == "eval"}
    assert sorted({label for label, _ in evals}) == ["alibi", "alibi+logn", "rope", "rope+logn"]
    # within T the scale is 1: the same numbers; the models were trained under the document mask
    assert (
        evals[("rope+logn", T)]["bpb"] == evals[("rope", T)]["bpb"]
        and evals[("rope+logn", 2 * T)]["bpb"] != evals[("rope", 2 * T)]["bpb"]
    )
    config = json.loads((out / "runs" / "rope" / "config.json").read_text())["model"]
    assert config["document_mask"] is True and config["eot_id"] == 0
    # a scheme that cannot restart its positions is refused by name, before anything is trained
    assert (
        main(
            [
                "length",
                "--text",
                str(small_corpus),
                "--out",
                str(tmp_path / "fire"),
                "--schemes",
                "fire",
                "--document-mask",
                *tiny,
            ]
        )
        == 1
    )
    assert "document_mask needs a scheme" in capsys.readouterr().err


@pytest.mark.parametrize(
    "recipe,match",
    [
        ({"attention_scale": "log"}, "attention_scale='log': transformers"),
        ({"document_mask": True}, "document_mask: transformers"),
    ],
)
def test_export_hf_refuses_the_recipes_by_name(tmp_path, recipe, match):
    from octlm.export.hf import InteropError, mapper_for

    with pytest.raises(InteropError, match=match):
        mapper_for(DecoderConfig(position="rope", **recipe))
