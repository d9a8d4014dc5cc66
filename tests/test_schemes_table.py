"""docs/schemes.md's table is the registry's: regenerated here, it must equal the page, so it cannot go stale."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.conftest import REPO

PAGE = REPO / "docs" / "schemes.md"


def _script():
    spec = importlib.util.spec_from_file_location("schemes_table_script", REPO / "scripts" / "schemes_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_table_the_registry_generates():
    script = _script()
    text = PAGE.read_text(encoding="utf-8")
    shown = text.split(script.START, 1)[1].split(script.END, 1)[0].strip()
    assert shown == script.table(), (
        "docs/schemes.md is stale: run `python scripts/schemes_table.py --write docs/schemes.md`"
    )


def test_every_registered_scheme_has_a_row_and_its_paper_agrees_with_its_description():
    from octlm.model.positions import SCHEMES, facts_of

    script = _script()
    assert list(script.PAPERS) == list(SCHEMES), "a scheme was added or removed: give its paper in PAPERS"
    for name, (authors, arxiv) in script.PAPERS.items():
        assert re.fullmatch(r"\d{4}\.\d{4,5}", arxiv), (name, arxiv)
        # a paper's year is its arXiv posting's or the next (a conference's: ALiBi, 2108 and ICLR 2022)
        year = int(re.search(r"\b(?:19|20)(\d\d)\b", authors).group(1))
        assert 0 <= year - int(arxiv[:2]) <= 1, (name, authors, arxiv)
        cited = re.search(r"\(([^()]*)\)$", facts_of(name).description)
        if cited:  # the description's own citation is the paper the row gives
            assert cited.group(1) in authors + script.NOTES.get(name, ""), (name, cited.group(1))


def test_exact_under_a_cache_is_what_the_cache_tests_check_for_every_scheme():
    from octlm.model.positions import SCHEMES
    from tests.test_generate import VARIANTS

    assert {position for position, extra, scaling in VARIANTS if not extra and scaling is None} == set(SCHEMES)


def test_the_export_column_names_the_class_each_mapper_writes():
    from octlm.export import hf_gpt2, hf_neox
    from octlm.model.positions import SCHEMES, facts_of

    script = _script()
    types = {facts_of(name).hf_model_type for name in SCHEMES} - {None}
    assert types == set(script.ARCHITECTURES)
    for module in (hf_gpt2, hf_neox):
        written = re.search(r'"architectures": \["(\w+)"\]', Path(module.__file__).read_text(encoding="utf-8"))
        assert script.ARCHITECTURES[module.MODEL_TYPE] == f"`{written.group(1)}`"
