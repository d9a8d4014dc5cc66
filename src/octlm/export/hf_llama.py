"""octlm's Llama-block decoders as transformers' Llama, SmolLM3 or Qwen3 (export only).

:mod:`octlm.export.hf_hybrid` picks the architecture and refuses what none
carries; this module writes ``config.json`` and the tensors. The three share
octlm's block: pre-norm RMSNorm (eps 1e-6, :data:`~octlm.model.block_recipes.RMS_EPS`),
``x + attn(norm(x))`` then ``x + mlp(norm(x))``, a SwiGLU MLP
(``down(silu(gate(x)) * up(x))``, ``intermediate_size`` = ceil(C/3) x 8), no
biases, scores scaled by 1/sqrt(head_dim), a final RMSNorm and the head tied
to the token table. What differs from octlm's tensors:

* octlm fuses the projections, ``qkv`` rows ``[q | k | v]`` each
  ``[head, head_dim]``; transformers has ``q_proj``, ``k_proj`` and ``v_proj``
  (every head its own keys: ``num_key_value_heads`` = ``num_attention_heads``).
* transformers' rotation pairs channels ``(i, i + head_dim/2)`` (``rotate_half``,
  octlm's ``rope_layout="half"``). For an ``interleaved`` run (pairs ``(2i, 2i+1)``)
  a RoPE layer's query and key rows of each head are reordered, even channels
  first, then odd ones, and so are Qwen3's ``q_norm`` and ``k_norm`` gains (an
  RMSNorm over the head's channels does not depend on their order); a query and
  a key reordered alike give the same dot product.

===========================  ===================================================
octlm                        ``config.json``
===========================  ===================================================
``d_model``, ``n_heads``     ``hidden_size``, ``num_attention_heads``,
                             ``num_key_value_heads``, ``head_dim``
``n_layers``                 ``num_hidden_layers``
``context_length``           ``max_position_embeddings`` (under a RoPE scaling,
                             as for GPT-NeoX: :func:`~octlm.export.hf_neox.max_positions`)
RoPE base                    ``rope_parameters.rope_theta``; ``rope_theta``
RoPE scaling (run time)      ``rope_parameters``; ``rope_scaling`` (transformers 4)
layers' schemes (SmolLM3)    ``no_rope_layers``: 1 RoPE, 0 NoPE
windows                      ``use_sliding_window``, ``sliding_window`` (W: query
                             i sees keys i - W < j <= i, as octlm's ``wW``),
                             ``layer_types`` (``sliding_attention``)
QK-norm (Qwen3)              ``self_attn.q_norm``, ``self_attn.k_norm``
tied head                    ``tie_word_embeddings`` true (``lm_head`` not stored); untied: false, stored
===========================  ===================================================

The RoPE settings are written in both spellings, version 5's ``rope_parameters``
and version 4's ``rope_theta`` and ``rope_scaling``, as for GPT-NeoX
(:mod:`octlm.export.hf_neox_rope`). ``"octlm"`` records the layout, block and
RoPE layout (transformers ignores it).
"""

from __future__ import annotations

from pathlib import Path

import torch

from octlm.export.hf_common import InteropError, check_scaled_windows
from octlm.export.hf_hybrid import LLAMA, QWEN3, SMOLLM3, FamilyPlan, plan_family
from octlm.export.hf_neox import max_positions, turned_channels
from octlm.export.hf_neox_rope import scaling_parameters, transformers4_rope
from octlm.model import Decoder, DecoderConfig
from octlm.model.block_recipes import RMS_EPS, swiglu_hidden
from octlm.model.layout import layout_text
from octlm.model.positions import RopeScaling

#: model_type -> (class name, architecture as messages name it)
ARCHITECTURES = {
    LLAMA: ("LlamaForCausalLM", "Llama"),
    SMOLLM3: ("SmolLM3ForCausalLM", "SmolLM3"),
    QWEN3: ("Qwen3ForCausalLM", "Qwen3"),
}
#: The oldest transformers that reads each export as octlm computes it: SmolLM3 arrived in 4.53, and Qwen3's
#: per-layer windows (``layer_types``) with it.
SINCE = {LLAMA: "4.45", SMOLLM3: "4.53", QWEN3: "4.53"}

#: (octlm name, transformers name) within block i, beside the attention projections.
_BLOCK = [
    ("ln_attn.weight", "input_layernorm.weight"),
    ("attn.proj.weight", "self_attn.o_proj.weight"),
    ("ln_mlp.weight", "post_attention_layernorm.weight"),
    ("mlp.gate.weight", "mlp.gate_proj.weight"),
    ("mlp.up.weight", "mlp.up_proj.weight"),
    ("mlp.down.weight", "mlp.down_proj.weight"),
]


def channel_order(plan: FamilyPlan, layer: int) -> torch.Tensor:
    """Index [head_dim]: transformers' query/key channel ``c`` of layer ``layer``'s heads is octlm's ``order[c]``."""
    if not plan.rotary[layer]:
        return torch.arange(plan.rope.head_dim)
    return turned_channels(plan.rope)


def to_family_state(model: Decoder, plan: FamilyPlan) -> dict[str, torch.Tensor]:
    """``model``'s weights under the transformers names (``lm_head`` only when untied), query and key rows reordered.

    Raises:
        InteropError: when the model holds a tensor this mapping does not place (a block it was not written for).
    """
    config = model.config
    C, H = config.d_model, config.n_heads
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out = {
        "model.embed_tokens.weight": state.pop("token_embedding.weight"),
        "model.norm.weight": state.pop("ln_final.weight"),
    }
    head = state.pop("lm_head.weight")
    if config.untied_head:
        out["lm_head.weight"] = head
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        order = channel_order(plan, i)
        rows = torch.cat([h * config.head_dim + order for h in range(H)])
        q, k, v = state.pop(ours + "attn.qkv.weight").split(C)
        out.update({theirs + "self_attn.q_proj.weight": q[rows], theirs + "self_attn.k_proj.weight": k[rows]})
        out[theirs + "self_attn.v_proj.weight"] = v
        if plan.qk_norm:
            for name in ("q_norm", "k_norm"):
                out[f"{theirs}self_attn.{name}.weight"] = state.pop(f"{ours}attn.{name}.weight")[order]
        for mine, name in _BLOCK:
            out[theirs + name] = state.pop(ours + mine)
        if ours + "attn.sinks" in state:  # GPT-OSS's (hf_gpt_oss), one per head: the rows' reordering leaves them
            out[theirs + "self_attn.sinks"] = state.pop(ours + "attn.sinks")
    if state:
        raise InteropError(f"tensors the {plan.model_type} mapping has no place for: {', '.join(sorted(state)[:5])}")
    return {k: v.contiguous() for k, v in out.items()}


def rope_entries(plan: FamilyPlan, scaling: RopeScaling | None) -> dict:
    """The RoPE keys of ``config.json``: ``rope_parameters`` (version 5), ``rope_theta`` and ``rope_scaling`` (4)."""
    architecture = ARCHITECTURES[plan.model_type][1]
    rope = {"rope_type": "default", "rope_theta": float(plan.rope.rope_theta)}
    rope.update(scaling_parameters(scaling, plan.rope, architecture))
    version4 = transformers4_rope({**rope, "partial_rotary_factor": 1.0}, plan.rope)
    return {"rope_parameters": rope, "rope_theta": rope["rope_theta"], "rope_scaling": version4["rope_scaling"]}


def layer_entries(plan: FamilyPlan) -> dict:
    """The per-layer keys: windows for SmolLM3 and Qwen3, NoPE layers for SmolLM3 (none for Llama)."""
    if plan.model_type == LLAMA:
        return {}
    out = {
        "use_sliding_window": plan.window is not None,
        "sliding_window": plan.window,
        "layer_types": ["sliding_attention" if w else "full_attention" for w in plan.windowed],
    }
    if plan.model_type == SMOLLM3:
        out["no_rope_layers"] = [int(r) for r in plan.rotary]
    return out


def family_config(model: Decoder, eot_id: int) -> dict:
    """The ``config.json`` of the Llama, SmolLM3 or Qwen3 equivalent of ``model`` (with its run-time RoPE scaling).

    Raises:
        InteropError: for what no architecture carries, or a RoPE scaling transformers computes otherwise.
    """
    config = model.config
    plan = plan_family(config)
    scaling = getattr(model.positions, "scaling", None)
    class_name = ARCHITECTURES[plan.model_type][0]
    out = {
        "architectures": [class_name],
        "model_type": plan.model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": swiglu_hidden(config.d_model),
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions(plan.rope, scaling),
        "rms_norm_eps": RMS_EPS,
        "attention_bias": False,
        "attention_dropout": config.dropout,
        **rope_entries(plan, scaling),
        **layer_entries(plan),
        "tie_word_embeddings": not config.untied_head,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "pad_token_id": None,  # SmolLM3's default (128004) is past a small vocabulary
        "dtype": "float32",
        "octlm": {"block": config.block, "layers": layout_text(config.layers), "qk_norm": config.qk_norm},
    }
    if plan.model_type != QWEN3:
        out["mlp_bias"] = False
    if any(plan.rotary):
        out["octlm"]["rope_layout"] = config.rope_layout
    if out["max_position_embeddings"] != config.context_length:
        out["octlm"]["context_length"] = config.context_length
    return out


class FamilyMapper:
    """:class:`octlm.export.hf_common.Mapper` for one of Llama, SmolLM3 and Qwen3; export only."""

    vocab_tensors = ("embed_tokens.weight", "lm_head.weight")

    def __init__(self, model_type: str) -> None:
        self.model_type = model_type
        self.architecture = ARCHITECTURES[model_type][0]

    def check(self, config: DecoderConfig, scaling: RopeScaling | None) -> None:
        plan = plan_family(config)
        scaling_parameters(scaling, plan.rope, ARCHITECTURES[plan.model_type][1])
        check_scaled_windows(config, scaling, ARCHITECTURES[plan.model_type][1])

    def hf_config(self, model: Decoder, eot_id: int) -> dict:
        return family_config(model, eot_id)

    def to_hf_state(self, model: Decoder) -> dict[str, torch.Tensor]:
        return to_family_state(model, plan_family(model.config))

    def import_config(self, hf: dict, source: Path) -> tuple[DecoderConfig, dict]:
        raise InteropError(f"{source}: import-hf reads GPT-2 and GPT-NeoX checkpoints, not {self.architecture}")

    def from_hf_state(
        self, tensors: dict[str, torch.Tensor], config: DecoderConfig, extra: dict, source: Path
    ) -> dict[str, torch.Tensor]:
        raise InteropError(f"{source}: import-hf reads GPT-2 and GPT-NeoX checkpoints, not {self.architecture}")


#: One mapper per architecture of the Llama block.
FAMILY_MAPPERS = {model_type: FamilyMapper(model_type) for model_type in ARCHITECTURES}


def family_mapper(config: DecoderConfig) -> FamilyMapper:
    """The mapper that writes a ``block="llama"`` decoder; ``InteropError`` naming what no architecture carries."""
    return FAMILY_MAPPERS[plan_family(config).model_type]


__all__ = ["ARCHITECTURES", "FAMILY_MAPPERS", "SINCE", "FamilyMapper", "family_config", "family_mapper"]
