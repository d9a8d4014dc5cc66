"""Bits per byte against the vocabulary size at equal training compute; prints JSON.

    .venv/bin/python bench/vocab_sizes.py [--vocab-sizes 257 512 1024 2048 4096 8192] [--seeds 3]
        [--base-steps 1200] [--base-vocab 1024] [--out runs/vocab] [-- extra octlm train flags]

Trains the main job (``octlm train``: the Day-1 model on its default corpus, a BPE of each ``--vocab-sizes`` trained
on the training split) once per vocabulary size and seed. Each gets the training compute of ``--base-steps`` steps
at ``--base-vocab``: compute per token counted as Kaplan et al. 2020 count it (§2.1, Table 1), 6 N + 6 n_layers T
d_model, with N the parameters outside the token table plus the head's V x d_model (the tied head is a matrix
product every token pays for; the table lookup is not), so a larger vocabulary trains fewer steps of the same tokens
per step, each token covering more bytes. Bits per byte, not loss per token, is what compares across vocabularies.

Each run records its steps, parameters, compute (FLOPs), final validation bits per byte over every validation block,
bytes per token of the validation split, the table rows the training split uses, and wall seconds; the summary gives
per vocabulary size the mean and sd over seeds and each seed's difference from ``--base-vocab`` (same seed), with how
many seeds agree in sign. Runs one after another in this process (``--threads`` among the extra flags to pin it);
other work on the machine slows the timings, not the bits per byte. With ``--out``, each run folder is kept there
(``v<V>-seed<S>``) and a finished one is read back instead of trained again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared argument types
from bench_args import at_least  # noqa: E402

from octlm.cli import main as octlm_main
from octlm.cli.program import build_parser, options_from
from octlm.model import Decoder, DecoderConfig
from octlm.train.options import TrainOptions

#: 257 is the byte-level floor: the 256 byte values and <|endoftext|>, no merge.
SIZES = (257, 512, 1024, 2048, 4096, 8192)


def flops_per_token(vocab_size: int, opts: TrainOptions) -> int:
    """Training FLOPs per token of the Day-1 model at ``vocab_size`` (Kaplan et al. 2020, §2.1): 6 x (parameters
    outside its lookup tables, the token and position tables, + the tied head's vocab_size x d_model) + 6 x n_layers
    x context_length x d_model."""
    config = opts.model_config(vocab_size)
    model = Decoder(config)
    lookups = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    outside = sum(p.numel() for p in model.parameters()) - lookups
    return 6 * (outside + vocab_size * config.d_model) + 6 * config.n_layers * config.context_length * config.d_model


def equal_compute_steps(vocab_size: int, base_vocab: int, base_steps: int, opts: TrainOptions) -> int:
    """Steps at ``vocab_size`` with the compute of ``base_steps`` at ``base_vocab`` (tokens per step are equal)."""
    return max(1, round(base_steps * flops_per_token(base_vocab, opts) / flops_per_token(vocab_size, opts)))


def _run(folder: Path, vocab_size: int, seed: int, steps: int, extra: list[str]) -> dict:
    """Train one model into ``folder`` (or read it back when it finished before): its record."""
    result_file = folder / "bench-result.json"
    if result_file.is_file():
        return json.loads(result_file.read_text())
    argv = ["train", "--out", str(folder), "--vocab-size", str(vocab_size), "--seed", str(seed)]
    argv += ["--max-steps", str(steps), "--eval-interval", str(steps), "--sample-tokens", "0", "--quiet"]
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # stdout is this benchmark's JSON
        code = octlm_main([*argv, "--overwrite", *extra])
    wall = time.perf_counter() - start
    if code:
        raise SystemExit(f"octlm train --vocab-size {vocab_size} --seed {seed} failed with exit status {code}")
    evals = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in evals if r["kind"] == "eval"][-1]
    manifest = json.loads((folder / "manifest.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    train_tokens = np.fromfile(folder / "train.bin", dtype=manifest["tokens"]["train"]["dtype"])
    record = {
        "vocab_size": vocab_size,
        "seed": seed,
        "steps": steps,
        "tokens": steps * config["train"]["batch_size"] * config["model"]["context_length"],
        "parameters": sum(p.numel() for p in Decoder(DecoderConfig.from_dict(config["model"])).parameters()),
        "val_bpb": round(final["val_bpb"], 4),
        "bytes_per_token": round(final["val_bytes"] / final["val_tokens"], 3),
        "rows_used": int(np.unique(train_tokens).size),
        "wall_s": round(wall, 1),
    }
    result_file.write_text(json.dumps(record))
    return record


def summary(runs: list[dict], base_vocab: int) -> dict:
    """Per vocabulary size: mean and sd of bits per byte over seeds, and each seed's difference from ``base_vocab``'s
    run of the same seed with the count of seeds whose difference has the mean's sign."""
    by = {(r["vocab_size"], r["seed"]): r["val_bpb"] for r in runs}
    out = {}
    for v in sorted({r["vocab_size"] for r in runs}):
        seeds = sorted(s for (size, s) in by if size == v)
        bpb = [by[v, s] for s in seeds]
        diffs = [round(by[v, s] - by[base_vocab, s], 4) for s in seeds if (base_vocab, s) in by]
        mean = statistics.fmean(diffs) if diffs else 0.0
        out[str(v)] = {
            "val_bpb_mean": round(statistics.fmean(bpb), 4),
            "val_bpb_sd": round(statistics.stdev(bpb), 4) if len(bpb) > 1 else None,
            "minus_base": diffs,
            "seeds_agreeing": sum((d > 0) == (mean > 0) and d != 0 for d in diffs),
        }
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab-sizes", type=at_least(257), nargs="+", default=list(SIZES), help="BPE vocabularies")
    parser.add_argument("--seeds", type=at_least(1), default=3, help="seeds 1337, 1338, ... per size")
    parser.add_argument("--base-steps", type=at_least(1), default=1200, help="steps at --base-vocab (the main job's)")
    parser.add_argument("--base-vocab", type=at_least(257), default=1024, help="the compute reference (the default)")
    parser.add_argument("--out", type=Path, default=None, help="keep each run folder here (read back when finished)")
    return parser


def run(argv: list[str]) -> dict:
    argv, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = _parser()
    args = parser.parse_args(argv)
    sizes = sorted(set(args.vocab_sizes) | {args.base_vocab})
    opts = options_from(build_parser().parse_args(["train", *extra]), TrainOptions)  # the model the flags make
    steps = {v: equal_compute_steps(v, args.base_vocab, args.base_steps, opts) for v in sizes}
    plan = [(v, seed, steps[v]) for v in sizes for seed in range(1337, 1337 + args.seeds)]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        runs = [_run(root / f"v{v}-seed{seed}", v, seed, steps, extra) for v, seed, steps in plan]
    flops = {str(v): flops_per_token(v, opts) for v in sizes}
    for record in runs:
        record["flops"] = flops[str(record["vocab_size"])] * record["tokens"]
    return {
        "benchmark": "vocab_sizes",
        "base": {"vocab_size": args.base_vocab, "steps": args.base_steps},
        "flops_per_token": flops,
        "extra_flags": extra,
        "runs": runs,
        "summary": summary(runs, args.base_vocab),
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:]), indent=2))
