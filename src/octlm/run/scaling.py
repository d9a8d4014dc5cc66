"""Running a RoPE model under a scaling: the one its run saved (``config.json``'s ``train.rope_scaling``) or one asked
for now.

``octlm train --rope-scaling`` trains under a scaling and saves it, so that
:func:`octlm.run.load.load_run` runs the model as it was trained
(:func:`apply_scaling`); ``octlm sample`` and ``octlm export-hf`` can also run
a plain RoPE model past its training length without training
(:class:`RopeScalingOptions`, :func:`apply_rope_scaling`). The methods
themselves are :mod:`octlm.model.positions.rope_scaling`.
"""

from __future__ import annotations

from dataclasses import dataclass

from octlm.declare import option
from octlm.errors import OctlmError, RunError
from octlm.model import Decoder
from octlm.model.positions import ROPE_SCALINGS, RopeScaling


def apply_scaling(model: Decoder, record: dict | None) -> None:
    """Run ``model`` under a stored RoPE scaling (``config.json``'s ``train.rope_scaling``); ``None`` leaves it plain.

    Raises:
        RunError: when the record is malformed or the model's scheme does not take its method.
    """
    if record is None:
        return
    try:
        scaling = RopeScaling(**record)
        model.set_rope_scaling(scaling.method, scaling.factor, scaling.original_length)
        if model.positions.scalings():
            # keeps the method's keys an imported run records (YaRN's betas, Llama 3's factors)
            model.positions.set_rope_scaling(scaling)
    except (TypeError, ValueError) as err:
        raise RunError(f"config.json: train.rope_scaling {record}: {err}") from None


@dataclass
class RopeScalingOptions:
    """``--rope-scaling`` and ``--rope-factor``: run a trained RoPE model past its training length (sample,
    export-hf)."""

    rope_scaling: str | None = option(
        None,
        "run a RoPE model past its training length without training: linear position interpolation, "
        "NTK-aware base, dynamic NTK, YaRN or Llama 3's (default: none, plain RoPE)",
        choices=list(ROPE_SCALINGS),
    )
    rope_factor: float | None = option(
        None,
        "scale of --rope-scaling, >= 1: target length / training length (for dynamic-ntk the multiplier of "
        "current length / training length; default 1 there); required for the others",
    )


def apply_rope_scaling(model: Decoder, method: str | None, factor: float | None) -> None:
    """Set ``--rope-scaling``/``--rope-factor`` on a loaded model.

    Raises:
        OctlmError: when the model is not a RoPE model, or the factor is
            missing or below 1.
    """
    if method is None:
        if factor is not None:
            raise OctlmError(f"--rope-factor needs --rope-scaling ({', '.join(ROPE_SCALINGS)})")
        return
    if factor is None:
        if method != "dynamic-ntk":
            raise OctlmError(f"--rope-scaling {method} needs --rope-factor F (target length / training length, e.g. 4)")
        factor = 1.0
    try:
        model.set_rope_scaling(method, factor)
    except ValueError as err:
        raise OctlmError(f"--rope-scaling {method} --rope-factor {factor:g}: {err}") from None


__all__ = ["RopeScalingOptions", "apply_rope_scaling", "apply_scaling"]
