"""Tokenize one huge line (no newline) the way octlm does and the naive way; print JSON.

    .venv/bin/python bench/huge_line.py [--megabytes 20] [--vocab-size 1024]

The line is tinyshakespeare with its newlines turned into spaces, repeated to
the requested size. Each measurement runs in a fresh subprocess so its peak
resident memory (ru_maxrss) is its own:

* ``pieces``: octlm's path -- Tokenizer.train and tokens.encode_stream, which cut
  the text at pre-token boundaries (tokenizer.pretoken_chunks);
* ``whole``: the baseline -- tokenizers trained on and encoding the uncut line.

Both produce the same ids (checked here by comparing a digest of the streams).
Ratios are whole / pieces.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import hashlib, json, resource, sys, time
import numpy as np
from tokenizers import Tokenizer as HF, decoders, models, pre_tokenizers, trainers
from octlm.data.reading import read_documents
from octlm.data import tokens
from octlm.data.tokenizer import END_OF_TEXT, Tokenizer

mode, corpus, megabytes, vocab = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
base = read_documents([corpus])[0][0].text.replace("\n", " ")
size = int(megabytes * 1e6)
text = (base * (size // len(base) + 1))[:size]
t0 = time.perf_counter()
if mode == "pieces":
    tokenizer = Tokenizer.train([text], vocab)
    t1 = time.perf_counter()
    ids = tokens.encode_stream(tokenizer, [text])[:-1]
else:
    hf = HF(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator([text], trainer=trainer)
    t1 = time.perf_counter()
    ids = np.asarray(hf.encode(text, add_special_tokens=False).ids, dtype=np.uint16)
t2 = time.perf_counter()
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"train_s": t1 - t0, "encode_s": t2 - t1, "peak_rss_mb": peak_mb,
                  "tokens": int(ids.size), "ids_sha256": hashlib.sha256(ids.astype(np.uint16).tobytes()).hexdigest()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=20.0)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--corpus", default="tinyshakespeare", help="a text file, or the built-in tinyshakespeare")
    args = parser.parse_args()
    out = {"megabytes": args.megabytes, "vocab_size": args.vocab_size}
    for mode in ("pieces", "whole"):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, mode, args.corpus, str(args.megabytes), str(args.vocab_size)],
            capture_output=True,
            text=True,
            check=True,
        )
        out[mode] = json.loads(done.stdout)
    out["same_ids"] = out["pieces"]["ids_sha256"] == out["whole"]["ids_sha256"]
    for key in ("train_s", "encode_s", "peak_rss_mb"):
        out[f"ratio_{key}_whole_over_pieces"] = out["whole"][key] / out["pieces"][key]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
