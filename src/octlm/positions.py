"""Position schemes: how a decoder learns where each token sits.

Attention by itself is blind to order (the seed, "Attention doesn't know the
order"), so every scheme injects position at exactly one of three places:

* ``embed``      -- added to the token vectors before the first block
                    (learned table, sinusoidal waves);
* ``rotate``     -- applied to queries and keys inside every attention layer
                    (RoPE);
* ``score_bias`` -- added to the attention scores (reserved for biasing
                    schemes such as ALiBi).

A scheme is a small ``nn.Module`` that overrides only the hooks it needs; the
base class makes every hook a no-op. Schemes are found by name in
:data:`SCHEMES`, so adding one means writing one class in this module and
decorating it with :func:`register`. Nothing else in octlm names a scheme.

All hooks take ``offset``: the absolute position of the first token they see,
so cached decoding (which feeds one new token at position ``offset``) gives the
same vectors as a full forward pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model import DecoderConfig

#: Base of the wavelengths shared by the sinusoidal table and RoPE (Vaswani et
#: al. 2017 §3.5 use 10000; Su et al. 2021 keep it).
DEFAULT_BASE = 10000.0

SCHEMES: dict[str, type["PositionScheme"]] = {}


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

    Returns:
        float32 tensor [length, width].

    Raises:
        ValueError: when ``length`` or ``offset`` is negative, ``width`` < 1 or
            ``base`` <= 0.
    """
    if length < 0:
        raise ValueError(f"sinusoidal_positions: length must be >= 0, got {length}")
    if width < 1:
        raise ValueError(f"sinusoidal_positions: width must be >= 1, got {width}")
    if offset < 0:
        raise ValueError(f"sinusoidal_positions: offset must be >= 0, got {offset}")
    if not base > 0:
        raise ValueError(f"sinusoidal_positions: base must be > 0, got {base}")
    dtype = torch.float64 if _supports_float64(device) else torch.float32
    position = torch.arange(offset, offset + length, device=device, dtype=dtype).unsqueeze(1)
    pair = torch.arange(0, width, 2, device=device, dtype=dtype)
    angle = position * torch.pow(torch.tensor(base, dtype=dtype, device=device), -pair / width)
    table = torch.empty(length, width, device=device, dtype=dtype)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()[:, : width // 2]
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

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        table = sinusoidal_positions(x.shape[1], x.shape[2], offset, self.base, x.device)
        return x + table.to(x.dtype)


@register("rope")
class RotaryPositions(PositionScheme):
    """Rotary position embedding, RoPE (Su et al. 2021).

    Adds nothing to the embedding. Inside every attention layer, channel pair
    ``(2i, 2i + 1)`` of each query and key at position ``t`` is rotated by the
    angle ``t * rope_theta ** (-2i / head_dim)``. A rotation keeps vector
    norms, and the dot product of a query rotated to ``t`` with a key rotated
    to ``s`` depends on ``t - s`` only, so attention sees relative distance.

    Shapes: queries and keys [B, H, T, head_dim]; ``head_dim`` must be even.
    No table, so no maximum length.
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.theta = config.rope_theta
        self.register_buffer("inv_freq", rope_inverse_frequencies(config.head_dim, config.rope_theta), persistent=False)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        if config.head_dim % 2:
            raise ValueError(
                f"position='rope' rotates channel pairs, so head_dim = d_model / n_heads must be even; "
                f"got head_dim={config.head_dim} (d_model={config.d_model}, n_heads={config.n_heads})"
            )
        if not config.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {config.rope_theta}")

    def angles(self, length: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles, each float32 [length, head_dim // 2]."""
        dtype = torch.float64 if _supports_float64(device) else torch.float32
        t = torch.arange(offset, offset + length, device=device, dtype=dtype)
        angle = torch.outer(t, self.inv_freq.to(device=device, dtype=dtype))
        return angle.cos().float(), angle.sin().float()

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        cos, sin = self.angles(q.shape[-2], offset, q.device)
        return _rotate_pairs(q, cos, sin), _rotate_pairs(k, cos, sin)


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # Interleaved pairs (x[2i], x[2i+1]) as in Su et al. 2021, eq. 34.
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)


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
