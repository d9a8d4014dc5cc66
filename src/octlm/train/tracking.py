"""``metrics.jsonl`` and the experiment trackers of ``--log-to``: one record in, the same numbers everywhere.

:class:`MetricsLog` writes each record of the training loop as a line of
``metrics.jsonl`` (as before) and hands its numbers to each tracker asked for:

* ``tensorboard``: an event file in ``tensorboard/`` inside the run folder
  (``tensorboard --logdir`` on the run, or on a study, which shows each model
  as its own run). The run's options are its hyperparameters (the hparams
  plugin), the loss figure an image.
* ``mlflow``: a run in a local MLflow store, ``mlruns/`` inside the run folder
  (MLflow's file store, which MLflow 3 keeps in maintenance mode:
  ``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:RUN/mlruns``),
  or the store ``$MLFLOW_TRACKING_URI`` names (``sqlite:///mlflow.db`` with the
  full ``mlflow`` package), under the experiment ``--log-group``; the options
  are its parameters, the loss figure an artifact. Every new run, ``--overwrite``
  included, is a new MLflow run, whose id the run folder keeps in
  ``trackers.json`` (:mod:`octlm.train.mlflow_tracker`).

Scalars are named ``train/loss``, ``train/lr``, ``train/tokens_per_second``,
``eval/val_loss``, ``eval/val_bpb`` (bits per byte) ..., one per number of the
record, at the record's step. Each tracker is an optional extra
(``pip install 'octlm[tensorboard]'``); asking for one that is not installed,
naming one twice, or a ``--log-group`` MLflow cannot take (blank, over 500
characters, a deleted experiment) fails before anything is read or trained.

A resumed run continues the same tracker run with no step twice: TensorBoard
purges what it holds from the resumed step on (``purge_step``) and the records
``metrics.jsonl`` kept from there are written again; MLflow continues the run
``trackers.json`` names and, as its metric history cannot be edited, skips each
number it already holds at that step.
A tracker added on resume first receives everything ``metrics.jsonl`` holds.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from octlm.errors import OctlmError
from octlm.train.mlflow_tracker import MlflowTracker

#: Tracker name: (the package it needs, the octlm extra that installs it).
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}
#: The record kinds whose numbers trackers receive (``finished`` marks the end and holds none).
LOGGED_KINDS = ("train", "eval")
#: The longest experiment name MLflow takes (its ``MAX_EXPERIMENT_NAME_LENGTH``), in characters.
MAX_GROUP_LENGTH = 500


def check_trackers(names: list[str]) -> None:
    """Raise unless every tracker in ``names`` is installed, each named once.

    Raises:
        OctlmError: naming a tracker given twice (two writers into one run would log every number twice), or the
            tracker and the extra to install, e.g. ``pip install 'octlm[tensorboard]'``.
    """
    twice = [name for at, name in enumerate(names) if name in names[:at]]
    if twice:
        raise OctlmError(
            f"--log-to names {twice[0]} twice; give each tracker once: --log-to {' '.join(dict.fromkeys(names))}"
        )
    for name in names:
        if name not in TRACKERS:
            raise OctlmError(f"--log-to {name}: unknown tracker; choose from {', '.join(TRACKERS)}")
        package, extra = TRACKERS[name]
        if importlib.util.find_spec(package) is None:
            raise OctlmError(
                f"--log-to {name}: the {package} package is not installed; "
                f"pip install 'octlm[{extra}]' (or leave out --log-to {name})"
            )


def check_log_group(name: str) -> None:
    """Raise unless ``name`` is an experiment name MLflow takes: not blank, at most :data:`MAX_GROUP_LENGTH`
    characters. Checked whatever ``--log-to`` holds, so that the group a run records could file it in any tracker.

    Raises:
        OctlmError: naming the value (cut short when long) and the fix.
    """
    if not name.strip():
        raise OctlmError(f"--log-group must name an experiment, got {name!r}; leave it out for 'octlm'")
    if len(name) > MAX_GROUP_LENGTH:
        raise OctlmError(
            f"--log-group {name[:40]}...: {len(name)} characters, and MLflow takes experiment names of at most "
            f"{MAX_GROUP_LENGTH}; choose a shorter name"
        )


def scalars(record: dict) -> dict[str, float]:
    """The numbers of one ``metrics.jsonl`` record as tracker scalars: ``{"train/loss": 3.2, ...}`` (the step left
    out)."""
    if record.get("kind") not in LOGGED_KINDS:
        return {}
    return {
        f"{record['kind']}/{key}": float(value)
        for key, value in record.items()
        if key not in ("step", "kind") and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def hyperparameters(options: dict) -> dict[str, str | int | float | bool]:
    """The run's options as tracker hyperparameters: numbers, strings and booleans as they are, the rest (lists, None)
    as text."""
    return {k: v if isinstance(v, (str, int, float, bool)) else json.dumps(v) for k, v in sorted(options.items())}


class TensorBoardTracker:
    """Scalars, hyperparameters and figures in ``RUN/tensorboard/``, through torch's ``SummaryWriter``."""

    def __init__(self, run_dir: Path, hparams: dict, resume_step: int | None, group: str) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        log_dir = run_dir / "tensorboard"
        continuing = resume_step is not None and log_dir.is_dir()
        # purge_step hides whatever the folder holds from that step on: the part of a crashed session after its
        # checkpoint.
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=resume_step if continuing else None)
        self.first_step = resume_step if continuing else 0
        if not continuing:
            values = {**hparams, "log_group": group}
            for summary in hparams_summaries(values, {"eval/val_bpb": 0.0, "eval/val_loss": 0.0}):
                self.writer.file_writer.add_summary(summary)

    def log(self, step: int, numbers: dict[str, float]) -> None:
        if step < self.first_step:
            return  # still held from before the resumed step
        for tag, value in numbers.items():
            self.writer.add_scalar(tag, value, step)

    def figure(self, name: str, path: Path, step: int) -> None:
        import matplotlib.image

        image = matplotlib.image.imread(str(path))[..., :3]  # [H, W, 3] floats in [0, 1]
        self.writer.add_image(f"figures/{name}", image, step, dataformats="HWC")

    def close(self, finished: bool) -> None:
        self.writer.close()


_CLASSES = {"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker}


def _open_tracker(name: str, run_dir: Path, hparams: dict, resume_step: int | None, group: str):
    try:
        return _CLASSES[name](run_dir, hparams, resume_step, group)
    except ImportError as err:
        raise OctlmError(
            f"--log-to {name}: cannot import {err.name or TRACKERS[name][0]}; pip install 'octlm[{TRACKERS[name][1]}]'"
        ) from None


def _records(path: Path) -> list[dict]:
    """The records of a resumed run's ``metrics.jsonl``, to hand to its trackers.

    Raises:
        OctlmError: naming the file and line of a record that is not whole JSON (the file was edited or damaged).
    """
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise OctlmError(
                f"{path} line {number} is not a whole metrics record, so the trackers cannot be given the run's steps "
                "so far; restore the file from a copy, or resume without --log-to"
            )
        records.append(record)
    return records


class MetricsLog:
    """``metrics.jsonl`` (opened to append) and the trackers of ``--log-to``, fed the same records.

    Args:
        run_dir: the run folder.
        names: trackers to log to (:data:`TRACKERS`), checked by :func:`check_trackers`.
        options: the run's options, as the trackers' hyperparameters.
        resume_step: the step the run resumes from (``None`` for a fresh run);
            records ``metrics.jsonl`` holds are handed to the trackers that lack them.
        group: the experiment or group the trackers file the run under.

    Raises:
        OctlmError: naming the extra to install, when a tracker cannot be imported, or the experiment ``group``
            when MLflow's was deleted (the trackers opened before are closed).
    """

    def __init__(
        self, run_dir: Path, path: Path, names: list[str], options: dict, resume_step: int | None, group: str
    ) -> None:
        self.handle = path.open("a", encoding="utf-8")
        self.trackers = []
        hparams = hyperparameters(options)
        try:
            for name in names:
                self.trackers.append(_open_tracker(name, run_dir, hparams, resume_step, group))
        except BaseException:
            self.close(finished=False)
            raise
        if self.trackers and path.stat().st_size:
            try:
                for record in _records(path):
                    self._to_trackers(record)
            except BaseException:
                self.close(finished=False)
                raise

    def _to_trackers(self, record: dict) -> None:
        numbers = scalars(record)
        if not numbers:
            return  # a record with no numbers (``finished``)
        for tracker in self.trackers:
            tracker.log(record["step"], numbers)

    def log(self, record: dict) -> None:
        """Append ``record`` to ``metrics.jsonl`` (flushed) and give its numbers to every tracker."""
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()
        self._to_trackers(record)

    def figure(self, name: str, path: Path, step: int) -> None:
        """Give a finished figure (a PNG) to every tracker that takes images."""
        for tracker in self.trackers:
            tracker.figure(name, path, step)

    def flush(self) -> None:
        self.handle.flush()

    def close(self, finished: bool = True) -> None:
        """Close the file and end each tracker's run (finished, or stopped before its end)."""
        self.handle.close()
        for tracker in self.trackers:
            tracker.close(finished)


def open_metrics(folder, opts, resume_step: int | None) -> MetricsLog:
    """The :class:`MetricsLog` of run folder ``folder`` (a :class:`~octlm.run.folder.RunFolder`) for options ``opts``.

    Raises:
        OctlmError: naming the extra to install, when a tracker of ``opts.log_to`` cannot be imported.
    """
    return MetricsLog(folder.path, folder.metrics_path, list(opts.log_to), opts.to_dict(), resume_step, opts.log_group)


__all__ = [
    "LOGGED_KINDS",
    "MAX_GROUP_LENGTH",
    "MetricsLog",
    "open_metrics",
    "MlflowTracker",
    "TRACKERS",
    "TensorBoardTracker",
    "check_log_group",
    "check_trackers",
    "hyperparameters",
    "scalars",
]
