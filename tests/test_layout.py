"""The house rules the layout promises (docs/architecture.md): schemes named in one package, rooms of a readable
size."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from octlm.model.positions import SCHEMES
from tests.conftest import REPO

PACKAGE = REPO / "src" / "octlm"
POSITIONS = PACKAGE / "model" / "positions"

#: "none" is NoPE's name and also a word torch and matplotlib take (reduction="none", facecolors="none": keyword
#: arguments, which the check passes over); each other place it is used as that word, and why.
NONE_AS_A_WORD = {
    "model/config.py": 2,  # ACTIVATIONS: F.gelu's approximate="none"; NO_SCALE: --attention-scale none
    "model/decoder.py": 1,  # cross_entropy: reduction != "none"
    "model/weights.py": 2,  # a message: "missing: none"
    "model/token_vectors.py": 1,  # PLAIN: --embedding-norm none, --embedding-scale none
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "web_dist" not in p.parts)


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    """String literals that are not docstrings (a docstring may say which schemes a module serves)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    library_words = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant) and node.value.value == "none"
    }
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings | library_words
    ]


def test_no_module_outside_the_positions_package_names_a_scheme():
    named = {}
    for path in _modules():
        if POSITIONS in path.parents:
            continue
        for node in _string_constants(ast.parse(path.read_text(encoding="utf-8"))):
            if node.value in SCHEMES:
                named.setdefault(path.relative_to(PACKAGE).as_posix(), []).append((node.lineno, node.value))
    words = {module: [entry for entry in entries if entry[1] == "none"] for module, entries in named.items()}
    schemes = {module: [entry for entry in entries if entry[1] != "none"] for module, entries in named.items()}
    assert not {m: e for m, e in schemes.items() if e}, (
        "a scheme is named outside octlm.model.positions; ask the registry instead"
    )
    assert all(len(entries) <= NONE_AS_A_WORD.get(module, 0) for module, entries in words.items()), words


def test_the_check_sees_a_scheme_named_in_code(tmp_path):
    # The check above must be able to fail: a comparison with a scheme's name is what it exists to catch.
    tree = ast.parse('def f(config):\n    """Only rope is special here."""\n    return config.position == "rope"\n')
    assert [n.value for n in _string_constants(tree)] == ["rope"]


def test_every_module_and_function_stays_readable():
    too_long = []
    tools = sorted([*(REPO / "bench").glob("*.py"), *(REPO / "scripts").glob("*.py")])  # code too, not only the package
    for path in [*_modules(), *tools]:
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 400:
            too_long.append(f"{path.relative_to(REPO)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                start = (
                    body[1].lineno
                    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
                    else body[0].lineno
                )
                if node.end_lineno - start + 1 > 60:
                    too_long.append(
                        f"{path.relative_to(REPO)}:{node.lineno} {node.name}: "
                        f"{node.end_lineno - start + 1} lines of code"
                    )
    assert not too_long, "modules over 400 lines or functions over 60 lines of code: " + "; ".join(too_long)


def _long_typescript(source: str) -> list[str]:
    """The page's modules' functions declared at the top level (``function f(`` or ``export function f(``) whose
    body, to the ``}`` that closes it at the start of a line, runs over 60 lines."""
    lines, out = source.splitlines(), []
    for i, line in enumerate(lines):
        if match := re.match(r"(?:export )?function (\w+)", line):
            end = next((j for j in range(i, len(lines)) if lines[j].startswith("}")), len(lines) - 1)
            if end - i - 1 > 60:
                out.append(f"{match.group(1)}: {end - i - 1} lines")
    return out


def test_the_page_s_modules_and_functions_stay_readable_too():
    too_long = []
    for path in sorted((REPO / "web" / "src").rglob("*.ts")):
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 400:
            too_long.append(f"{path.name}: {len(source.splitlines())} lines")
        too_long += [f"{path.name} {what}" for what in _long_typescript(source)]
    assert not too_long, "page modules over 400 lines or functions over 60: " + "; ".join(too_long)
    assert _long_typescript("function f() {\n" + "  x;\n" * 61 + "}\n") == ["f: 61 lines"]  # the check can fail
