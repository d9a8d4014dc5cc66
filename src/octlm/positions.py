"""Position schemes: how a decoder learns where each token sits.

Attention by itself is blind to order (the seed, "Attention doesn't know the
order"), so every scheme injects position at exactly one of three places:

* ``embed``      -- added to the token vectors before the first block
                    (learned table, sinusoidal waves);
* ``rotate``     -- applied to queries and keys inside every attention layer
                    (RoPE);
* ``score_bias`` -- added to the attention scores (ALiBi).

A scheme is a small ``nn.Module`` that overrides only the hooks it needs; the
base class makes every hook a no-op. Schemes are found by name in
:data:`SCHEMES`, so adding one means writing one class in this module and
decorating it with :func:`register`. Nothing else in octlm names a scheme.

All hooks take ``offset``: the absolute position of the first token they see,
so cached decoding (which feeds one new token at position ``offset``) gives the
same vectors as a full forward pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model import DecoderConfig

#: Base of the wavelengths shared by the sinusoidal table and RoPE (Vaswani et
#: al. 2017 §3.5 use 10000; Su et al. 2021 keep it).
DEFAULT_BASE = 10000.0

SCHEMES: dict[str, type["PositionScheme"]] = {}

SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated")
#: "interleaved": channel pairs (2i, 2i+1), as Su et al. 2021 write it;
#: "half": pairs (i, i + d/2), the rotate_half layout of GPT-NeoX and LLaMA.
ROPE_LAYOUTS = ("interleaved", "half")


def register(name: str) -> Callable[[type["PositionScheme"]], type["PositionScheme"]]:
    """Class decorator adding a scheme to :data:`SCHEMES` under ``name``."""

    def wrap(cls: type[PositionScheme]) -> type[PositionScheme]:
        cls.name = name
        SCHEMES[name] = cls
        return cls

    return wrap


def unbounded_schemes() -> list[str]:
    """Names of the schemes that can address any position (no table limit)."""
    return sorted(name for name, cls in SCHEMES.items() if not cls.has_table_limit)


class PositionScheme(nn.Module):
    """Base class: no position signal anywhere.

    Subclasses override ``embed``, ``rotate`` or ``score_bias``. ``max_length``
    is the number of positions the scheme can address, or ``None`` when any
    length works.
    """

    name = "base"
    has_table_limit = False

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__()

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        """Raise ``ValueError`` naming the field when ``config`` cannot use this scheme."""

    @property
    def max_length(self) -> int | None:
        return None

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Return token vectors ``x`` [B, T, C] with position added (here: unchanged)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Return queries and keys [B, H, T, D] with position applied (here: unchanged)."""
        return q, k

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor | None:
        """Additive bias for attention scores [H, q_len, k_len], or ``None``."""
        return None


def sinusoidal_positions(
    length: int,
    width: int,
    offset: int = 0,
    base: float = DEFAULT_BASE,
    device: torch.device | str | None = None,
    layout: str = "interleaved",
) -> Tensor:
    """The fixed sinusoidal position table of Vaswani et al. 2017 §3.5.

    ``P[t, 2i] = sin(t / base**(2i / width))`` and
    ``P[t, 2i + 1] = cos(t / base**(2i / width))`` for ``t`` in
    ``offset .. offset + length - 1``: sines on even columns, cosines on odd
    ones (the interleaved layout of the seed). The first pair turns once every
    2*pi positions; the last turns about ``base`` times slower.

    The table is computed from the length on every call, so there is no
    maximum length. Angles are formed in float64 and only the result is cast,
    so far positions stay accurate to float32 rounding (an angle near 10**4
    held in float32 would already be off by about 1e-3 radians).

    Args:
        length: number of positions (rows), >= 0.
        width: number of columns, >= 1. An odd width is allowed and ends with
            a sine column: the table is the first ``width`` columns of the
            ``width + 1`` layout, with exponents still ``2i / width``.
        offset: position of the first row, >= 0 (for cached decoding).
        base: wavelength base, > 0.
        device: where to build the table.
        layout: ``"interleaved"`` (the seed's, above) or ``"concatenated"``:
            all sine columns first, then all cosine columns, as tensor2tensor
            and fairseq lay them out. The two hold the same values, permuted.

    Returns:
        float32 tensor [length, width].

    Raises:
        ValueError: when ``length`` or ``offset`` is negative, ``width`` < 1,
            ``base`` <= 0 or the layout is unknown.
    """
    if length < 0:
        raise ValueError(f"sinusoidal_positions: length must be >= 0, got {length}")
    if width < 1:
        raise ValueError(f"sinusoidal_positions: width must be >= 1, got {width}")
    if offset < 0:
        raise ValueError(f"sinusoidal_positions: offset must be >= 0, got {offset}")
    if not base > 0:
        raise ValueError(f"sinusoidal_positions: base must be > 0, got {base}")
    if layout not in SINUSOIDAL_LAYOUTS:
        raise ValueError(f"sinusoidal_positions: layout must be one of {SINUSOIDAL_LAYOUTS}, got {layout!r}")
    dtype = torch.float64 if _supports_float64(device) else torch.float32
    position = torch.arange(offset, offset + length, device=device, dtype=dtype).unsqueeze(1)
    pair = torch.arange(0, width, 2, device=device, dtype=dtype)
    angle = position * torch.pow(torch.tensor(base, dtype=dtype, device=device), -pair / width)
    table = torch.empty(length, width, device=device, dtype=dtype)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()[:, : width // 2]
    if layout == "concatenated":
        table = torch.cat((table[:, 0::2], table[:, 1::2]), dim=1)
    return table.float()


def rope_inverse_frequencies(head_dim: int, theta: float = DEFAULT_BASE) -> Tensor:
    """Rotation speed of each channel pair of RoPE (Su et al. 2021, eq. 15).

    ``inv_freq[i] = theta ** (-2i / head_dim)`` for ``i`` in ``0 .. head_dim/2 - 1``,
    in radians per position, float64 [head_dim // 2].
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rope_inverse_frequencies: head_dim must be even and >= 2, got {head_dim}")
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def _supports_float64(device: torch.device | str | None) -> bool:
    return device is None or torch.device(device).type != "mps"


@register("learned")
class LearnedPositions(PositionScheme):
    """A learned table of position rows, added to the token vectors (GPT-2).

    Holds ``table``: ``nn.Embedding(context_length, d_model)``, initialised
    N(0, 0.02) by the decoder. Row ``t`` is added to the token at position
    ``t``; the table stops at its last row, so position ``context_length`` has
    no vector and asking for it raises ``ValueError`` (never an invented row).
    """

    has_table_limit = True

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.table = nn.Embedding(config.context_length, config.d_model)

    @property
    def max_length(self) -> int:
        return self.table.num_embeddings

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.max_length:
            raise ValueError(
                f"learned positions have {self.max_length} rows (positions 0..{self.max_length - 1}) "
                f"but the input needs positions {offset}..{end - 1} (length {end}); "
                f"crop the sequence to {self.max_length} tokens or use a scheme without a table "
                f"limit: {', '.join(unbounded_schemes())}"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.table(positions)


@register("sinusoidal")
class SinusoidalPositions(PositionScheme):
    """Fixed sine/cosine rows added to the token vectors (Vaswani et al. 2017 §3.5).

    No parameters and no maximum length: the rows come from
    :func:`sinusoidal_positions` on every call, so the same model can be run
    at any length (whether it generalises there is what ``octlm length`` asks).
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.base = DEFAULT_BASE
        self.layout = config.sinusoidal_layout

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        if config.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ValueError(f"sinusoidal_layout must be one of {', '.join(SINUSOIDAL_LAYOUTS)}, got {config.sinusoidal_layout!r}")

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        table = sinusoidal_positions(x.shape[1], x.shape[2], offset, self.base, x.device, self.layout)
        return x + table.to(x.dtype)


@register("rope")
class RotaryPositions(PositionScheme):
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
    and >= 2. No table, so no maximum length.
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.theta = config.rope_theta
        self.layout = config.rope_layout
        self.rotary_dim = rotary_dim(config)
        self.register_buffer("inv_freq", rope_inverse_frequencies(self.rotary_dim, config.rope_theta), persistent=False)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
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

    def angles(self, length: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles, each float32 [length, rotary_dim // 2]."""
        dtype = torch.float64 if _supports_float64(device) else torch.float32
        t = torch.arange(offset, offset + length, device=device, dtype=dtype)
        angle = torch.outer(t, self.inv_freq.to(device=device, dtype=dtype))
        return angle.cos().float(), angle.sin().float()

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        cos, sin = self.angles(q.shape[-2], offset, q.device)
        return self._rotate_one(q, cos, sin), self._rotate_one(k, cos, sin)

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


def rotary_dim(config: "DecoderConfig") -> int:
    """Channels of each head that RoPE rotates: ``int(head_dim * partial_rotary_factor)``."""
    return int(config.head_dim * config.partial_rotary_factor)


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head ALiBi slopes m_h (Press et al. 2022, §3), float32 [n_heads].

    For a power of two ``n``, the slopes are the geometric sequence starting
    at ``2 ** (-8 / n)`` with that same ratio: for 8 heads, 1/2, 1/4, ...,
    1/256. For other head counts the paper's reference code takes the slopes
    of the largest power of two ``p`` below ``n`` and fills the remaining
    ``n - p`` heads with every other slope of ``2p`` heads.

    Raises:
        ValueError: when ``n_heads`` < 1.
    """
    if n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(p)
    if p < n_heads:
        slopes += power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


@register("alibi")
class ALiBiPositions(PositionScheme):
    """Attention with Linear Biases, ALiBi (Press et al. 2022).

    Adds nothing to the embedding and rotates nothing. Head ``h`` adds
    ``-m_h * (i - j)`` to the score of query position ``i`` on key position
    ``j <= i`` (:func:`alibi_slopes`), so attention fades with distance at a
    per-head rate. No table, so no maximum length; the bias goes to
    ``scaled_dot_product_attention`` as an additive float mask.
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.register_buffer("slopes", alibi_slopes(config.n_heads), persistent=False)

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset .. offset+q_len-1``, keys ending where the queries end.

        Entries for future keys (``j > i``) are ``-m (i - j) > 0``; the caller
        masks them out.
        """
        device = self.slopes.device
        i = torch.arange(offset, offset + q_len, device=device)
        j = torch.arange(offset + q_len - k_len, offset + q_len, device=device)
        distance = (i[:, None] - j[None, :]).float()
        return -self.slopes[:, None, None] * distance


@register("none")
class NoPositions(PositionScheme):
    """NoPE: no position signal at all (Kazemnejad et al. 2023).

    The embedding is the token row alone and attention gets no rotation or
    bias; the causal mask is the only order information, which a decoder can
    still turn into a sense of position. No maximum length.
    """


def build(config: "DecoderConfig") -> PositionScheme:
    """Instantiate the scheme named by ``config.position``.

    Raises:
        ValueError: for an unknown name (listing the known ones) or a config
            the scheme cannot use.
    """
    check(config)
    return SCHEMES[config.position](config)


def check(config: "DecoderConfig") -> None:
    """Validate ``config.position`` and the fields that scheme depends on."""
    if config.position not in SCHEMES:
        raise ValueError(
            f"position={config.position!r} is not a known scheme; choose one of: {', '.join(sorted(SCHEMES))}"
        )
    SCHEMES[config.position].check_config(config)


__all__ = [
    "DEFAULT_BASE",
    "ROPE_LAYOUTS",
    "SINUSOIDAL_LAYOUTS",
    "ALiBiPositions",
    "NoPositions",
    "alibi_slopes",
    "rotary_dim",
    "SCHEMES",
    "LearnedPositions",
    "PositionScheme",
    "RotaryPositions",
    "SinusoidalPositions",
    "build",
    "check",
    "register",
    "rope_inverse_frequencies",
    "sinusoidal_positions",
    "unbounded_schemes",
]
