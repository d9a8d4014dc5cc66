"""The streaming reading: bits per byte of a long stream decoded with sinks and a recent window (StreamingLLM).

Xiao et al. 2023 (arXiv 2309.17453, §4.1) read a model on a text far longer
than its context with a key/value cache that keeps the first ``S`` tokens
and the last ``W``: with ``S = 0`` (window attention) the loss blows up once
the first tokens leave the cache; four sinks bring it back to the
sliding-window-with-recomputation level. :func:`streaming_bpb` scores every
target of one stream that way (:class:`~octlm.model.streaming.StreamingCache`,
positions within the cache), and keeps the loss per segment of the stream, so
a reading shows where along the stream a model breaks.

Opt-in: the default study does not call it; ``octlm length --streaming`` does
(:mod:`octlm.studies.length.readings.streaming`).
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
    segment: int | None = None,
) -> EvalResult:
    """Score the ``N`` targets ``tokens[1:]`` of one stream ``tokens`` [N + 1], each predicted from the first ``sinks``
    tokens and the last ``window`` (itself included) as a one-token-at-a-time decoder with that cache sees them.

    Args:
        sinks: ``S``, tokens kept from the stream's start (StreamingLLM's attention sinks; 0: window attention).
        window: ``W``, recent tokens each prediction sees, 1 .. ``context_length``.
        chunk: tokens fed per pass once the cache is full (default ``window``); every chunk gives the
            one-token-at-a-time numbers (to float rounding), a larger one is faster. A pass holds each layer's keys
            and values once per query, ``2 * chunk * (sinks + window) * d_model`` numbers.
        segment: targets per segment of the loss along the stream (default ``window``).

    Returns:
        :class:`~octlm.train.evaluate.EvalResult` over all ``N`` targets (bits per byte of the text targets, as the
        other readings); ``blocks`` is the number of consecutive segments of ``segment`` targets, whose nats and
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
    segments = np.arange(0, len(nats), segment or window)
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


def stream_segments(
    model: Decoder,
    streams: np.ndarray,
    bytes_per_token: np.ndarray,
    sinks: int,
    window: int,
    segment: int,
    device: str | torch.device = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """The loss along each of ``K`` streams ``streams`` [K, N + 1] (every target scored by :func:`streaming_bpb`
    with ``sinks`` and ``window``), in segments of ``segment`` consecutive targets.

    Decoding is causal, so the first ``L`` targets of a stream score as a
    stream of ``L`` would: bits per byte at any length that is a multiple of
    ``segment`` is the sum of the segments before it.

    Returns:
        ``(nats, nbytes)``, float64 [K, N / segment] each: the text targets' nats and their UTF-8 bytes per segment.

    Raises:
        ValueError: when ``N`` is not a multiple of ``segment``, besides :func:`streaming_bpb`'s.
    """
    n_targets = streams.shape[1] - 1
    if n_targets % segment:
        raise ValueError(f"streams of {n_targets} targets do not split into segments of {segment}")
    nats, nbytes = [], []
    for stream in streams:
        result = streaming_bpb(model, stream, bytes_per_token, sinks, window, device=device, segment=segment)
        nats.append(result.block_nats)
        nbytes.append(result.block_bytes)
    return np.asarray(nats, dtype=np.float64), np.asarray(nbytes, dtype=np.float64)


__all__ = ["stream_segments", "streaming_bpb"]
