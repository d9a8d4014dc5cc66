"""The explainer page in a real browser, and the committed build against its sources.

scripts/test.sh installs what these need before pytest runs: Debian's
Chromium (/usr/bin/chromium), the page's npm packages (npm ci in web/) and a
fresh build of the page into build/web-check/. The browser is driven by
web/e2e/browser.mjs through playwright-core.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

WEB = REPO / "web"
CHECK_BUILD = REPO / "build" / "web-check"
COMMITTED = REPO / "src" / "octlm" / "web_dist"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SETUP_HINT = "run `bash scripts/test.sh`, which installs Chromium and the npm packages and builds the page"


def test_committed_page_is_what_the_sources_build():
    if not CHECK_BUILD.is_dir():
        pytest.fail(f"{CHECK_BUILD} is missing; {SETUP_HINT}")
    comparison = filecmp.dircmp(CHECK_BUILD, COMMITTED)
    stale = comparison.diff_files + comparison.left_only + comparison.right_only
    assert not stale, (
        f"src/octlm/web_dist is stale ({', '.join(stale)} differ from a fresh build of web/); "
        "run `npm run build` in web/ and commit src/octlm/web_dist"
    )


def browser_check(url: str, out: Path, token: str) -> dict:
    """Run web/e2e/browser.mjs on ``url``; returns what it saw (fails the test on a failed check)."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} is missing; {SETUP_HINT}")
    if not (WEB / "node_modules" / "playwright-core").is_dir() or shutil.which("node") is None:
        pytest.fail(f"node or web/node_modules/playwright-core is missing; {SETUP_HINT}")
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["node", "e2e/browser.mjs", url, str(out)], check=False, cwd=WEB, capture_output=True, text=True, timeout=180,
        env={**os.environ, "CHROMIUM": CHROMIUM, "OCTLM_E2E_TOKEN": token},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"browser script printed no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(lines[-1])
    assert proc.returncode == 0 and report["ok"], report["checks"].get("error", proc.stderr[-2000:])
    return report["checks"]


def expected_neighbours(run_dir: Path, token_id: int, k: int = 10) -> list[tuple[int, float]]:
    from octlm.inspect.diagnostics import cosine_neighbours
    from octlm.run.load import load_run

    model, _ = load_run(run_dir)
    return cosine_neighbours(model.token_embedding.weight.detach(), token_id, k)


def pick_token(run_dir: Path) -> tuple[int, str]:
    """A word-like token of the run (a leading space and letters), as the page shows it."""
    from octlm.run.load import load_run

    _, tokenizer = load_run(run_dir)
    for i in range(tokenizer.vocab_size - 1, 256, -1):
        text = tokenizer.token_str(i)
        if text.startswith(" ") and text[1:].isalpha() and len(text) > 2:
            return i, "␣" + text[1:]
    pytest.fail("no word-like token in the test run's vocabulary")


def check_neighbours(checks: dict, run_dir: Path, token_id: int) -> None:
    rows = checks["typed token shows neighbours with cosine scores"]
    expected = expected_neighbours(run_dir, token_id, len(rows))
    assert [int(r[2]) for r in rows] == [i for i, _ in expected]
    assert [float(r[3]) for r in rows] == pytest.approx([s for _, s in expected], abs=5e-4)  # the page shows 3 decimals


def test_page_in_chromium_through_octlm_serve(trained_run, tmp_path):
    token_id, typed = pick_token(trained_run)
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "serve", "--run", str(trained_run), "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        started = json.loads(proc.stdout.readline() or "{}")
        assert started.get("event") == "serving", proc.stderr.read() if proc.poll() is not None else started
        assert started["host"] == "127.0.0.1"
        checks = browser_check(started["url"], tmp_path / "shots", typed)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    check_neighbours(checks, trained_run, token_id)
    assert checks["similarity map re-rendered"]["pixelsChanged"]
    for name in checks["screenshots"]:
        assert (tmp_path / "shots" / name).stat().st_size > 10_000, name


def test_exported_page_works_from_disk(trained_run, tmp_path):
    from octlm.cli import main

    token_id, typed = pick_token(trained_run)
    out = tmp_path / "exported"
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--quiet"]) == 0
    checks = browser_check((out / "index.html").as_uri(), tmp_path / "shots", typed)
    check_neighbours(checks, trained_run, token_id)
