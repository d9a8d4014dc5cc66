"""The long-context tokens reading of a finished length study (``--long-tokens``; :mod:`~.long_tokens`): every
target's nats, per model, length and reading, reduced to the marked targets.

The study's own scoring (:mod:`octlm.studies.length.scoring`) keeps sums per
window and per window position, never per target, so this reading scores every
row of the study again (base models plain and under each scaling or attention
scale, fine-tuned models under their own), target by target, through the same
windows (:func:`octlm.train.evaluate.sliding_windows`): as many forward passes
as the study's two readings, plus the reference's short-context reading. It
roughly doubles the study's evaluation time, which is why it is opt-in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from octlm.data.tokens import gather_blocks
from octlm.errors import OctlmError
from octlm.model import cross_entropy
from octlm.report import Reporter
from octlm.studies.length.comparisons import restored
from octlm.studies.length.readings.long_token_tables import long_tokens_markdown
from octlm.studies.length.readings.long_tokens import (
    GAIN_NATS,
    LOSS_NATS,
    SUMMARY,
    comparison_records,
    examples,
    mark,
    reference_label,
    row_record,
    window_of,
    window_sums,
)
from octlm.studies.length.readings.reading import FinishedStudy, Param, Reading
from octlm.studies.length.records import ScoredModel

#: The short context by default, in tokens: sliding windows of 16 (each target sees 8 to 16 tokens), T / 8 at the
#: default T = 128. The study's own shortest reading (T, 64 to 128 tokens) marks no target at the default shape:
#: its models gain almost nothing from context past 64 tokens (docs/length-study.md, long-context tokens).
DEFAULT_SHORT = 16


@torch.no_grad()
def target_nats(model, tokens: np.ndarray, length: int, stride: int, batch_size: int, device) -> np.ndarray:
    """The nats of every target of ``tokens`` [N + 1] read in windows of ``length`` advancing by ``stride``: float64
    [N], target ``i`` being ``tokens[i + 1]``.

    ``stride == length`` is the non-overlapping reading of :func:`octlm.train.evaluate.evaluate` (on a stream of
    whole windows, as the study cuts it); a smaller stride is :func:`~octlm.train.evaluate.evaluate_sliding`, each
    target scored by the first window that reaches it.
    """
    from octlm.train.evaluate import sliding_windows

    starts, first = sliding_windows(len(tokens) - 1, length, stride)
    nats = np.full(len(tokens) - 1, np.nan)
    was_training = model.training
    model.eval()
    try:
        for i in range(0, len(starts), batch_size):
            blocks = torch.from_numpy(gather_blocks(tokens, starts[i : i + batch_size], length)).to(device)
            losses = cross_entropy(model(blocks[:, :-1]), blocks[:, 1:], reduction="none").double().cpu().numpy()
            for loss, start, begin in zip(losses, starts[i : i + batch_size], first[i : i + batch_size], strict=True):
                nats[start + begin : start + length] = loss[begin:]
    finally:
        model.train(was_training)
    return nats


def prepare(model, row: dict) -> None:
    """Put a loaded model in the state an eval row scored it in: its RoPE scaling (the factor the row records) and
    attention scale; a fine-tuned model (``extended_to``) keeps the scaling it saved, as the study scored it."""
    scored = ScoredModel.of(row)
    if scored.fine_tuned:
        return
    model.set_rope_scaling(scored.scaling, scored.factor or 1.0)
    if scored.attention_scale:
        model.set_attention_scale(scored.attention_scale)


def model_folder(study: FinishedStudy, row: dict) -> Path:
    """The run folder of an eval row's model: ``runs/<name>`` or ``runs/<name>-seed<s>``, the name being the row's
    label for a fine-tuned model and its base row's otherwise (octlm.studies.length.study._run_dir)."""
    name = ScoredModel.of(row).run_name
    return study.out / "runs" / (f"{name}-seed{row['seed']}" if study.options["seeds"] > 1 else name)


Scorer = Callable[[dict, int, int], np.ndarray]


def scorer(study: FinishedStudy, device) -> Scorer:
    """``score(row, length, stride)``: the per-target nats (:func:`target_nats`) of an eval row's model in the row's
    state (:func:`prepare`), one model in memory at a time."""
    from octlm.run.load import load_run

    loaded: dict[Path, object] = {}
    tokens, eval_tokens = study.scored(), study.options.get("eval_tokens", 8192)

    def score(row: dict, length: int, stride: int) -> np.ndarray:
        path = model_folder(study, row)
        if path not in loaded:
            loaded.clear()
            loaded[path] = load_run(path, device)[0]
        model = loaded[path]
        trained_scale = model.config.attention_scale
        prepare(model, row)
        try:
            return target_nats(model, tokens, length, stride, max(1, eval_tokens // length), device)
        finally:
            if not row.get("extended_to"):  # a fine-tuned model's saved scaling is its own: kept
                model.set_rope_scaling(None)
            model.set_attention_scale(trained_scale)

    return score


def reference_mask(
    rows: list[dict], score: Scorer, short: int, nbytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The marked targets: ``(mask [N], short nats [N], long nats [N], summary fields)`` under the reference row
    (:func:`~.long_tokens.reference_label`), its nats the mean over its seeds, read in sliding windows of
    ``short`` tokens (stride ``short / 2``) and of the longest length (the study's sliding reading there), the
    model in the state of its longest row both times."""
    reference = reference_label(rows)
    longest = max(r["eval_length"] for r in rows)
    at_longest = [r for r in rows if r["label"] == reference and r["eval_length"] == longest]
    short_stride, long_stride = max(1, short // 2), at_longest[0]["eval_stride"]
    short_nats = np.mean([score(r, short, short_stride) for r in at_longest], axis=0)
    long_nats = np.mean([score(r, longest, long_stride) for r in at_longest], axis=0)
    mask = mark(short_nats, long_nats, nbytes, GAIN_NATS, LOSS_NATS)
    fields = {
        "reference": reference,
        "reference_seeds": [r.get("seed") for r in at_longest],
        "short_length": short,
        "short_stride": short_stride,
        "long_length": longest,
        "long_stride": long_stride,
        "gain_nats": GAIN_NATS,
        "loss_nats": LOSS_NATS,
        "marked": int(mask.sum()),
        "marked_bytes": int(nbytes[mask].sum()),
        "text_targets": int((nbytes > 0).sum()),
        "text_bytes": int(nbytes.sum()),
        "targets": [int(i) for i in np.flatnonzero(mask)],
    }
    return mask, short_nats, long_nats, fields


def compute(study: FinishedStudy, params: dict, device, report: Reporter) -> list[dict]:
    """The reading's records: the ``long_tokens`` summary, a ``long_tokens_eval`` record per eval row a model can
    read (every seed's) and the ``long_tokens_comparison`` records.

    Raises:
        OctlmError: when ``--long-tokens-short`` is not below the study's longest length.
    """
    from octlm.data.token_display import visible_token
    from octlm.run.load import load_run

    short, longest = params["long_tokens_short"], max(study.lengths)
    if short >= longest:
        raise OctlmError(
            f"--long-tokens-short {short} is not below the study's longest length ({longest} tokens): give a shorter "
            "context, e.g. --long-tokens-short 16"
        )
    rows = [r for r in restored(study.records) if r.get("bpb") is not None]
    tokens, score = study.scored(), scorer(study, device)
    _, tokenizer = load_run(model_folder(study, rows[0]), "cpu")
    nbytes = tokenizer.bytes_per_token[tokens[1:]].astype(np.int64)
    mask, short_nats, long_nats, fields = reference_mask(rows, score, short, nbytes)
    show = lambda t: visible_token(tokenizer.token_str(t))  # noqa: E731
    summary = {"record": SUMMARY, **fields, "examples": examples(tokens, mask, short_nats, long_nats, show)}
    report.event("long-tokens", f"{fields['marked']:,} long-context targets under {fields['reference']}", **fields)
    key = lambda r: (r["label"], r.get("seed"), r["eval_length"])  # noqa: E731
    order = {key(r): k for k, r in enumerate(rows)}
    records = []
    for row in sorted(rows, key=lambda r: (str(model_folder(study, r)), order[key(r)])):  # each model loaded once
        L, per_reading = row["eval_length"], {}
        for reading, stride in (("bpb", L), ("sliding_bpb", row["eval_stride"])):
            windows = window_of(len(nbytes), L, stride)
            per_reading[reading] = window_sums(score(row, L, stride), nbytes, mask, windows, int(windows[-1]) + 1)
        records.append(row_record(row, per_reading))
        shown = " ".join(f"{k} {records[-1][k]:.4f}" for k in per_reading if records[-1][k] is not None)
        report.event("long-tokens", f"{row['label']:>18} at {L:>6} tokens: {shown or 'no marked target'}")
    records.sort(key=lambda r: order[key(r)])  # the study's order, which the tables follow
    return [summary, *records, *comparison_records(records)]


def _markdown(records: list[dict], study: FinishedStudy) -> str:
    return long_tokens_markdown(records, study.train_length, study.lengths)


LONG_TOKENS = Reading(
    name="long-tokens",
    help="also mark the validation targets whose nats fall by more than 2 when a reference row (the best sliding "
    "reader at the longest length) reads the longest length rather than --long-tokens-short tokens, and still stay "
    "below 2 (LongPPL's key tokens, Fang et al. 2024), and report every row's bits per byte on them at every length "
    "in both readings, with the study's intervals; a section of length.md (opt-in: scores every row again, about "
    "the study's evaluation time once more)",
    kinds=(SUMMARY, "long_tokens_eval", "long_tokens_comparison"),
    compute=compute,
    markdown=_markdown,
    figures=lambda records, study: {},
    params=(
        Param(
            "long_tokens_short",
            DEFAULT_SHORT,
            "--long-tokens: the short context, in tokens: sliding windows of this length, "
            f"stride half of it (default {DEFAULT_SHORT})",
            minimum=2,
        ),
    ),
)


__all__ = ["DEFAULT_SHORT", "LONG_TOKENS", "compute", "model_folder", "prepare", "reference_mask", "target_nats"]
