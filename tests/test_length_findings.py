"""The length study's comparisons: which rows are compared, the intervals in length.md and length.jsonl, and the
findings' sentences, which must say what the intervals say."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re

import numpy as np
import pytest

from octlm.cli import main
from octlm.studies.length.comparisons import comparisons, pairs, recompute, verdict
from octlm.studies.length.findings import confidence_section

LN2 = math.log(2)
#: The sentences of the findings, one pattern per verdict (length.md's own wording).
AT = r"At (?P<m>\d+)x T \((?P<L>\d+) tokens\), "
NUMBER = r"([+-]?\d+\.\d{4})"
BETTER = re.compile(
    AT + r"`(?P<better>[^`]+)` predicts better than `(?P<worse>[^`]+)` by (?P<size>\d+\.\d{4}) bits per byte "
    r"\[(?P<low>\d+\.\d{4}), (?P<high>\d+\.\d{4})\](?:, in (?:all (?P<all>\d+)|(?P<both>both)|(?P<some>\d+) of the "
    r"(?P<of>\d+)) "
    r"seeds taken one by one)?\."
)
NEITHER = re.compile(
    AT + rf"`(?P<a>[^`]+)` and `(?P<b>[^`]+)` do not differ at 95% \(difference {NUMBER} \[{NUMBER}, {NUMBER}\]\)\."
)
EQUAL = re.compile(
    AT + rf"`(?P<a>[^`]+)` and `(?P<b>[^`]+)` agree to 4 decimals \(difference {NUMBER} \[{NUMBER}, {NUMBER}\]\)\."
)
READING = re.compile(r"^In (non-overlapping windows|sliding windows), ")


def _findings(markdown: str) -> str:
    assert markdown.count("**Findings**") == 1
    return markdown[markdown.index("**Findings**") :]


def check_findings_agree(markdown: str, records: list[dict]) -> None:
    """Every comparison record has exactly one sentence in the findings, and each says what the record's interval
    says: an ordering only when the interval leaves out zero, with the better row the one of lower bits per byte."""
    names = {"non-overlapping windows": "bpb", "sliding windows": "sliding_bpb"}
    by_key = {(r["reading"], r["eval_length"], frozenset((r["a"], r["b"]))): r for r in records}
    told, reading = set(), None
    for line in _findings(markdown).splitlines():
        if match := READING.match(line):
            reading = names[match.group(1)]
        for match in BETTER.finditer(line):
            r = by_key[(reading, int(match["L"]), frozenset((match["better"], match["worse"])))]
            lead = -r["difference"] if match["better"] == r["a"] else r["difference"]  # a - b < 0: a is better
            low, high = sorted(-v if match["better"] == r["a"] else v for v in (r["low"], r["high"]))
            assert lead > 0 and low > 0, (match[0], r)  # the whole interval on the better row's side
            assert (match["size"], match["low"], match["high"]) == (f"{lead:.4f}", f"{low:.4f}", f"{high:.4f}")
            n_seeds = len(r["seeds"])
            agree = sum(  # seeds whose own interval is on the same side
                (s["high"] < 0) if match["better"] == r["a"] else (s["low"] > 0) for s in r["seeds"]
            )
            if n_seeds > 1:
                every = 2 if match["both"] else int(match["all"] or 0)
                assert (every or int(match["some"])) == agree and (every or int(match["of"])) == n_seeds
            else:
                assert "seeds" not in match[0]
            told.add((reading, r["eval_length"], r["a"], r["b"]))
        for pattern, says in ((NEITHER, "neither"), (EQUAL, "equal")):
            for match in pattern.finditer(line):
                r = by_key[(reading, int(match["L"]), frozenset((match["a"], match["b"])))]
                assert r["low"] <= 0 <= r["high"] or says == "equal", (match[0], r)
                assert (says == "equal") == (max(abs(r["low"]), abs(r["high"])) < 5e-5)
                shown = [float(v) for v in match.groups()[-3:]]
                assert shown == pytest.approx([r["difference"], r["low"], r["high"]], abs=5e-5)
                told.add((reading, r["eval_length"], r["a"], r["b"]))
    assert told == {(r["reading"], r["eval_length"], r["a"], r["b"]) for r in records}


# -- made-up rows: orderings known in advance --------------------------------------------------------------------

T, N, BYTES = 8, 300, 30


def _row(label, position, length, seed, nats, **extra):
    nats = [round(float(v), 4) for v in nats]
    return {
        "record": "eval",
        "label": label,
        "position": position,
        "eval_length": length,
        "multiplier": length // T,
        "seed": seed,
        "bpb": sum(nats) / LN2 / (BYTES * N),
        "window_nats": nats,
        "window_bytes": [BYTES] * N,
        **extra,
    }


def _made_up_rows() -> list[dict]:
    """Two seeds at 1x and 2x: `alibi` 3 nats a window better than `rope`, `none` rope with noise of mean zero,
    `rope+yarn` rope itself at 1x and a nat a window worse at 2x, `rope@2x` a nat a window better, one seed only."""
    rows = []
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        for length in (T, 2 * T):
            rope = rng.normal(60.0, 10.0, N)
            noise = rng.normal(0, 2.0, N)
            yarn = rope if length == T else rope + 1.0 + rng.normal(0, 0.1, N)
            tuned = rope - (1.0 if seed == 0 else 0.0) + rng.normal(0, 0.1, N)
            rows += [
                _row("rope", "rope", length, seed, rope),
                _row("alibi", "alibi", length, seed, rope - 3.0 + rng.normal(0, 0.5, N)),
                _row("none", "none", length, seed, rope + noise - noise.mean()),
                _row("rope+yarn", "rope", length, seed, yarn, rope_scaling="yarn"),
                _row("rope@2x", "rope", length, seed, tuned, extended_to=2),
            ]
    return rows


def test_the_comparisons_are_every_pair_of_schemes_and_each_variant_against_its_own_row():
    assert pairs(_made_up_rows()) == [
        ("schemes", "rope", "alibi"),
        ("schemes", "rope", "none"),
        ("schemes", "alibi", "none"),
        ("scaling", "rope+yarn", "rope"),
        ("fine-tune", "rope@2x", "rope"),
    ]
    tuned = {"label": "rope+yarn@4x", "position": "rope", "rope_scaling": "yarn", "extended_to": 4}
    assert pairs([{**tuned, "label": "rope+yarn"}, tuned])[0] == ("fine-tune", "rope+yarn@4x", "rope+yarn")


def test_the_findings_state_the_orderings_the_made_up_rows_hold():
    rows = _made_up_rows()
    records, markdown = confidence_section(rows, T, [T, 2 * T])
    check_findings_agree(markdown, records)
    said = {(r["a"], r["b"], r["eval_length"]): r for r in records}
    assert said[("rope", "alibi", T)]["better"] == "alibi"
    assert said[("rope", "alibi", T)]["difference"] == pytest.approx(3.0 / LN2 / BYTES, abs=2e-3)
    assert "`alibi` predicts better than `rope` by 0.14" in markdown and "in both seeds taken one by one" in markdown
    assert {said[("rope", "none", L)]["verdict"] for L in (T, 2 * T)} == {"neither"}
    assert (
        "At 1x T (8 tokens), `rope+yarn` and `rope` agree to 4 decimals (difference 0.0000 [0.0000, 0.0000])."
        in markdown
    )
    assert said[("rope+yarn", "rope", 2 * T)]["better"] == "rope"
    # the fine-tune leads in one seed of two: the interval over seeds reaches the seed where it does not
    tuned = said[("rope@2x", "rope", T)]
    assert [s["difference"] < -0.02 for s in tuned["seeds"]] == [True, False] and tuned["verdict"] == "neither"
    for r in records:  # the difference is that of the rows' bits per byte, averaged over seeds
        bpb = {
            lab: np.mean([x["bpb"] for x in rows if (x["label"], x["eval_length"]) == (lab, r["eval_length"])])
            for lab in (r["a"], r["b"])
        }
        assert r["difference"] == pytest.approx(bpb[r["a"]] - bpb[r["b"]], abs=1e-9)
    assert markdown.rstrip().endswith(".")  # the findings end the section


def test_an_ordering_that_one_seed_of_four_lacks_is_stated_with_that_count():
    # three seeds in which `alibi` leads by 0.1 bits per byte and one where it does not: at most one draw of seeds in
    # 20 holds three copies of that seed, so the interval over seeds leaves out zero while that seed's own holds it
    rng, rows = np.random.default_rng(7), []
    for seed in range(4):
        rope = rng.normal(60.0, 10.0, N)
        lead = 0.0 if seed == 3 else 0.1 * LN2 * BYTES
        noise = rng.normal(0, 1.0, N)
        rows += [
            _row("rope", "rope", T, seed, rope),
            _row("alibi", "alibi", T, seed, rope - lead + noise - noise.mean()),
        ]
    records, markdown = confidence_section(rows, T, [T])
    (bpb,) = [r for r in records if r["reading"] == "bpb"]
    assert bpb["better"] == "alibi" and bpb["seeds_agreeing"] == 3
    assert "in 3 of the 4 seeds taken one by one" in markdown
    check_findings_agree(markdown, records)


def test_the_verdict_is_the_side_of_zero_the_interval_lies_on():
    cases = {(-0.02, -0.01): "a", (0.01, 0.02): "b", (-0.01, 0.01): "neither", (-4e-5, 4e-5): "equal"}
    cases |= {(2e-5, 0.01): "b", (-0.01, -2e-5): "a", (0.0, 0.0): "equal", (-1e-5, 0.01): "neither"}
    assert {interval: verdict(*interval) for interval in cases} == cases


def test_rows_without_windows_are_not_compared():
    rows = [{k: v for k, v in r.items() if not k.startswith("window_")} for r in _made_up_rows()]
    assert comparisons(rows) == [] and confidence_section(rows, T, [T]) == ([], "")


# -- a tiny study ---------------------------------------------------------------------------------------------------

STUDY = "--vocab-size 280 --d-model 16 --n-heads 2 --n-layers 1 --batch-size 4 --max-steps 3 --threads 1".split()
STUDY += "--train-length 8 --multipliers 1 2 --schemes rope alibi --rope-scalings yarn --seeds 2".split()
STUDY += "--extend-to 2 --extend-steps 2".split()


@pytest.fixture(scope="module")
def study(tmp_path_factory, small_corpus):
    out = tmp_path_factory.mktemp("findings") / "study"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["length", "--text", str(small_corpus), "--out", str(out), "--json", *STUDY]) == 0
    records = [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines()]
    return out, records


@pytest.mark.slow
def test_length_md_ends_with_findings_that_agree_with_the_intervals_in_length_jsonl(study):
    out, records = study
    compared = [r for r in records if r["record"] == "comparison"]
    markdown = (out / "length.md").read_text()
    check_findings_agree(markdown, compared)
    assert markdown.index("**Differences in bits per byte, non-overlapping windows**") < markdown.index("**Findings**")
    kinds = {r["kind"] for r in compared}
    assert kinds == {"schemes", "scaling", "fine-tune"} and {r["reading"] for r in compared} == {"bpb", "sliding_bpb"}
    assert all(r["resamples"] == 2000 and r["bootstrap_seed"] == 0 and len(r["seeds"]) == 2 for r in compared)
    # every cell of the differences' table is a record's
    for r in (r for r in compared if r["reading"] == "bpb"):
        assert f"| `{r['a']}` − `{r['b']}` |" in markdown


@pytest.mark.slow
def test_the_intervals_can_be_recomputed_from_the_study_folder(study):
    out, records = study
    assert recompute(out) == [r for r in records if r["record"] == "comparison"]
    evals = [r for r in records if r["record"] == "eval" and r["status"] == "ok"]
    window_bytes = {(r["reading"], r["eval_length"]): r["bytes"] for r in records if r["record"] == "window_bytes"}
    for row in evals:  # the windows add up to the row's totals, and the bytes are stored once per length
        assert "window_bytes" not in row and "sliding_window_bytes" not in row
        for reading, nats in (("bpb", "window_nats"), ("sliding_bpb", "sliding_window_nats")):
            nbytes = window_bytes[(reading, row["eval_length"])]
            assert sum(nbytes) == row["bytes"] and len(row[nats]) == len(nbytes)
            assert sum(row[nats]) / LN2 / sum(nbytes) == pytest.approx(row[reading], rel=1e-6)
    bpb = {(r["label"], r["eval_length"], r["seed"]): r for r in evals}
    for r in (r for r in records if r["record"] == "comparison"):
        for s in r["seeds"]:
            a, b = bpb[(r["a"], r["eval_length"], s["seed"])], bpb[(r["b"], r["eval_length"], s["seed"])]
            assert s["difference"] == pytest.approx(a[r["reading"]] - b[r["reading"]], abs=1e-6)
