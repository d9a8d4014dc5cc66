"""Which transformers architecture carries a decoder with Llama's block (``block="llama"``), and what none carries.

Three architectures have octlm's Llama block (RMSNorm with eps 1e-6, a
SwiGLU MLP, no biases, a tied head) and differ in what else a layer does:

==============================================  ==========================  =======================
octlm                                           transformers                loads with transformers
==============================================  ==========================  =======================
RoPE in every layer, global, no QK-norm         ``LlamaForCausalLM``        4.45 and newer
layers of RoPE and NoPE (``none``), any of      ``SmolLM3ForCausalLM``      4.53 (SmolLM3's first)
them windowed (one window size), no QK-norm     (``no_rope_layers``,        and newer
                                                ``layer_types``)
QK-norm in every layer, RoPE in every layer,    ``Qwen3ForCausalLM``        4.53 and newer
any of them windowed (one window size)          (``q_norm``, ``k_norm``,
                                                ``layer_types``)
==============================================  ==========================  =======================

(checked: 4.45.0 for Llama, 4.53.0, 4.57.1 and 5.24.0 for all three, logits
and greedy tokens against octlm's; tests/test_hf_hybrid.py.) A plain RoPE
model goes to Llama, not SmolLM3, which computes it alike: Llama loads in
every transformers from 4.45 on and in the tools that know no SmolLM3.

Everything else is refused by name (:func:`refusal`), because no transformers
architecture computes it alike: a scheme other than RoPE or NoPE, RoPE bases
that differ by layer (Gemma 3 has two, but a block of its own), log-scaled
queries (Llama 4's temperature tuning is another formula), windows of more
than one size, QK-norm on some layers only or beside NoPE layers, and a RoPE
that turns part of each head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from octlm.export.hf_common import InteropError
from octlm.export.hf_neox import MODEL_TYPE as NEOX
from octlm.export.hf_neox_rope import neox_rotation, rotates
from octlm.model import DecoderConfig
from octlm.model.layout import LayerSpec, layout_text
from octlm.model.positions import facts_of

LLAMA, SMOLLM3, QWEN3 = "llama", "smollm3", "qwen3"
#: What octlm calls the architectures in messages.
NAMES = "Llama, SmolLM3 and Qwen3"


@dataclass(frozen=True)
class FamilyPlan:
    """How a Llama-block decoder is written: the architecture and what each layer does there.

    Attributes:
        model_type: ``llama``, ``smollm3`` or ``qwen3``.
        rotary: per layer, whether it turns queries and keys (RoPE) or not (NoPE).
        windowed: per layer, whether it attends to a sliding window.
        window: the window (keys each query sees, itself included; tokens), or ``None``.
        qk_norm: whether every layer normalizes queries and keys (Qwen3).
        rope: the one-scheme config of the RoPE layers (their scheme and base), from which the
            rotation and a RoPE scaling are written; ``config`` itself when no layer turns.
    """

    model_type: str
    rotary: tuple[bool, ...]
    windowed: tuple[bool, ...]
    window: int | None
    qk_norm: bool
    rope: DecoderConfig


def held(position: str) -> bool:
    """Whether these architectures can hold a layer of the scheme: the ones GPT-NeoX holds (``hf_model_type``), which
    rotate queries and keys with ``rotate_half`` or leave them alone; :func:`_partial` checks the rotation is whole."""
    return facts_of(position).hf_model_type == NEOX


def layer_rows(config: DecoderConfig) -> list[LayerSpec]:
    """Each layer's spec with the config's defaults filled in: the RoPE base of a rotating layer and QK-norm."""
    specs = config.layers or (LayerSpec(config.position),) * config.n_layers
    return [
        replace(
            spec,
            rope_theta=(config.rope_theta if spec.rope_theta is None else spec.rope_theta)
            if held(spec.position) and rotates(spec.position)
            else None,
            qk_norm=config.qk_norm if spec.qk_norm is None else spec.qk_norm,
        )
        for spec in specs
    ]


def _where(layers: list[int]) -> str:
    """``layer 3`` or ``layers 1, 2, 4`` (1-based)."""
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(str(i + 1) for i in layers)


def _by_value(rows: list[LayerSpec], field: str) -> dict[object, list[int]]:
    """The layers (0-based) holding each value of ``field``, in the order values first appear."""
    groups: dict[object, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(getattr(row, field), []).append(i)
    return groups


def _schemes(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    odd = {p: ls for p, ls in _by_value(rows, "position").items() if not held(p)}
    if not odd:
        return None
    scheme, layers = next(iter(odd.items()))
    said = (
        f"position={scheme!r}"
        if not config.layers
        else f"{_where(layers)} of layers={layout_text(config.layers)!r}: {scheme}"
    )
    return (
        f"{said} in Llama's block (block='llama'): transformers' {NAMES} turn a layer's queries and keys with RoPE "
        f"or (SmolLM3) leave them without positions; export takes block='llama' runs of rope and none layers"
    )


def _partial(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    for row in rows:
        if rotates(row.position) and neox_rotation(config.layer_config(row))[0] != config.head_dim:
            turned = neox_rotation(config.layer_config(row))[0]
            return (
                f"{row.position} with partial_rotary_factor={config.partial_rotary_factor} turns {turned} of the "
                f"{config.head_dim} channels of each head: transformers' {NAMES} turn all of them (GPT-NeoX, which "
                "turns part of a head, has GPT-2's block)"
            )
    return None


def _log_scaled(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    layers = [i for i, row in enumerate(rows) if row.log_scale]
    if not layers:
        return None
    return (
        f"logn on {_where(layers)}: octlm scales those queries by max(1, log n / log T); Llama 4 scales its NoPE "
        "layers' queries by 1 + attn_scale * log(1 + floor(n / floor_scale)), another formula, and no other "
        "transformers architecture scales them"
    )


def _bases(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    bases = {theta: ls for theta, ls in _by_value(rows, "rope_theta").items() if theta is not None}
    if len(bases) < 2:
        return None
    said = "; ".join(f"{theta:g} on {_where(layers)}" for theta, layers in bases.items())
    return (
        f"RoPE bases that differ by layer ({said}): transformers' {NAMES} turn every RoPE layer at one base; Gemma 3 "
        "has two, but its block adds norms after attention and the MLP, a GELU-gated MLP and an embedding scaled by "
        "sqrt(d_model), which octlm's does not"
    )


def _windows(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    windows = {w: ls for w, ls in _by_value(rows, "window").items() if w is not None}
    if len(windows) < 2:
        return None
    said = "; ".join(f"{w} tokens on {_where(layers)}" for w, layers in windows.items())
    return (
        f"windows of more than one size ({said}): transformers' sliding_window is one size for every sliding layer "
        "(SmolLM3, Qwen3, Mistral, Gemma 3)"
    )


def _qk_norm(config: DecoderConfig, rows: list[LayerSpec]) -> str | None:
    normed = [i for i, row in enumerate(rows) if row.qk_norm]
    if not normed:
        return None
    if len(normed) < len(rows):
        return (
            f"QK-norm on {_where(normed)} only: Qwen3 normalizes the queries and keys of every layer, "
            "Llama and SmolLM3 of none"
        )
    nope = [i for i, row in enumerate(rows) if not rotates(row.position)]
    if nope:
        return (
            f"QK-norm with NoPE on {_where(nope)}: Qwen3 has QK-norm but turns every layer with RoPE, SmolLM3 has "
            "NoPE layers but no QK-norm"
        )
    return None


#: The checks, each returning why no architecture carries a config, or ``None``; the first that speaks is said.
CHECKS: tuple[Callable[[DecoderConfig, list[LayerSpec]], str | None], ...] = (
    _schemes,
    _partial,
    _log_scaled,
    _bases,
    _windows,
    _qk_norm,
)


def refusal(config: DecoderConfig) -> str | None:
    """Why no transformers architecture computes ``config`` (a Llama-block decoder) alike, or ``None``."""
    rows = layer_rows(config)
    return next((why for check in CHECKS if (why := check(config, rows))), None)


def plan_family(config: DecoderConfig) -> FamilyPlan:
    """The architecture and per-layer settings that carry a ``block="llama"`` decoder.

    Raises:
        InteropError: naming what no architecture carries (:func:`refusal`).
    """
    why = refusal(config)
    if why:
        raise InteropError(f"{why}; octlm cannot export this run to a transformers architecture that computes it alike")
    rows = layer_rows(config)
    rotary = tuple(rotates(row.position) for row in rows)
    windowed = tuple(row.window is not None for row in rows)
    qk_norm = rows[0].qk_norm
    if qk_norm:
        model_type = QWEN3
    elif all(rotary) and not any(windowed):
        model_type = LLAMA
    else:
        model_type = SMOLLM3
    first_rope = next((row for row in rows if rotates(row.position)), None)
    rope = config if first_rope is None else config.layer_config(first_rope)
    window = next((row.window for row in rows if row.window is not None), None)
    return FamilyPlan(model_type, rotary, windowed, window, bool(qk_norm), rope)


__all__ = ["LLAMA", "QWEN3", "SMOLLM3", "FamilyPlan", "layer_rows", "plan_family", "refusal"]
