"""Read a --text folder that holds a huge binary file beside the text; print JSON.

    .venv/bin/python bench/binary_beside_text.py [--gigabytes 4]

The folder holds one small text file and a sparse file of zeros (a disk image
as ``truncate -s 4G`` makes it: no disk space). ``read_documents`` runs in a
fresh subprocess, so its peak resident memory (ru_maxrss) is its own; the
file is skipped as binary either way, the question is what that costs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from octlm.data.reading import read_documents
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
docs, info = read_documents([sys.argv[1]])
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
growth = round((peak - before) / 1024)
print(json.dumps({"seconds": round(seconds, 3), "peak_rss_mb": round(peak / 1024), "rss_growth_mb": growth,
                  "documents": len(docs), "skipped": info["skipped"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=4.0, help="size of the sparse binary file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "notes.txt").write_text("a few words of text\n", encoding="utf-8")
        with open(Path(folder) / "disk.img", "wb") as handle:
            handle.truncate(int(args.gigabytes * 2**30))
        done = subprocess.run([sys.executable, "-c", CHILD, folder], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    result["skipped"] = [{**entry, "path": Path(entry["path"]).name} for entry in result["skipped"]]
    print(json.dumps({"binary_gigabytes": args.gigabytes, **result}))


if __name__ == "__main__":
    main()
