"""The sine and cosine waves that the sinusoidal table and RoPE are built from.

Both use wavelengths in a geometric progression from ``2 pi`` up to about
``2 pi * base`` (Vaswani et al. 2017 §3.5; Su et al. 2021 eq. 15): the
sinusoidal scheme adds ``sin``/``cos`` of those angles to the token vectors,
RoPE turns channel pairs by them. Angles are formed in float64 wherever the
device has it (:func:`supports_float64`), because an angle near 10**4 held in
float32 is already off by about 1e-3 radians. The schemes themselves are in
:mod:`octlm.model.positions`; this module names none.
"""

from __future__ import annotations

import torch
from torch import Tensor

SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated")

#: Base of the wavelengths shared by the sinusoidal table and RoPE (Vaswani et
#: al. 2017 §3.5 use 10000; Su et al. 2021 keep it).
DEFAULT_BASE = 10000.0


def rope_inverse_frequencies(head_dim: int, theta: float = DEFAULT_BASE) -> Tensor:
    """Rotation speed of each channel pair of RoPE (Su et al. 2021, eq. 15).

    ``inv_freq[i] = theta ** (-2i / head_dim)`` for ``i`` in ``0 .. head_dim/2 - 1``,
    in radians per position, float64 [head_dim // 2].
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rope_inverse_frequencies: head_dim must be even and >= 2, got {head_dim}")
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


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
    dtype = torch.float64 if supports_float64(device) else torch.float32
    position = torch.arange(offset, offset + length, device=device, dtype=dtype).unsqueeze(1)
    pair = torch.arange(0, width, 2, device=device, dtype=dtype)
    angle = position * torch.pow(torch.tensor(base, dtype=dtype, device=device), -pair / width)
    table = torch.empty(length, width, device=device, dtype=dtype)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()[:, : width // 2]
    if layout == "concatenated":
        table = torch.cat((table[:, 0::2], table[:, 1::2]), dim=1)
    return table.float()


def supports_float64(device: torch.device | str | None) -> bool:
    """Whether ``device`` computes in float64 (MPS does not); ``None`` is the CPU."""
    return device is None or torch.device(device).type != "mps"


__all__ = ["DEFAULT_BASE", "SINUSOIDAL_LAYOUTS", "rope_inverse_frequencies", "sinusoidal_positions", "supports_float64"]
