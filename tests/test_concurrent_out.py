"""Two commands given the same --out at once: the second refuses and the first's folder survives (a new user's trial
ran two trainings into one folder; both exited 0 and left a run whose config and weights disagreed)."""

from __future__ import annotations

import fcntl

import pytest

from octlm.errors import OctlmError
from octlm.run.folder import LOCK, RunFolder


def test_a_folder_written_by_another_process_after_the_check_is_not_replaced(tmp_path):
    out = RunFolder(tmp_path / "run")
    out.check_new_run(overwrite=False)  # empty: this command may write it
    # meanwhile another process puts its run there (what the staging swap would have deleted)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(OctlmError, match="another process wrote this folder"):
        with out.staged() as staging:
            (staging / "config.json").write_text('{"ours": true}')
    assert (tmp_path / "run" / "config.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging folder left behind


def test_a_run_another_process_is_training_is_not_replaced_even_with_overwrite(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    held = (run / LOCK).open("a+")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a training process holds it
    held.write("pid 4242")
    held.flush()
    try:
        out = RunFolder(run)
        out._had_files = True  # check_target passed with --overwrite
        with pytest.raises(OctlmError, match=r"another octlm process \(pid 4242\) is training this run"):
            with out.staged() as staging:
                (staging / "config.json").write_text('{"ours": true}')
        assert (run / "config.json").read_text() == "{}"
    finally:
        held.close()
    with RunFolder(run).staged() as staging:  # once the trainer is gone the swap goes ahead
        (staging / "config.json").write_text('{"ours": true}')
    assert (run / "config.json").read_text() == '{"ours": true}'


def test_a_run_training_now_before_its_first_checkpoint_is_said_to_be_training_not_stopped(trained_run, tmp_path):
    """A new user's trial: a second train --out and a sample of a run still training before its first checkpoint were
    told it had stopped and to resume it, which the lock then refused."""
    import shutil

    from octlm.run.load import load_run

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    for trained in ("model.safetensors", "checkpoint.safetensors"):
        (run / trained).unlink()  # config and prepared corpus, nothing trained saved yet: as in its first steps
    held = (run / LOCK).open("a+")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.seek(0)
    held.truncate()  # as a trainer writes its pid over the last one
    held.write("pid 4242")
    held.flush()
    try:
        with pytest.raises(OctlmError, match=r"another octlm process \(pid 4242\) is training this run"):
            RunFolder(run).check_new_run(overwrite=False)
        with pytest.raises(OctlmError, match="another octlm process is training it; model.safetensors comes when"):
            load_run(run)
    finally:
        held.close()
    with pytest.raises(OctlmError, match="stopped before its first checkpoint"):  # once it is gone: stopped
        RunFolder(run).check_new_run(overwrite=False)
    with pytest.raises(OctlmError, match="stopped before it wrote model.safetensors"):
        load_run(run)
