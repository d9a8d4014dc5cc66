"""Faults of --log-to and --log-group from a new user's trial: each refused up front in one line, or fixed.

Each test states the fault it guards against; the trackers' own readers (MLflow's client, TensorBoard's
event reader) are the independent account of what was logged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from octlm.cli import main
from tests.conftest import small_run

# Tests never reach the network: MLflow 3 sends usage telemetry unless told not to.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"

TINY = small_run(
    eval_interval=100, eval_blocks=4, final_eval_blocks=4, sample_tokens=0, log_interval=1, threads=1, quiet=True
)


@pytest.fixture(autouse=True)
def local_store(monkeypatch):
    # The store is the run folder's own unless a test names a shared one.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


@pytest.fixture
def shared_store(tmp_path, monkeypatch):
    """An MLflow client on a store outside the run folder, named by ``$MLFLOW_TRACKING_URI`` as a team's would be."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    return MlflowClient(tracking_uri=store)


def _train(corpus: Path, out: Path, *flags: str) -> int:
    return main(["train", "--text", str(corpus), "--out", str(out), *TINY, *flags])


def _losses(run: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["kind"] == "train"]


def _history(client, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/loss"))


def _same_series(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    return [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx([v for _, v in want])


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octlm: error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_run_folder_with_a_quote_logs_to_mlflow_and_resumes_into_the_same_run(tmp_path, small_corpus):
    """Fault: with a ' in the run folder's path, --log-to mlflow ended in an MlflowException traceback, because the
    tracker looked its run up with a filter string built from the unescaped path."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run = tmp_path / "o'brien"
    assert _train(small_corpus, run, "--max-steps", "2", "--log-to", "mlflow") == 0
    assert main(["train", "--resume", str(run), "--max-steps", "4", "--quiet"]) == 0
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("octlm").experiment_id])
    assert found.info.run_name == "o'brien"
    assert _same_series(_history(client, found.info.run_id), _losses(run)) and len(_losses(run)) == 4


def test_overwrite_into_a_shared_store_starts_a_new_mlflow_run(tmp_path, small_corpus, shared_store):
    """Fault: --overwrite of the same --out with a shared MLflow store reused the old run: the new run's parameters
    were never logged and its metrics at the steps the old run had were dropped."""
    run = tmp_path / "run"
    assert _train(small_corpus, run, "--max-steps", "3", "--learning-rate", "0.01", "--log-to", "mlflow") == 0
    first = _losses(run)
    assert _train(small_corpus, run, "--max-steps", "3", "--learning-rate", "0.002", "--log-to", "mlflow",
                  "--overwrite") == 0  # fmt: skip
    second = _losses(run)
    assert [v for _, v in first] != pytest.approx([v for _, v in second])  # two different trainings
    client = shared_store
    runs = client.search_runs([client.get_experiment_by_name("octlm").experiment_id], order_by=["start_time ASC"])
    assert len(runs) == 2
    assert [r.data.params["learning_rate"] for r in runs] == ["0.01", "0.002"]
    assert _same_series(_history(client, runs[0].info.run_id), first)
    assert _same_series(_history(client, runs[1].info.run_id), second)


def test_a_deleted_mlflow_experiment_is_refused_before_training(tmp_path, small_corpus, shared_store, capsys):
    """Fault: --log-group naming a deleted MLflow experiment gave a traceback at create_run, after the corpus was
    prepared; it is refused first, naming the experiment and how to restore it or choose another."""
    experiment = shared_store.create_experiment("gone")
    shared_store.delete_experiment(experiment)
    run = tmp_path / "run"
    code = _train(small_corpus, run, "--max-steps", "2", "--log-to", "mlflow", "--log-group", "gone")
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1
    assert "--log-group gone" in line and "deleted" in line
    assert f"mlflow experiments restore --experiment-id {experiment}" in line and "another --log-group" in line
    assert not run.exists()


@pytest.mark.parametrize(
    "group, says", [("", "must name"), (" ", "must name"), ("x" * 600, "at most 500"), ("o'brien", "file store")]
)
def test_a_log_group_mlflow_cannot_take_is_refused_up_front(tmp_path, small_corpus, capsys, group, says):
    """Fault: --log-group '' (or one MLflow rejects: blank, 600 characters, or a ' that its file store cannot look
    up) gave a traceback after the corpus was prepared; it is refused before anything is read or written, as
    --out '' is."""
    run = tmp_path / "run"
    code = _train(small_corpus, run, "--max-steps", "2", "--log-to", "mlflow", "--log-group", group)
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1 and line.startswith("octlm: error: --log-group") and says in line
    assert not run.exists()


def test_a_tracker_named_twice_is_refused(tmp_path, small_corpus, capsys):
    """Fault: --log-to tensorboard tensorboard wrote two event files into one run, every scalar twice; a tracker
    named twice is refused (in octlm train and octlm length alike), naming it."""
    run = tmp_path / "run"
    code = _train(small_corpus, run, "--max-steps", "2", "--log-to", "tensorboard", "mlflow", "tensorboard")
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1 and "--log-to names tensorboard twice" in line and "--log-to tensorboard mlflow" in line
    assert not run.exists()
    study = tmp_path / "study"
    code = main(["length", "--text", str(small_corpus), "--out", str(study), "--max-steps", "2", "--log-to",
                 "mlflow", "mlflow", "--quiet"])  # fmt: skip
    line = _one_error_line(capsys.readouterr().err)
    assert code == 1 and "--log-to names mlflow twice" in line
    assert not study.exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ['{"mlflow": {"run_id": "ab', "[1, 2]"])
def test_a_damaged_trackers_json_on_resume_is_refused_naming_it(tmp_path, small_corpus, capsys, damage):
    """Fault (issue 52, every state file read back): a damaged trackers.json started a new MLflow run in silence on
    resume, splitting the run's metric history over two MLflow runs."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run = tmp_path / "run"
    assert _train(small_corpus, run, "--max-steps", "2", "--log-to", "mlflow") == 0
    (run / "trackers.json").write_text(damage)
    checkpoint = (run / "checkpoint.pt").read_bytes() if (run / "checkpoint.pt").exists() else None
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--max-steps", "4", "--quiet"]) == 1
    err = capsys.readouterr().err  # after the warning that --max-steps 4 stretches the schedule
    (line,) = [line for line in err.splitlines() if line.startswith("octlm: error: ")]
    assert "Traceback" not in err and str(run / "trackers.json") in line and "restore the file" in line
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    assert len(client.search_runs([client.get_experiment_by_name("octlm").experiment_id])) == 1  # no second run
    assert len(_losses(run)) == 2  # nothing trained
    if checkpoint is not None:
        assert (run / "checkpoint.pt").read_bytes() == checkpoint
