"""``octlm length --streaming``: each model of a finished study decodes streams with S sinks and a window of
T - S (octlm.studies.length.readings.streaming), checked against one forward pass per target over the tokens the
cache holds."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.run.load import load_run
from octlm.studies.length.readings.reading import load_study

T, SINKS, STREAMS = 8, 2, 3  # the conftest study: T = 8, lengths 8, 16 and 32


def records(folder):
    return [json.loads(line) for line in (folder / "length.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def streamed(tmp_path_factory, length_study):
    """A copy of the conftest study (learned, rope, alibi), read again with --streaming."""
    out = tmp_path_factory.mktemp("streamed") / "study"
    shutil.copytree(length_study, out)
    flags = ["--streaming", "--streaming-sinks", str(SINKS), "--streaming-streams", str(STREAMS), "--quiet"]
    assert main(["length", "--out", str(out), "--reread", *flags]) == 0
    return out


def hand_nats(model, stream: np.ndarray, sinks: int, window: int) -> list[float]:
    """Nats of each target of ``stream``, from one forward pass at positions 0.. over the stream's first ``sinks``
    tokens and the last ``window`` before the target (itself included): what the cache holds, written out."""
    out = []
    for t in range(len(stream) - 1):
        kept = list(range(min(sinks, t + 1))) + list(range(max(sinks, t + 1 - window), t + 1))
        with torch.no_grad():
            logits = model(torch.tensor(stream[kept], dtype=torch.long)[None])[0, -1].double()
        out.append(-torch.log_softmax(logits, -1)[int(stream[t + 1])].item())
    return out


def test_each_segment_is_the_tokens_the_cache_holds_written_out(streamed):
    study = load_study(streamed)
    got = records(streamed)
    head = next(r for r in got if r["record"] == "streaming_streams")
    assert (head["streams"], head["stream_length"], head["segment"], head["sinks"]) == (STREAMS, 32, T, [0, SINKS])
    scored = study.scored()
    for label in ("rope", "alibi"):
        model, tokenizer = load_run(streamed / "runs" / label, "cpu")
        for r in (r for r in got if r["record"] == "streaming" and r["label"] == label):
            assert r["window"] == T - r["sinks"]
            for k in range(STREAMS):
                stream = scored[32 * k : 32 * (k + 1) + 1]
                nats = np.asarray(hand_nats(model, stream, r["sinks"], T - r["sinks"]))
                text = nats * (tokenizer.bytes_per_token[stream[1:]] > 0)
                segments = text.reshape(4, T).sum(axis=1)
                assert np.allclose(r["segment_nats"][k], segments, atol=2e-3), (label, r["sinks"], k)
                assert head["segment_bytes"][k] == tokenizer.bytes_per_token[stream[1:]].reshape(4, T).sum(1).tolist()


def test_sinks_against_none_is_the_difference_of_the_table_with_its_interval(streamed):
    got = records(streamed)
    head = next(r for r in got if r["record"] == "streaming_streams")
    nbytes = np.asarray(head["segment_bytes"], dtype=np.float64)
    nats = {(r["label"], r["sinks"]): np.asarray(r["segment_nats"]) for r in got if r["record"] == "streaming"}
    compared = [r for r in got if r["record"] == "streaming_comparison"]
    assert sorted({(r["label"], r["eval_length"]) for r in compared}) == sorted(
        (label, L) for label in ("alibi", "rope") for L in (8, 16, 32)
    )
    for r in compared:
        n = r["eval_length"] // T
        bpb = {s: nats[r["label"], s][:, :n].sum() / math.log(2) / nbytes[:, :n].sum() for s in (0, SINKS)}
        assert r["difference"] == pytest.approx(bpb[SINKS] - bpb[0], abs=1e-6)
        assert r["low"] <= r["difference"] <= r["high"]
        if n == 1:  # within the first T targets nothing has been evicted: the two caches hold the same tokens
            assert r["low"] == r["high"] == pytest.approx(0, abs=1e-6)


def test_the_section_the_figure_and_the_models_that_cannot_stream(streamed, length_study):
    markdown = (streamed / "length.md").read_text()
    assert markdown.startswith((length_study / "length.md").read_text().rstrip())  # the study's own tables kept
    section = markdown[markdown.index("## Streaming with sinks and a window") :]
    assert f"{STREAMS} streams of 32 validation targets" in section
    assert "| `rope` | 0 |" in section and f"| `alibi` | {SINKS} |" in section
    assert "- `learned`: the learned table's cache cannot evict" in section
    assert (streamed / "streaming.png").read_bytes().startswith(b"\x89PNG")
    refused = [r for r in records(streamed) if r["record"] == "streaming_refused"]
    assert [r["label"] for r in refused] == ["learned"]


@pytest.mark.parametrize(
    "args,match",
    [
        (["--streaming-sinks", "8"], "--streaming-sinks 8 leaves no window in a cache of T = 8 tokens; give 1 to 7"),
        (["--streaming-sinks", "0"], "--streaming-sinks must be an integer >= 1"),
    ],
)
def test_bad_streaming_values_are_refused_in_one_line_writing_nothing(length_study, tmp_path, capsys, args, match):
    copy = tmp_path / "copy"
    shutil.copytree(length_study, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    assert main(["length", "--out", str(copy), "--reread", "--streaming", *args]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err, err
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before


def test_a_new_study_refuses_sinks_past_its_context_before_training(small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["length", "--text", str(small_corpus), "--out", str(out), "--train-length", "16", "--max-steps", "2"]
    assert main([*argv, "--streaming", "--streaming-sinks", "16"]) == 1
    assert "--streaming-sinks 16 leaves no window in a cache of T = 16 tokens" in capsys.readouterr().err
    assert not out.exists()


def tiny_study(corpus, out, *flags: str) -> list[str]:
    shape = "--vocab-size 280 --d-model 16 --n-heads 2 --n-layers 1 --batch-size 4 --train-length 8 --multipliers 1 4"
    return ["length", "--text", str(corpus), "--out", str(out), *shape.split(), "--max-steps", "2", *flags]


@pytest.mark.parametrize(
    "flags,match",
    [
        (["--schemes", "rope", "--attention-sinks"], "--streaming with --attention-sinks"),
        (["--schemes", "rope", "--document-mask"], "--streaming with --document-mask"),
        (["--schemes", "learned", "fox"], "no scheme of --schemes learned fox can evict its cache"),
    ],
)
def test_a_new_study_none_of_whose_models_could_stream_is_refused_before_training(
    small_corpus, tmp_path, capsys, flags, match
):
    out = tmp_path / "study"
    assert main([*tiny_study(small_corpus, out, "--streaming", *flags)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err, err
    assert not out.exists()


def test_a_reread_of_a_study_none_of_whose_models_can_stream_says_so_writing_nothing(small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*tiny_study(small_corpus, out, "--schemes", "learned", "--extend-to", "0", "--quiet")]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["length", "--out", str(out), "--reread", "--streaming", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "no model of" in err and "the learned table's cache cannot evict" in err and len(err.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.slow
def test_a_new_study_with_streaming_ends_with_one_result_that_holds_the_reading(small_corpus, tmp_path, capsys):
    out = tmp_path / "study"
    argv = tiny_study(small_corpus, out, "--schemes", "rope", "learned", "--rope-scalings", "--extend-to", "0")
    assert main([*argv, "--streaming", "--streaming-streams", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["event"] for x in lines].count("result") == 1 and lines[-1]["event"] == "result"
    assert lines[-1]["readings"] == ["streaming"] and any(w.endswith("streaming.png") for w in lines[-1]["written"])
    streamed = [x for x in lines if x["event"] == "streaming"]
    assert {(x["label"], x.get("sinks")) for x in streamed} == {("rope", 0), ("rope", 4), ("learned", None)}
    assert all(x["bpb"] > 0 for x in streamed if x["label"] == "rope")
    shutil.rmtree(out)
    assert main([*argv, "--streaming", "--streaming-streams", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "## Streaming with sinks and a window" in printed and "| `rope` | 0 |" in printed
    assert printed.rstrip().splitlines()[-1].startswith("wrote ") and "streaming.png" in printed.splitlines()[-1]


def test_ctrl_c_in_a_new_study_s_reading_names_the_reread_that_finishes_it(small_corpus, tmp_path, capsys, monkeypatch):
    import octlm.studies.length.reread

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(octlm.studies.length.reread, "run_readings", interrupted)
    out = tmp_path / "study"
    argv = tiny_study(small_corpus, out, "--schemes", "rope", "--rope-scalings", "--extend-to", "0", "--quiet")
    assert main([*argv, "--streaming"]) != 0
    err = capsys.readouterr().err
    assert f"octlm length --out {out} --reread --streaming computes them" in err, err
    assert (out / "length.md").is_file()


def test_a_reread_of_a_cut_short_length_jsonl_names_the_line(length_study, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(length_study, copy)
    jsonl = copy / "length.jsonl"
    lines = jsonl.read_text().splitlines()
    jsonl.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # cut in its last record
    assert main(["length", "--out", str(copy), "--reread", "--streaming"]) == 1
    err = capsys.readouterr().err
    assert f"{jsonl} line {len(lines)} is not JSON" in err and len(err.strip().splitlines()) == 1, err
