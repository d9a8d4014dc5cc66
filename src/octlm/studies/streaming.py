"""The streaming reading: bits per byte of a long stream decoded with sinks and a recent window (StreamingLLM).

Xiao et al. 2023 (arXiv 2309.17453, §4.1) read a model on a text far longer
than its context with a key/value cache that keeps the first ``S`` tokens
and the last ``W``: with ``S = 0`` (window attention) the loss blows up once
the first tokens leave the cache; four sinks bring it back to the
sliding-window-with-recomputation level. :func:`streaming_bpb` scores every
target of one stream that way (:class:`~octlm.model.streaming.StreamingCache`,
positions within the cache), and keeps the loss per segment of the stream, so
a reading shows where along the stream a model breaks.

Opt-in: nothing in the default study calls it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from octlm.model.decoder import Decoder, cross_entropy
from octlm.model.streaming import StreamingCache, check_streaming, stream_logits
from octlm.train.evaluate import EvalResult


@torch.no_grad()
def streaming_bpb(
    model: Decoder,
    tokens: np.ndarray,
    bytes_per_token: np.ndarray,
    sinks: int,
    window: int,
    chunk: int | None = None,
    device: str | torch.device = "cpu",
) -> EvalResult:
    """Score the ``N`` targets ``tokens[1:]`` of one stream ``tokens`` [N + 1], each predicted from the first ``sinks``
    tokens and the last ``window`` (itself included) as a one-token-at-a-time decoder with that cache sees them.

    Args:
        sinks: ``S``, tokens kept from the stream's start (StreamingLLM's attention sinks; 0: window attention).
        window: ``W``, recent tokens each prediction sees, 1 .. ``context_length``.
        chunk: tokens fed per pass once the cache is full (default ``window``); every chunk gives the
            one-token-at-a-time numbers (to float rounding), a larger one is faster. A pass holds each layer's keys
            and values once per query, ``2 * chunk * (sinks + window) * d_model`` numbers.

    Returns:
        :class:`~octlm.train.evaluate.EvalResult` over all ``N`` targets (bits per byte of the text targets, as the
        other readings); ``blocks`` is the number of consecutive segments of ``window`` targets, whose nats and
        bytes are ``block_nats`` and ``block_bytes`` (the loss along the stream).

    Raises:
        ValueError: as :func:`~octlm.model.streaming.check_streaming`, or for a stream of fewer than 2 tokens.
    """
    check_streaming(model, sinks, window)
    if len(tokens) < 2:
        raise ValueError(f"the stream has {len(tokens)} token(s); give at least 2 (one target)")
    stream = torch.from_numpy(np.asarray(tokens, dtype=np.int64)).to(device)[None]
    cache = StreamingCache(len(model.blocks), sinks, window)
    was_training, pieces, start = model.training, [], 0
    model.eval()
    try:
        for logits in stream_logits(model, stream[:, :-1], cache, chunk or window):
            n = logits.shape[1]
            pieces.append(cross_entropy(logits, stream[:, 1 + start : 1 + start + n], reduction="none")[0].double())
            start += n
    finally:
        model.train(was_training)
    nats = torch.cat(pieces).cpu().numpy()
    nbytes = np.asarray(bytes_per_token)[np.asarray(tokens[1:])]
    text = nats * (nbytes > 0)
    segments = np.arange(0, len(nats), window)
    loss = float(nats.mean())
    return EvalResult(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bpb=float(text.sum()) / math.log(2) / max(int(nbytes.sum()), 1),
        tokens=len(nats),
        bytes=int(nbytes.sum()),
        blocks=len(segments),
        block_nats=np.add.reduceat(text, segments).tolist(),
        block_bytes=np.add.reduceat(nbytes, segments).astype(int).tolist(),
    )


def streaming_records(
    model: Decoder,
    tokens: np.ndarray,
    bytes_per_token: np.ndarray,
    lengths: list[int],
    window: int,
    sinks: tuple[int, ...] = (0, 4),
    device: str | torch.device = "cpu",
) -> list[dict]:
    """The streaming reading of one model as records: for each ``S`` in ``sinks`` and each ``L`` in ``lengths``, the
    bits per byte of the first ``L`` targets of ``tokens`` streamed with ``S`` sinks and a window of ``window``.

    One stream per ``S``, of the longest length: decoding is causal, so the
    first ``L`` targets score as a stream of ``L`` would, and each length's
    number sums the segments before it (``L`` must be a multiple of
    ``window``). Each record (``"record": "streaming"``) carries ``sinks``,
    ``window``, ``eval_length``, ``bpb``, ``bytes`` and ``segment_bpb`` (per
    segment of ``window`` targets), for a table or a curve along the stream.

    Raises:
        ValueError: for a length that is not a multiple of ``window`` or longer than the stream, besides
            :func:`streaming_bpb`'s.
    """
    longest = max(lengths)
    if any(length % window for length in lengths) or longest > len(tokens) - 1:
        raise ValueError(
            f"streaming lengths {lengths} must be multiples of the window ({window}) within the {len(tokens) - 1} "
            "targets given"
        )
    records = []
    for s in sinks:
        result = streaming_bpb(model, tokens[: longest + 1], bytes_per_token, s, window, device=device)
        nats, nbytes = np.cumsum(result.block_nats), np.cumsum(result.block_bytes)
        segment = np.asarray(result.block_nats) / math.log(2) / np.maximum(result.block_bytes, 1)
        for length in sorted(lengths):
            n = length // window
            records.append(
                {
                    "record": "streaming",
                    "sinks": s,
                    "window": window,
                    "eval_length": length,
                    "bpb": float(nats[n - 1]) / math.log(2) / max(int(nbytes[n - 1]), 1),
                    "bytes": int(nbytes[n - 1]),
                    "segment_bpb": [round(float(v), 6) for v in segment[:n]],
                }
            )
    return records


__all__ = ["streaming_bpb", "streaming_records"]
