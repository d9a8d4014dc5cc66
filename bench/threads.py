"""torch CPU threads against other work on the machine: seconds per job, quiet and beside busy processes; prints JSON.

    .venv/bin/python bench/threads.py [--threads 1 2] [--busy 0 1] [--repeats 3] [--tokens 500] [--steps 20]

Two jobs, each in a fresh process with ``torch.set_num_threads(T)``, on an
untrained Day-1 decoder (vocab_size 1024, context_length 128, d_model 128, 4
heads, 2 layers; speed does not depend on the weights):

* ``sample``: ``--tokens`` tokens generated after a one-token prompt with the
  key/value cache, temperature 0.8, top-k 40 (what ``octlm sample`` does);
* ``train``: ``--steps`` training steps (forward, backward, AdamW) on batches of
  32 x 128 random ids (the main job's step).

Each runs beside ``B`` busy processes (a Python loop each, one core's worth of
other work) for every ``B`` in ``--busy``, ``--repeats`` times; the median
wall time counts. ``default_threads`` is what octlm uses without ``--threads``
(:func:`octlm.train.device.default_threads`). Other programs on a shared machine
disturb every figure: ``load_average`` says how busy it was before each job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BUSY_LOOP = "while True: pass"


def job(kind: str, threads: int, tokens: int, steps: int) -> float:
    """Run one job in this process and return its wall seconds."""
    import torch

    from octlm import Decoder, DecoderConfig

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=1024, context_length=128, d_model=128, n_heads=4, n_layers=2))
    if kind == "sample":
        model.eval()
        prompt, generator = torch.zeros(1, 1, dtype=torch.long), torch.Generator().manual_seed(0)
        start = time.perf_counter()
        model.generate(prompt, tokens, 0.8, 40, generator=generator)
        return time.perf_counter() - start
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = torch.randint(0, 1024, (steps, 32, 129))
    start = time.perf_counter()
    for batch in batches:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1024), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def measure(kind: str, threads: int, busy: int, args: argparse.Namespace) -> float:
    """Wall seconds of one job in a fresh process beside ``busy`` busy processes."""
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--job",
                kind,
                "--threads",
                str(threads),
                "--tokens",
                str(args.tokens),
                "--steps",
                str(args.steps),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", nargs="+", type=int, default=None, help="thread counts to time (default: 1 .. CPUs)"
    )
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 1], help="busy processes beside each job")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each job; the median counts")
    parser.add_argument("--tokens", type=int, default=500, help="tokens the sample job generates")
    parser.add_argument("--steps", type=int, default=20, help="steps the train job takes")
    parser.add_argument("--job", choices=["sample", "train"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(job(args.job, args.threads[0], args.tokens, args.steps))
        return
    from octlm.train.device import default_threads

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results = []
    for kind in ("sample", "train"):
        for busy in args.busy:
            for threads in args.threads or range(1, cpus + 1):
                load, seconds = os.getloadavg()[0], [measure(kind, threads, busy, args) for _ in range(args.repeats)]
                results.append(
                    {
                        "job": kind,
                        "threads": threads,
                        "busy": busy,
                        "median_s": statistics.median(seconds),
                        "seconds": seconds,
                        "load_average": load,
                    }
                )
                print(json.dumps(results[-1]), file=sys.stderr)
    print(
        json.dumps(
            {
                "cpus": cpus,
                "default_threads": default_threads(),
                "tokens": args.tokens,
                "steps": args.steps,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
