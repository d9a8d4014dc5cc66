"""The README and docs/ stay an honest entrance: short, no dead paths, no examples the CLI refuses."""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path

import pytest

from octlm.cli import build_parser
from octlm.data.corpora import BUILTIN_CORPORA
from tests.conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]

#: Pages the README links to that are still to be written. A link to one is allowed while the file
#: is missing; test_pending_pages_are_still_missing fails once it lands, so the entry is removed.
PENDING: set = set()  # pages linked before they are written; empty once each exists

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img[^>]*\ssrc=\"([^\"]+)\"")
_OCTLM = re.compile(r"(?:^|[\s/])octlm(?:\s|$)")


def _prose(text: str) -> str:
    """The Markdown without fenced blocks and inline code, where link syntax is only an example."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.replace("`", "").strip().lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if match := re.match(r"#{1,6}\s+(.*)", line):
            slug = _slug(match.group(1))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _links(page: Path) -> list[str]:
    return [a or b for a, b in _LINK.findall(_prose(page.read_text(encoding="utf-8")))]


def _octlm_argvs(line: str) -> list[list[str]]:
    """The argv after ``octlm`` (or ``python -m octlm``) of each command in one shell line; torchrun lines are
    skipped."""
    argvs, piece = [], []
    for word in [*shlex.split(line, comments=True), "&&"]:
        if word not in ("&&", "||", ";", "|"):
            piece.append(word)
            continue
        if piece and piece[0] != "torchrun":  # torchrun's octlm part is a train line like the others
            for i, word_ in enumerate(piece):
                if word_ == "octlm" or word_.endswith("/octlm"):
                    argvs.append(piece[i + 1 :])
                    break
                if word_ == "-m" and piece[i + 1 : i + 2] == ["octlm"]:
                    argvs.append(piece[i + 2 :])
                    break
        piece = []
    return argvs


def _commands(page: Path) -> list[tuple[str, list[str]]]:
    """Every ``octlm ...`` invocation in the page's shell blocks: (the line, its argv after ``octlm``)."""
    found = []
    for lang, block in _FENCE.findall(page.read_text(encoding="utf-8")):
        if lang.strip() not in ("bash", "sh", "shell", "console"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if _OCTLM.search(line) or "-m octlm" in line:
                found.extend((line.strip(), argv) for argv in _octlm_argvs(line))
    return found


def test_readme_is_an_entrance_not_a_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move reference material into docs/"


def test_no_page_or_source_names_the_workspace_folder():
    """A clone has no ../shared beside it, so no README, doc, help text or message may point there."""
    files = [README, *(REPO / "docs").rglob("*"), *(REPO / "src").rglob("*")]
    # pip install -e writes src/octlm.egg-info/PKG-INFO from the README; it is not the project's file
    files = [f for f in files if not any(part.endswith(".egg-info") for part in f.parts)]
    offenders = [str(f.relative_to(REPO)) for f in files if f.is_file() and b"../shared" in f.read_bytes()]
    assert not offenders


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_and_image_resolves(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: outside the repository
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if target in PENDING and not target.exists():
            continue
        if not target.is_file() or REPO not in target.parents:
            broken.append(link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link} (no heading with that anchor)")
    assert not broken, f"{page.name}: {broken}"


def test_pending_pages_are_still_missing():
    """Once a pending page is written, take it out of PENDING so its links are checked again."""
    assert not [str(p) for p in PENDING if p.exists()]


def test_readme_has_one_figure():
    images = [link for link in _links(README) if link.endswith((".png", ".svg", ".jpg"))]
    assert len(images) == 1, images


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_octlm_command_shown_parses(page):
    """The shown commands cannot drift from the CLI: each parses with octlm's own parser."""
    parser = build_parser()
    for line, argv in _commands(page):
        try:
            parser.parse_args(argv)
        except SystemExit as exit:
            pytest.fail(f"{page.name}: `{line}` does not parse (exit {exit.code})")


def test_readme_examples_need_nothing_beside_the_clone():
    """Every --text in the README names a built-in corpus or a file an earlier line writes (``> FILE``), so the examples
    run on a fresh clone."""
    commands = _commands(README)
    assert len(commands) >= 6
    written = set(re.findall(r"> (\S+)$", _FENCE.sub(lambda m: m.group(0), README.read_text(encoding="utf-8")), re.M))
    for line, argv in commands:
        args = build_parser().parse_args(argv)
        for path in getattr(args, "text", None) or []:
            assert path in BUILTIN_CORPORA or path in written, (
                f"`{line}` reads {path}, which a fresh clone does not have"
            )


def test_help_examples_parse():
    """The examples in every command's --help epilogue parse too."""
    parser = build_parser()
    for name, sub in parser.subcommands.items():
        for line in (sub.epilog or "").splitlines():
            if line.split()[:1] not in (["octlm"], ["torchrun"]):
                continue  # prose, such as the list of built-in corpora
            for argv in _octlm_argvs(line):
                try:
                    parser.parse_args(argv)
                except SystemExit as exit:
                    pytest.fail(f"octlm {name} --help shows `{line.strip()}`, which does not parse (exit {exit.code})")
