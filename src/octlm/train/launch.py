"""``octlm train`` as a library call: options in, a finished run folder and its report out.

:func:`train` checks the options (merging them with a resumed run's), starts
the process group and runs a :class:`octlm.train.trainer.Trainer`, which
prepares the corpus, builds the decoder, trains it until a step or time limit
and evaluates it. Then the command shows the finished run
(:func:`show_finished_run`: loss curve, sample, nearest tokens) and prints
its report (:func:`final_report`). The run folder is described in
:mod:`octlm.run.folder`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from octlm.data.token_display import printable_text
from octlm.errors import OctlmError
from octlm.inspect.diagnostics import embedding_diagnostic, format_diagnostic, frequent_tokens, token_counts
from octlm.inspect.sample import sample_from
from octlm.report import Reporter, SilentReporter
from octlm.run.folder import CONFIG, RunFolder, file_not_folder
from octlm.train import distributed
from octlm.train.checkpoint import CHECKPOINT, describe_checkpoint
from octlm.train.device import torch_settings
from octlm.train.mlflow_tracker import check_experiment
from octlm.train.option_checks import check_options
from octlm.train.options import TrainOptions, given_options
from octlm.train.resume import resume_options
from octlm.train.stop_messages import stopped_hint
from octlm.train.trainer import Trainer


def train(
    opts: TrainOptions,
    report: Reporter | None = None,
    *,
    resume: str | Path | None = None,
    given: set[str] | None = None,
    step_hook: Callable[[int], None] | None = None,
) -> dict:
    """Run ``octlm train``: returns the result dict (also the last ``--json`` line).

    The result holds at least ``val_bpb`` (bits per byte), ``val_loss`` (nats
    per token), ``val_perplexity``, ``tokens_per_second``, ``steps``,
    ``train_seconds``, ``interrupted`` and ``run_dir``.

    Args:
        opts: the options; with ``resume``, only those in ``given`` count.
        report: where progress goes.
        resume: a run folder to continue from its ``checkpoint.safetensors``.
            On CPU a step-limited run then ends with weights bitwise equal
            to an uninterrupted run's.
        given: the option names the person gave (flags or TOML keys); by
            default those that differ from their defaults.
        step_hook: called with the step number before each optimizer step
            (tests use it to send a signal or break the weights).

    Under torchrun (``WORLD_SIZE`` > 1) every process calls this; rank 0
    prepares the data and writes every file, and the processes train one
    model with DistributedDataParallel, each on its share of every batch.

    Raises:
        OctlmError: for bad options or input (nothing is written for bad
            options); CheckpointError when a checkpoint cannot be read, does
            not match the run's files or cannot be written (the previous one
            is kept); TrainingError when the loss stops being finite.
    """
    report = report or Reporter()
    run_dir = Path(resume) if resume is not None else None
    changes: list[str] = []
    if run_dir is not None:
        opts, changes = _resumed_options(run_dir, opts, given)
    else:
        if opts.init_from:
            from octlm.train.init_from import init_from_options

            opts = init_from_options(opts, given_options(opts) if given is None else set(given))
        check_options(opts)
    check_experiment(list(opts.log_to), opts.log_group, run_dir)  # a look at the tracker's store, before any reading
    group, device_name = distributed.setup(opts.device)
    try:
        if not group.is_main:
            report = SilentReporter()
        with torch_settings(opts.threads, opts.deterministic):
            trainer = Trainer(opts, report, group, device_name, run_dir, changes, step_hook)
            try:
                trainer.setup()
                trainer.restore()
            except KeyboardInterrupt:
                # Before the loop no stop handler runs yet: Ctrl-C ends the command here, with the way on.
                if (note := _stopped_before_training(trainer)) is not None:
                    report.warn(note)
                raise
            result = trainer.run()
            try:
                result.update(show_finished_run(trainer))
            except KeyboardInterrupt:
                trainer.stopped_while_finishing()
                raise
            trainer.close()
    finally:
        group.close()
    report.result(result, final_report(result, result.get("sample", ""), result["nearest"], brief=report.quiet))
    return result


def show_finished_run(trainer: Trainer) -> dict:
    """What ``octlm train`` shows of a run that has ended: its loss curve (PNG), a sample and the nearest tokens.

    Returns the result keys ``loss_figure`` (path or ``None``; rank 0 draws
    it), ``sample`` (text; rank 0, not after Ctrl-C, ``--sample-tokens`` 0
    skips it) and ``nearest`` (:func:`octlm.inspect.diagnostics.embedding_diagnostic`
    of frequent words, among tokens the run saw: the rest is noise a person
    cannot learn from).
    """
    from octlm.inspect.figures import LOSS_FIGURE, write_loss_figure  # matplotlib, only once a run ends

    opts, data, folder, shown = trainer.opts, trainer.data, trainer.folder, {}
    if trainer.group.is_main:
        title = f"{folder.path.name}: {trainer.config.position}, {trainer.step} steps"
        path = write_loss_figure(folder.metrics_path, folder.path / LOSS_FIGURE, title)
        shown["loss_figure"] = None if path is None else str(path)
        if path is not None and trainer.metrics is not None:
            trainer.metrics.figure("loss", path, trainer.step)  # for the trackers of --log-to that take images
        if opts.sample_tokens and not trainer.interrupted:
            shown["sample"] = sample_from(
                trainer.model, data.tokenizer, "", opts.sample_tokens, 0.8, 40, opts.seed, trainer.device
            )
    counts = token_counts(data.train, data.tokenizer.vocab_size)
    shown["nearest"] = embedding_diagnostic(
        trainer.model, data.tokenizer, queries=frequent_tokens(counts, data.tokenizer, 3), seen=counts > 0
    )
    return shown


def _stopped_before_training(trainer: Trainer) -> str | None:
    """What Ctrl-C during set-up left, and the command that goes on; ``None`` before the run folder appears."""
    folder = getattr(trainer, "folder", None)
    if folder is None or not folder.config_path.is_file():
        return None  # interrupted while the corpus was prepared: the staging folder is gone, nothing is left
    checkpoint = folder.path / CHECKPOINT
    kept = (
        f"the last checkpoint ({describe_checkpoint(checkpoint)}) is kept"
        if checkpoint.exists()
        else "nothing was trained"
    )
    return f"interrupted before the first training step; {kept}.{stopped_hint(folder.path)}"


def _resumed_options(run_dir: Path, opts: TrainOptions, given: set[str] | None) -> tuple[TrainOptions, list[str]]:
    """:func:`resume_options` for ``train(resume=...)``, after refusing what is no run to continue."""
    if run_dir.is_file():
        raise OctlmError(f"--resume {run_dir}: {file_not_folder(run_dir)}")
    if not run_dir.is_dir():
        raise OctlmError(f"--resume {run_dir}: no such run folder")
    stored_train = RunFolder(run_dir).train_section()
    if isinstance(stored_train, dict) and "imported_from" in stored_train:
        raise OctlmError(
            f"--resume {run_dir}: this run was made by octlm import-hf and holds no training state to continue; "
            f"sample from it, or train a new run with --out"
        )
    opts, changes = resume_options(run_dir, opts, given_options(opts) if given is None else set(given))
    try:
        check_options(opts)
    except OctlmError as err:
        raise OctlmError(f"{err} (from the flags given now or the run's {run_dir / CONFIG})") from None
    return opts, changes


def final_report(result: dict, sample_text: str, diagnostic: dict, brief: bool = False) -> str:
    """The end-of-training report for people; ``brief`` (``--quiet``) keeps the figures and the path only."""
    model_config = RunFolder(result["run_dir"]).read_config()["model"]
    # a layout's layers each carry their own scheme (--position only names those whose entry names none)
    scheme = "the layer layout" if model_config.get("layers") else model_config["position"]  # this run: a list
    quoted = shlex.quote(result["run_dir"])
    saved = (
        f'saved to {result["run_dir"]}/; try: octlm sample --run {quoted} --prompt "..."\n'
        f"see it on the explainer page: octlm serve --run {quoted}"
    )
    lines = [
        "",
        f"done: {result['steps']} steps in {result['train_seconds']:.0f}s, {result['tokens_per_second']:,.0f} "
        f"tokens/s, {result['epochs']:.2f} epochs" + (" (interrupted)" if result["interrupted"] else ""),
        f"validation: loss {result['val_loss']:.4f} nats/token, perplexity {result['val_perplexity']:.2f}, "
        f"{result['val_bpb']:.4f}"
        + (f" ± {result['val_bpb_se']:.4f}" if result.get("val_bpb_se") else "")
        + f" bits per byte ({result['val_tokens']:,} tokens)",
    ]
    resume = []
    if result["interrupted"]:
        resume = [
            f"interrupted at step {result['steps']}; continue exactly where it stopped with: "
            f"octlm train --resume {shlex.quote(result['run_dir'])}"
        ]
    if brief:
        return "\n".join(lines[1:] + [saved] + resume)
    if sample_text:
        lines += ["", "sample:", "-" * 60, printable_text(sample_text), "-" * 60]
    lines += ["", format_diagnostic(diagnostic, scheme), ""]
    if result.get("loss_figure"):
        lines.append(f"loss curve: {result['loss_figure']}")
    lines.append(saved)
    return "\n".join(lines + resume)


__all__ = ["final_report", "train"]
