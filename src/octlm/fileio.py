"""Writing files so that a crash never leaves a half-written one behind, and reading them whole."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

# Read once, at import: os.umask can only be read by setting it.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder.

    The bytes are flushed and fsynced before an atomic rename, so at any
    moment ``path`` holds either its previous content or the new one in full.
    On error (a full disk, say) the temporary file is removed and the
    previous file is untouched; the ``OSError`` propagates, naming ``path``
    when the failing call named no file (a write or fsync names none).
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode open() would have.
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)
        raise
    _fsync_dir(path.parent)


def read_safetensors(path: str | Path) -> tuple[dict, dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file, read through one open.

    ``safetensors.safe_open`` opens the file by name twice (the header, then
    the storage), so a reader racing an :func:`atomic_write` of the same path
    could pair one file's header with the next one's tensors. Reading the
    bytes once sees one whole file, old or new.

    Raises:
        OSError: when the file cannot be read.
        ValueError: when the bytes are not a safetensors file (too short, a
            bad header, or tensors that do not match it).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    data = Path(path).read_bytes()
    try:
        size = int.from_bytes(data[:8], "little")
        if len(data) < 8 or 8 + size > len(data):
            raise ValueError(f"{len(data)} bytes, too short for its header")
        header = json.loads(data[8 : 8 + size])
        metadata = header.get("__metadata__") or {} if isinstance(header, dict) else {}
        return load(data), dict(metadata)
    except (SafetensorError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a safetensors file: {err}") from None


def umask() -> int:
    """The process's file-creation mask, as read at import."""
    return _UMASK


def atomic_write_json(path: str | Path, obj) -> None:
    """:func:`atomic_write` of ``obj`` as indented JSON with a final newline."""
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every filesystem allows it.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
