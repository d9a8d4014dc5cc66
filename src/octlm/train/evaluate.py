"""Validation loss, perplexity and bits per byte.

Loss is the mean next-token cross-entropy in nats per token, over every
target, ``<|endoftext|>`` included: what training minimises. It depends on
the tokenizer (a bigger vocabulary packs more text into each token), so
octlm also reports bits per byte: the information in bits of the targets that
stand for text, divided by the UTF-8 bytes they stand for. Runs with
different tokenizers, or a character-level model, compare on that scale.

The end-of-text marker stands for no bytes, so bits per byte leaves its
targets out of the numerator as well as the denominator: it is the bits per
byte of the documents' text, as The Pile (Gao et al. 2020, §5) reports it
and as nanochat counts it (its special tokens have zero bytes and no loss in
its bits per byte). Counting the marker's loss over the text's bytes would
charge a corpus of many short documents for their boundaries (3.3% on one
such corpus) and make the figure depend on how the text is cut into files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from octlm.data.tokens import block_starts, gather_blocks
from octlm.model import Decoder, cross_entropy


@dataclass
class EvalResult:
    """Totals over the evaluated blocks.

    Attributes:
        loss: mean cross-entropy, nats per target token (every target).
        perplexity: ``exp(loss)``.
        bpb: bits per byte, ``sum(nats of text targets) / ln 2 / sum(bytes of targets)``;
            a text target is one that stands for bytes (not ``<|endoftext|>``).
        tokens: target tokens scored.
        bytes: UTF-8 bytes those targets stand for.
        blocks: blocks evaluated.
        bpb_se: standard error of ``bpb`` as an estimate of the whole split's, in bits per byte, from the
            blocks' spread (:func:`stratified_bpb_se`); 0 when every block was scored, ``None`` when one block was
            drawn from many (one block has no spread to measure).
        position_nats: with ``per_position``, the nats of text targets summed
            over blocks at each position of a block [context_length] (position
            ``p`` is predicted from ``p + 1`` tokens of context); else ``None``.
        position_bytes: with ``per_position``, the bytes of the targets at
            each position, summed over blocks [context_length]; else ``None``.
        block_nats: with ``per_block``, the nats of the text targets each block (window) scored [blocks], in the
            order the blocks were read; else ``None``. With ``block_bytes``, what a bootstrap over blocks resamples.
        block_bytes: with ``per_block``, the bytes of the targets each block scored [blocks]; else ``None``.
    """

    loss: float
    perplexity: float
    bpb: float
    tokens: int
    bytes: int
    blocks: int
    bpb_se: float | None = 0.0
    position_nats: list[float] | None = None
    position_bytes: list[int] | None = None
    block_nats: list[float] | None = None
    block_bytes: list[int] | None = None

    def as_dict(self, prefix: str = "val_") -> dict:
        """The totals as flat ``{prefix + name: value}`` (the per-position and per-block lists are left out)."""
        return {f"{prefix}{k}": v for k, v in asdict(self).items() if not k.startswith(("position_", "block_"))}


#: The seed of :func:`stratified`'s draw: every evaluation of a run scores the same blocks, so its curve moves only
#: with the model.
SAMPLE_SEED = 0


def stratified(n: int, k: int | None, seed: int = SAMPLE_SEED) -> np.ndarray:
    """Indices of ``min(n, k)`` items, one drawn uniformly from each of ``k`` equal consecutive strata of
    ``range(n)`` (all when ``k`` is None or at least ``n``), sorted.

    Blocks follow the corpus's order, so strata follow its documents: each stretch of the validation text is
    represented, yet no block is favoured, as a fixed evenly spaced grid can be. (64 evenly spaced blocks of the
    standard library read 0.1 bits per byte below all of them: the grid met easier files.)
    """
    if k is None or k >= n:
        return np.arange(n)
    edges = np.linspace(0, n, k + 1).round().astype(np.int64)
    rng = np.random.default_rng(seed)
    return edges[:-1] + (rng.random(k) * (edges[1:] - edges[:-1])).astype(np.int64)


def stratified_bpb_se(nats: np.ndarray, nbytes: np.ndarray, population: int) -> float | None:
    """Standard error, in bits per byte, of ``sum(nats) / ln 2 / sum(nbytes)`` over blocks drawn by
    :func:`stratified` (one per stratum) as an estimate of the same ratio over all ``population`` blocks.

    The ratio is linearised (residuals ``nats - R * nbytes``), and with one block per stratum the variance of their
    sum is taken from adjacent strata collapsed in pairs, which overstates it when the strata differ (Cochran 1977,
    Sampling Techniques, §5A.12): the stated error errs on the side of caution. A finite-population correction
    applies. 0 when every block is scored; ``None`` when a single block stands for more.

    Args:
        nats: nats of the text targets of each drawn block [k], in stratum order.
        nbytes: bytes of those targets [k].
        population: blocks in the whole split.
    """
    k = len(nats)
    if k >= population:
        return 0.0
    if k < 2:
        return None
    ratio = nats.sum() / nbytes.sum()
    residual = nats - ratio * nbytes
    pairs = residual[: k - k % 2].reshape(-1, 2)
    variance = float(((pairs[:, 0] - pairs[:, 1]) ** 2).sum())
    if k % 2:  # the last stratum pairs with the one before it
        variance += float((residual[-1] - residual[-2]) ** 2)
    variance *= 1 - k / population
    return math.sqrt(variance) / float(nbytes.sum()) / math.log(2)


@torch.no_grad()
def evaluate(
    model: Decoder,
    tokens: np.ndarray,
    bytes_per_token: np.ndarray,
    context_length: int,
    batch_size: int = 32,
    max_blocks: int | None = None,
    device: str | torch.device = "cpu",
    per_position: bool = False,
    progress: Callable[[int], object] | None = None,
    per_block: bool = False,
) -> EvalResult:
    """Score the model on the non-overlapping blocks of a token stream.

    Every block holds ``context_length + 1`` tokens (stride
    ``context_length``): the model sees the first ``context_length`` and is
    scored on predicting the last ``context_length``, so each scored token
    has between 0 and ``context_length - 1`` tokens of context.

    Args:
        model: the decoder (left in the mode it was in).
        tokens: the validation stream [N].
        bytes_per_token: bytes of each token id [vocab_size].
        context_length: tokens the model sees per block.
        batch_size: blocks per forward pass.
        max_blocks: evaluate this many blocks, one drawn from each of as many equal stretches of the stream
            (:func:`stratified`; the same blocks every call), and state the standard error (``None``: all).
        device: where to run.
        per_position: also total the nats and bytes at each position of a
            block (``EvalResult.position_nats``, ``position_bytes``), to see
            where along a window a model's loss changes.
        progress: called with the number of blocks scored after each batch
            (a progress bar's ``update``).
        per_block: also keep each block's nats and bytes (``EvalResult.block_nats``, ``block_bytes``).

    Raises:
        ValueError: when the stream holds no full block.
    """
    starts = block_starts(len(tokens), context_length)
    if len(starts) == 0:
        raise ValueError(f"validation text holds {len(tokens)} tokens, fewer than one block of {context_length + 1}")
    population = len(starts)
    starts = starts[stratified(population, max_blocks)]
    was_training = model.training
    model.eval()
    all_nats = torch.zeros((), dtype=torch.float64)
    position_nats = torch.zeros(context_length, dtype=torch.float64)
    position_bytes = np.zeros(context_length, dtype=np.int64)
    block_nats, block_bytes = np.zeros(len(starts)), np.zeros(len(starts))
    try:
        for i in range(0, len(starts), batch_size):
            blocks = gather_blocks(tokens, starts[i : i + batch_size], context_length)
            targets = blocks[:, 1:]
            x = torch.from_numpy(blocks[:, :-1]).to(device)
            y = torch.from_numpy(targets).to(device)
            losses = cross_entropy(model(x), y, reduction="none").double().cpu()
            all_nats += losses.sum()
            text_nats = losses * torch.from_numpy(bytes_per_token[targets] > 0)
            position_nats += text_nats.sum(dim=0)
            position_bytes += bytes_per_token[targets].sum(axis=0)
            block_nats[i : i + len(blocks)] = text_nats.sum(dim=1).numpy()
            block_bytes[i : i + len(blocks)] = bytes_per_token[targets].sum(axis=1)
            if progress is not None:
                progress(len(blocks))
    finally:
        model.train(was_training)
    n_bytes, n_tokens = int(position_bytes.sum()), len(starts) * context_length
    loss = float(all_nats) / n_tokens
    return EvalResult(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bpb=float(position_nats.sum()) / math.log(2) / max(n_bytes, 1),
        tokens=n_tokens,
        bytes=n_bytes,
        blocks=len(starts),
        bpb_se=stratified_bpb_se(block_nats, block_bytes, population),
        position_nats=position_nats.tolist() if per_position else None,
        position_bytes=position_bytes.tolist() if per_position else None,
        block_nats=block_nats.tolist() if per_block else None,
        block_bytes=block_bytes.astype(np.int64).tolist() if per_block else None,
    )


def sliding_windows(n_targets: int, length: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows of a sliding-window reading of ``n_targets`` targets: ``(starts, first)``, int64 [n_windows] each.

    Window ``k`` holds the ``length`` targets from ``starts[k]`` and scores
    those from window position ``first[k]`` on: the ones no earlier window
    scored. Windows advance by ``stride`` tokens; the last one is pulled back
    to end at the last target, so every target is scored exactly once, and
    each target after the first window is predicted from at least
    ``length - stride`` tokens before it in its window. ``stride == length``
    gives the non-overlapping windows of :func:`evaluate`.

    Raises:
        ValueError: when fewer than ``length`` targets are given, or
            ``stride`` is not in ``1 .. length``.
    """
    if not 1 <= stride <= length:
        raise ValueError(f"stride must be in 1..length ({length}), got {stride}")
    if n_targets < length:
        raise ValueError(f"a sliding window of {length} targets needs at least that many, got {n_targets}")
    starts = np.minimum(np.arange(0, n_targets - length + stride, stride, dtype=np.int64), n_targets - length)
    starts = np.unique(starts)
    ends = np.concatenate(([0], starts[:-1] + length))
    return starts, ends - starts


@torch.no_grad()
def evaluate_sliding(
    model: Decoder,
    tokens: np.ndarray,
    bytes_per_token: np.ndarray,
    length: int,
    stride: int,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    per_block: bool = False,
) -> EvalResult:
    """Score every target of a token stream once, each with a long context: the sliding-window reading.

    Windows of ``length`` targets (``length + 1`` tokens) advance by
    ``stride`` (:func:`sliding_windows`), and each window scores only the
    targets no earlier window scored, so every target after the first window
    is predicted from at least ``length - stride`` tokens. Non-overlapping
    windows (:func:`evaluate`) give the early targets of every window little
    context; a longer window then looks better partly because fewer targets
    sit near its start, which Press et al. 2022 (ALiBi, Appendix B) call the
    early token curse, and which this reading removes (the reading of their
    Appendix B, of Hugging Face's perplexity guide and of the YaRN
    evaluation). It costs ``length / stride`` times the non-overlapping reading.

    Args:
        tokens: the stream [N + 1]; its N targets are ``tokens[1:]``.
        length: window length in tokens (the model sees ``length`` at once).
        stride: tokens between window starts, ``1 .. length``.
        per_block: also keep the nats and bytes of the targets each window scored (``EvalResult.block_nats``,
            ``block_bytes``, [windows]).

    Returns:
        :class:`EvalResult` over all N targets; ``blocks`` is the number of windows.

    Raises:
        ValueError: as :func:`sliding_windows`.
    """
    starts, first = sliding_windows(len(tokens) - 1, length, stride)
    was_training = model.training
    model.eval()
    nats, text_nats, n_bytes = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64), 0
    positions = np.arange(length)
    window_nats, window_bytes = np.zeros(len(starts)), np.zeros(len(starts), dtype=np.int64)
    try:
        for i in range(0, len(starts), batch_size):
            blocks = gather_blocks(tokens, starts[i : i + batch_size], length)
            # [B, length]: the targets this window scores
            scored = positions[None, :] >= first[i : i + batch_size, None]
            losses = cross_entropy(
                model(torch.from_numpy(blocks[:, :-1]).to(device)),
                torch.from_numpy(blocks[:, 1:]).to(device),
                reduction="none",
            )
            target_bytes = bytes_per_token[blocks[:, 1:]] * scored
            nats += losses.double().cpu()[torch.from_numpy(scored)].sum()
            text = losses.double().cpu() * torch.from_numpy(target_bytes > 0)
            text_nats += text.sum()
            window_nats[i : i + len(blocks)] = text.sum(dim=1).numpy()
            window_bytes[i : i + len(blocks)] = target_bytes.sum(axis=1)
            n_bytes += int(target_bytes.sum())
    finally:
        model.train(was_training)
    n_tokens = len(tokens) - 1
    loss = float(nats) / n_tokens
    return EvalResult(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bpb=float(text_nats) / math.log(2) / max(n_bytes, 1),
        tokens=n_tokens,
        bytes=n_bytes,
        blocks=len(starts),
        block_nats=window_nats.tolist() if per_block else None,
        block_bytes=window_bytes.tolist() if per_block else None,
    )


__all__ = [
    "EvalResult",
    "evaluate",
    "evaluate_sliding",
    "sliding_windows",
    "stratified",
    "stratified_bpb_se",
]
