"""octlm's Llama-block decoders with learned sinks as transformers' GPT-OSS (``GptOssForCausalLM``; export only).

GPT-OSS is the transformers architecture with octlm's sinks: ``GptOssAttention.sinks``,
one logit per head joined to the softmax's denominator, dropped after it. Its
block is otherwise octlm's Llama block (RMSNorm, ``x + attn(norm(x))`` then
``x + mlp(norm(x))``, RoPE pairing ``(i, i + head_dim/2)``, windows of one
size by ``layer_types``) except for the MLP, a mixture of experts whose
expert computes, on the interleaved columns of ``gate_up = x W + b``::

    g, u = gate_up[..., ::2].clamp(max=limit), gate_up[..., 1::2].clamp(-limit, limit)
    expert(x) = ((u + 1) * g * sigmoid(alpha * g)) W_down + b_down

With one expert picked for every token (``num_local_experts`` =
``num_experts_per_tok`` = 1, the router's softmax over one value is exactly
1), the gate columns written as ``W_gate / alpha``, the up columns as
``alpha W_up`` with bias ``-1``, and a limit no float32 activation reaches
(``swiglu_limit`` 1e30), the expert is ``silu(x W_gate) * (x W_up) W_down``:
octlm's SwiGLU. ``swiglu_alpha`` is written as GPT-OSS's own 1.702, so a
transformers that reads it and one that fixes it compute alike. Checked with
transformers 5.24 (tests/test_hf_gpt_oss.py), whose experts read
``swiglu_limit`` from the config; a version that fixes the clamp at GPT-OSS's
7 would clip the larger gate and up activations (not checked here). Attention has
no biases (``attention_bias`` false) and every head its own keys.

Refused by name: NoPE layers and QK-norm (GPT-OSS turns every layer with
RoPE and normalizes no queries), and everything :mod:`octlm.export.hf_hybrid`
refuses for the Llama block.
"""

from __future__ import annotations

import torch

from octlm.export.hf_common import InteropError, check_scaled_windows
from octlm.export.hf_hybrid import FamilyPlan, layer_rows, plan_family
from octlm.export.hf_llama import FamilyMapper, family_config, to_family_state
from octlm.export.hf_neox_rope import rotates, scaling_parameters
from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import RopeScaling

MODEL_TYPE = "gpt_oss"
#: GPT-OSS's own SwiGLU alpha, written out; the weights absorb it.
ALPHA = 1.702
#: A clamp no float32 activation of a trained model reaches: the clamp does nothing.
NO_LIMIT = 1e30


def plan_gpt_oss(config: DecoderConfig) -> FamilyPlan:
    """The per-layer plan of a Llama-block run with sinks, as GPT-OSS carries it.

    Raises:
        InteropError: naming the NoPE layers or QK-norm GPT-OSS lacks, or what :func:`plan_family` refuses.
    """
    rows = layer_rows(config)
    nope = [str(i + 1) for i, row in enumerate(rows) if not rotates(row.position)]
    why = None
    if nope:
        why = f"attention_sinks with NoPE on layer(s) {', '.join(nope)}: GPT-OSS turns every layer with RoPE"
    elif any(row.qk_norm for row in rows):
        why = "attention_sinks with QK-norm: GPT-OSS, the architecture with sinks, normalizes no queries or keys"
    if why:
        raise InteropError(f"{why}; octlm cannot export this run to a transformers architecture that computes it alike")
    return plan_family(config)


def gpt_oss_config(model: Decoder, eot_id: int) -> dict:
    """The ``config.json`` of the GPT-OSS equivalent of ``model``: the Llama family's keys, GPT-OSS's own beside."""
    plan = plan_gpt_oss(model.config)
    out = family_config(model, eot_id)
    for key in ("no_rope_layers", "mlp_bias", "use_sliding_window"):
        out.pop(key, None)
    out.update(
        architectures=["GptOssForCausalLM"],
        model_type=MODEL_TYPE,
        layer_types=["sliding_attention" if w else "full_attention" for w in plan.windowed],
        # GPT-OSS builds a sliding mask whether a layer slides or not; with none, a width no full layer reads.
        sliding_window=plan.window or out["max_position_embeddings"],
        num_local_experts=1,
        num_experts_per_tok=1,
        swiglu_alpha=ALPHA,
        swiglu_limit=NO_LIMIT,
        router_aux_loss_coef=0.0,
        output_router_logits=False,
    )
    out["octlm"]["attention_sinks"] = True
    return out


def to_gpt_oss_state(model: Decoder) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT-OSS's names: the Llama family's, with each SwiGLU as GPT-OSS's one expert."""
    out = to_family_state(model, plan_gpt_oss(model.config))
    for i in range(model.config.n_layers):
        at = f"model.layers.{i}.mlp."
        gate, up = out.pop(at + "gate_proj.weight"), out.pop(at + "up_proj.weight")  # [I, C]
        down = out.pop(at + "down_proj.weight")  # [C, I]
        hidden, width = gate.shape
        gate_up = torch.empty(1, width, 2 * hidden)
        gate_up[0, :, 0::2], gate_up[0, :, 1::2] = (gate / ALPHA).T, (up * ALPHA).T
        bias = torch.zeros(1, 2 * hidden)
        bias[0, 1::2] = -1.0  # GPT-OSS multiplies by (u + 1)
        out.update(
            {
                at + "experts.gate_up_proj": gate_up,
                at + "experts.gate_up_proj_bias": bias,
                at + "experts.down_proj": down.T.reshape(1, hidden, width),
                at + "experts.down_proj_bias": torch.zeros(1, width),
                at + "router.weight": torch.zeros(1, width),
                at + "router.bias": torch.zeros(1),
            }
        )
    return {k: v.contiguous() for k, v in out.items()}


class GptOssMapper(FamilyMapper):
    """:class:`octlm.export.hf_common.Mapper` for GPT-OSS; export only."""

    def __init__(self) -> None:
        self.model_type = MODEL_TYPE
        self.architecture = "GptOssForCausalLM"

    def check(self, config: DecoderConfig, scaling: RopeScaling | None) -> None:
        scaling_parameters(scaling, plan_gpt_oss(config).rope, "GPT-OSS")
        check_scaled_windows(config, scaling, "GPT-OSS")

    def hf_config(self, model: Decoder, eot_id: int) -> dict:
        return gpt_oss_config(model, eot_id)

    def to_hf_state(self, model: Decoder) -> dict[str, torch.Tensor]:
        return to_gpt_oss_state(model)


__all__ = ["ALPHA", "MODEL_TYPE", "GptOssMapper", "gpt_oss_config", "plan_gpt_oss", "to_gpt_oss_state"]
