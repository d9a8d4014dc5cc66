"""A position scheme from the user's own module reaches the command line (docs/architecture.md, "Your own scheme").

Two ways in: ``--plugin MODULE_OR_FILE`` on every command that builds or reads
a model, and the ``octlm.positions`` entry point group of an installed
distribution, loaded when the registry is first asked for its names. The
scheme used here lives in ``tests/fixtures/plugins/distance_penalty.py``,
outside the package; the entry point comes from a distribution written into
``tmp_path`` (a ``.dist-info`` folder with ``entry_points.txt``) and put on
``sys.path``, where ``importlib.metadata`` finds it as it would an installed one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from octlm.cli import main
from octlm.model.positions import plugins, registry
from octlm.model.positions.registry import SCHEMES
from tests.conftest import TINY_MODEL

PLUGIN = Path(__file__).parent / "fixtures" / "plugins" / "distance_penalty.py"
TINY = [*TINY_MODEL, "--context-length", "32"]


@pytest.fixture
def registry_restored(monkeypatch):
    """Whatever a test registers or imports as a plug-in is gone after it; entry points are looked up afresh."""
    before, modules = set(dict.keys(SCHEMES)), set(sys.modules)
    monkeypatch.setattr(SCHEMES, "on_first_read", plugins.load_entry_points)
    yield
    for name in set(dict.keys(SCHEMES)) - before:
        dict.pop(SCHEMES, name)
        getattr(registry, "PLUGIN_SOURCES", {}).pop(name, None)
    for name in set(sys.modules) - modules:
        if "penalty" in name or "plugin" in name:
            del sys.modules[name]


def _unregister(name: str) -> None:
    """As a new octlm process would start: the plug-in's scheme not registered."""
    dict.pop(SCHEMES, name)
    getattr(registry, "PLUGIN_SOURCES", {}).pop(name, None)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("octlm: error: "), err
    return err[0]


def test_a_scheme_from_a_file_outside_octlm_trains_and_samples_through_plugin(
    registry_restored, small_corpus, tmp_path, capsys
):
    run = tmp_path / "run"
    train = ["train", "--plugin", str(PLUGIN), "--position", "penalty", "--text", str(small_corpus)]
    assert main([*train, "--out", str(run), *TINY]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["position"] == "penalty" and config["plugin"] == str(PLUGIN.resolve())
    capsys.readouterr()

    _unregister("penalty")  # a later process, which has not imported the plug-in
    assert main(["sample", "--run", str(run), "--max-new-tokens", "4"]) == 1
    line = one_error_line(capsys)
    assert "'penalty'" in line and f"--plugin {PLUGIN.resolve()}" in line
    assert main(["train", "--resume", str(run), "--max-steps", "4"]) == 1  # not "config.json is damaged"
    assert f"--plugin {PLUGIN.resolve()}" in one_error_line(capsys)

    sample = ["sample", "--plugin", str(PLUGIN), "--run", str(run), "--max-new-tokens", "4", "--json"]
    assert main(sample) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["samples"]


def test_a_plugin_scheme_is_one_of_the_length_studys_schemes(registry_restored):
    from octlm.cli import build_parser, options_from
    from octlm.model.positions.plugins import load_plugins
    from octlm.studies.length.options import LengthOptions, check_options

    load_plugins(["length", "--plugin", str(PLUGIN)])
    args = build_parser().parse_args(
        ["length", "--plugin", str(PLUGIN), "--schemes", "penalty", "--text", "x.txt", "--out", "s"]
    )
    opts = options_from(args, LengthOptions)
    assert opts.schemes == ["penalty"]
    check_options(opts)


@pytest.mark.parametrize(
    ("plugin", "says"),
    [
        ("no_such_octlm_plugin", "--plugin no_such_octlm_plugin: no module named 'no_such_octlm_plugin'"),
        ("missing/scheme.py", "--plugin missing/scheme.py: no such file"),
    ],
)
def test_a_plugin_that_cannot_be_found_is_one_error_line(registry_restored, plugin, says, capsys):
    assert main(["train", "--plugin", plugin, "--position", "penalty", "--out", "x", *TINY]) == 1
    assert says in one_error_line(capsys)


#: --plugin values that name no scheme module (``{tmp}`` is the test's folder, which holds plain.txt): what the one
#: line says.
NOT_SCHEME_MODULES = {
    "a file that is not .py": (
        "{tmp}/plain.txt",
        "--plugin {tmp}/plain.txt: is not a Python file (.py); give the path",
    ),
    "a folder": (
        "{tmp}",
        "--plugin {tmp}: is a folder; give a .py file or an importable module name (a package folder on sys.path "
        "is imported by its name",
    ),
    "an empty value": ("", "--plugin needs a module name or a .py file"),
    "a module with no scheme": (
        "json",
        "--plugin json: it registered no position scheme (did you mean another module?",
    ),
    "a file with no scheme": ("{tmp}/empty.py", "--plugin {tmp}/empty.py: it registered no position scheme"),
}


@pytest.mark.parametrize("case", list(NOT_SCHEME_MODULES))
def test_a_plugin_that_is_not_a_scheme_module_is_one_error_line(
    registry_restored, small_corpus, tmp_path, case, capsys
):
    (tmp_path / "plain.txt").write_text("not python\n")
    (tmp_path / "empty.py").write_text("import json\n")
    plugin, says = (text.format(tmp=tmp_path) for text in NOT_SCHEME_MODULES[case])
    out = tmp_path / "r"
    for _ in range(2):  # the second time too: a file that registered nothing is not remembered as loaded
        assert main(["train", "--plugin", plugin, "--text", str(small_corpus), "--out", str(out), *TINY]) == 1
        line = one_error_line(capsys)
        assert says in line and "Error" not in line and not out.exists()


def test_a_plugin_that_fails_to_import_or_takes_a_name_octlm_has_is_one_error_line(
    registry_restored, small_corpus, tmp_path, capsys
):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('half written')\n")
    assert main(["sample", "--plugin", str(broken), "--run", "x"]) == 1
    assert f"--plugin {broken}: importing it raised RuntimeError: half written" in one_error_line(capsys)

    taken = tmp_path / "taken.py"
    taken.write_text(
        "from octlm.model.positions import PositionScheme, register\n\n\n"
        "@register('rope')\nclass Mine(PositionScheme):\n    pass\n"
    )
    assert (
        main(["train", "--plugin", str(taken), "--text", str(small_corpus), "--out", str(tmp_path / "r"), *TINY]) == 1
    )
    line = one_error_line(capsys)
    assert f"--plugin {taken}:" in line and "'rope'" in line and "already" in line
    assert SCHEMES["rope"].__name__ != "Mine" and not (tmp_path / "r").exists()


def _distribution(site: Path, module: str, source: str) -> None:
    """An installed distribution as importlib.metadata sees it: ``<name>.dist-info`` beside the module it names."""
    info = site / "octlm_extra_schemes-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: octlm-extra-schemes\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[octlm.positions]\npenalty = {module}\n")
    (site / f"{module}.py").write_text(source)


def test_an_entry_point_scheme_is_found_without_plugin(registry_restored, monkeypatch, small_corpus, tmp_path):
    _distribution(tmp_path / "site", "penalty_schemes", PLUGIN.read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from octlm.model.positions import SCHEME_NAMES

    assert "penalty" in SCHEME_NAMES  # the first question of the registry loads the entry points
    run = tmp_path / "run"
    assert main(["train", "--position", "penalty", "--text", str(small_corpus), "--out", str(run), *TINY]) == 0
    assert json.loads((run / "config.json").read_text())["plugin"] == "penalty_schemes"


def test_an_entry_point_that_fails_is_one_error_line_naming_it(
    registry_restored, monkeypatch, small_corpus, tmp_path, capsys
):
    _distribution(tmp_path / "site", "penalty_broken", "raise ImportError('needs a newer torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    train = ["train", "--position", "rope", "--text", str(small_corpus), "--out", str(tmp_path / "r")]
    assert main([*train, *TINY]) == 1
    line = one_error_line(capsys)
    assert "entry point penalty = penalty_broken" in line and "octlm-extra-schemes" in line
    assert "needs a newer torch" in line
