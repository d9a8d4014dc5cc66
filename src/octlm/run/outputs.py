"""Output folders: refusing a path that cannot become one, creating it, and building it hidden beside itself.

A new run's prepared corpus, the embeddings figures, the web page and the
transformers export and import are built in a staging folder
``.NAME.partial-PID-XXXX`` next to the target and renamed into place only when
complete (:meth:`octlm.run.folder.RunFolder.staged`), so a crash or Ctrl-C never leaves
a half-written folder under the name asked for. That rename cannot replace a
mount point (Docker's ``-v host:/out``, then ``--out /out``), a symbolic link
or the folder a shell stands in: :func:`check_out_folder` refuses them, once
for every command, when the target is checked and again when staging begins.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from octlm.errors import OctlmError

#: The folders the experiment trackers of ``--log-to`` write inside a run folder (:mod:`octlm.train.tracking`), each
#: with the rule for the names they write there: ``--overwrite`` may replace them, as octlm's own.
TRACKER_FOLDERS = {"tensorboard": lambda name: name.startswith("events.out.tfevents."), "mlruns": lambda name: True}
#: The file in a run folder naming its tracker runs (the MLflow run's store, experiment and id), which a resume
#: continues (:mod:`octlm.train.mlflow_tracker`).
TRACKER_RUNS = "trackers.json"


def check_out_folder(path: Path, flag: str = "--out") -> None:
    """Refuse, before anything is written, an output path that cannot become a folder.

    Raises:
        OctlmError: naming ``flag`` and the path when the path is not valid
            UTF-8 (run files record paths as UTF-8 text), when it exists and
            is not a folder, when a folder above it is a file, when it is
            the current folder or one above it (``--out .``), a symbolic
            link or a mount point (:func:`is_mount_point`), or when the folder
            its output is built in cannot be written to.
    """
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        raise OctlmError(f"{flag} {str(path)!r}: the path is not valid UTF-8; choose a name that is") from None
    _check_not_where_you_are(path, flag)
    # The output is built beside the path and renamed over it: a link would be replaced by a folder (its
    # target kept) and a mount point cannot be renamed at all.
    if path.is_symlink():
        raise OctlmError(
            f"{flag} {path}: is a symbolic link (to {os.readlink(path)}); give the folder it points to, or a new folder"
        )
    if is_mount_point(path):
        inside = (
            f"a new folder inside it, e.g. {path / 'out'}"
            if os.access(path, os.W_OK)
            else "a new folder where you can write (it is read-only)"
        )
        raise OctlmError(f"{flag} {path}: is a mount point, which octlm cannot replace; give {inside}")
    for above in (path, *path.parents):
        if above.exists():
            if not above.is_dir():
                what = "exists and is not a folder" if above == path else f"{above} is a file, not a folder"
                raise OctlmError(f"{flag} {path}: {what}; choose another {flag}")
            _check_writable(path.parent if above == path else above, path, flag)
            return


def _check_writable(where: Path, path: Path, flag: str) -> None:
    # The hidden staging folder is made in `where` (the folder above --out, or the first of its parents that exists):
    # a read-only mount or a folder of someone else's would refuse it only after all the work was done.
    if not os.access(where, os.W_OK | os.X_OK):
        why = os.strerror(errno.EROFS if _read_only(where) else errno.EACCES)
        raise OctlmError(f"{flag} {path}: cannot write in {where} ({why}); choose a folder you can write to")


def _read_only(where: Path) -> bool:
    try:
        return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # Windows has no statvfs
        return False


#: Linux's list of this process's mounts; read by :func:`is_mount_point` (a test points it at a file of its own).
MOUNTINFO = Path("/proc/self/mountinfo")


def is_mount_point(path: Path) -> bool:
    """Whether ``path`` is a mount point, a bind mount of a folder from the same file system included.

    :func:`os.path.ismount` compares the device of ``path`` with its parent's,
    which a bind mount (``mount --bind``, Docker's ``-v`` on some hosts)
    shares; on Linux the mount table also lists those.
    """
    if os.path.ismount(path):
        return True
    if not path.is_dir():
        return False
    try:
        table = MOUNTINFO.read_bytes()
    except OSError:  # not Linux, or no /proc: os.path.ismount is all there is
        return False
    target = os.fsencode(os.path.realpath(path))
    # Field 5 of each line is the mount point, with space, tab, newline and backslash written as \ooo.
    points = (line.split(b" ")[4] for line in table.splitlines() if line.count(b" ") >= 4)
    return any(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), point) == target for point in points)


def _check_not_where_you_are(path: Path, flag: str) -> None:
    # The output is built beside the target and renamed over it: the folder a shell stands in cannot be replaced that
    # way.
    try:
        here = Path.cwd()
    except OSError:  # the current folder was deleted: nothing to protect
        return
    target = path.resolve()
    if target == here or target in here.parents:
        where = "the folder you are in" if target == here else f"above the folder you are in ({here})"
        raise OctlmError(
            f"{flag} {path}: is {where}; octlm builds its output beside {flag} and moves it into place, which cannot "
            f"replace that folder; give a new folder instead, e.g. {path / 'out' if target != here else 'out'}"
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
            raise OctlmError(
                f"{flag} {out} {where} {name} {given}, which this command reads, and a new output replaces {flag}; "
                f"choose another {flag} (the input is never changed)"
            )


def make_folder(path: Path, flag: str = "--out") -> None:
    """``mkdir -p`` for an output folder, with the file system's refusal as an :class:`OctlmError` naming ``flag``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OctlmError(
            f"{flag} {path}: cannot create it ({err.strerror or err}); choose a folder you can write to"
        ) from None


def make_staging(path: Path, flag: str = "--out") -> Path:
    """A new hidden folder beside ``path`` to build it in, so that ``path`` appears only when complete.

    Raises:
        OctlmError: naming ``flag`` when ``path`` cannot be replaced by a
            rename (:func:`check_out_folder`, checked here too so that no
            command can stage without it), or when the folder above cannot be
            created or written to.
    """
    check_out_folder(path, flag)
    make_folder(path.parent, flag)
    remove_stale_staging(path)
    try:
        # The pid in the name tells a later command whether the owner still runs (remove_stale_staging).
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-{os.getpid()}-", dir=path.parent))
    except OSError as err:
        raise OctlmError(
            f"{flag} {path}: cannot write in {path.parent} ({err.strerror or err}); choose a folder you can write to"
        ) from None


def move_into_place(staging: Path, path: Path, flag: str = "--out") -> None:
    """Rename the finished ``staging`` folder to ``path``, an old folder there first renamed aside and then removed.

    Raises:
        OctlmError: naming ``flag``, the path and the fix when the file system
            refuses a rename; ``staging`` is removed and ``path`` left as it was.
    """
    old = path.with_name(f".{path.name}.old")
    aside = False
    try:
        if os.path.lexists(path):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            aside = True
        os.replace(staging, path)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        kept = ""
        if aside:
            try:
                os.replace(old, path)
            except OSError:
                kept = f"; the earlier {path.name} is in {old}"
        raise OctlmError(
            f"{flag} {path}: cannot move the finished output into place ({err.strerror or err}), "
            f"so nothing was written there{kept}; octlm builds {flag} beside it and renames it in, "
            "which a mount point or a read-only folder refuses: give a new folder you can write to, e.g. "
            f"{path / 'out'} when {path} is a mount point"
        ) from None
    shutil.rmtree(old, ignore_errors=True)


def remove_stale_staging(path: Path) -> list[Path]:
    """Remove the hidden staging folders beside ``path`` whose owning process is gone (killed with -9), and say so on
    stderr.

    A staging folder is named ``.NAME.partial-PID-XXXX`` (:func:`make_staging`);
    one whose process still runs, or whose name holds no pid (made by an
    older octlm), is left alone. Returns the folders removed.
    """
    removed = []
    for staging in path.parent.glob(f".{glob.escape(path.name)}.partial-*"):
        pid = staging.name[len(path.name) + len(".") + len(".partial-") :].split("-")[0]
        if pid.isascii() and pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    if removed:
        print(
            f"warning: removed {len(removed)} staging folder(s) beside {path} left by an octlm process that no longer "
            f"runs: {', '.join(p.name for p in removed)}",
            file=sys.stderr,
        )
    return removed


def _process_alive(pid: int) -> bool:
    try:  # on Windows os.kill ends the process instead of asking about it: there a folder is never stale
        os.name == "nt" or os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process, or a system that cannot tell: keep its folder
    return True


__all__ = [
    "check_out_folder",
    "check_out_spares",
    "is_mount_point",
    "make_folder",
    "make_staging",
    "move_into_place",
    "remove_stale_staging",
]
