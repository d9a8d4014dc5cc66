"""Bad input, case by case: a clear error that names the file or value and the fix, and nothing lost.

Each case of the list octlm promises (README, "Reliability") has a test. Most are
here, end to end through ``octlm train``; the few tested closer to the code
they guard live beside it and are listed in ``ELSEWHERE``, which
:func:`test_every_case_elsewhere_exists` keeps honest.

| case                                          | test                                                      |
| --------------------------------------------- | --------------------------------------------------------- |
| an empty file                                 | test_empty_file                                           |
| a folder with no text files                   | test_folder_without_text_files                            |
| text shorter than one block                   | test_text_shorter_than_one_block                          |
| a binary file                                 | test_binary_file                                          |
| text that is not UTF-8                        | test_not_utf8_names_file_offset_and_encoding_flag        |
| Windows line endings and a byte-order mark    | test_windows_line_endings_and_bom_are_accepted            |
| one huge line                                 | test_one_huge_line_trains                                 |
| token ids < 0 or >= vocab_size                | test_token_ids_outside_the_vocabulary                     |
| a tensor of the wrong rank                    | test_tensor_of_the_wrong_rank                             |
| a sequence past the learned table             | test_sequence_past_the_learned_table                      |
| a loss that becomes NaN or infinite           | test_infinite_loss_stops_and_reports_the_step, ELSEWHERE  |
| an unknown option                             | test_unknown_option, ELSEWHERE                            |
| a contradictory option                        | test_contradictory_model_options, ELSEWHERE               |
| bad input never costs a run                   | test_overwrite_with_bad_input_keeps_the_old_run           |
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.data import open_tokens
from octlm.tokenizer import Tokenizer

TINY = ["--vocab-size", "280", "--context-length", "16", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
        "--batch-size", "4", "--eval-interval", "50", "--eval-blocks", "4", "--final-eval-blocks", "4", "--sample-tokens", "0",
        "--max-steps", "3"]

#: Cases tested next to the code they guard: (module, test function).
ELSEWHERE = {
    "NaN loss keeps the last good checkpoint": ("test_resume", "test_nan_loss_stops_and_keeps_the_last_good_checkpoint"),
    "a huge learning rate": ("test_resume", "test_huge_learning_rate_is_caught_by_the_cli"),
    "unknown or mistyped TOML key": ("test_cli", "test_bad_toml_config"),
    "resume with a different model shape, seed, data, batch": ("test_resume", "test_contradictory_options_on_resume"),
    "pieces of a long text encode like the whole": ("test_tokenizer", "test_pieces_encode_exactly_like_the_whole_text"),
    "short training text for the sampler": ("test_data", "test_short_training_text_is_refused"),
}


def train_fails(capsys, args, out) -> str:
    """Run ``octlm train``; it must fail with one clear line and leave no run folder."""
    code = main(["train", *args, "--out", str(out), *TINY])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("octlm: error: ") and "Traceback" not in err
    assert not out.exists(), "bad input left a run folder behind"
    assert not list(out.parent.glob(f".{out.name}.partial-*")), "bad input left a staging folder behind"
    return err


def test_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    err = train_fails(capsys, ["--text", str(empty)], tmp_path / "r")
    assert f"{empty}: file is empty; remove it from --text" in err


def test_folder_without_text_files(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "blank.txt").write_text("   \n")
    err = train_fails(capsys, ["--text", str(folder)], tmp_path / "r")
    assert f"no text files found in {folder} (2 skipped as empty or binary)" in err and "give --text a folder" in err


def test_text_shorter_than_one_block(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be, that is the question.\n" * 3)
    err = train_fails(capsys, ["--text", str(short)], tmp_path / "r")
    assert "fewer than one block of context_length + 1 = 17" in err and "--context-length" in err and "--val-fraction" in err


def test_binary_file(tmp_path, capsys):
    blob = tmp_path / "model.bin"
    blob.write_bytes(bytes(range(256)) * 10)
    err = train_fails(capsys, ["--text", str(blob)], tmp_path / "r")
    assert f"{blob}: file is binary (it holds NUL bytes); give text files" in err


def test_not_utf8_names_file_offset_and_encoding_flag(small_corpus, tmp_path, capsys):
    latin = tmp_path / "latin.txt"
    text = small_corpus.read_text(encoding="utf-8")[:20_000]
    raw = text.encode("cp1252") + "Caf\u00e9 cr\u00e8me\n".encode("cp1252")
    latin.write_bytes(raw)
    err = train_fails(capsys, ["--text", str(latin)], tmp_path / "r")
    assert f"{latin}: not valid utf-8 at byte offset {len(text.encode()) + 3} (byte 0xe9)" in err
    assert "--encoding cp1252" in err
    # the fix the message offers works
    assert main(["train", "--text", str(latin), "--encoding", "cp1252", "--out", str(tmp_path / "ok"), "--quiet", *TINY]) == 0


def test_windows_line_endings_and_bom_are_accepted(small_corpus, tmp_path, capsys):
    windows = tmp_path / "windows.txt"
    text = small_corpus.read_text(encoding="utf-8")[:30_000].replace("\n", "\r\n")
    windows.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    run = tmp_path / "r"
    assert main(["train", "--text", str(windows), "--out", str(run), "--val-fraction", "0.2", "--quiet", *TINY]) == 0
    tokenizer = Tokenizer.load(run / "tokenizer.json")
    stream = open_tokens(run / "train.bin", "uint16")
    decoded = tokenizer.decode(np.asarray(stream[:-1]).tolist())  # the stream ends with <|endoftext|>
    assert decoded == text[: int(len(text) * 0.8)]  # line endings kept, the byte-order mark is not text


def test_one_huge_line_trains(small_corpus, tmp_path, capsys):
    # 2 MB without a newline (the README's bench/huge_line.py measures 20 MB); the tokenizer
    # cuts it into pieces at pre-token boundaries, so it costs no more memory than a normal file.
    line = tmp_path / "line.txt"
    base = small_corpus.read_text(encoding="utf-8").replace("\n", " ")
    text = (base * (2_000_000 // len(base) + 1))[:2_000_000]
    line.write_text(text, encoding="utf-8")
    run = tmp_path / "r"
    assert main(["train", "--text", str(line), "--out", str(run), "--quiet", *TINY]) == 0
    tokenizer = Tokenizer.load(run / "tokenizer.json")
    stream = open_tokens(run / "val.bin", "uint16")
    assert tokenizer.decode(np.asarray(stream[:-1]).tolist()) == text[int(len(text) * 0.9) :]


@pytest.fixture(scope="module")
def model():
    return Decoder(DecoderConfig(vocab_size=300, context_length=16, d_model=16, n_heads=2, n_layers=1))


@pytest.mark.parametrize("bad", [-1, 300, 10**6])
def test_token_ids_outside_the_vocabulary(model, bad):
    ids = torch.tensor([[1, 2, bad, 3]])
    with pytest.raises(ValueError) as err:
        model(ids)
    assert f"token id {bad} is outside the vocabulary [0, 300)" in str(err.value)
    assert "encode text with the run's own tokenizer" in str(err.value)


def test_tensor_of_the_wrong_rank(model):
    with pytest.raises(ValueError) as err:
        model(torch.tensor([1, 2, 3]))
    assert "shape [B, T] (rank 2), got rank 1 with shape [3]" in str(err.value) and "unsqueeze(0)" in str(err.value)
    with pytest.raises(ValueError, match="rank 3"):
        model(torch.zeros(2, 3, 4, dtype=torch.long))


def test_sequence_past_the_learned_table(model):
    model(torch.zeros(1, 16, dtype=torch.long))  # the whole table is fine
    with pytest.raises(ValueError) as err:
        model(torch.zeros(1, 17, dtype=torch.long))
    message = str(err.value)
    assert "learned positions have 16 rows" in message and "length 17" in message
    assert "crop the sequence to 16 tokens" in message and "rope" in message


def test_infinite_loss_stops_and_reports_the_step(small_corpus, tmp_path, capsys, monkeypatch):
    import octlm.train as train_module

    real, calls = train_module.cross_entropy, []

    def overflowing(logits, targets, reduction="mean"):
        calls.append(None)
        loss = real(logits, targets, reduction)
        return loss * float("inf") if len(calls) == 3 else loss

    monkeypatch.setattr(train_module, "cross_entropy", overflowing)
    code = main(["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), "--save-every", "1", *TINY])
    err = capsys.readouterr().err
    assert code == 1 and "the training loss became inf at step 2" in err
    assert "last good checkpoint (step 2," in err and "--learning-rate" in err


def test_unknown_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--learning_rate", "3"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --learning_rate" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,match",
    [
        (["--d-model", "30", "--n-heads", "4"], "--d-model=30 is not divisible by n_heads=4; pick n_heads among the divisors"),
        (["--activation", "relu"], "invalid choice: 'relu'"),
        (["--position", "rope", "--d-model", "12", "--n-heads", "4"], "head_dim=3"),
    ],
)
def test_contradictory_model_options(small_corpus, tmp_path, capsys, args, match):
    try:
        code = main(["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), *args])
    except SystemExit as exit_:  # argparse: a usage error
        code = exit_.code
    assert code in (1, 2)
    assert match in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_overwrite_with_bad_input_keeps_the_old_run(trained_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train", "--text", str(empty), "--out", str(run), "--overwrite"]) == 1
    assert "file is empty" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_every_case_elsewhere_exists():
    for case, (module, name) in ELSEWHERE.items():
        assert callable(getattr(importlib.import_module(module), name, None)), case
