"""``--tokenizer FILE``: a tokenizer.json the person brings (GPT-2's and Llama 3's kind: byte-level BPE)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.errors import DataError

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nÀ bientôt, naïve café — ✓ 日本語.\n" * 40


def byte_level(path, special: str, extra=()):
    """A byte-level BPE file as GPT-2's (``<|endoftext|>``) or Llama 3's (``<|end_of_text|>``, more specials) are."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    hf.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=320, special_tokens=[special, *extra],
                                                       initial_alphabet=alphabet, show_progress=False))  # fmt: skip
    hf.save(str(path))
    return path


@pytest.mark.parametrize("special,extra", [("<|endoftext|>", ()), ("<|end_of_text|>", ("<|begin_of_text|>",))])
def test_each_token_counts_the_bytes_it_stands_for(tmp_path, special, extra):
    """Bits per byte's denominator: the tokens of a text stand for exactly its UTF-8 bytes, accents and CJK included;
    the end-of-text marker for none."""
    tokenizer = Tokenizer.brought(byte_level(tmp_path / "t.json", special, extra))
    assert tokenizer.hf.id_to_token(tokenizer.eot_id) == special
    ids = tokenizer.encode(TEXT)
    assert int(tokenizer.bytes_per_token[np.array(ids)].sum()) == len(TEXT.encode("utf-8"))
    assert tokenizer.decode(ids) == TEXT and tokenizer.bytes_per_token[tokenizer.eot_id] == 0


def test_a_run_takes_the_files_vocabulary(tmp_path, small_corpus, capsys):
    path = byte_level(tmp_path / "gpt2.json", "<|endoftext|>")
    out = tmp_path / "run"
    shape = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--context-length", "16", "--threads", "1"]
    assert main(["train", "--text", str(small_corpus), "--tokenizer", str(path), "--max-steps", "2", *shape,
                 "--out", str(out)]) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert f"tokenizer: 320 tokens from {path}, " in said and "of them in the training split" in said
    assert json.loads((out / "config.json").read_text())["model"]["vocab_size"] == 320
    stored = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert stored == json.loads(path.read_text())["model"]["vocab"]
    assert main(["sample", "--run", str(out), "--max-new-tokens", "5", "--quiet"]) == 0


def _sentencepiece(path):
    hf = HFTokenizer(models.BPE(byte_fallback=True))
    hf.pre_tokenizer, hf.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    hf.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=200, special_tokens=["</s>"], show_progress=False))
    hf.save(str(path))
    return path


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda p: p, "no such file"),
        (lambda p: (p.write_text("{not json"), p)[1], "not a JSON file"),
        (lambda p: (p.write_text('{"hello": 1}'), p)[1], "JSON, but not a tokenizer: no 'model', 'pre_tokenizer', "),
        (lambda p: (p.mkdir(), p)[1], "a folder; give a tokenizer.json"),  # not "[Errno 21] Is a directory"
        (_sentencepiece, "a BPE model with a Metaspace decoder; octlm reads byte-level BPE"),
        (lambda p: byte_level(p, "<pad>"), "no end-of-text token (<|endoftext|> or <|end_of_text|>)"),
    ],
)
def test_a_file_octlm_cannot_count_is_refused_in_one_line(tmp_path, make, says, capsys):
    path = make(tmp_path / "tokenizer.json")
    with pytest.raises(DataError, match=re.escape(says)):
        Tokenizer.brought(path)
    assert main(["train", "--tokenizer", str(path), "--max-steps", "2", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--tokenizer {path}" in err and not (tmp_path / "run").exists()


def test_a_vocabulary_size_beside_a_brought_tokenizer_is_refused(tmp_path, capsys):
    path = byte_level(tmp_path / "t.json", "<|endoftext|>")
    assert main(["train", "--tokenizer", str(path), "--vocab-size", "512", "--out", str(tmp_path / "r")]) == 1
    assert "the vocabulary is the file's; drop --vocab-size" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_fine_tune_keeps_its_sources_tokenizer(tmp_path, trained_run, capsys):
    path = byte_level(tmp_path / "t.json", "<|endoftext|>")
    argv = ["train", "--tokenizer", str(path), "--init-from", str(trained_run), "--out", str(tmp_path / "r")]
    assert main(argv) == 1 and not (tmp_path / "r").exists()
    assert "a fine-tune keeps its source run's tokenizer" in capsys.readouterr().err
