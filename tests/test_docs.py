"""The README and docs/ stay an honest entrance: short, no dead paths, no examples the CLI refuses."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
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
    """At most 200 lines, and no history: issue numbers and commit hashes belong in docs/results.md."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move reference material into docs/"
    prose = _FENCE.sub("", text)
    # the headline table names the commit its study ran at; that line is a citation, not history
    prose = "\n".join(line for line in prose.splitlines() if "scripts/headline.py" not in line)
    assert not re.findall(r"\bissues? \d+|\b[0-9a-f]{7,40}\b", prose)


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


def test_the_docs_index_gives_every_page_its_place():
    """docs/README.md, the reading order, links every page of docs/ (a new page must be given its place in it)."""
    index = REPO / "docs" / "README.md"
    linked = {link.partition("#")[0] for link in _links(index)}
    assert not [page.name for page in DOCS if page != index and page.name not in linked]


def test_readme_has_one_figure():
    """The page's own screenshot, near the top: a newcomer sees what octlm shows before any result."""
    images = [link for link in _links(README) if link.endswith((".png", ".svg", ".jpg"))]
    assert images == ["docs/page-laptop.png"], images
    assert README.read_text(encoding="utf-8").index("docs/page-laptop.png") < 1200


def _playgrounds() -> list[str]:
    """The playgrounds the page shows, in order, read from web/src/main.ts."""
    main = (REPO / "web" / "src" / "main.ts").read_text(encoding="utf-8")
    return re.findall(r"(\w+)Playground\(\)", main.split('el("main"', 1)[1])


_COUNTS = {"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def test_every_count_of_playgrounds_is_the_pages_own():
    """The README, docs, help and the page itself say as many playgrounds as the page has, and its navigation
    links each one."""
    n = len(_playgrounds())
    texts = [*PAGES, REPO / "web" / "src" / "main.ts", *(REPO / "src" / "octlm" / "cli" / "commands").glob("*.py")]
    for path in texts:
        for word in re.findall(r"\b(\w+) playgrounds\b", path.read_text(encoding="utf-8")):
            if word.lower() in _COUNTS:
                assert _COUNTS[word.lower()] == n, f"{path.name} says {word} playgrounds; the page has {n}"
    main = (REPO / "web" / "src" / "main.ts").read_text(encoding="utf-8")
    nav = re.search(r'el\("nav".*?\n\s*\);', main, re.S).group(0)
    missing = [name for name in _playgrounds() if f'"{name.lower()}"' not in nav.lower()]
    assert not missing, f"the page's navigation leaves out {missing}"


def test_the_pages_screenshots_show_the_page_as_built():
    """docs/page-laptop.png and page-phone.png were made (scripts/screenshots.py) from the page as it is now: with the
    playgrounds it has, and from these very built files; a rebuilt page asks for new pictures."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("screenshots_script", REPO / "scripts" / "screenshots.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    record = json.loads(script.RECORD.read_text(encoding="utf-8"))
    retake = "run `python scripts/screenshots.py` (after `npm ci` in web/) and commit docs/"
    assert record["playgrounds"] == len(_playgrounds()), f"the screenshots show {record['playgrounds']}; {retake}"
    assert record["page_sha256"] == script.page_sha256(), f"src/octlm/web_dist changed since the screenshots; {retake}"
    assert all((REPO / "docs" / name).is_file() for name in record["screenshots"])


def test_the_api_page_names_every_registered_scheme():
    from octlm.model.positions import SCHEMES

    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    assert not [name for name in SCHEMES if f"`{name}`" not in text]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_octlm_command_shown_parses(page):
    """The shown commands cannot drift from the CLI: each parses with octlm's own parser."""
    parser = build_parser()
    for line, argv in _commands(page):
        if "--plugin" in argv:
            continue  # its scheme exists once the plug-in is imported: test_the_plugin_example_trains_and_samples
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


@pytest.mark.slow
def test_the_plugin_example_trains_and_samples(tmp_path):
    """architecture.md's own plug-in module, saved as mine.py, trains and samples through ``--plugin`` as its commands
    show (tiny settings; a subprocess, so the scheme it registers stays out of this process)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = next(block for lang, block in _FENCE.findall(text) if lang.strip() == "python" and "# mine.py" in block)
    (tmp_path / "mine.py").write_text(code, encoding="utf-8")
    shown = [argv for _, argv in _commands(REPO / "docs" / "architecture.md") if "--plugin" in argv]
    assert [argv[0] for argv in shown] == ["train", "length", "sample"]
    tiny = ["--max-steps", "2", "--d-model", "32", "--n-heads", "2", "--n-layers", "1", "--vocab-size", "300"]
    tiny += ["--batch-size", "4", "--context-length", "16", "--threads", "1", "--text", "tinyshakespeare", "--quiet"]
    for argv in (shown[0] + tiny, shown[2] + ["--max-new-tokens", "5", "--threads", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "octlm", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr


def test_layouts_page_lists_every_scheme_a_layer_may_carry():
    """docs/layouts.md's "Which schemes can be a layer" names exactly the schemes --layers takes (it named 9 of 12:
    FoX, stick-breaking and PaTH were missing)."""
    from octlm.model.layout import per_layer_schemes

    text = (REPO / "docs" / "layouts.md").read_text(encoding="utf-8")
    sentence = re.search(r"That is (`[^.]*`)\.", text.split("## Which schemes can be a layer", 1)[1]).group(1)
    assert sorted(re.findall(r"`([a-z0-9]+)`", sentence)) == sorted(per_layer_schemes())
