"""GPT-NeoX's rotation and RoPE settings: which channels turn at what base, and the RoPE scaling, both ways.

A scheme that turns only its ``k`` fastest pairs is GPT-NeoX partial rotary
over ``2k`` channels at a base of its own (:func:`neox_rotation`). A RoPE
scaling, a run-time setting in octlm, becomes transformers' ``rope_type`` of
the same name (linear, yarn, llama3) or a larger ``rope_theta`` (ntk);
dynamic-ntk is refused (:data:`REFUSED_SCALINGS`).

Each RoPE setting is written in both spellings transformers reads: version 5
reads ``rope_parameters`` (and ``rope_scaling`` over it, when set); version 4
(4.45 to 4.57) knows no ``rope_parameters`` and reads ``rotary_pct``,
``rotary_emb_base`` and ``rope_scaling``, loading 0.25 and 10000 where they
are missing (see :func:`transformers4_rope`). Import reads either spelling
(:func:`import_rope`).
"""

from __future__ import annotations

from pathlib import Path

from octlm.export.hf_common import InteropError
from octlm.model import DecoderConfig
from octlm.model.positions import ROPE_SCALINGS, SCHEMES, PositionScheme, RopeScaling, rotary_dim
from octlm.model.positions.rope_scaling import ntk_theta

#: octlm RoPE scalings that transformers computes under a ``rope_type`` of the same name, from the same keys.
_SAME_TYPE = ("yarn", "llama3")

#: octlm RoPE scalings transformers cannot compute alike, and why.
REFUSED_SCALINGS = {
    "dynamic-ntk": "transformers' dynamic RoPE keeps the keys it cached under earlier, shorter-length frequencies, "
    "where octlm computes them again, so generation past the training length differs",
}


def rotates(position: str) -> bool:
    """Whether the scheme turns queries and keys (it overrides ``rotate``)."""
    return SCHEMES[position].rotate is not PositionScheme.rotate


def neox_rotation(config: DecoderConfig) -> tuple[int, float]:
    """``(rotary_dim, rope_theta)`` of the GPT-NeoX rotation that computes ``config``'s rotary scheme.

    With all ``rotary_dim / 2`` pairs turning, the scheme's own; with only the
    ``k`` fastest (``turning_pairs``), ``2k`` channels at base
    ``rope_theta ** (2k / rotary_dim)``, so that pair ``i``'s frequency,
    ``base ** (-2i / 2k)``, is ``rope_theta ** (-2i / rotary_dim)``.
    """
    dim, pairs = rotary_dim(config), SCHEMES[config.position].turning_pairs(config)
    if 2 * pairs == dim:
        return dim, float(config.rope_theta)
    return 2 * pairs, float(config.rope_theta) ** (2 * pairs / dim)


def scaling_parameters(scaling: RopeScaling | None, config: DecoderConfig, architecture: str = "GPT-NeoX") -> dict:
    """The ``rope_parameters`` entries that make transformers compute ``scaling`` (none for ``None``).

    ``architecture`` names the target in messages; Llama, SmolLM3 and Qwen3
    read these entries as GPT-NeoX does (one ``ROPE_INIT_FUNCTIONS`` for all).

    Raises:
        InteropError: naming a method transformers cannot compute alike.
    """
    if scaling is None:
        return {}
    if scaling.method != "linear" and rotates(config.position) and neox_rotation(config)[0] != rotary_dim(config):
        raise InteropError(
            f"RoPE scaling {scaling.method!r} of position={config.position!r} has no {architecture} form: "
            f"transformers would spread it over the {neox_rotation(config)[0]} turning channels, octlm over all "
            f"{rotary_dim(config)} rotated ones; export without --rope-scaling, or with linear"
        )
    if scaling.method == "linear":
        return {"rope_type": "linear", "factor": scaling.factor}
    # transformers' rope_type of the same name reads the method's keys under their names
    if scaling.method in _SAME_TYPE:
        keys = {key: getattr(scaling, key) for key in ROPE_SCALINGS[scaling.method].keys}
        return {
            "rope_type": scaling.method,
            "factor": scaling.factor,
            "original_max_position_embeddings": scaling.original_length,
            **keys,
        }
    if scaling.method == "ntk":  # a fixed NTK scale is plain RoPE with a larger base
        return {
            "rope_theta": ntk_theta(
                config.rope_theta, scaling.factor, int(config.head_dim * config.partial_rotary_factor)
            )
        }
    why = REFUSED_SCALINGS.get(scaling.method, "transformers has no such RoPE type")
    raise InteropError(
        f"RoPE scaling {scaling.method!r} has no {architecture} form: {why}; export without --rope-scaling"
    )


def transformers4_rope(rope: dict, config: DecoderConfig) -> dict:
    """``rope`` (a ``rope_parameters`` dict) in the keys transformers 4's GPTNeoXConfig reads.

    ``rotary_pct`` and ``rotary_emb_base`` carry the rotated fraction and the
    base; ``rope_scaling`` the scaling, or ``None``. YaRN's original length is
    left out when it is ``max_position_embeddings``, which is what version 4
    always uses and version 5 assumes when it is missing; version 4 warns
    about the key when it is there. Llama 3's stays: version 4 requires it.
    """
    scaling = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if scaling.get("rope_type") == "yarn" and scaling.get("original_max_position_embeddings") == config.context_length:
        del scaling["original_max_position_embeddings"]
    return {
        "rotary_pct": rope["partial_rotary_factor"],
        "rotary_emb_base": rope["rope_theta"],
        "rope_scaling": scaling if scaling["rope_type"] != "default" else None,
    }


def import_rope(hf: dict, source: Path, context_length: int) -> tuple[float, float, dict]:
    """``(rope_theta, partial_rotary_factor, record)`` of a GPT-NeoX config, in transformers 4 or 5 spelling.

    ``record`` holds the RoPE scaling the checkpoint applies (``{"rope_scaling": {...}}``), for the run's config.

    Raises:
        InteropError: naming a RoPE type octlm cannot compute alike.
    """
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", hf.get("rope_theta", hf.get("rotary_emb_base", 10000.0))))
    factor = float(params.get("partial_rotary_factor", hf.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, factor, {}
    if kind == "dynamic":
        raise InteropError(
            f"{source}: rope_type='dynamic': {REFUSED_SCALINGS['dynamic-ntk']}; octlm cannot represent this model"
        )
    odd = [k for k in ("attention_factor", "mscale", "mscale_all_dim") if params.get(k) is not None]
    if kind not in ("linear", *_SAME_TYPE) or odd or params.get("truncate", True) is not True:
        what = f"rope_type={kind!r}" + (f" with {', '.join(odd)}" if odd else "")
        raise InteropError(
            f"{source}: {what}: octlm scales RoPE by linear, ntk, dynamic-ntk, yarn (Peng et al. 2023 defaults) or "
            f"llama3; octlm cannot represent this model"
        )
    original = (
        int(params.get("original_max_position_embeddings", context_length)) if kind in _SAME_TYPE else context_length
    )
    # A key left out (or null) takes octlm's default, which is the paper's (YaRN's betas) or Llama 3.1's (its frequency
    # factors).
    keys = {key: float(params[key]) for key in ROPE_SCALINGS[kind].keys if params.get(key) is not None}
    try:
        scaling = RopeScaling(kind, float(params["factor"]), original, **keys)
    except ValueError as err:
        raise InteropError(f"{source}: rope_type={kind!r}: {err}; octlm cannot represent this model") from None
    record = {"method": scaling.method, "factor": scaling.factor, "original_length": scaling.original_length}
    return (
        theta,
        factor,
        {"rope_scaling": {**record, **{key: getattr(scaling, key) for key in ROPE_SCALINGS[kind].keys}}},
    )


__all__ = [
    "REFUSED_SCALINGS",
    "import_rope",
    "neox_rotation",
    "rotates",
    "scaling_parameters",
    "transformers4_rope",
]
