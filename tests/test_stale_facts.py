"""Facts the README, docs and --help state more than once stay one fact: each check reads the other side from its
source (a linked doc, the registry, the export modules), so a stale copy fails here."""

from __future__ import annotations

import re

import pytest

from octlm.cli import build_parser
from tests.conftest import REPO
from tests.test_docs import _FENCE, PAGES, README

DOCS = REPO / "docs"
#: A number a reader would look up: a decimal (2.197) or one with thousands separators (544,256); not a version or an
#: address (3.11.7, 127.0.0.1).
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+\.\d+)(?![\w]|\.\d)")


def _readme_blocks() -> list[str]:
    """The README's prose in paragraphs, list items and headings, the generated headline table left out (its own
    test, tests/test_headline.py, regenerates it)."""
    text = _FENCE.sub("", README.read_text(encoding="utf-8"))
    text = re.sub(r"<!-- headline:start -->.*?<!-- headline:end -->", "", text, flags=re.S)
    return re.split(r"\n\s*\n|\n(?=\* |\d\. |#)", text)


def test_each_number_the_readme_states_is_in_the_doc_it_links_to():
    """A number in a paragraph or list item is checked against the docs pages it links to, or, with no link of its
    own, those of the last paragraph before it in the same section (a list of findings under their source)."""
    pages: list[str] = []
    missing = []
    for block in _readme_blocks():
        if block.lstrip().startswith("#"):
            pages = []
            continue
        linked = [link.partition("#")[0] for link in re.findall(r"\]\((docs/[^)\s#]+\.md)(?:#[^)\s]*)?\)", block)]
        pages = linked or pages
        if not pages:
            continue
        text = " ".join((REPO / page).read_text(encoding="utf-8") for page in set(pages))
        missing += [(number, sorted(set(pages))) for number in _NUMBER.findall(block) if number not in text]
    assert not missing, f"README numbers its linked docs do not state: {missing}"


def test_the_test_command_time_lives_in_results_md_alone():
    """The test command's time changes with every test added; docs/results.md records it with its CPU and commit,
    and every other page links there instead of quoting a figure (the README once said 10 minutes; it took 30)."""
    stale = []
    for page in [p for p in PAGES if p.name != "results.md"]:
        for block in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
            if ("scripts/test.sh" in block or "whole test suite" in block) and re.search(
                r"\b\d+(\.\d+)? ?min(utes)?\b", block
            ):
                stale.append(page.name)
    assert not stale, f"a test-command time outside docs/results.md: {stale}"


def _opt_in(text: str) -> set[str]:
    return set(re.findall(r"`(\w+)`", text))


def test_the_opt_in_schemes_the_docs_name_are_the_registrys():
    from octlm.model.positions import SCHEMES, facts_of

    length_opt_in = {name for name in SCHEMES if not facts_of(name).in_length_study}
    task_opt_in = {name for name in SCHEMES if not facts_of(name).in_task_study}
    positions = (DOCS / "positions.md").read_text(encoding="utf-8")
    said_length = re.search(r"\n(`t5`.*?) are opt-in in `octlm length`", positions, re.S).group(1)
    said_tasks = re.search(r"\n(`\w+`[^\n]*?) are opt-in in the task study", positions).group(1)
    tasks = (DOCS / "tasks.md").read_text(encoding="utf-8")
    said_defaults = re.search(r"every scheme but the\s+opt-in (.*?)\),", tasks, re.S).group(1)
    assert _opt_in(said_length) == length_opt_in
    assert _opt_in(said_tasks) == _opt_in(said_defaults) == task_opt_in


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    parser = build_parser()
    return {name: sub.format_help() for name, sub in parser.subcommands.items()}


def test_export_hf_help_names_every_class_export_writes(helps):
    """Every transformers class a module of octlm.export writes (``...ForCausalLM``, GPT-2's head model)."""
    sources = " ".join(p.read_text(encoding="utf-8") for p in (REPO / "src" / "octlm" / "export").glob("hf*.py"))
    written = set(re.findall(r"\b(\w+ForCausalLM|GPT2LMHeadModel)\b", sources)) - {"AutoModelForCausalLM"}
    shown = " ".join(helps["export-hf"].split())
    assert written and not [name for name in written if name not in shown]


def test_length_help_names_every_fine_tune_of_the_extension_stage(helps):
    from octlm.model.positions import facts_of

    names = {"linear": "linear", "ntk": "NTK", "yarn": "YaRN", "llama3": "Llama 3"}
    listed = re.search(r"fine-tunes copies of the rope\s*\((.*?)\)", " ".join(helps["length"].split())).group(1)
    assert [names[m] for m in facts_of("rope").extension_methods if m] == listed.split(", ")[1:]


def test_every_command_help_shows_an_example(helps):
    missing = [name for name, text in helps.items() if not re.search(rf"^\s+octlm {re.escape(name)}\b", text, re.M)]
    assert not missing, f"--help without an example: {missing}"


def test_the_main_jobs_validation_targets_are_its_tokens_in_whole_windows():
    """results.md gives the main job's validation split in tokens and the final evaluation in targets: the second is
    the first cut to whole non-overlapping windows of 128 (octlm.train.evaluate), not another count of tokens."""
    text = " ".join((DOCS / "results.md").read_text(encoding="utf-8").split())
    tokens = {int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]{4,}) validation tokens", text)}
    targets = {int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]{4,}) validation targets", text)}
    assert len(tokens) == 1 and targets == {(t - 1) // 128 * 128 for t in tokens}, (tokens, targets)
