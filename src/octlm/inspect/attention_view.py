"""What the page shows of a model's attention: every head's map on a window of validation text, small enough to embed.

The page (``web/src/run/attention.ts``) draws, for one model at one length
``L``, every layer's and head's attention on the first ``L`` tokens of the
validation text, as :func:`octlm.inspect.attention.record` records it for
``octlm attention``. A map of ``L x L`` float32 probabilities would not fit
in a page at a study's lengths (a default study has 16 models, lengths up to
2,048 tokens, 8 heads each: gigabytes), so each map is made small:

* **pooled** to at most :data:`MAP_SIDE` x :data:`MAP_SIDE` cells: positions
  are grouped into blocks of ``k = ceil(L / MAP_SIDE)`` consecutive ones
  (the last block may be shorter), and cell ``(r, c)`` holds the probability
  the queries of block ``r`` put on the keys of block ``c``, summed over
  those keys and averaged over those queries, so every row of a pooled map
  still sums to 1 (:func:`pool_attention`); at ``L <= MAP_SIDE`` the map is
  the recorded one;
* **quantised** to one byte per cell on the square-root scale the page and
  ``octlm attention``'s figures draw on: ``round(255 sqrt(p))``, so ``p`` comes
  back as ``(q / 255) ** 2``, within ``sqrt(p) / 255`` of the recorded value
  (:func:`quantise_map`);
* **triangular**: attention is causal, so the cells above the diagonal are 0
  and only the ``n (n + 1) / 2`` cells on and below it are kept, row by row.

For a model whose scheme turns channel pairs (RoPE and its kin), each length
also carries ``frequencies``: which of RoPE's frequencies the queries and keys
use on those tokens, as ``octlm attention`` computes it
(:func:`octlm.inspect.frequencies.frequency_usage`), rounded to
:data:`FREQUENCY_DIGITS` significant digits (:func:`frequency_probe`).

A forward pass or two per length (batch 1) is all it costs: seconds on a
CPU for a whole default study. A length whose recorded maps would take more
than :data:`MAP_BUDGET_BYTES` is left out with a note rather than recorded.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import torch
from torch import Tensor

from octlm.inspect.attention import MAP_BYTES, record
from octlm.inspect.attention_statistics import attention_distance, attention_entropy, sink_mass, uniform_attention
from octlm.model import Decoder, DecoderConfig, positions
from octlm.model.attention_maps import AttentionMaps
from octlm.model.layout import describe

#: The most cells a side of a map on the page has (a default study's maps are 128 x 128 at every length).
MAP_SIDE = 128
#: The most memory the recorded probabilities and logits of one forward pass may take (bytes).
MAP_BUDGET_BYTES = 1 << 30
#: The most bytes all the maps of one page may take before base64 (which adds a third): a larger study gets smaller maps
#: (:func:`map_side`).
PAGE_MAP_BYTES = 6 << 20
#: The fewest cells a side a map gets however large the study.
MIN_SIDE = 16
#: Version of the layout ``web/src/run/attention.ts`` reads.
ATTENTION_FORMAT = 1
#: Significant digits the frequency probe keeps: its frequencies span four decades (``rope_theta ** -1`` to 1 radian a
#: token), so a fixed number of decimals would round the slowest pairs to 0.
FREQUENCY_DIGITS = 4


def block_size(length: int, side: int = MAP_SIDE) -> int:
    """Positions per pooled cell for a map of ``length`` positions: ``ceil(length / side)`` (1 when it fits)."""
    return max(1, -(-length // side))


def pool_attention(probabilities: Tensor, side: int = MAP_SIDE) -> Tensor:
    """Attention maps [..., T, T] pooled to [..., n, n], ``n = ceil(T / k)``, ``k = block_size(T, side)``.

    Cell ``(r, c)`` is the mass the queries of block ``r`` put on the keys of
    block ``c`` (positions ``c k .. c k + k - 1``, the last block cut at ``T``),
    summed over the keys and averaged over the queries: rows that sum to 1
    keep summing to 1. With ``k = 1`` the maps come back unchanged.

    Raises:
        ValueError: when the maps are not square in their last two dimensions.
    """
    T = probabilities.shape[-1]
    if probabilities.dim() < 2 or probabilities.shape[-2] != T:
        raise ValueError(f"pool_attention needs square maps [..., T, T], got {list(probabilities.shape)}")
    k = block_size(T, side)
    if k == 1:
        return probabilities
    n = -(-T // k)
    padded = torch.nn.functional.pad(probabilities, (0, n * k - T, 0, n * k - T))
    lead = probabilities.shape[:-2]
    summed = padded.reshape(*lead, n, k, n, k).sum(dim=(-3, -1))
    queries = torch.full((n,), float(k), dtype=summed.dtype, device=summed.device)
    queries[-1] = T - (n - 1) * k
    return summed / queries[:, None]


def map_side(map_sets: int, maps_per_set: int, budget: int | None = None) -> int:
    """The largest side ``n <= MAP_SIDE`` at which ``map_sets`` sets of ``maps_per_set`` triangular maps fit ``budget``
    bytes (default :data:`PAGE_MAP_BYTES`; one byte a cell, ``n (n + 1) / 2`` cells a map), and at least
    :data:`MIN_SIDE`.

    A default length study (16 models x 5 lengths, 2 layers x 4 heads) keeps 128;
    a study of 6 layers x 8 heads gets about half that.
    """
    budget = PAGE_MAP_BYTES if budget is None else budget
    maps = max(1, map_sets * maps_per_set)
    side = MAP_SIDE
    while side > MIN_SIDE and maps * side * (side + 1) // 2 > budget:
        side -= 1
    return side


def quantise_map(maps: Tensor) -> bytes:
    """Maps [..., n, n] of probabilities as bytes: ``round(255 sqrt(p))`` of each cell on or below the diagonal, row by
    row, map by map.

    ``web/src/run/attention.ts`` (``unpackMaps``) reads them back as ``(q / 255) ** 2``.
    """
    n = maps.shape[-1]
    rows, cols = torch.tril_indices(n, n)
    lower = maps[..., rows, cols].clamp(0.0, 1.0).sqrt().mul(255.0).round()
    return np.ascontiguousarray(lower.to(torch.uint8).cpu().numpy()).tobytes()


def map_bytes(model: Decoder, length: int) -> int:
    """Bytes the recorded probabilities and logits of one forward pass of ``length`` tokens take (all layers and
    heads)."""
    return MAP_BYTES * model.config.n_layers * model.config.n_heads * length**2


def _record_window(model: Decoder, ids: list[int]) -> tuple[list[Tensor], dict[str, Tensor], AttentionMaps]:
    """One forward pass of ``ids`` (batch 1): each layer's probabilities [H, T, T], each query's statistics, [L, H,
    T] each, and the recorded maps (for their queries and keys, [1, H, T, head_dim] per layer).

    Per query, so that the statistics of any prefix are its means (the
    largest logit: its maximum) without another pass; ``uniform`` [T] is
    uniform attention's entropy, the yardstick.
    """
    maps = record(model, ids, next(model.parameters()).device)
    p = [layer[0] for layer in maps.probabilities]
    per_query = {
        "entropy": torch.stack([attention_entropy(x) for x in p]),
        "distance": torch.stack([attention_distance(x) for x in p]),
        "sink_mass": torch.stack([sink_mass(x) for x in p]),
        # max_logit's maximum over keys only: the maximum over a prefix of queries is taken per length.
        "max_logit": torch.stack([layer[0].amax(dim=-1) for layer in maps.logits]),
        "uniform": attention_entropy(uniform_attention(len(ids), len(ids))),
    }
    return p, per_query, maps


def frequency_probe(model: Decoder, maps: AttentionMaps, digits: int = FREQUENCY_DIGITS) -> list[dict]:
    """:func:`octlm.inspect.frequencies.frequency_usage` of a recorded pass, every number rounded to ``digits``
    significant digits; ``[]`` for a model without a layer that turns channel pairs.

    Per layer that turns pairs: ``layer``, ``frequency`` [P] (radians per token, 0 for a p-RoPE pair that does not
    turn), ``query_norm`` and ``key_norm`` [H][P] (mean length of each pair over the pass's tokens, in the units of
    the queries and keys), ``slowest_quarter`` and ``fastest_quarter`` [H] (shares of ``sum_i |q_i| |k_i|``, 0 to
    1; ``None`` for a head whose pairs all have zero length).
    """
    # Imported here: it brings matplotlib, which the page's data never draws with.
    from octlm.inspect.frequencies import frequency_usage

    return [
        {name: _significant(value, digits) for name, value in entry.items()} for entry in frequency_usage(maps, model)
    ]


def _block_means(series: Tensor, k: int) -> Tensor:
    """The mean of each block of ``k`` consecutive entries of the last dimension [..., T] -> [..., ceil(T / k)] (the
    last block may be shorter)."""
    T = series.shape[-1]
    side = -(-T // k)
    counts = torch.full((side,), float(k))
    counts[-1] = T - (side - 1) * k
    padded = torch.nn.functional.pad(series, (0, side * k - T))
    return padded.reshape(*series.shape[:-1], side, k).sum(dim=-1) / counts


def _view_of_prefix(p: list[Tensor], per_query: dict[str, Tensor], length: int, digits: int, side: int) -> dict:
    """The page's maps and statistics of the first ``length`` positions of a recorded pass (see
    :func:`attention_views`)."""
    pooled = torch.stack([pool_attention(layer[..., :length, :length], side) for layer in p])
    k = block_size(length, side)
    stats = {name: values[..., :length] for name, values in per_query.items()}
    statistics = {
        "mean_entropy": stats["entropy"].mean(dim=-1),
        "mean_distance": stats["distance"].mean(dim=-1),
        "sink_mass": stats["sink_mass"].mean(dim=-1),
        "max_logit": stats["max_logit"].amax(dim=-1),
        "entropy": _block_means(stats["entropy"], k),
        "uniform_entropy": _block_means(stats["uniform"], k),
    }
    return {
        "length": length,
        "block": k,
        "side": pooled.shape[-1],
        "maps": base64.b64encode(quantise_map(pooled)).decode("ascii"),
        "statistics": {name: _rounded(value.tolist(), digits) for name, value in statistics.items()},
    }


def attention_views(
    model: Decoder, ids: list[int], lengths: list[int], digits: int = 4, side: int = MAP_SIDE
) -> dict[int, dict]:
    """The page's view of ``model``'s attention on the first ``L`` of ``ids`` for each ``L`` of ``lengths``, ``{L:
    view}``.

    Attention is causal, so the maps of the first ``L`` tokens are the top-left
    ``L x L`` block of a longer pass's whenever the position signal of
    position ``i`` does not depend on the sequence's length: the lengths
    are grouped by the scheme's ``length_state`` (RoPE under dynamic NTK
    has one per length) and each group costs one pass, at its longest. The
    frequency probe of a model that turns channel pairs takes one more pass
    per shorter length of a group (:func:`frequency_probe`'s lengths of the
    queries and keys are not always a prefix's: xPos scales them from the
    pass's middle position); those passes are shorter, so at lengths that
    double (a run's T, 2T and 4T) they cost less than a third of the group's.

    Each view: ``{"length", "block", "side", "maps", "statistics"}``:
    ``block`` positions per cell and ``side`` cells a side
    (:func:`pool_attention`, at most ``side``); ``maps``, base64 of :func:`quantise_map` over
    ``[layer, head]``; ``statistics``, those of
    :func:`octlm.inspect.attention_statistics.attention_statistics` on the
    recorded (not pooled) maps, ``[layer][head]``, with ``entropy`` (nats)
    averaged over each block of queries (``[layer][head][side]``) and
    ``uniform_entropy`` (``[side]``), uniform attention's ``ln(i + 1)`` averaged the same way.
    A model with a layer that turns channel pairs adds ``frequencies``
    (:func:`frequency_probe` of a pass over the first ``L`` tokens); any other has no such key.
    """
    groups: dict[object, list[int]] = {}
    for length in sorted(set(lengths)):
        groups.setdefault(repr(model.positions.length_state(length)), []).append(length)
    views, device = {}, next(model.parameters()).device
    for group in groups.values():
        p, per_query, maps = _record_window(model, ids[: group[-1]])
        views.update({length: _view_of_prefix(p, per_query, length, digits, side) for length in group})
        # A prefix's maps are a shorter pass's, but not always its queries' and keys' lengths (xPos scales them
        # from the pass's middle position), so each shorter length gets a pass of its own, as `octlm attention
        # --length L` records; a model without turned pairs needs none.
        if longest := frequency_probe(model, maps):
            views[group[-1]]["frequencies"] = longest
            for length in group[:-1]:
                views[length]["frequencies"] = frequency_probe(model, record(model, ids[:length], device))
    return views


def window_labels(tokenizer, ids) -> list[str]:
    """The text of each token of a window (:meth:`Tokenizer.token_str`), for the page's hover labels."""
    return [tokenizer.token_str(int(i)) for i in ids]


def unavailable(model: Decoder, length: int) -> str | None:
    """Why the page shows no map of ``model`` at ``length`` tokens, or ``None`` when it can.

    A position table with fewer rows has nothing to show past them (never
    cropped or invented); maps past :data:`MAP_BUDGET_BYTES` are not recorded.
    """
    limit = model.max_length
    if limit is not None and length > limit:
        label = positions.facts_of(model.positions).label
        return (
            f"{label} has {limit} rows (positions 0..{limit - 1}): no position {limit} or later, so no "
            f"attention at {length} tokens"
        )
    need = map_bytes(model, length)
    if need > MAP_BUDGET_BYTES:
        return (
            f"the maps of {length} tokens would take {need / 2**30:.1f} GiB to record (the page records at most "
            f"{MAP_BUDGET_BYTES / 2**30:.0f} GiB); `octlm attention --length {length}` draws them"
        )
    return None


def run_attention(model: Decoder, val: np.ndarray, tokenizer, multipliers=(1, 2, 4)) -> dict:
    """The page's attention view of one run: its maps on the first ``m T`` validation tokens for each multiplier ``m``.

    ``T`` is the run's ``context_length``. A length past the text, or one
    :func:`unavailable` refuses, gets a ``note`` instead of maps.

    Returns:
        ``{"format", "train_length", "max_length", "label", "tokens" (the
        labels of the longest window's first :data:`MAP_SIDE` tokens), "lengths": [{"length",
        "multiplier", "note"} or {"multiplier"} and :func:`attention_views`' view]}``. A view's ``frequencies`` at
        ``m = 1`` is what ``octlm attention --run`` writes into ``statistics.json`` by default (the first ``T``
        validation tokens), to :data:`FREQUENCY_DIGITS` significant digits.
    """
    T = model.config.context_length
    entries, shown = [], []
    for m in multipliers:
        length = m * T
        note = unavailable(model, length)
        if note is None and len(val) < length:
            note = f"the validation text holds {len(val)} tokens, fewer than {length}"
        entries.append({"length": length, "multiplier": m, **({"note": note} if note else {})})
        shown += [] if note else [length]
    views = attention_views(model, [int(i) for i in val[: max(shown, default=0)]], shown)
    return {
        "format": ATTENTION_FORMAT,
        "train_length": T,
        "max_length": model.max_length,
        "label": positions.facts_of(model.positions).label,
        "tokens": window_labels(tokenizer, val[: min(len(val), MAP_SIDE)]),
        "lengths": [{**entry, **views.get(entry["length"], {})} for entry in entries],
    }


def layout_view(config: DecoderConfig) -> list[dict] | None:
    """Each layer of a run's layer layout (:mod:`octlm.model.layout`) as the page shows it; ``None`` without a layout.

    Per layer: ``layer`` (0-based), ``position`` (its scheme), ``window``
    (keys each query sees, itself included, tokens; ``None`` for global),
    and what the layer computes with, defaults applied: ``rope_theta`` (its
    RoPE base, ``None`` for a scheme without one), ``log_scale`` (queries
    scaled by ``max(1, log n / log T)``: the layer's ``logn`` or
    ``attention_scale="log"``, as the decoder decides), ``qk_norm``; and
    ``description``, the layer's line of :func:`octlm.model.layout.describe`
    (what the layout says, the label of its maps).
    """
    if not config.layers:
        return None
    lines = describe(config.layers)
    return [
        {
            "layer": i,
            "position": spec.position,
            "window": spec.window,
            "rope_theta": config.layer_config(spec).rope_theta
            if "rope_theta" in positions.SCHEMES[spec.position].reads
            else None,
            "log_scale": spec.log_scale or config.attention_scale == "log",
            "qk_norm": config.qk_norm if spec.qk_norm is None else spec.qk_norm,
            "description": line,
        }
        for i, (spec, line) in enumerate(zip(config.layers, lines, strict=True))
    ]


def _significant(value, digits: int):
    """``value`` (a number or nested lists) with every float rounded to ``digits`` significant digits, ints kept;
    ``None`` for a value that is not finite (a head whose pairs all have zero norm has no shares)."""
    if isinstance(value, list):
        return [_significant(v, digits) for v in value]
    if isinstance(value, int):
        return value
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None


def _rounded(value, digits: int):
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    return round(value, digits) if math.isfinite(value) else None


__all__ = [
    "ATTENTION_FORMAT",
    "MAP_BUDGET_BYTES",
    "MAP_SIDE",
    "MIN_SIDE",
    "PAGE_MAP_BYTES",
    "FREQUENCY_DIGITS",
    "frequency_probe",
    "map_side",
    "attention_views",
    "block_size",
    "layout_view",
    "map_bytes",
    "pool_attention",
    "quantise_map",
    "run_attention",
    "unavailable",
    "window_labels",
]
