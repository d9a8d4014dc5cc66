"""xPos: RoPE whose score fades with distance (Sun et al. 2023)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.model.positions.registry import register
from octlm.model.positions.rotary import ROPE_FACTS, RotaryPositions
from octlm.model.positions.waves import supports_float64

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


#: The most positions, from the first key to the last query, that one attention call of xPos may
#: span: 2**15. The decay factors are taken relative to a reference inside that span, so the
#: largest is zeta_0 ** (-2**14 / 512) = 3.5 ** 32, about 2.6e17, for the fastest-fading pair
#: (zeta_0 = gamma / (1 + gamma) whatever the width); float32 and bfloat16 reach 3.4e38, which leaves
#: q and k twenty orders of magnitude either side. Past about 36,000 positions from the reference,
#: 3.5 ** (36000 / 512) overflows float32.
MAX_SPAN = 2**15


#: What other parts of octlm read of 'xpos' (:class:`~octlm.model.positions.facts.SchemeFacts`).
XPOS_FACTS = dataclasses.replace(
    ROPE_FACTS,  # RoPE's cache eviction and explorer rows
    label="xPos",
    description="RoPE with a per-channel decay that makes the score fade with distance (Sun et al. 2023)",
    # the papers compare RoPE itself
    in_papers=(),
    # opt-in: the default study's 30 minutes hold five models
    in_length_study=False,
    hf_model_type=None,
    # RoPE's fine-tunes are not xPos's: the stage leaves it out
    extension_methods=(),
    times_length_study=False,
    hf_refusal="transformers' GPT-NeoX rotates queries and keys but has no xPos decay",
)


@register("xpos", facts=XPOS_FACTS)
class XPosRotation(RotaryPositions):
    """xPos: RoPE with an exponential decay (Sun et al. 2023, §3.2, "Extrapolatable Position Embedding").

    Queries and keys are rotated as by RoPE (:class:`RotaryPositions`, with
    its config, layouts and scalings); then channel pair ``i`` of a query at
    position ``n`` is multiplied by ``zeta_i ** ((n - c) / scale_base)`` and of
    a key at position ``m`` by ``zeta_i ** ((c - m) / scale_base)``, with
    ``zeta_i = (i / (d / 2) + gamma) / (1 + gamma)``, ``gamma = 0.4``,
    ``d = rotary_dim``, ``scale_base = 512``. Their product is
    ``zeta_i ** ((n - m) / scale_base)``, the paper's relative, per-pair
    attenuation of far keys, whatever the reference ``c``.

    The paper writes ``c = 0``, whose key factor grows without bound and
    overflows float32 about 36,000 positions in; its code (torchscale's
    ``XPOS``) centres the positions on the sequence instead. Here ``c`` is
    the middle of the pass's positions, so ``forward(offset=...)`` is finite
    and gives the same scores at any offset; a pass that continues a
    :class:`~octlm.model.kvcache.KVCache` (whose keys were scaled in earlier
    passes) uses ``c = MAX_SPAN / 2`` for all of them. One call may span at
    most :data:`MAX_SPAN` positions (a cache, at most that many tokens);
    more raises ``ValueError``. Shapes as RoPE: queries and keys
    [B, H, T, head_dim].
    """

    takes_document_positions = False  # its decay reference is taken from the pass's positions as one row
    gamma, scale_base = 0.4, 512.0

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        pairs = torch.arange(self.rotary_dim // 2, dtype=torch.float64)
        self.register_buffer("zeta", (pairs / (self.rotary_dim / 2) + self.gamma) / (1 + self.gamma), persistent=False)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        super().check_config(config)
        if config.context_length * config.randomize_positions > MAX_SPAN:
            raise ValueError(
                f"position='xpos' spans at most {MAX_SPAN:,} positions in one pass "
                f"(its decay factors leave float32 past that); context_length {config.context_length} x "
                f"randomize_positions {config.randomize_positions} is more: lower them"
            )

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q, k = super().rotate(q, k, offset)
        q_len, k_len = q.shape[-2], k.shape[-2]
        end, span = offset + q_len, max(q_len, k_len)
        positions = self.position_ids(span, end - span, q.device)
        dtype = torch.float64 if supports_float64(q.device) else torch.float32
        log_zeta = self.zeta.to(device=q.device, dtype=dtype).log() / self.scale_base
        relative = (positions - self.reference(positions, end)).to(dtype)
        decay = (relative[:, None] * log_zeta).exp().float()  # [span, pairs]: zeta ** ((n - c) / scale_base)
        return self._scale(q, decay[-q_len:]), self._scale(k, decay[-k_len:].reciprocal())

    def reference(self, positions: Tensor, end: int) -> Tensor | int:
        """The position ``c`` the decay factors of a pass are taken from.

        ``positions`` are the pass's key positions, int64 [span], the last of
        them the last query's; ``end`` is the sequence length after the pass.
        Without a cache: the middle of ``positions``; continuing a cache (which
        holds positions ``0 .. end - 1``): ``MAX_SPAN // 2``, the same for
        every pass over that cache.

        Raises:
            ValueError: when the pass spans more than :data:`MAX_SPAN` keys,
                or a cached sequence would be longer than that.
        """
        if self.cached_pass:
            if end > MAX_SPAN:
                raise ValueError(
                    f"xPos: a cached sequence of {end:,} tokens is longer than the {MAX_SPAN:,} positions its decay "
                    f"can span in float32; decode at most {MAX_SPAN:,} tokens with a cache"
                )
            return MAX_SPAN // 2
        if len(positions) > MAX_SPAN:
            raise ValueError(
                f"xPos: {len(positions):,} keys in one pass are more than the {MAX_SPAN:,} positions its decay can "
                f"span in float32; score the sequence in windows of at most {MAX_SPAN:,} tokens"
            )
        return (positions[0] + positions[-1]) // 2

    def _scale(self, x: Tensor, factor: Tensor) -> Tensor:
        """Multiply each rotated channel pair of ``x`` [B, H, T, D] by ``factor`` [T, pairs]; passed channels keep 1."""
        per_channel = factor.repeat_interleave(2, dim=-1) if self.layout == "interleaved" else factor.repeat(1, 2)
        rest = per_channel.new_ones(per_channel.shape[0], x.shape[-1] - self.rotary_dim)
        return (x.float() * torch.cat((per_channel, rest), dim=-1)).to(x.dtype)


__all__ = ["MAX_SPAN", "XPosRotation"]
