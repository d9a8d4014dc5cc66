"""Layer layouts as rows of the studies (``octlm length --layouts``): trained beside the schemes, scored, refused.

The expectations are independent of the study's own code where they can be:
a layout row's score is recomputed window by window from a model that
``octlm train --layers`` trained with the same flags; a window layer's mean
attention distance is bounded by its window (a query sees its last W keys,
so no key lies W or more tokens back); a task row's exact match is counted
by hand from greedy choices.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.model.layout import LayerSpec, layout_text
from tests.conftest import REPO, hand_bpb

T = 8
TINY = [
    *("--vocab-size", "280", "--d-model", "16", "--n-heads", "2", "--n-layers", "2", "--batch-size", "4"),
    *("--max-steps", "3", "--threads", "1", "--device", "cpu"),
]
STUDY = [
    "length",
    *TINY,
    *("--train-length", str(T), "--multipliers", "1", "2", "4", "--extend-to", "0"),
    *("--schemes", "rope", "--rope-scalings", "yarn", "--block", "llama", "--qk-norm"),
    *("--layouts", "rope-nope=rope none", "rope/w4 none"),
]
#: The label of the unnamed layout: the layout in a label's characters.
SWA = "rope-w4_none"


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def study(tmp_path_factory, small_corpus):
    out = tmp_path_factory.mktemp("layouts") / "study"
    assert main([*STUDY, "--text", str(small_corpus), "--out", str(out), "--quiet"]) == 0
    return out


def test_a_scheme_and_two_layouts_give_three_rows_each_its_own_model(study):
    found = records(study / "length.jsonl")
    evals = [r for r in found if r["record"] == "eval"]
    for label in ("rope", "rope-nope", SWA):
        assert sorted(r["eval_length"] for r in evals if r["label"] == label) == [T, 2 * T, 4 * T], label
        assert all(r["bpb"] is not None and r["sliding_bpb"] is not None for r in evals if r["label"] == label)
    # YaRN acts on global RoPE layers: rope-nope has one, the windowed layout none.
    assert {r["label"] for r in evals} == {"rope", "rope+yarn", "rope-nope", "rope-nope+yarn", SWA}
    assert [r["position"] for r in found if r["record"] == "train"] == ["rope", "rope-nope", SWA]
    table = (study / "length.md").read_text()
    assert "| `rope-nope` |" in table and f"| `{SWA}` |" in table
    for run, layers in (("rope", ""), ("rope-nope", "rope none"), (SWA, "rope/w4 none")):
        model = json.loads((study / "runs" / run / "config.json").read_text())["model"]
        written = layout_text([LayerSpec(**layer) for layer in model["layers"]])  # config.json keeps the layers as data
        assert (written, model["block"], model["qk_norm"]) == (layers, "llama", True), run
    assert found[0]["options"]["layouts"] == ["rope-nope=rope none", "rope/w4 none"]


def test_a_layout_rows_score_is_octlm_train_with_the_same_flags_then_scored_by_hand(study, small_corpus, tmp_path):
    run = tmp_path / "train"
    flags = [*TINY, "--context-length", str(T), "--block", "llama", "--qk-norm", "--sample-tokens", "0"]
    args = ["train", "--text", str(small_corpus), *flags, "--layers", "rope/w4 none", "--position", "rope"]
    assert main([*args, "--out", str(run), "--quiet"]) == 0
    found = records(study / "length.jsonl")
    row = next(r for r in found if r["record"] == "eval" and r["label"] == SWA and r["eval_length"] == 4 * T)
    assert row["bpb"] == pytest.approx(hand_bpb(run, found[0]["targets"], 4 * T), rel=1e-5)
    study_model = json.loads((study / "runs" / SWA / "config.json").read_text())["model"]
    assert study_model == json.loads((run / "config.json").read_text())["model"]


def test_attention_is_tabled_by_layer_and_a_window_layer_never_looks_past_its_window(study):
    attention = [r for r in records(study / "length.jsonl") if r["record"] == "attention"]
    swa = [r for r in attention if r["label"] == SWA]
    assert swa and all(r["layers"] == ["rope, window 4", "none, global"] for r in swa)
    # A query of a window-4 layer attends to keys 0..3 tokens back, so its mean distance is at most 3.
    assert all(max(r["mean_distance"][0]) <= 3 + 1e-6 for r in swa)
    longest = next(r for r in swa if r["eval_length"] == 4 * T)
    assert max(longest["mean_distance"][1]) > 3  # the global layer does look further at 32 tokens
    table = (study / "length.md").read_text()
    by_layer = table[table.index("Attention by layer") :]
    line = next(x for x in by_layer.splitlines() if x.startswith(f"| `{SWA}` | 2: none, global |"))
    assert (
        line.split("|")[3].strip() == f"{np.mean(next(r for r in swa if r['eval_length'] == T)['mean_entropy'][1]):.3g}"
    )
    layer_rows = [x for x in by_layer.splitlines() if re.match(r"\| `[^`]+` \| \d", x)]
    assert {x.split("`")[1] for x in layer_rows} == {"rope", "rope-nope", SWA}  # the models as trained, not +yarn
    assert "| `rope` | 1 |" in by_layer


def test_shards_give_the_layout_rows_of_one_process(study, small_corpus, tmp_path):
    out = tmp_path / "sharded"
    for share in ("0/2", "1/2"):
        assert main([*STUDY, "--text", str(small_corpus), "--out", str(out), "--shard", share, "--quiet"]) == 0
    want = {(r["label"], r["eval_length"]): r["bpb"] for r in records(study / "length.jsonl") if r["record"] == "eval"}
    got = {(r["label"], r["eval_length"]): r["bpb"] for r in records(out / "length.jsonl") if r["record"] == "eval"}
    assert got.keys() == want.keys()
    assert all(math.isclose(got[k], want[k], rel_tol=1e-6) for k in want)


BAD = [
    (["rope/w0 none"], "--layouts 'rope/w0 none': layer 1 ('rope/w0'): a window of 0 tokens sees nothing; give w1"),
    (
        ["w4 none"],
        "--layouts 'w4 none': layer 1 ('w4') names no scheme; in a study every entry names one (e.g. rope/w4)",
    ),
    (["rope*3"], "--layouts 'rope*3': entry rope*3 reaches past --n-layers 2"),
    (["rope/w9 none"], "layer 1 ('rope/w9'): a window of 9 tokens is wider than the 8 tokens the model trains on"),
    (["rope=none rope"], "--layouts 'rope=none rope': its label rope is also a --schemes row; name it"),
    (["a=rope none", "b=rope none"], "--layouts lists 'rope none' twice (a and b)"),
    (["a b=rope none"], "--layouts 'a b=rope none': the name 'a b' may hold only letters, digits"),
    (["rope learned"], "layer 2 ('learned'): learned adds its signal to the embedding, not inside one layer"),
]


@pytest.mark.parametrize(("layouts", "message"), BAD)
def test_a_bad_layout_is_one_line_before_anything_is_trained(layouts, message, small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    args = [*STUDY[: STUDY.index("--layouts")], "--layouts", *layouts]
    assert main([*args, "--text", str(small_corpus), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_task_study_refuses_a_bad_layout_too_naming_the_task_it_does_not_fit(tmp_path, capsys):
    out = tmp_path / "task"
    args = ["length", "--task", "copy", "passkey", "--schemes", "rope", "--n-layers", "2", "--out", str(out)]
    assert main([*args, "--layouts", "rope/w0 none"]) == 1
    assert "--layouts 'rope/w0 none': layer 1 ('rope/w0'): a window of 0 tokens" in capsys.readouterr().err
    # copy's longest training sequence at --task-length 16 is 33 tokens, passkey's 28
    assert main([*args, "--layouts", "rope/w30 none"]) == 1
    err = capsys.readouterr().err
    assert "a window of 30 tokens is wider than the 28 tokens the model trains on" in err and "(--task passkey)" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_study_continued_with_other_layouts_is_refused_by_name(small_corpus, tmp_path, monkeypatch, capsys):
    from tests.fixtures.study_stops.stops import install

    out = tmp_path / "study"
    args = [*STUDY[: STUDY.index("--schemes")], "--schemes", "alibi", "--rope-scalings"]
    args += ["--text", str(small_corpus), "--out", str(out)]
    install("unit:1:INT", monkeypatch.setattr)
    assert main([*args, "--layouts", "a=rope none"]) == 130
    kept = sorted(p.name for p in (out / "progress").iterdir())
    capsys.readouterr()
    assert main([*args, "--layouts", "b=none rope"]) == 1
    err = capsys.readouterr().err
    assert "begun with --layouts 'a=rope none', but this command gives --layouts 'b=none rope'" in err
    assert main(args) == 1
    assert "but this command gives --layouts (none)" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "progress").iterdir()) == kept
    assert main([*args, "--layouts", "a=rope none", "--quiet"]) == 0
    assert {r["label"] for r in records(out / "length.jsonl") if r["record"] == "eval"} == {"alibi", "a"}


@pytest.mark.slow
def test_a_layout_with_global_rope_layers_is_fine_tuned_plainly_and_with_yarn(small_corpus, tmp_path):
    out = tmp_path / "extend"
    args = [*STUDY[: STUDY.index("--extend-to")], "--extend-to", "2", "--extend-steps", "2", "--schemes", "none"]
    args += ["--rope-scalings"]  # none: the fine-tunes are what this test is about
    args += ["--layouts", "rn=rope none", "swa=rope/w4 none", "nn=none*2"]
    assert main([*args, "--text", str(small_corpus), "--out", str(out), "--quiet"]) == 0
    found = records(out / "length.jsonl")
    curves = {r["label"] for r in found if r["record"] == "curve"}
    assert curves == {"none", "rn", "rn+yarn", "swa", "nn"}  # windowed RoPE layers never see a distance to extend
    # "none*2" is the none model (NoPE has no weights of its own): same text, seed, shape and steps give its scores.
    scores = {(r["label"], r["eval_length"]): r["bpb"] for r in found if r["record"] == "eval"}
    for label, length in [k for k in scores if k[0] in ("none", "none@2x")]:
        twin = label.replace("none", "nn")
        assert math.isclose(scores[(twin, length)], scores[(label, length)], rel_tol=1e-6), (label, length)
    tuned = json.loads((out / "runs" / "rn+yarn@2x" / "config.json").read_text())
    tuned_layers = layout_text([LayerSpec(**layer) for layer in tuned["model"]["layers"]])
    assert tuned_layers == "rope none" and tuned["model"]["context_length"] == 2 * T
    assert tuned["train"]["rope_scaling"]["method"] == "yarn" and tuned["train"]["rope_scaling"]["factor"] == 2.0
    assert {r["label"] for r in found if r["record"] == "eval"} >= {"rn@2x", "rn+yarn@2x", "swa@2x"}


def hand_exact_match(model, task, size: int, tokens: torch.Tensor) -> float:
    """The fraction of instances whose every scored answer token is the model's greedy choice, counted one by one."""
    answer, scored = task.answer_length(size), task.answer_mask(size)
    right = 0
    with torch.no_grad():
        for row in tokens:
            logits = model(row[None, :-1])[0]
            guesses = [int(logits[len(row) - 1 - answer + j].argmax()) for j in range(answer)]
            right += all(guesses[j] == int(row[len(row) - answer + j]) for j in range(answer) if scored[j])
    return right / len(tokens)


@pytest.mark.slow  # a whole study end to end
def test_a_task_study_trains_a_layout_row_and_draws_it_by_depth(tmp_path):
    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions, Variant
    from octlm.studies.tasks.scoring import EVAL_COUNT, EVAL_SEED_OFFSET
    from octlm.studies.tasks.study import train_task_model

    out = tmp_path / "passkey"
    args = ["length", "--task", "passkey", "--schemes", "rope", "--layouts", "rn=rope/w8 none", "--seeds", "1"]
    args += [*("--d-model", "16", "--n-heads", "2", "--n-layers", "2", "--max-steps", "3", "--task-length", "4")]
    assert main([*args, "--block", "llama", "--device", "cpu", "--threads", "1", "--out", str(out), "--quiet"]) == 0
    found = records(out / "tasks.jsonl")
    assert found[0]["rows"] == ["rope", "rn"]
    depth = [r for r in found if r["record"] == "depth" and r["label"] == "rn"]
    assert len(depth) == 4 and all(r["layers"] == "rope/w8 none" for r in depth)
    table = (out / "tasks.md").read_text()
    assert "`rn`" in table[table.index("Passkey by needle depth") :] and (out / "tasks-depth.png").is_file()
    assert "the llama block; layout rows `rn` = `rope/w8 none`" in table
    shape = dict(d_model=16, n_heads=2, n_layers=2, max_steps=3, task_length=4, block="llama", seeds=1)
    opts = TaskOptions(task=["passkey"], schemes=["rope"], layouts=["rn=rope/w8 none"], **shape).resolved()
    task, variant = TASKS["passkey"], next(v for v in opts.variants() if v.label == "rn")
    assert variant == Variant("rope", layout=variant.layout)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the study's: its numbers repeat at one thread count
    try:
        model, _ = train_task_model(task, variant, opts.seed, opts, torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    assert [block.attn.window for block in model.blocks] == [8, None] and model.config.block == "llama"
    for r in (r for r in found if r["record"] == "eval" and r["label"] == "rn"):
        g = torch.Generator().manual_seed(opts.seed + EVAL_SEED_OFFSET + r["size"])
        tokens = task.batch(r["size"], EVAL_COUNT, 4 * 4, g)
        assert r["exact_match"] == pytest.approx(hand_exact_match(model, task, r["size"], tokens), abs=1e-9)


def test_layout_rows_read_their_layers():
    from octlm.studies.shared.rows import layout_row, row_extensions, row_position, row_scalings

    nope_first = layout_row("none rope/theta1e+6")
    assert nope_first.label == "none_rope-theta1e6" and row_position(nope_first) == "rope"
    assert row_scalings(layout_row("rope/w64*3 none")) == [] and row_extensions(layout_row("rope/w64*3 none")) == [None]
    assert row_extensions(layout_row("x=rope*3 none")) == [None, "yarn"]
    assert row_extensions(layout_row("prope none")) == []  # p-RoPE stays out of the stage, as its scheme row does
    assert row_position(layout_row("alibi/w4 t5")) == "t5"  # the scheme that reads the most options


def test_help_names_layouts_block_and_qk_norm():
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "length", "--help"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "--layouts [LAYOUT ...]" in done.stdout and "--block" in done.stdout and "--qk-norm" in done.stdout


def test_a_layout_with_a_nope_layer_is_unscaled_back_to_its_trained_self():
    """The study scores a layout under YaRN, then plain again: unscaling must reach the RoPE layer and skip NoPE."""
    from octlm import Decoder, DecoderConfig

    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(vocab_size=40, context_length=8, d_model=16, n_heads=2, n_layers=2, layers="rope none")
    )
    ids = torch.randint(0, 40, (1, 32))
    with torch.no_grad():
        plain = model.eval()(ids)
        model.set_rope_scaling("yarn", 4.0)
        scaled = model(ids)
        model.set_rope_scaling(None)
        again = model(ids)
    assert not torch.allclose(scaled, plain)  # the scaling did reach the RoPE layer
    torch.testing.assert_close(again, plain, rtol=0, atol=0)
