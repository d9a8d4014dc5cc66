"""octlm train --init-from: tokenizer and weights kept, learned tables interpolated, RoPE scaling saved and
reapplied."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
import torch

from octlm.cli import main
from octlm.errors import OctlmError
from octlm.run.folder import RunFolder
from octlm.run.load import load_run
from octlm.train.init_from import interpolate_table
from tests.conftest import tiny_model

T = 16
TINY = tiny_model(sample_tokens=0, eval_blocks=2, final_eval_blocks=2, quiet=True)


def _train(args: list[str]) -> None:
    assert main(["train", *args]) == 0


@pytest.fixture(scope="module")
def sources(tmp_path_factory, small_corpus):
    """A learned and a rope run at T tokens, 3 steps each."""
    root = tmp_path_factory.mktemp("extend")
    for position in ("learned", "rope"):
        _train(
            [
                "--text",
                str(small_corpus),
                "--out",
                str(root / position),
                "--position",
                position,
                "--context-length",
                str(T),
                "--max-steps",
                "3",
                *TINY,
            ]
        )
    return root


def _setup_trainer(opts):
    from octlm.report import Reporter
    from octlm.train import distributed
    from octlm.train.init_from import init_from_options
    from octlm.train.option_checks import check_options
    from octlm.train.options import given_options
    from octlm.train.trainer import Trainer

    opts = init_from_options(opts, given_options(opts))
    check_options(opts)
    group, device = distributed.setup("cpu")
    trainer = Trainer(opts, Reporter(quiet=True), group, device, None, [])
    trainer.setup()
    return trainer


@pytest.mark.parametrize("factor", [1, 2])
def test_init_from_keeps_tokenizer_and_weights_at_step_0(sources, small_corpus, tmp_path, factor):
    from octlm.train.options import TrainOptions

    for position in ("learned", "rope"):
        source = sources / position
        opts = TrainOptions.of(
            text=[str(small_corpus)],
            init_from=str(source),
            context_length=T * factor,
            max_steps=2,
            out=str(tmp_path / f"{position}{factor}"),
            batch_size=4,
            sample_tokens=0,
        )
        trainer = _setup_trainer(opts)
        assert trainer.folder.tokenizer_path.read_bytes() == (source / "tokenizer.json").read_bytes()
        text = small_corpus.read_text(encoding="utf-8")[:2000]
        assert trainer.data.tokenizer.encode(text) == RunFolder(source).read_tokenizer().encode(text)
        before, _ = load_run(source)
        after = trainer.model.state_dict()
        for key, value in before.state_dict().items():
            expected = interpolate_table(value, T * factor) if key == "positions.table.weight" else value
            assert torch.equal(after[key], expected), key
        config = json.loads(trainer.folder.config_path.read_text())
        assert config["model"]["context_length"] == T * factor and config["model"]["d_model"] == 16
        from octlm.fileio import sha256_file

        assert config["train"]["source"] == {
            "run_dir": str(source.resolve()),
            "weights_sha256": sha256_file(source / "model.safetensors"),
        }
        trainer.lock.close()


def test_interpolation_follows_the_formula():
    torch.manual_seed(0)
    table = torch.randn(5, 3)
    assert torch.equal(interpolate_table(table, 5), table)
    for length in (10, 8, 3):
        out = interpolate_table(table, length)
        assert out.shape == (length, 3)
        for m in range(length):
            # Chen et al. 2023: position m of the longer sequence is position m * T / L of the trained one
            x = m * 5 / length
            i = math.floor(x)
            j = min(i + 1, 4)
            expected = (1 - (x - i)) * table[i].double() + (x - i) * table[j].double()
            assert torch.allclose(out[m].double(), expected, atol=1e-6)


def test_conflicting_shape_is_refused_naming_the_source_value(sources, small_corpus, tmp_path, capsys):
    for flag, value, key in (
        ("--d-model", "32", "d_model=16"),
        ("--position", "alibi", "position='rope'"),
        ("--n-layers", "2", "n_layers=1"),
    ):
        code = main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--init-from",
                str(sources / "rope"),
                "--out",
                str(tmp_path / "x"),
                flag,
                value,
            ]
        )
        err = capsys.readouterr().err
        assert code != 0 and flag in err and key in err
        assert not (tmp_path / "x").exists()


def test_out_that_is_or_holds_the_source_is_refused_and_the_source_kept(sources, small_corpus, capsys):
    before = {p.name: p.read_bytes() for p in (sources / "rope").iterdir() if p.is_file()}
    for out in (sources / "rope", sources):
        code = main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--init-from",
                str(sources / "rope"),
                "--out",
                str(out),
                "--overwrite",
                "--max-steps",
                "1",
            ]
        )
        err = capsys.readouterr().err
        assert (
            code == 1 and "--init-from" in err and "which this command reads" in err and "choose another --out" in err
        )
    assert {p.name: p.read_bytes() for p in (sources / "rope").iterdir() if p.is_file()} == before


def test_scaling_round_trips_through_config_load_run_and_sample(sources, small_corpus, tmp_path, capsys):
    out = tmp_path / "yarn"
    _train(
        [
            "--text",
            str(small_corpus),
            "--init-from",
            str(sources / "rope"),
            "--context-length",
            str(2 * T),
            "--rope-scaling",
            "yarn",
            "--rope-factor",
            "2",
            "--max-steps",
            "2",
            "--out",
            str(out),
            *TINY[8:],
        ]
    )
    record = json.loads((out / "config.json").read_text())["train"]["rope_scaling"]
    assert record == {"method": "yarn", "factor": 2.0, "original_length": T}
    model, _ = load_run(out)
    scaling = model.positions.scaling
    assert (scaling.method, scaling.factor, scaling.original_length) == ("yarn", 2.0, T)
    capsys.readouterr()
    assert main(["sample", "--run", str(out), "--max-new-tokens", "4", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[-1]["rope_scaling"] == {"method": "yarn", "factor": 2.0, "original_length": T}
    # a resumed run keeps the scaling: the stored record stands for the option
    assert main(["train", "--resume", str(out), "--max-steps", "3", "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["train"]["rope_scaling"] == record


def test_scaling_options_are_checked(sources, small_corpus, tmp_path, capsys):
    base = ["train", "--text", str(small_corpus), "--out", str(tmp_path / "x")]
    for extra, says in (
        (["--rope-factor", "2"], "--rope-factor needs --rope-scaling"),
        (["--rope-scaling", "linear"], "needs --rope-factor"),
        (["--rope-scaling", "linear", "--rope-factor", "2"], "needs --position rope"),
    ):
        assert main([*base, *extra]) != 0
        assert says in capsys.readouterr().err
    with pytest.raises(OctlmError, match="no such run folder"):
        from octlm.train.init_from import source_config

        source_config(tmp_path / "missing")


# same numbers are promised for one thread count; without it the idle-CPU default can differ between studies
STUDY = tiny_model(train_length=8, multipliers=[1, 2], schemes=["rope", "learned"], threads=1, rope_scalings=[])


def _study(out, small_corpus, *extra, stdout: list | None = None):
    """Run a tiny study in --json mode; its length.jsonl records. ``stdout`` receives the printed lines."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["length", "--text", str(small_corpus), "--out", str(out), "--json", *STUDY, *extra]) == 0
    if stdout is not None:
        stdout += buffer.getvalue().splitlines()
    return [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def extended(tmp_path_factory, small_corpus):
    root = tmp_path_factory.mktemp("study")
    two = _study(
        root / "two", small_corpus, "--max-steps", "3", "--seeds", "2", "--extend-to", "2", "--extend-steps", "2"
    )
    one = _study(root / "one", small_corpus, "--max-steps", "3", "--extend-to", "2", "--extend-steps", "2")
    return root, two, one


def test_extension_stage_curves_and_scores(extended):
    root, two, _ = extended
    curves = [r for r in two if r["record"] == "curve"]
    labels = ["rope", "rope+linear", "rope+ntk", "rope+yarn", "rope+llama3", "learned"]
    assert sorted({c["label"] for c in curves}) == sorted(labels)
    assert sorted({c["step"] for c in curves}) == [0, 1, 2] and {c["eval_length"] for c in curves} == {16}
    evals = [r for r in two if r["record"] == "eval" and "extended_to" in r]
    assert {r["label"] for r in evals} == {f"{label}@2x" for label in labels}
    assert all(r["bpb"] is not None for r in evals)  # the learned table now has 2T rows, so 2x scores
    trains = [r for r in two if r["record"] == "train"]
    assert {r["steps"] for r in trains if "@" not in r["position"]} == {3} and {
        r["steps"] for r in trains if "@" in r["position"]
    } == {2}
    # the length study reproduces the saved scaling: the linear fine-tune's config holds it, and load_run applies it
    config = json.loads((root / "two" / "runs" / "rope+linear@2x-seed1337" / "config.json").read_text())
    assert config["train"]["rope_scaling"] == {"method": "linear", "factor": 2.0, "original_length": 8}
    assert load_run(root / "two" / "runs" / "rope+linear@2x-seed1337")[0].positions.scaling.method == "linear"
    table = (root / "two" / "length.md").read_text()
    assert "±" in table and "fine-tuning steps" in table
    assert (root / "two" / "extend.png").read_bytes()[:4] == b"\x89PNG"


def test_same_seed_same_numbers_other_seed_differs(extended):
    _, two, one = extended

    def numbers(records, seed):
        return [
            (r["label"], r["eval_length"], r["bpb"])
            for r in records
            if r["record"] in ("eval", "curve") and r["seed"] == seed
        ]

    assert numbers(one, 1337) == numbers(two, 1337)
    first, second = numbers(two, 1337), numbers(two, 1338)
    assert len(first) == len(second) and all(
        a[2] != b[2] for a, b in zip(first, second, strict=True) if a[2] is not None
    )


@pytest.mark.slow  # a whole study end to end
def test_the_default_study_fine_tunes_at_4x_and_extend_to_0_turns_it_off(tmp_path, small_corpus, capsys):
    from octlm.cli import build_parser, options_from
    from octlm.studies.length.options import DEFAULT_EXTEND_TO, LengthOptions

    defaults = options_from(build_parser().parse_args(["length", "--text", "x.txt", "--out", "s"]), LengthOptions)
    assert defaults.extend_to == DEFAULT_EXTEND_TO == 4 and 4 in defaults.resolved().multipliers
    off = options_from(
        build_parser().parse_args(["length", "--text", "x.txt", "--out", "s", "--extend-to", "0"]), LengthOptions
    )
    assert off.resolved().multipliers == [1, 2, 4, 8, 16] and not off.extend_to
    # sinusoidal has no extension method, so a study of it alone adds no length for one
    assert LengthOptions(schemes=["sinusoidal"], multipliers=[1, 2]).resolved().multipliers == [1, 2]
    assert LengthOptions(schemes=["alibi"], multipliers=[1, 2]).resolved().multipliers == [1, 2, 4]
    # no --extend-to: the study runs the stage at 4 x T, and 4x joins the evaluation lengths
    records = _study(
        tmp_path / "default", small_corpus, "--schemes", "learned", "--max-steps", "2", "--extend-steps", "2"
    )
    assert records[0]["lengths"] == [8, 16, 32]
    assert {(c["label"], c["eval_length"]) for c in records if c["record"] == "curve"} == {("learned", 32)}
    assert [r["bpb"] is not None for r in records if r["record"] == "eval" and r["label"] == "learned@4x"] == [True] * 3
    for value in ("1", "-2"):
        assert (
            main(["length", "--text", str(small_corpus), "--out", str(tmp_path / "bad"), *STUDY, "--extend-to", value])
            == 1
        )
        assert f"--extend-to must be 0 (no extension stage) or an integer >= 2, got {value}" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_time_budget_becomes_one_step_count(tmp_path, small_corpus):
    printed: list[str] = []
    records = _study(tmp_path / "timed", small_corpus, "--time-budget", "1", "--extend-to", "0", stdout=printed)
    # the timing run prints nothing of its own: --json keeps stdout to JSON lines
    assert [json.loads(line)["event"] for line in printed][-1] == "result"
    study = records[0]
    assert study["equal_steps"]["steps"] >= 1 and study["equal_steps"]["timed_scheme"] == "rope"
    assert {r["steps"] for r in records if r["record"] == "train"} == {study["equal_steps"]["steps"]}
    assert not (tmp_path / "timed" / "runs" / ".timing").exists()


def test_init_from_a_window_layout_with_a_context_below_its_window_is_one_line(small_corpus, tmp_path, capsys):
    """Fault from a new user's trial: the source's `rope/w4` layers with --context-length 2 ended in a
    DecoderFieldError traceback; a fresh run with those flags already said it in one line."""
    source = tmp_path / "w"
    _train(["--text", str(small_corpus), "--out", str(source), "--layers", "rope/w4 rope", "--context-length", "8",
            "--max-steps", "1", *TINY, "--n-layers", "2"])  # fmt: skip
    capsys.readouterr()
    out = tmp_path / "init"
    assert main(["train", "--init-from", str(source), "--context-length", "2", "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("octlm: error: ") and err.count("\n") == 1, err
    assert "window of 4 tokens" in err and str(source) in err and not out.exists()
