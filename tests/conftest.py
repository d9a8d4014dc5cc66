"""Shared fixtures: the test corpus and one small trained run.

The corpus is tinyshakespeare as octlm ships it (``--text tinyshakespeare``),
so the suite needs nothing beside the clone.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# A suite started in the background by a non-interactive shell (`cmd &`) inherits SIGINT ignored,
# and so would every octlm it starts: the tests that press Ctrl-C on one would see nothing happen.
# A handler (not "ignore") is reset to the default in each child, which then gets Python's own.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile("octlm", deadline=None, max_examples=60)
settings.load_profile("octlm")

# pytest-xdist (`-n 2` in pyproject's addopts) runs tests in one process per CPU. Each of them taking every CPU for
# torch's threads would make the workers fight over the cores and every operator wait on its slowest thread, so a worker
# computes on one thread unless OMP_NUM_THREADS says otherwise; commands the tests start inherit it and skip the 0.2 s
# idle-CPU probe. scripts/test.sh's rounding pass sets another OMP_NUM_THREADS, so it still runs another thread count.
# A set OMP_NUM_THREADS also keeps a study in one process (--processes' default), so a study a test runs in its own
# process sees that test's monkeypatches; one run with -p no:xdist computes on one thread as well.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers share the CPUs with the threads and processes some tests start (--threads 2 runs, torchrun's ranks):
    # OpenMP threads that spin while they wait take the CPU from the others (a 60-step run on two threads took 33 s
    # beside one busy process, 16 s with passive waits; alone passive waits cost it 18%). Read when torch loads, which
    # it has not yet here; a one-worker run keeps OpenMP's default. Waiting changes no number.
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


#: Fixtures that train a length study (seconds each, once per worker): every test that reads one is in the slow tier,
#: so the quick tier (`pytest -m "not slow"`) trains no study at all, not even the one its first reader would pay for.
STUDY_FIXTURES = frozenset(
    {"length_study", "study", "extended", "tiny_study", "layout_run", "view", "curved", "alibi_study"}
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if STUDY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The files with the most slow tests first (the order within a file kept): xdist hands out whole files
    # (--dist loadfile) in this order, so the long ones start early and short ones fill the gaps at the end, instead
    # of one worker finishing a long file alone while the other waits.
    weight: dict[str, int] = {}
    for item in items:
        weight[item.fspath.strpath] = weight.get(item.fspath.strpath, 0) + (item.get_closest_marker("slow") is not None)
    first = {path: i for i, path in enumerate(dict.fromkeys(item.fspath.strpath for item in items))}
    items.sort(key=lambda item: (-weight[item.fspath.strpath], first[item.fspath.strpath]))


#: The smallest model the command-line tests train: its shape and steps, on one thread (a run's numbers repeat only at
#: one thread count, and the idle-CPU default can differ between two runs on a busy machine).
TINY_MODEL = "--max-steps 3 --d-model 32 --n-heads 2 --n-layers 1 --vocab-size 300 --batch-size 4 --threads 1".split()

#: The small shape most training tests share (context 16); each test adds its own steps, evaluation and sampling.
SMALL_SHAPE = dict(vocab_size=280, context_length=16, d_model=16, n_heads=2, n_layers=1, batch_size=4)
#: The TrainOptions fields of a short run of that shape: evaluated every 5 steps on 4 blocks (8 at the end), no sample,
#: one thread (a run's numbers repeat only at one thread count).
SMALL_RUN = dict(SMALL_SHAPE, eval_interval=5, eval_blocks=4, final_eval_blocks=8, sample_tokens=0, threads=1)


def flags(**options) -> list[str]:
    """Command-line flags written from keyword options, in their order: ``eval_blocks=4`` gives ``--eval-blocks 4``,
    a list or tuple several values (``multipliers=[1, 2]``), ``True`` the bare flag."""
    out = []
    for name, value in options.items():
        out.append("--" + name.replace("_", "-"))
        if isinstance(value, (list, tuple)):
            out += [str(v) for v in value]
        elif value is not True:
            out.append(str(value))
    return out


def small_run(**options) -> list[str]:
    """``octlm train`` flags for :data:`SMALL_SHAPE` followed by ``options`` (see :func:`flags`)."""
    return flags(**SMALL_SHAPE, **options)


def tiny_model(**options) -> list[str]:
    """Flags for the tiny model of the study tests (d_model 16, one layer of two heads, vocabulary 280, batches of 4;
    the context length is the study's ``--train-length``) followed by ``options`` (see :func:`flags`)."""
    return flags(vocab_size=280, d_model=16, n_heads=2, n_layers=1, batch_size=4, **options)


@pytest.fixture(scope="session")
def shakespeare(tmp_path_factory) -> Path:
    """tinyshakespeare, the built-in corpus, written out as an ordinary file for tests that need a path."""
    from octlm.data.corpora import read_builtin

    path = tmp_path_factory.mktemp("corpus") / "tinyshakespeare.txt"
    path.write_bytes(read_builtin("tinyshakespeare"))
    return path


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory, shakespeare) -> Path:
    """The first 120 kB of tinyshakespeare: enough for a tokenizer and a few hundred blocks."""
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text(shakespeare.read_text(encoding="utf-8")[:120_000], encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, small_corpus) -> Path:
    """A run folder from a short CLI training run (learned positions, small shape)."""
    from octlm.cli import main

    out = tmp_path_factory.mktemp("runs") / "small"
    run = flags(vocab_size=300, context_length=32, d_model=32, n_heads=2, max_steps=30, eval_interval=10, batch_size=8)
    code = main(["train", "--text", str(small_corpus), "--out", str(out), *run, "--sample-tokens", "8", "--quiet"])
    assert code == 0
    return out


@pytest.fixture(scope="session")
def length_study(tmp_path_factory, small_corpus) -> Path:
    """A tiny length study (octlm length): learned, rope (and rope+yarn) and alibi trained 3 steps at T = 8, scored at
    8, 16 and 32 tokens, with a 2-step extension stage at 2 x T (about half a minute)."""
    from octlm.cli import main

    out = tmp_path_factory.mktemp("studies") / "tiny"
    study = tiny_model(
        train_length=8,
        multipliers=[1, 2, 4],
        schemes=["learned", "rope", "alibi"],
        rope_scalings=["yarn"],
        max_steps=3,
        extend_to=2,
        extend_steps=2,
        quiet=True,
    )
    code = main(["length", "--text", str(small_corpus), "--out", str(out), *study])
    assert code == 0
    return out


def hand_bpb(run_dir, targets: int, L: int, scaling: str | None = None, factor: float = 4.0) -> float:
    """Bits per byte of non-overlapping windows of ``L`` targets over the first ``targets`` validation targets of a
    run folder (under RoPE ``scaling`` by ``factor`` when given), computed here from its model's log-probabilities
    and its tokenizer's bytes, for tests that check a study's score without the study's scoring code."""
    import json
    import math

    import numpy as np
    import torch

    from octlm.run.load import load_run

    model, tokenizer = load_run(run_dir)
    if scaling:
        model.set_rope_scaling(scaling, factor)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    val = np.memmap(run_dir / "val.bin", dtype=manifest["tokens"]["val"]["dtype"], mode="r")
    nats, nbytes = 0.0, 0
    with torch.no_grad():
        for w in range(targets // L):
            window = torch.tensor(np.asarray(val[w * L : w * L + L + 1], dtype=np.int64))
            logp = torch.log_softmax(model(window[None, :-1])[0].double(), dim=-1)
            nats -= logp[torch.arange(L), window[1:]].sum().item()
            nbytes += len(tokenizer.decode(window[1:].tolist()).encode("utf-8"))
    return nats / math.log(2) / nbytes
