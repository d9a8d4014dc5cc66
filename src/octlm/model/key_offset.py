"""The partial key offset: in the channels RoPE leaves unturned, each key carries its predecessor's values.

modded-nanogpt's record of 2025-12-14 rotates only part of each head and shifts the keys' other channels one
position later: the key at position ``j`` holds, in those channels, what the key at ``j - 1`` held (zeros at the
start of the sequence). A query then matches, in those channels, the token *before* each key, so one layer can find
"the token that followed an earlier copy of mine", the step an induction head otherwise needs two layers for
(Olsson et al. 2022). The turned channels are untouched, so RoPE's relative positions stay as they were::

    k'_j[c] = k_{j-1}[c]   for the channels c that the scheme passes through (``passed_channels``), else k_j[c]

Queries and values are unchanged. The channels are the scheme's ``passed_channels``: RoPE's (and p-RoPE's and
xPos's) ``head_dim - rotary_dim`` trailing channels under ``--partial-rotary-factor`` below 1. Exact under the
key/value cache: a layer's cache keeps the last key's passed channels before the shift (``LayerCache.last_key``).
"""

from __future__ import annotations

import torch
from torch import Tensor

KEY_OFFSET_HELP = (
    "in the channels of each head that RoPE leaves unturned (--partial-rotary-factor below 1), each key carries the "
    "previous position's key, so one layer can match the token before each key (modded-nanogpt 2025-12-14); exact "
    "under the key/value cache"
)


def shift_keys(k: Tensor, passed: int, cache=None) -> Tensor:
    """Keys [B, H, T, D] with their last ``passed`` channels moved one position later: position ``t`` takes
    position ``t - 1``'s, the first takes the cache's ``last_key`` (or zeros at the start of the sequence); the
    cache then keeps this pass's last key's channels."""
    tail = k[..., k.shape[-1] - passed :]
    before = None if cache is None else cache.last_key
    if before is None:
        before = tail.new_zeros(*tail.shape[:-2], 1, passed)
    if cache is not None:
        cache.last_key = tail[..., -1:, :].detach()
    shifted = torch.cat((before.to(tail.dtype), tail[..., :-1, :]), dim=-2)
    return torch.cat((k[..., : k.shape[-1] - passed], shifted), dim=-1)


def key_offset_problem(config, passed: list[tuple[str, int, bool]]) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for ``key_offset`` with a layer whose scheme passes no channel through unturned
    (``passed``: each layer's scheme, its ``passed_channels`` and whether it turns channels at all), or with
    ``document_mask``; ``None`` when it can be built."""
    if not config.key_offset:
        return None
    if config.document_mask:
        return "key_offset", (
            "=True with document_mask: each document's first key would carry the last key of the one before it; drop "
            "--key-offset or --document-mask"
        )
    for name, count, turns in passed:
        if count > 0:
            continue
        if not turns:
            why = f"position={name!r} turns no channel of the keys, so it has no turned part to keep apart"
        else:
            factor = config.partial_rotary_factor
            why = f"position={name!r} passes no channel of each head through unturned (partial_rotary_factor={factor})"
        return "key_offset", (
            f"=True with {why}; the offset needs RoPE turning part of each head: {{field:position}} rope (or prope, "
            "xpos) with {field:partial_rotary_factor} below 1 (e.g. 0.5)"
        )
    return None


__all__ = ["KEY_OFFSET_HELP", "key_offset_problem", "shift_keys"]
