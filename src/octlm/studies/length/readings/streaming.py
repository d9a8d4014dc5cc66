"""The streaming reading of a length study (``--streaming``): every base model decodes long streams with a cache of
``S`` sinks and a recent window, as StreamingLLM does (Xiao et al. 2023, arXiv 2309.17453, §3.2 and §4.1).

The study's scored validation stream is cut into ``K`` streams of its longest
length (16 x T by default; ``--streaming-streams`` of them at most). Every
target of a stream is predicted by a decoder whose key/value cache holds the
stream's first ``S`` tokens and its last ``W`` tokens, placed at positions
within the cache (:class:`~octlm.model.streaming.StreamingCache`), for ``S =
0`` (window attention) and ``S = --streaming-sinks`` (4 by default, the paper's
choice). The cache always holds ``T`` tokens, ``W = T - S``: the positions it
hands a model stay within those it was trained on, so what the reading
measures is the eviction, not positions past ``T``. Bits per byte at each of the
study's lengths ``L`` sums the first ``L / T`` segments of ``T`` targets of
every stream (decoding is causal: the first ``L`` targets of a stream score as a
stream of ``L``).

Sinks against none is a paired comparison: both read the same segments. Its
interval is the study's paired bootstrap (:mod:`octlm.studies.shared.confidence`) with
the segments of all streams as the resampled windows, crossed with the seeds.

A model whose cache cannot evict (a learned or sinusoidal table, FoX, PaTH:
``evicts_cache`` of its facts), or that the streaming cache refuses for
another reason (learned sinks, a window layer), gets a record saying why and
no numbers.
"""

from __future__ import annotations

import numpy as np

from octlm.errors import OctlmError
from octlm.report import Reporter
from octlm.studies.length.readings.reading import FinishedStudy, Param, Reading
from octlm.studies.length.readings.streaming_tables import (
    COMPARED,
    REFUSED,
    SEGMENTS,
    STREAMS,
    segments_of,
    streaming_markdown,
    streaming_plot,
)
from octlm.studies.length.readings.streams import stream_segments
from octlm.studies.shared.confidence import BOOTSTRAP_SEED, CONFIDENCE, RESAMPLES, compare_many

#: Sinks StreamingLLM keeps (§4.1: four initial tokens restore the loss; more add little).
DEFAULT_SINKS = 4
#: Streams of the longest length at most: 16 streams of 2,048 tokens take about 30 CPU seconds per model at the
#: default shape (rope; 1.1 s per stream and setting, alibi 0.2 s).
DEFAULT_STREAMS = 16
#: The figure.
STREAMING_PLOT = "streaming.png"


def check(params: dict, train_length: int) -> None:
    """Refuse ``--streaming-sinks`` that leaves no window in a cache of ``train_length`` tokens.

    Raises:
        OctlmError: naming the value and the range to give.
    """
    if params["streaming_sinks"] >= train_length:
        raise OctlmError(
            f"--streaming-sinks {params['streaming_sinks']} leaves no window in a cache of T = {train_length} tokens; "
            f"give 1 to {train_length - 1} (StreamingLLM keeps 4)"
        )


def check_study(params: dict, options) -> None:
    """Refuse ``--streaming`` on a new study none of whose models could stream, before anything trains.

    Raises:
        OctlmError: with learned sinks or the document mask (every model has them), or when no scheme of
            ``--schemes`` can evict its cache and no ``--layouts`` row is asked for, naming the fix.
    """
    from octlm.model.positions import evicting_schemes, facts_of

    every = (
        "--attention-sinks: learned sinks join a softmax the streaming pass does not form" * options.attention_sinks
        or "--document-mask: it places tokens in their documents, not in a cache" * options.document_mask
    )
    if every:
        raise OctlmError(f"--streaming with {every}; drop one of the two (every model of the study would be refused)")
    if not options.layouts and not any(facts_of(name).evicts_cache for name in options.schemes):
        raise OctlmError(
            f"--streaming: no scheme of --schemes {' '.join(options.schemes)} can evict its cache (docs/streaming.md "
            f"says why for each); add one of {', '.join(evicting_schemes())}, or drop --streaming"
        )


def cut_streams(scored: np.ndarray, longest: int, count: int) -> np.ndarray:
    """Up to ``count`` consecutive streams of ``longest`` targets from ``scored``: int64 [K, longest + 1] (each
    stream's last token is the next one's first).

    Raises:
        ValueError: when ``scored`` holds no stream of ``longest`` targets.
    """
    k = min(count, (len(scored) - 1) // longest)
    if k < 1:
        raise ValueError(f"the study scored {len(scored) - 1} targets, fewer than one stream of {longest}")
    return np.stack([scored[i * longest : (i + 1) * longest + 1] for i in range(k)]).astype(np.int64)


def compute(study: FinishedStudy, params: dict, device, report: Reporter) -> list[dict]:
    """The reading's records: the streams' segment bytes (``streaming_streams``), each model's segment nats per
    setting (``streaming``) or why it cannot stream (``streaming_refused``), and the comparisons
    (:func:`compare_records`)."""
    from octlm.model.streaming import check_streaming, streaming_refusal
    from octlm.run.load import load_run

    T, longest = study.train_length, max(study.lengths)
    check(params, T)
    streams = cut_streams(study.scored(), longest, params["streaming_streams"])
    sinks = sorted({0, params["streaming_sinks"]})
    records, nbytes = [], None
    for m in study.models():
        model, tokenizer = load_run(m.run_dir, device)
        if reason := streaming_refusal(model):
            records.append({"record": REFUSED, "label": m.label, "seed": m.seed, "reason": reason})
            report.event(
                "streaming",
                f"{m.label} seed {m.seed}: cannot stream ({reason})",
                label=m.label,
                seed=m.seed,
                reason=reason,
            )
            continue
        for s in sinks:  # the cache's sizes, S + (T - S) = T, fit every model that can stream
            check_streaming(model, s, T - s)
        for s in sinks:
            nats, nbytes = stream_segments(model, streams, tokenizer.bytes_per_token, s, T - s, T, device)
            records.append(
                {
                    "record": SEGMENTS,
                    "label": m.label,
                    "seed": m.seed,
                    "sinks": s,
                    "window": T - s,
                    "segment_nats": np.round(nats, 4).tolist(),
                }
            )
            bpb = nats.sum() / np.log(2) / nbytes.sum()
            kept = f"{s} sink{'s' * (s != 1)} + {T - s} recent"
            report.event(
                "streaming",
                f"{m.label} seed {m.seed}: {bpb:.4f} bits per byte, {kept}",
                label=m.label,
                seed=m.seed,
                sinks=s,
                bpb=float(bpb),
            )
    if nbytes is None:  # a reread's models, none of which can stream: say so rather than write an empty table
        reason = next(r["reason"] for r in records if r["record"] == REFUSED)
        raise OctlmError(
            f"--streaming: no model of {study.out} can stream; the first says {reason}. Stream a study of "
            "rope, alibi or another scheme of docs/streaming.md"
        )
    head = {
        "record": STREAMS,
        "streams": len(streams),
        "stream_length": longest,
        "segment": T,
        "sinks": sinks,
        "segment_bytes": nbytes.astype(int).tolist(),
    }
    return [head, *records, *compare_records(records, head, study.lengths)]


def _first(nats: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` segments of every stream as a comparison's windows: [seeds, K, segments] -> [seeds, K n]."""
    return nats[:, :, :n].reshape(len(nats), -1)


def compare_records(records: list[dict], head: dict, lengths: list[int]) -> list[dict]:
    """One ``streaming_comparison`` record per model label and length: the bits per byte of ``S`` sinks minus none
    (negative: the sinks help), with its interval over the segments crossed with the seeds."""
    if head["segment_bytes"] is None or len(head["sinks"]) < 2:
        return []
    nbytes, T, s = np.asarray(head["segment_bytes"], dtype=np.float64), head["segment"], head["sinks"][-1]
    out = []
    for label, by_sinks in segments_of(records).items():
        for length in lengths:
            n = length // T
            got = compare_many([(_first(by_sinks[s], n), _first(by_sinks[0], n))], nbytes[:, :n].ravel())[0]
            out.append(
                {
                    "record": COMPARED,
                    "label": label,
                    "eval_length": length,
                    "sinks": s,
                    **got.combined.as_dict(),
                    "seeds": len(by_sinks[0]),
                    "confidence": CONFIDENCE,
                    "resamples": RESAMPLES,
                    "bootstrap_seed": BOOTSTRAP_SEED,
                }
            )
    return out


def _markdown(records: list[dict], study: FinishedStudy) -> str:
    return streaming_markdown(records, study.train_length, study.lengths)


def _figures(records: list[dict], study: FinishedStudy) -> dict[str, bytes]:
    return {STREAMING_PLOT: streaming_plot(records, study.train_length)} if segments_of(records) else {}


STREAMING = Reading(
    name="streaming",
    help="also decode streams of the longest length with a cache of the first S tokens and the last T - S "
    "(StreamingLLM: S = 0 and S = --streaming-sinks), positions within the cache, for every model whose cache can "
    "evict; bits per byte by length, sinks against none with a bootstrap interval, streaming.png (opt-in: about "
    "30 CPU seconds per model at the default shape)",
    kinds=(STREAMS, SEGMENTS, REFUSED, COMPARED),
    compute=compute,
    markdown=_markdown,
    figures=_figures,
    check=check,
    check_study=check_study,
    params=(
        Param(
            "streaming_sinks",
            DEFAULT_SINKS,
            f"--streaming: first tokens the cache keeps beside the window, read beside none (default {DEFAULT_SINKS})",
            minimum=1,
            metavar="S",
        ),
        Param(
            "streaming_streams",
            DEFAULT_STREAMS,
            f"--streaming: streams of the longest length decoded per model, at most (default {DEFAULT_STREAMS})",
        ),
    ),
)


__all__ = [
    "STREAMING",
    "STREAMING_PLOT",
    "check_study",
    "compare_records",
    "compute",
    "cut_streams",
]
