"""Training one model of a length study as a unit that a continued study keeps, resumes or trains anew.

A model's unit is done when its record is in ``progress/`` (:mod:`octlm.studies.shared.progress`):
its training result, its ``octlm train`` options and the digest of its data
(the sha256 of its tokenizer and token streams). A continued study keeps a
recorded model only when both still hold: the options the study gives it now
and the run folder's data are the recorded ones. A model with a run folder
and no record stopped mid-training and resumes from its checkpoint, as
``octlm train --resume`` does; one that finished training but was stopped
before its record was written trains again (deterministic, so nothing changes).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from octlm.declare import flag
from octlm.errors import OctlmError
from octlm.fileio import sha256_file
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.studies.length.fine_tunes import extension_rows
from octlm.studies.shared.progress import StudyProgress, comparable, option_defaults, recorded_with_defaults
from octlm.train.options import TrainOptions
from octlm.train.resumable import FINISHED

#: What a study keeps of a model's training result.
KEPT = ("steps", "train_seconds", "tokens_per_second", "val_bpb", "run_dir", "interrupted")
#: Train options that say where a model lives, not what it computes.
PLACE = frozenset({"log_group", "device", "threads"})


def data_digest(run_dir: Path) -> dict:
    """``{"tokenizer", "train", "val"}``: the sha256 of a run's tokenizer and of its two token streams."""
    folder = RunFolder(run_dir)
    tokens = folder.read_manifest()["tokens"]
    return {
        "tokenizer": sha256_file(folder.tokenizer_path),
        "train": tokens["train"]["sha256"],
        "val": tokens["val"]["sha256"],
    }


def changed_inputs(run_dir: Path) -> list[str]:
    """The files a run read (its ``manifest.json``) whose sha256 differs now; files no longer on disk are skipped."""
    files = RunFolder(run_dir).read_manifest().get("files", [])
    return [
        entry["path"]
        for entry in files
        if Path(entry.get("path", "")).is_file() and sha256_file(entry["path"]) != entry.get("sha256")
    ]


def check_kept(record: dict, options: dict, run_dir: Path) -> None:
    """Refuse to keep a recorded model whose options or data are not what the continued study would train.

    Raises:
        OctlmError: naming the run folder and the option or data that differs.
    """
    now = {k: v for k, v in comparable(options).items() if k not in PLACE}
    # an option octlm gained after the model trained: the model ran without it, as at its default
    then = recorded_with_defaults(record["options"], option_defaults(TrainOptions))
    then = {k: v for k, v in then.items() if k not in PLACE}
    differ = next((name for name in sorted(set(now) | set(then)) if now.get(name) != then.get(name)), None)
    if differ is not None:
        raise OctlmError(
            f"{run_dir}: finished with {flag(differ)} {then.get(differ)!r}, but the study now trains it with "
            f"{now.get(differ)!r}; pass --overwrite to start the study again"
        )
    try:
        digest = data_digest(run_dir)
    except (OSError, KeyError, OctlmError):
        digest = None
    if digest != record["data"] or (changed := changed_inputs(run_dir)):
        what = "its tokenizer or token files changed" if digest != record["data"] else f"{changed[0]} changed"
        raise OctlmError(
            f"{run_dir}: {what} since the model finished, so it is not the model the study recorded; pass "
            "--overwrite to start the study again"
        )


def _finished(run_dir: Path) -> bool:
    """Whether the run's ``metrics.jsonl`` says its final evaluation is done."""
    try:
        lines = RunFolder(run_dir).metrics_path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return any(f'"kind": "{FINISHED}"' in line for line in lines)


def check_same_data(results: dict[str, dict]) -> None:
    """Refuse runs (``{name: train result}``) that prepared different tokenizers or token streams from the study's
    text (octlm's data preparation is deterministic, so they differ only when the text changed between them).

    Raises:
        OctlmError: naming the runs that differ from the first.
    """
    fingerprints = {}
    for scheme, result in results.items():
        folder = RunFolder(result["run_dir"])
        tokens = folder.read_manifest()["tokens"]
        fingerprints[scheme] = (tokens["train"]["sha256"], tokens["val"]["sha256"], folder.tokenizer_path.read_bytes())
    first = next(iter(fingerprints.values()))
    differ = [s for s, f in fingerprints.items() if f != first]
    if differ:
        raise OctlmError(
            f"the runs of {', '.join(differ)} prepared different tokens from the same text; "
            "the comparison would not be fair"
        )


def base_models(opts, seeds: list[int]) -> list[tuple[int, str]]:
    """The study's base models in order, ``(seed, row)``: seeds outer, rows inner (``--schemes``, then
    ``--layouts``: :meth:`~octlm.studies.length.options.LengthOptions.rows`); model ``k`` is the k-th."""
    return [(seed, row) for seed in seeds for row in opts.rows()]


#: A model's scoring (every length in both readings, with its attention records) costs about as much as this many of
#: its training steps: 24 s beside 0.236 s a step in the default study on one thread (docs/length-study.md, Time).
SCORE_STEPS = 100
#: A fine-tuning step at M x T, preparing its corpus included, costs about this many base steps (36 s for 100 steps
#: there; its tokens per step are the base's, its attention spans M times as many).
FINE_TUNE_STEP = 1.5


def model_weights(opts, seeds: list[int]) -> list[float]:
    """The work of each base model of :func:`base_models`, in base-model steps: its training and scoring, and those
    of every fine-tune made from it; what :func:`~octlm.studies.shared.spread.balanced` splits between processes.

    Every scheme's step is weighed alike (the study's tables give each model's measured seconds per step).
    """
    fine_tunes = {}
    for base, _ in extension_rows(opts).values() if opts.extend_to else ():
        fine_tunes[base] = fine_tunes.get(base, 0) + 1
    each = (opts.extend_steps * FINE_TUNE_STEP) + SCORE_STEPS
    return [opts.max_steps + SCORE_STEPS + fine_tunes.get(row, 0) * each for _, row in base_models(opts, seeds)]


def study_units(opts, seeds: list[int]) -> list[str]:
    """Every unit a length study records for its models (the ``score-`` units, one per model, last of each)."""
    units = [f"{what}-{scheme}-seed{seed}" for seed, scheme in base_models(opts, seeds) for what in ("train", "score")]
    for seed in seeds if opts.extend_to else []:
        for label in extension_rows(opts):
            units += [f"extend-{label}-seed{seed}", f"score-{label}@{opts.extend_to}x-seed{seed}"]
    return units


def train_unit(
    progress: StudyProgress,
    unit: str,
    train_opts,
    report: Reporter,
    step_hook: Callable[[int], None] | None = None,
) -> dict:
    """Train (or keep, or resume) one model of the study; returns what the study keeps of its result (:data:`KEPT`).

    Raises:
        KeyboardInterrupt: when training was interrupted (its checkpoint is saved; the next command resumes it).
        OctlmError: for a recorded model that the study would not train now (:func:`check_kept`).
    """
    from octlm.train.launch import train
    from octlm.train.stop_messages import study_says_how_to_go_on

    run_dir = Path(train_opts.out)
    options = train_opts.to_dict()
    record = progress.get(unit)
    if record is not None:
        check_kept(record, options, run_dir)
        return record["result"]
    if run_dir.is_dir() and _finished(run_dir):
        shutil.rmtree(run_dir)  # trained, then stopped before its record: training it again gives the same weights
    resume = run_dir if (run_dir / "config.json").is_file() else None
    with study_says_how_to_go_on():  # the study's Ctrl-C message, not the model's train --resume
        result = train(train_opts, report, resume=resume, given=set() if resume else None, step_hook=step_hook)
    if result.get("interrupted"):
        raise KeyboardInterrupt
    kept = {k: v for k, v in result.items() if k in KEPT}
    progress.put(unit, {"result": kept, "options": comparable(options), "data": data_digest(run_dir)})
    return kept


__all__ = [
    "KEPT",
    "base_models",
    "model_weights",
    "study_units",
    "changed_inputs",
    "check_same_data",
    "check_kept",
    "data_digest",
    "train_unit",
]
