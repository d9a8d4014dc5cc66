"""RoPE's frequencies, and how they are stretched past the training length without training.

RoPE (:class:`octlm.model.positions.rotary.RotaryPositions`) turns channel pair ``i`` by
``t * inv_freq[i]`` at position ``t``. A model trained on ``T`` tokens has
never seen the angles of positions past ``T``; the methods here change the
frequencies (and an attention factor) so that longer sequences land on angles
it knows: linear position interpolation, NTK-aware base scaling, dynamic NTK,
YaRN and Llama 3's frequency-dependent scaling. Each method is one small function in :data:`ROPE_SCALINGS` that
returns the inverse frequencies and the attention factor, so a new method is
added in one place. A scheme says which of them it takes through
``PositionScheme.scalings()``; this module names no scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from octlm.model.positions.waves import rope_inverse_frequencies


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
        keys: the fields of :class:`RopeScaling` the method reads besides
            ``factor`` and ``original_length`` (YaRN's ramp bounds, Llama 3's
            frequency factors): what a run records and an export writes.
    """

    name: str
    frequencies: Callable[[RopeScaling, int, float, int], tuple[Tensor, float]]
    depends_on_length: bool
    keys: tuple[str, ...] = ()


#: RoPE context-extension methods by name; :func:`rope_scaling_method` adds one.
ROPE_SCALINGS: dict[str, RopeScalingMethod] = {}


def rope_scaling_method(name: str, depends_on_length: bool = False, keys: tuple[str, ...] = ()) -> Callable:
    """Decorator registering a frequency function in :data:`ROPE_SCALINGS` under ``name`` (``keys``:
    :attr:`RopeScalingMethod.keys`)."""

    def wrap(fn: Callable) -> Callable:
        ROPE_SCALINGS[name] = RopeScalingMethod(name, fn, depends_on_length, keys)
        return fn

    return wrap


@dataclass(frozen=True)
class RopeScaling:
    """How a RoPE model is run past the length it was trained on, without training.

    Attributes:
        method: a name in :data:`ROPE_SCALINGS`: ``linear``, ``ntk``,
            ``dynamic-ntk``, ``yarn`` or ``llama3``.
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
        low_freq_factor, high_freq_factor: Llama 3's bounds, in wavelengths
            per ``original_length`` (Meta's Llama 3.1 release: 1 and 4). Pairs
            whose wavelength is shorter than ``original_length / high_freq_factor``
            keep their frequency; longer than ``original_length / low_freq_factor``,
            they are divided by ``factor``.

    Raises:
        ValueError: for an unknown method, a factor below 1 or not finite, an
            ``original_length`` below 1, ``beta_fast <= beta_slow``, or
            ``high_freq_factor <= low_freq_factor`` (or either not > 0).
    """

    method: str
    factor: float
    original_length: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def __post_init__(self) -> None:
        if self.method not in ROPE_SCALINGS:
            raise ValueError(
                f"RoPE scaling method {self.method!r} is unknown; choose one of: {', '.join(ROPE_SCALINGS)}"
            )
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ValueError(
                f"RoPE scaling factor must be a finite number >= 1 (target length / training length), got {self.factor}"
            )
        if self.original_length < 1:
            raise ValueError(f"RoPE scaling original_length must be >= 1 token, got {self.original_length}")
        if not 0 < self.beta_slow < self.beta_fast:
            raise ValueError(
                f"YaRN needs 0 < beta_slow < beta_fast, got beta_slow={self.beta_slow}, beta_fast={self.beta_fast}"
            )
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError(
                "Llama 3 scaling needs 0 < low_freq_factor < high_freq_factor, "
                f"got low_freq_factor={self.low_freq_factor}, high_freq_factor={self.high_freq_factor}"
            )

    @property
    def depends_on_length(self) -> bool:
        return ROPE_SCALINGS[self.method].depends_on_length

    def frequencies(self, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
        """Inverse frequencies float64 [rotary_dim // 2] and the attention factor for a sequence of ``seq_len``
        tokens."""
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


@rope_scaling_method("yarn", keys=("beta_fast", "beta_slow"))
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


@rope_scaling_method("llama3", keys=("low_freq_factor", "high_freq_factor"))
def llama3(scaling: RopeScaling, rotary_dim: int, theta: float, seq_len: int) -> tuple[Tensor, float]:
    """Llama 3's frequency-dependent scaling (Meta's Llama 3.1, 2024; transformers' ``rope_type="llama3"``).

    With ``L = original_length`` and pair ``i``'s wavelength
    ``lambda_i = 2 pi / theta_i`` (tokens per turn): a pair with
    ``lambda_i < L / high_freq_factor`` keeps ``theta_i`` (it turns many times
    within the training length, so its angles are all known); a pair with
    ``lambda_i > L / low_freq_factor`` gets ``theta_i / s`` (position
    interpolation); in between the two blend by
    ``g = (L / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``:
    ``(1 - g) theta_i / s + g theta_i``. Like YaRN's ramp but over the
    wavelength itself, not the pair index, and without a temperature: the
    attention factor is 1.
    """
    base = rope_inverse_frequencies(rotary_dim, theta)
    length, s = scaling.original_length, scaling.factor
    turns = length * base / (2 * math.pi)  # L / lambda_i: turns of pair i over the training length
    blend = ((turns - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)).clamp(0.0, 1.0)
    # blend 1: wavelength at most L / high_freq_factor, kept; 0: at least L / low_freq_factor, interpolated.
    return blend * base + (1.0 - blend) * base / s, 1.0


class ScalableRotation:
    """The run-time half of a rotary scheme: its frequencies, stretched by a :class:`RopeScaling` or not.

    Mixed into a ``PositionScheme`` (before it) that sets ``theta``,
    ``rotary_dim``, a float64 buffer ``inv_freq`` [rotary_dim // 2] and
    ``scaling = None``. The scaling is a setting for evaluation and sampling,
    not part of the trained config; ``None`` is the plain rotation.
    """

    theta: float
    rotary_dim: int
    inv_freq: Tensor
    scaling: RopeScaling | None

    @classmethod
    def scalings(cls) -> tuple[str, ...]:
        """Every method in :data:`ROPE_SCALINGS`, read when asked, so a newly registered one applies too."""
        return tuple(ROPE_SCALINGS)

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        """Stretch the rotation past the training length; ``None`` turns it off.

        Raises:
            ValueError: when the method cannot use this ``theta`` (YaRN needs > 1).
        """
        if scaling is not None:
            # raises for a base YaRN cannot use
            scaling.frequencies(self.rotary_dim, self.theta, scaling.original_length)
        self.scaling = scaling

    def length_state(self, seq_len: int) -> object:
        """The scheme's own length state (``PositionScheme.length_state``), with the frequencies when they depend on the
        length (dynamic NTK)."""
        positions = super().length_state(seq_len)  # type: ignore[misc]  # the PositionScheme this is mixed into
        if self.scaling is None or not self.scaling.depends_on_length:
            return positions
        inv_freq, attention = self.frequencies(seq_len)
        return (positions, *inv_freq.tolist(), attention)

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """Inverse frequencies float64 [rotary_dim // 2] and the attention factor for ``seq_len`` tokens."""
        if self.scaling is None:
            return self.inv_freq, 1.0
        return self.scaling.frequencies(self.rotary_dim, self.theta, seq_len)


__all__ = [
    "ROPE_SCALINGS",
    "RopeScaling",
    "RopeScalingMethod",
    "ScalableRotation",
    "dynamic_ntk",
    "linear_interpolation",
    "llama3",
    "ntk_aware",
    "ntk_theta",
    "rope_scaling_method",
    "yarn",
]
