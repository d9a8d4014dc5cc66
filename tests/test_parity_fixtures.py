"""The page's parity fixtures: committed file == what Python computes now.

``web/test/parity.test.ts`` (Vitest, run by scripts/test.sh) checks the page's
TypeScript against ``web/test/fixtures/parity.json`` to 1e-5; this test makes
sure that file still holds the Python implementation's numbers, so a change to
a formula on either side cannot pass unnoticed.
"""

from __future__ import annotations

import json
import math

import pytest

from octlm.export.parity import fixtures_json, main, parity_fixtures
from tests.conftest import REPO

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

FIXTURE = REPO / "web" / "test" / "fixtures" / "parity.json"


#: The page's TypeScript is checked against the fixture to 1e-5, so the fixture must hold Python's numbers to that,
#: and no closer: the fixture is float32 arithmetic, and another CPU's kernels round it differently. Measured on an
#: Intel Xeon (2026-12-02): AVX2, AVX-512 and one thread write the same file, 21 values 1 ulp (at most 9.5e-7 at 9.99)
#: from the AMD machine's, and ATEN_CPU_CAPABILITY=default (libm's sin, cos and exp instead of SLEEF's) moves 1,933
#: values by up to 1.24e-5 at -6.3, 2e-6 of the value. A formula change moves values by far more than 1e-5.
TOLERANCE = 1e-5


def drift(committed, fresh, path="$"):
    """Paths where two JSON trees differ (numbers by more than :data:`TOLERANCE`, relative or absolute, anything else
    at all)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        if committed.keys() != fresh.keys():
            return [f"{path}: keys {sorted(committed)} != {sorted(fresh)}"]
        return [d for k in committed for d in drift(committed[k], fresh[k], f"{path}.{k}")]
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return [f"{path}: length {len(committed)} != {len(fresh)}"]
        return [d for i, (a, b) in enumerate(zip(committed, fresh, strict=True)) for d in drift(a, b, f"{path}[{i}]")]
    if isinstance(committed, (int, float)) and isinstance(fresh, (int, float)) and not isinstance(committed, bool):
        return (
            []
            if math.isclose(committed, fresh, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
            else [f"{path}: {committed} != {fresh}"]
        )
    return [] if committed == fresh else [f"{path}: {committed!r} != {fresh!r}"]


def test_committed_fixtures_match_python():
    assert FIXTURE.is_file(), (
        f"{FIXTURE} is missing; write it with `python -m octlm.export.parity {FIXTURE.relative_to(REPO)}`"
    )
    differences = drift(json.loads(FIXTURE.read_text()), json.loads(fixtures_json()))
    assert not differences, (
        f"{FIXTURE.relative_to(REPO)} drifted from the Python formulas ({len(differences)} differences, first: "
        f"{differences[:3]}); regenerate it with `python -m octlm.export.parity {FIXTURE.relative_to(REPO)}` "
        "and rerun Vitest"
    )


def test_drift_is_detected():
    fresh = parity_fixtures()
    changed = json.loads(json.dumps(fresh))
    changed["rope"][1]["q_rotated"][2][3] += 10 * TOLERANCE * max(1.0, abs(changed["rope"][1]["q_rotated"][2][3]))
    changed["alibi"]["slopes"].pop()
    changed["sinusoidal"][0]["table"][1][1] += 0.1 * TOLERANCE  # rounding of this size passes
    found = drift(changed, json.loads(json.dumps(fresh)))
    assert any("rope[1].q_rotated[2][3]" in d for d in found) and any("alibi.slopes" in d for d in found)
    assert not any("sinusoidal" in d for d in found)


def test_fixtures_cover_every_formula_the_page_computes():
    fixtures = parity_fixtures()
    assert {c["layout"] for c in fixtures["sinusoidal"]} == {"interleaved", "concatenated"}
    assert any(c["width"] % 2 for c in fixtures["sinusoidal"]), "an odd width"
    assert {c["layout"] for c in fixtures["rope"]} == {"interleaved", "half"}
    assert any(c["offset"] >= 1000 for c in fixtures["rope"]), "far positions"
    assert any(n & (n - 1) for n in (c["n_heads"] for c in fixtures["alibi"]["slopes"])), (
        "a head count that is not a power of two"
    )
    assert fixtures["alibi"]["biases"] and fixtures["cosine"]
    assert any((c["num_buckets"], c["max_distance"]) == (32, 128) for c in fixtures["t5"]), "T5's own buckets"
    assert all(min(c["distances"]) < 0 and max(c["distances"]) > c["max_distance"] for c in fixtures["t5"]), (
        "future keys and the last bucket"
    )
    assert any(c["offset"] + c["q_len"] > c["threshold"] for c in fixtures["fire"]), "queries past FIRE's threshold"
    assert {c["layout"] for c in fixtures["xpos"]} == {"interleaved", "half"} and any(
        c["offset"] >= 1000 for c in fixtures["xpos"]
    )


@pytest.mark.parametrize("case", range(3))
def test_cosine_fixture_has_an_opposite_row(case):
    c = parity_fixtures()["cosine"][case]
    if len(c["table"]) > 4:
        assert c["similarity"][c["index"]][len(c["table"]) - 1] == pytest.approx(-1, abs=1e-6)


def test_exporter_writes_the_file(tmp_path, capsys):
    out = tmp_path / "deep" / "parity.json"
    assert main([str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(fixtures_json())


def test_rope_reach_fixture_covers_slow_and_fast_pairs_away_from_every_boundary():
    """Slow pairs and fast ones, a T where every pair is slow and one where none is; and no cell within 1e-6 rad of
    the half-step rule's boundary, nor any T * theta_i within 1e-6 of 2 pi, so float rounding on either side cannot
    flip a cell."""
    from octlm.export.parity import rope_reach_distance

    cases = parity_fixtures()["rope_reach"]
    firsts = {(c["first_slow_pair"], c["head_dim"] // 2) for c in cases}
    assert any(0 < k < n for k, n in firsts) and (0, 4) in firsts and (4, 4) in firsts
    assert any("2" in row for c in cases for row in c["cells"]), "positions past T at angles training never saw"
    assert any(row.count("1") > 0 and "2" in row for c in cases for row in c["cells"]), "a slow pair that wraps round"
    for c in cases:
        T = c["train_length"]
        for w in c["inv_freq"]:
            assert abs(T * w - 2 * math.pi) > 1e-6
            for p in range(T, c["positions"]):
                assert abs(rope_reach_distance(w, T, p) - w / 2) > 1e-6, (c["head_dim"], c["theta"], w, p)
