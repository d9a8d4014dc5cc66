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
same vectors as a full forward pass. In a cached step the keys reach further
back than the queries: they always *end* where the queries end.

RoPE can also be stretched past its training length without training
(:class:`RopeScaling`): linear position interpolation, NTK-aware base scaling,
dynamic NTK and YaRN. Each method is one small function in
:data:`ROPE_SCALINGS` that returns the inverse frequencies and the attention
factor, so a new method is added in one place as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
        """Return queries [B, H, Tq, D] and keys [B, H, Tk, D] with position applied (here: unchanged).

        Queries sit at positions ``offset .. offset + Tq - 1``; keys end where
        the queries end, at ``offset + Tq - Tk .. offset + Tq - 1`` (a cached
        step has ``Tk >= Tq``).
        """
        return q, k

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor | None:
        """Additive bias for attention scores [H, q_len, k_len], or ``None``."""
        return None

    def length_state(self, seq_len: int) -> object:
        """What the position signal of a ``seq_len``-token sequence depends on besides the positions.

        ``None`` for every scheme except RoPE under dynamic NTK, whose
        frequencies change with the length. Keys and values cached under one
        state are stale under another: a position's rotation feeds every later
        layer, so the cache must be refilled (``Decoder.next_token_logits``
        does that).
        """
        return None

    def set_rope_scaling(self, scaling: "RopeScaling | None") -> None:
        """Stretch RoPE past its training length (:class:`RopeScaling`); ``None`` turns it off.

        Raises:
            ValueError: for every scheme but ``rope``, which has no rotation to scale.
        """
        if scaling is not None:
            raise ValueError(f"RoPE scaling ({scaling.method}) needs position='rope'; this model uses position={self.name!r}")


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


@dataclass(frozen=True)
class RopeScalingMethod:
    """One entry of :data:`ROPE_SCALINGS`.

    Attributes:
        name: what ``--rope-scaling`` calls it.
        frequencies: ``fn(scaling, rotary_dim, theta, seq_len) -> (inv_freq, attention_factor)``:
            float64 inverse frequencies [rotary_dim // 2] in radians per
            position, and the factor that multiplies cos and sin (so both q
            and k; the attention logits grow by its square).
        depends_on_length: whether ``seq_len`` (the current sequence length,
            in tokens) changes the result; a key/value cache is then stale
            whenever the frequencies change.
    """

    name: str
    frequencies: Callable[["RopeScaling", int, float, int], tuple[Tensor, float]]
    depends_on_length: bool


#: RoPE context-extension methods by name; :func:`rope_scaling_method` adds one.
ROPE_SCALINGS: dict[str, RopeScalingMethod] = {}


def rope_scaling_method(name: str, depends_on_length: bool = False) -> Callable:
    """Decorator registering a frequency function in :data:`ROPE_SCALINGS` under ``name``."""

    def wrap(fn: Callable) -> Callable:
        ROPE_SCALINGS[name] = RopeScalingMethod(name, fn, depends_on_length)
        return fn

    return wrap


@dataclass(frozen=True)
class RopeScaling:
    """How a RoPE model is run past the length it was trained on, without training.

    Attributes:
        method: a name in :data:`ROPE_SCALINGS`: ``linear``, ``ntk``,
            ``dynamic-ntk`` or ``yarn``.
        factor: the scale ``s`` >= 1, usually the target length over
            ``original_length``. For ``dynamic-ntk`` it is the multiplier
            ``alpha`` of the length ratio (1: the scale is just the current
            length over ``original_length``).
        original_length: tokens the model was trained on (its
            ``context_length``).
        beta_fast, beta_slow: YaRN's ramp bounds, in rotations a channel pair
            makes over ``original_length`` (Peng et al. 2023 §3.2: 32 and 1).
            Pairs turning more than ``beta_fast`` times keep their frequency;
            pairs turning fewer than ``beta_slow`` times are interpolated.

    Raises:
        ValueError: for an unknown method, a factor below 1 or not finite, an
            ``original_length`` below 1, or ``beta_fast <= beta_slow``.
    """

    method: str
    factor: float
    original_length: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def __post_init__(self) -> None:
        if self.method not in ROPE_SCALINGS:
            raise ValueError(f"RoPE scaling method {self.method!r} is unknown; choose one of: {', '.join(ROPE_SCALINGS)}")
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ValueError(f"RoPE scaling factor must be a finite number >= 1 (target length / training length), got {self.factor}")
        if self.original_length < 1:
            raise ValueError(f"RoPE scaling original_length must be >= 1 token, got {self.original_length}")
        if not 0 < self.beta_slow < self.beta_fast:
            raise ValueError(f"YaRN needs 0 < beta_slow < beta_fast, got beta_slow={self.beta_slow}, beta_fast={self.beta_fast}")

    @property
    def depends_on_length(self) -> bool:
        return ROPE_SCALINGS[self.method].depends_on_length

    def frequencies(self, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
        """Inverse frequencies float64 [rotary_dim // 2] and the attention factor for a sequence of ``seq_len`` tokens."""
        return ROPE_SCALINGS[self.method].frequencies(self, rotary_dim, theta, seq_len)


@rope_scaling_method("linear")
def linear_interpolation(scaling: RopeScaling, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
    """Position interpolation (Chen et al. 2023, eq. 4): position ``t`` is read as ``t / s``.

    Dividing every position by ``s`` is dividing every frequency by ``s``, so
    ``s * original_length`` positions span the angles the model was trained
    on. Positions are never rounded, so nothing is looked up outside a table.
    """
    return rope_inverse_frequencies(rotary_dim, theta) / scaling.factor, 1.0


def ntk_theta(theta: float, scale: float, rotary_dim: int) -> float:
    """NTK-aware base: ``theta * scale ** (d / (d - 2))`` with ``d = rotary_dim``.

    The new base slows the lowest frequency by exactly ``scale`` (it is then
    interpolated like linear scaling) while the highest, ``theta ** 0 = 1``,
    is left alone (Peng et al. 2023 §3.1, after bloc97's 2023 proposal). With
    ``d = 2`` the only pair is that highest one, so nothing changes.
    """
    if rotary_dim <= 2 or scale == 1.0:
        return theta
    return theta * scale ** (rotary_dim / (rotary_dim - 2))


@rope_scaling_method("ntk")
def ntk_aware(scaling: RopeScaling, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
    """NTK-aware scaling: the RoPE base raised by :func:`ntk_theta` for a fixed ``s``."""
    return rope_inverse_frequencies(rotary_dim, ntk_theta(theta, scaling.factor, rotary_dim)), 1.0


@rope_scaling_method("dynamic-ntk", depends_on_length=True)
def dynamic_ntk(scaling: RopeScaling, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
    """Dynamic NTK (Peng et al. 2023 §3.3): NTK-aware scaling with the scale taken from the current length.

    ``s = max(1, alpha * seq_len / original_length - (alpha - 1))`` with
    ``alpha = factor`` (the form transformers uses; ``alpha = 1`` gives the
    paper's ``max(1, seq_len / original_length)``), recomputed from
    ``seq_len`` on every call: no table is kept, so a long sequence cannot
    leave stale frequencies behind for a short one. Within the training
    length it is plain RoPE.
    """
    scale = max(1.0, scaling.factor * seq_len / scaling.original_length - (scaling.factor - 1.0))
    return rope_inverse_frequencies(rotary_dim, ntk_theta(theta, scale, rotary_dim)), 1.0


@rope_scaling_method("yarn")
def yarn(scaling: RopeScaling, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
    """YaRN (Peng et al. 2023 §3.2 "NTK-by-parts" and §3.4 temperature).

    Channel pairs whose wavelength fits many times into the training length
    (more than ``beta_fast`` rotations) keep their frequency; pairs that turn
    less than ``beta_slow`` times are interpolated by ``s`` as in linear
    scaling; in between the two blend along a linear ramp over the pair index,
    whose ends are rounded outwards, as in the paper's reference code. The
    attention factor ``0.1 ln(s) + 1`` multiplies both q and k, so the logits
    are divided by a temperature ``t`` with ``sqrt(1/t) = 0.1 ln(s) + 1``.

    Raises:
        ValueError: when ``theta`` <= 1 (the wavelengths would not grow).
    """
    if not theta > 1.0:
        raise ValueError(f"YaRN needs rope_theta > 1, got {theta}")
    base = rope_inverse_frequencies(rotary_dim, theta)
    length, s = scaling.original_length, scaling.factor

    def pair_turning(rotations: float) -> float:
        # Index i at which pair i turns `rotations` times over `length`: length * theta^(-2i/d) / (2 pi) = rotations.
        return rotary_dim * math.log(length / (2 * math.pi * rotations)) / (2 * math.log(theta))

    low = max(math.floor(pair_turning(scaling.beta_fast)), 0)
    high = min(math.ceil(pair_turning(scaling.beta_slow)), rotary_dim - 1)
    if high <= low:
        high = low + 1e-3  # a step instead of a ramp
    index = torch.arange(rotary_dim // 2, dtype=torch.float64)
    interpolated = ((index - low) / (high - low)).clamp(0.0, 1.0)
    inv_freq = base * (1.0 - interpolated) + (base / s) * interpolated
    attention = 0.1 * math.log(s) + 1.0 if s > 1.0 else 1.0
    return inv_freq, attention


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

    The token vectors are multiplied by ``sqrt(d_model)`` before the rows are
    added, as Vaswani et al. 2017 §3.4 do. octlm's token table starts at
    N(0, 0.02), so a token row has norm ~0.02 sqrt(C) while a sinusoidal row
    has norm sqrt(C / 2): without the factor the token signal is ~35 times
    weaker than the position signal, and with octlm's AdamW weight decay the
    Day-1 model stayed at the unigram loss (training loss 5.77 nats after 420
    steps on tinyshakespeare, where the scaled model reached 3.99 after 380).
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.base = DEFAULT_BASE
        self.layout = config.sinusoidal_layout
        self.token_scale = math.sqrt(config.d_model)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        if config.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ValueError(f"sinusoidal_layout must be one of {', '.join(SINUSOIDAL_LAYOUTS)}, got {config.sinusoidal_layout!r}")

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """``sqrt(C) * x + P[offset : offset + T]`` for token vectors ``x`` [B, T, C]."""
        table = sinusoidal_positions(x.shape[1], x.shape[2], offset, self.base, x.device, self.layout)
        return x * self.token_scale + table.to(x.dtype)


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
    and >= 2. No table, so no maximum length: angles are computed from the
    positions on every call, in float64.

    ``set_rope_scaling`` stretches the rotation past the training length
    without training (:class:`RopeScaling`: linear, NTK-aware, dynamic NTK,
    YaRN). It is a run-time setting for evaluation and sampling, not part of
    the trained config; ``None`` (the default) is plain RoPE.
    """

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.theta = config.rope_theta
        self.layout = config.rope_layout
        self.rotary_dim = rotary_dim(config)
        self.scaling: RopeScaling | None = None
        self.register_buffer("inv_freq", rope_inverse_frequencies(self.rotary_dim, config.rope_theta), persistent=False)

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        if scaling is not None:
            scaling.frequencies(self.rotary_dim, self.theta, scaling.original_length)  # raises for a base YaRN cannot use
        self.scaling = scaling

    def length_state(self, seq_len: int) -> object:
        if self.scaling is None or not self.scaling.depends_on_length:
            return None
        inv_freq, attention = self.frequencies(seq_len)
        return (*inv_freq.tolist(), attention)

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """Inverse frequencies float64 [rotary_dim // 2] and the attention factor for ``seq_len`` tokens."""
        if self.scaling is None:
            return self.inv_freq, 1.0
        return self.scaling.frequencies(self.rotary_dim, self.theta, seq_len)

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

    def angles(self, length: int, offset: int, device: torch.device, seq_len: int | None = None) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at positions ``offset .. offset + length - 1``.

        Each is float32 [length, rotary_dim // 2], already multiplied by the
        scaling's attention factor. ``seq_len`` is the current sequence length
        (default ``offset + length``), which only dynamic NTK reads.
        """
        inv_freq, attention = self.frequencies(offset + length if seq_len is None else seq_len)
        dtype = torch.float64 if _supports_float64(device) else torch.float32
        t = torch.arange(offset, offset + length, device=device, dtype=dtype)
        angle = torch.outer(t, inv_freq.to(device=device, dtype=dtype))
        return (angle.cos() * attention).float(), (angle.sin() * attention).float()

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q_len, k_len = q.shape[-2], k.shape[-2]
        end = offset + q_len
        span = max(q_len, k_len)
        if end - span < 0:
            raise ValueError(f"rotate: {k_len} keys ending at position {end - 1} would start before position 0")
        # One set of angles for the longer span; queries and keys both end at `end`.
        cos, sin = self.angles(span, end - span, q.device, seq_len=end)
        return self._rotate_one(q, cos[span - q_len :], sin[span - q_len :]), self._rotate_one(k, cos[span - k_len :], sin[span - k_len :])

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
    "ROPE_SCALINGS",
    "RopeScaling",
    "RopeScalingMethod",
    "dynamic_ntk",
    "linear_interpolation",
    "ntk_aware",
    "ntk_theta",
    "rope_scaling_method",
    "yarn",
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
