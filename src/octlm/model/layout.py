"""A layer layout: each layer's position scheme, attention window, RoPE base, query scale and QK-norm.

Today's decoders mix position schemes and attention spans by layer: Llama 4
("iRoPE": every fourth layer without positions, attending globally, its
queries scaled with the log of the position), SmolLM3 (no RoPE in every
fourth layer, ``no_rope_layers``), Gemma 3 (five sliding-window layers with
RoPE base 10,000 to one global layer with base 1,000,000), GPT-OSS (128-token
windows alternating with dense layers) and Yang et al. 2025 ("Rope to Nope and
Back Again", arXiv 2501.18795: windowed RoPE layers with global NoPE layers).
transformers carries the same idea as per-layer data (``layer_types``,
``sliding_window``, ``no_rope_layers``).

Here a layout is one string, ``DecoderConfig.layers`` (``--layers``), one
entry per layer separated by spaces::

    rope/w64*3 none            # 3 RoPE layers with 64-token windows, then a global NoPE layer
    w64*5 global/theta1e6      # (with --position rope) Gemma 3's 5:1, two bases

An entry is ``[SCHEME][/KEY...][*REPEAT]``: a registered scheme that acts
inside attention (it leaves the embedding alone; the learned table and the
sinusoidal waves do not, and are refused by name), then any of the keys in
:data:`KEYS`, then how many consecutive layers it stands for. An entry
without a scheme takes ``DecoderConfig.position``. The empty layout means
what octlm always built: one scheme in every layer, global.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from octlm.model import positions
from octlm.model.positions.base import PositionScheme

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


@dataclass(frozen=True)
class LayerSpec:
    """What one layer does with positions and attention span.

    Attributes:
        position: the layer's scheme (a name in :data:`octlm.model.positions.SCHEMES`).
        window: keys each query attends to, itself included (tokens), or
            ``None`` for global (every earlier key).
        rope_theta: the layer's RoPE base, or ``None`` for ``DecoderConfig.rope_theta``.
        log_scale: the layer's queries are scaled by ``max(1, log n / log T)``
            (:func:`octlm.model.attention_recipes.log_length_scale`) whatever
            ``attention_scale`` says, as Llama 4 does on its NoPE layers.
        qk_norm: RMSNorm on the layer's queries and keys (``None``: ``DecoderConfig.qk_norm``).
    """

    position: str
    window: int | None = None
    rope_theta: float | None = None
    log_scale: bool = False
    qk_norm: bool | None = None


class LayoutError(ValueError):
    """A layout that cannot work. The message names the layer (1-based) and the fix, and is written to follow the
    option's name (``--layers`` or ``DecoderConfig.layers``): it begins with a space."""


#: The keys an entry may carry after its scheme: a pattern, the LayerSpec field it sets, and how its text becomes the
#: value. Data, so that a new per-layer choice is one row here and one field of LayerSpec.
KEYS: tuple[tuple[re.Pattern, str, Callable[[str], object]], ...] = (
    (re.compile(r"w([0-9]+)", re.ASCII), "window", int),
    (re.compile(r"global()"), "window", lambda _: None),
    (re.compile(r"theta(.+)"), "rope_theta", float),
    (re.compile(r"logn()"), "log_scale", lambda _: True),
    (re.compile(r"qknorm()"), "qk_norm", lambda _: True),
    (re.compile(r"noqknorm()"), "qk_norm", lambda _: False),
)
#: How the keys are spelled, for messages.
KEY_SYNTAX = "wN (a window of N tokens), global, thetaX (RoPE base), logn, qknorm, noqknorm"
_REPEAT = re.compile(r"^(.*)\*([+-]?[0-9]+)$", re.ASCII)


def acts_per_layer(cls: type[PositionScheme]) -> bool:
    """Whether a scheme can be one layer's: it acts inside attention and leaves the embedding alone."""
    return cls.embed is PositionScheme.embed


def per_layer_schemes() -> list[str]:
    """Names of the registered schemes a layout may give a layer, sorted."""
    return sorted(name for name, cls in positions.SCHEMES.items() if acts_per_layer(cls))


def parse_layout(config: DecoderConfig) -> tuple[LayerSpec, ...]:
    """The layers of ``config.layers``, one :class:`LayerSpec` per layer; ``()`` for the empty layout.

    Raises:
        LayoutError: naming the layer and the fix, when an entry names an
            unknown scheme or one that does not act per layer, a key is
            unknown, a window is below 1 or wider than ``context_length``, a
            RoPE base is not positive or is given to a scheme without one, a
            repeat is below 1, the entries do not add up to ``n_layers``,
            ``position`` (taken by entries without a scheme) does not act per
            layer, or the layout meets randomized positions.
    """
    if not isinstance(config.layers, str):
        raise LayoutError(f"={config.layers!r} must be a string such as 'rope/w64*3 none'")
    text = config.layers.strip()
    if not text:
        return ()
    specs: list[LayerSpec] = []
    for entry in text.split():
        repeat = 1
        if match := _REPEAT.match(entry):
            entry, repeat = match.group(1), int(match.group(2))
            if repeat < 1:
                raise LayoutError(f" entry {entry}*{repeat}: a repeat must be at least 1")
        spec = _entry(entry, len(specs) + 1, config)
        if len(specs) + repeat > config.n_layers:  # before the list is made: *10**20 must not fill memory
            raise LayoutError(
                f" entry {entry}*{repeat} reaches past --n-layers {config.n_layers}; give one entry per layer (an "
                "entry ending in *K counts K), or set --n-layers to match"
            )
        specs.extend([spec] * repeat)
    if len(specs) != config.n_layers:
        raise LayoutError(
            f" gives {len(specs)} layer(s) but --n-layers is {config.n_layers}; give one entry per layer "
            "(an entry ending in *K counts K), or set --n-layers to match"
        )
    if config.randomize_positions > 1:
        raise LayoutError(
            f" with --randomize-positions {config.randomize_positions}: each layer would draw its own positions; "
            "drop one of them"
        )
    return tuple(specs)


def _entry(entry: str, layer: int, config: DecoderConfig) -> LayerSpec:
    head, *keys = entry.split("/")
    where = f" layer {layer} ({entry!r})"
    if "" in (head, *keys):
        raise LayoutError(f"{where}: an empty part between '/'; write SCHEME/KEY/KEY, e.g. rope/w64")
    if head in positions.SCHEMES:
        scheme = head
    else:
        scheme, keys = config.position, [head, *keys]
    if not acts_per_layer(positions.SCHEMES[scheme]):
        fix = "" if head == scheme else f"; start the entry with one (rope/{entry}) or give --position rope"
        said = "" if head == scheme else " (--position, taken by an entry without a scheme)"
        raise LayoutError(
            f"{where}: {scheme}{said} adds its signal to the embedding, not inside one layer; "
            f"a layer may carry {', '.join(per_layer_schemes())}{fix}"
        )
    values: dict[str, object] = {}
    for key in filter(None, keys):
        field, value = _key(key, where, scheme)
        values[field] = value
    spec = replace(LayerSpec(scheme), **values)
    _check_spec(spec, where, config)
    return spec


def _key(key: str, where: str, scheme: str) -> tuple[str, object]:
    for pattern, field, read in KEYS:
        if match := pattern.fullmatch(key):
            try:
                return field, read(match.group(1))
            except (ValueError, OverflowError):
                break
    known = "" if key in positions.SCHEMES else f"; keys are {KEY_SYNTAX}"
    place = f"; a scheme comes first in an entry ({key}/...)" if key in positions.SCHEMES else known
    raise LayoutError(f"{where}: {key!r} is not a scheme or key here{place}")


def _check_spec(spec: LayerSpec, where: str, config: DecoderConfig) -> None:
    if spec.window is not None and spec.window < 1:
        raise LayoutError(f"{where}: a window of {spec.window} tokens sees nothing; give w1 or more, or global")
    if spec.window is not None and spec.window > config.context_length:
        raise LayoutError(
            f"{where}: a window of {spec.window} tokens is wider than the {config.context_length} tokens the model "
            f"trains on, so training never meets it; give w{config.context_length} or less, or global"
        )
    if spec.rope_theta is not None:
        if "rope_theta" not in positions.SCHEMES[spec.position].reads:
            takers = ", ".join(n for n, c in positions.SCHEMES.items() if "rope_theta" in c.reads)
            raise LayoutError(f"{where}: {spec.position} has no RoPE base; theta goes with {takers}")
        if not 0 < spec.rope_theta < float("inf"):
            raise LayoutError(f"{where}: a RoPE base must be a positive number, got {spec.rope_theta:g}")


def layer_config(config: DecoderConfig, spec: LayerSpec) -> DecoderConfig:
    """The one-scheme config a layer's scheme is built from: ``config`` with the layer's scheme and RoPE base."""
    changes: dict[str, object] = {"position": spec.position, "layers": ""}
    if spec.rope_theta is not None:
        changes["rope_theta"] = spec.rope_theta
    return replace(config, **changes)


def describe(specs: tuple[LayerSpec, ...]) -> list[str]:
    """One short line per layer for people: ``rope, window 64``, ``none, global, log-scaled queries``."""
    lines = []
    for spec in specs:
        parts = [spec.position, "global" if spec.window is None else f"window {spec.window}"]
        if spec.rope_theta is not None:
            parts.append(f"base {spec.rope_theta:g}")
        if spec.log_scale:
            parts.append("log-scaled queries")
        if spec.qk_norm is not None:
            parts.append("QK-norm" if spec.qk_norm else "no QK-norm")
        lines.append(", ".join(parts))
    return lines


__all__ = ["KEYS", "LayerSpec", "LayoutError", "acts_per_layer", "describe", "layer_config", "parse_layout"]
