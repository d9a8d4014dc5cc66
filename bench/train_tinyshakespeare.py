"""Train the Day-1 model on tinyshakespeare for a fixed wall-clock budget; print JSON.

    .venv/bin/python bench/train_tinyshakespeare.py [--time-budget 300] [extra octlm train flags]

Prints one JSON object: tokens per second, steps and final validation bits per
byte of octlm's default recipe, next to a baseline measured in the same run on
the same split and tokenizer: the unigram model (token frequencies of the
training split), whose bits per byte is what a model that ignores context
gets. ``ratio_vs_unigram`` is the trained model's bits per byte over that.
nanoGPT's documented CPU recipe (character level) reaches 2.72 bits per byte
after 90 s on the same kind of 2-core machine; that figure is quoted, not
measured here.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
from pathlib import Path

from octlm.cli import main as octlm_main
from octlm.train.device import default_threads

#: The corpus built into octlm (octlm.data.corpora), so the benchmark runs on a fresh clone.
CORPUS = "tinyshakespeare"


def _baselines():
    """bench/baselines.py, the one definition of the unigram baseline (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("baselines_bench", Path(__file__).with_name("baselines.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        # the flags it passes on are octlm train's, so --help names them rather than repeating them
        epilog="Every other flag goes to `octlm train` as given (see `octlm train --help`), e.g. --threads 2 --seed "
        "1338 --position rope --canon ABCD --d-model 192.",
    )
    parser.add_argument("--time-budget", type=float, default=300.0, help="seconds of training")
    args, extra = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            code = octlm_main(
                ["train", "--text", CORPUS, "--time-budget", str(args.time_budget), "--out", str(out), "--json", *extra]
            )
        if code:
            sys.exit(code)
        result = json.loads(buffer.getvalue().strip().splitlines()[-1])
        config = json.loads((out / "config.json").read_text())
        baseline = _baselines().baselines(out)["unigram_val_bpb"]
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "benchmark": "train_tinyshakespeare",
        "time_budget_s": args.time_budget,
        "extra_flags": extra,
        # the training's own threads: octlm sets them for the run and restores this process's after it
        "threads": config["train"]["threads"] or default_threads(),
        "steps": result["steps"],
        "tokens_per_second": round(result["tokens_per_second"], 1),
        "val_bpb": round(result["val_bpb"], 4),
        "val_loss": round(result["val_loss"], 4),
        "baseline_unigram_val_bpb": round(baseline, 4),
        "ratio_vs_unigram": round(result["val_bpb"] / baseline, 4),
        # the periodic evaluations (their --eval-blocks), to see whether a long run overfits
        "eval_curve": [[r["step"], round(r["val_bpb"], 4)] for r in records if r["kind"] == "eval"],
        "device": result.get("device"),
        "sample": result.get("sample", ""),
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:]), indent=2))
