"""Scoring one model of the length study at every evaluation length: two readings of bits per byte, and its attention.

At length ``L`` the scored validation stream (its first ``N`` targets, the
same for every length) is read twice (:mod:`octlm.train.evaluate`):

* non-overlapping windows of ``L`` targets, each starting from nothing, with
  the loss kept per window position (where along a window a scheme breaks);
* sliding windows that advance by a stride ``S`` (``--eval-stride``; default
  ``L / 2``) and score only the targets no earlier window scored, so every
  target after the first window is predicted from at least ``L - S`` tokens.
  A longer window then helps only by what the extra context is worth, not
  by putting fewer targets near a window's start (Press et al. 2022,
  Appendix B, the "early token curse").

Each reading also keeps every window's summed nats and bytes, which the
comparisons' paired bootstrap resamples (:mod:`octlm.studies.length.comparisons`).
Beside each eval row the study keeps an ``attention`` record
(:mod:`octlm.studies.length.attention`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from octlm.model.attention_recipes import NO_SCALE
from octlm.studies.length.attention import attention_record
from octlm.studies.length.comparisons import window_fields
from octlm.studies.length.context import StudyContext
from octlm.studies.length.options import LengthOptions
from octlm.studies.length.tables import NOT_AVAILABLE
from octlm.train.evaluate import evaluate, evaluate_sliding


def stride_at(length: int, opts: LengthOptions) -> int:
    """The sliding reading's stride at ``length``: ``--eval-stride`` (at most ``length``), else half the length."""
    return min(opts.eval_stride, length) if opts.eval_stride else max(1, length // 2)


#: The label suffix of a row scored under an attention scale (``--attention-scales``): Qwen's name for it.
SCALE_LABELS = {"log": "logn"}


def eval_row(
    scheme: str, method: str | None, factor: float | None, multiplier: int, length: int, attention_scale: str = NO_SCALE
) -> dict:
    """An eval record's identity: ``label`` is the scheme, with ``+method`` under a RoPE scaling or ``+logn`` under the
    log attention scale."""
    label = scheme if method is None else f"{scheme}+{method}"
    row = {
        "record": "eval",
        "label": label,
        "position": scheme,
        "rope_scaling": method,
        "rope_factor": factor,
        "multiplier": multiplier,
        "eval_length": length,
    }
    if attention_scale != NO_SCALE:
        row.update(label=f"{label}+{SCALE_LABELS[attention_scale]}", attention_scale=attention_scale)
    return row


def _scored(row: dict, result) -> dict:
    """Fill an eval row: totals, per window position the mean loss (nats) and the bytes of its targets, and per
    window its nats and bytes."""
    nats = np.asarray(result.position_nats)
    row.update(
        status="ok",
        bpb=result.bpb,
        loss=result.loss,
        tokens=result.tokens,
        bytes=result.bytes,
        windows=result.blocks,
        position_loss=[round(float(v), 6) for v in nats / result.blocks],
        position_bytes=[int(v) for v in result.position_bytes],
        **window_fields("bpb", result),
    )
    return row


def without_positions(row: dict) -> dict:
    """``row`` without its per-position and per-window lists: the totals a report or a result shows."""
    return {k: v for k, v in row.items() if not k.startswith(("position_", "window_", "sliding_window_"))}


def score_lengths(ctx: StudyContext, model, tokenizer, make_row, scale) -> tuple[list[dict], list[dict]]:
    """Score ``model`` at every evaluation length of the study, both readings and its attention, on ``ctx.scored``;
    ``scale(m)`` sets its scaling first (or leaves it).

    Returns ``(eval rows, attention records)``. Past a learned table's rows
    the row says so (:data:`NOT_AVAILABLE`) and has neither reading nor attention.
    """
    opts, scored, device = ctx.opts, ctx.scored, ctx.device
    rows, attention = [], []
    for m in opts.multipliers:
        length = m * opts.train_length
        row = make_row(m, length)
        if model.max_length is not None and length > model.max_length:
            row.update(status=NOT_AVAILABLE, bpb=None, sliding_bpb=None)
        else:
            scale(m)
            batch = max(1, opts.eval_tokens // length)
            _scored(
                row,
                evaluate(
                    model,
                    scored,
                    tokenizer.bytes_per_token,
                    length,
                    batch,
                    None,
                    device,
                    per_position=True,
                    per_block=True,
                ),
            )
            stride = stride_at(length, opts)
            slid = evaluate_sliding(model, scored, tokenizer.bytes_per_token, length, stride, batch, device, True)
            row.update(sliding_bpb=slid.bpb, sliding_loss=slid.loss, eval_stride=stride, sliding_windows=slid.blocks)
            row.update(window_fields("sliding_bpb", slid))
            attention.append(attention_record(model, scored, length, opts.train_length, device, row))
        rows.append(row)
        shown = (
            row["status"]
            if row["bpb"] is None
            else f"{row['bpb']:.4f} bits per byte, {row['sliding_bpb']:.4f} sliding (stride {stride})"
        )
        ctx.report.event("length", f"{row['label']:>18} at {length:>6} tokens: {shown}", **without_positions(row))
    return rows, attention


def score_base(ctx: StudyContext, scheme: str, seed: int, run_dir: str) -> tuple[list[dict], list[dict]]:
    """A base model at every length, plain, under each RoPE scaling it takes (factor = length / T) and under each
    ``--attention-scales``."""
    from octlm.run.load import load_run

    opts = ctx.opts
    model, tokenizer = load_run(run_dir, ctx.device)
    rows: list[dict] = []
    attention: list[dict] = []
    for method in [None, *opts.scalings_of(scheme)]:

        def factor(m: int, method=method) -> float | None:
            return None if method is None else (1.0 if method == "dynamic-ntk" else float(m))

        def make_row(m: int, length: int, method=method) -> dict:
            return {**eval_row(scheme, method, factor(m), m, length), "seed": seed}

        scores, looks = score_lengths(
            ctx, model, tokenizer, make_row, lambda m, method=method: model.set_rope_scaling(method, factor(m) or 1.0)
        )
        rows += scores
        attention += looks
    model.set_rope_scaling(None)
    for attention_scale in opts.attention_scales:  # the same weights, scored with the logits scaled past T
        trained_scale = model.config.attention_scale
        model.set_attention_scale(attention_scale)
        scores, looks = score_lengths(
            ctx,
            model,
            tokenizer,
            lambda m, L, scale=attention_scale: {**eval_row(scheme, None, None, m, L, scale), "seed": seed},
            lambda m: None,
        )
        model.set_attention_scale(trained_scale)
        rows, attention = rows + scores, attention + looks
    return rows, attention


def score_extended(
    ctx: StudyContext, scheme: str, method: str | None, name: str, seed: int, result: dict, run_dir: Path
) -> tuple[list[dict], list[dict]]:
    """A fine-tuned model (row ``name``, from ``scheme`` under ``method``) at every length, under the scaling it trained
    with: ``(eval rows, attention records)``."""
    from octlm.run.load import load_run

    opts = ctx.opts
    model, tokenizer = load_run(run_dir, ctx.device)

    def make_row(m: int, length: int) -> dict:
        row = {**eval_row(scheme, method, float(opts.extend_to) if method else None, m, length), "seed": seed}
        return {**row, "label": name, "extended_to": opts.extend_to, "extend_steps": result["steps"]}

    return score_lengths(ctx, model, tokenizer, make_row, lambda m: None)


__all__ = [
    "SCALE_LABELS",
    "eval_row",
    "score_base",
    "score_extended",
    "score_lengths",
    "stride_at",
    "without_positions",
]
