"""Reading text: files and folders, the default corpus, the built-in ones; and the train/validation split.

The path a corpus takes: read the files (strict UTF-8, nothing dropped
silently), split each file into its first 90% for training and last 10% for
validation (here); train the tokenizer on the training part only
(:mod:`octlm.data.tokenizer`), encode both parts into token streams with
``<|endoftext|>`` between documents, store each stream as a numpy memmap, and
cut it into full blocks of ``context_length + 1`` tokens
(:mod:`octlm.data.tokens`), so that every position row trains.
"""

from __future__ import annotations

import codecs
import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from octlm.data.corpora import STDLIB, BuiltinCorpus, builtin_corpus, builtin_names, read_builtin, stdlib
from octlm.data.corpora.stdlib import default_corpus_files, default_corpus_root
from octlm.errors import DataError

_BINARY_SNIFF_BYTES = 8192

#: Folders of installed code and caches, never a person's text.
_SKIPPED_FOLDERS = {"__pycache__", "node_modules"}

#: Why a folder met while walking ``--text`` is not the person's text (e.g. an earlier run's
#: output, which :mod:`octlm.train.corpus` recognises), or None to read it.
FolderRule = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class Document:
    """One document: its file's display path, its text, its UTF-8 bytes (as read) and the sha256 of the file's bytes
    (a plain text file; ``""`` for a record, whose file manifest.json lists once)."""

    path: str
    text: str
    n_bytes: int
    sha256: str


def _folder_files(folder: Path, skipped: list[dict], skip_folder: FolderRule | None) -> list[Path]:
    files = []
    # Symbolic links to folders are followed (a corpus is often linked in from another disk); each folder is read
    # once, by the identity of what it is, so a link back up the tree, or a second way to one folder, is listed instead.
    walked = {_identity(folder): str(folder)}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = _folders_to_walk(Path(dirpath), dirnames, walked, skipped)
        if skip_folder is not None and (reason := skip_folder(Path(dirpath))):
            skipped.append({"path": dirpath, "reason": reason})
            dirnames[:] = []
            continue
        files.extend(Path(dirpath, f) for f in filenames if not f.startswith("."))
    return sorted(files, key=lambda p: p.as_posix())


def _identity(folder: Path) -> tuple[int, int]:
    info = os.stat(folder)
    return info.st_dev, info.st_ino


def _folders_to_walk(parent: Path, names: list[str], walked: dict, skipped: list[dict]) -> list[str]:
    """The subfolders of ``parent`` to walk, sorted: not hidden, not installed code, not a folder already walked
    (the real folder before a link to it beside it)."""
    keep = []
    names = [d for d in names if not d.startswith(".") and d not in _SKIPPED_FOLDERS]
    for name in sorted(names, key=lambda d: ((parent / d).is_symlink(), d)):
        path = parent / name
        identity = _identity(path)
        if identity not in walked:
            walked[identity] = str(path)
            keep.append(name)
            continue
        before = walked[identity]
        if not path.is_symlink():
            reason = f"the same folder as {before} (reached through a symbolic link), read there"
        elif Path(before) in (parent, *parent.parents):
            reason = f"a symbolic link to {before}, a folder above it (a loop); not followed"
        else:
            reason = f"a symbolic link to {before}, read there"
        skipped.append({"path": str(path), "reason": reason})
    return sorted(keep)


def _wide_encoding(encoding: str) -> bool:
    # UTF-16 and UTF-32 hold NUL bytes in ordinary text, so only their decoded text can tell.
    name = encoding.lower().replace("_", "-")
    return name.startswith(("utf-16", "utf-32", "utf16", "utf32"))


def _looks_binary(raw: bytes, encoding: str = "utf-8") -> bool:
    """Whether the first 8 KiB of ``raw`` hold a NUL (for UTF-16/32: a NUL character, in as much of them as decodes)."""
    head = raw[:_BINARY_SNIFF_BYTES]
    if _wide_encoding(encoding):
        # What does not decode (a character cut at the end of the head, say) is decode_text's to name.
        return "\x00" in head.decode(encoding, errors="ignore")
    return b"\x00" in head


def decode_text(raw: bytes, path: str, encoding: str = "utf-8") -> str:
    """Decode a file's bytes strictly; a byte-order mark is dropped, line endings are kept.

    Raises:
        DataError: naming the file and the byte offset of the first byte that
            is not valid in ``encoding``, with the ``--encoding`` fix.
    """
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: not valid {encoding} at byte offset {err.start} (byte 0x{raw[err.start]:02x}); "
            f"if the file uses another encoding, pass it, e.g. --encoding cp1252 or --encoding latin-1"
        ) from None
    except LookupError:
        check_encoding(encoding)
        raise  # not reached: check_encoding raises for every codec that raised here


def check_encoding(encoding: str) -> None:
    """Raise :class:`DataError` unless ``encoding`` names a Python text codec."""
    try:
        b"a".decode(encoding)  # unknown names and codecs that are not text (rot13, base64) raise LookupError
    except UnicodeDecodeError:
        pass  # a real text codec (UTF-16 wants two bytes)
    except LookupError:
        raise DataError(
            f"--encoding {encoding}: unknown text encoding; use a Python codec name such as utf-8 or cp1252"
        ) from None


def _given_candidates(
    paths: Sequence[str | Path], skipped: list[dict], skip_folder: FolderRule | None
) -> tuple[list[tuple], list[dict]]:
    """What each ``--text`` argument names: ``(path or built-in, shown, from_folder)`` and the built-ins used.

    A path that exists on disk wins over a built-in corpus of the same name,
    so a person's own ``tinyshakespeare`` folder is never shadowed.
    """
    candidates: list[tuple] = []
    builtins: list[dict] = []
    for given in paths:
        if not str(given):
            # Path("") is ".", which would quietly read the whole current folder.
            raise DataError("--text got an empty path ''; give a file or folder (. for the current folder)")
        path = Path(given)
        if path.is_dir():
            found = _folder_files(path, skipped, skip_folder)
            candidates.extend((f, str(f), True) for f in found)
            if not found:
                raise DataError(f"{path}: folder holds no files; give a folder of text files or the files themselves")
        elif path.is_file():
            candidates.append((path, str(path), False))
        elif path.exists():
            raise DataError(f"{path}: not a regular file or folder")
        elif (broken := _broken_link(path)) is not None:
            raise DataError(broken)
        elif str(given) == STDLIB:
            root = stdlib.default_corpus_root()
            candidates.extend((p, p.relative_to(root).as_posix(), True) for p in stdlib.default_corpus_files())
            builtins.append({"name": STDLIB, "root": str(root)})
        elif (shipped := builtin_corpus(str(given))) is not None:
            candidates.append((shipped, shipped.name, False))
            builtins.append({"name": shipped.name, "sha256": shipped.sha256, "source": shipped.source})
        else:
            raise DataError(f"{path}: no such file or folder (built-in corpora: {', '.join(builtin_names())})")
    return candidates, builtins


def _broken_link(path: Path) -> str | None:
    """For a path that does not resolve because of a symbolic link (a loop, or a link to nothing): the message; else
    ``None``.

    ``Path.exists`` is False for both, which would read as "no such file"
    while ``ls`` shows the link; a link on disk also wins over a built-in name.
    """
    try:
        os.stat(path)
    except OSError as err:
        target = os.readlink(path) if path.is_symlink() else None
        if err.errno == errno.ELOOP and target is None:
            return (
                f"{path}: a symbolic link loop in the path (a link above it leads back to itself); "
                f"fix that link or give --text the real path"
            )
        if err.errno == errno.ELOOP:
            return (
                f"{path}: a symbolic link loop ({path} -> {target} leads back to itself and never reaches a file or "
                f"folder); point it at the real text (ln -sfn TARGET {path}) or give --text the real path"
            )
        if target is not None:
            return (
                f"{path}: a symbolic link to {target}, which does not exist; "
                f"point it at the real text (ln -sfn TARGET {path}) or give --text the real path"
            )
    return None


def _read_candidate(item: Path | BuiltinCorpus, shown: str, encoding: str) -> bytes:
    """A file's bytes, or only its first 8 KiB when they already show it is binary.

    A disk image or a model file beside the text is recognised from its head,
    so it is never read whole (a 4 GB image took 4.4 GB of memory and 14 s).
    """
    if isinstance(item, BuiltinCorpus):
        return read_builtin(item.name)
    try:
        with item.open("rb") as handle:
            head = handle.read(_BINARY_SNIFF_BYTES)
            return head if _looks_binary(head, encoding) else head + handle.read()
    except OSError as err:
        raise DataError(f"{shown}: cannot read: {err.strerror}") from None


def _is_utf8(encoding: str) -> bool:
    return encoding.lower().replace("_", "-") in ("utf-8", "utf8", "utf-8-sig")


def _decode_candidate(raw: bytes, shown: str, encoding: str) -> tuple[str | None, str | None]:
    """``(text, None)``, or ``(None, "binary" | "empty")`` for a file that is no text.

    Raises:
        DataError: when the bytes do not decode, or when they are valid UTF-8
            and ``encoding`` reads them as different text (a wrong --encoding
            would train on mojibake).
    """
    if _looks_binary(raw, encoding):
        return None, "binary"
    text = decode_text(raw, shown, encoding)
    if not text.strip():
        return None, "empty"
    if _wide_encoding(encoding) and "\x00" in text:
        return None, "binary"
    if not _is_utf8(encoding):
        try:
            as_utf8 = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            as_utf8 = None
        if as_utf8 is not None and as_utf8 != text:
            raise DataError(
                f"{shown}: the file is valid UTF-8, but --encoding {encoding} reads it as different text "
                f'(first line: "{first_line(text)}" instead of "{first_line(as_utf8)}"); drop --encoding or give '
                "--encoding utf-8"
            )
    return text, None


def _unusable(raw: bytes, reason: str, encoding: str) -> str:
    """Why a named file cannot be trained on, and the fix; UTF-16 is suggested only when the bytes decode as it."""
    if reason == "empty":
        return "empty (or only whitespace); remove it from --text"
    hint = "give text files (UTF-8 by default)"
    if not _wide_encoding(encoding):
        try:
            # raw may be only the file's head (_read_candidate), which can end inside a character.
            if "\x00" not in codecs.utf_16_decode(raw, "strict", len(raw) < _BINARY_SNIFF_BYTES)[0]:
                hint = "if it is UTF-16 text, give --encoding utf-16; otherwise give text files (UTF-8 by default)"
        except UnicodeDecodeError:
            pass
    return f"binary (it holds NUL bytes); {hint}"


def first_line(text: str, width: int = 60) -> str:
    """The first non-blank line of ``text``, at most ``width`` characters, control characters escaped."""
    from octlm.data.token_display import printable_text

    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    # escaping only lengthens, so the first width + 1 characters decide what is shown: a text of one 12 MB line
    # (no newline) took seconds to escape whole
    shown = printable_text(line[: width + 1].replace("\t", " "))
    return shown if len(shown) <= width else shown[: width - 3] + "..."


def corpus_candidates(
    paths: Sequence[str | Path] | None, skip_folder: FolderRule | None
) -> tuple[dict, list[tuple], list[dict]]:
    """What ``--text`` names: the source for the manifest, ``(path or built-in, shown, from_folder)`` of each file, and
    what was skipped.

    Raises:
        DataError: as :func:`read_documents`, for paths that name nothing readable.
    """
    skipped: list[dict] = []
    if not paths or (list(map(str, paths)) == [STDLIB] and not Path(STDLIB).exists() and not Path(STDLIB).is_symlink()):
        root = stdlib.default_corpus_root()
        source = {"kind": "python-stdlib", "root": str(root)}
        return source, [(p, p.relative_to(root).as_posix(), True) for p in stdlib.default_corpus_files()], skipped
    source = {"kind": "files", "paths": [str(p) for p in paths]}
    candidates, builtins = _given_candidates(paths, skipped, skip_folder)
    if builtins:
        source["builtin"] = builtins
    return source, candidates, skipped


def split_documents(docs: Sequence[Document], val_fraction: float) -> tuple[list[str], list[str]]:
    """Split every document: the first ``1 - val_fraction`` of its characters train, the rest validate.

    Each source contributes to both splits, and a single file splits exactly
    the way nanoGPT's ``prepare.py`` splits it.

    Raises:
        DataError: when ``val_fraction`` is not in (0, 1).
    """
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"--val-fraction must be between 0 and 1 (exclusive), got {val_fraction}")
    train, val = [], []
    for doc in docs:
        cut = int(len(doc.text) * (1.0 - val_fraction))
        train.append(doc.text[:cut])
        val.append(doc.text[cut:])
    return train, val


__all__ = [
    "Document",
    "corpus_candidates",
    "FolderRule",
    "decode_text",
    "default_corpus_files",
    "default_corpus_root",
    "split_documents",
]
