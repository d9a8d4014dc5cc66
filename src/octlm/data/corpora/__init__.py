"""Text corpora that ship inside octlm, named on the command line: ``--text tinyshakespeare``.

So that every example and the test suite run on a fresh clone or a pip
install with nothing beside them. Each corpus is stored xz-compressed beside
this module (package data) and is checked against the sha256 of its
uncompressed bytes whenever it is read, so a damaged install is an error,
never silently different training text.

tinyshakespeare
    ``tinyshakespeare.txt.xz``: 40,000 lines of Shakespeare's plays, 1,115,394
    bytes of UTF-8 (ASCII) text, sha256
    ``86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed``. The
    text is in the public domain; this file is the ``input.txt`` of Andrej
    Karpathy's char-rnn (https://github.com/karpathy/char-rnn, data/tinyshakespeare),
    the corpus nanoGPT's character-level examples use. Compressed with
    ``xz -9e`` (364 kB).

A path on disk always wins over a built-in name: ``--text tinyshakespeare``
reads a file or folder called ``tinyshakespeare`` in the current folder when
one exists, and the built-in corpus only when none does.
"""

from __future__ import annotations

import hashlib
import lzma
from dataclasses import dataclass
from importlib import resources

from octlm.errors import DataError


@dataclass(frozen=True)
class BuiltinCorpus:
    """One shipped corpus: its ``--text`` name, compressed file, and the identity of its text."""

    name: str
    filename: str
    #: sha256 of the uncompressed bytes, as hex.
    sha256: str
    #: size of the uncompressed bytes.
    n_bytes: int
    source: str
    description: str


BUILTIN_CORPORA: dict[str, BuiltinCorpus] = {
    corpus.name: corpus
    for corpus in (
        BuiltinCorpus(
            name="tinyshakespeare",
            filename="tinyshakespeare.txt.xz",
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            n_bytes=1_115_394,
            source="https://github.com/karpathy/char-rnn (data/tinyshakespeare/input.txt)",
            description="Shakespeare's plays, 1.1 MB, public domain",
        ),
    )
}


def builtin_corpus(name: str) -> BuiltinCorpus | None:
    """The built-in corpus called ``name``, or ``None`` when no corpus has that name."""
    return BUILTIN_CORPORA.get(name)


def read_builtin(name: str) -> bytes:
    """The uncompressed bytes of built-in corpus ``name``, checked against its sha256.

    Raises:
        KeyError: when ``name`` is not a built-in corpus.
        DataError: when the shipped file is missing, does not decompress, or
            its text differs from the recorded sha256 (a damaged install).
    """
    corpus = BUILTIN_CORPORA[name]
    resource = resources.files(__name__) / corpus.filename
    try:
        raw = lzma.decompress(resource.read_bytes())
    except (OSError, lzma.LZMAError) as err:
        raise DataError(f"built-in corpus {name}: cannot read {resource}: {err}; reinstall octlm") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != corpus.sha256:
        raise DataError(
            f"built-in corpus {name}: {resource} holds text with sha256 {digest}, not {corpus.sha256}; "
            f"the install is damaged: reinstall octlm"
        )
    return raw


#: ``--text`` name of the running interpreter's standard library, octlm train's default corpus: read from the
#: installation (nothing shipped), so a study can name it beside tinyshakespeare.
STDLIB = "stdlib"
STDLIB_DESCRIPTION = "the running Python's standard library .py files (prose and code; octlm train's default)"


def builtin_names() -> list[str]:
    """Every name ``--text`` takes for a corpus built into octlm: the shipped ones and :data:`STDLIB`."""
    return [*BUILTIN_CORPORA, STDLIB]


def builtin_help() -> str:
    """The lines ``--help`` shows about built-in corpora: their names, and that a path on disk wins."""
    described = [(c.name, c.description) for c in BUILTIN_CORPORA.values()] + [(STDLIB, STDLIB_DESCRIPTION)]
    names = "\n".join(f"  {name:<18} {description}" for name, description in described)
    return (
        f"built-in corpora, named by --text NAME (a file or folder called NAME that exists is read instead):\n{names}"
    )


__all__ = [
    "BUILTIN_CORPORA",
    "STDLIB",
    "STDLIB_DESCRIPTION",
    "BuiltinCorpus",
    "builtin_corpus",
    "builtin_help",
    "builtin_names",
    "read_builtin",
]
