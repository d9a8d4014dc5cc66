"""Byte-level BPE: exact round trip and byte accounting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.tokenizer import END_OF_TEXT, Tokenizer, byte_alphabet
from tokenizers import pre_tokenizers


@pytest.fixture(scope="module")
def tokenizer(shakespeare):
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:200_000]], vocab_size=512)


@given(text=st.text())
def test_round_trip_any_unicode(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


@given(text=st.text())
def test_token_bytes_concatenate_to_the_utf8(tokenizer, text):
    ids = tokenizer.encode(text)
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert int(tokenizer.bytes_per_token[ids].sum()) == len(text.encode("utf-8"))


def test_no_normalisation(tokenizer):
    for text in ["Café", "CAFE\u0301", "ﬁ ligature", "Tab\tand\r\nCRLF", "  two  spaces", "<|endoftext|> literal"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_literal_end_of_text_is_text_not_a_boundary(tokenizer):
    assert tokenizer.eot_id not in tokenizer.encode(f"a{END_OF_TEXT}b")
    assert tokenizer.token_bytes(tokenizer.eot_id) == b""
    assert tokenizer.bytes_per_token[tokenizer.eot_id] == 0


def test_vocab_size_and_save_load(tokenizer, tmp_path):
    assert tokenizer.vocab_size == 512
    tokenizer.save(tmp_path / "tokenizer.json")
    again = Tokenizer.load(tmp_path / "tokenizer.json")
    text = "Now is the winter of our discontent"
    assert again.encode(text) == tokenizer.encode(text)


def test_alphabet_agrees_with_hugging_face():
    assert set(byte_alphabet()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(byte_alphabet().values()) == list(range(256))


def test_vocab_size_too_small():
    with pytest.raises(ValueError, match="257"):
        Tokenizer.train(["abc"], vocab_size=100)
