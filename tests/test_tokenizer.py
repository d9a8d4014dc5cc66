"""Byte-level BPE: exact round trip and byte accounting."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from octlm.data.tokenizer import END_OF_TEXT, Tokenizer, byte_alphabet, pretoken_chunks


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


# Letters, digits, ASCII and Unicode whitespace (and \x1c, whitespace to Python
# but not to the tokenizer's regex), contractions and punctuation.
_TRICKY = st.lists(
    st.sampled_from(
        list("ab Z19 \n\t\r'+/.,-_") + ["\x1c", "\x85", "\u00a0", "\u3000", "é", "中", "٣", "'s", "  ", "\n\n"]
    ),
    max_size=120,
).map("".join)


@given(text=_TRICKY, size=st.integers(1, 40))
def test_pieces_encode_exactly_like_the_whole_text(tokenizer, text, size):
    # Reference: the tokenizer on the uncut text.
    pieces = list(pretoken_chunks(text, size))
    assert "".join(pieces) == text
    words = tokenizer.hf.pre_tokenizer.pre_tokenize_str
    assert [w for piece in pieces for w, _ in words(piece)] == [w for w, _ in words(text)]
    assert [i for piece in pieces for i in tokenizer.encode(piece)] == tokenizer.encode(text)


def test_encode_arrays_matches_encode_on_a_long_line(tokenizer, shakespeare):
    line = shakespeare.read_text(encoding="utf-8")[:400_000].replace("\n", " ")
    (ids,) = tokenizer.encode_arrays([line], group_chars=50_000)
    assert ids.tolist() == tokenizer.encode(line)


def test_training_on_pieces_learns_the_same_merges(shakespeare):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, trainers

    text = shakespeare.read_text(encoding="utf-8")[:300_000]
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=2,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator([text], trainer=trainer)  # uncut, as tokenizers would by itself
    ours, theirs = json.loads(Tokenizer.train([text], vocab_size=400).hf.to_str()), json.loads(hf.to_str())
    # octlm keeps <|endoftext|> in the vocabulary, not as an added token (see test_literal_marker_*)
    assert [t["content"] for t in theirs.pop("added_tokens")] == [END_OF_TEXT] and ours.pop("added_tokens") == []
    assert ours == theirs


def test_visible_token_marks_whitespace_and_controls():
    from octlm.data.token_display import visible_token

    assert visible_token(" the\n\t\r") == "␣the↵⇥⇤"
    assert visible_token("a\x06") == "a\\x06"
    assert visible_token("é世") == "é世"
    assert visible_token("\x85\x9b") == "\\x85\\x9b"  # C1 controls (NEL, CSI) too


@given(st.text())
def test_labels_and_printed_text_hold_no_control_characters(text):
    import unicodedata

    from octlm.data.token_display import printable_text, visible_token

    label = visible_token(text)
    assert not any(unicodedata.category(c) == "Cc" for c in label)
    assert " " not in label
    printed = printable_text(text)
    assert all(c in "\n\t\r" or unicodedata.category(c) != "Cc" for c in printed)
    # the escapes undo exactly: nothing else in the text was changed
    if "\\" not in text:
        unescaped = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m[1], 16)), printed)
        assert unescaped == text


def test_text_stream_holds_a_character_split_over_tokens(tokenizer):
    from octlm.data.token_display import TextStream

    ids = tokenizer.encode("a世é")
    assert [tokenizer.token_bytes(i) for i in ids[1:4]] == [b"\xe4", b"\xb8", b"\x96"]  # one character, three tokens
    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in ids]
    assert pieces[:4] == ["a", "", "", "世"] and "".join(pieces) == "a世é" and stream.finish() == ""
    # bytes that never become a character still come out, as decode shows them
    stream = TextStream(tokenizer)
    assert [stream.push(i) for i in (ids[1], *tokenizer.encode("b"), ids[1])] == ["", "\ufffdb", ""]
    assert stream.finish() == "\ufffd"


@given(text=st.text())
def test_text_stream_pieces_add_up_to_the_decoded_text(tokenizer, text):
    from octlm.data.token_display import TextStream

    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in tokenizer.encode(text)]
    assert "".join(pieces) + stream.finish() == text
    if "\ufffd" not in text:
        assert "\ufffd" not in "".join(pieces)


@given(data=st.data())
def test_text_stream_of_any_ids_adds_up_to_decode(tokenizer, data):
    # Arbitrary ids, so stray continuation bytes and cut characters come in any order.
    from octlm.data.token_display import TextStream

    ids = data.draw(st.lists(st.integers(0, tokenizer.vocab_size - 1), max_size=40))
    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) + stream.finish() == tokenizer.decode(ids)


_MARKER_TEXTS = st.lists(
    st.sampled_from(["<|endoftext|>", "<|endoftext", "|>", "a", " ", "\n", "é", "世"]), max_size=12
).map("".join)


@given(st.one_of(st.text(max_size=40), _MARKER_TEXTS))
def test_literal_marker_reads_the_same_in_every_reader_of_tokenizer_json(tokenizer, tmp_path_factory, text):
    """The run's tokenizer.json, read by plain tokenizers, gives octlm's ids for every string,
    the literal "<|endoftext|>" included: it is text to octlm, never the boundary id."""
    from tokenizers import Tokenizer as HFTokenizer

    plain = HFTokenizer.from_str(tokenizer.to_str())
    ours = tokenizer.encode(text)
    assert plain.encode(text, add_special_tokens=False).ids == ours
    assert tokenizer.eot_id not in ours
    assert tokenizer.decode(ours) == text


def test_saved_tokenizer_keeps_the_marker_id_and_its_text(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "tokenizer.json")
    back = Tokenizer.load(tmp_path / "tokenizer.json")
    assert back.eot_id == tokenizer.eot_id and back.vocab_size == tokenizer.vocab_size
    assert back.decode([back.eot_id]) == END_OF_TEXT
    assert json.loads((tmp_path / "tokenizer.json").read_text())["added_tokens"] == []


def test_training_pieces_cut_only_runs_longer_than_the_limit():
    from octlm.data.tokenizer import training_pieces

    prose = "The quick brown fox, 12345 jumps_over; the lazy dog.\n" * 50
    assert list(training_pieces(prose, max_word=8)) == [prose]  # no run of one class reaches 8
    pieces = list(training_pieces("ab " + "x" * 20 + " cd", max_word=8))
    assert "".join(pieces) == "ab " + "x" * 20 + " cd"
    assert pieces == ["ab " + "x" * 8, "x" * 8, "x" * 4 + " cd"]


@pytest.mark.parametrize(
    "alphabet", ["ACGT", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", " ", "-"]
)
def test_bpe_training_never_sees_a_word_longer_than_the_limit(alphabet):
    """BPE training costs the square of the longest pre-token; whatever the text
    (a DNA sequence, a base64 blob, a run of spaces or dashes), the pieces octlm
    trains on hold no pre-token longer than MAX_TRAINING_WORD, and they join
    back to the text."""
    import random

    from octlm.data.tokenizer import MAX_TRAINING_WORD, training_pieces

    rng = random.Random(0)
    text = "".join(rng.choice(alphabet) for _ in range(50_000))
    pieces = list(training_pieces(text))
    assert "".join(pieces) == text
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True).pre_tokenize_str
    longest = max(len(word) for piece in pieces for word, _ in split(piece))
    assert longest <= MAX_TRAINING_WORD  # in byte-level characters, one per byte here
    tokenizer = Tokenizer.train([text], vocab_size=300)
    assert tokenizer.decode(tokenizer.encode(text)) == text
