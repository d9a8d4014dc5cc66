"""Corpus preparation: a streamed corpus against a plain read, and on text without spaces, bounded time and a prompt
stop on Ctrl-C, SIGTERM or SIGHUP."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _no_space_text(path: Path, megabytes: float) -> Path:
    rng = random.Random(0)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    path.write_text("".join(rng.choices(alphabet, k=int(megabytes * 1e6))), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def no_space_blob(tmp_path_factory) -> Path:
    # 8 MB: the tokenizer trains on it for about 5 s, then encoding takes about 4 s on the project's machines, in which
    # the signal lands
    return _no_space_text(tmp_path_factory.mktemp("blob") / "blob.txt", 8)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.slow
def test_a_signal_during_preparation_stops_within_seconds_and_leaves_nothing(tmp_path, signum, no_space_blob):
    """Tokenizer training and encoding run in Rust; a signal must still stop the
    command at once, removing the half-prepared run folder."""
    text = no_space_blob
    out = tmp_path / "runs" / "blob"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "train", "--text", str(text), "--out", str(out), "--max-steps", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # Wait until the corpus is reported (the tokenizer has trained on it), and a little more: encoding has begun.
    seen = ""
    while '"event": "corpus"' not in seen:
        line = proc.stdout.readline()
        assert line, f"octlm ended before preparing the corpus: {seen}{proc.stderr.read()}"
        seen += line
    time.sleep(0.5)
    assert proc.poll() is None, "preparation ended before the signal; the test needs a longer text"
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("octlm did not stop within 20 s of the signal during corpus preparation")
    waited = time.monotonic() - sent
    rest = proc.stderr.read()
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    assert not out.exists()
    assert list(out.parent.iterdir()) == [], f"left behind: {list(out.parent.iterdir())} (stopped after {waited:.1f}s)"


def test_a_streamed_corpus_is_every_document_once_as_a_plain_read_tokenized_whole(
    tmp_path, shakespeare, monkeypatch, capsys
):
    """With the streaming threshold lowered to 20 kB and groups of 4 kB (about twenty group boundaries), train.bin and
    val.bin hold each document of a plain read (``json.loads``, ``bytes.decode``) once and in order, split at 90% of its
    characters and tokenized whole by the Hugging Face tokenizer itself, each part followed by <|endoftext|>."""
    from tokenizers import Tokenizer as HFTokenizer

    import octlm.train.corpus
    from octlm.cli import main

    monkeypatch.setattr(octlm.train.corpus, "TOKENIZER_SAMPLE_BYTES", 20_000)
    monkeypatch.setattr(octlm.train.corpus, "STREAM_GROUP_BYTES", 4_000)
    text = shakespeare.read_text(encoding="utf-8")
    folder = tmp_path / "corpus"
    folder.mkdir()
    records = [p for p in text[:60_000].split("\n\n") if p]
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in records), encoding="utf-8")
    (folder / "b.txt").write_text(text[60_000:70_000], encoding="utf-8")
    # longer than one encoding piece (CHUNK_CHARS, 262,144 characters): cut at pre-token boundaries, then joined
    (folder / "c.txt").write_text(text[70_000:370_000], encoding="utf-8")
    out = tmp_path / "run"
    args = ["--vocab-size", "300", "--context-length", "16", "--d-model", "16", "--n-heads", "2", "--n-layers", "1"]
    args += ["--val-fraction", "0.1", "--max-steps", "1", "--sample-tokens", "0", "--json"]
    assert main(["train", "--text", str(folder), "--out", str(out), *args]) == 0
    events = [json.loads(line).get("event") for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert "sample" in events  # the streamed path: the tokenizer trained on a sample

    documents = [json.loads(line)["text"] for line in (folder / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    documents += [(folder / name).read_bytes().decode("utf-8") for name in ("b.txt", "c.txt")]
    hf = HFTokenizer.from_file(str(out / "tokenizer.json"))
    eot = hf.token_to_id("<|endoftext|>")
    expected = {"train": [], "val": []}
    for doc in documents:
        cut = int(len(doc) * 0.9)  # --val-fraction 0.1: the first 90% of each document's characters train
        for split, part in (("train", doc[:cut]), ("val", doc[cut:])):
            if part:
                expected[split] += [*hf.encode(part, add_special_tokens=False).ids, eot]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["total_bytes"] == sum(len(d.encode()) for d in documents)
    for split, ids in expected.items():
        stored = np.fromfile(out / f"{split}.bin", dtype=manifest["tokens"][split]["dtype"])
        assert stored.tolist() == ids, split
