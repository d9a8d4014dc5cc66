"""Faults found in the transformers import/export and the memory checks, one test each.

Each docstring states the fault as it was found; every reference is computed
independently (transformers' own model, a limit written by hand).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.model import Decoder, DecoderConfig
from octlm.model.weights import save_weights
from octlm.run.folder import RunFolder
from octlm.run.load import load_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import (  # noqa: E402  (in the test extra)
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
)

SHAPE = dict(context_length=16, d_model=32, n_heads=2, n_layers=1)


@pytest.fixture(scope="module")
def tokenizer(shakespeare) -> Tokenizer:
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:100_000]], vocab_size=300)


def make_run(folder, tokenizer: Tokenizer, **fields) -> Decoder:
    """A random octlm run folder (weights, tokenizer, config), as training would leave it."""
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=tokenizer.vocab_size, **{**SHAPE, **fields})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    folder.mkdir(parents=True)
    save_weights(folder / "model.safetensors", model)
    tokenizer.save(folder / "tokenizer.json")
    RunFolder(folder).write_config(model.config, {})
    return model


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octlm: error: ") and "Traceback" not in err, err
    return lines[0]


# Item 15 -------------------------------------------------------------------------------------------------------------


def fake_cgroup(tmp_path, version: int) -> dict:
    """A cgroup tree whose own group caps memory at 8 MiB with 2 MiB in use (1 MiB of it reclaimable page cache)."""
    root = tmp_path / "cgroup"
    if version == 2:
        group = root / "user.slice" / "job"
        group.mkdir(parents=True)
        (root / "user.slice" / "memory.max").write_text("max\n")
        (group / "memory.max").write_text(f"{8 * 2**20}\n")
        (group / "memory.current").write_text(f"{2 * 2**20}\n")
        (group / "memory.stat").write_text(f"anon 1048576\ninactive_file {2**20}\n")
        cgroup_line, limit_file = "0::/user.slice/job\n", group / "memory.max"
    else:
        group = root / "memory" / "docker" / "abc"
        group.mkdir(parents=True)
        (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
        (group / "memory.limit_in_bytes").write_text(f"{8 * 2**20}\n")
        (group / "memory.usage_in_bytes").write_text(f"{2 * 2**20}\n")
        (group / "memory.stat").write_text(f"cache 1048576\ntotal_inactive_file {2**20}\n")
        cgroup_line, limit_file = "12:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n", group / "memory.limit_in_bytes"
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(cgroup_line)
    return {"root": root, "proc": proc, "names": str(limit_file)}


def fake_rlimit(monkeypatch, tmp_path, which: str) -> str:
    """RLIMIT_AS or RLIMIT_DATA at 40 MiB, with 33 MiB already mapped (VmSize) or in data (VmData): 7 MiB left."""
    import resource

    import octlm.train.memory_limit as memory_limit

    real = resource.getrlimit
    number = getattr(resource, which)
    monkeypatch.setattr(
        resource, "getrlimit", lambda kind: (40 * 2**20, resource.RLIM_INFINITY) if kind == number else real(kind)
    )
    status = tmp_path / "status"
    status.write_text(f"Name:\tpython\nVmSize:\t{33 * 1024} kB\nVmData:\t{33 * 1024} kB\n")
    monkeypatch.setattr(memory_limit, "PROC_STATUS", status)
    return which


@pytest.mark.parametrize("source", ["cgroup v2", "cgroup v1", "RLIMIT_AS", "RLIMIT_DATA", "real ulimit -v"])
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads and fakes Linux's /proc")
def test_a_process_memory_limit_refuses_up_front(tokenizer, small_corpus, tmp_path, capsys, monkeypatch, source):
    """Fault: `octlm attention --length L` under `ulimit -v` or a container's cgroup limit allocated past it and died
    with the allocator's traceback: the memory check read the machine's physical memory only. Now the one check of
    train, sample and attention takes the least of the machine's memory and the room left under the process's limits,
    and names the limit that binds."""
    run = tmp_path / "run"
    make_run(run, tokenizer, position="rope")
    if source == "real ulimit -v":
        # The limit is set once torch is imported, 2 GiB above what the process then maps (a CUDA build of torch maps
        # far more than a CPU one); 16,000 tokens take 4 GiB of maps (1 layer x 2 heads x 8 bytes x 16,000^2).
        limited = (
            "import resource, sys, torch\n"
            "from octlm.cli import main\n"
            "status = open('/proc/self/status').read().splitlines()\n"
            "mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith('VmSize'))\n"
            "resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**31, mapped + 2**31))\n"
            "sys.exit(main(sys.argv[1:]))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", limited, "attention", "--run", str(run), "--text", str(small_corpus)]
            + ["--length", "16000", "--device", "cpu", "--out", str(tmp_path / "maps")],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            timeout=300,
        )
        assert done.returncode == 1, done.stderr[-2000:]
        line = one_error_line(done.stderr)
        assert "--length 16000" in line and "RLIMIT_AS" in line and "ulimit -v" in line and "mapped already" in line
        assert not (tmp_path / "maps").exists()
        return
    import octlm.train.memory_limit as memory_limit
    from octlm.errors import OctlmError
    from octlm.train.device import check_memory

    if source.startswith("cgroup"):
        fake = fake_cgroup(tmp_path, int(source[-1]))
        monkeypatch.setattr(memory_limit, "CGROUP_ROOT", fake["root"])
        monkeypatch.setattr(memory_limit, "PROC_CGROUP", fake["proc"])
        names, room = fake["names"], "7 MiB"  # 8 MiB less the 1 MiB in use that is not reclaimable page cache
    else:
        names, room = fake_rlimit(monkeypatch, tmp_path, source), "7 MiB"
    # 800 tokens: 9.8 MiB of maps, more than half of the 7 MiB the process has left, far below the machine's memory
    code = main(["attention", "--run", str(run), "--text", str(small_corpus), "--length", "800", "--device", "cpu"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and names in line and f"the {room} " in line and "--length 800" in line
    assert not (run / "attention").exists()
    # training reads the same limit: a batch whose activations (about 17 MiB) pass the machine but not the process
    config = DecoderConfig(vocab_size=300, context_length=128, d_model=32, n_heads=2, n_layers=1)
    with pytest.raises(OctlmError, match=f"more than the {room} .*{names}"):
        check_memory(config, 32, torch.device("cpu"))


# Item 20 -------------------------------------------------------------------------------------------------------------


def padded_checkpoint(folder, tokenizer: Tokenizer, model_type: str, rows: int) -> torch.nn.Module:
    """A random transformers checkpoint whose token table has ``rows`` rows, more than the tokenizer's tokens.

    GPT-NeoX stores an untied head, equal to the table on the tokens' rows and different on the padding rows (whose
    values nothing reads); GPT-2 ties its head.
    """
    torch.manual_seed(3)
    if model_type == "gpt2":
        config = GPT2Config(vocab_size=rows, n_positions=24, n_embd=32, n_layer=1, n_head=2, initializer_range=0.2)
        model = GPT2LMHeadModel(config).eval()
    else:
        config = GPTNeoXConfig(
            vocab_size=rows,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=24,
            use_parallel_residual=False,
            tie_word_embeddings=False,
            initializer_range=0.2,
            rotary_pct=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
        model = GPTNeoXForCausalLM(config).eval()
        with torch.no_grad():
            head, table = model.get_output_embeddings().weight, model.get_input_embeddings().weight
            head.copy_(torch.cat([table[: tokenizer.vocab_size], torch.randn(rows - tokenizer.vocab_size, 32)]))
    model.save_pretrained(folder)
    tokenizer.save(folder / "tokenizer.json")
    return model


@pytest.mark.rounding  # the logits agree to 1e-5, not bit for bit
@pytest.mark.parametrize("model_type", ["gpt2", "gpt_neox"])
def test_import_drops_the_padding_rows_of_a_padded_token_table(tokenizer, tmp_path, capsys, model_type):
    """Fault: import-hf refused a checkpoint whose token table has more rows than its tokenizer has tokens (Pythia's
    50,304 rows for 50,277 tokens, padded to a multiple of 64). Now it imports it without the padding rows (of the
    head too), says so in one line, and the logits of the real tokens are transformers'."""
    rows = 320  # 300 tokens padded to a multiple of 64
    hf = padded_checkpoint(tmp_path / "hf", tokenizer, model_type, rows)
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "run")]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    said = [line for line in (out.out + out.err).splitlines() if "padding rows" in line]
    assert len(said) == 1 and "20" in said[0] and "320" in said[0] and "300" in said[0], out
    model, _ = load_run(tmp_path / "run")
    assert model.config.vocab_size == tokenizer.vocab_size
    ids = torch.randint(0, tokenizer.vocab_size, (2, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours, theirs = model.eval()(ids), hf(ids).logits[..., : tokenizer.vocab_size]
    assert float(ours.std()) > 0.1 and float((ours - theirs).abs().max()) < 1e-5


# Item 21 -------------------------------------------------------------------------------------------------------------


#: max_position_embeddings per method: the length served (64 = 4 x 16), except YaRN's, which transformers 4 (4.45)
#: reads as the length before scaling (its _compute_yarn_parameters has no original_max_position_embeddings).
SERVED = {"linear": 64, "ntk": 64, "llama3": 64, "yarn": 16}


@pytest.mark.parametrize("method", SERVED)
def test_export_with_rope_scaling_writes_the_length_it_serves(tokenizer, shakespeare, tmp_path, capsys, method):
    """Fault: `export-hf --rope-scaling yarn --rope-factor 4` wrote the tokenizer's model_max_length as the trained
    length T, so `tokenizer(..., truncation=True)` cut at T where the exported model serves 4T. Now it writes 4T,
    and max_position_embeddings as transformers reads it; import-hf gives back the trained length."""
    import json

    from octlm.export.hf import import_hf

    make_run(tmp_path / "run", tokenizer, position="rope", rope_layout="half")
    command = ["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--rope-scaling", method, "--rope-factor", "4"]
    assert main(command) == 0
    hf_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tokenizer.model_max_length == 64
    long_text = shakespeare.read_text(encoding="utf-8")[:2000]
    assert len(hf_tokenizer(long_text, truncation=True, add_special_tokens=False)["input_ids"]) == 64
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["max_position_embeddings"] == SERVED[method]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "hf").config.max_position_embeddings == SERVED[method]
    import_hf(tmp_path / "hf", tmp_path / "back")
    assert load_run(tmp_path / "back")[0].config.context_length == 16


# Item 22 -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_export_refuses_a_run_trained_at_randomized_positions(tokenizer, tmp_path, capsys, position):
    """Fault: a run trained with `--randomize-positions 4` exported as plain GPT-2 (or GPT-NeoX), whose logits
    differed from octlm's by 0.38 on a short text: octlm places a sequence at positions drawn from 0 .. 4T - 1 (one
    draw per length), transformers at 0 .. n - 1. Now export-hf refuses it with the reason; nothing is written."""
    model = make_run(tmp_path / "run", tokenizer, position=position, randomize_positions=4)
    ids = torch.tensor([tokenizer.encode("ROMEO: But soft")])
    # what the refusal rests on: at inference octlm does not place a short text at 0 .. n - 1
    drawn = model.positions.test_positions(ids.shape[1])
    assert drawn is not None and not torch.equal(drawn, torch.arange(ids.shape[1]))
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "randomize_positions=4" in line and "0 .. n - 1" in line and "--randomize-positions" in line
    assert not (tmp_path / "hf").exists()
