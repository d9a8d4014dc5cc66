"""torch CPU threads against other work on the machine: seconds per job, quiet and beside busy processes; prints JSON.

    .venv/bin/python bench/threads.py [--threads 1 2 | --policies auto half all] [--busy 0 1 2] [--repeats 3]
        [--tokens 500] [--steps 20]

Two jobs, each in a fresh process with ``torch.set_num_threads(T)``, on an
untrained Day-1 decoder (vocab_size 1024, context_length 128, d_model 128, 4
heads, 2 layers; speed does not depend on the weights):

* ``sample``: ``--tokens`` tokens generated after a one-token prompt with the
  key/value cache, temperature 0.8, top-k 40 (what ``octlm sample`` does);
* ``train``: ``--steps`` training steps (forward, backward, AdamW) on batches of
  32 x 128 random ids (the main job's step).

Each runs beside ``B`` busy processes (a Python loop each, one core's worth of
other work) for every ``B`` in ``--busy``, ``--repeats`` times; the median
wall time counts. With ``--policies`` the thread count is not given but chosen
in the job's own process, beside the busy ones, as a command would choose it:
``auto`` is octlm's default (:func:`octlm.train.device.choose_threads`: the CPUs
idle now), ``half`` the default before it (half the CPUs, issue 21) and ``all``
the one before that (torch's own, every CPU); each row records the threads chosen. Other programs on a shared machine
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


def threads_for(policy: str) -> int:
    """The threads a policy picks in this process now (a number is itself)."""
    from octlm.train.device import available_cpus, choose_threads

    if policy == "auto":
        return choose_threads().threads
    if policy == "half":
        return max(1, available_cpus() // 2)
    if policy == "all":
        return available_cpus()
    return int(policy)


def job(kind: str, policy: str, tokens: int, steps: int) -> tuple[float, int]:
    """Run one job in this process: its wall seconds and the threads it ran on."""
    import torch

    from octlm import Decoder, DecoderConfig

    threads = threads_for(policy)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=1024, context_length=128, d_model=128, n_heads=4, n_layers=2))
    if kind == "sample":
        model.eval()
        prompt, generator = torch.zeros(1, 1, dtype=torch.long), torch.Generator().manual_seed(0)
        start = time.perf_counter()
        model.generate(prompt, tokens, 0.8, 40, generator=generator)
        return time.perf_counter() - start, threads
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = torch.randint(0, 1024, (steps, 32, 129))
    start = time.perf_counter()
    for batch in batches:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1024), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, threads


def measure(kind: str, policy: str, busy: int, args: argparse.Namespace) -> tuple[float, int]:
    """Wall seconds of one job in a fresh process beside ``busy`` busy processes, and the threads it used."""
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        time.sleep(0.5)  # the busy processes are spinning before the job starts (and before auto looks)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--job",
                kind,
                "--policy",
                policy,
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
    seconds, threads = out.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", nargs="+", type=int, default=None, help="thread counts to time (default: 1 .. CPUs)"
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=["auto", "half", "all"],
        help="time thread policies instead of counts: auto (octlm's default), half (before), all (torch's own)",
    )
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 1], help="busy processes beside each job")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each job; the median counts")
    parser.add_argument("--tokens", type=int, default=500, help="tokens the sample job generates")
    parser.add_argument("--steps", type=int, default=20, help="steps the train job takes")
    parser.add_argument("--job", choices=["sample", "train"], help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        seconds, threads = job(args.job, args.policy, args.tokens, args.steps)
        print(seconds, threads)
        return
    from octlm.train.device import default_threads

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results = []
    for kind in ("sample", "train"):
        for busy in args.busy:
            for policy in args.policies or [str(t) for t in args.threads or range(1, cpus + 1)]:
                load = os.getloadavg()[0]
                runs = [measure(kind, policy, busy, args) for _ in range(args.repeats)]
                seconds = [s for s, _ in runs]
                results.append(
                    {
                        "job": kind,
                        "policy": policy if args.policies else "given",
                        "threads": sorted({t for _, t in runs}),
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
