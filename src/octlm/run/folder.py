"""Run folders: what a training run leaves on disk, and loading it back.

A run folder holds

* ``config.json``       -- ``{"model": DecoderConfig fields, "train": resolved options}``, and ``"plugin"``
  (what ``--plugin`` takes) when the scheme comes from outside octlm
* ``model.safetensors`` -- the weights; the tied head is stored once, as the token table
* ``tokenizer.json``    -- the Hugging Face tokenizer
* ``manifest.json``     -- what was read (paths, bytes, sha256) and the token files
* ``train.bin``, ``val.bin`` -- token streams (numpy memmaps)
* ``metrics.jsonl``     -- one JSON object per training or evaluation event
* ``checkpoint.safetensors`` -- weights, AdamW state, generators and step (:mod:`octlm.train.checkpoint`)
* ``.lock``             -- held while a process trains the run
* ``trackers.json``     -- with ``--log-to mlflow``, the MLflow run a resume continues

Every file is written atomically (:mod:`octlm.fileio`); :class:`RunFolder` owns the
folder itself: its names and reading it back, and, as an
:class:`~octlm.run.output_folder.OutputFolder`, creating and replacing it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
from pathlib import Path

import numpy as np

from octlm.data import tokens
from octlm.data.tokenizer import Tokenizer
from octlm.errors import OctlmError, RunError
from octlm.fileio import atomic_write_json
from octlm.model import DecoderConfig
from octlm.run.output_folder import OutputFolder
from octlm.run.outputs import TRACKER_FOLDERS, TRACKER_RUNS

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
#: Written by :mod:`octlm.train.checkpoint` while the run trains.
CHECKPOINT = "checkpoint.safetensors"
#: Where ``octlm embeddings`` puts its figures by default, inside the run folder, and their names.
EMBEDDINGS = "embeddings"
EMBEDDINGS_FIGURES = ("positions.png", "tokens-pca.png")
#: Where ``octlm attention`` puts its figures and statistics by default, and the names it writes there.
ATTENTION = "attention"
ATTENTION_FILES = re.compile(r"layer-\d+\.png|statistics\.png|statistics\.json|frequencies\.png")
#: octlm's own folders inside a run, each with the rule for the names it writes there.
RUN_SUBFOLDERS = {
    EMBEDDINGS: EMBEDDINGS_FIGURES.__contains__,
    ATTENTION: lambda name: ATTENTION_FILES.fullmatch(name) is not None,
    **TRACKER_FOLDERS,
}
#: Everything octlm writes into a run folder: what ``--overwrite`` may replace (:meth:`RunFolder.foreign_files`).
RUN_FILES = frozenset(
    {
        CONFIG,
        WEIGHTS,
        TOKENIZER,
        MANIFEST,
        METRICS,
        CHECKPOINT,
        "train.bin",
        "val.bin",
        "loss.png",
        TRACKER_RUNS,
        *RUN_SUBFOLDERS,
    }
)
#: Held by the process that trains the run (:meth:`RunFolder.lock`).
LOCK = ".lock"


def read_json(path: Path) -> dict:
    """Parse a JSON file of a run (an object), raising ``RunError`` naming it when absent, malformed or no object."""
    if not path.is_file():
        runs = sorted(p for p in (path.parent / "runs").glob("*") if (p / path.name).is_file())  # a study's models
        hint = (
            f"is a study, not a run; give one of its runs, e.g. {runs[0]}"
            if runs
            else f"missing; is {path.parent} an octlm run folder?"
        )
        raise RunError(f"{path.parent if runs else path}: {hint}")
    fix = "the file is damaged; restore it from a copy, or train the run again (--overwrite)"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunError(f"{path}: not valid JSON ({err}); {fix}") from None
    if not isinstance(value, dict):
        raise RunError(f"{path}: holds a JSON {type(value).__name__}, not the object octlm writes; {fix}")
    return value


def file_not_folder(path: Path) -> str:
    """What to say of a file given where a run folder goes: its folder when that holds a run, else what one holds."""
    if (path.parent / CONFIG).is_file():
        return f"is a file; give the run folder that holds it ({path.parent})"
    return f"is a file, not an octlm run folder (one holds {CONFIG} and {WEIGHTS}; `octlm train --out DIR` makes one)"


class RunFolder(OutputFolder):
    """One run or output folder: its file names and reading a run back, and the checks and lock of a new run.

    Every reader of a run's ``config.json`` and ``manifest.json`` goes through
    here. As an :class:`~octlm.run.output_folder.OutputFolder` it is also what
    every command that writes a folder checks, creates and replaces, under the
    one overwrite policy that class holds.
    """

    @classmethod
    def new(cls, out: str | None, flag: str = "--out") -> RunFolder:
        """The folder ``out`` names, or ``runs/<date>-<time>`` when ``out`` is ``None``."""
        if out is None:
            out = f"runs/{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
        return cls(out, flag)

    # -- file names -----------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    def token_path(self, split: str) -> Path:
        """``train.bin`` or ``val.bin``."""
        return self.path / f"{split}.bin"

    # -- what the folder holds ------------------------------------------------------------------
    def is_octlm_run(self) -> bool:
        """Whether the folder holds an octlm run (trained, imported or half-made), by its own files.

        A ``manifest.json`` that lists token files, or a ``config.json`` that
        octlm wrote (it records ``octlm_version``); a transformers checkpoint's
        ``config.json``, or a person's own ``manifest.json``, does not count.
        """
        return "tokens" in _json_object(self.manifest_path) or "octlm_version" in _json_object(self.config_path)

    def kind(self) -> str | None:
        """What the folder holds, by its own files: ``"octlm run"``, ``"transformers checkpoint"``, ``"web page"``, or
        ``None``."""
        if self.is_octlm_run():
            return "octlm run"
        if "model_type" in _json_object(self.config_path):
            return "transformers checkpoint"
        if (self.path / "index.html").is_file() and (self.path / "run-data.js").is_file():
            return "web page"
        return None

    def kind_hint(self) -> str | None:
        """For a folder that is not what a command wanted: what it is and the command that fits it, or ``None``."""
        kind = self.kind()
        if kind == "transformers checkpoint":
            model_type = _json_object(self.config_path)["model_type"]
            return (
                f"this is a transformers checkpoint (model_type {model_type!r}), not an octlm run; "
                f"bring it into octlm with `octlm import-hf {self.path} RUN_DIR`"
            )
        if kind == "web page":
            return (
                f"this is a page written by octlm export-web, not a run; open {self.path / 'index.html'}, or give the "
                "run folder it came from"
            )
        return None

    def stopped_before_first_checkpoint(self) -> bool:
        """Whether the folder holds a run that never saved a trained step: its ``config.json``, no checkpoint, no
        weights.

        ``octlm train --resume`` trains such a run from step 0 on its prepared corpus.
        """
        return self.config_path.is_file() and not (self.path / CHECKPOINT).exists() and not self.weights_path.exists()

    def foreign_files(self) -> list[str]:
        """What in this run folder octlm did not write (relative paths): all that ``--overwrite`` must not delete."""
        found = [name for name in self.names() if name not in RUN_FILES]
        for subfolder, ours in RUN_SUBFOLDERS.items():
            inside = RunFolder(self.path / subfolder)
            if inside.path.is_dir():
                found += [f"{subfolder}/{name}" for name in inside.names() if not ours(name)]
            elif inside.path.exists():
                found.append(subfolder)
        return found

    def read_config(self) -> dict:
        """``config.json`` as a dict with ``model`` and ``train`` sections.

        Raises:
            RunError: naming the file when it is missing, malformed or has no ``model`` section.
        """
        if hint := self.kind_hint():
            raise RunError(f"{self.path}: {hint}")
        config = read_json(self.config_path)
        if "model" not in config:
            raise RunError(f"{self.config_path}: has no 'model' section; not an octlm run config")
        return config

    def train_section(self) -> dict | None:
        """The ``train`` section of ``config.json`` when the file is there, else ``None``."""
        return self.read_config().get("train") if self.config_path.is_file() else None

    def write_config(self, model_config: DecoderConfig, train_options: dict) -> None:
        """Write ``config.json`` (the octlm version that wrote it, with its commit from a checkout; model shape plus the
        resolved training options, and the plug-in that provides the scheme if one does), atomically."""
        from octlm.model.positions import PLUGIN_SOURCES
        from octlm.version import build_version

        config = {"octlm_version": build_version(), "model": model_config.to_dict(), "train": train_options}
        if model_config.position in PLUGIN_SOURCES:
            config["plugin"] = PLUGIN_SOURCES[model_config.position]
        atomic_write_json(self.config_path, config)

    def read_tokenizer(self) -> Tokenizer:
        """``tokenizer.json``. Raises RunError naming it when it is missing or unreadable."""
        if not self.tokenizer_path.is_file():
            raise RunError(f"{self.tokenizer_path}: missing; is {self.path} an octlm run folder?")
        try:
            return Tokenizer.load(self.tokenizer_path)
        except Exception as err:  # tokenizers raises plain Exception on a bad file
            raise RunError(f"{self.tokenizer_path}: cannot read tokenizer ({err})") from None

    def read_manifest(self) -> dict:
        """``manifest.json``: what was read and the token files. Raises RunError naming it when absent or malformed."""
        return read_json(self.manifest_path)

    def write_manifest(self, manifest: dict) -> None:
        """Write ``manifest.json`` atomically."""
        atomic_write_json(self.manifest_path, manifest)

    def write_tokens(self, split: str, ids: np.ndarray) -> dict:
        """Store a token stream as ``<split>.bin``; returns its manifest entry."""
        return tokens.write_tokens(self.token_path(split), ids)

    def tokens(self, split: str, manifest: dict | None = None) -> np.ndarray:
        """The ``train`` or ``val`` token stream [N] as a read-only memmap, checked against the manifest.

        Raises:
            RunError: when the manifest lists no such file or the file is missing.
            DataError: naming the file when it is damaged (:func:`octlm.data.text.open_tokens`).
        """
        manifest = self.read_manifest() if manifest is None else manifest
        entry = manifest.get("tokens", {}).get(split)
        if entry is None or not (self.path / entry["file"]).is_file():
            raise RunError(f"{self.token_path(split)}: token file missing; the run folder is incomplete")
        return tokens.open_tokens(self.path / entry["file"], entry["dtype"], entry["count"])

    # -- a run's folder as a target, and the process training it ----------------------------------
    def check_new_run(self, overwrite: bool) -> None:
        """:meth:`check_target` for a run folder: only an octlm run is ever replaced, and not while it trains.

        Raises:
            OctlmError: naming the flag, when the folder holds files that are
                not an octlm run, holds a run and ``overwrite`` is not set, or
                another process is training that run.
        """
        flag, path = self.flag, self.path

        def refuse(folder: RunFolder) -> str | None:
            if not folder.is_octlm_run():
                return (
                    f"{flag} {path}: holds files that are not an octlm run, which octlm never replaces; "
                    "choose a new or empty folder"
                )
            return None

        occupied = f"{flag} {path}: already holds an octlm run; choose another {flag} or pass --overwrite to replace it"
        if self.stopped_before_first_checkpoint():
            # What is there is a prepared corpus (Ctrl-C or a kill before the first checkpoint): resume uses it.
            occupied = (
                f"{flag} {path}: holds a run stopped before its first checkpoint (nothing trained was saved); "
                f"train it on its prepared corpus with `octlm train --resume {shlex.quote(str(path))}`, "
                "or pass --overwrite to prepare it anew"
            )
        if (path / LOCK).exists():
            # First: a run another process trains now has no checkpoint yet either, and is no stopped run to resume.
            lock = self.lock()  # raises while another process trains it: --overwrite must not pull it away
            if lock is not None:
                lock.close()
        self.check_target(overwrite, refuse, occupied, foreign=RunFolder.foreign_files)

    def check_still_ours(self) -> None:
        """As :meth:`OutputFolder.check_still_ours`, and refuse a run that another octlm process is training now
        (``--overwrite`` given to both).

        Raises:
            OctlmError: naming the other process.
        """
        super().check_still_ours()
        if (self.path / LOCK).is_file():
            self.lock().close()  # raises while the other process holds it

    def trained_now(self) -> bool:
        """Whether another octlm process holds this run's lock, training it now (``False`` where the system has no
        advisory locks)."""
        if not (self.path / LOCK).is_file():
            return False
        try:
            lock = self.lock()
        except OctlmError:
            return True
        if lock is not None:
            lock.close()
        return False

    def lock(self):
        """Hold an exclusive lock on the folder for this process's lifetime (released even by kill -9).

        Returns the open lock file (close it to release), or ``None`` where
        the system has no advisory locks (Windows).

        Raises:
            OctlmError: when another octlm process is training the same run.
        """
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; resume stays the user's responsibility
            return None
        handle = (self.path / LOCK).open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise OctlmError(
                f"{self.path}: another octlm process ({holder}) is training this run; wait for it or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        return handle

    def rewind_metrics(self, size: int, report) -> None:
        """Cut ``metrics.jsonl`` back to ``size`` bytes (its length at a checkpoint), so no step is logged twice."""
        path = self.metrics_path
        if not path.exists():
            return
        if path.stat().st_size < size:
            report.warn(f"{path} is shorter than when the checkpoint was saved; keeping it as it is")
            return
        with path.open("r+b") as handle:
            handle.truncate(size)

    def remove_stale_temporaries(self, report) -> None:
        """Remove the temporary files a process killed while writing left behind (the real files are intact)."""
        stale = list(self.path.glob(".*.tmp"))
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            report.warn(f"removed {len(stale)} temporary file(s) left by an interrupted write")


def _json_object(path: Path) -> dict:
    # For questions about a folder, not for reading a run: an absent or broken file is no answer.
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


__all__ = [
    "ATTENTION",
    "ATTENTION_FILES",
    "CHECKPOINT",
    "CONFIG",
    "EMBEDDINGS",
    "EMBEDDINGS_FIGURES",
    "RUN_FILES",
    "RUN_SUBFOLDERS",
    "LOCK",
    "MANIFEST",
    "METRICS",
    "TOKENIZER",
    "WEIGHTS",
    "RunFolder",
    "read_json",
]
