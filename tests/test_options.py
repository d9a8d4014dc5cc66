"""The options of ``octlm train`` are declared once; flags, TOML keys, config.json, checks and resume follow."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from octlm.cli import build_parser, main
from octlm.cli.program import COMMANDS
from octlm.declare import Bound, Resume, flag, option_default, option_fields, replaced
from octlm.errors import OctlmError
from octlm.option_values import checked_values, field_types
from octlm.studies.length.options import LengthOptions
from octlm.train.checkpoint import config_digest
from octlm.train.options import TrainOptions
from octlm.train.resume import resume_options

FIELDS = {f.name: f for f in option_fields(TrainOptions)}
BOUNDED = sorted(name for name, f in FIELDS.items() if f.metadata["bounds"] is not None)


def outside(bound: Bound, kind: type):
    """A value the bound refuses (below its low end, or at it when it is open)."""
    if bound.low is not None:
        return kind(bound.low if bound.low_open else (bound.low - 1 if kind is int else bound.low - 0.5))
    return kind(bound.high + 1)


def run_folder(tmp_path: Path, **train) -> Path:
    """A folder with only the config.json a resume reads first."""
    run = tmp_path / "run"
    run.mkdir()
    options = {**TrainOptions().to_dict(), "out": str(run), **train}
    (run / "config.json").write_text(json.dumps({"model": {}, "train": options}))
    return run


def test_every_option_is_a_flag_a_toml_key_and_a_config_json_key(trained_run):
    parser = build_parser().subcommands["train"]
    flags = {s for action in parser._actions for s in action.option_strings}
    assert {flag(name) for name in FIELDS} <= flags
    values = {
        name: option_default(f) or ["a.txt"]
        if name == "text"
        else option_default(f) or ["tensorboard"]
        if name == "log_to"
        else option_default(f)
        for name, f in FIELDS.items()
    }
    values = {name: value for name, value in values.items() if value is not None}
    assert checked_values(values, "test", TrainOptions) == values
    config = json.loads((trained_run / "config.json").read_text())
    # the model's options are keys of its "model" section, the rest of the "train" section; eot_id, the tokenizer's
    # <|endoftext|> that --document-mask reads, is no option (the tokenizer decides it)
    assert set(config["train"]) | set(config["model"]) == set(FIELDS) | {"eot_id"}


def test_every_option_says_what_resume_may_do():
    assert all(isinstance(f.metadata["resume"], Resume) for f in FIELDS.values())


def test_length_shares_train_declarations():
    for f in dataclasses.fields(LengthOptions):
        if "same_as" in f.metadata:
            source = FIELDS[f.metadata["same_as"]]
            assert f.metadata["cli"] == source.metadata["cli"]
            assert f.metadata["check"] is source.metadata["check"]


@pytest.mark.parametrize("name", BOUNDED)
def test_a_bound_says_the_same_from_a_flag_toml_and_a_resumed_config(name, small_corpus, tmp_path, capsys):
    bound = FIELDS[name].metadata["bounds"]
    value = outside(bound, field_types(TrainOptions)[name][0])
    message = bound.message(name, value)
    base = ["train", "--text", str(small_corpus), "--out", str(tmp_path / "r")]
    assert main([*base, flag(name), str(value)]) == 1
    assert f"{message}\n" in capsys.readouterr().err
    toml = tmp_path / "bad.toml"
    toml.write_text(f"{name} = {json.dumps(value) if math.isfinite(value) else 'inf'}\n")
    assert main([*base, "--config", str(toml)]) == 1
    assert message in capsys.readouterr().err
    run = run_folder(tmp_path, **{name: value})
    assert main(["train", "--resume", str(run)]) == 1
    assert f"{message} (from the flags given now or the run's {run / 'config.json'})" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


#: Options that work only beside another: what each needs (--key-offset turns part of each head with RoPE).
COMPANIONS = {"key_offset": {"position": "rope", "partial_rotary_factor": 0.5}}


def _with(name: str, value) -> TrainOptions:
    """The default options with ``name`` at ``value``, and what it needs beside it (:data:`COMPANIONS`)."""
    return replaced(TrainOptions(), **{**COMPANIONS.get(name, {}), name: value})


def _buildable(name: str, value) -> bool:
    """Whether options holding ``value`` can exist: the nested model checks its own fields on construction."""
    try:
        _with(name, value)
    except ValueError:
        return False
    return True


def _other_value(name: str, data):
    """A value of option ``name`` unlike its default (range checks come after the merge; the model's own checks come
    first)."""
    value = _any_other_value(name, data)
    return value if _buildable(name, value) else _valid_other(name)


def _valid_other(name: str):
    kind = field_types(TrainOptions)[name][0]
    # a string option with a grammar (--layers) needs a sentence of it: two NoPE layers fit the default shape
    candidates = {int: [2, 8, 16, 64], str: ["none*2", "A"]}.get(kind, [0.5, 0.25, 2.0])  # "A": --canon's grammar
    return next(v for v in candidates if v != option_default(FIELDS[name]) and _buildable(name, v))


def _any_other_value(name: str, data):
    kind, is_list, _ = field_types(TrainOptions)[name]
    default, choices = option_default(FIELDS[name]), FIELDS[name].metadata["cli"].get("choices")
    if is_list:
        return [data.draw(st.text("abc", min_size=1), label="path")]
    if choices:
        return data.draw(st.sampled_from([c for c in choices if c != default]))
    if kind is bool:
        return not default
    if kind is str:
        return data.draw(st.text("xyz", min_size=1))
    if kind is int:
        return data.draw(st.integers(1, 10**6).filter(lambda v: v != default))
    return data.draw(st.floats(0.001, 100).filter(lambda v: v != default))


SPECIAL = {"out", "overwrite"}  # only the run's own folder; covered by test_resume


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_resume_follows_the_declared_policy(data, tmp_path_factory):
    run = run_folder(tmp_path_factory.mktemp("p"))
    name = data.draw(st.sampled_from(sorted(set(FIELDS) - SPECIAL)))
    value = _other_value(name, data)
    policy = FIELDS[name].metadata["resume"]
    opts = _with(name, value)
    if policy is Resume.FIXED:
        with pytest.raises(OctlmError, match=rf"--{name.replace('_', '-')} .*(contradicts|with --resume)"):
            resume_options(run, opts, {name})
        return
    merged, changes = resume_options(run, opts, {name})
    assert getattr(merged, name) == value
    assert bool(changes) == (policy is Resume.RETUNABLE)
    # what resume may change stays out of the checkpoint's digest; what it must keep is in it
    before = {"model": {}, "train": TrainOptions().to_dict()}
    assert config_digest({**before, "train": {**before["train"], name: value}}) == config_digest(before)


@pytest.mark.parametrize("name", sorted(n for n, f in FIELDS.items() if f.metadata["resume"] is Resume.FIXED))
def test_a_fixed_option_is_in_the_digest(name):
    before = {"model": {}, "train": TrainOptions().to_dict()}
    assert config_digest({**before, "train": {**before["train"], name: "changed"}}) != config_digest(before)


def test_restating_a_fixed_option_is_accepted(tmp_path):
    run = run_folder(tmp_path)
    merged, changes = resume_options(run, TrainOptions(), set(FIELDS) - {"out"})
    assert changes == [] and merged.out == str(run)


def test_threads_beyond_the_cpus_this_process_may_use_are_refused(tmp_path, capsys):
    from octlm.cli import main
    from octlm.train.device import available_cpus

    too_many = available_cpus() + 1
    code = main(["train", "--text", "tinyshakespeare", "--threads", str(too_many), "--out", str(tmp_path / "run")])
    assert code == 1
    assert (
        f"--threads must be in [1, {available_cpus()}] (the CPUs this process may use), got {too_many}"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


#: the arguments each command needs before it parses; every command of ``octlm --help`` computes with torch
#: except those in NOT_COMPUTING, so a new command is covered without being listed here (issue 21: sample had no
#: --threads; attention escaped a hand-written list of commands)
REQUIRED_ARGS = {
    "train": ["--text", "tinyshakespeare"],
    "length": ["--out", "x"],
    "sample": ["--run", "r"],
    "embeddings": ["--run", "r"],
    "attention": ["--run", "r"],
    "export-hf": ["r", "o"],
    "import-hf": ["i", "r"],
    "serve": ["--run", "r"],
    "export-web": ["--run", "r", "--out", "o"],
}
#: commands that only read JSON records and write tables: no torch computation to thread
NOT_COMPUTING = {"compare"}


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - NOT_COMPUTING))
def test_every_command_that_computes_takes_threads(command):
    from octlm.cli import build_parser

    args = build_parser().parse_args([command, *REQUIRED_ARGS.get(command, []), "--threads", "1"])
    assert args.threads == 1


def test_attention_computes_with_the_threads_given_and_else_the_default(trained_run, tmp_path, monkeypatch):
    import torch

    import octlm.inspect.attention as attention_module
    from octlm.train.device import default_threads

    seen, record = [], attention_module.record_attention
    monkeypatch.setattr(
        attention_module, "record_attention", lambda model: seen.append(torch.get_num_threads()) or record(model)
    )
    before = torch.get_num_threads()
    torch.set_num_threads(default_threads() + 1)  # a setting neither run asks for, so each one's own shows
    try:
        for threads in (["--threads", "1"], []):
            out = ["--out", str(tmp_path / f"attention{len(threads)}")]
            assert main(["attention", "--run", str(trained_run), "--length", "8", "--quiet", *out, *threads]) == 0
        assert seen == [1, default_threads()] and torch.get_num_threads() == default_threads() + 1
    finally:
        torch.set_num_threads(before)


def test_sample_computes_with_the_threads_given_and_else_the_default(trained_run, monkeypatch, capsys):
    import torch

    from octlm.cli import main
    from octlm.model import Decoder
    from octlm.train.device import default_threads

    seen, generate = [], Decoder.generate
    monkeypatch.setattr(Decoder, "generate", lambda *a, **k: seen.append(torch.get_num_threads()) or generate(*a, **k))
    before = torch.get_num_threads()
    for threads in (["--threads", "1"], []):
        assert main(["sample", "--run", str(trained_run), "--max-new-tokens", "3", "--quiet", *threads]) == 0
    assert seen == [1, default_threads()] and torch.get_num_threads() == before
