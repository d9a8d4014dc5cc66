"""scripts/headline.py: the headline table gives each scheme's mean and spread over seeds, in both readings."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO


def _headline():
    spec = importlib.util.spec_from_file_location("headline_script", REPO / "scripts" / "headline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _study(tmp_path):
    study = {"record": "study", "train_length": 8, "equal_steps": 5, "options": {"schemes": ["rope", "learned"]}}
    rows = [study]
    for seed, (a, b) in zip((1, 2), ((2.0, 3.0), (2.2, 3.4)), strict=True):
        for m in (1, 2, 4, 16):
            rows.append(
                {"record": "eval", "label": "rope", "seed": seed, "multiplier": m, "bpb": a * m, "sliding_bpb": b}
            )
            learned = None if m > 1 else a
            rows.append({"record": "eval", "label": "learned", "seed": seed, "multiplier": m, "bpb": learned})
        rows.append({"record": "eval", "label": "rope+yarn", "seed": seed, "multiplier": 4, "bpb": 0.1})
    (tmp_path / "length.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_cells_are_mean_and_sample_std_over_seeds(tmp_path):
    """rope at 4x: windows 8.0 and 8.8 -> 8.400 ± 0.566 (sample std, n - 1); sliding 3.0 and 3.4 -> 3.200 ± 0.283."""
    table = _headline().headline(*_headline().read_study(_study(tmp_path)), "abc1234", "octlm length X")
    rope = next(line for line in table.splitlines() if line.startswith("| `rope`"))
    cells = [c.strip() for c in rope.strip("|").split("|")]
    assert cells[1:] == [
        "2.100 ± 0.141",
        "3.200 ± 0.283",
        "8.400 ± 0.566",
        "3.200 ± 0.283",
        "33.600 ± 2.263",
        "3.200 ± 0.283",
    ]
    learned = next(line for line in table.splitlines() if line.startswith("| `learned`"))
    assert [c.strip() for c in learned.strip("|").split("|")][3:] == ["n/a"] * 4
    assert "yarn" not in table
    assert "2 seeds (1, 2)" in table and "abc1234" in table and "octlm length X" in table


def test_write_replaces_only_between_the_markers(tmp_path):
    module = _headline()
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{module.START}\nold table\n{module.END}\noutro\n")
    module.main([str(_study(tmp_path)), "--commit", "c", "--command", "x", "--write", str(readme)])
    text = readme.read_text()
    assert text.startswith(f"intro\n{module.START}\n| scheme") and text.endswith(f"{module.END}\noutro\n")
    assert "old table" not in text
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="headline:start"):
        module.main([str(tmp_path), "--commit", "c", "--command", "x", "--write", str(readme)])


def test_a_max_steps_study_states_its_step_count(tmp_path):
    """A study run with --max-steps records no timed count (equal_steps null): the table states --max-steps."""
    module = _headline()
    path = _study(tmp_path) / "length.jsonl"
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head.update(equal_steps=None, options={**head["options"], "max_steps": 7})
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    assert "for 7 steps each" in module.headline(*module.read_study(path), "c", "x")


@pytest.mark.parametrize(
    "options, words",
    [
        ({}, "with AdamW;"),
        ({"optimizer": "adamw", "muon_weight_decay": 0.25}, "with AdamW;"),
        ({"optimizer": "muon"}, "with Muon (weight decay 0) on the blocks' matrices, AdamW on the rest;"),
        ({"optimizer": "muon", "muon_weight_decay": 0.25}, "with Muon (weight decay 0.25) on the blocks'"),
    ],
)
def test_the_caption_names_the_optimizer_the_study_trained_with(tmp_path, options, words):
    """Issue 53: the table states which optimizer made it; a study from before --optimizer trained with AdamW."""
    module = _headline()
    path = _study(tmp_path) / "length.jsonl"
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head["options"] = {**head["options"], **options}
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    assert words in module.headline(*module.read_study(path), "c", "x")
