"""An output folder and the one overwrite policy of every command that writes one.

:meth:`OutputFolder.check_target` refuses, before anything is written, a
folder that holds files the command may not replace (or any files without
``overwrite``); :meth:`OutputFolder.staged` then builds the new folder hidden
beside it and swaps it in only when complete, so bad input never loses the old
folder. The path checks and the rename are :mod:`octlm.run.outputs`'s; a run
folder (:class:`octlm.run.folder.RunFolder`) is an output folder that also
knows a run's files.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

from octlm.errors import OctlmError
from octlm.fileio import umask
from octlm.run.outputs import check_out_folder, make_folder, make_staging, move_into_place


class OutputFolder:
    """One output folder: checking it before anything is written, creating it, and replacing it whole.

    Every command that writes a folder (train, length, import-hf, export-hf,
    embeddings, export-web) goes through here. ``flag`` is how error messages
    name the folder (``--out``, ``RUN_DIR``...).
    """

    def __init__(self, path: str | Path, flag: str = "--out") -> None:
        self.path = Path(path)
        self.flag = flag
        # what check_target saw: a folder that appears after it was written by someone else, not by this command
        self._had_files: bool | None = None

    def __str__(self) -> str:
        return str(self.path)

    def names(self) -> list[str]:
        """The folder's entries, hidden ones (octlm's lock and temporaries) left out."""
        return [p.name for p in self.path.iterdir() if not p.name.startswith(".")]

    def has_files(self) -> bool:
        """Whether the folder exists and holds anything."""
        return self.path.is_dir() and any(self.path.iterdir())

    def check_target(
        self,
        overwrite: bool,
        refuse: Callable[[Self], str | None],
        occupied: str,
        foreign: Callable[[Self], list[str]] | None = None,
    ) -> None:
        """Refuse, before anything is written, a folder that this command may not (re)write.

        Args:
            overwrite: whether the person allowed replacing what is there.
            refuse: for a folder that holds files, the message that forbids
                replacing them even with ``overwrite``, or ``None`` when they
                may be replaced.
            occupied: the message when the folder holds files and
                ``overwrite`` is not set.
            foreign: for a folder that ``overwrite`` would replace, what it
                holds that this command did not write (a person's notes, a run
                put inside a run); any is refused, by name, with or without
                ``overwrite`` (``None``: no check).

        Raises:
            OctlmError: with one of those messages, or when the path cannot be
                a folder (:func:`check_out_folder`).
        """
        check_out_folder(self.path, self.flag)
        self._had_files = self.has_files()
        if self._had_files:
            reason = refuse(self)
            if reason is not None:
                raise OctlmError(reason)
            # Before the hint to add --overwrite: that hint would lead to this refusal.
            found = [] if foreign is None else sorted(foreign(self))
            if found:
                shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
                raise OctlmError(
                    f"{self.flag} {self.path}: holds {shown} besides what this command writes; "
                    f"--overwrite replaces only its own output: move them out, or choose another {self.flag}"
                )
            if not overwrite:
                raise OctlmError(occupied)

    def create(self) -> None:
        """Check the path and create the folder (``mkdir -p``), keeping what it holds."""
        check_out_folder(self.path, self.flag)
        make_folder(self.path, self.flag)

    def recreate(self) -> None:
        """Replace the folder with an empty one in place, for work whose files must record their final paths.

        Only after :meth:`check_target`, and after every check of the input:
        the old folder is gone once this returns. ``octlm length`` uses it,
        since its runs record where they live and an interrupted study keeps
        the runs it finished.
        """
        try:
            if self.path.exists():
                shutil.rmtree(self.path)
        except OSError as err:
            raise OctlmError(
                f"{self.flag} {self.path}: cannot replace it ({err.strerror or err}); "
                "choose a new folder you can write to"
            ) from None
        make_folder(self.path, self.flag)

    @contextlib.contextmanager
    def staged(self, mode: int | None = None) -> Iterator[Path]:
        """A hidden folder beside this one to build it in; it replaces this folder only on success.

        On an exception the hidden folder is removed and this folder is left
        as it was. On success the old folder is first renamed aside, so that
        the folder's name always points at a whole folder, old or new. Call
        :meth:`check_target` first: whatever is here is replaced.

        Args:
            mode: the new folder's permissions; by default what ``mkdir`` gives.

        Raises:
            OctlmError: for a path no rename can replace (a mount point, a
                link: :func:`make_staging`), and when the rename fails
                (:func:`move_into_place`); no hidden folder is left either way.
        """
        staging = make_staging(self.path, self.flag)
        staging.chmod(0o777 & ~umask() if mode is None else mode)
        try:
            yield staging
            self.check_still_ours()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        move_into_place(staging, self.path, self.flag)

    def check_still_ours(self) -> None:
        """Just before the swap: refuse a folder that another process wrote here since :meth:`check_target`, which
        the swap would otherwise delete (two commands started with the same ``--out`` at once).

        Raises:
            OctlmError: when the folder was empty or absent at the check and holds files now.
        """
        if self._had_files is False and self.has_files():
            raise OctlmError(
                f"{self.flag} {self.path}: another process wrote this folder while this command was preparing its "
                f"own, so nothing was written; choose another {self.flag}, or wait for the other and add --overwrite"
            )


__all__ = ["OutputFolder"]
