"""The menu board (scripts/leaderboard.py --board menu): each option beside controls it pairs with, of about its
size where it adds parameters, and compared with each control window by window, checked on studies whose true
differences are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from octlm.studies.leaderboard.board import Source, corpus_columns
from octlm.studies.leaderboard.figure import leaderboard_figure, pairs_figure
from octlm.studies.leaderboard.markdown import document, pair_cell
from tests.test_leaderboard import _rows, _study


def test_the_menu_measures_each_option_beside_a_control_it_pairs_with():
    from octlm.studies.leaderboard.protocol import menu_studies

    plain, *options = menu_studies()
    controls = set(plain.options[plain.options.index("--schemes") + 1 : plain.options.index("--rope-scalings")])
    labels = [label for study in options for label in study.rows.values()]
    assert len(labels) == len(set(labels)) and not set(labels) & controls  # no row shadows another
    for study in options:
        assert all(label == f"{scheme}-{study.name}" for scheme, label in study.rows.items())
        assert set(study.rows) <= controls or study.name.startswith("half")  # the key offset's control is "half"


def _number_or_text(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _parameters_with(options: tuple[str, ...]) -> int:
    """The Day-1 model's parameters (vocab 1,024, as the board trains) with a menu study's model options."""
    from octlm import Decoder, DecoderConfig

    given, i = {"position": options[options.index("--schemes") + 1]}, 0
    options = options[options.index("--schemes") + 2 : options.index("--rope-scalings")]
    while i < len(options):
        name = options[i][2:].replace("-", "_")
        takes_value = i + 1 < len(options) and not options[i + 1].startswith("--")
        given[name] = _number_or_text(options[i + 1]) if takes_value else True
        i += 2 if takes_value else 1
    import dataclasses

    from octlm.model.scheme_catalog import declaring

    model_options = {f.name for f in dataclasses.fields(DecoderConfig)}
    model_options |= {f.name for cls in declaring().values() for f in dataclasses.fields(cls)}
    given = {name: value for name, value in given.items() if name in model_options}  # not --embedding-lr
    return sum(p.numel() for p in Decoder(DecoderConfig(vocab_size=1024, **given)).parameters())


def test_each_menu_option_that_adds_parameters_has_a_wider_control_of_about_its_size():
    """The width :data:`WIDER_CONTROLS` names for an option is the nearest under its parameters, within 2%; an
    option adding under 5% to the Day-1 model is named by none."""
    from octlm.model.scheme_catalog import default_scheme
    from octlm.studies.leaderboard.protocol import WIDER_CONTROLS, menu_studies

    day1 = _parameters_with(("--schemes", default_scheme(), "--rope-scalings"))
    sized = {s.name: _parameters_with(s.options) for s in menu_studies() if len(s.rows) == 1}
    controls = {width: sized[f"d{width}"] for width in WIDER_CONTROLS}
    named = {name: width for width, names in WIDER_CONTROLS.items() for name in names}
    for name, n in sized.items():
        if name in (f"d{width}" for width in controls) or n - day1 < 0.05 * day1:
            assert name not in named
            continue
        width = named[name]
        assert 0 <= n - controls[width] < 0.02 * n, f"{name}: {n:,} parameters, control {controls[width]:,}"
        assert all(c > n for c in controls.values() if c > controls[width])  # the nearest width under the option


def test_each_option_is_compared_with_controls_the_board_holds():
    from octlm.model.scheme_catalog import default_scheme
    from octlm.studies.leaderboard.protocol import WIDER_CONTROLS, menu_controls, menu_studies

    labels = [label for study in menu_studies() for label in study.rows.values()]
    labels += menu_studies()[0].options[1 : menu_studies()[0].options.index("--rope-scalings")]
    controls = menu_controls()
    assert all(row in labels and set(pair) <= set(labels) and row not in pair for row, pair in controls.items())
    widths = {f"{default_scheme()}-d{w}" for w in WIDER_CONTROLS}
    options = [label for study in menu_studies()[1:] for label in study.rows.values() if label not in widths]
    assert sorted(controls) == sorted(options)  # every option has controls; a control has none
    for width, names in WIDER_CONTROLS.items():
        assert all(f"{default_scheme()}-d{width}" in controls[f"{default_scheme()}-{n}"] for n in names)


def test_an_option_is_ahead_behind_or_not_separated_by_its_windows(tmp_path):
    """``none-x`` is 0.5 nats a window below ``none`` (ahead in every seed), ``rope-x`` 0.3 above ``rope`` (behind),
    ``alibi-x`` is ``alibi`` with noise of mean zero; a learned table has no score past T, so no pair there."""
    rng = np.random.default_rng(3)
    plain = _rows("none", 0.0, 0.05, rng) + _rows("rope", 0.0, 0.05, rng) + _rows("alibi", 0.2, 0.05, rng)
    learned = _rows("learned", 0.1, 0.05, rng, upto=8)
    a = _study(tmp_path / "a", plain + learned)
    swing = [
        r | {"window_nats": [v + (-1) ** i for i, v in enumerate(r["window_nats"])]}
        for r in plain
        if r["label"] == "alibi"
    ]
    b = _study(
        tmp_path / "b",
        [r | {"window_nats": [v - 0.5 for v in r["window_nats"]]} for r in plain if r["label"] == "none"]
        + [r | {"window_nats": [v + 0.3 for v in r["window_nats"]]} for r in plain if r["label"] == "rope"]
        + swing
        + learned,
    )
    renamed = {k: f"{k}-x" for k in ("none", "rope", "alibi", "learned")}
    controls = {"none-x": ("none", "rope"), "rope-x": ("rope",), "alibi-x": ("alibi",), "learned-x": ("learned",)}
    columns, _ = corpus_columns("text", [Source("text", a), Source("text", b, renamed)], {}, controls)
    pairs = {
        (p["row"], p["control"], p["eval_length"]): p
        for p in columns
        if p["record"] == "pair" and p["reading"] == "bpb"
    }
    ahead, behind = pairs[("none-x", "none", 8)], pairs[("rope-x", "rope", 16)]
    assert ahead["status"] == "ahead" and ahead["high"] < 0 and ahead["seeds_agreeing"] == 3
    assert ahead["difference"] == pytest.approx(-0.5 / 40 / math.log(2), abs=1e-9)
    assert behind["status"] == "behind" and behind["low"] > 0
    assert behind["difference"] == pytest.approx(0.3 / 40 / math.log(2), abs=1e-9)
    swung = pairs[("alibi-x", "alibi", 8)]
    assert swung["status"] == "not separated" and swung["low"] < 0 < swung["high"]
    assert ("learned-x", "learned", 8) in pairs and ("learned-x", "learned", 16) not in pairs
    # none-x is none minus 0.5, rope equals none plus noise: none-x is ahead of rope too
    assert pairs[("none-x", "rope", 8)]["status"] == "ahead"
    records = [{"record": "leaderboard", "board": "menu", "confidence": 0.95, "resamples": 2000, "bootstrap_seed": 0}]
    records[0] |= {"corpora": {"text": "a text"}}
    text = document(records + columns, ["python scripts/leaderboard.py run --board menu"], "menu-board.png")
    assert "## a text: each option against its controls, non-overlapping windows" in text
    assert "![Every row's bits per byte against the evaluation length](menu-board.png)" in text
    line = next(x for x in text.splitlines() if x.startswith("| `learned-x` − `learned` |"))
    assert line.endswith(" | n/a |")  # no score past T
    assert "* at 1x ahead of the control: `none-x` (vs `none`), `none-x` (vs `rope`)" in text
    figure = pairs_figure(records + columns, multipliers=(1, 2))
    at1, at2 = figure.axes
    names = [label.get_text() for label in at1.get_yticklabels()]
    assert names[:3] == ["none-x − none", "none-x − rope", "rope-x − rope"]

    def points(axes):
        return {round(line.get_ydata()[0]): line for line in axes.get_lines() if line.get_marker() == "o"}

    assert len(points(at1)) == len(names) and names.index("learned-x − learned") not in points(at2)
    drawn = points(at1)[names.index("none-x − none")]
    assert drawn.get_xdata()[0] == pairs[("none-x", "none", 8)]["difference"]
    assert drawn.get_markerfacecolor() == drawn.get_color()  # ahead at 95%: filled
    assert points(at1)[names.index("alibi-x − alibi")].get_markerfacecolor() == "white"  # not separated: hollow


def test_a_pair_cell_marks_ahead_and_not_separated():
    p = {"status": "ahead", "difference": -0.05, "low": -0.06, "high": -0.04, "seeds_agreeing": 3}
    assert pair_cell(p, 3) == "**-0.0500 [-0.0600, -0.0400], 3/3**"
    assert pair_cell(p | {"status": "not separated", "high": 0.01}, 3) == "≈ -0.0500 [-0.0600, +0.0100], 3/3"
    assert pair_cell(p | {"status": "behind", "difference": 0.05, "low": 0.04, "high": 0.06}, 3).startswith("+0.0500")


def test_a_board_without_scalings_draws_no_scalings_panel():
    """The menu board runs no RoPE scaling, so its figure has the two readings' panels alone; the scheme board keeps
    its third panel (tests/test_leaderboard.py)."""
    rng = np.random.default_rng(6)
    columns = [{"record": "column", "corpus": "text", "reading": reading, "multiplier": m, "eval_length": 8 * m}
               | {"cells": [{"label": label, "bpb": rng.uniform(2, 3)} for label in ("rope", "rope-canonA")]}
               for reading in ("bpb", "sliding_bpb") for m in (1, 2)]  # fmt: skip
    head = {"record": "leaderboard", "board": "menu", "corpora": {"text": "a text"}}
    figure = leaderboard_figure([head, *columns])
    assert [axes.get_title() for axes in figure.axes] == [
        "a text, non-overlapping windows", "a text, sliding windows (stride L/2)"
    ]  # fmt: skip
