"""xPos: RoPE whose score fades with distance (Sun et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from octlm.model.positions.base import register
from octlm.model.positions.rotary import RotaryPositions
from octlm.model.positions.waves import supports_float64

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


@register("xpos")
class XPosRotation(RotaryPositions):
    """xPos: RoPE with an exponential decay (Sun et al. 2023, §3.2, "Extrapolatable Position Embedding").

    Queries and keys are rotated as by RoPE (:class:`RotaryPositions`, with
    its config, layouts and scalings); then channel pair ``i`` of a query at
    position ``n`` is multiplied by ``zeta_i ** (n / scale_base)`` and of a
    key at position ``m`` by ``zeta_i ** (-m / scale_base)``, with
    ``zeta_i = (i / (d / 2) + gamma) / (1 + gamma)``, ``gamma = 0.4``,
    ``d = rotary_dim``, ``scale_base = 512``. Their product decays as
    ``zeta_i ** ((n - m) / scale_base)``: a relative, per-pair attenuation of
    far keys. Positions are absolute (not centred, as the paper's code
    does), so a cached key keeps its factor; in float32 the key factor stays
    finite for sequences up to tens of thousands of tokens. Shapes as RoPE:
    queries and keys [B, H, T, head_dim]; no maximum length.
    """

    label = "xPos"
    description = "RoPE with a per-channel decay that makes the score fade with distance (Sun et al. 2023)"
    in_length_study = False  # opt-in: the default study's 30 minutes hold five models
    hf_model_type = None
    extension_methods = ()  # RoPE's fine-tunes are not xPos's: the stage leaves it out
    times_length_study = False
    hf_refusal = "transformers' GPT-NeoX rotates queries and keys but has no xPos decay"
    gamma, scale_base = 0.4, 512.0

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        pairs = torch.arange(self.rotary_dim // 2, dtype=torch.float64)
        self.register_buffer("zeta", (pairs / (self.rotary_dim / 2) + self.gamma) / (1 + self.gamma), persistent=False)

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q, k = super().rotate(q, k, offset)
        q_len, k_len = q.shape[-2], k.shape[-2]
        end = offset + q_len
        positions = self.position_ids(max(q_len, k_len), end - max(q_len, k_len), q.device)
        dtype = torch.float64 if supports_float64(q.device) else torch.float32
        log_zeta = self.zeta.to(device=q.device, dtype=dtype).log() / self.scale_base
        decay = (positions.to(dtype)[:, None] * log_zeta).exp().float()  # [span, pairs]: zeta ** (n / scale_base)
        return self._scale(q, decay[-q_len:]), self._scale(k, decay[-k_len:].reciprocal())

    def _scale(self, x: Tensor, factor: Tensor) -> Tensor:
        """Multiply each rotated channel pair of ``x`` [B, H, T, D] by ``factor`` [T, pairs]; passed channels keep 1."""
        per_channel = factor.repeat_interleave(2, dim=-1) if self.layout == "interleaved" else factor.repeat(1, 2)
        rest = per_channel.new_ones(per_channel.shape[0], x.shape[-1] - self.rotary_dim)
        return (x.float() * torch.cat((per_channel, rest), dim=-1)).to(x.dtype)


__all__ = ["XPosRotation"]
