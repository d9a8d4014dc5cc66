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

A layout is written as one string (``--layers``, a TOML key, an old
``config.json``), one entry per layer separated by spaces, and held as data:
``DecoderConfig.layers`` is a tuple of :class:`LayerSpec`, parsed once where
the string enters (:func:`parse_layout`) and saved to ``config.json`` as a
list of objects (:func:`layer_data`)::

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

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from octlm.model.scheme_catalog import SCHEMES, reads


@dataclass(frozen=True)
class LayerSpec:
    """What one layer does with positions and attention span.

    Attributes:
        position: the layer's scheme (a name in :data:`octlm.model.positions.SCHEMES`).
        window: keys each query attends to, itself included (tokens), or
            ``None`` for global (every earlier key).
        rope_theta: the layer's RoPE base, or ``None`` for the scheme's ``rope_theta`` option.
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
    (re.compile(r"w([0-9]+(?:e[0-9]+)?)", re.ASCII), "window", lambda text: _whole(text)),
    (re.compile(r"global()"), "window", lambda _: None),
    (re.compile(r"theta(.+)"), "rope_theta", float),
    (re.compile(r"logn()"), "log_scale", lambda _: True),
    (re.compile(r"qknorm()"), "qk_norm", lambda _: True),
    (re.compile(r"noqknorm()"), "qk_norm", lambda _: False),
)
#: How the keys are spelled, for messages.
KEY_SYNTAX = "wN (a window of N tokens; w1e2 is 100), global, thetaX (RoPE base), logn, qknorm, noqknorm"
_REPEAT = re.compile(r"^(.*)\*([+-]?[0-9]+)$", re.ASCII)
#: A key that reads as a window but is none: digits with a sign or a decimal point.
_WINDOW_LIKE = re.compile(r"w[0-9e]*[-+.][-+.0-9e]*", re.ASCII)


def _whole(text: str) -> int:
    """A count written as digits, or as digits ``e`` a power of ten (``1e2`` is 100), exactly (no float between)."""
    digits, _, power = text.partition("e")
    if len(power) > 2:
        raise ValueError(f"{text}: a power of ten above 99")  # 10**10**6 would take minutes to build
    return int(digits) * 10 ** int(power or 0)


@dataclass(frozen=True)
class Entry:
    """One entry of a layout as written: ``rope/w64*3`` is ``Entry("rope/w64*3", "rope", {"window": 64}, 3)``.

    Attributes:
        written: the entry as written, ``*K`` included.
        scheme: the scheme it names, or ``None`` (it takes ``--position``).
        keys: the :class:`LayerSpec` fields its keys set.
        repeat: how many consecutive layers it stands for.
    """

    written: str
    scheme: str | None
    keys: Mapping[str, object]
    repeat: int


def acts_per_layer(cls: type) -> bool:
    """Whether a scheme can be one layer's: it acts inside attention and leaves the embedding alone.

    That is, its ``embed`` is the one of the root scheme class (the first in
    its MRO to define it), which returns the token vectors unchanged.
    """
    root = next(c for c in reversed(cls.__mro__) if "embed" in vars(c))
    return cls.embed is root.embed


def per_layer_schemes() -> list[str]:
    """Names of the registered schemes a layout may give a layer, sorted."""
    return sorted(name for name, cls in SCHEMES.items() if acts_per_layer(cls))


def read_entries(text: str) -> list[Entry]:
    """The entries of layout ``text``, read but not yet checked against a model (the one reader of a layout).

    Raises:
        LayoutError: naming the entry, for an empty part between '/', a key
            that is unknown or a scheme after the first part, or a repeat
            below 1.
    """
    entries: list[Entry] = []
    for written in text.split():
        layer = 1 + sum(e.repeat for e in entries)
        entry, repeat = written, 1
        if match := _REPEAT.match(written):
            entry, repeat = match.group(1), int(match.group(2))
            if repeat < 1:
                raise LayoutError(f" entry {entry}*{repeat}: a repeat must be at least 1")
        head, *keys = entry.split("/")
        where = f" layer {layer} ({entry!r})"
        if "" in (head, *keys):
            raise LayoutError(f"{where}: an empty part between '/'; write SCHEME/KEY/KEY, e.g. rope/w64")
        scheme = head if head in SCHEMES else None
        values = dict(_key(key, where) for key in (keys if scheme else [head, *keys]))
        entries.append(Entry(written, scheme, values, repeat))
    return entries


def _key(key: str, where: str) -> tuple[str, object]:
    for pattern, field, read in KEYS:
        if match := pattern.fullmatch(key):
            try:
                return field, read(match.group(1))
            except (ValueError, OverflowError):
                break
    if _WINDOW_LIKE.fullmatch(key):  # w-4, w4.5, w+8: a window, miswritten
        raise LayoutError(f"{where}: {key!r}: a window is wN, N a whole number of tokens (w64, w1e2), or global")
    known = "" if key in SCHEMES else f"; schemes are {', '.join(per_layer_schemes())}; keys are {KEY_SYNTAX}"
    place = f"; a scheme comes first in an entry ({key}/...)" if key in SCHEMES else known
    raise LayoutError(f"{where}: {key!r} is not a scheme or key here{place}")


def parse_layout(
    text: str, *, n_layers: int, position: str, context_length: int, randomize_positions: int = 1
) -> tuple[LayerSpec, ...]:
    """The layers of layout ``text``, one :class:`LayerSpec` per layer; ``()`` for the empty layout.

    An entry without a scheme takes ``position``; the model's ``n_layers``,
    ``context_length`` and ``randomize_positions`` bound the rest.

    Raises:
        LayoutError: naming the layer and the fix, when an entry names an
            unknown scheme or one that does not act per layer, a key is
            unknown, a window is below 1 or wider than ``context_length``, a
            RoPE base is not positive or is given to a scheme without one, a
            repeat is below 1, the entries do not add up to ``n_layers``,
            ``position`` (taken by entries without a scheme) does not act per
            layer, or the layout meets randomized positions.
    """
    specs: list[LayerSpec] = []
    for entry in read_entries(text):
        scheme = entry.scheme or position
        where = f" layer {len(specs) + 1} ({_unrepeated(entry)!r})"
        if not acts_per_layer(SCHEMES[scheme]):
            named = entry.scheme is not None
            fix = "" if named else f"; start the entry with one (rope/{_unrepeated(entry)}) or give --position rope"
            said = "" if named else " (--position, taken by an entry without a scheme)"
            raise LayoutError(
                f"{where}: {scheme}{said} adds its signal to the embedding, not inside one layer; "
                f"a layer may carry {', '.join(per_layer_schemes())}{fix}"
            )
        spec = replace(LayerSpec(scheme), **entry.keys)
        check_spec(spec, where, context_length)
        if len(specs) + entry.repeat > n_layers:  # before the list is made: *10**20 must not fill memory
            raise LayoutError(
                f" entry {_unrepeated(entry)}*{entry.repeat} reaches past --n-layers {n_layers}; give one entry per "
                "layer (an entry ending in *K counts K), or set --n-layers to match"
            )
        specs.extend([spec] * entry.repeat)
    return check_layers(tuple(specs), n_layers, randomize_positions)


def _unrepeated(entry: Entry) -> str:
    return entry.written[: entry.written.rindex("*")] if _REPEAT.match(entry.written) else entry.written


def check_layers(specs: tuple[LayerSpec, ...], n_layers: int, randomize_positions: int) -> tuple[LayerSpec, ...]:
    """``specs`` when they fit a model of ``n_layers`` without randomized positions (``()`` always does).

    Raises:
        LayoutError: when they do not add up to ``n_layers``, or meet randomized positions.
    """
    if specs and len(specs) != n_layers:
        raise LayoutError(
            f" gives {len(specs)} layer(s) but --n-layers is {n_layers}; give one entry per layer "
            "(an entry ending in *K counts K), or set --n-layers to match"
        )
    if specs and randomize_positions > 1:
        raise LayoutError(
            f" with --randomize-positions {randomize_positions}: each layer would draw its own positions; "
            "drop one of them"
        )
    return specs


def check_spec(spec: LayerSpec, where: str, context_length: int) -> None:
    """Refuse a layer whose scheme is unknown or cannot take its keys, or whose window or RoPE base cannot work.

    Raises:
        LayoutError: starting with ``where`` (`` layer 2 ('rope/w0')``), naming the fix.
    """
    if spec.position not in SCHEMES:
        raise LayoutError(
            f"{where}: {spec.position!r} is not a scheme; a layer may carry {', '.join(per_layer_schemes())}"
        )
    if spec.window is not None and spec.window < 1:
        raise LayoutError(f"{where}: a window of {spec.window} tokens sees nothing; give w1 or more, or global")
    if spec.window is not None and spec.window > context_length:
        raise LayoutError(
            f"{where}: a window of {spec.window} tokens is wider than the {context_length} tokens the model "
            f"trains on, so training never meets it; give w{context_length} or less, or global"
        )
    if spec.rope_theta is not None:
        if "rope_theta" not in reads(SCHEMES[spec.position]):
            takers = ", ".join(n for n, c in SCHEMES.items() if "rope_theta" in reads(c))
            raise LayoutError(f"{where}: {spec.position} has no RoPE base; theta goes with {takers}")
        if not 0 < spec.rope_theta < float("inf"):
            raise LayoutError(f"{where}: a RoPE base must be a positive number, got {spec.rope_theta:g}")


def entry_text(spec: LayerSpec) -> str:
    """One layer written as a layout entry: ``rope/w64/theta500000``."""
    keys = [] if spec.window is None else [f"w{spec.window}"]
    keys += [] if spec.rope_theta is None else [f"theta{spec.rope_theta:g}"]
    keys += ["logn"] if spec.log_scale else []
    keys += [] if spec.qk_norm is None else ["qknorm" if spec.qk_norm else "noqknorm"]
    return "/".join([spec.position, *keys])


def layout_text(specs: Sequence[LayerSpec]) -> str:
    """The layout ``specs`` written as ``--layers`` takes it, equal neighbours as ``*K``: ``rope/w64*3 none``;
    ``""`` for none. :func:`parse_layout` reads it back to ``specs``. A string (a layout not yet parsed) is its own
    text."""
    if isinstance(specs, str):
        return specs
    runs: list[list] = []
    for spec in specs:
        if runs and runs[-1][0] == spec:
            runs[-1][1] += 1
        else:
            runs.append([spec, 1])
    return " ".join(entry_text(spec) + (f"*{count}" if count > 1 else "") for spec, count in runs)


def layer_data(specs: Sequence[LayerSpec]) -> list[dict]:
    """The layout as ``config.json`` keeps it: one object per layer, every :class:`LayerSpec` field."""
    return [dataclasses.asdict(spec) for spec in specs]


def layers_given(value: object, **shape) -> tuple[LayerSpec, ...]:
    """The layers of ``value`` as any edge gives them: a layout string, or a sequence of :class:`LayerSpec` or of
    their objects from ``config.json`` (:func:`layer_data`). ``shape``: :func:`parse_layout`'s keywords.

    Raises:
        LayoutError: for anything else, or layers that cannot work in that shape.
    """
    if isinstance(value, str):
        return parse_layout(value.strip(), **shape)
    if not isinstance(value, (list, tuple)):
        raise LayoutError(f"={value!r} must be a string such as 'rope/w64*3 none'")
    known = {f.name for f in dataclasses.fields(LayerSpec)}
    specs = []
    for layer, item in enumerate(value, 1):
        if isinstance(item, Mapping) and set(item) <= known and "position" in item:
            item = LayerSpec(**item)
        if not isinstance(item, LayerSpec):
            raise LayoutError(f"={value!r} must be a string such as 'rope/w64*3 none'")
        where = f" layer {layer} ({entry_text(item)!r})"
        check_spec(item, where, shape["context_length"])
        if not acts_per_layer(SCHEMES[item.position]):
            raise LayoutError(
                f"{where}: {item.position} adds its signal to the embedding, not inside one layer; a layer may carry "
                f"{', '.join(per_layer_schemes())}"
            )
        specs.append(item)
    return check_layers(tuple(specs), shape["n_layers"], shape.get("randomize_positions", 1))


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


__all__ = [
    "KEYS",
    "Entry",
    "LayerSpec",
    "LayoutError",
    "acts_per_layer",
    "describe",
    "layer_data",
    "layers_given",
    "layout_text",
    "parse_layout",
    "read_entries",
]
