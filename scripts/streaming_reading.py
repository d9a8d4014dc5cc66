"""The numbers of docs/streaming.md: each run's validation stream read with sinks and a window, and the other readings.

    .venv/bin/python scripts/streaming_reading.py RUN_DIR [RUN_DIR ...] [--multiples 16 32] [--sinks 0 4]

For every run and multiple ``m`` of its ``context_length`` ``T``: bits per byte of the first ``m T`` validation
targets streamed with ``S`` sinks and a window of ``T - S``, so the cache holds ``T`` tokens
(:func:`octlm.studies.length.readings.streams.streaming_bpb`), non-overlapping
windows of ``T``, sliding windows of ``T`` at stride ``T / 8``, and one pass over the whole stream; and the attention
the run's heads give the first token of a window (at queries ``T/2 .. T-1``, 32 windows), beside uniform attention's.
One JSON line per run and multiple on stdout.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch


def sink_mass(model, val: np.ndarray) -> list[float]:
    """Per layer, the mean attention probability on key 0 at queries ``T/2 .. T-1`` over 32 windows of ``T``."""
    from octlm.model.attention_maps import record_attention

    T = model.config.context_length
    with torch.no_grad(), record_attention(model) as maps:
        model(torch.from_numpy(val[: 32 * T].reshape(32, T)))
    return [round(float(p[:, :, T // 2 :, 0].mean()), 4) for p in maps.probabilities]


def main() -> None:
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run
    from octlm.studies.length.readings.streams import streaming_bpb
    from octlm.train.evaluate import evaluate, evaluate_sliding

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--multiples", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--sinks", type=int, nargs="+", default=[0, 4])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for run in args.runs:
        model, tokenizer = load_run(run, "cpu")
        T, per_token = model.config.context_length, tokenizer.bytes_per_token
        val = np.asarray(RunFolder(run).tokens("val"), dtype=np.int64)
        uniform = float((1.0 / torch.arange(T // 2 + 1, T + 1)).mean())
        row = {"run": run, "position": model.config.position, "T": T}
        row.update(first_token_attention=sink_mass(model, val), uniform_attention=round(uniform, 4))
        for m in args.multiples:
            stream = val[: m * T + 1]
            row["targets"] = m * T
            for s in args.sinks:
                row[f"streaming_S{s}_W{T - s}"] = round(streaming_bpb(model, stream, per_token, s, T - s).bpb, 4)
            row["windows"] = round(evaluate(model, stream, per_token, T, 32, None, "cpu").bpb, 4)
            row["sliding"] = round(evaluate_sliding(model, stream, per_token, T, max(1, T // 8), 32, "cpu").bpb, 4)
            row["one_pass"] = round(evaluate(model, stream, per_token, m * T, 1, None, "cpu").bpb, 4)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
