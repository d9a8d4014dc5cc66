"""Context-free baselines for a run's validation bits per byte; print JSON.

    .venv/bin/python bench/baselines.py RUN_DIR

A decoder's bits per byte means little alone. This scores the run's own
validation targets (the ones the final evaluation scores: every token of each
whole block of ``context_length``) with two models fitted on the run's
training split, with the run's tokenizer:

* unigram: add-one-smoothed token frequencies, what a model that ignores
  context gets;
* bigram: the previous token only, interpolated absolute discounting
  (Ney, Essen and Kneser 1994, D = 0.75), backing off to the unigram.

Bits per byte counts the text's bytes only (the end-of-text marker stands for
none), as octlm's evaluation does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from octlm.data.tokenizer import Tokenizer
from octlm.data.tokens import block_starts, open_tokens

#: Absolute discount of the bigram model; 0.75 is the usual choice for it.
DISCOUNT = 0.75


def _split(run_dir: Path, name: str) -> np.ndarray:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return np.asarray(open_tokens(run_dir / f"{name}.bin", manifest["tokens"][name]["dtype"]), dtype=np.int64)


def scored_pairs(val: np.ndarray, context_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(previous token, target) of every target the final evaluation scores, two arrays [N]."""
    n_targets = len(block_starts(len(val), context_length)) * context_length
    return val[:n_targets], val[1 : n_targets + 1]


def unigram_log2p(train: np.ndarray, vocab_size: int) -> np.ndarray:
    """log2 p(token), [vocab_size], add-one smoothed over the training split."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    return np.log2(counts / counts.sum())


def bigram_log2p(train: np.ndarray, vocab_size: int, prev: np.ndarray, target: np.ndarray) -> np.ndarray:
    """log2 p(target | prev), [N], interpolated absolute discounting backing off to :func:`unigram_log2p`."""
    pair_ids = train[:-1] * vocab_size + train[1:]
    pairs = np.bincount(pair_ids, minlength=vocab_size * vocab_size).reshape(vocab_size, vocab_size)
    context_counts = pairs.sum(axis=1).astype(np.float64)
    distinct_followers = (pairs > 0).sum(axis=1).astype(np.float64)
    unigram = np.exp2(unigram_log2p(train, vocab_size))
    seen = context_counts[prev] > 0
    safe = np.where(seen, context_counts[prev], 1.0)
    discounted = np.maximum(pairs[prev, target] - DISCOUNT, 0.0) / safe
    backoff = DISCOUNT * distinct_followers[prev] / safe
    p = np.where(seen, discounted + backoff * unigram[target], unigram[target])
    return np.log2(p)


def baselines(run_dir: Path) -> dict:
    """Bits per byte of the unigram and bigram baselines on ``run_dir``'s scored validation targets."""
    config = json.loads((run_dir / "config.json").read_text())
    tokenizer = Tokenizer.load(run_dir / "tokenizer.json")
    train, val = _split(run_dir, "train"), _split(run_dir, "val")
    prev, target = scored_pairs(val, config["model"]["context_length"])
    n_bytes = float(tokenizer.bytes_per_token[target].sum())
    unigram = -unigram_log2p(train, tokenizer.vocab_size)[target].sum() / n_bytes
    bigram = -bigram_log2p(train, tokenizer.vocab_size, prev, target).sum() / n_bytes
    return {
        "benchmark": "baselines",
        "run": str(run_dir),
        "vocab_size": tokenizer.vocab_size,
        "scored_targets": int(len(target)),
        "scored_bytes": int(n_bytes),
        "unigram_val_bpb": round(float(unigram), 4),
        "bigram_val_bpb": round(float(bigram), 4),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder made by octlm train")
    args = parser.parse_args(argv)
    missing = [name for name in ("config.json", "tokenizer.json") if not (args.run / name).is_file()]
    if missing:
        parser.error(f"{args.run} holds no {missing[0]}: give a run folder made by octlm train (--out)")
    print(json.dumps(baselines(args.run)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
