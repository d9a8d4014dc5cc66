"""One rule for --token arguments (octlm bench, octlm embeddings): ASCII digits are an id, anything else is text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.errors import OctlmError
from octlm.inspect.bench import parse_token


@pytest.fixture(scope="module")
def tokenizer(shakespeare):
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:100_000]], vocab_size=400)


@given(st.text(max_size=12))
def test_every_string_is_an_id_or_one_tokens_text_or_a_clear_error(tokenizer, spec):
    vocab = tokenizer.vocab_size
    try:
        token = parse_token(spec, tokenizer, vocab)
    except OctlmError as err:
        assert "--token" in str(err)
        return
    assert 0 <= token < vocab
    if re.fullmatch(r"-?[0-9]+", spec, flags=re.ASCII):
        assert token == int(spec)
    else:
        assert tokenizer.encode(spec) == [token]


@pytest.mark.parametrize("spec", ["²", "١٢", "٣", "①", "𝟘", "+5", " 5", "5 "])
def test_digits_that_are_not_ascii_are_text(tokenizer, spec):
    ids = tokenizer.encode(spec)
    if len(ids) == 1:
        assert parse_token(spec, tokenizer, tokenizer.vocab_size) == ids[0]
    else:
        with pytest.raises(OctlmError, match="tokens"):
            parse_token(spec, tokenizer, tokenizer.vocab_size)


@pytest.mark.parametrize("command", ["embeddings", "bench"])
def test_a_superscript_token_is_one_line_not_a_traceback(trained_run, tmp_path, capsys, command):
    args = [command, "--run", str(trained_run), "--token", "²", "--json"]
    if command == "embeddings":
        args += ["--out", str(tmp_path / "figures")]
    code = main(args)
    err = capsys.readouterr().err
    assert code in (0, 1)
    assert "Traceback" not in err
    if code == 1:
        assert "--token '²'" in err


def test_a_text_of_several_byte_tokens_is_named_once_escaped(tokenizer):
    ids = tokenizer.encode("²")
    if len(ids) < 2:
        pytest.skip("this vocabulary holds '²' as one token")
    with pytest.raises(OctlmError) as err:
        parse_token("²", tokenizer, tokenizer.vocab_size)
    assert "\\\\x" not in str(err.value) and "'\\xc2'" in str(err.value)


def test_one_position_gets_a_word_not_an_empty_line():
    from octlm.inspect.diagnostics import format_diagnostic

    text = format_diagnostic({"tokens": [], "positions": []}, "learned")
    assert "nearest positions: n/a (the model has one position)" in text
