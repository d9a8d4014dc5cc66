"""Bad input, case by case: a clear error that names the file or value and the fix, and nothing lost.

Each case of the list octlm promises (docs/reliability.md) has a test. Most are
here, end to end through ``octlm train``; the few tested closer to the code
they guard live beside it and are listed in ``ELSEWHERE``, which
:func:`test_every_case_elsewhere_exists` keeps honest.

| case                                          | test                                                      |
| --------------------------------------------- | --------------------------------------------------------- |
| an empty file                                 | test_empty_file                                           |
| valid UTF-8 read with a wrong --encoding      | test_a_wrong_encoding_of_utf8_text_is_refused             |
| a binary file that is not UTF-16 either       | test_binary_file_hint_names_utf16_only_when_it_decodes    |
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
| optimizer, seed and vocabulary values         | test_impossible_option_values_are_refused_before_reading  |
| --text with no path                           | test_text_flag_without_a_path                             |
| UTF-16 text                                   | test_utf16_needs_and_accepts_its_encoding                 |
| a FIFO or socket inside a folder              | test_fifo_in_a_folder_is_skipped                          |
| the same file twice                           | test_repeated_file_is_named                               |
| a second process on the same run              | test_a_second_process_cannot_train_the_same_run           |
| a batch that cannot fit in memory             | test_batch_larger_than_memory_is_refused                  |
| unusable --out and --config paths             | test_out_and_config_paths_the_file_system_refuses         |
| bad sampling values and prompts               | test_sample_refuses_nan_temperature_and_non_utf8_prompt   |
| seeds torch cannot take, in every command      | test_seed_out_of_range_in_sample_and_bench                |
| an empty --text path                          | test_empty_text_path_is_refused                           |
| a symbolic link loop or dangling link         | test_a_symlink_loop_is_named_as_one                       |
| an earlier run inside a --text folder         | test_run_folder_inside_a_text_folder_is_skipped           |
| --out below a file, not UTF-8, unwritable     | test_out_paths_that_cannot_become_a_folder                |
| --out in a folder no command can write in     | test_out_in_a_folder_that_cannot_be_written_is_refused_before_the_work
|
| --out . (the current folder) in every command | test_out_that_is_the_current_folder_is_refused            |
| --overwrite of a folder holding a person's files | test_overwrite_replaces_only_what_the_command_wrote    |
| a length study's --out holding its --text     | test_a_length_study_never_replaces_its_own_text           |
| --out that is a link or a mount point         | test_out_that_is_a_link_or_a_mount_point_is_refused       |
| a failed rename of the output into --out      | test_a_failed_rename_into_out_leaves_nothing_and_says_what_to_do |
| an empty --out, --init-from or --config path  | test_an_empty_path_is_refused_not_ignored                 |
| a person's files inside octlm's own subfolders | test_overwrite_looks_inside_the_folders_octlm_wrote      |
| a damaged config.json on --resume             | test_resume_with_a_damaged_config_names_the_file          |
| --resume on a file or an imported model       | test_resume_on_a_file_or_an_imported_run                  |
| --overwrite of a run that is training         | test_overwrite_refuses_a_run_another_process_is_training  |
| a damaged train.bin, for every reader         | test_damaged_token_file_is_named_by_every_reader          |
| an ALiBi prompt too long for memory           | test_alibi_prompt_too_long_for_memory_is_refused          |
| an option the chosen scheme does not read     | ELSEWHERE                                                 |
| embeddings --out holding other files or a run | ELSEWHERE                                                 |
| attention --out holding other files or a run  | ELSEWHERE                                                 |
| attention: missing run, --length, prompt, text | ELSEWHERE                                                 |
| staging folders left by a kill -9             | ELSEWHERE                                                 |
| a folder of the wrong kind (transformers/run) | ELSEWHERE                                                 |
| serve/export-web --study of a non-study       | ELSEWHERE                                                 |
| serve/export-web with both --run and --study   | ELSEWHERE                                                 |
| a huge binary file (a disk image) in a folder | ELSEWHERE                                                 |
| a full disk while the corpus is prepared      | test_a_full_disk_during_preparation_names_the_folder_and_the_room |
| a full disk at any other file octlm writes    | test_a_failed_atomic_write_names_its_file_and_leaves_nothing |
"""

from __future__ import annotations

import errno
import importlib
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm import Decoder, DecoderConfig, fileio
from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.data.tokens import open_tokens
from tests.conftest import small_run

TINY = small_run(eval_interval=50, eval_blocks=4, final_eval_blocks=4, sample_tokens=0, max_steps=3)

#: Cases tested next to the code they guard: (module, test function).
ELSEWHERE = {
    "NaN loss keeps the last good checkpoint": (
        "test_resume",
        "test_nan_loss_stops_and_keeps_the_last_good_checkpoint",
    ),
    "a huge learning rate": ("test_resume", "test_huge_learning_rate_is_caught_by_the_cli"),
    "unknown or mistyped TOML key": ("test_cli", "test_bad_toml_config"),
    "resume with a different model shape, seed, data, batch": ("test_resume", "test_contradictory_options_on_resume"),
    "pieces of a long text encode like the whole": ("test_tokenizer", "test_pieces_encode_exactly_like_the_whole_text"),
    "short training text for the sampler": ("test_data", "test_short_training_text_is_refused"),
    "--rope-layout and the like for a scheme that does not read them": (
        "test_commands",
        "test_train_refuses_an_option_its_scheme_does_not_read",
    ),
    "the same in a length study none of whose schemes reads it": (
        "test_commands",
        "test_length_refuses_a_scheme_option_no_chosen_scheme_reads",
    ),
    "embeddings --out holding other files or a run": (
        "test_commands",
        "test_embeddings_out_never_replaces_other_files_or_a_run",
    ),
    "attention --out holding other files or a run": (
        "test_attention_command",
        "test_out_never_replaces_files_it_did_not_write",
    ),
    "attention: missing run, --length, prompt, text": (
        "test_attention_command",
        "test_bad_input_is_one_line_and_writes_nothing",
    ),
    "staging folders left by a kill -9": (
        "test_commands",
        "test_staging_left_by_a_killed_process_is_removed_and_reported",
    ),
    "--resume or --run on a transformers checkpoint": (
        "test_commands",
        "test_resume_of_a_transformers_checkpoint_points_at_import_hf",
    ),
    "import-hf of an octlm run": ("test_commands", "test_import_hf_of_an_octlm_run_names_it"),
    "serve/export-web --study of a non-study": ("test_study_view", "test_a_folder_that_is_not_a_study_is_one_line"),
    "serve/export-web with both --run and --study (neither: the playgrounds alone)": (
        "test_study_view",
        "test_run_and_study_are_one_or_the_other",
    ),
    "a huge binary file in a --text folder, recognised without reading it whole": (
        "test_data",
        "test_a_huge_binary_file_is_recognised_from_its_head_not_read_whole",
    ),
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
    assert f"{empty}: file is empty (or only whitespace); remove it from --text" in err


def test_folder_without_text_files(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "blank.txt").write_text("   \n")
    err = train_fails(capsys, ["--text", str(folder)], tmp_path / "r")
    assert f"no text files found in {folder} (2 skipped as empty or binary)" in err and "give --text a folder" in err


def test_a_skipped_file_is_named_in_the_warning_itself(tmp_path, capsys):
    # A new-user trial: the warning pointed to manifest.json, which a run that then fails never writes.
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("a line\n")
    (folder / "b.dat").write_bytes(bytes(range(256)) * 4)
    assert main(["train", "--text", str(folder), "--out", str(tmp_path / "r"), *TINY]) == 1  # too short to split
    err = capsys.readouterr().err
    assert f"skipped 1 entry that is not text: {folder / 'b.dat'} (binary)" in err
    assert not (tmp_path / "r").exists()


def test_text_shorter_than_one_block(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be, that is the question.\n" * 3)
    err = train_fails(capsys, ["--text", str(short)], tmp_path / "r")
    assert (
        "fewer than one block of context_length + 1 = 17" in err
        and "--context-length" in err
        and "--val-fraction" in err
    )


def test_binary_file(tmp_path, capsys):
    blob = tmp_path / "model.bin"
    blob.write_bytes(bytes(range(256)) * 10)
    err = train_fails(capsys, ["--text", str(blob)], tmp_path / "r")
    assert f"{blob}: file is binary (it holds NUL bytes); give text files" in err


@pytest.mark.parametrize("file", ["tokenizer.json", "train.bin"])
def test_a_full_disk_during_preparation_names_the_folder_and_the_room(
    small_corpus, tmp_path, capsys, monkeypatch, file
):
    """The disk fills at the first file (it was full already) or at the token file; a full disk shows at fsync on many
    file systems."""
    real_fsync = os.fsync

    def full_disk(fd):
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{file}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", full_disk)
    err = train_fails(capsys, ["--text", str(small_corpus)], tmp_path / "r")
    assert err.startswith(
        f"octlm: error: {tmp_path}: No space left on device while writing the prepared corpus (train.bin "
    )
    assert (
        re.search(r"needs at least [0-9.,]+ [kM]B there before training", err)
        and "--out a folder on another disk" in err
    )
    assert len(err.strip().splitlines()) == 1


def test_a_failed_atomic_write_names_its_file_and_leaves_nothing(tmp_path, monkeypatch):
    """Any other write that meets a full disk is named by the one-line error (``octlm: error: PATH: No space left on
    device``)."""

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", full_disk)
    with pytest.raises(OSError) as err:
        fileio.atomic_write(tmp_path / "notes.json", "{}")
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(tmp_path / "notes.json"))
    assert list(tmp_path.iterdir()) == []


def test_not_utf8_names_file_offset_and_encoding_flag(small_corpus, tmp_path, capsys):
    latin = tmp_path / "latin.txt"
    text = small_corpus.read_text(encoding="utf-8")[:20_000]
    raw = text.encode("cp1252") + "Caf\u00e9 cr\u00e8me\n".encode("cp1252")
    latin.write_bytes(raw)
    err = train_fails(capsys, ["--text", str(latin)], tmp_path / "r")
    assert f"{latin}: not valid utf-8 at byte offset {len(text.encode()) + 3} (byte 0xe9)" in err
    assert "--encoding cp1252" in err
    # the fix the message offers works
    assert (
        main(["train", "--text", str(latin), "--encoding", "cp1252", "--out", str(tmp_path / "ok"), "--quiet", *TINY])
        == 0
    )


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


@pytest.mark.slow  # a tokenizer trained on 2 MB
def test_one_huge_line_trains(small_corpus, tmp_path, capsys):
    # 2 MB without a newline (bench/huge_line.py measures 20 MB, docs/reliability.md); the tokenizer
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
    import octlm.train.trainer as train_module

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
        (
            ["--d-model", "30", "--n-heads", "4"],
            "--d-model=30 is not divisible by --n-heads=4; pick --n-heads among the divisors of --d-model: "
            "1, 2, 3, 5, 6, 10, 15, 30",
        ),
        (["--activation", "relu"], "invalid choice: 'relu'"),
        (["--position", "rope", "--d-model", "12", "--n-heads", "4"], "head_dim=3"),
        (
            ["--position", "rope", "--partial-rotary-factor", "1.5"],
            "--partial-rotary-factor must be in (0, 1], got 1.5",
        ),
        (["--position", "rope", "--partial-rotary-factor", "0"], "--partial-rotary-factor must be in (0, 1], got 0"),
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


def test_a_config_built_in_python_names_every_option_as_python_does():
    """The command line's refusal names flags; the same refusal from Python names the config's fields, all of them."""
    with pytest.raises(ValueError) as err:
        DecoderConfig(d_model=30, n_heads=4)
    assert str(err.value) == (
        "DecoderConfig.d_model=30 is not divisible by DecoderConfig.n_heads=4; pick DecoderConfig.n_heads among the "
        "divisors of DecoderConfig.d_model: 1, 2, 3, 5, 6, 10, 15, 30"
    )


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


@pytest.mark.parametrize(
    "flags,match",
    [
        (["--vocab-size", "10"], "--vocab-size must be at least 257"),
        (["--beta1", "1"], "--beta1 must be in [0, 1)"),
        (["--beta2", "-0.5"], "--beta2 must be in [0, 1)"),
        (["--seed", "-1"], "--seed must be between 0 and 9223372036854775807"),
        (["--seed", str(2**63)], "--seed must be between 0 and 9223372036854775807"),  # torch would overflow
        (["--weight-decay", "-1"], "--weight-decay must be a finite number >= 0"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0"),
        (["--grad-clip", "-1"], "--grad-clip must be a finite number >= 0"),
        (["--learning-rate", "inf"], "--learning-rate must be a finite number > 0"),
        (["--time-budget", "inf"], "--time-budget must be a finite number of seconds > 0"),
        (["--encoding", "nosuch"], "--encoding nosuch: unknown text encoding"),
        (["--encoding", "rot13"], "--encoding rot13: unknown text encoding"),  # a codec, but not for text
        (["--val-fraction", "0"], "--val-fraction must be between 0 and 1"),
    ],
)
def test_impossible_option_values_are_refused_before_reading(small_corpus, tmp_path, capsys, flags, match):
    # TINY comes after the flags under test; these names are not in TINY except --vocab-size, which must win here
    code = main(["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), *TINY, *flags])
    err = capsys.readouterr().err
    assert code == 1 and match in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_text_flag_without_a_path(tmp_path, capsys):
    # An empty shell variable ($DATA) must not silently mean "the standard library".
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--text", "--out", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert "--text" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_utf16_needs_and_accepts_its_encoding(shakespeare, tmp_path, capsys):
    wide = tmp_path / "wide.txt"
    wide.write_text(shakespeare.read_text(encoding="utf-8")[:30_000], encoding="utf-16")
    err = train_fails(capsys, ["--text", str(wide)], tmp_path / "r")
    assert "binary" in err and "--encoding utf-16" in err
    assert (
        main(["train", "--text", str(wide), "--encoding", "utf-16", "--out", str(tmp_path / "ok"), *TINY, "--quiet"])
        == 0
    )


def test_fifo_in_a_folder_is_skipped(shakespeare, tmp_path, capsys):
    import json
    import os

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "play.txt").write_text(shakespeare.read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    os.mkfifo(folder / "pipe")  # reading it would block forever
    assert main(["train", "--text", str(folder), "--out", str(tmp_path / "r"), *TINY, "--quiet"]) == 0
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert {"path": str(folder / "pipe"), "reason": "not a regular file"} in manifest["skipped"]


def test_repeated_file_is_named(small_corpus, tmp_path, capsys):
    assert main(["train", "--text", str(small_corpus), str(small_corpus), "--out", str(tmp_path / "r"), *TINY]) == 0
    assert f"{small_corpus} repeats {small_corpus} byte for byte" in capsys.readouterr().err


def test_a_second_process_cannot_train_the_same_run(tmp_path):
    from octlm.errors import OctlmError
    from octlm.run.folder import RunFolder

    first = RunFolder(tmp_path).lock()  # flock locks belong to an open file, so a second open conflicts even here
    with pytest.raises(OctlmError, match=f"pid {__import__('os').getpid()}.*is training this run"):
        RunFolder(tmp_path).lock()
    first.close()
    RunFolder(tmp_path).lock().close()  # free again once the holder is gone


def test_batch_larger_than_memory_is_refused(small_corpus, tmp_path, capsys):
    code = main(
        ["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), *TINY, "--batch-size", "100000000"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "GiB of activations per step" in err and "lower --batch-size, or --vocab-size" in err


def test_model_larger_than_memory_names_the_model_flags(small_corpus, tmp_path, capsys):
    code = main(["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), *TINY, "--n-layers", "10000000"])
    err = capsys.readouterr().err
    assert code == 1 and "lower --batch-size, or --n-layers or --d-model" in err
    assert not (tmp_path / "r").exists()


def test_a_context_too_long_for_memory_names_the_context_length(small_corpus, tmp_path, capsys):
    """At 100,000 tokens the T x T scores dominate, which no --d-model or --n-layers can shrink enough (a new user's
    trial: the hint named only those, already at their least)."""
    argv = ["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), "--context-length", "100000"]
    code = main([*argv, "--batch-size", "1", "--n-layers", "1", "--d-model", "4", "--n-heads", "1", "--max-steps", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "lower --batch-size, or --context-length, --n-heads or --n-layers" in err
    assert not (tmp_path / "r").exists()


def test_out_and_config_paths_the_file_system_refuses(small_corpus, tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert main(["train", "--text", str(small_corpus), "--out", str(a_file / "run"), *TINY]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error: ") and "Traceback" not in err
    assert main(["train", "--config", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"--config {tmp_path}: cannot read it" in err


def test_sample_refuses_nan_temperature_and_non_utf8_prompt(trained_run, capsys):
    assert main(["sample", "--run", str(trained_run), "--temperature", "nan"]) == 1
    assert "--temperature must be a finite number" in capsys.readouterr().err
    bad_prompt = b"ab\xff\xfe".decode("utf-8", errors="surrogateescape")  # what Python makes of such argv bytes
    assert main(["sample", "--run", str(trained_run), "--prompt", bad_prompt]) == 1
    assert "--prompt 'ab\\xff\\xfe' is not valid UTF-8 (byte 0xff" in capsys.readouterr().err
    assert main(["sample", "--run", str(trained_run / "config.json")]) == 1
    assert "is a file; give the run folder" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["sample", "--run"], ["train", "--resume"], ["train", "--init-from"]])
def test_a_file_outside_any_run_is_not_sent_to_its_folder(command, tmp_path, capsys):
    stray = tmp_path / "notes.txt"  # a folder holding no run: naming it as "the run folder" would send the user astray
    stray.write_text("not a run")
    assert main([*command, str(stray)]) == 1
    err = capsys.readouterr().err
    assert f"{stray}: is a file, not an octlm run folder" in err
    assert "give the run folder that holds it" not in err


@pytest.mark.parametrize("command", [["bench"], ["sample", "--max-new-tokens", "1"]])
@pytest.mark.parametrize("seed", ["-1", str(2**63)])
def test_seed_out_of_range_in_sample_and_bench(trained_run, capsys, command, seed):
    extra = ["--run", str(trained_run)] if command[0] == "sample" else []
    assert main([*command, *extra, "--seed", seed]) == 1
    err = capsys.readouterr().err
    assert f"--seed must be between 0 and {2**63 - 1} (2**63 - 1), got {seed}" in err and "Traceback" not in err


def test_empty_text_path_is_refused(tmp_path, capsys):
    # "$DATA" with DATA unset: Path("") would be the current folder, read whole.
    err = train_fails(capsys, ["--text", ""], tmp_path / "r")
    assert "--text got an empty path" in err


def test_a_symlink_loop_is_named_as_one(tmp_path, capsys):
    # Path.exists() is False for a loop, which read as "no such file or folder" while `ls` shows the link.
    loop, ring, dangling = tmp_path / "loop", tmp_path / "ring", tmp_path / "dangling"
    loop.symlink_to("loop")
    ring.symlink_to("ring2")
    (tmp_path / "ring2").symlink_to("ring")
    dangling.symlink_to("nowhere.txt")
    err = train_fails(capsys, ["--text", str(loop)], tmp_path / "r")
    assert (
        f"{loop}: a symbolic link loop ({loop} -> loop leads back to itself" in err and f"ln -sfn TARGET {loop}" in err
    )
    assert "no such file" not in err
    err = train_fails(capsys, ["--text", str(ring)], tmp_path / "r")
    assert f"{ring}: a symbolic link loop ({ring} -> ring2" in err
    err = train_fails(capsys, ["--text", str(loop / "a.txt")], tmp_path / "r")
    assert f"{loop / 'a.txt'}: a symbolic link loop in the path" in err
    err = train_fails(capsys, ["--text", str(dangling)], tmp_path / "r")
    assert f"{dangling}: a symbolic link to nowhere.txt, which does not exist" in err
    # a link on disk wins over a built-in corpus of the same name, as a file would
    (tmp_path / "tinyshakespeare").symlink_to("tinyshakespeare")
    err = train_fails(capsys, ["--text", str(tmp_path / "tinyshakespeare")], tmp_path / "r")
    assert "symbolic link loop" in err


def test_run_folder_inside_a_text_folder_is_skipped(trained_run, shakespeare, tmp_path, capsys):
    import json
    import shutil

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "play.txt").write_text(shakespeare.read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    shutil.copytree(trained_run, folder / "runs" / "old")
    assert main(["train", "--text", str(folder), "--out", str(tmp_path / "r"), *TINY, "--quiet"]) == 0
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == [str(folder / "play.txt")]
    assert {"path": str(folder / "runs" / "old"), "reason": "an octlm run folder"} in manifest["skipped"]


def test_out_paths_that_cannot_become_a_folder(small_corpus, tmp_path, capsys):
    import os
    import sys

    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    err = train_fails(capsys, ["--text", str(small_corpus)], a_file / "run")
    assert f"{a_file} is a file, not a folder; choose another --out" in err
    not_utf8 = tmp_path / os.fsdecode(b"run\xff")
    err = train_fails(capsys, ["--text", str(small_corpus)], not_utf8)
    assert "the path is not valid UTF-8" in err
    if sys.platform == "linux" and os.path.isdir("/proc/self"):
        # /proc takes no new folders, even from root
        assert main(["train", "--text", str(small_corpus), "--out", "/proc/octlm-run", *TINY]) == 1
        err = capsys.readouterr().err
        assert err.startswith("octlm: error: --out /proc/octlm-run: cannot ") and ".partial-" not in err


def _resumable_run(small_corpus, tmp_path, capsys):
    run = tmp_path / "r"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(run),
                *TINY,
                "--max-steps",
                "2",
                "--save-every",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    return run


@pytest.mark.parametrize(
    "damage,match",
    [
        ({"batch_size": None}, "key 'batch_size' must be int, got null"),
        ({"learning_rate": "fast"}, "key 'learning_rate' must be float, got \"fast\""),
        ({"max_steps": "x"}, "key 'max_steps' must be int, got \"x\""),
        ({"position": "bogus"}, "key 'position' must be one of"),
        ({"batch_size": -4}, "--batch-size must be >= 1, got -4 (from the flags given now or the run's"),
        ("not options", 'its "train" section must be an object of options, got str'),
    ],
)
def test_resume_with_a_damaged_config_names_the_file(small_corpus, tmp_path, capsys, damage, match):
    import json

    run = _resumable_run(small_corpus, tmp_path, capsys)
    config = json.loads((run / "config.json").read_text())
    config["train"] = {**config["train"], **damage} if isinstance(damage, dict) else damage
    (run / "config.json").write_text(json.dumps(config))
    assert main(["train", "--resume", str(run), "--max-steps", "4"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error: ") and "Traceback" not in err
    assert match in err
    if not isinstance(damage, dict) or "batch_size" not in damage or damage["batch_size"] is None:
        assert str(run / "config.json") in err


def test_resume_on_a_file_or_an_imported_run(small_corpus, tmp_path, capsys):
    import json

    run = _resumable_run(small_corpus, tmp_path, capsys)
    assert main(["train", "--resume", str(run / "config.json")]) == 1
    assert f"is a file; give the run folder that holds it ({run})" in capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    config["train"] = {"imported_from": "/models/gpt2"}  # what octlm import-hf writes
    (run / "config.json").write_text(json.dumps(config))
    assert main(["train", "--resume", str(run)]) == 1
    assert "made by octlm import-hf and holds no training state" in capsys.readouterr().err


def test_overwrite_refuses_a_run_another_process_is_training(trained_run, small_corpus, tmp_path, capsys):
    import shutil

    from octlm.run.folder import RunFolder

    run = tmp_path / "busy"
    shutil.copytree(trained_run, run)
    held = RunFolder(run).lock()  # stands for the training process
    try:
        assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", *TINY]) == 1
        assert "is training this run" in capsys.readouterr().err
        assert (run / "model.safetensors").read_bytes() == (trained_run / "model.safetensors").read_bytes()
    finally:
        held.close()


@pytest.mark.parametrize("damage", ["odd", "short", "empty"])
def test_damaged_token_file_is_named_by_every_reader(trained_run, tmp_path, capsys, damage):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    data = (run / "train.bin").read_bytes()
    (run / "train.bin").write_bytes({"odd": data[:-1], "short": data[: len(data) // 2], "empty": b""}[damage])
    for command in (
        ["embeddings", "--run", str(run), "--out", str(tmp_path / "fig")],
        ["export-web", "--run", str(run), "--out", str(tmp_path / "web")],
    ):
        assert main(command) == 1, command
        err = capsys.readouterr().err
        assert err.startswith(f"octlm: error: {run / 'train.bin'}: ") and "Traceback" not in err


def test_alibi_prompt_too_long_for_memory_is_refused(small_corpus, tmp_path, capsys, monkeypatch):
    import octlm.train.memory_limit

    run = tmp_path / "alibi"
    assert main(["train", "--text", str(small_corpus), "--out", str(run), *TINY, "--position", "alibi", "--quiet"]) == 0
    monkeypatch.setattr(octlm.train.memory_limit, "device_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    assert main(["sample", "--run", str(run), "--prompt", "a" * 400, "--max-new-tokens", "4"]) == 1
    err = capsys.readouterr().err
    assert "ALiBi's bias for that length needs about" in err and "keep it under" in err


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1", "cp1252"])
def test_a_wrong_encoding_of_utf8_text_is_refused(shakespeare, tmp_path, capsys, encoding):
    text = tmp_path / "utf8.txt"
    body = "Café – naïve résumé\n" + shakespeare.read_text(encoding="utf-8")[:20_000]
    raw = body.encode("utf-8")
    text.write_bytes(raw if len(raw) % 2 == 0 else raw + b"\n")  # whole UTF-16 units, so only the meaning is wrong
    err = train_fails(capsys, ["--text", str(text), "--encoding", encoding], tmp_path / "r")
    assert str(text) in err and f"--encoding {encoding}" in err and "valid UTF-8" in err
    assert "drop --encoding or give --encoding utf-8" in err and "Café" in err


def test_an_encoding_that_reads_utf8_text_the_same_is_fine(shakespeare, tmp_path, capsys):
    import json

    ascii_text = tmp_path / "ascii.txt"
    ascii_text.write_text(shakespeare.read_text(encoding="utf-8")[:20_000], encoding="ascii")
    assert (
        main(
            [
                "train",
                "--text",
                str(ascii_text),
                "--encoding",
                "latin-1",
                "--out",
                str(tmp_path / "ok"),
                *TINY,
                "--json",
            ]
        )
        == 0
    )
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    corpus = next(e for e in events if e["event"] == "corpus")
    assert corpus["first_line"] == "First Citizen:"


def test_the_corpus_line_shows_the_first_decoded_line(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("\n\n  \x1b[31mred\tline " + "x" * 100 + "\n" + "more text here\n" * 400, encoding="utf-8")
    main(["train", "--text", str(text), "--out", str(tmp_path / "r"), *TINY])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("corpus:"))
    assert 'first line: "\\x1b[31mred line xxx' in line and '..."' in line and "\x1b" not in line


def test_binary_file_hint_names_utf16_only_when_it_decodes(tmp_path, capsys):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\xd8\x00\xd8" + bytes(range(256)) + b"\x01")  # lone surrogates, odd length: not UTF-16
    err = train_fails(capsys, ["--text", str(blob)], tmp_path / "r")
    assert "binary" in err and "utf-16" not in err


def test_no_run_folder_is_named_when_bad_input_leaves_none(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    assert main(["train", "--text", str(empty), "--out", str(tmp_path / "r"), *TINY]) == 1
    captured = capsys.readouterr()
    assert "run folder" not in captured.out + captured.err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["train", "embeddings", "attention", "export-web", "export-hf", "length"])
@pytest.mark.parametrize("out", [".", "HERE", ".."])
def test_out_that_is_the_current_folder_is_refused(
    trained_run, small_corpus, tmp_path, monkeypatch, capsys, command, out
):
    # Each command builds its output beside the target and renames it in: `--out .` ended in a traceback
    # and left a staging folder inside the current folder (a new user's trial).
    here = tmp_path / "parent" / "here"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    out = str(here) if out == "HERE" else out
    argv = {
        "train": ["train", "--text", str(small_corpus), "--out", out, *TINY],
        "embeddings": ["embeddings", "--run", str(trained_run), "--out", out],
        "attention": ["attention", "--run", str(trained_run), "--out", out],
        "export-web": ["export-web", "--run", str(trained_run), "--out", out],
        "export-hf": ["export-hf", str(trained_run), out],
        "length": ["length", "--text", str(small_corpus), "--out", out, "--max-steps", "2"],
    }[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "folder you are in" in err and "give a new folder instead" in err and "Traceback" not in err
    assert not any(here.iterdir()) and sorted(p.name for p in here.parent.iterdir()) == ["here"]


def test_overwrite_replaces_only_what_the_command_wrote(trained_run, small_corpus, tmp_path, capsys):
    # A second new-user trial: --overwrite deleted notes put in a run folder, a run nested in it, and the --text it
    # read.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "NOTES.md").write_text("mine")
    assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", *TINY]) == 1
    err = capsys.readouterr().err
    assert "holds NOTES.md besides what this command writes" in err and "move them out" in err
    (run / "NOTES.md").unlink()
    # octlm's own output inside a run may go with it; a person's text given as --text may not
    notes = run / "embeddings"
    notes.mkdir()
    (notes / "text.txt").write_text(small_corpus.read_text())
    assert main(["train", "--text", str(notes / "text.txt"), "--out", str(run), "--overwrite", *TINY]) == 1
    assert "holds --text" in capsys.readouterr().err and (notes / "text.txt").exists()
    page = tmp_path / "page"
    assert main(["export-web", "--run", str(trained_run), "--out", str(page)]) == 0
    (page / "MYNOTES.txt").write_text("mine")
    assert main(["export-web", "--run", str(trained_run), "--out", str(page), "--overwrite"]) == 1
    assert "holds MYNOTES.txt besides" in capsys.readouterr().err and (page / "MYNOTES.txt").exists()
    # without --overwrite too: the hint to add it would only lead to the refusal above
    assert main(["export-web", "--run", str(trained_run), "--out", str(page)]) == 1
    err = capsys.readouterr().err
    assert "holds MYNOTES.txt besides" in err and "add --overwrite" not in err


def test_a_length_study_never_replaces_its_own_text(small_corpus, tmp_path, capsys):
    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    (study / "length.md").write_text(small_corpus.read_text())  # a study folder, and the text the next study reads
    assert (
        main(["length", "--text", str(study / "length.md"), "--out", str(study), "--overwrite", "--max-steps", "2"])
        == 1
    )
    assert "holds --text" in capsys.readouterr().err and (study / "length.md").exists()


def _out_argv(command: str, out: Path, trained_run: Path, small_corpus: Path, tmp_path: Path) -> tuple[list[str], str]:
    """The cheapest command line of ``command`` that writes ``out``, and the name its messages give that folder."""
    if command == "import-hf":  # a transformers checkpoint to import, made first
        assert main(["export-hf", str(trained_run), str(tmp_path / "hf"), "--quiet"]) == 0
    return {
        "train": (["train", "--text", str(small_corpus), "--out", str(out), *TINY], "--out"),
        "length --text": (["length", "--text", str(small_corpus), "--out", str(out), "--max-steps", "2"], "--out"),
        "length --task": (["length", "--task", "passkey", "--out", str(out), "--max-steps", "2"], "--out"),
        "embeddings": (["embeddings", "--run", str(trained_run), "--out", str(out)], "--out"),
        "attention": (["attention", "--run", str(trained_run), "--out", str(out)], "--out"),
        "export-web --run": (["export-web", "--run", str(trained_run), "--out", str(out), "--overwrite"], "--out"),
        "export-web --study": (["export-web", "--study", str(tmp_path / "study"), "--out", str(out)], "--out"),
        "export-hf": (["export-hf", str(trained_run), str(out)], "OUT_DIR"),
        "import-hf": (["import-hf", str(tmp_path / "hf"), str(out)], "RUN_DIR"),
        "compare": (["compare", str(trained_run), "--out", str(out)], "--out"),
    }[command]


OUT_COMMANDS = [
    "train",
    "length --text",
    "length --task",
    "embeddings",
    "attention",
    "export-web --run",
    "export-web --study",
    "export-hf",
    "import-hf",
    "compare",
]


@pytest.mark.parametrize("command", OUT_COMMANDS)
@pytest.mark.parametrize(
    "kind", ["link to a folder", "dangling link", "mount point", "bind mount", "read-only mount point"]
)
def test_out_that_is_a_link_or_a_mount_point_is_refused(
    trained_run, small_corpus, tmp_path, monkeypatch, capsys, kind, command
):
    # Built beside --out and renamed over it, the output replaced a link with a folder, and a mount point failed
    # with "Device or resource busy" after all the work, leaving it in a staging folder (two new-user trials): in
    # attention, export-web, length and the rest, and for a bind mount (Docker's -v) that os.path.ismount misses.
    import octlm.run.outputs

    out = tmp_path / "the out"  # a space, written \040 in the mount table
    argv, flag = _out_argv(command, out, trained_run, small_corpus, tmp_path)
    before = set(tmp_path.iterdir())
    if kind in ("mount point", "read-only mount point"):
        out.mkdir()
        real_ismount, real_access = os.path.ismount, os.access
        monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(out) or real_ismount(p))
        if kind == "read-only mount point":
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: str(p) != str(out) and real_access(p, mode, **kw))
    elif kind == "bind mount":  # a folder of the same file system mounted here: only the mount table says so
        out.mkdir()
        table = tmp_path / "mountinfo"
        table.write_bytes(
            b"22 1 254:0 / / rw - ext4 /dev/vda rw\n42 22 254:0 /src "
            + os.fsencode(os.path.realpath(out)).replace(b" ", b"\\040")
            + b" rw - ext4 /dev/vda rw\n"
        )
        monkeypatch.setattr(octlm.run.outputs, "MOUNTINFO", table)
        before.add(table)
    else:
        (tmp_path / "real").mkdir()
        out.symlink_to(tmp_path / ("real" if kind == "link to a folder" else "nowhere"))
    assert main(argv) == 1
    err = capsys.readouterr().err
    what = {
        "read-only mount point": "is a mount point, which octlm cannot replace; give a new folder where you can write "
        "(it is read-only)",
        "link to a folder": "is a symbolic link",
        "dangling link": "is a symbolic link",
    }.get(kind, f"is a mount point, which octlm cannot replace; give a new folder inside it, e.g. {out / 'out'}")
    assert err.startswith(f"octlm: error: {flag} {out}: {what}") and err.count("\n") == 1, err
    assert set(tmp_path.iterdir()) == before | {out} | ({tmp_path / "real"} if "link" in kind else set())
    assert out.is_symlink() or not any(out.iterdir())
    assert not list(tmp_path.rglob("*.partial-*")) and not ("link" in kind and any((tmp_path / "real").iterdir()))


@pytest.mark.parametrize("command", ["attention", "length --task", "import-hf", "compare"])
def test_out_in_a_folder_that_cannot_be_written_is_refused_before_the_work(
    trained_run, small_corpus, tmp_path, monkeypatch, capsys, command
):
    # A read-only mount (or someone else's folder) above --out refused the staging folder only once the work was done.
    locked = tmp_path / "locked"
    locked.mkdir()
    argv, flag = _out_argv(command, locked / "a" / "out", trained_run, small_corpus, tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != locked and real_access(p, mode, **kw))
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        err == f"octlm: error: {flag} {locked / 'a' / 'out'}: cannot write in {locked} (Permission denied); choose a "
        "folder you can write to\n"
    )
    assert not any(locked.iterdir())


def test_a_failed_rename_into_out_leaves_nothing_and_says_what_to_do(trained_run, tmp_path, monkeypatch, capsys):
    # The last step of every staged command is a rename into --out; when the file system refuses it (a mount point
    # no check saw, a read-only folder), the finished output stayed in a hidden folder behind a bare errno string.
    out = tmp_path / "page"
    real_replace = os.replace

    # the staging folder's rename into place fails (or, with everything, any into --out)
    def busy(src, dst, everything=False):
        if Path(dst) == out and (everything or ".partial-" in Path(src).name):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", busy)
    assert main(["export-web", "--run", str(trained_run), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"octlm: error: --out {out}: cannot move the finished output into place ({os.strerror(errno.EBUSY)})"
    )
    assert "a mount point or a read-only folder" in err and f"e.g. {out / 'out'}" in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    # over an earlier export: that one is put back as it was
    monkeypatch.setattr(os, "replace", real_replace)
    assert main(["export-web", "--run", str(trained_run), "--out", str(out)]) == 0
    page = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(os, "replace", busy)
    capsys.readouterr()
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--overwrite"]) == 1
    assert "cannot move the finished output into place" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["page"] and {p.name: p.read_bytes() for p in out.iterdir()} == page
    # and should even putting it back fail, the message says where it is
    monkeypatch.setattr(os, "replace", lambda src, dst: busy(src, dst, everything=True))
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--overwrite"]) == 1
    assert f"the earlier page is in {tmp_path / '.page.old'}" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [".page.old"] and {
        p.name: p.read_bytes() for p in (tmp_path / ".page.old").iterdir()
    } == page


@pytest.mark.parametrize("flag", ["--out", "--init-from", "--config"])
def test_an_empty_path_is_refused_not_ignored(tmp_path, monkeypatch, capsys, flag):
    # `--init-from ""` trained from scratch and `--config ""` ran the defaults, silently (a second new-user trial).
    monkeypatch.chdir(tmp_path)
    assert main(["train", flag, "", "--text", "tinyshakespeare", *TINY]) == 1
    assert f"{flag} got an empty path ''" in capsys.readouterr().err and not any(tmp_path.iterdir())


@pytest.mark.slow  # a run trained again and three studies refused
def test_overwrite_looks_inside_the_folders_octlm_wrote(trained_run, small_corpus, tmp_path, capsys):
    # A third new-user trial: notes in RUN/embeddings/ went with train --overwrite, and notes anywhere under a
    # length study's runs/ went with length --overwrite.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    assert main(["embeddings", "--run", str(run), "--quiet"]) == 0
    (run / "embeddings" / "NOTES.md").write_text("mine")
    assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", *TINY]) == 1
    assert "holds embeddings/NOTES.md besides" in capsys.readouterr().err and (run / "embeddings" / "NOTES.md").exists()
    (run / "embeddings" / "NOTES.md").unlink()
    assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", "--quiet", *TINY]) == 0
    study = tmp_path / "study"
    for placed in ("runs/NOTES.md", "runs/mine/notes.txt", "runs/rope/NOTES.md"):
        shutil.rmtree(study, ignore_errors=True)
        shutil.copytree(trained_run, study / "runs" / "rope")
        (study / placed).parent.mkdir(parents=True, exist_ok=True)
        (study / placed).write_text("mine")
        assert (
            main(["length", "--text", str(small_corpus), "--out", str(study), "--overwrite", "--max-steps", "2"]) == 1
        )
        assert (
            f"holds {placed.rsplit('/', 1)[0] if placed.startswith('runs/mine') else placed} besides"
            in capsys.readouterr().err
        )
        assert (study / placed).read_text() == "mine"
