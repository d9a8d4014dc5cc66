"""The length study: how each position scheme copes with sequences longer than it trained on.

:func:`length_study` trains one decoder per position scheme on the same text
with the same seed, shape and budget (through :func:`octlm.train.launch.train`), then
scores every model on the validation split at 1x, 2x, 4x, 8x and 16x the
training length ``T``, and the RoPE model once more under each context
extension method of :data:`octlm.model.positions.ROPE_SCALINGS`.

Protocol (the README repeats it):

* The validation stream is cut to its first ``N = floor((n - 1) / L_max) * L_max``
  targets, ``L_max`` being the longest evaluated length, so every length
  scores exactly the same tokens.
* At length ``L`` the stream is read as non-overlapping windows of ``L``
  targets (``L + 1`` tokens, stride ``L``; :func:`octlm.train.evaluate.evaluate`).
  Every window starts from nothing: target ``p`` of a window (0-based) is
  predicted from the ``p + 1`` tokens before it in that window.
* Bits per byte is the total nats over all targets / ln 2 / their UTF-8 bytes.
  Per-position loss is the mean nats at window position ``p`` over all
  windows, so a curve shows where along a long window a scheme breaks.
* A learned table has ``T`` rows: longer lengths are reported as
  ``n/a (no rows past T)``, never cropped or invented.
* RoPE scaling uses factor ``L / T`` for ``linear``, ``ntk``, ``yarn`` and ``llama3``.
  ``dynamic-ntk`` derives its scale from the sequence length itself (factor 1:
  scale ``max(1, L / T)``); on full windows it therefore equals ``ntk``.
* ``--attention-scales log`` scores every base model once more with its
  query-key logits past ``T`` multiplied by ``log(n) / log(T)``
  (:mod:`octlm.model.attention_recipes`), as rows ``<scheme>+logn``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from octlm.declare import plain_dict
from octlm.fileio import atomic_write
from octlm.report import Reporter, SilentReporter, TaggedReporter
from octlm.run.folder import RunFolder
from octlm.studies.length.attention import attention_markdown, attention_plot
from octlm.studies.length.comparisons import restored, stored
from octlm.studies.length.context import StudyContext, StudyRecords
from octlm.studies.length.extension import (
    EXTEND_PLOT,
    curve_markdown,
    curve_plot,
    fine_tune,
    measure_steps,
)
from octlm.studies.length.findings import confidence_section
from octlm.studies.length.fine_tunes import extension_rows
from octlm.studies.length.models import base_models, check_same_data, model_weights, study_units, train_unit
from octlm.studies.length.options import RUNS, LengthOptions, check_options
from octlm.studies.length.readings.catalog import sections
from octlm.studies.length.readings.context_curve import CONTEXT_PLOT
from octlm.studies.length.readings.reading import FinishedStudy
from octlm.studies.length.readings.streaming import STREAMING_PLOT
from octlm.studies.length.records import TrainRecord
from octlm.studies.length.scoring import score_base, score_extended, without_positions
from octlm.studies.length.tables import format_tables, markdown_tables, mean_rows, plot
from octlm.studies.length.validation import check_eval_tokens, check_validation_length, validation_tokens
from octlm.studies.shared.core import StudyFiles, prepare_study_folder, write_study, wrote_line
from octlm.studies.shared.processes import checker, local_share, side_by_side, started
from octlm.studies.shared.progress import PLACEMENT, PROGRESS, StudyProgress, open_study, option_defaults
from octlm.studies.shared.rows import carried, legend
from octlm.studies.shared.spread import Share, count_models, finish_share, open_share, placed_device, share_of
from octlm.train.device import resolve_device, torch_settings
from octlm.version import build_version

#: Attention entropy by query position, one panel per model, one line per length.
ATTENTION_PLOT = "attention.png"
#: A study in one process: it owns every model.
ONE = Share()
#: The figures opt-in readings add (octlm.studies.length.readings), so a study read again is still recognised as one.
READING_PLOTS = (CONTEXT_PLOT, STREAMING_PLOT)
FILES = StudyFiles(
    "length study",
    "length.jsonl",
    "length.md",
    "length.png",
    extra=(RUNS, EXTEND_PLOT, ATTENTION_PLOT, PROGRESS, *READING_PLOTS),
)
JSONL, PLOT, TABLE = FILES.jsonl, FILES.plot, FILES.table
#: The kinds of record the study itself writes; any other is an opt-in reading's (octlm.studies.length.readings).
OWN_RECORDS = frozenset({"study", "train", "eval", "window_bytes", "curve", "attention", "comparison"})


def prepare_study_dir(out: str, overwrite: bool, texts: list[str] = ()) -> Path:
    """Create the study folder with its empty ``runs/``; an earlier length study is replaced only with ``overwrite``,
    anything else (its own ``--text`` included) never."""

    def foreign(folder: RunFolder) -> list[str]:
        # The study's runs/ holds only its runs, each only what octlm wrote there.
        found = []
        for run in (RunFolder(path / RUNS / name) for name in RunFolder(path / RUNS).names()):
            if not (run.path.is_dir() and run.is_octlm_run()):
                found.append(f"{RUNS}/{run.path.name}")
            else:
                found += [f"{RUNS}/{run.path.name}/{name}" for name in run.foreign_files()]
        return found

    path = Path(out)
    is_study = lambda p: (p / RUNS).is_dir() and all(child.name in FILES.names for child in p.iterdir())  # noqa: E731
    prepare_study_folder(
        out, overwrite, FILES, [("--text", text) for text in texts], foreign=foreign, is_study=is_study
    )
    RunFolder(path / RUNS).create()
    return path


def _validation_stream(run_dir: Path) -> np.ndarray:
    return RunFolder(run_dir).tokens("val")


def length_study(opts: LengthOptions, report: Reporter | None = None, share: Share | None = None) -> dict:
    """Run ``octlm length``; returns the result dict (also the last ``--json`` line).

    Writes into ``opts.out``: ``runs/<scheme>/`` (one ``octlm train`` run
    folder per scheme), ``length.jsonl`` (one ``train`` line per model, one
    ``eval`` line per scheme, scaling and length, with per-position loss),
    ``length.png`` (bits per byte against length, and per position at the
    longest length) and ``length.md`` (the tables, then the differences between
    rows with their intervals and the findings: :mod:`octlm.studies.length.findings`).

    An unfinished study of the same options at ``opts.out`` (stopped by
    Ctrl-C or a kill) is continued: what it recorded in ``progress/`` is
    kept, a model stopped mid-training resumes from its checkpoint
    (:mod:`octlm.studies.shared.progress`).

    ``share``: this process's part when a ``--processes`` study started it
    (:mod:`octlm.studies.shared.worker`); else from torchrun, ``--shard``
    or ``--processes`` (:mod:`octlm.studies.shared.processes`).

    Raises:
        OctlmError: for bad options, an existing finished study or other
            files without ``overwrite``, an unfinished study of other options
            (naming the first that differs), or validation text shorter than
            one window of the longest length, or an ``--eval-tokens`` below that
            length (both checked before anything is trained or written).
    """
    check_options(opts)
    share = share or local_share(opts, share_of(opts.shard, opts.overwrite), len(opts.rows()) * opts.seeds)
    device, threads = placed_device(opts.device, opts.threads, share)
    report = report or Reporter()
    with torch_settings(threads, False):
        return _study(opts.resolved(), share, device, threads, report if share.speaks else SilentReporter(report))


def _study(opts: LengthOptions, share: Share, device_name: str, threads: int | None, report: Reporter) -> dict:
    device = resolve_device(device_name)
    check_validation_length(validation_tokens(opts), opts)
    check_eval_tokens(opts)  # after: a multiplier longer than the text is the first thing to fix
    placed = dataclasses.replace(opts, device=device_name, threads=threads)

    def begin(overwrite: bool) -> tuple:
        progress = open_study(
            opts.out,
            overwrite,
            FILES.kind,
            plain_dict(opts),
            lambda: prepare_study_dir(opts.out, overwrite, opts.text),
            report,
            option_defaults(LengthOptions),
        )
        return (progress, *_equal_steps(placed, progress.out, progress, report))

    t0 = time.perf_counter()
    given = plain_dict(dataclasses.replace(opts, overwrite=False))
    progress, opts, steps = open_share(share, opts.out, opts.overwrite, begin)
    ctx = StudyContext(opts, progress, device, report)
    share = share.weighed(model_weights(opts, ctx.seeds))
    processes = side_by_side(share, opts.processes)
    report.event(
        "study",
        f"length study: {len(opts.rows())} models ({', '.join(opts.rows())}) x {opts.seeds} "
        f"seed{'' if opts.seeds == 1 else 's'}, {opts.max_steps} steps "
        f"each, T={ctx.train_length}, evaluated at {', '.join(map(str, ctx.lengths))} tokens{processes}",
        schemes=opts.schemes,
        lengths=ctx.lengths,
        options=plain_dict(opts),
        processes=share.count if share.launcher == "local" else 1,
    )
    if not share.spread:
        return _tables(ctx, steps, t0)
    with started(share, "length", given, progress.folder) as workers:
        units = study_units(opts, ctx.seeds)
        models = [unit for unit in units if unit.startswith("score-")]
        count_models(progress, models, report)
        if trained := _train_base(ctx, share):
            _score_all(ctx.with_scored(_scored_stream(ctx, trained)), trained)
        tables = lambda: _tables(ctx, steps, t0)  # noqa: E731
        return finish_share(share, progress, units, models, report, tables, checker(workers))


def _tables(ctx: StudyContext, steps: dict | None, t0: float) -> dict:
    """Every model of the study (trained and scored here, or read back from the records), then the tables: the
    study's result."""
    out, T, lengths = ctx.out, ctx.train_length, ctx.lengths
    trained = _train_base(ctx)
    ctx = ctx.with_scored(_scored_stream(ctx, trained))
    t_eval = time.perf_counter()
    rows, attention, train_rows, curves = _score_all(ctx, trained)
    targets = len(ctx.scored) - 1
    study = {
        "record": "study",
        "octlm_version": build_version(),  # the release and, from a checkout, the commit: what made these numbers
        "train_length": T,
        "lengths": lengths,
        "targets": targets,
        "equal_steps": steps,
        "options": {k: v for k, v in plain_dict(ctx.opts).items() if k not in PLACEMENT},  # how it ran: not recorded
    }
    tables, written = _write(out, StudyRecords(study, rows, train_rows, curves, attention))
    ctx.progress.finish()
    seconds = time.perf_counter() - t0
    result = {
        "out": str(out),
        "train_length": T,
        "lengths": lengths,
        "targets": targets,
        "trained": [r.to_json() for r in train_rows],
        "results": [without_positions(r) for r in rows],
        "curves": curves,
        "equal_steps": steps,
        "jsonl": str(out / JSONL),
        "plot": str(out / PLOT),
        "table": str(out / TABLE),
        "attention_plot": str(out / ATTENTION_PLOT),
        "seconds": seconds,
        "eval_seconds": time.perf_counter() - t_eval,
    }
    text = f"{tables}\n\n{wrote_line(written, seconds)}"
    ctx.report.result(result, text)
    return result


def _equal_steps(
    opts: LengthOptions, out: Path, progress: StudyProgress, report: Reporter
) -> tuple[LengthOptions, dict | None]:
    """With no ``--max-steps``, time the schemes so that the budget becomes one step count for every model (equal
    training); returns the options with that count and the timing record (``None`` when the steps were given).
    A continued study keeps the count it timed first."""
    if opts.max_steps is not None:
        return opts, None
    steps = progress.get("equal-steps") or progress.put(
        "equal-steps", measure_steps(opts, out / RUNS / ".timing", report)
    )
    return dataclasses.replace(opts, max_steps=steps["steps"]), steps


def _scored_stream(ctx: StudyContext, trained: dict) -> np.ndarray:
    """The validation tokens every length scores: whole windows of the longest length, plus the one token before
    the first target."""
    val = _validation_stream(Path(next(iter(trained.values()))["run_dir"]))
    n_windows = check_validation_length(
        len(val), ctx.opts
    )  # the stream scored, which the check before training predicted
    longest = max(ctx.lengths)
    scored = np.asarray(val[: n_windows * longest + 1])
    ctx.report.event(
        "evaluate",
        f"evaluating on the first {len(scored) - 1:,} validation targets ({n_windows} windows of {longest})",
        targets=len(scored) - 1,
    )
    return scored


def _score_all(ctx: StudyContext, trained: dict) -> tuple[list[dict], list[dict], list[TrainRecord], list[dict]]:
    """Score every base model, then fine-tune and score each ``--extend-to`` method: ``(eval rows, attention rows,
    train rows, fine-tuning curves)``. Each model's scores are a unit of ``progress``: recorded once, never redone."""
    rows: list[dict] = []
    attention: list[dict] = []
    for (scheme, seed), result in trained.items():
        unit = f"score-{scheme}-seed{seed}"
        if (done := ctx.progress.get(unit)) is None:
            scores, looks = score_base(ctx, scheme, seed, result["run_dir"])
            done = ctx.progress.put(unit, {"rows": scores, "attention": looks})
        rows, attention = rows + done["rows"], attention + done["attention"]
    train_rows = [TrainRecord.of_result(scheme, seed, r) for (scheme, seed), r in trained.items()]
    curves: list[dict] = []
    if ctx.opts.extend_to:
        for seed in ctx.seeds:
            for label in (lb for lb, (row, _) in extension_rows(ctx.opts).items() if (row, seed) in trained):
                ext_rows, ext_attention, ext_train, curve = _extend_one(ctx, label, seed, trained)
                rows, attention = rows + ext_rows, attention + ext_attention
                train_rows.append(ext_train)
                curves += curve
    return rows, attention, train_rows, curves


def _write(out: Path, records: StudyRecords) -> tuple[str, list[str]]:
    """Write length.jsonl, length.md and the figures, with the sections and figures of the opt-in readings' records
    (:mod:`octlm.studies.length.readings`); returns the terminal's tables and the paths written."""
    study, rows, train_rows, curves, attention = (
        records.study,
        records.rows,
        records.train_rows,
        records.curves,
        records.attention,
    )
    T, lengths, readings = records.train_length, records.lengths, list(records.readings)
    shown = mean_rows(rows)
    trained = [r.to_json() for r in train_rows]
    read_text, read_figures = sections(FinishedStudy(out, [study, *trained, *readings]), readings)
    tables = format_tables(shown, T, lengths, train_rows)
    compared, confidence = confidence_section(rows, T, lengths)  # the differences' intervals, and the findings
    markdown = (
        legend(study["options"].get("layouts", []))  # a study from before --layouts has none
        + carried(study["options"])
        + markdown_tables(shown, T, lengths, train_rows)
        + (f"\n{curve_markdown(curves)}" if curves else "")
        + "\n"
        + attention_markdown(attention, T, lengths)
        + (f"\n{confidence}" if confidence else "")
        + read_text
    )
    kept, window_bytes = stored(rows)  # each length's window bytes once, not in every row
    jsonl = [study, *trained, *kept, *window_bytes, *curves, *attention, *compared, *readings]
    write_study(out, FILES, jsonl, markdown, plot(shown, T, lengths))
    atomic_write(out / ATTENTION_PLOT, attention_plot(attention, T))
    if curves:
        atomic_write(out / EXTEND_PLOT, curve_plot(curves))
        tables += "\n\n" + curve_markdown(curves)
    for name, figure in read_figures.items():
        atomic_write(out / name, figure)
    written = [str(out / JSONL), str(out / TABLE), str(out / PLOT), str(out / ATTENTION_PLOT)] + (
        [str(out / EXTEND_PLOT)] if curves else []
    )
    return tables, written + [str(out / name) for name in read_figures]


def rewrite(study: FinishedStudy) -> list[str]:
    """Write a finished study's files again from its records (``study.records``: its own, then the opt-in
    readings'), the comparisons computed anew from its eval rows; returns the paths written."""
    of = lambda kind: [r for r in study.records if r["record"] == kind]  # noqa: E731
    readings = [r for r in study.records if r["record"] not in OWN_RECORDS]
    trained = [TrainRecord.from_json(r) for r in of("train")]
    records = StudyRecords(study.study, restored(study.records), trained, of("curve"), of("attention"), readings)
    return _write(study.out, records)[1]


def _train_base(ctx: StudyContext, share: Share = ONE) -> dict[tuple[str, int], dict]:
    """Train every scheme with every seed that ``share`` owns (keeping or resuming those of an earlier command);
    ``{(scheme, seed): train result}``."""
    trained: dict[tuple[str, int], dict] = {}
    opts = ctx.opts
    for k, (seed, scheme) in enumerate(base_models(opts, ctx.seeds)):
        if share.owns(k):
            tag = scheme if opts.seeds == 1 else f"{scheme} seed {seed}"
            train_opts = opts.train_options(scheme, ctx.run_dir(scheme, seed), seed)
            report = TaggedReporter(ctx.report, tag)
            trained[(scheme, seed)] = train_unit(ctx.progress, f"train-{scheme}-seed{seed}", train_opts, report)
    if trained:
        check_same_data({f"{scheme} seed {seed}": r for (scheme, seed), r in trained.items()})
    return trained


def _extend_one(ctx: StudyContext, label: str, seed: int, trained: dict):
    """Fine-tune one extension method from its base run and score it at every length under its saved scaling (each
    a unit of ``progress``)."""
    scheme, method = extension_rows(ctx.opts)[label]
    name = f"{label}@{ctx.opts.extend_to}x"
    run_dir = ctx.run_dir(name, seed)
    source = Path(trained[(scheme, seed)]["run_dir"])
    result, curve = fine_tune(ctx, label, source, run_dir, seed)
    unit = f"score-{name}-seed{seed}"
    if (done := ctx.progress.get(unit)) is None:
        rows, attention = score_extended(ctx, scheme, method, name, seed, result, run_dir)
        done = ctx.progress.put(unit, {"rows": rows, "attention": attention})
    trained_record = TrainRecord.of_result(scheme, seed, result, method, ctx.opts.extend_to)
    return done["rows"], done["attention"], trained_record, curve


__all__ = ["FILES", "length_study", "prepare_study_dir", "rewrite"]
