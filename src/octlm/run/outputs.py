"""Output folders: refusing a path that cannot become one, creating it, and building it hidden beside itself.

A new run's prepared corpus, the embeddings figures, the web page and the
transformers export and import are built in a staging folder
``.NAME.partial-PID-XXXX`` next to the target and renamed into place only when
complete (:meth:`octlm.run.folder.RunFolder.staged`), so a crash or Ctrl-C never leaves
a half-written folder under the name asked for.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from octlm.errors import OctlmError


def check_out_folder(path: Path, flag: str = "--out") -> None:
    """Refuse, before anything is written, an output path that cannot become a folder.

    Raises:
        OctlmError: naming ``flag`` and the path when the path is not valid
            UTF-8 (run files record paths as UTF-8 text), when it exists and
            is not a folder, when a folder above it is a file, when it is
            the current folder or one above it (``--out .``), a symbolic
            link or a mount point.
    """
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        raise OctlmError(f"{flag} {str(path)!r}: the path is not valid UTF-8; choose a name that is") from None
    _check_not_where_you_are(path, flag)
    # The output is built beside the path and renamed over it: a link would be replaced by a folder (its
    # target kept) and a mount point cannot be renamed at all.
    if path.is_symlink():
        raise OctlmError(f"{flag} {path}: is a symbolic link (to {os.readlink(path)}); give the folder it points to, or a new folder")
    if os.path.ismount(path):
        raise OctlmError(f"{flag} {path}: is a mount point, which octlm cannot replace; give a new folder inside it, e.g. {path / 'out'}")
    for above in (path, *path.parents):
        if above.exists():
            if not above.is_dir():
                what = "exists and is not a folder" if above == path else f"{above} is a file, not a folder"
                raise OctlmError(f"{flag} {path}: {what}; choose another {flag}")
            return


def _check_not_where_you_are(path: Path, flag: str) -> None:
    # The output is built beside the target and renamed over it: the folder a shell stands in cannot be replaced that way.
    try:
        here = Path.cwd()
    except OSError:  # the current folder was deleted: nothing to protect
        return
    target = path.resolve()
    if target == here or target in here.parents:
        where = "the folder you are in" if target == here else f"above the folder you are in ({here})"
        raise OctlmError(
            f"{flag} {path}: is {where}; octlm builds its output beside {flag} and moves it into place, which cannot replace "
            f"that folder; give a new folder instead, e.g. {path / 'out' if target != here else 'out'}"
        )


def check_out_spares(out: Path, flag: str, inputs: Iterable[tuple[str, str | Path | None]]) -> None:
    """Refuse an output folder that is, or holds, one of the command's inputs: a new output replaces it, input and all.

    ``inputs`` are ``(flag, path)`` pairs; paths that name nothing on disk (a built-in corpus) are skipped.

    Raises:
        OctlmError: naming both flags and the fix.
    """
    target = out.resolve()
    for name, given in inputs:
        if not given or not Path(given).exists():
            continue
        source = Path(given).resolve()
        if source == target or target in source.parents:
            where = "is" if source == target else "holds"
            raise OctlmError(f"{flag} {out} {where} {name} {given}, which this command reads, and a new output replaces {flag}; "
                             f"choose another {flag} (the input is never changed)")


def make_folder(path: Path, flag: str = "--out") -> None:
    """``mkdir -p`` for an output folder, with the file system's refusal as an :class:`OctlmError` naming ``flag``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OctlmError(f"{flag} {path}: cannot create it ({err.strerror or err}); choose a folder you can write to") from None


def make_staging(path: Path, flag: str = "--out") -> Path:
    """A new hidden folder beside ``path`` to build it in, so that ``path`` appears only when complete.

    Raises:
        OctlmError: naming ``flag`` when the folder above cannot be created or written to.
    """
    make_folder(path.parent, flag)
    remove_stale_staging(path)
    try:
        # The pid in the name tells a later command whether the owner still runs (remove_stale_staging).
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-{os.getpid()}-", dir=path.parent))
    except OSError as err:
        raise OctlmError(f"{flag} {path}: cannot write in {path.parent} ({err.strerror or err}); choose a folder you can write to") from None


def remove_stale_staging(path: Path) -> list[Path]:
    """Remove the hidden staging folders beside ``path`` whose owning process is gone (killed with -9), and say so on stderr.

    A staging folder is named ``.NAME.partial-PID-XXXX`` (:func:`make_staging`);
    one whose process still runs, or whose name holds no pid (made by an
    older octlm), is left alone. Returns the folders removed.
    """
    removed = []
    for staging in path.parent.glob(f".{glob.escape(path.name)}.partial-*"):
        pid = staging.name[len(path.name) + len(".") + len(".partial-"):].split("-")[0]
        if pid.isascii() and pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    if removed:
        print(f"warning: removed {len(removed)} staging folder(s) beside {path} left by an octlm process that no longer runs: "
              f"{', '.join(p.name for p in removed)}", file=sys.stderr)
    return removed


def _process_alive(pid: int) -> bool:
    try:  # on Windows os.kill ends the process instead of asking about it: there a folder is never stale
        os.name == "nt" or os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process, or a system that cannot tell: keep its folder
    return True


__all__ = ["check_out_folder", "check_out_spares", "make_folder", "make_staging", "remove_stale_staging"]
