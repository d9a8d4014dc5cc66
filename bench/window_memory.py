"""Peak memory of one forward pass through window layers against global layers, by length; print JSON.

    .venv/bin/python bench/window_memory.py [--lengths 2048 4096 8192] [--layouts "rope*2" "rope/w4*2"]

Each (layout, length) runs in a fresh process: an untrained decoder (vocab_size 1024, d_model 128, 4 heads, two
layers; memory does not depend on the weights) takes one forward pass of a [1, T] batch under ``torch.no_grad()``,
and the process reports the growth of its peak resident memory (``ru_maxrss``) over the pass, in MB. The first
layout is the baseline: every row carries ``mb_ratio`` to the baseline's row at the same length, measured in the
same run. ``--whole`` also runs each window layout with blocked attention turned off in that process (the whole
score matrix, as before issue 52), labelled ``LAYOUT (whole matrix)``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys


def one(layout: str, length: int, whole: bool) -> float:
    """MB the peak resident memory grew by during one forward pass of ``length`` tokens (this process)."""
    import torch

    from octlm import Decoder, DecoderConfig
    from octlm.model import band

    if whole:
        band.BAND_CELLS = 10**15
    torch.set_num_threads(1)
    config = DecoderConfig(
        position="rope", vocab_size=1024, context_length=length, d_model=128, n_heads=4, n_layers=2, layers=layout
    )
    model = Decoder(config).eval()
    ids = torch.zeros(1, length, dtype=torch.long)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad():
        model(ids)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--layouts", nargs="+", default=["rope*2", "rope/w4*2"])
    parser.add_argument("--whole", action="store_true", help="also each window layout without blocked attention")
    parser.add_argument("--child", nargs=3, metavar=("LAYOUT", "LENGTH", "WHOLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"mb": one(args.child[0], int(args.child[1]), args.child[2] == "1")}))
        return
    cases = [(layout, False) for layout in args.layouts]
    if args.whole:
        cases += [(layout, True) for layout in args.layouts if "/w" in layout]
    rows = []
    for length in args.lengths:
        base = None
        for layout, whole in cases:
            child = [sys.executable, __file__, "--child", layout, str(length), "1" if whole else "0"]
            done = subprocess.run(child, capture_output=True, text=True, check=True, env={**os.environ})
            mb = json.loads(done.stdout.splitlines()[-1])["mb"]
            base = mb if base is None else base
            label = f"{layout} (whole matrix)" if whole else layout
            rows.append({"layout": label, "length": length, "mb": round(mb, 1), "mb_ratio": round(mb / base, 2)})
    print(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=1))


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, or the machine type where there is none."""
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


if __name__ == "__main__":
    main()
