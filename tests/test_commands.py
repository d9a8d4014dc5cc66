"""The thin commands (issue 9) and the refusals of issues 10 and 15 they gained.

Options that mean nothing for the chosen scheme, ``embeddings --out`` into a
folder of other files, staging folders left by a kill -9, folders of the
wrong kind, and the --help texts that state a rule or a default.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from octlm.cli import build_parser, main
from octlm.declare import build, option_fields
from octlm.model.positions import SCHEMES
from octlm.studies.length.options import LengthOptions


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--position", "learned", "--rope-layout", "half"], "--rope-layout"),
        (["--position", "alibi", "--partial-rotary-factor", "0.5"], "--partial-rotary-factor"),
        (["--position", "none", "--rope-theta", "500"], "--rope-theta"),
        (["--position", "rope", "--sinusoidal-layout", "concatenated"], "--sinusoidal-layout"),
    ],
)
def test_train_refuses_an_option_its_scheme_does_not_read(args, flag, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *args, "--max-steps", "1", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{flag} " in err and "means nothing for --position" in err and "Traceback" not in err
    assert not out.exists()


def test_the_rule_is_the_schemes_own_declaration():
    read = {name for cls in SCHEMES.values() for name in cls.reads}
    assert {"rope_theta", "rope_layout", "partial_rotary_factor", "sinusoidal_layout"} <= read
    assert SCHEMES["learned"].reads == ()


def test_length_hands_scheme_options_to_the_schemes_that_read_them(tmp_path):
    # flat names, as the command line and a TOML file give them
    opts = build(
        LengthOptions,
        {
            "text": ["t"],
            "out": str(tmp_path),
            "schemes": ["learned", "rope", "sinusoidal"],
            "rope_layout": "half",
            "sinusoidal_layout": "concatenated",
        },
    )
    rope, learned = opts.train_options("rope", tmp_path / "r"), opts.train_options("learned", tmp_path / "l")
    sinusoidal = opts.train_options("sinusoidal", tmp_path / "s")
    assert rope.model.rope_layout == "half" and rope.model.sinusoidal_layout == "interleaved"
    assert learned.model.rope_layout == "interleaved" and learned.model.sinusoidal_layout == "interleaved"
    assert sinusoidal.model.sinusoidal_layout == "concatenated" and sinusoidal.model.rope_layout == "interleaved"


def test_length_refuses_a_scheme_option_no_chosen_scheme_reads(tmp_path, capsys):
    assert (
        main(
            [
                "length",
                "--text",
                "x.txt",
                "--out",
                str(tmp_path / "s"),
                "--schemes",
                "learned",
                "alibi",
                "--rope-layout",
                "half",
            ]
        )
        == 1
    )
    assert "--rope-layout half means nothing for --schemes learned alibi" in capsys.readouterr().err


def test_embeddings_out_never_replaces_other_files_or_a_run(trained_run, tmp_path, capsys):
    out = tmp_path / "figures"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        assert main(["embeddings", "--run", str(trained_run), "--out", str(out), "--quiet", *extra]) == 1
        assert "holds files that are not octlm embeddings figures" in capsys.readouterr().err
        assert (out / "notes.txt").read_text() == "mine"
    # --out naming the run it reads (a new user's trial emptied it this way)
    before = sorted(p.name for p in trained_run.iterdir())
    assert main(["embeddings", "--run", str(trained_run), "--out", str(trained_run), "--overwrite", "--quiet"]) == 1
    assert "holds an octlm run" in capsys.readouterr().err
    assert sorted(p.name for p in trained_run.iterdir()) == before
    # an earlier output is replaced without a word
    (out / "notes.txt").unlink()
    assert main(["embeddings", "--run", str(trained_run), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["positions.png", "tokens-pca.png"]
    assert main(["embeddings", "--run", str(trained_run), "--out", str(out), "--quiet"]) == 0
    assert not list(tmp_path.glob(".figures.partial-*"))


def test_staging_left_by_a_killed_process_is_removed_and_reported(tmp_path, capsys):
    from octlm.run.folder import RunFolder

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    pid = int(dead.stdout)
    stale = tmp_path / f".page.partial-{pid}-abcd1234"
    stale.mkdir()
    (stale / "index.html").write_text("half")
    old_style = tmp_path / ".page.partial-k3j2h1"  # no pid: its owner cannot be known, so it stays
    old_style.mkdir()
    with RunFolder(tmp_path / "page").staged() as staging:
        assert staging.name.startswith(".page.partial-")
        (staging / "index.html").write_text("whole")
    assert not stale.exists() and old_style.exists()
    assert "removed 1 staging folder(s)" in capsys.readouterr().err
    assert (tmp_path / "page" / "index.html").read_text() == "whole"


def test_resume_of_a_transformers_checkpoint_points_at_import_hf(tmp_path, capsys):
    checkpoint = tmp_path / "hf"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32}))
    assert main(["train", "--resume", str(checkpoint)]) == 1
    err = capsys.readouterr().err
    assert "this is a transformers checkpoint (model_type 'gpt2')" in err and "octlm import-hf" in err
    assert "'model' section" not in err
    assert main(["sample", "--run", str(checkpoint)]) == 1
    assert "octlm import-hf" in capsys.readouterr().err


def test_import_hf_of_an_octlm_run_names_it(trained_run, tmp_path, capsys):
    assert main(["import-hf", str(trained_run), str(tmp_path / "back")]) == 1
    err = capsys.readouterr().err
    assert "this is an octlm run" in err and "octlm export-hf" in err and "model_type=None" not in err


@pytest.mark.parametrize("command", ["bench", "embeddings"])
def test_token_rule_is_in_the_help(command):
    help_text = " ".join(build_parser().subcommands[command].format_help().split())
    assert "ASCII digits is a token id; any other argument is text" in help_text


def test_length_help_shows_no_empty_default_and_reads_naturally():
    help_text = " ".join(build_parser().subcommands["length"].format_help().split())
    assert "(default: [])" not in help_text
    from octlm.studies.length.options import DEFAULT_TIME_BUDGET

    assert "budget 30)" not in help_text and f"(default {DEFAULT_TIME_BUDGET:g};" in help_text


def test_each_command_takes_a_declared_options_class():
    from octlm.export.hf import ExportHfOptions, ImportHfOptions
    from octlm.export.web import ExportWebOptions, ServeOptions
    from octlm.inspect.attention import AttentionOptions
    from octlm.inspect.bench import BenchOptions
    from octlm.inspect.embeddings import EmbeddingsOptions
    from octlm.inspect.sample import SampleOptions
    from octlm.train.options import TrainOptions

    parser = build_parser()
    for command, cls in [
        ("sample", SampleOptions),
        ("bench", BenchOptions),
        ("embeddings", EmbeddingsOptions),
        ("attention", AttentionOptions),
        ("serve", ServeOptions),
        ("export-web", ExportWebOptions),
        ("export-hf", ExportHfOptions),
        ("import-hf", ImportHfOptions),
    ]:
        dests = {a.dest for a in parser.subcommands[command]._actions}
        assert {f.name for f in dataclasses.fields(cls)} <= dests, command
    # a shared option is the training option's declaration, not a copy
    seed = next(f for f in dataclasses.fields(SampleOptions) if f.name == "seed")
    assert (
        seed.metadata["same_as"] == "seed"
        and seed.metadata["bounds"]
        is next(f for f in option_fields(TrainOptions) if f.name == "seed").metadata["bounds"]
    )


def test_an_interrupted_length_study_says_what_it_keeps_and_how_to_continue(
    monkeypatch, small_corpus, tmp_path, capsys
):
    import octlm.studies.length.study

    def stopped_after_one_model(opts, report):
        (Path(opts.out) / "progress").mkdir(parents=True)  # an unfinished study's records
        raise KeyboardInterrupt

    monkeypatch.setattr(octlm.studies.length.study, "length_study", stopped_after_one_model)
    out = tmp_path / "study"
    assert main(["length", "--text", str(small_corpus), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"finished parts stay in {out}; the same command continues it" in err and "--overwrite starts it" in err
