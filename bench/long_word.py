"""Corpus preparation time for text without spaces against ordinary text; prints JSON.

    .venv/bin/python bench/long_word.py [--megabytes 1 2 4] [--vocab-size 1024]

For each size, two texts of the same length and alphabet (base64's 64
characters): ``no_space`` is one word (a base64 blob, a DNA-like sequence),
``spaced`` has a space after every 1 to 10 characters (the baseline, measured
in the same run). Preparation is what ``octlm train`` does with the text before
training: BPE training on it (octlm.data.tokenizer.Tokenizer.train) and encoding it
(octlm.data.text.encode_stream). ``ratio`` is no_space / spaced; ``growth`` is each
size's no_space seconds over the smallest size's, which stays near the size
ratio when the work is linear.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from octlm.data import tokens
from octlm.data.tokenizer import Tokenizer

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def texts(n_chars: int, seed: int = 0) -> dict[str, str]:
    rng = random.Random(seed)
    blob = "".join(rng.choices(ALPHABET, k=n_chars))
    spaced, i = [], 0
    while i < n_chars:
        step = rng.randint(1, 10)
        spaced.append(blob[i : i + step])
        i += step + 1
    return {"no_space": blob, "spaced": " ".join(spaced)[:n_chars]}


def prepare_seconds(text: str, vocab_size: int) -> dict[str, float]:
    t0 = time.perf_counter()
    tokenizer = Tokenizer.train([text], vocab_size)
    t1 = time.perf_counter()
    tokens.encode_stream(tokenizer, [text])
    t2 = time.perf_counter()
    return {"train_s": round(t1 - t0, 3), "encode_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--vocab-size", type=int, default=1024)
    args = parser.parse_args()
    rows = []
    for megabytes in args.megabytes:
        row: dict = {"megabytes": megabytes}
        for kind, text in texts(int(megabytes * 1e6)).items():
            row[kind] = prepare_seconds(text, args.vocab_size)
        row["ratio_no_space_over_spaced"] = round(row["no_space"]["total_s"] / row["spaced"]["total_s"], 2)
        rows.append(row)
    for row in rows:
        row["growth_no_space"] = round(row["no_space"]["total_s"] / rows[0]["no_space"]["total_s"], 2)
    print(json.dumps({"vocab_size": args.vocab_size, "sizes": rows}, indent=2))


if __name__ == "__main__":
    main()
