"""The MLflow tracker of ``--log-to mlflow``: which store, which experiment, and one MLflow run per octlm run.

The store is the one ``$MLFLOW_TRACKING_URI`` names, else MLflow's file store
in ``RUN/mlruns/``. The experiment is ``--log-group`` (a study's folder name
for its models). A new run, ``--overwrite`` included, always gets a new MLflow
run; its id is kept in the run folder's ``trackers.json``
(:data:`~octlm.run.outputs.TRACKER_RUNS`), and ``--resume`` continues the run
that file names, in the same store and experiment. Nothing searches the store
by the run folder's path, which may hold any character.

:func:`check_experiment` is the look at the store before anything is trained:
an experiment that was deleted cannot take runs, and says how to restore it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from octlm.errors import OctlmError
from octlm.fileio import atomic_write_json
from octlm.run.outputs import TRACKER_RUNS


def _shared_uri() -> str | None:
    """The store ``$MLFLOW_TRACKING_URI`` names, or ``None`` for the run folder's own."""
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    if uri.startswith("file:"):
        # MLflow 3 keeps its file store (no database, no server) but refuses it unless asked: a run folder should need
        # nothing installed beside it.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def _active_experiment(client, group: str, uri: str, flag: str, value: str | None = None) -> str | None:
    """The id of experiment ``group`` in the store at ``uri``: ``None`` when there is none yet.

    Raises:
        OctlmError: when the experiment was deleted (MLflow keeps it, refusing new runs, until it is restored or
            removed for good), naming it, the store and the way to restore it; when the store cannot look the name
            up.
    """
    from mlflow.exceptions import MlflowException

    try:
        experiment = client.get_experiment_by_name(group)
    except MlflowException as err:
        raise OctlmError(
            f"{flag} {value or group}: the MLflow store {uri} cannot look up the experiment name {group!r}: "
            f"{err.message}; choose another {flag}"
        ) from None
    if experiment is None:
        return None
    if experiment.lifecycle_stage != "active":
        raise OctlmError(
            f"{flag} {value or group}: the MLflow experiment {group!r} in {uri} is deleted and takes no new runs; "
            f"restore it (MLFLOW_TRACKING_URI={uri} mlflow experiments restore --experiment-id "
            f"{experiment.experiment_id}) or choose another {flag}"
        )
    return experiment.experiment_id


def check_experiment(
    names: list[str], group: str, run_dir: Path | None, flag: str = "--log-group", value: str | None = None
) -> None:
    """Refuse, before anything is trained, an MLflow experiment ``group`` the run could not log to.

    Args:
        names: the trackers of ``--log-to``; without ``mlflow`` nothing is looked at.
        group: the experiment (``--log-group``, or a study's folder name).
        run_dir: the run folder a resumed run continues (its ``mlruns/`` is the store when no other is named);
            ``None`` for a new run, whose own store does not exist yet.
        flag, value: the option that named ``group`` and its value as given (``--out`` and the study folder), for the
            message; ``value`` defaults to ``group``.

    A store that is a file path not yet made is not made here.

    Raises:
        OctlmError: when ``group`` names a deleted experiment (see :func:`_active_experiment`), or holds ``'`` and
            the store is MLflow's file store, which cannot look such a name up.
    """
    if "mlflow" not in names:
        return
    uri = _shared_uri()
    if uri is None and run_dir is not None:
        uri = (run_dir / "mlruns").resolve().as_uri()
    file_store = uri is None or urlparse(uri).scheme in ("", "file")  # None: the new run's own mlruns/
    if file_store and "'" in group:
        # The file store looks experiments up with a filter string that quotes the name unescaped.
        raise OctlmError(
            f"{flag} {value or group}: MLflow's file store cannot look up the experiment name {group!r}, which holds "
            f"'; choose another {flag} without it, or log to a database store ($MLFLOW_TRACKING_URI)"
        )
    if uri is None or (file_store and not Path(unquote(urlparse(uri).path)).exists()):
        return  # no store yet, so no deleted experiment; making it is the tracker's work, when training starts
    _active_experiment(_client(uri), group, uri, flag, value)


def _kept_run(run_dir: Path) -> dict:
    """What ``trackers.json`` keeps of the MLflow run (``{}`` when there is no such file or no MLflow run in it).

    Raises:
        OctlmError: naming the file, when it cannot be read or is not a JSON object: its run cannot be found again,
            and logging the resumed steps to a new MLflow run in silence would split the run's history in two.
    """
    path = run_dir / TRACKER_RUNS
    if not path.exists():
        return {}
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        kept = err
    if not isinstance(kept, dict):
        said = f"cannot be read ({kept})" if isinstance(kept, Exception) else "holds no JSON object"
        raise OctlmError(
            f"{path} {said}, so the MLflow run this run logs to cannot be found again; restore the file from a copy, "
            "or delete it to log the resumed steps to a new MLflow run"
        )
    return kept["mlflow"] if isinstance(kept.get("mlflow"), dict) else {}


def _continued_run(client, run_dir: Path, shared: str | None, experiment_id: str):
    """The MLflow run ``trackers.json`` names when it lives in this store and experiment and may still take metrics,
    else ``None`` (a tracker added on resume, another store or experiment, a run deleted since)."""
    from mlflow.exceptions import MlflowException

    kept = _kept_run(run_dir)
    if not kept.get("run_id") or kept.get("tracking_uri") != shared or kept.get("experiment_id") != experiment_id:
        return None
    try:
        run = client.get_run(kept["run_id"])
    except MlflowException:
        return None  # removed for good
    return run if run.info.lifecycle_stage == "active" else None


class MlflowTracker:
    """Metrics, parameters and figures in one MLflow run, named in ``trackers.json`` so that a resume finds it again.

    Raises:
        OctlmError: when ``group`` names a deleted experiment.
    """

    def __init__(self, run_dir: Path, hparams: dict, resume_step: int | None, group: str) -> None:
        from mlflow.entities import Param

        shared = _shared_uri()
        self.uri = shared or (run_dir / "mlruns").resolve().as_uri()
        self.client = client = _client(self.uri)
        experiment_id = _active_experiment(client, group, self.uri, "--log-group") or client.create_experiment(group)
        found = _continued_run(client, run_dir, shared, experiment_id) if resume_step is not None else None
        self.last_step: dict[str, int] = {}
        if found is not None:
            self.run_id = found.info.run_id
            for key in found.data.metrics:
                self.last_step[key] = max(m.step for m in client.get_metric_history(self.run_id, key))
            client.update_run(self.run_id, status="RUNNING")
            return
        where = str(run_dir.resolve())
        run = client.create_run(
            experiment_id, run_name=run_dir.name, tags={"octlm.run_dir": where, "octlm.group": group}
        )
        self.run_id = run.info.run_id
        atomic_write_json(
            run_dir / TRACKER_RUNS,
            {"mlflow": {"tracking_uri": shared, "experiment_id": experiment_id, "run_id": self.run_id}},
        )
        params = [Param(k, str(v)) for k, v in hparams.items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, step: int, numbers: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(key, value, now, step) for key, value in numbers.items() if step > self.last_step.get(key, -1)
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)
            self.last_step.update({m.key: step for m in metrics})

    def figure(self, name: str, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="figures")

    def close(self, finished: bool) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if finished else "KILLED")


__all__ = ["MlflowTracker", "check_experiment"]
