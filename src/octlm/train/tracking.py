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
  are its parameters, the loss figure an artifact.

Scalars are named ``train/loss``, ``train/lr``, ``train/tokens_per_second``,
``eval/val_loss``, ``eval/val_bpb`` (bits per byte) ..., one per number of the
record, at the record's step. Each tracker is an optional extra
(``pip install 'octlm[tensorboard]'``); asking for one that is not installed
fails before anything is read or trained, naming the extra.

A resumed run continues the same tracker run with no step twice: TensorBoard
purges what it holds from the resumed step on (``purge_step``) and the records
``metrics.jsonl`` kept from there are written again; MLflow, whose metric
history cannot be edited, skips each number it already holds at that step.
A tracker added on resume first receives everything ``metrics.jsonl`` holds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

from octlm.errors import OctlmError

#: Tracker name: (the package it needs, the octlm extra that installs it).
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}
#: The record kinds whose numbers trackers receive (``finished`` marks the end and holds none).
LOGGED_KINDS = ("train", "eval")


def check_trackers(names: list[str]) -> None:
    """Raise unless every tracker in ``names`` is installed.

    Raises:
        OctlmError: naming the tracker and the extra to install, e.g. ``pip install 'octlm[tensorboard]'``.
    """
    for name in names:
        if name not in TRACKERS:
            raise OctlmError(f"--log-to {name}: unknown tracker; choose from {', '.join(TRACKERS)}")
        package, extra = TRACKERS[name]
        if importlib.util.find_spec(package) is None:
            raise OctlmError(
                f"--log-to {name}: the {package} package is not installed; pip install 'octlm[{extra}]' (or leave out "
                f"--log-to {name})"
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

    def __init__(self, run_dir: Path, options: dict, resume_step: int | None, group: str) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        log_dir = run_dir / "tensorboard"
        continuing = resume_step is not None and log_dir.is_dir()
        # purge_step hides whatever the folder holds from that step on: the part of a crashed session after its
        # checkpoint.
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=resume_step if continuing else None)
        self.first_step = resume_step if continuing else 0
        if not continuing:
            values = {**hyperparameters(options), "log_group": group}
            for summary in hparams(values, {"eval/val_bpb": 0.0, "eval/val_loss": 0.0}):
                self.writer.file_writer.add_summary(summary)

    def log(self, record: dict) -> None:
        if record["step"] < self.first_step:
            return  # still held from before the resumed step
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, record["step"])

    def figure(self, name: str, path: Path, step: int) -> None:
        import matplotlib.image

        image = matplotlib.image.imread(str(path))[..., :3]  # [H, W, 3] floats in [0, 1]
        self.writer.add_image(f"figures/{name}", image, step, dataformats="HWC")

    def close(self, finished: bool) -> None:
        self.writer.close()


class MlflowTracker:
    """Metrics, parameters and figures in one MLflow run, found again on resume by its ``octlm.run_dir`` tag."""

    def __init__(self, run_dir: Path, options: dict, resume_step: int | None, group: str) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not self.uri:
            # MLflow 3 keeps its file store (no database, no server) but refuses it unless asked: a run folder
            # should need nothing installed beside it. A store named in MLFLOW_TRACKING_URI is used as it is.
            self.uri = (run_dir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = MlflowClient(tracking_uri=self.uri)
        experiment = client.get_experiment_by_name(group)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(group)
        where = str(run_dir.resolve())
        found = client.search_runs([experiment_id], filter_string=f"tags.`octlm.run_dir` = '{where}'", max_results=1)
        self.last_step: dict[str, int] = {}
        if found:
            self.run_id = found[0].info.run_id
            for key in found[0].data.metrics:
                self.last_step[key] = max(m.step for m in client.get_metric_history(self.run_id, key))
            client.update_run(self.run_id, status="RUNNING")
        else:
            run = client.create_run(
                experiment_id, run_name=run_dir.name, tags={"octlm.run_dir": where, "octlm.group": group}
            )
            self.run_id = run.info.run_id
            params = [Param(k, str(v)) for k, v in hyperparameters(options).items()]
            for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
                client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, record: dict) -> None:
        from mlflow.entities import Metric

        step, now = record["step"], int(time.time() * 1000)
        metrics = [
            Metric(key, value, now, step)
            for key, value in scalars(record).items()
            if step > self.last_step.get(key, -1)
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)
            self.last_step.update({m.key: step for m in metrics})

    def figure(self, name: str, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="figures")

    def close(self, finished: bool) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if finished else "KILLED")


_CLASSES = {"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker}


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
        OctlmError: naming the extra to install, when a tracker cannot be imported.
    """

    def __init__(
        self, run_dir: Path, path: Path, names: list[str], options: dict, resume_step: int | None, group: str
    ) -> None:
        self.handle = path.open("a", encoding="utf-8")
        self.trackers = []
        for name in names:
            try:
                self.trackers.append(_CLASSES[name](run_dir, options, resume_step, group))
            except ImportError as err:
                self.handle.close()
                raise OctlmError(
                    f"--log-to {name}: cannot import {err.name or TRACKERS[name][0]}; pip install "
                    f"'octlm[{TRACKERS[name][1]}]'"
                ) from None
        if self.trackers and path.stat().st_size:
            for line in path.read_text(encoding="utf-8").splitlines():
                self._to_trackers(json.loads(line))

    def _to_trackers(self, record: dict) -> None:
        for tracker in self.trackers:
            tracker.log(record)

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
    "MetricsLog",
    "open_metrics",
    "MlflowTracker",
    "TRACKERS",
    "TensorBoardTracker",
    "check_trackers",
    "hyperparameters",
    "scalars",
]
