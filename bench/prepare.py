"""Corpus preparation at size: wall time, bytes per second and peak resident memory; prints JSON.

    .venv/bin/python bench/prepare.py [--megabytes 100 300 1000] [--formats jsonl text] [--vocab-size 1024] [--keep DIR]

For each size and format the text is generated first (not timed): sentences
of words drawn from tinyshakespeare's vocabulary with Zipf-like frequencies
(seeded, so every run measures the same text), as one ``corpus.jsonl`` of
paragraph records, or as a folder of plain text files of about 1 MB each
(a plain file is one document, read whole; a folder of them streams).
Then a fresh subprocess prepares it exactly as ``octlm train`` does
(:func:`octlm.train.corpus.prepare_corpus`: read, split, tokenizer, token
files, manifest) into a scratch run folder, and reports its own time; its peak
resident memory is the child's ``ru_maxrss`` (os.wait4), so each measurement
is its own. ``bytes_per_second`` is the corpus's text bytes over the
preparation's seconds (without the interpreter's start and torch's import).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from pathlib import Path
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.train.corpus import TOKENIZER_SAMPLE_BYTES, prepare_corpus
from octlm.train.options import TrainOptions

corpus, out, vocab = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
out.mkdir()
opts = TrainOptions.of(text=[corpus], vocab_size=vocab, out=str(out))
t0 = time.perf_counter()
prepared = prepare_corpus(opts, RunFolder(out), Reporter(json_mode=True, quiet=True))
seconds = time.perf_counter() - t0
manifest = prepared.manifest
documents = sum(f["records"] for f in manifest["files"])
tokens = manifest["tokens"]
print(json.dumps({"seconds": seconds, "text_bytes": manifest["total_bytes"], "documents": documents,
                  "train_tokens": tokens["train"]["count"], "val_tokens": tokens["val"]["count"],
                  "streamed": manifest["total_bytes"] > TOKENIZER_SAMPLE_BYTES}))
"""


def _words() -> tuple[list[str], list[float]]:
    import re

    from octlm.data.corpora import read_builtin

    counts: dict[str, int] = {}
    for word in re.findall(r"[A-Za-z']+", read_builtin("tinyshakespeare").decode("utf-8")):
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts, key=lambda w: -counts[w])
    return ranked, [1.0 / (rank + 1) for rank in range(len(ranked))]


def paragraphs(megabytes: float, seed: int = 0):
    """Generated paragraphs (strings) until their UTF-8 bytes reach ``megabytes`` MB."""
    import numpy as np

    words, weights = _words()
    p = np.array(weights) / sum(weights)
    rng = np.random.default_rng(seed)
    target, done = int(megabytes * 1e6), 0
    while done < target:
        picks = rng.choice(len(words), size=4000, p=p)
        lengths = rng.integers(6, 18, size=400)
        sentences, at = [], 0
        for n in lengths:
            chunk = picks[at : at + n]
            at += n
            if not len(chunk):
                break
            sentence = " ".join(words[i] for i in chunk)
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        for start in range(0, len(sentences), 8):
            paragraph = " ".join(sentences[start : start + 8])
            done += len(paragraph) + 1
            yield paragraph
            if done >= target:
                return


def generate(kind: str, megabytes: float, where: Path) -> Path:
    """``corpus.jsonl`` (one record per paragraph) or a folder ``text/`` of ~1 MB plain text files."""
    if kind == "jsonl":
        path = where / "corpus.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for paragraph in paragraphs(megabytes):
                handle.write(json.dumps({"text": paragraph}) + "\n")
        return path
    folder = where / "text"
    folder.mkdir()
    lines, size, index = [], 0, 0
    for paragraph in paragraphs(megabytes):
        lines.append(paragraph)
        size += len(paragraph) + 1
        if size >= 1_000_000:
            (folder / f"part-{index:05d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            lines, size, index = [], 0, index + 1
    if lines:
        (folder / f"part-{index:05d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def measure(corpus: Path, vocab_size: int, scratch: Path) -> dict:
    """Prepare ``corpus`` in a fresh subprocess; its own seconds and the child's peak resident memory."""
    out = scratch / "run"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(corpus), str(out), str(vocab_size)], stdout=subprocess.PIPE, text=True
    )
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        raise SystemExit(f"preparing {corpus} failed with exit status {child.returncode}")
    result = json.loads(output.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)
    return {
        **result,
        "process_seconds": wall,
        "bytes_per_second": result["text_bytes"] / result["seconds"],
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--formats", nargs="+", default=["jsonl", "text"], choices=["jsonl", "text"])
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument(
        "--keep", help="generate the corpora in this folder and keep them (default: a temporary folder)"
    )
    args = parser.parse_args()
    for megabytes in args.megabytes:
        for kind in args.formats:
            scratch = (
                Path(args.keep) / f"{kind}-{megabytes:g}MB"
                if args.keep
                else Path(tempfile.mkdtemp(prefix="octlm-prepare-"))
            )
            scratch.mkdir(parents=True, exist_ok=True)
            try:
                t0 = time.perf_counter()
                corpus = generate(kind, megabytes, scratch)
                generated = time.perf_counter() - t0
                result = measure(corpus, args.vocab_size, scratch)
                print(
                    json.dumps(
                        {"format": kind, "megabytes": megabytes, "generate_seconds": round(generated, 1), **result}
                    ),
                    flush=True,
                )
            finally:
                if not args.keep:
                    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
