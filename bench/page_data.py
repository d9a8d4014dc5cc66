"""How large the page's data is and how long it takes to make, for a run or a length study; print JSON.

    .venv/bin/python bench/page_data.py --study runs/length [--threads 1]
    .venv/bin/python bench/page_data.py --run runs/shakespeare

Makes the page's data as ``octlm serve`` and ``octlm export-web`` do
(:func:`octlm.export.web.page_view`) and prints the size of ``run-data.js``,
the part of it the attention maps take, the wall and CPU seconds, and the
load average while it ran (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def attention_bytes(view: dict) -> int:
    """Characters of base64 map data in a view (a run's or a study's)."""
    if view.get("kind") == "study":
        sets = [x for model in view["attention"]["models"] for x in model["lengths"]]
    else:
        sets = (view.get("attention") or {}).get("lengths", [])
    return sum(len(x.get("maps", "")) for x in sets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--run")
    group.add_argument("--study")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from octlm.export.web import RUN_DATA, page_view, run_data_script

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    view = page_view(args.run, args.study)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    script = run_data_script(view)
    maps = [x for m in view["attention"]["models"] for x in m["lengths"] if "maps" in x] if args.study else []
    print(
        json.dumps(
            {
                "folder": args.run or args.study,
                "file": RUN_DATA,
                "bytes": len(script),
                "attention_map_bytes": attention_bytes(view),
                "map_sets": len(maps),
                "largest_side": max((x["side"] for x in maps), default=None),
                "seconds": round(wall, 2),
                "cpu_seconds": round(cpu, 2),
                "threads": torch.get_num_threads(),
                "load_average_before": round(load_before, 2),
                "load_average_after": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
