"""The length study's extension stage, and its equal-steps rule.

After the base models train at ``T``, each extension method fine-tunes a copy
for ``N`` steps at ``M x T`` (``octlm train --init-from``, :mod:`octlm.train.init_from`):

* ``rope`` (plain fine-tuning), ``rope+linear`` (position interpolation, Chen
  et al. 2023), ``rope+ntk`` and ``rope+yarn`` (Peng et al. 2023) and
  ``rope+llama3`` (Llama 3.1's frequency-dependent scaling), each with factor ``M``;
* ``learned``, its table interpolated to ``M x T`` rows;
* ``alibi`` and ``none`` as controls;
* each layout row (``--layouts``, :mod:`octlm.studies.shared.rows`) fine-tuned
  plainly, and with YaRN on its global RoPE layers where it has some
  (:func:`~octlm.studies.shared.rows.row_extensions` says why).

Each fine-tune keeps the tokens per step of the base models (``batch_size / M``
blocks of ``M x T``) and is scored at ``M x T`` after 0, N/4, N/2, 3N/4 and N
steps: the curve of bits per byte against fine-tuning steps. The finished
models are then scored at every multiplier like the base ones.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from octlm.declare import replaced
from octlm.model.positions import facts_of
from octlm.report import Reporter, SilentReporter, TaggedReporter
from octlm.studies.length.context import StudyContext
from octlm.studies.length.fine_tunes import extension_rows
from octlm.studies.length.models import train_unit
from octlm.studies.shared.rows import layout_rows
from octlm.train.evaluate import evaluate

#: Curve points per fine-tune, after step 0.
CURVE_POINTS = 4
EXTEND_PLOT = "extend.png"
#: Steps of the timing run that turns --time-budget into a step count.
TIMING_STEPS = 8


def measure_steps(opts, timing_dir: Path, report: Reporter) -> dict:
    """One step count for every model of a study: ``--time-budget`` over the measured seconds per step.

    Trains the first scheme of the study that says it times the study
    (``times_length_study`` of its facts: one of the slower ones), else the
    first scheme, and each layout row (a window layer's band mask can make
    it the slowest), for :data:`TIMING_STEPS` steps in ``timing_dir``, which
    is removed after; the slowest sets the count. The first steps carry some
    start-up cost, so the count errs low.

    Returns: ``{"steps", "seconds_per_step", "timed_scheme", "time_budget"}``.
    """
    scheme = next((s for s in opts.schemes if facts_of(s).times_length_study), opts.schemes[0])
    rows = [scheme, *(row.label for row in layout_rows(opts.layouts))]
    timed = {row: _seconds_per_step(opts, row, timing_dir, report) for row in rows}
    scheme, per_step = max(timed.items(), key=lambda item: item[1])
    steps = max(1, int(opts.time_budget / per_step))
    report.event(
        "steps",
        f"{per_step:.3f}s per step ({scheme}, timed over {TIMING_STEPS} steps): every model trains {steps} steps "
        f"for the {opts.time_budget:g}s budget",
        steps=steps,
        seconds_per_step=per_step,
        timed_scheme=scheme,
    )
    return {"steps": steps, "seconds_per_step": per_step, "timed_scheme": scheme, "time_budget": opts.time_budget}


def _seconds_per_step(opts, row: str, timing_dir: Path, report: Reporter) -> float:
    """Seconds per training step of the study's model ``row`` over :data:`TIMING_STEPS` steps in ``timing_dir``."""
    from octlm.train.launch import train

    timing = dataclasses.replace(
        opts.train_options(row, timing_dir),
        log_to=[],
        time_budget=None,
        max_steps=TIMING_STEPS,
        eval_interval=10**9,
        final_eval_blocks=1,
        save_every=0,
    )
    result = train(timing, SilentReporter(report, "timing"))
    shutil.rmtree(timing_dir, ignore_errors=True)
    return result["train_seconds"] / max(result["steps"], 1)


def extension_options(opts, label: str, source_dir: Path, run_dir: Path, seed: int):
    """The ``octlm train`` options of one fine-tune: from ``source_dir`` at ``extend_to x T``, same tokens per step."""
    from octlm.train.init_from import init_from_options

    scheme, method = extension_rows(opts)[label]
    M = opts.extend_to
    base = opts.train_options(scheme, run_dir, seed)
    steps = opts.extend_steps
    tuned = replaced(
        base,
        init_from=str(source_dir),
        context_length=M * opts.train_length,
        batch_size=max(1, opts.batch_size // M),
        max_steps=steps,
        time_budget=None,
        learning_rate=opts.extend_learning_rate,
        warmup_steps=max(1, steps // 10),
        # Muon's rate, when it trains, falls with AdamW's: the fine-tune keeps the base run's ratio between them.
        muon_lr=base.muon_lr * opts.extend_learning_rate / base.learning_rate
        if base.optimizer == "muon"
        else base.muon_lr,
        save_every=max(1, steps // CURVE_POINTS),
        eval_interval=10**9,
        rope_scaling=method,
        rope_factor=float(M) if method else None,
    )
    return init_from_options(tuned, set())


def fine_tune(ctx: StudyContext, label: str, source_dir: Path, run_dir: Path, seed: int) -> tuple[dict, list[dict]]:
    """Fine-tune one extension and score it at ``M x T`` along the way; returns the train result and the curve rows.

    The curve points are read from the run's own ``model.safetensors``, which
    the run saves every ``N / 4`` steps, before the step after it runs. The
    fine-tune and each curve point are units of ``progress``
    (:class:`octlm.studies.shared.progress.StudyProgress`): a continued study keeps
    those recorded and resumes a fine-tune stopped midway from its checkpoint.

    Raises:
        KeyboardInterrupt: when the fine-tune was interrupted (its checkpoint is saved).
    """
    opts, scored, device, progress = ctx.opts, ctx.scored, ctx.device, ctx.progress
    from octlm.model import Decoder
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run
    from octlm.train.init_from import prepare_model

    tuned = extension_options(opts, label, source_dir, run_dir, seed)
    length = tuned.model.context_length
    tokenizer = RunFolder(source_dir).read_tokenizer()
    unit = f"extend-{label}-seed{seed}"

    def score(load, step: int) -> None:
        if progress.get(f"curve-{label}-seed{seed}-step{step}") is not None:
            return
        result = evaluate(
            load().to(device).eval(),
            scored,
            tokenizer.bytes_per_token,
            length,
            max(1, opts.eval_tokens // length),
            None,
            device,
        )
        point = {
            "record": "curve",
            "label": label,
            "seed": seed,
            "step": step,
            "eval_length": length,
            "bpb": result.bpb,
        }
        progress.put(f"curve-{label}-seed{seed}-step{step}", point)
        ctx.report.event(
            "curve", f"[{label} seed {seed}] after {step} steps: {result.bpb:.4f} bits per byte at {length}", **point
        )

    def start() -> Decoder:
        model = Decoder(tuned.model_config(tokenizer.vocab_size, tokenizer.eot_id))
        prepare_model(model, tuned, load_source=True)
        return model

    if progress.get(unit) is None:
        score(start, 0)

    def hook(step: int) -> None:
        if step > 0 and step % tuned.save_every == 0:
            score(lambda: load_run(run_dir, device)[0], step)

    result = train_unit(progress, unit, tuned, TaggedReporter(ctx.report, f"{label}@{opts.extend_to}x"), hook)
    score(lambda: load_run(run_dir, device)[0], result["steps"])
    steps = [0, *range(tuned.save_every, result["steps"], tuned.save_every), result["steps"]]
    return result, [progress.get(f"curve-{label}-seed{seed}-step{step}") for step in steps]


def curve_markdown(curves: list[dict]) -> str:
    """Bits per byte at ``M x T`` against fine-tuning steps, one row per method (mean ± std over seeds)."""
    steps = sorted({c["step"] for c in curves})
    by_label: dict[str, dict[int, list[float]]] = {}
    for c in curves:
        by_label.setdefault(c["label"], {}).setdefault(c["step"], []).append(c["bpb"])
    length = curves[0]["eval_length"]
    lines = [f"Bits per byte at {length} tokens against fine-tuning steps at that length:", ""]
    lines += ["| method | " + " | ".join(f"{s} steps" for s in steps) + " |", "| --- |" + " ---: |" * len(steps)]
    for label, points in by_label.items():
        lines.append(f"| `{label}` | " + " | ".join(_mean_std(points.get(s, [])) for s in steps) + " |")
    return "\n".join(lines) + "\n"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"


def curve_plot(curves: list[dict]) -> bytes:
    """PNG bytes: bits per byte at ``M x T`` against fine-tuning steps per method, a band of ± one std over seeds."""
    from octlm.inspect.figures import Figure  # matplotlib, whatever MPLBACKEND says

    fig = Figure(figsize=(7, 5), dpi=110)
    ax = fig.subplots()
    by_label: dict[str, dict[int, list[float]]] = {}
    for c in curves:
        by_label.setdefault(c["label"], {}).setdefault(c["step"], []).append(c["bpb"])
    for label, points in by_label.items():
        steps = sorted(points)
        mean = np.array([np.mean(points[s]) for s in steps])
        std = np.array([np.std(points[s], ddof=1) if len(points[s]) > 1 else 0.0 for s in steps])
        (line,) = ax.plot(steps, mean, marker="o", label=label)
        ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("fine-tuning steps at the new length")
    ax.set_ylabel(f"validation bits per byte at {curves[0]['eval_length']} tokens")
    ax.set_title("which method extends cheapest")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from octlm.inspect.figures import png_bytes

    return png_bytes(fig)


__all__ = [
    "CURVE_POINTS",
    "EXTEND_PLOT",
    "curve_markdown",
    "curve_plot",
    "extension_options",
    "fine_tune",
    "measure_steps",
]
