"""The explainer page in a real browser, on a run and on a length study, and the committed build against its sources.

scripts/test.sh installs what these need before pytest runs: Debian's
Chromium (/usr/bin/chromium), the page's npm packages (npm ci in web/) and a
fresh build of the page into build/web-check/. The browser is driven by
web/e2e/browser.mjs through playwright-core.
"""

from __future__ import annotations

import filecmp
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY_MODEL

WEB = REPO / "web"
CHECK_BUILD = REPO / "build" / "web-check"
COMMITTED = REPO / "src" / "octlm" / "web_dist"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SETUP_HINT = "run `bash scripts/test.sh`, which installs Chromium and the npm packages and builds the page"


@pytest.mark.slow  # needs the page built by scripts/test.sh (npm, vite)
def test_committed_page_is_what_the_sources_build():
    if not CHECK_BUILD.is_dir():
        pytest.fail(f"{CHECK_BUILD} is missing; {SETUP_HINT}")
    comparison = filecmp.dircmp(CHECK_BUILD, COMMITTED)
    stale = comparison.diff_files + comparison.left_only + comparison.right_only
    assert not stale, (
        f"src/octlm/web_dist is stale ({', '.join(stale)} differ from a fresh build of web/); "
        "run `npm run build` in web/ and commit src/octlm/web_dist"
    )


def wait_for_chromium() -> None:
    """While scripts/test.sh still installs Chromium in the background (the file ``OCTLM_CHROMIUM_PENDING`` names
    exists, empty), wait for it, up to ten minutes; the install's failure, written into that file, fails the test."""
    pending = os.environ.get("OCTLM_CHROMIUM_PENDING")
    deadline = time.monotonic() + 600
    while pending and Path(pending).is_file() and time.monotonic() < deadline:
        if said := Path(pending).read_text().strip():
            pytest.fail(f"installing Chromium failed: {said}")
        time.sleep(1)


def browser_check(url: str, out: Path, token: str) -> dict:
    """Run web/e2e/browser.mjs on ``url``; returns what it saw (fails the test on a failed check)."""
    wait_for_chromium()
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} is missing; {SETUP_HINT}")
    if not (WEB / "node_modules" / "playwright-core").is_dir() or shutil.which("node") is None:
        pytest.fail(f"node or web/node_modules/playwright-core is missing; {SETUP_HINT}")
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["node", "e2e/browser.mjs", url, str(out)],
        check=False,
        cwd=WEB,
        capture_output=True,
        text=True,
        timeout=180,
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


def check_attention(checks: dict, run_dir: Path) -> None:
    """The heads the page shows at 1x T: their entropy is the run's own, recorded here on the first T validation tokens;
    a learned table has no rows past T, so 2x and 4x are disabled and say so."""
    import torch

    from octlm.inspect.attention import record
    from octlm.inspect.attention_statistics import attention_statistics
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run

    model, _ = load_run(run_dir)
    T = model.config.context_length
    ids = [int(i) for i in RunFolder(run_dir).tokens("val")[:T]]
    maps = record(model, ids, torch.device("cpu"))
    # layer 0, the page's first
    stats = attention_statistics(maps.probabilities, maps.logits)
    expected = stats.mean_entropy[0].tolist()
    shown = [float(text.split(" nats")[0].removeprefix("entropy ")) for text in checks["run attention head stats"]]
    assert shown == pytest.approx(expected, abs=0.006)  # the page shows 2 decimals
    # the probes under the maps: each layer's first-token mass over its heads; a learned table turns no pairs
    probes = checks["run attention"]["probes"]
    sink = [float(row[1]) for row in probes["sink"]]
    assert sink == pytest.approx(stats.sink_mass.mean(dim=1).tolist(), abs=6e-4)  # 3 decimals
    assert probes["none"] == 1 and probes["charts"] == 0
    lengths = checks["run attention"]["lengths"]
    assert [(int(x["value"]), x["enabled"]) for x in lengths] == [(T, True), (2 * T, False), (4 * T, False)]
    assert all(f"has {T} rows" in note for note in checks["run attention"]["notes"])


def expected_slow_pairs(head_dim: int, theta: float, T: int, positions: int) -> tuple[int, int]:
    """The first pair with T theta_i < 2 pi, and how many (pair, position >= T) cells no training angle comes within
    half a step of: Python's search (octlm.export.parity), independent of the page's arc formula."""
    from octlm.export.parity import rope_reach_distance

    inv_freq = [theta ** (-2 * i / head_dim) for i in range(head_dim // 2)]
    first = next((i for i, w in enumerate(inv_freq) if T * w < 2 * math.pi), head_dim // 2)
    unseen = sum(rope_reach_distance(w, T, p) > w / 2 for w in inv_freq for p in range(T, positions))
    return first, unseen


def check_rope_reach(line: str, head_dim: int, theta: float, T: int) -> None:
    """The page's one-line count of RoPE's slow pairs and never-seen cells, against Python's."""
    first, unseen = expected_slow_pairs(head_dim, theta, T, 4 * T)
    pairs = head_dim // 2
    assert f"Pairs {first}–{pairs - 1} of 0–{pairs - 1} never complete a turn within T = {T}" in line, line
    assert f"{unseen} of the {pairs * 3 * T} (pair, position) cells" in line, line


def served_checks(args: list[str], shots: Path, token: str = "the") -> dict:
    """Start ``octlm serve ARGS --port 0`` and run the browser script on it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "serve", *args, "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        started = json.loads(proc.stdout.readline() or "{}")
        assert started.get("event") == "serving", proc.stderr.read() if proc.poll() is not None else started
        assert started["host"] == "127.0.0.1"
        return browser_check(started["url"], shots, token)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_page_in_chromium_through_octlm_serve(trained_run, tmp_path):
    token_id, typed = pick_token(trained_run)
    checks = served_checks(["--run", str(trained_run)], tmp_path / "shots", typed)
    assert checks["view"] == "run"
    check_neighbours(checks, trained_run, token_id)
    check_attention(checks, trained_run)
    assert checks["layout"] is None  # a run without --layers: no layout panel
    assert checks["similarity map re-rendered"]["pixelsChanged"]
    for name in checks["screenshots"]:
        assert (tmp_path / "shots" / name).stat().st_size > 10_000, name


@pytest.mark.slow
def test_playgrounds_alone_in_chromium_through_octlm_serve(tmp_path):
    """``octlm serve`` with neither --run nor --study: the eleven playgrounds work, and where the run or the study would
    be, the page gives the commands that fill it."""
    import torch

    from octlm.model.value_embeddings import bigram_index

    checks = served_checks([], tmp_path / "shots")
    assert checks["view"] == "none"
    for shown in checks["rope reach"]:  # the playground's default head (64 channels, rope_theta 10000), T moved by keys
        check_rope_reach(shown["line"], 64, 10000.0, shown["T"])
    # playground 11's default sentence (the cat sat on the mat) in a 40-row bigram table, as the model hashes it
    read = bigram_index(torch.tensor([[0, 1, 2, 3, 0, 4]]), None, 40)[0].tolist()
    assert checks["first layer"]["read"].startswith(f"rows read: {', '.join(map(str, read))}.")
    text = " ".join(checks["how to fill"].split())
    for command in (
        "octlm train --out runs/stdlib",
        "octlm serve --run runs/stdlib",
        "octlm length",
        "octlm serve --study DIR",
    ):
        assert command in text, command
    for name in checks["screenshots"]:
        assert (tmp_path / "shots" / name).stat().st_size > 10_000, name


@pytest.mark.slow
def test_the_built_page_opens_from_its_own_files_with_nothing_installed(tmp_path):
    """src/octlm/web_dist/index.html opened as a file, with no octlm running and no export: the eleven playgrounds work
    with no missing file or script error, and the last section gives the commands that fill it."""
    from octlm.export.web import NO_DATA

    assert (COMMITTED / "run-data.js").read_bytes() == NO_DATA  # the built page's own sets nothing, as serve's does
    checks = browser_check((COMMITTED / "index.html").as_uri(), tmp_path / "shots", "the")
    assert checks["view"] == "none" and checks["no script errors"] == []
    assert "octlm train --out runs/stdlib" in " ".join(checks["how to fill"].split())


def test_rope_run_ties_the_angles_to_its_own_attention(length_study, tmp_path):
    """A RoPE run's page: the count of its own slow pairs, every head's mean entropy at 1x, 2x and 4x T equal to
    ``attention_statistics`` of the run's first L validation tokens, recorded here, and its frequency probe at T
    equal to ``frequency_usage`` of the first T."""
    import torch

    from octlm.inspect.attention import record
    from octlm.inspect.attention_statistics import attention_statistics
    from octlm.inspect.frequencies import frequency_usage
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run

    run_dir = length_study / "runs" / "rope"
    checks = served_checks(["--run", str(run_dir)], tmp_path / "shots")
    model, _ = load_run(run_dir)
    config = model.config
    T = config.context_length
    check_rope_reach(checks["run rope"]["line"], config.d_model // config.n_heads, config.rope_theta, T)
    heads = config.n_layers * config.n_heads
    assert checks["run rope"]["entropyLines"] == heads + 1  # and uniform attention's
    ids = [int(i) for i in RunFolder(run_dir).tokens("val")[: 4 * T]]
    shown = {
        title.rsplit(":", 1)[0]: float(title.rsplit(": ", 1)[1].split()[0]) for title in checks["run rope"]["dots"]
    }
    # the frequency probe at T (the explorer's first length): one chart per layer, queries and keys over the heads, and
    # each head's shares as octlm attention computes them on the first T validation tokens
    usage = frequency_usage(record(model, ids[:T], torch.device("cpu")), model)
    probes = checks["run attention"]["probes"]
    assert probes["charts"] == len(usage) == config.n_layers and probes["lines"] == 2 * config.n_layers
    for rows, layer in zip(probes["shares"], usage, strict=True):
        assert [row[0] for row in rows] == [str(h) for h in range(config.n_heads)]
        for name, column in (("slowest_quarter", 1), ("fastest_quarter", 2)):
            percent = [float(row[column].removesuffix("%")) for row in rows]
            assert percent == pytest.approx([100 * v for v in layer[name]], abs=0.51), name  # whole percent
    for length in (T, 2 * T, 4 * T):
        maps = record(model, ids[:length], torch.device("cpu"))
        entropy = attention_statistics(maps.probabilities, maps.logits).mean_entropy
        for layer in range(config.n_layers):
            for head in range(config.n_heads):
                key = f"layer {layer} head {head} at {length} tokens"
                assert shown[key] == pytest.approx(float(entropy[layer][head]), abs=6e-4), key  # 3 decimals


def expected_table(evals: list[dict], reading: str) -> list[list[str]]:
    """The base models' table as the page shows it: 4 decimals, n/a past a learned table."""
    base = [r for r in evals if r["label"] == r["position"] and "extended_to" not in r]
    return [
        [label, *(f"{r[reading]:.4f}" if r.get(reading) is not None else "n/a" for r in base if r["label"] == label)]
        for label in dict.fromkeys(r["label"] for r in base)
    ]


def check_study(checks: dict, study: Path) -> None:
    """The tables the page shows are the study's records, its groups, models and attention records the study's."""
    records = [json.loads(line) for line in (study / "length.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in records if r["record"] == "eval"]
    assert checks["study table"] == expected_table(evals, "bpb")
    assert all(len(row) == len(records[0]["lengths"]) + 1 for row in checks["study table"])
    if any("sliding_bpb" in r for r in evals):
        assert checks["study sliding table"] == expected_table(evals, "sliding_bpb")
    else:
        assert "a study without the sliding reading says so" in checks
    groups = checks["study groups"]
    assert groups["scaled"] == list(
        dict.fromkeys(r["label"] for r in evals if r["rope_scaling"] and "extended_to" not in r)
    )
    assert groups["extended"] == list(dict.fromkeys(r["label"] for r in evals if "extended_to" in r))
    assert checks["study models"] == list(dict.fromkeys(r["label"] for r in evals))
    learned = next(
        label for label in checks["study attention"] if not checks["study attention"][label]["lengths"][-1]["enabled"]
    )
    assert all("rows" in note for note in checks["study attention"][learned]["notes"])
    # The study's own statistics of the first model at its first length, where it recorded them (layer 0).
    first = evals[0]
    found = [
        r
        for r in records
        if r["record"] == "attention" and r["label"] == first["label"] and r["eval_length"] == first["eval_length"]
    ]
    expected = (
        [
            [
                str(h),
                f"{found[0]['mean_entropy'][0][h]:.2f}",
                f"{found[0]['mean_distance'][0][h]:.1f}",
                f"{found[0]['sink_mass'][0][h]:.3f}",
                f"{found[0]['max_logit'][0][h]:.1f}",
            ]
            for h in range(len(found[0]["mean_entropy"][0]))
        ]
        if found
        else []
    )
    assert [
        [cell.lstrip("-") if cell.startswith("-0.") and float(cell) == 0 else cell for cell in row]
        for row in checks["study attention record"]
    ] == expected


def test_study_page_in_chromium_through_octlm_serve(length_study, tmp_path):
    checks = served_checks(["--study", str(length_study)], tmp_path / "shots")
    assert checks["view"] == "study"
    check_study(checks, length_study)
    assert checks["study attention record"], "the study recorded its attention; the page shows it"
    longest = max(int(x["value"]) for x in next(iter(checks["study attention"].values()))["lengths"])
    # 32 tokens: not pooled
    assert any(v["longestShape"] == f"{longest}x{longest}" for v in checks["study attention"].values())
    for name in checks["screenshots"]:
        assert (tmp_path / "shots" / name).stat().st_size > 10_000, name


def test_an_older_study_works_from_disk_and_says_what_it_lacks(length_study, tmp_path):
    """A study as octlm length wrote it before the sliding reading and the attention records, exported and opened from
    disk."""
    from octlm.cli import main

    study = tmp_path / "older"
    shutil.copytree(length_study, study)
    written = [json.loads(line) for line in (study / "length.jsonl").read_text().splitlines() if line.strip()]
    older = [
        {k: v for k, v in r.items() if not k.startswith("sliding") and k != "eval_stride"}
        for r in written
        if r["record"] != "attention"
    ]
    (study / "length.jsonl").write_text("".join(json.dumps(r) + "\n" for r in older))
    out = tmp_path / "exported"
    assert main(["export-web", "--study", str(study), "--out", str(out), "--quiet"]) == 0
    checks = browser_check((out / "index.html").as_uri(), tmp_path / "shots", "the")
    check_study(checks, study)
    assert (
        "sliding-window reading" in checks["a study without the sliding reading says so"]
        and checks["study attention record"] == []
    )


@pytest.mark.slow
def test_exported_page_works_from_disk(trained_run, tmp_path):
    from octlm.cli import main

    token_id, typed = pick_token(trained_run)
    out = tmp_path / "exported"
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--quiet"]) == 0
    checks = browser_check((out / "index.html").as_uri(), tmp_path / "shots", typed)
    check_neighbours(checks, trained_run, token_id)
    check_attention(checks, trained_run)


#: The layout the browser test trains: two RoPE layers with 8-token windows, then a global NoPE layer with log-scaled
#: queries (Llama 4's pattern in miniature), at T = 32.
LAYOUT = "rope/w8*2 none/logn"


@pytest.fixture(scope="module")
def layout_run(tmp_path_factory, small_corpus) -> Path:
    """A tiny run with a layer layout: 3 layers, 3 steps, one thread."""
    from octlm.cli import main

    out = tmp_path_factory.mktemp("runs") / "layout"
    args = [*TINY_MODEL, "--n-layers", "3", "--context-length", "32", "--layers", LAYOUT, "--sample-tokens", "8"]
    assert main(["train", "--text", str(small_corpus), "--out", str(out), *args, "--quiet"]) == 0
    return out


def hidden_by_window(length: int, window: int | None) -> int:
    """Pairs (query i, key j <= i) a window hides, j <= i - W, counted by walking them."""
    return 0 if window is None else sum(1 for i in range(length) for j in range(i + 1) if j <= i - window)


def test_layout_run_in_chromium_through_octlm_serve(layout_run, tmp_path):
    """The page of a run with --layers: a row per layer with its window, bars spanning the keys the last query sees at
    T, 2T and 4T, and each layer's maps (reached from its row) labelled with its spec, a window layer's drawing the
    band."""
    from octlm.model.layout import describe
    from octlm.run.load import load_run

    checks = served_checks(["--run", str(layout_run)], tmp_path / "shots")
    layout = checks["layout"]
    config = load_run(layout_run)[0].config
    T = config.context_length
    windows = [8, 8, None]
    assert len(layout["rows"]) == config.n_layers == 3
    assert [row["window"] for row in layout["rows"]] == ["window 8", "window 8", "global"]
    assert [row["cells"][1] for row in layout["rows"]] == ["rope", "rope", "none"]
    assert [row["cells"][5] for row in layout["rows"]] == ["no", "no", "yes"]  # log-scaled queries
    for length in (T, 2 * T, 4 * T):
        first = [0 if w is None else length - w for w in windows]
        assert layout["bars"][str(length)] == [f"keys {a}–{length - 1}: {length - a} of {length}" for a in first]
    specs = describe(config.layers)
    assert specs == ["rope, window 8", "rope, window 8", "none, global, log-scaled queries"]
    for layer, (shown, spec, window) in enumerate(zip(layout["layers"], specs, windows, strict=True)):
        assert shown["select"] == f"layer {layer}: {spec}"
        assert shown["spec"].startswith(f"Layer {layer}: {spec}.")
        length = int(shown["length"])  # the explorer's longest length, 4T = 128: unpooled
        assert [m["shape"] for m in shown["maps"]] == [f"{length}x{length}"] * config.n_heads
        assert [m["window"] for m in shown["maps"]] == [str(window or "global")] * config.n_heads
        assert [m["hidden"] for m in shown["maps"]] == [hidden_by_window(length, window)] * config.n_heads
    assert "layer layout" in layout["positionNote"]  # why there are no position vectors: the layout's, not rope's
    assert "run-layout.png" in checks["screenshots"]
    for name in checks["screenshots"]:
        assert (tmp_path / "shots" / name).stat().st_size > 10_000, name
