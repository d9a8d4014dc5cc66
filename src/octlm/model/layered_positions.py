"""The position scheme of a model with a layer layout: one scheme per layer, asked as one.

:class:`LayeredPositions` holds one instance of each distinct (scheme, RoPE
base) the layout names (:mod:`octlm.model.layout`), shared by the layers that
name it, so a layer's parameters (KERPLE's, CoPE's) are indexed by the
layer as in a one-scheme model. The decoder hands each block its own scheme
(:meth:`for_layer`); the questions the rest of octlm asks of a model's scheme
(its label, maximum length, RoPE scalings, cache state) are answered for all
of them together.

A RoPE scaling acts on global layers only: a window layer whose window fits
the length trained on never meets a distance it did not train on, so it
keeps its trained rotation (as Gemma 3 leaves its local layers unscaled). Its
layers get an unscaled copy of their scheme (:attr:`LayeredPositions.unscaled`,
built only for schemes that take scalings and keep no weights, so the
parameters and ``state_dict`` of a layout stay as they were).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.model import positions
from octlm.model.band import window_score_cells
from octlm.model.layout import LayerSpec, describe
from octlm.model.positions.base import SCORE_BIAS_BYTES, PositionScheme
from octlm.model.positions.facts import SchemeFacts, facts_of

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.positions.rope_scaling import RopeScaling


class LayeredPositions(PositionScheme):
    """Each layer's scheme of a layout; the embedding gets nothing (every layer's scheme acts inside attention).

    Attributes:
        schemes: the distinct schemes, ``nn.ModuleList``.
        specs: the layout, one :class:`~octlm.model.layout.LayerSpec` per layer.
    """

    name = "layout"

    def __init__(self, config: DecoderConfig, specs: tuple[LayerSpec, ...]) -> None:
        super().__init__(config)
        keys: list[tuple[str, float | None]] = []
        for spec in specs:
            if (spec.position, spec.rope_theta) not in keys:
                keys.append((spec.position, spec.rope_theta))
        self.schemes = nn.ModuleList(
            positions.build(config.layer_config(LayerSpec(key[0], rope_theta=key[1]))) for key in keys
        )
        self.specs = specs
        self._index = [keys.index((spec.position, spec.rope_theta)) for spec in specs]
        self.unscaled, self._unscaled_of = _unscaled_copies(config, specs, self._index, self.schemes)
        records = [facts_of(scheme) for scheme in self.schemes]
        # A layout is no registered scheme: its record is its layers', as one.
        self.facts = SchemeFacts(
            label="layout: " + "; ".join(describe(specs)),
            description="a scheme per layer (--layers)",
            evicts_cache=all(record.evicts_cache for record in records),
            eviction_refusal=next((r.eviction_refusal for r in records if not r.evicts_cache), ""),
            explorer_vectors=_no_vectors,
            explorer_note=(
                "This run has a layer layout; every layer's scheme acts inside attention, so no position vectors."
            ),
        )

    def for_layer(self, layer: int) -> PositionScheme:
        """The scheme of layer ``layer`` (0-based): under a RoPE scaling, a window layer whose window fits the length
        trained on gets its unscaled copy."""
        scheme = self.schemes[self._index[layer]]
        scaling = getattr(scheme, "scaling", None)
        if scaling is not None and layer in self._unscaled_of and self.specs[layer].window <= scaling.original_length:
            return self.unscaled[self._unscaled_of[layer]]
        return scheme

    def _every_scheme(self) -> list[PositionScheme]:
        return [*self.schemes, *self.unscaled]

    def start_pass(self, length: int, offset: int, cached: bool) -> None:
        super().start_pass(length, offset, cached)
        for scheme in self._every_scheme():
            scheme.start_pass(length, offset, cached)

    def end_pass(self) -> None:
        super().end_pass()
        for scheme in self._every_scheme():
            scheme.end_pass()

    def place_documents(self, positions: Tensor) -> None:
        for scheme in self._every_scheme():
            scheme.place_documents(positions)

    @property
    def max_length(self) -> int | None:
        limits = [scheme.max_length for scheme in self.schemes if scheme.max_length is not None]
        return min(limits) if limits else None

    def scalings(self) -> tuple[str, ...]:  # type: ignore[override]  # an instance's: its layers' schemes decide
        """The RoPE scalings any layer's scheme takes; :meth:`set_rope_scaling` sets them on those layers alone."""
        return tuple(dict.fromkeys(method for scheme in self.schemes for method in scheme.scalings()))

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        """Scale the layers whose scheme takes ``scaling``'s method (``None``: unscale every layer that takes one);
        the rest keep theirs (a scheme without scalings, NoPE's, has nothing to set), and so do window layers whose
        window fits ``scaling.original_length`` (:meth:`for_layer`).

        Raises:
            ValueError: when no layer would be scaled: every layer that takes the method has such a window.
        """
        if scaling is not None and not any(
            scaling.method in self.schemes[self._index[i]].scalings()
            and (spec.window is None or spec.window > scaling.original_length or i not in self._unscaled_of)
            for i, spec in enumerate(self.specs)
        ):
            raise ValueError(
                f"every layer that takes {scaling.method} has a window within the {scaling.original_length} tokens "
                "trained on, which a scaling leaves alone (it never meets a longer distance); drop the scaling"
            )
        for scheme in self.schemes:
            if scheme.scalings() and (scaling is None or scaling.method in scheme.scalings()):
                scheme.set_rope_scaling(scaling)

    @property
    def scaling(self) -> RopeScaling | None:
        """The RoPE scaling the layers run under, or ``None``."""
        return next((s.scaling for s in self.schemes if getattr(s, "scaling", None) is not None), None)

    def length_state(self, seq_len: int) -> object:
        states = tuple(scheme.length_state(seq_len) for scheme in self.schemes)
        return None if all(state is None for state in states) else states

    def attention_bias(self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0, *, seen=None) -> Tensor | None:
        handed = {} if seen is None else {"seen": seen}
        return self.for_layer(layer).attention_bias(q, k, offset, layer, **handed)

    def read_input(self, x: Tensor, layer: int = 0, cache=None) -> object:
        return self.for_layer(layer).read_input(x, layer, cache)

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """The largest layer's: a global layer's scheme's bias; a window layer's scores, a float mask beside them
        even without a bias, of one block when it attends block by block (:func:`~octlm.model.band.window_score_cells`)
        and of the whole ``length**2`` when its scheme forms its own weights or reads the input (stick-breaking, FoX,
        PaTH keep the whole matrix)."""
        need = 0
        for layer, spec in enumerate(self.specs):
            scheme = self.for_layer(layer)
            if spec.window is None:
                need = max(need, scheme.score_bias_bytes(n_heads, length))
                continue
            whole = scheme.attends or type(scheme).read_input is not PositionScheme.read_input
            cells = length**2 if whole else window_score_cells(length, spec.window)
            need = max(need, SCORE_BIAS_BYTES * n_heads * cells)
        return need

    def extra_repr(self) -> str:
        return "\n".join(f"layer {i}: {line}" for i, line in enumerate(describe(self.specs)))


def _unscaled_copies(
    config: DecoderConfig, specs: tuple[LayerSpec, ...], index: list[int], schemes: nn.ModuleList
) -> tuple[nn.ModuleList, dict[int, int]]:
    """An unscaled copy of each scheme a window layer shares, when it takes RoPE scalings and keeps no weights
    (its ``state_dict`` is empty), and ``{layer: copy}`` for the window layers; built under a forked generator, so
    the model's random start is the one it had without them."""
    copies: list[PositionScheme] = []
    of_scheme: dict[int, int] = {}
    of_layer: dict[int, int] = {}
    with torch.random.fork_rng(devices=[]):
        for layer, spec in enumerate(specs):
            shared = schemes[index[layer]]
            if spec.window is None or not shared.scalings() or shared.state_dict():
                continue
            if index[layer] not in of_scheme:
                of_scheme[index[layer]] = len(copies)
                copies.append(
                    positions.build(config.layer_config(LayerSpec(spec.position, rope_theta=spec.rope_theta)))
                )
            of_layer[layer] = of_scheme[index[layer]]
    return nn.ModuleList(copies), of_layer


def _no_vectors(scheme: PositionScheme, added: Tensor | None, length: int) -> None:
    # Every layer's scheme of a layout acts inside attention: there are no rows to show.
    return None


def build_positions(config: DecoderConfig) -> PositionScheme:
    """The scheme a decoder holds: ``config.position``'s without a layout, :class:`LayeredPositions` with one."""
    return LayeredPositions(config, config.layers) if config.layers else positions.build(config)


__all__ = ["LayeredPositions", "build_positions"]
