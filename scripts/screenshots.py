"""The page's screenshots in docs/, made from the committed build by the browser test's own script.

    .venv/bin/python scripts/screenshots.py

Opens src/octlm/web_dist/index.html as a file in Chromium through web/e2e/browser.mjs (the script the browser
test drives; it needs `npm ci` in web/ and /usr/bin/chromium, or CHROMIUM=PATH), which checks the page as it goes,
and copies its laptop-width and phone-width screenshots of the playgrounds to docs/. Beside them it writes
docs/page-screenshots.json: the playgrounds the browser counted and the sha256 of the built page's files, so
tests/test_docs.py fails when the page gains or loses a playground, or is rebuilt, after the pictures were made.
Run it after `npm run build` in web/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILT = REPO / "src" / "octlm" / "web_dist"
DOCS = REPO / "docs"
RECORD = DOCS / "page-screenshots.json"
#: The browser script's screenshots of the playgrounds alone that docs/ shows.
SHOTS = ("page-laptop.png", "page-phone.png")
#: The built page's own files (octlm.export.web.PAGE_FILES): the pictures show what they draw.
PAGE_FILES = ("index.html", "app.js", "app.css")


def page_sha256(built: Path = BUILT) -> str:
    """sha256 over the built page's files, name and bytes each, in a fixed order."""
    digest = hashlib.sha256()
    for name in PAGE_FILES:
        digest.update(name.encode() + b"\0" + (built / name).read_bytes())
    return digest.hexdigest()


def take(out: Path) -> dict:
    """Run web/e2e/browser.mjs on the built page opened as a file; returns its report's checks.

    Raises:
        RuntimeError: when the browser script fails a check or prints no report (its message says which).
    """
    proc = subprocess.run(
        ["node", "e2e/browser.mjs", (BUILT / "index.html").as_uri(), str(out)],
        cwd=REPO / "web",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CHROMIUM": os.environ.get("CHROMIUM", "/usr/bin/chromium")},
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines or not json.loads(lines[-1])["ok"]:
        raise RuntimeError(
            f"web/e2e/browser.mjs failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}"
        )
    return json.loads(lines[-1])["checks"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="octlm-shots-") as tmp:
        checks = take(Path(tmp))
        sections = next(v for k, v in checks.items() if k.startswith("page has") and "playgrounds" in k)
        for name in SHOTS:
            shutil.copyfile(Path(tmp) / name, DOCS / name)
    record = {
        "screenshots": list(SHOTS),
        # the browser counts every section.playground; the last is the run's (or the study's), not a playground
        "playgrounds": len(sections) - 1,
        "sections": sections,
        "page_sha256": page_sha256(),
    }
    RECORD.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    written = ", ".join(f"docs/{name}" for name in (*SHOTS, RECORD.name))
    print(f"wrote {written}: {record['playgrounds']} playgrounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
