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
* RoPE scaling uses factor ``L / T`` for ``linear``, ``ntk`` and ``yarn``.
  ``dynamic-ntk`` derives its scale from the sequence length itself (factor 1:
  scale ``max(1, L / T)``); on full windows it therefore equals ``ntk``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from octlm.train.device import resolve_device, torch_settings
from octlm.errors import OctlmError
from octlm.train.evaluate import evaluate
from octlm.fileio import atomic_write
from octlm.run.outputs import check_out_spares
from octlm.declare import Bound, at_least, check_fields, flag, option, option_default, option_fields, refused, same_as
from octlm.train.options import TrainOptions, scheme_options
from octlm.train.options import check_options as check_train_options
from octlm.model.positions import ROPE_SCALINGS, SCHEME_NAMES, SCHEMES, length_study_schemes, schemes_taking
from octlm.model.positions.base import with_scheme_options
from octlm.report import Reporter, TaggedReporter
from octlm.run.folder import RunFolder
from octlm.studies.task import TASK_DEFAULTS, TASK_SEEDS, TASK_STEPS
from octlm.studies.tasks import TASKS
from octlm.studies.extension import EXTEND_PLOT, EXTENSIONS, curve_markdown, curve_plot, fine_tune, labels_for, measure_steps
from octlm.studies.length_tables import NOT_AVAILABLE, mean_rows, bucket_bpb, format_tables, markdown_tables, plot, position_buckets, position_curve

#: Seconds of training per model by default. With the extension stage on, the
#: whole default study fits in 30 minutes on two CPU cores with room to spare
#: (docs/length-study.md gives the measured time and the command).
DEFAULT_TIME_BUDGET = 180.0
#: Wall minutes of the default study, extension stage included (``--threads 1``, tinyshakespeare).
MEASURED_MINUTES = 18.4
#: The default extension stage: fine-tune a copy of each model at 4 x T for
#: 100 steps (Chen et al. 2023 fine-tune LLaMA at 2x to 16x; 4x keeps the
#: longest fine-tuning window at 512 tokens, cheap on a CPU).
DEFAULT_EXTEND_TO = 4
JSONL = "length.jsonl"
PLOT = "length.png"
TABLE = "length.md"
RUNS = "runs"


def _check_extend_to(value: int) -> None:
    """``--extend-to`` is 0 (no extension stage) or a multiple >= 2: at 1x there is nothing to extend to."""
    if value != 0 and not value >= 2:
        raise OctlmError(f"--extend-to must be 0 (no extension stage) or an integer >= 2, got {value}")


def _train_default(name: str) -> Any:
    """``octlm train``'s default for option ``name``."""
    return option_default(next(f for f in option_fields(TrainOptions) if f.name == name))


def _task_default(name: str, what: str) -> str:
    """Help text of an option whose default differs between the text and the task study."""
    return f"{what} (default: {_train_default(name):g} as octlm train; with --task {TASK_DEFAULTS[name]:g})"


@dataclass
@with_scheme_options(handed_over=True)
class LengthOptions:
    """Everything ``octlm length`` takes. Units are in each help text.

    The options it shares with ``octlm train`` are that command's own
    declarations (:func:`octlm.train.options.same_as`): the same default, help and
    bounds, handed to every model's :class:`TrainOptions` by name.

    Model width, depth, learning rate, seeds and the schemes default to
    ``None``, filled on construction (:meth:`__post_init__`): with ``--task``,
    the task study's values (:data:`octlm.studies.task.TASK_DEFAULTS`,
    ``TASK_SEEDS``, every registered scheme); without it, ``octlm train``'s
    and the text study's own.
    """

    text: list[str] = same_as(TrainOptions, "text", help="UTF-8 text files or folders (the same split, tokenizer and seed for every model)")
    out: str | None = option(None, "study folder to create: runs/<scheme>/, length.jsonl, length.png, length.md")
    # The study checks its budget itself (one of --time-budget and --max-steps must hold), so no train bound here.
    time_budget: float | None = same_as(
        TrainOptions, "time_budget", default=DEFAULT_TIME_BUDGET, bounds=None,
        help=f"seconds of training per model, timed once into one step count for every model (default {DEFAULT_TIME_BUDGET:g}; "
        f"the whole default study, extension stage included, took {MEASURED_MINUTES} minutes on tinyshakespeare with --threads 1 "
        "on a busy 2-core machine, within the 30 minutes it is sized for on 2 CPU cores; 30 gives a quick look)")
    max_steps: int | None = same_as(TrainOptions, "max_steps", help="train each model for exactly this many steps instead of --time-budget (reproducible; length.jsonl then records time_budget null); "
                                     f"with --task the only budget (default {TASK_STEPS})")
    train_length: int = same_as(TrainOptions, "context_length", help="context length T the models train on (tokens)", bounds=at_least(2, "tokens"))
    multipliers: list[int] = option([1, 2, 4, 8, 16], "evaluation lengths as multiples of T", bounds=Bound(1, says="integers >= 1"), nargs="+", metavar="M")
    # The default is read from the registry when used: each scheme says whether the study trains it, in table order.
    schemes: list[str] | None = option(
        None, "position schemes to train and compare (default: those the text study trains, in registration order: "
        f"{' '.join(length_study_schemes())}; with --task every scheme)", nargs="+", choices=SCHEME_NAMES, metavar="SCHEME")
    rope_scalings: list[str] | None = option(
        None, f"RoPE context-extension methods to evaluate the rope model under (default: {' '.join(ROPE_SCALINGS)} when rope is "
        "among --schemes, else none)", nargs="*", choices=list(ROPE_SCALINGS), metavar="METHOD")
    vocab_size: int = same_as(TrainOptions, "vocab_size")
    d_model: int | None = same_as(TrainOptions, "d_model", default=None, help=_task_default("d_model", "model width C"))
    n_heads: int = same_as(TrainOptions, "n_heads")
    n_layers: int | None = same_as(TrainOptions, "n_layers", default=None, help=_task_default("n_layers", "transformer blocks"))
    batch_size: int = same_as(TrainOptions, "batch_size")
    learning_rate: float | None = same_as(TrainOptions, "learning_rate", default=None, help=_task_default("learning_rate", "peak AdamW learning rate"))
    eval_tokens: int = option(8192, "tokens per evaluation forward pass (windows per batch = this / length)", bounds=at_least(1))
    encoding: str = same_as(TrainOptions, "encoding")
    val_fraction: float = same_as(TrainOptions, "val_fraction")
    seed: int = same_as(TrainOptions, "seed", help="random seed, the same for every model")
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")
    overwrite: bool = option(False, "replace an existing study folder at --out")
    # The task study (octlm.studies.task) reads the shape, schemes, steps and seeds and these two.
    task: str | None = option(
        None, "train on a synthetic task instead of --text: sizes 1..--task-length, exact match at 1x-4x. The default copy study "
        f"(every scheme x {TASK_SEEDS} seeds x {TASK_STEPS} steps) took 16.1 minutes with --threads 1 on a shared 2-core machine, and its "
        "best scheme at 1x (xpos) copied 93.8%% of instances exactly", choices=list(TASKS))
    task_length: int = option(16, "longest training instance of --task, L (items: symbols, pairs or filler tokens)", bounds=at_least(1, "items"))
    seeds: int | None = option(None, "train every model (base and extended) with this many seeds (--seed, --seed + 1, ...); tables show "
                               f"mean ± std (default: 1; with --task {TASK_SEEDS})", bounds=at_least(1))
    extend_to: int = option(DEFAULT_EXTEND_TO, "extension stage: fine-tune a copy of each model at this multiple M of T "
                            "(octlm train --init-from); 0 skips the stage", check=_check_extend_to, metavar="M")
    extend_steps: int = option(100, "fine-tuning steps of each extension (curve points after 0, N/4, N/2, 3N/4 and N)", bounds=at_least(1),
                               metavar="N")
    extend_learning_rate: float = option(1e-3, "peak learning rate of the fine-tunes", bounds=Bound(0, math.inf, low_open=True, high_open=True,
                                                                                                  says="a finite number > 0"))

    # ... then every position scheme's options (with_scheme_options): each model takes those its scheme reads.

    def __post_init__(self) -> None:
        # The text study trains octlm train's model; the task study a deeper, narrower one that learns copy in minutes.
        for name, task_value in TASK_DEFAULTS.items():
            if getattr(self, name) is None:
                setattr(self, name, task_value if self.task else _train_default(name))
        if self.seeds is None:
            self.seeds = TASK_SEEDS if self.task else 1
        if self.schemes is None:
            # Read from the registry now, so a plug-in scheme registered after import takes part.
            self.schemes = list(SCHEMES) if self.task else length_study_schemes()

    def resolved(self) -> LengthOptions:
        """A copy with the defaults that depend on other options filled in: what the study runs and records."""
        scalings = self.rope_scalings
        if scalings is None:
            # Unset means "every method some model of the study can take": none when no scheme takes one.
            scalings = scalings_taken(self.schemes)
        # --max-steps replaces the budget (train_options drops it), so the record must not claim one.
        budget = None if self.max_steps is not None else self.time_budget
        # The extension stage scores at M x T, so that length is among the evaluated ones (when some scheme has a method).
        extending = self.extend_to and labels_for(self.schemes)
        multipliers = sorted(set(self.multipliers) | ({self.extend_to} if extending else set()))
        return dataclasses.replace(self, rope_scalings=list(scalings), time_budget=budget, multipliers=multipliers)

    def train_options(self, scheme: str, run_dir: Path, seed: int | None = None) -> TrainOptions:
        """The ``octlm train`` options of one model of the study: the shared ones by name, the rest fixed."""
        unread = scheme_options(scheme)[1]
        shared = {f.metadata["same_as"]: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("same_as") not in unread | {None}}
        shared.update(text=list(self.text), time_budget=None if self.max_steps is not None else self.time_budget)
        if seed is not None:
            shared["seed"] = seed
        return TrainOptions.of(**shared, position=scheme, sample_tokens=0, out=str(run_dir), overwrite=True)


def scalings_taken(schemes: list[str]) -> list[str]:
    """The RoPE scalings (in :data:`ROPE_SCALINGS` order) that at least one of ``schemes`` takes."""
    return [m for m in ROPE_SCALINGS if any(m in SCHEMES[s].scalings() for s in schemes if s in SCHEMES)]


def check_options(opts: LengthOptions) -> None:
    """Reject options that cannot work, naming the flag; nothing is written before this passes."""
    if not opts.text:
        raise OctlmError("--text: give at least one text file or folder, e.g. --text tinyshakespeare (the corpus built into octlm)")
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/length")
    if opts.max_steps is None and (opts.time_budget is None or not opts.time_budget > 0):
        raise OctlmError(f"--time-budget must be a positive number of seconds (or give --max-steps), got {opts.time_budget}")
    check_fields(opts)
    untaken = [m for m in opts.rope_scalings or [] if m not in scalings_taken(opts.schemes)]
    if untaken:
        takers = schemes_taking(untaken[0])
        raise OctlmError(f"--rope-scalings needs the {' or '.join(takers)} model: add {takers[0]} to --schemes or pass --rope-scalings with no methods")
    if len(set(opts.schemes)) != len(opts.schemes):
        raise OctlmError(f"--schemes lists a scheme twice: {opts.schemes}")
    fields = {f.name: f for f in dataclasses.fields(opts)}
    for name in set.intersection(*(scheme_options(s)[1] for s in opts.schemes)) & set(fields):
        if getattr(opts, name) != option_default(fields[name]):
            raise OctlmError(f"{flag(name)} {getattr(opts, name)} means nothing for --schemes {' '.join(opts.schemes)}: none of them reads it; "
                             f"drop {flag(name)}, or add a scheme that reads it")
    for scheme in opts.schemes:
        try:
            train_opts = opts.train_options(scheme, Path(opts.out) / RUNS / scheme)
        except ValueError as err:  # the model refuses the shape (--d-model 30 --n-heads 4)
            raise refused(err) from None
        check_train_options(train_opts)


def validation_tokens(opts: LengthOptions) -> int:
    """Tokens in the validation split, read, split and tokenized as :func:`octlm.train.corpus.prepare_corpus` does.

    Costs one tokenizer training (under a second for tinyshakespeare), which
    is what lets the study refuse a too-long evaluation length before it
    trains anything.
    """
    from octlm.train.corpus import split_and_tokenize
    from octlm.data.tokens import encode_stream

    # Every model of the study reads the same text; only the text options matter here, not the folder.
    text = split_and_tokenize(opts.train_options(opts.schemes[0], Path(RUNS)))
    return len(encode_stream(text.tokenizer, text.val_texts))


def check_validation_length(n_tokens: int, opts: LengthOptions) -> int:
    """The number of windows of the longest evaluation length in ``n_tokens`` validation tokens (>= 1).

    Raises:
        OctlmError: when not even one window (longest length + 1 tokens) fits,
            naming the longest multiplier the text supports.
    """
    T, longest_m = opts.train_length, max(opts.multipliers)
    longest = longest_m * T
    n_windows = (n_tokens - 1) // longest
    if n_windows >= 1:
        return n_windows
    supported = (n_tokens - 1) // T
    fix = (f"lower --multipliers to at most {supported} (the longest length this text supports is {supported * T} tokens), "
           if supported >= 1 else "lower --train-length, ")
    raise OctlmError(
        f"--multipliers {longest_m}: the validation split holds {n_tokens} tokens, fewer than one window of {longest + 1} for "
        f"the longest length ({longest_m} x {T}); {fix}give more text or raise --val-fraction (now {opts.val_fraction})"
    )


def prepare_study_dir(out: str, overwrite: bool, texts: list[str] = ()) -> Path:
    """Create the study folder; an existing study is replaced only with ``overwrite``, anything else (its own ``--text`` included) never."""
    path = Path(out)
    check_out_spares(path, "--out", [("--text", text) for text in texts])

    def refuse(folder: RunFolder) -> str | None:
        is_study = (path / RUNS).is_dir() and all(p.name in {RUNS, JSONL, PLOT, TABLE, EXTEND_PLOT} for p in path.iterdir())
        return None if is_study else f"--out {path}: holds files that are not an octlm length study, which octlm never replaces; choose a new or empty folder"

    def foreign(folder: RunFolder) -> list[str]:
        # The study's runs/ holds only its runs, each only what octlm wrote there.
        found = []
        for run in (RunFolder(path / RUNS / name) for name in RunFolder(path / RUNS).names()):
            if not (run.path.is_dir() and run.is_octlm_run()):
                found.append(f"{RUNS}/{run.path.name}")
            else:
                found += [f"{RUNS}/{run.path.name}/{name}" for name in run.foreign_files()]
        return found

    study = RunFolder(path)
    study.check_target(overwrite, refuse, f"--out {path}: already holds a length study; choose another --out or pass --overwrite to replace it",
                       foreign=foreign)
    study.recreate()
    RunFolder(path / RUNS).create()
    return path


def _same_data(results: dict[str, dict]) -> None:
    """Every run must hold the same tokenizer and token streams (octlm's data preparation is deterministic)."""
    fingerprints = {}
    for scheme, result in results.items():
        folder = RunFolder(result["run_dir"])
        tokens = folder.read_manifest()["tokens"]
        fingerprints[scheme] = (tokens["train"]["sha256"], tokens["val"]["sha256"], folder.tokenizer_path.read_bytes())
    first = next(iter(fingerprints.values()))
    differ = [s for s, f in fingerprints.items() if f != first]
    if differ:
        raise OctlmError(f"the runs of {', '.join(differ)} prepared different tokens from the same text; the comparison would not be fair")


def _validation_stream(run_dir: Path) -> np.ndarray:
    return RunFolder(run_dir).tokens("val")


def _row(scheme: str, method: str | None, factor: float | None, multiplier: int, length: int) -> dict:
    label = scheme if method is None else f"{scheme}+{method}"
    return {"record": "eval", "label": label, "position": scheme, "rope_scaling": method, "rope_factor": factor, "multiplier": multiplier, "eval_length": length}


def _scored(row: dict, result) -> dict:
    """Fill an eval row: totals, and per window position the mean loss (nats) and the bytes of its targets."""
    nats = np.asarray(result.position_nats)
    row.update(
        status="ok", bpb=result.bpb, loss=result.loss, tokens=result.tokens, bytes=result.bytes, windows=result.blocks,
        position_loss=[round(float(v), 6) for v in nats / result.blocks],
        position_bytes=[int(v) for v in result.position_bytes],
    )
    return row


def _without_positions(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("position_")}


def length_study(opts: LengthOptions, report: Reporter | None = None) -> dict:
    """Run ``octlm length``; returns the result dict (also the last ``--json`` line).

    Writes into ``opts.out``: ``runs/<scheme>/`` (one ``octlm train`` run
    folder per scheme), ``length.jsonl`` (one ``train`` line per model, one
    ``eval`` line per scheme, scaling and length, with per-position loss),
    ``length.png`` (bits per byte against length, and per position at the
    longest length) and ``length.md`` (the tables).

    Raises:
        OctlmError: for bad options, an existing folder, or validation text
            shorter than one window of the longest length (checked before
            anything is trained or written).
    """
    check_options(opts)
    with torch_settings(opts.threads, False):
        return _study(opts.resolved(), report or Reporter())


def _study(opts: LengthOptions, report: Reporter) -> dict:
    device = resolve_device(opts.device)
    check_validation_length(validation_tokens(opts), opts)
    out = prepare_study_dir(opts.out, opts.overwrite, opts.text)
    T, multipliers = opts.train_length, opts.multipliers
    lengths = [m * T for m in multipliers]
    t0 = time.perf_counter()
    steps = None
    if opts.max_steps is None:  # equal training: the budget becomes one step count for every model
        steps = measure_steps(opts, out / RUNS / ".timing", report)
        opts = dataclasses.replace(opts, max_steps=steps["steps"])
    report.event("study", f"length study: {len(opts.schemes)} models ({', '.join(opts.schemes)}) x {opts.seeds} seed(s), {opts.max_steps} steps "
                 f"each, T={T}, evaluated at {', '.join(map(str, lengths))} tokens", schemes=opts.schemes, lengths=lengths, options=dataclasses.asdict(opts))
    seeds = [opts.seed + i for i in range(opts.seeds)]
    trained = _train_base(opts, out, seeds, report)
    val = _validation_stream(Path(next(iter(trained.values()))["run_dir"]))
    n_windows = check_validation_length(len(val), opts)  # the stream scored, which the check above predicted
    scored = np.asarray(val[: n_windows * max(lengths) + 1])
    report.event("evaluate", f"evaluating on the first {len(scored) - 1:,} validation targets ({n_windows} windows of {max(lengths)})",
                 targets=len(scored) - 1)
    t_eval = time.perf_counter()
    rows: list[dict] = []
    for (scheme, seed), result in trained.items():
        rows += _score_base(opts, scheme, seed, result["run_dir"], scored, device, report)
    train_rows = [_train_row(scheme, seed, r, opts.seeds) for (scheme, seed), r in trained.items()]
    curves: list[dict] = []
    if opts.extend_to:
        for seed in seeds:
            for label in labels_for(opts.schemes):
                ext_rows, ext_train, curve = _extend_one(opts, label, seed, trained, out, scored, device, report)
                rows += ext_rows
                train_rows.append(ext_train)
                curves += curve
    study = {"record": "study", "train_length": T, "lengths": lengths, "targets": len(scored) - 1, "equal_steps": steps, "options": dataclasses.asdict(opts)}
    lines = [json.dumps(r) for r in [study, *train_rows, *rows, *curves]]
    atomic_write(out / JSONL, "\n".join(lines) + "\n")
    shown = mean_rows(rows)
    tables = format_tables(shown, T, lengths, train_rows)
    atomic_write(out / TABLE, markdown_tables(shown, T, lengths, train_rows) + (f"\n{curve_markdown(curves)}" if curves else ""))
    atomic_write(out / PLOT, plot(shown, T, lengths))
    if curves:
        atomic_write(out / EXTEND_PLOT, curve_plot(curves))
        tables += "\n\n" + curve_markdown(curves)
    seconds = time.perf_counter() - t0
    result = {
        "out": str(out), "train_length": T, "lengths": lengths, "targets": len(scored) - 1, "trained": train_rows,
        "results": [_without_positions(r) for r in rows], "curves": curves, "equal_steps": steps,
        "jsonl": str(out / JSONL), "plot": str(out / PLOT), "table": str(out / TABLE),
        "seconds": seconds, "eval_seconds": time.perf_counter() - t_eval,
    }
    text = f"{tables}\n\nwrote {out / JSONL}, {out / PLOT} and {out / TABLE} in {seconds / 60:.1f} minutes"
    report.result(result, text)
    return result


def _run_dir(out: Path, name: str, seed: int, opts: LengthOptions) -> Path:
    return out / RUNS / (name if opts.seeds == 1 else f"{name}-seed{seed}")


def _train_base(opts: LengthOptions, out: Path, seeds: list[int], report: Reporter) -> dict[tuple[str, int], dict]:
    """Train every scheme with every seed; ``{(scheme, seed): train result}``."""
    from octlm.train.launch import train

    trained: dict[tuple[str, int], dict] = {}
    for seed in seeds:
        for scheme in opts.schemes:
            tag = scheme if opts.seeds == 1 else f"{scheme} seed {seed}"
            result = train(opts.train_options(scheme, _run_dir(out, scheme, seed, opts), seed), TaggedReporter(report, tag))
            trained[(scheme, seed)] = result
            if result.get("interrupted"):
                raise KeyboardInterrupt
    _same_data({f"{scheme} seed {seed}": r for (scheme, seed), r in trained.items()})
    return trained


def _train_row(name: str, seed: int, result: dict, n_seeds: int) -> dict:
    keep = ("steps", "train_seconds", "tokens_per_second", "val_bpb", "run_dir")
    return {"record": "train", "position": name, "seed": seed, **{k: v for k, v in result.items() if k in keep}}


def _score_lengths(opts: LengthOptions, model, tokenizer, make_row, scored: np.ndarray, device, report: Reporter, scale) -> list[dict]:
    """Score ``model`` at every evaluation length; ``scale(m)`` sets its scaling first (or leaves it)."""
    rows = []
    for m in opts.multipliers:
        length = m * opts.train_length
        row = make_row(m, length)
        if model.max_length is not None and length > model.max_length:
            row.update(status=NOT_AVAILABLE, bpb=None)
        else:
            scale(m)
            result = evaluate(model, scored, tokenizer.bytes_per_token, length, max(1, opts.eval_tokens // length), None, device, per_position=True)
            _scored(row, result)
        rows.append(row)
        shown = f"{row['bpb']:.4f} bits per byte" if row["bpb"] is not None else row["status"]
        report.event("length", f"{row['label']:>18} at {length:>6} tokens: {shown}", **_without_positions(row))
    return rows


def _score_base(opts: LengthOptions, scheme: str, seed: int, run_dir: str, scored: np.ndarray, device, report: Reporter) -> list[dict]:
    """A base model at every length, plain and under each RoPE scaling it takes (factor = length / T)."""
    from octlm.run.folder import load_run

    model, tokenizer = load_run(run_dir, device)
    rows: list[dict] = []
    for method in [None, *(m for m in opts.rope_scalings if m in SCHEMES[scheme].scalings())]:
        def factor(m: int, method=method) -> float | None:
            return None if method is None else (1.0 if method == "dynamic-ntk" else float(m))

        def make_row(m: int, length: int, method=method) -> dict:
            return {**_row(scheme, method, factor(m), m, length), "seed": seed}

        rows += _score_lengths(opts, model, tokenizer, make_row, scored, device, report,
                               lambda m, method=method: model.set_rope_scaling(method, factor(m) or 1.0))
    model.set_rope_scaling(None)
    return rows


def _extend_one(opts: LengthOptions, label: str, seed: int, trained: dict, out: Path, scored: np.ndarray, device, report: Reporter):
    """Fine-tune one extension method from its base run and score it at every length under its saved scaling."""
    from octlm.run.folder import load_run

    scheme, method = EXTENSIONS[label]
    name = f"{label}@{opts.extend_to}x"
    run_dir = _run_dir(out, name, seed, opts)
    result, curve = fine_tune(opts, label, Path(trained[(scheme, seed)]["run_dir"]), run_dir, seed, scored, device, report)
    model, tokenizer = load_run(run_dir, device)

    def make_row(m: int, length: int) -> dict:
        row = {**_row(scheme, method, float(opts.extend_to) if method else None, m, length), "seed": seed}
        return {**row, "label": name, "extended_to": opts.extend_to, "extend_steps": result["steps"]}

    rows = _score_lengths(opts, model, tokenizer, make_row, scored, device, report, lambda m: None)
    return rows, _train_row(name, seed, result, opts.seeds), curve


__all__ = ["DEFAULT_TIME_BUDGET", "LengthOptions", "bucket_bpb", "check_options", "format_tables", "length_study", "markdown_tables", "plot", "position_buckets", "position_curve"]
