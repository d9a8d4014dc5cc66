"""--log-to: what TensorBoard and MLflow hold, read back with their own readers, offline; resume; a tracker not
installed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from octlm.cli import main
from octlm.errors import OctlmError
from octlm.report import Reporter
from octlm.train.launch import train
from octlm.train.options import TrainOptions
from tests.conftest import SMALL_RUN, flags, tiny_model

TINY = dict(SMALL_RUN, log_interval=2)
QUIET = Reporter(json_mode=True)
# Tests never reach the network: MLflow 3 sends usage telemetry unless told not to (read when it logs, so set before any
# test).
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"


@pytest.fixture(autouse=True)
def local_store(monkeypatch):
    # The store is the run folder's own, whatever the machine running the tests has set.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _expected(run: Path, kind: str, key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in _records(run) if r["kind"] == kind]


def _tensorboard(run: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    reader.Reload()
    return reader


def _mlflow_run(run: Path, experiment: str = "octlm"):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return client, found


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, small_corpus):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    run = tmp_path_factory.mktemp("tracked") / "run"
    train(
        TrainOptions.of(text=[str(small_corpus)], out=str(run), max_steps=10, log_to=["tensorboard", "mlflow"], **TINY),
        QUIET,
    )
    return run


def test_tensorboard_holds_the_scalars_of_metrics_jsonl(logged_run):
    reader = _tensorboard(logged_run)
    for kind, key in (
        ("train", "loss"),
        ("train", "lr"),
        ("train", "tokens_per_second"),
        ("train", "grad_norm"),
        ("eval", "val_bpb"),
    ):
        got = [(e.step, e.value) for e in reader.Scalars(f"{kind}/{key}")]
        want = _expected(logged_run, kind, key)
        assert [s for s, _ in got] == [s for s, _ in want]
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # stored as float32


def test_tensorboard_holds_the_options_and_the_loss_figure(logged_run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    reader = _tensorboard(logged_run)
    content = reader.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["d_model"].number_value == 16 and hparams["position"].string_value
    assert hparams["log_to"].string_value == json.dumps(["tensorboard", "mlflow"])
    (image,) = reader.Images("figures/loss")
    assert image.step == 10 and image.encoded_image_string.startswith(b"\x89PNG")


def test_mlflow_holds_the_scalars_options_and_figure(logged_run):
    client, found = _mlflow_run(logged_run)
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    assert found.data.params["d_model"] == "16" and found.data.params["learning_rate"] == "0.005"
    for kind, key in (("train", "loss"), ("train", "grad_norm"), ("eval", "val_bpb"), ("eval", "val_loss")):
        got, want = _history(client, found.info.run_id, f"{kind}/{key}"), _expected(logged_run, kind, key)
        assert [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx(
            [v for _, v in want]
        )
    assert [a.path for a in client.list_artifacts(found.info.run_id, "figures")] == ["figures/loss.png"]


def test_a_crash_and_resume_continue_the_same_tracker_runs_without_a_step_twice(tmp_path, small_corpus):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    opts = TrainOptions.of(
        text=[str(small_corpus)], out=str(run), max_steps=16, save_every=6, log_to=["tensorboard", "mlflow"], **TINY
    )

    def crash(step):
        if step == 11:  # after the checkpoint of step 6, with steps 7..10 already logged
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        train(opts, QUIET, step_hook=crash)
    assert max(e.step for e in _tensorboard(run).Scalars("train/loss")) == 10
    train(opts, QUIET, resume=str(run), given=set())
    want = _expected(run, "train", "loss")
    assert [s for s, _ in want] == list(range(2, 17, 2))
    got = [(e.step, e.value) for e in _tensorboard(run).Scalars("train/loss")]
    assert [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx(
        [v for _, v in want], rel=1e-6
    )
    client, found = _mlflow_run(run)  # one run, continued
    assert [s for s, _ in _history(client, found.info.run_id, "train/loss")] == [s for s, _ in want]


def test_a_tracker_added_on_resume_receives_the_whole_run(tmp_path, small_corpus):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    train(TrainOptions.of(text=[str(small_corpus)], out=str(run), max_steps=6, **TINY), QUIET)
    train(TrainOptions.of(max_steps=10, log_to=["tensorboard"]), QUIET, resume=str(run), given={"max_steps", "log_to"})
    assert (
        [e.step for e in _tensorboard(run).Scalars("train/loss")]
        == [s for s, _ in _expected(run, "train", "loss")]
        == [2, 4, 6, 8, 10]
    )


@pytest.mark.parametrize("tracker, extra", [("tensorboard", "tensorboard"), ("mlflow", "mlflow")])
def test_a_tracker_not_installed_names_its_extra_before_anything_runs(
    tmp_path, monkeypatch, capsys, tracker, extra, small_corpus
):
    monkeypatch.setitem(sys.modules, tracker, None)  # as if it were not installed: import and find_spec both fail
    code = main(
        ["train", "--text", str(small_corpus), "--out", str(tmp_path / "run"), "--log-to", tracker, "--max-steps", "2"]
    )
    assert code == 1
    assert (
        f"--log-to {tracker}: the {tracker} package is not installed; pip install 'octlm[{extra}]'"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_trackers_are_checked_in_toml_too():
    from octlm.train.tracking import check_trackers

    with pytest.raises(OctlmError, match="--log-to wandb: unknown tracker; choose from tensorboard, mlflow"):
        check_trackers(["wandb"])


@pytest.fixture
def study_store(tmp_path, monkeypatch):
    """An MLflow client on a store of its own that every model of a study logs to (``$MLFLOW_TRACKING_URI``), with
    TensorBoard at hand."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=store)


@pytest.mark.slow  # a whole study end to end
def test_a_length_study_logs_each_model_as_its_own_run_grouped_by_study(tmp_path, small_corpus, study_store):
    out = tmp_path / "tiny-study"
    code = main(
        [
            "length",
            "--text",
            str(small_corpus),
            "--out",
            str(out),
            *tiny_model(train_length=8, multipliers=[1, 2], schemes=["learned", "alibi"], max_steps=3, extend_to=2),
            *flags(extend_steps=2, log_to=["tensorboard", "mlflow"], quiet=True),
        ]
    )
    assert code == 0
    client = study_store
    runs = client.search_runs([client.get_experiment_by_name("tiny-study").experiment_id])
    names = sorted(r.info.run_name for r in runs)
    assert {"learned", "alibi"} <= set(names) and len(names) == len(set(names))
    assert all(r.data.tags["octlm.group"] == "tiny-study" and "train/loss" in r.data.metrics for r in runs)
    for name in names:
        assert list((out / "runs" / name / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.slow  # a whole study end to end
def test_a_task_study_logs_each_model_as_its_own_run_grouped_by_study(tmp_path, study_store):
    out = tmp_path / "task-study"
    code = main(
        [
            "length",
            "--task",
            "copy",
            "count",
            "--out",
            str(out),
            "--schemes",
            "rope",
            "--seeds",
            "2",
            "--max-steps",
            "60",
            "--task-length",
            "2",
            "--d-model",
            "16",
            "--n-heads",
            "2",
            "--n-layers",
            "1",
            "--log-to",
            "tensorboard",
            "mlflow",
            "--quiet",
        ]
    )
    assert code == 0
    client = study_store
    runs = client.search_runs([client.get_experiment_by_name("task-study").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["rope-seed1337", "rope-seed1337", "rope-seed1338", "rope-seed1338"]
    evals = {
        json.dumps(r)
        for r in (json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines())
        if r["record"] == "eval"
    }
    for run in runs:
        task = run.data.params["task"]
        folder = out / "runs" / task / run.info.run_name
        records = _records(folder)
        assert [r["step"] for r in records if r["kind"] == "train"] == [50, 60]  # every LOG_EVERY steps and the last
        assert _history(client, run.info.run_id, "train/loss") == _expected(folder, "train", "loss")
        seed = int(run.info.run_name.removeprefix("rope-seed"))
        for m in (1, 2, 3, 4):  # the tracker's final exact match is the study's own record
            match = [
                json.loads(e)
                for e in evals
                if json.loads(e)["task"] == task and json.loads(e)["seed"] == seed and json.loads(e)["multiplier"] == m
            ]
            assert run.data.metrics[f"eval/exact_match_{m}x"] == pytest.approx(match[0]["exact_match"])
        tensorboard = _tensorboard(folder)
        logged = [(e.step, e.value) for e in tensorboard.Scalars("train/loss")]
        assert [s for s, _ in logged] == [50, 60] and [v for _, v in logged] == pytest.approx(
            [v for _, v in _expected(folder, "train", "loss")]
        )
