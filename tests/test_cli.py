"""The octlm command: help, JSON lines, TOML configs, sampling, bench and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise

import pytest

from octlm.cli import main
from tests.conftest import small_run

TINY = small_run(eval_interval=5, eval_blocks=4, sample_tokens=4)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_python_dash_m_help_shows_defaults():
    out = subprocess.run(
        [sys.executable, "-m", "octlm", "train", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--context-length" in out and "(default: 128)" in out and "--time-budget" in out


@pytest.mark.parametrize(
    "command",
    ["train", "sample", "bench", "length", "embeddings", "attention", "serve", "export-web", "export-hf", "import-hf"],
)
def test_every_command_has_help_and_json(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert "--json" in capsys.readouterr().out


def test_train_json_last_line_is_the_result(small_corpus, tmp_path, capsys):
    code = main(
        ["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), "--max-steps", "6", "--json", *TINY]
    )
    assert code == 0
    lines = json_lines(capsys.readouterr().out)
    result = lines[-1]
    assert result["event"] == "result"
    assert {"val_bpb", "val_loss", "tokens_per_second", "steps"} <= set(result)
    assert result["steps"] == 6 and result["val_bpb"] > 0
    assert any(line["event"] == "eval" for line in lines[:-1])


def test_toml_config_and_flags_win(small_corpus, tmp_path, capsys):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        f'text = "{small_corpus}"\nmax-steps = 3\nd_model = 16\nn_heads = 2\nposition = "rope"\nlearning_rate = 1e-3\n'
    )
    out = tmp_path / "r"
    code = main(
        [
            "train",
            "--config",
            str(recipe),
            "--out",
            str(out),
            "--max-steps",
            "4",
            "--json",
            "--vocab-size",
            "280",
            "--context-length",
            "16",
            "--n-layers",
            "1",
            "--batch-size",
            "4",
            "--sample-tokens",
            "0",
        ]
    )
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["position"] == "rope" and config["model"]["d_model"] == 16
    assert config["train"]["max_steps"] == 4  # the flag won
    assert config["train"]["learning_rate"] == 1e-3
    assert json_lines(capsys.readouterr().out)[-1]["steps"] == 4


@pytest.mark.parametrize(
    "toml,match",
    [
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("max_steps = 'ten'\n", "'max_steps' must be int"),
        ("position = 'x'\n", "must be one of"),
        ("= broken", "not valid TOML"),
        ("max_step = 5\n", "did you mean 'max_steps'? the keys are this command's options (the command's --help"),
        ("bogus = 1\n", "the keys are this command's options: activation, "),  # no near spelling: the list
        ("max_steps = 2\nmax-steps = 3\n", "'max_steps' and 'max-steps' are the same option; keep one of them"),
        ("text = []\n", "key 'text' is an empty list"),  # not a silent switch to the standard library
        ("text = 5\n", "key 'text' must be a list of str, got 5"),  # shown as written, not as [5]
        ("batch_size = true\n", "key 'batch_size' must be int, got true"),  # TOML's spelling, not Python's
    ],
)
def test_bad_toml_config(tmp_path, capsys, toml, match):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(toml)
    assert main(["train", "--config", str(recipe), "--out", str(tmp_path / "r")]) == 1
    assert match in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_deterministic_on_cpu(small_corpus, tmp_path, capsys):
    results = []
    for name in ("a", "b"):
        main(["train", "--text", str(small_corpus), "--out", str(tmp_path / name), "--max-steps", "5", "--json", *TINY])
        results.append(json_lines(capsys.readouterr().out)[-1])
    assert results[0]["val_loss"] == results[1]["val_loss"]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


def test_refuses_to_overwrite_a_run(trained_run, capsys):
    before = (trained_run / "model.safetensors").read_bytes()
    assert main(["train", "--out", str(trained_run), "--max-steps", "1"]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert (trained_run / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize(
    "args,match",
    [
        (["--d-model", "30", "--n-heads", "4"], "--d-model=30"),
        (["--position", "rope", "--d-model", "12", "--n-heads", "4"], "head_dim"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--time-budget", "-5"], "--time-budget"),
        (["--device", "cuda:7"], "cuda"),
        (["--val-fraction", "1.5"], "--val-fraction"),
    ],
)
def test_bad_train_options(small_corpus, tmp_path, capsys, args, match):
    code = main(["train", "--text", str(small_corpus), "--out", str(tmp_path / "r"), *args])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error:") and match in err and "Traceback" not in err


def test_unknown_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--lr", "3"])
    assert exit_.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_text_too_short_for_a_block(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be: that is the question.\n" * 4)
    assert main(["train", "--text", str(short), "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "tokens" in err and ("--context-length" in err or "--val-fraction" in err)


def test_sample_is_reproducible_and_json(trained_run, capsys):
    args = [
        "sample",
        "--run",
        str(trained_run),
        "--prompt",
        "ROMEO:",
        "--max-new-tokens",
        "12",
        "--seed",
        "7",
        "--json",
    ]
    main(args)
    first = json_lines(capsys.readouterr().out)[-1]
    main(args)
    second = json_lines(capsys.readouterr().out)[-1]
    assert first["samples"] == second["samples"] and first["samples"][0]
    assert first["prompt"] == "ROMEO:"


def test_sample_past_the_table_slides_the_window(trained_run, capsys):
    # context_length is 32 in the fixture; 60 new tokens cross it.
    assert main(["sample", "--run", str(trained_run), "--max-new-tokens", "60", "--temperature", "0", "--json"]) == 0
    assert json_lines(capsys.readouterr().out)[-1]["samples"][0]


def test_sample_streams_each_piece_as_it_is_generated(trained_run, capsys, monkeypatch):
    import octlm.model.decoder

    common = [
        "sample",
        "--run",
        str(trained_run),
        "--prompt",
        "ROMEO:",
        "--max-new-tokens",
        "12",
        "--seed",
        "7",
        "--num-samples",
        "2",
    ]
    assert main([*common, "--json"]) == 0
    samples = json_lines(capsys.readouterr().out)[-1]["samples"]
    pick, seen = octlm.model.decoder.sample_next, []

    def watched(*args, **kwargs):
        seen.append(sys.stdout.getvalue())  # stdout as it stands when the next token is about to be picked
        return pick(*args, **kwargs)

    monkeypatch.setattr(octlm.model.decoder, "sample_next", watched)
    assert main(common) == 0
    out = capsys.readouterr().out
    assert out == "ROMEO:" + samples[0] + "\n" + "-" * 60 + "\nROMEO:" + samples[1] + "\n"
    assert seen[0] == "ROMEO:"  # the prompt shows before the first token is computed
    assert all(a == b[: len(a)] for a, b in pairwise(seen))  # the text only grows
    assert seen[11] == "ROMEO:" + samples[0][: len(seen[11]) - 6] and len(seen[11]) > len("ROMEO:")


@pytest.mark.parametrize("streamed", [True, False])
def test_sample_ctrl_c_keeps_the_printed_text(trained_run, capsys, monkeypatch, streamed):
    import octlm.model.decoder

    common = ["sample", "--run", str(trained_run), "--prompt", "ROMEO:", "--seed", "7"]
    assert main([*common, "--max-new-tokens", "5", "--json"]) == 0
    first_five = json_lines(capsys.readouterr().out)[-1]["samples"][0]
    pick, calls = octlm.model.decoder.sample_next, []

    def interrupted_at_the_sixth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return pick(*args, **kwargs)

    monkeypatch.setattr(octlm.model.decoder, "sample_next", interrupted_at_the_sixth)
    assert main([*common, "--max-new-tokens", "50", *([] if streamed else ["--quiet"])]) == 130
    out, err = capsys.readouterr()
    assert out == ("ROMEO:" + first_five.rstrip("\ufffd") + "\n" if streamed else "")
    assert err == "octlm: interrupted\n"


@pytest.mark.parametrize(
    "command,args,message",
    [
        ("sample", ["--run", "r"], "octlm: interrupted\n"),
        ("bench", [], "octlm: interrupted\n"),
        ("serve", ["--run", "r"], "octlm: interrupted\n"),
        (
            "embeddings",
            ["--run", "r"],
            "octlm: interrupted; files already complete are kept, nothing is half-written\n",
        ),
        ("attention", ["--run", "r"], "octlm: interrupted; files already complete are kept, nothing is half-written\n"),
        ("train", [], "octlm: interrupted; files already complete are kept, nothing is half-written\n"),
    ],
)
def test_ctrl_c_promises_about_files_only_where_files_are_written(command, args, message, capsys, monkeypatch):
    import importlib

    def interrupted(args, report):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(f"octlm.cli.commands.{command}"), "run", interrupted)
    assert main([command, *args]) == 130
    assert capsys.readouterr().err == message


def test_sample_missing_run(tmp_path, capsys):
    assert main(["sample", "--run", str(tmp_path / "none")]) == 1
    assert "no such run folder" in capsys.readouterr().err


def test_bench_untrained_and_trained(trained_run, capsys):
    assert main(["bench", "--json", "--repeats", "1"]) == 0
    untrained = json_lines(capsys.readouterr().out)[-1]
    assert [t["context_length"] for t in untrained["forward"]] == [16, 32, 64, 128]
    assert len(untrained["nearest"]["tokens"][0]["neighbours"]) == 5
    assert untrained["nearest"]["positions"][0]["index"] != 0

    assert main(["bench", "--run", str(trained_run), "--token", " the", "--token", "5", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "␣the" in out and "nearest positions to position 0" in out

    assert main(["bench", "--run", str(trained_run), "--token", "hello world"]) == 1
    assert "tokens" in capsys.readouterr().err


def test_unknown_option_names_the_subcommand_and_its_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sample", "--run", "x", "--bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "octlm sample: error: unrecognized arguments: --bogus",
        "`octlm sample --help` lists every option",
    ]


@pytest.mark.parametrize(
    "argv,said,guess",
    [
        (["train", "--d-modle", "64"], "unrecognized arguments: --d-modle 64", "did you mean --d-model?"),
        (["train", "--n-lyers=3"], "unrecognized arguments: --n-lyers=3", "did you mean --n-layers?"),
        (["trian"], "invalid choice: 'trian'", "did you mean 'train'?"),
        (["train", "--position", "rpoe"], "invalid choice: 'rpoe'", "did you mean 'rope'?"),
        (["length", "--schemes", "rope", "alibbi"], "invalid choice: 'alibbi'", "did you mean 'alibi'?"),
    ],
)
def test_usage_error_is_one_line_with_the_close_spelling(capsys, argv, said, guess):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    first, *rest = capsys.readouterr().err.splitlines()
    assert said in first and first.endswith(guess) and len(rest) == 1 and "--help` lists every option" in rest[0]


@pytest.mark.parametrize(
    "argv,said",
    [
        (["train", "--json", "--bogus"], "unrecognized arguments: --bogus"),
        (["train", "--json", "--position", "rpoe"], "invalid choice: 'rpoe'"),
        (["length", "--schemes", "rope", "--json", "--seeds"], "expected one argument"),
    ],
)
def test_a_usage_error_under_json_is_also_the_last_json_line(capsys, argv, said):
    import json

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    last = json.loads(out.splitlines()[-1])
    assert last["event"] == "error" and said in last["message"] and said in err  # people still read it on stderr


@pytest.mark.parametrize("argv", [["train", "--zzzzzz"], ["length", "--schemes", "bogus"]])
def test_usage_error_without_a_close_spelling_guesses_nothing(capsys, argv):
    with pytest.raises(SystemExit):
        main(argv)
    assert "did you mean" not in capsys.readouterr().err


def test_bench_takes_several_tokens_after_one_flag(trained_run, capsys):
    assert main(["bench", "--run", str(trained_run), "--token", " the", "5", "--repeats", "1", "--json"]) == 0
    tokens = json_lines(capsys.readouterr().out)[-1]["nearest"]["tokens"]
    assert [t["token"] for t in tokens][-1] == 5 and len(tokens) == 3


def test_quiet_train_prints_only_the_figures_and_the_path(small_corpus, tmp_path, capsys):
    out = tmp_path / "my run"
    assert main(["train", "--text", str(small_corpus), "--out", str(out), "--max-steps", "4", "--quiet", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "validation:" in printed and "sample:" not in printed and "nearest tokens" not in printed
    assert f"octlm sample --run '{out}'" in printed  # quoted: the path has a space
    assert f"see it on the explainer page: octlm serve --run '{out}'" in printed


def test_help_shows_no_empty_defaults(capsys):
    # "(default: None)" on --run, a required option, tells the reader nothing
    for command in ("sample", "train"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "default: None" not in out and "(default: )" not in out
        assert "--seed SEED" in out and "1337)" in out  # real defaults still shown
