"""RoPE: queries and keys turned by their position inside every attention layer (Su et al. 2021).

RoPE adds nothing to the token vectors; the score of a query at ``t`` and a
key at ``s`` then depends on ``t - s`` alone. Its context-extension methods
are in :mod:`octlm.model.positions.rope_scaling`, its frequencies in
:mod:`octlm.model.positions.waves`; xPos, which builds on it, in
:mod:`octlm.model.positions.xpos`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.declare import Bound, option
from octlm.model.positions.base import PositionScheme
from octlm.model.positions.facts import PositionVectors, SchemeFacts
from octlm.model.positions.registry import register
from octlm.model.positions.rope_scaling import RopeScaling, ScalableRotation
from octlm.model.positions.waves import DEFAULT_BASE, rope_inverse_frequencies, supports_float64

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig

#: "interleaved": channel pairs (2i, 2i+1), as Su et al. 2021 write it;
#: "half": pairs (i, i + d/2), the rotate_half layout of GPT-NeoX and LLaMA.
ROPE_LAYOUTS = ("interleaved", "half")


def rope_rows(scheme: RotaryPositions, added: Tensor | None, length: int) -> PositionVectors:
    """The explorer's rows of a rotation: ``[cos(t w_i) | sin(t w_i)]`` over the channel pairs (Su et al. 2021),
    [length, rotary_dim].

    RoPE adds no vectors; the cosine similarity of two such rows is the
    mean of ``cos(w_i (t - s))``, the score of a query and a key with
    equal unit pairs.
    """
    cos, sin = scheme.angles(length, 0, scheme.inv_freq.device)
    return PositionVectors(
        torch.cat((cos, sin), dim=-1).float().cpu(),
        "computed",
        f"RoPE adds no vectors; this is the score it gives a query and a key with equal unit channel pairs "
        f"({cos.shape[1]} pairs, rope_theta {scheme.theta:g}), computed from its rotation angles.",
    )


#: What other parts of octlm read of 'rope' (:class:`~octlm.model.positions.facts.SchemeFacts`).
ROPE_FACTS = SchemeFacts(
    label="RoPE",
    in_papers=("ruoss2023", "kazemnejad2023"),
    description="queries and keys rotated by their position, so scores see relative distance (Su et al. 2021)",
    hf_model_type="gpt_neox",
    # plain fine-tuning, then Chen et al. 2023's, Peng et al. 2023's and Llama 3.1's
    extension_methods=(None, "linear", "ntk", "yarn", "llama3"),
    times_length_study=True,
    # rotates queries and keys inside attention: the kept keys are rotated anew at cache positions
    evicts_cache=True,
    explorer_vectors=rope_rows,
)


@dataclass(frozen=True)
class RopeOptions:
    """RoPE's options, read also by the schemes that extend it (xpos, prope): its base, channel pairing and share of
    each head."""

    rope_theta: float = option(DEFAULT_BASE, "RoPE wavelength base")
    rope_layout: str = option(
        "interleaved",
        "RoPE channel pairs: interleaved (2i, 2i+1) or half (i, i+d/2, GPT-NeoX/LLaMA)",
        choices=list(ROPE_LAYOUTS),
    )
    partial_rotary_factor: float = option(
        1.0, "fraction of each head that RoPE rotates", bounds=Bound(0.0, 1.0, low_open=True)
    )


@register("rope", facts=ROPE_FACTS)
class RotaryPositions(ScalableRotation, PositionScheme):
    """Rotary position embedding, RoPE (Su et al. 2021).

    Adds nothing to the embedding. Inside every attention layer, channel pair
    ``i`` of each query and key at position ``t`` is rotated by the angle
    ``t * rope_theta ** (-2i / rotary_dim)``. A rotation keeps vector norms,
    and the dot product of a query rotated to ``t`` with a key rotated to
    ``s`` depends on ``t - s`` only, so attention sees relative distance.

    Config: ``rope_theta`` (wavelength base); ``rope_layout`` picks which
    channels pair up (``interleaved``: (2i, 2i+1) as in the paper; ``half``:
    (i, i + rotary_dim/2), the rotate_half layout of GPT-NeoX and LLaMA);
    ``partial_rotary_factor`` rotates only the first
    ``rotary_dim = head_dim * factor`` channels of each head and passes the
    rest through (GPT-NeoX).

    Shapes: queries and keys [B, H, T, head_dim]; ``rotary_dim`` must be even
    and >= 2. No table, so no maximum length: angles are computed from the
    positions on every call, in float64.

    ``set_rope_scaling`` (from :class:`octlm.model.positions.rope_scaling.ScalableRotation`)
    stretches the rotation past the training length without training
    (:class:`RopeScaling`: linear, NTK-aware, dynamic NTK, YaRN, Llama 3). It is a
    run-time setting for evaluation and sampling, not part of the trained
    config; ``None`` (the default) is plain RoPE.
    """

    options = RopeOptions
    takes_random_positions = True
    takes_document_positions = True  # angles from position_ids, per row under document_mask

    @classmethod
    def turning_pairs(cls, config: DecoderConfig) -> int:
        """How many channel pairs turn, the fastest first (pair ``i`` at ``rope_theta ** (-2i / rotary_dim)``): all
        ``rotary_dim // 2``."""
        return rotary_dim(config) // 2

    @classmethod
    def passed_channels(cls, config: DecoderConfig) -> int:
        """The ``head_dim - rotary_dim`` channels past the rotated part (``partial_rotary_factor`` < 1)."""
        return config.head_dim - rotary_dim(config)

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.theta = config.rope_theta
        self.layout = config.rope_layout
        self.rotary_dim = rotary_dim(config)
        self.scaling: RopeScaling | None = None
        self.register_buffer("inv_freq", rope_inverse_frequencies(self.rotary_dim, config.rope_theta), persistent=False)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        if config.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be one of {', '.join(ROPE_LAYOUTS)}, got {config.rope_layout!r}")
        if not 0.0 < config.partial_rotary_factor <= 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {config.partial_rotary_factor}")
        dim = rotary_dim(config)
        if dim < 2 or dim % 2:
            raise ValueError(
                f"position='rope' rotates channel pairs, so the rotated part of each head must be even; got "
                f"head_dim={config.head_dim} (d_model={config.d_model}, n_heads={config.n_heads}) x "
                f"partial_rotary_factor={config.partial_rotary_factor} = {dim} channels"
            )
        if not config.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {config.rope_theta}")

    def angles(
        self, length: int, offset: int, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at positions ``offset .. offset + length - 1``.

        Each is float32 [length, rotary_dim // 2], already multiplied by the
        scaling's attention factor. ``seq_len`` is the current sequence length
        (default ``offset + length``), which only dynamic NTK reads.
        """
        return self.angles_at(
            self.position_ids(length, offset, device), offset + length if seq_len is None else seq_len
        )

    def angles_at(self, positions: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at ``positions`` [N] (or [B, N]), as :meth:`angles`: float32 [N,
        rotary_dim // 2] (or [B, N, ...])."""
        inv_freq, attention = self.frequencies(seq_len)
        dtype = torch.float64 if supports_float64(positions.device) else torch.float32
        t = positions.to(dtype)
        angle = t.unsqueeze(-1) * inv_freq.to(device=t.device, dtype=dtype)
        return (angle.cos() * attention).float(), (angle.sin() * attention).float()

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q_len, k_len = q.shape[-2], k.shape[-2]
        end = offset + q_len
        span = max(q_len, k_len)
        if end - span < 0:
            raise ValueError(f"rotate: {k_len} keys ending at position {end - 1} would start before position 0")
        # One set of angles for the longer span; queries and keys both end at `end`.
        cos, sin = self.angles(span, end - span, q.device, seq_len=end)
        # one row of positions per sequence (document_mask): [B, 1, span, pairs] meets [B, H, T, pairs]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return (
            self._rotate_one(q, cos[..., span - q_len :, :], sin[..., span - q_len :, :]),
            self._rotate_one(k, cos[..., span - k_len :, :], sin[..., span - k_len :, :]),
        )

    def channel_pairs(self) -> tuple[Tensor, Tensor, Tensor]:
        """The channels each rotation turns together and its trained angle per token: ``(first, second, frequency)``,
        int64, int64 and float64 [rotary_dim // 2] (radians per token; 0 for a pair that does not turn), pair ``i``
        as :meth:`_rotate_one` pairs them for ``rope_layout``."""
        pairs = self.rotary_dim // 2
        index = torch.arange(pairs)
        first, second = (2 * index, 2 * index + 1) if self.layout == "interleaved" else (index, index + pairs)
        return first, second, self.frequencies(1)[0].detach().double().cpu()

    def _rotate_one(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        rotated, passed = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        if self.layout == "interleaved":
            a, b = rotated[..., 0::2].float(), rotated[..., 1::2].float()
            out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        else:
            a, b = rotated.float().chunk(2, dim=-1)
            out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        out = out.to(x.dtype)
        return out if passed.shape[-1] == 0 else torch.cat((out, passed), dim=-1)


def rotary_dim(config: DecoderConfig) -> int:
    """Channels of each head that RoPE rotates: ``int(head_dim * partial_rotary_factor)``."""
    return int(config.head_dim * config.partial_rotary_factor)


__all__ = ["ROPE_FACTS", "ROPE_LAYOUTS", "RopeOptions", "RotaryPositions", "rope_rows", "rotary_dim"]
