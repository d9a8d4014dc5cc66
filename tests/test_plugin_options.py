"""A plug-in scheme declares options of its own (docs/architecture.md, "Your own scheme"): each is a flag, a TOML key
and a key of config.json's model section, checked against its declaration where it enters, and read by the scheme.

The scheme is ``tests/fixtures/plugins/windowed_penalty.py``: two options, ``penalty_slope`` and ``penalty_reach``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from octlm.cli import main
from tests.test_plugin_cli import TINY, one_error_line, registry_restored  # noqa: F401  (a fixture)

PLUGIN = Path(__file__).parent / "fixtures" / "plugins" / "windowed_penalty.py"


def test_a_plugin_schemes_two_options_are_flags_config_keys_and_what_the_scheme_reads(
    registry_restored,  # noqa: F811
    small_corpus,
    tmp_path,
):
    from octlm.model import DecoderConfig
    from octlm.run.load import load_run

    run = tmp_path / "run"
    toml = tmp_path / "run.toml"
    toml.write_text("penalty_reach = 3\n")
    train = ["train", "--plugin", str(PLUGIN), "--position", "windowed_penalty", "--penalty-slope", "0.5"]
    assert main([*train, "--config", str(toml), "--text", str(small_corpus), "--out", str(run), *TINY]) == 0
    config = json.loads((run / "config.json").read_text())
    assert (config["model"]["penalty_slope"], config["model"]["penalty_reach"]) == (0.5, 3)
    assert "penalty_slope" not in config["train"]  # the model's section holds a scheme's options, as the built-ins'

    model, _ = load_run(run)
    bias = model.positions.score_bias(5, 5)
    i, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    expected = -0.5 * torch.minimum(i - j, torch.tensor(3)).float()  # slope * min(i - j, reach), by hand
    torch.testing.assert_close(bias, expected.expand(model.config.n_heads, 5, 5), rtol=0, atol=0)

    options = DecoderConfig(position="windowed_penalty", penalty_slope=1.0).options_of("windowed_penalty")
    assert (options.penalty_slope, options.penalty_reach) == (1.0, 64)


def test_a_plugin_option_outside_its_bounds_is_one_error_line(registry_restored, small_corpus, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "run"
    args = ["train", "--plugin", str(PLUGIN), "--position", "windowed_penalty", "--penalty-reach", "0"]
    assert main([*args, "--text", str(small_corpus), "--out", str(out), *TINY]) == 1
    assert "--penalty-reach must be >= 1, got 0" in one_error_line(capsys)
    assert not out.exists()


def test_a_plugin_whose_options_are_not_declared_is_one_error_line(registry_restored, tmp_path, capsys):  # noqa: F811
    loose = tmp_path / "loose_plugin.py"
    loose.write_text(
        "from dataclasses import dataclass\n\nfrom octlm.model.positions import PositionScheme, register\n\n\n"
        "@dataclass\nclass Loose:\n    strength: float = 1.0\n\n\n"
        "@register('loose')\nclass LoosePenalty(PositionScheme):\n    options = Loose\n"
    )
    assert main(["sample", "--plugin", str(loose), "--run", "x"]) == 1
    line = one_error_line(capsys)
    assert f"--plugin {loose}: the scheme 'loose' declares options=" in line and "@dataclass(frozen=True)" in line
