"""``octlm attention``: what it writes, the text it reads, its bad input, and the files it never touches."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from octlm.cli import main
from tests.conftest import small_run

PNG = b"\x89PNG\r\n\x1a\n"


def result_of(capsys) -> dict:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[-1]["event"] == "result"
    return lines[-1]


@pytest.fixture
def run(trained_run, tmp_path):
    """A copy of the small trained run (learned positions, context_length 32, 2 layers of 2 heads)."""
    copy = tmp_path / "run"
    shutil.copytree(trained_run, copy)
    return copy


def test_a_prompt_gives_every_layers_heatmaps_and_the_statistics(run, capsys):
    from octlm.run.load import load_run

    _, tokenizer = load_run(run)
    prompt = "ROMEO: But soft, what light"
    n = len(tokenizer.encode(prompt))
    assert main(["attention", "--run", str(run), "--prompt", prompt, "--json"]) == 0
    result = result_of(capsys)
    out = run / "attention"
    assert sorted(p.name for p in out.iterdir()) == ["layer-0.png", "layer-1.png", "statistics.json", "statistics.png"]
    assert all((out / name).read_bytes().startswith(PNG) for name in ("layer-0.png", "layer-1.png", "statistics.png"))
    assert result["tokens"] == n and result["source"] == "prompt" and len(result["figures"]) == 3
    stats = result["statistics"]
    assert json.loads((out / "statistics.json").read_text())["statistics"] == stats
    for layer in range(2):
        for head in range(2):
            entropy = stats["entropy"][layer][head]
            assert len(entropy) == n and entropy[0] == 0
            # no attention over i + 1 keys has more entropy than the uniform one
            assert all(0 <= h <= math.log(i + 1) + 1e-4 for i, h in enumerate(entropy))
            assert 0 <= stats["mean_distance"][layer][head] <= (n - 1) and 1 / n <= stats["sink_mass"][layer][head] <= 1
            assert math.isfinite(stats["max_logit"][layer][head])
            assert stats["mean_entropy"][layer][head] == pytest.approx(sum(entropy) / n, abs=1e-3)


def test_by_default_the_start_of_the_validation_text_at_the_context_length(run, capsys):
    from octlm.run.folder import RunFolder

    assert main(["attention", "--run", str(run), "--json"]) == 0
    result = result_of(capsys)
    assert result["source"] == "validation" and result["tokens"] == 32
    written = json.loads((run / "attention" / "statistics.json").read_text())
    assert written["tokens"] == [int(i) for i in RunFolder(run).tokens("val")[:32]]


def test_people_see_each_head_beside_uniform_attention(run, capsys):
    assert main(["attention", "--run", str(run), "--length", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("attention on 10 tokens of the run's validation text") and out.count(" head ") == 4
    entropy = sum(math.log(i + 1) for i in range(10)) / 10  # ln(n) for n = 1 .. 10 visible keys
    assert f"uniform attention over these 10 tokens: entropy {entropy:.3f} nats, distance {9 / 4:.2f} tokens" in out
    assert f"wrote {run / 'attention' / 'statistics.json'}" in out


@pytest.mark.slow
def test_text_is_read_as_training_reads_it(run, small_corpus, tmp_path, capsys):
    from octlm.data.tokens import encode_stream
    from octlm.run.load import load_run

    _, tokenizer = load_run(run)
    short = tmp_path / "short.txt"
    short.write_text("\ufeffSpeak, speak.\r\n", encoding="utf-8")
    expected = encode_stream(tokenizer, ["Speak, speak.\r\n"]).tolist()
    assert main(["attention", "--run", str(run), "--text", str(short), "--out", str(tmp_path / "a"), "--json"]) == 0
    assert result_of(capsys)["tokens"] == len(expected)  # shorter than --length: all of it, <|endoftext|> included
    assert json.loads((tmp_path / "a" / "statistics.json").read_text())["tokens"] == expected
    assert (
        main(
            [
                "attention",
                "--run",
                str(run),
                "--text",
                str(small_corpus),
                "--length",
                "20",
                "--out",
                str(tmp_path / "b"),
                "--json",
            ]
        )
        == 0
    )
    assert (
        json.loads((tmp_path / "b" / "statistics.json").read_text())["tokens"]
        == encode_stream(tokenizer, [small_corpus.read_text()])[:20].tolist()
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--length", "0"], "--length must be >= 1, got 0"),
        (
            ["--length", "33"],
            "--length 33: the learned table has 32 rows (positions 0..31), none for position 32 on; "
            "give --length 32 or less",
        ),
        (["--prompt", "a", "--text", "x.txt"], "--prompt and --text are both given; give one of them"),
        (["--prompt", ""], "--prompt is empty; give some text"),
        (["--prompt", "To be, or not to be", "--length", "3"], "more than --length 3; shorten it or give --length"),
        (
            ["--prompt", "To be, or not to be, that is the question: " * 4],
            "shorten it to 32 tokens (the learned table has 32 rows)",
        ),
        (["--text", "no-such-file.txt"], "no-such-file.txt: no such file or folder"),
        (["--text", ""], "--text got an empty path ''"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["attention", "--run", str(run), "--out", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error: ") and message in err and "Traceback" not in err and err.count("\n") == 1, err
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_a_missing_run_or_one_stopped_before_its_weights(run, tmp_path, capsys):
    assert main(["attention", "--run", str(tmp_path / "nothing")]) == 1
    assert "no such run folder" in capsys.readouterr().err
    (run / "model.safetensors").unlink()
    (run / "checkpoint.safetensors").write_bytes(b"")
    assert main(["attention", "--run", str(run)]) == 1
    assert (
        "its training stopped before it wrote model.safetensors; finish it with `octlm train --resume"
        in capsys.readouterr().err
    )
    assert not (run / "attention").exists()


def test_a_run_without_validation_text_needs_a_prompt(run, capsys):
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["tokens"]["val"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["attention", "--run", str(run)]) == 1
    assert "has no validation text (val.bin) to show; give --prompt TEXT or --text FILE" in capsys.readouterr().err


def test_out_never_replaces_files_it_did_not_write(run, tmp_path, capsys):
    out = tmp_path / "figures"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        assert main(["attention", "--run", str(run), "--out", str(out), "--quiet", *extra]) == 1
        assert "holds files that octlm attention did not write" in capsys.readouterr().err
        assert (out / "notes.txt").read_text() == "mine"
    before = sorted(p.name for p in run.iterdir())
    assert main(["attention", "--run", str(run), "--out", str(run), "--overwrite", "--quiet"]) == 1
    assert "holds an octlm run" in capsys.readouterr().err and sorted(p.name for p in run.iterdir()) == before
    # an earlier output, even of a deeper model, is replaced whole
    (out / "notes.txt").unlink()
    (out / "layer-7.png").write_bytes(PNG)
    assert main(["attention", "--run", str(run), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["layer-0.png", "layer-1.png", "statistics.json", "statistics.png"]
    assert not list(tmp_path.glob(".figures.*"))


def test_train_overwrite_takes_the_attention_folder_only_when_it_holds_octlm_output(run, small_corpus, capsys):
    from octlm.run.folder import RunFolder

    assert main(["attention", "--run", str(run), "--quiet"]) == 0
    assert RunFolder(run).foreign_files() == []
    (run / "attention" / "NOTES.md").write_text("mine")
    assert RunFolder(run).foreign_files() == ["attention/NOTES.md"]
    tiny = small_run(eval_interval=50, eval_blocks=4, final_eval_blocks=4, sample_tokens=0, max_steps=2)
    assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", *tiny]) == 1
    assert "holds attention/NOTES.md besides" in capsys.readouterr().err and (run / "attention" / "NOTES.md").exists()
    (run / "attention" / "NOTES.md").unlink()
    assert main(["train", "--text", str(small_corpus), "--out", str(run), "--overwrite", "--quiet", *tiny]) == 0
    assert not (run / "attention").exists()


def test_a_length_past_the_memory_names_the_length_given_and_the_tokens_it_had(run, monkeypatch):
    """--length beyond the text looks at all of the text; the refusal names both the value given and the tokens it
    had."""
    import torch

    import octlm.train.memory_limit
    from octlm.errors import OctlmError
    from octlm.inspect.attention import check_map_memory
    from octlm.run.load import load_run

    model, _ = load_run(run)
    monkeypatch.setattr(octlm.train.memory_limit, "device_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    layers, heads, tokens = model.config.n_layers, model.config.n_heads, 300
    with pytest.raises(OctlmError) as caught:
        check_map_memory(model, tokens, torch.device("cpu"), asked=100_000)
    need = 8 * layers * heads * tokens**2 / 2**20  # probabilities and logits, float32
    longest = int((2**19 / (8 * layers * heads)) ** 0.5)
    # Sizes that would read "0.0 GiB" and "0 GiB" are given in MiB, which a person can compare with what they have.
    assert str(caught.value) == (
        f"--length 100000: the attention maps of {tokens} tokens, {layers} layers x {heads} heads, need about "
        f"{need:,.1f} MiB, more than half this machine's 1 MiB of memory; give --length {longest} or less"
    )


def test_a_length_past_a_large_machines_memory_is_refused_in_gib(run, monkeypatch):
    """Sizes of a GiB and more keep GiB: 100,000 tokens on a 64 GiB machine."""
    import torch

    import octlm.train.memory_limit
    from octlm.errors import OctlmError
    from octlm.inspect.attention import check_map_memory
    from octlm.run.load import load_run

    model, _ = load_run(run)
    monkeypatch.setattr(octlm.train.memory_limit, "device_memory_bytes", lambda device: 64 * 2**30)
    layers, heads, tokens = model.config.n_layers, model.config.n_heads, 100_000
    with pytest.raises(OctlmError) as caught:
        check_map_memory(model, tokens, torch.device("cpu"))
    need = 8 * layers * heads * tokens**2 / 2**30
    longest = int((32 * 2**30 / (8 * layers * heads)) ** 0.5)
    assert str(caught.value).endswith(
        f"need about {need:,.1f} GiB, more than half this machine's 64 GiB of memory; give --length {longest} or less"
    )


def test_a_prompt_of_spaces_is_text_and_a_study_folder_points_at_its_runs(run, tmp_path, capsys):
    """Whitespace is tokens (a code model's indentation); a study given as --run names the runs inside it."""
    assert main(["attention", "--run", str(run), "--prompt", "    ", "--out", str(tmp_path / "spaces"), "--quiet"]) == 0
    assert (tmp_path / "spaces" / "statistics.json").is_file()
    study = tmp_path / "study"
    shutil.copytree(run, study / "runs" / "rope")
    (study / "length.jsonl").write_text("{}\n")
    capsys.readouterr()
    assert main(["attention", "--run", str(study)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{study}: is a study, not a run; give one of its runs, e.g. {study / 'runs' / 'rope'}" in err
        and err.count("\n") == 1
    )
