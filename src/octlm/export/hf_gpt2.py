"""octlm's learned-position decoder as transformers' GPT-2, and back.

octlm's learned-position decoder is GPT-2's architecture (Radford et al. 2019):
pre-LayerNorm blocks (eps 1e-5), biases on every linear layer except the head,
one fused query/key/value projection, a 4x MLP with GELU, a final LayerNorm and
a head tied to the token table. The files differ only in names and in one
layout: GPT-2's ``Conv1D`` stores each weight as ``[in, out]`` where
``nn.Linear`` stores ``[out, in]``, so those weights are transposed on the way.

========================  =================================================
octlm                     GPT-2
========================  =================================================
``vocab_size``            ``vocab_size``
``context_length``        ``n_positions`` (rows of ``wpe``)
``d_model``               ``n_embd`` (``n_inner`` = 4 x ``n_embd``)
``n_heads``               ``n_head``
``n_layers``              ``n_layer``
``dropout``               ``resid_pdrop``, ``embd_pdrop``, ``attn_pdrop``
``activation`` gelu       ``activation_function`` "gelu" (exact)
``activation`` gelu_tanh  "gelu_new" or "gelu_pytorch_tanh" (tanh approximation)
position scheme           the one whose ``hf_model_type`` is "gpt2" (``wpe``)
========================  =================================================
"""

from __future__ import annotations

from pathlib import Path

import torch

from octlm.export.hf_common import (
    LAYER_NORM_EPS,
    InteropError,
    build_config,
    check_state,
    export_activation,
    import_block,
    refusal,
    take_tensors,
)
from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES, facts_of

MODEL_TYPE = "gpt2"

# (octlm name in a block, GPT-2 name in a block, stored transposed by GPT-2's Conv1D)
_BLOCK = [
    ("ln_attn.weight", "ln_1.weight", False),
    ("ln_attn.bias", "ln_1.bias", False),
    ("attn.qkv.weight", "attn.c_attn.weight", True),
    ("attn.qkv.bias", "attn.c_attn.bias", False),
    ("attn.proj.weight", "attn.c_proj.weight", True),
    ("attn.proj.bias", "attn.c_proj.bias", False),
    ("ln_mlp.weight", "ln_2.weight", False),
    ("ln_mlp.bias", "ln_2.bias", False),
    ("mlp.up.weight", "mlp.c_fc.weight", True),
    ("mlp.up.bias", "mlp.c_fc.bias", False),
    ("mlp.down.weight", "mlp.c_proj.weight", True),
    ("mlp.down.bias", "mlp.c_proj.bias", False),
]
_TOP = [
    ("token_embedding.weight", "transformer.wte.weight"),
    ("positions.table.weight", "transformer.wpe.weight"),
    ("ln_final.weight", "transformer.ln_f.weight"),
    ("ln_final.bias", "transformer.ln_f.bias"),
]


def gpt2_scheme() -> str:
    """The position scheme that is GPT-2's table (``wpe``): the one whose ``hf_model_type`` is ``gpt2``."""
    return next(name for name, cls in SCHEMES.items() if facts_of(cls).hf_model_type == MODEL_TYPE)


def name_map(n_layers: int) -> list[tuple[str, str, bool]]:
    """``(octlm name, GPT2LMHeadModel name, transposed)`` for every stored tensor (the tied head excluded)."""
    pairs = [(a, b, False) for a, b in _TOP]
    for i in range(n_layers):
        pairs += [(f"blocks.{i}.{a}", f"transformer.h.{i}.{b}", t) for a, b, t in _BLOCK]
    return pairs


def gpt2_config(config: DecoderConfig, eot_id: int) -> dict:
    """The ``config.json`` of the GPT-2 equivalent of ``config``.

    Raises:
        InteropError: for a position scheme that is not GPT-2's learned
            table or an activation GPT-2 does not name.
    """
    if facts_of(config.position).hf_model_type != MODEL_TYPE:
        raise InteropError(
            f"position={config.position!r} has no GPT-2 form: GPT-2 adds a learned position table (wpe) "
            f"and nothing else; GPT-2 takes runs trained with --position {gpt2_scheme()}"
        )
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "n_positions": config.context_length * config.randomize_positions,  # the rows of the table
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "n_inner": 4 * config.d_model,
        "activation_function": export_activation(config, "GPT-2"),
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": not config.untied_head,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "torch_dtype": "float32",
    }


def decoder_config(gpt2: dict, source: Path) -> DecoderConfig:
    """The octlm config of a GPT-2 ``config.json`` dict.

    Raises:
        InteropError: naming the key, for anything octlm's decoder would
            compute differently (another activation, an MLP width other than
            4 x n_embd, a LayerNorm eps other than 1e-5, unscaled or
            layer-scaled attention, cross-attention).
    """
    d_model = gpt2.get("n_embd", 768)
    activation = import_block(
        gpt2, source, d_model, ("activation_function", "gelu_new"), "layer_norm_epsilon", "n_inner"
    )
    if not gpt2.get("scale_attn_weights", True):
        raise refusal(gpt2, source, "scale_attn_weights", "octlm scales attention scores by 1/sqrt(head_dim)")
    if gpt2.get("scale_attn_by_inverse_layer_idx", False):
        raise refusal(gpt2, source, "scale_attn_by_inverse_layer_idx", "octlm scales every layer's scores alike")
    if gpt2.get("add_cross_attention", False):
        raise refusal(gpt2, source, "add_cross_attention", "octlm's decoder has no cross-attention")
    return build_config(
        source,
        vocab_size=gpt2.get("vocab_size", 50257),
        context_length=gpt2.get("n_positions", 1024),
        d_model=d_model,
        n_heads=gpt2.get("n_head", 12),
        n_layers=gpt2.get("n_layer", 12),
        dropout=float(gpt2.get("resid_pdrop", 0.0)),
        activation=activation,
        position=gpt2_scheme(),
        untied_head=not gpt2.get("tie_word_embeddings", True),  # GPT2Config's default
    )


def to_gpt2_state(model: Decoder) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT2LMHeadModel's names and layouts (``lm_head.weight`` only when untied)."""
    state = model.state_dict()
    out = {}
    for ours, theirs, transposed in name_map(model.config.n_layers):
        out[theirs] = (state[ours].t() if transposed else state[ours]).detach().cpu().contiguous()
    if model.config.untied_head:
        out["lm_head.weight"] = state["lm_head.weight"].detach().cpu().contiguous()
    return out


def from_gpt2_state(tensors: dict[str, torch.Tensor], config: DecoderConfig, source: Path) -> dict[str, torch.Tensor]:
    """GPT-2 tensors (with or without the ``transformer.`` prefix) as an octlm state dict.

    The causal-mask buffers old checkpoints carry (``attn.bias``,
    ``attn.masked_bias``) are dropped; a stored ``lm_head.weight`` must equal
    the token table, or with ``config.untied_head`` be there (:func:`check_state`).

    Raises:
        InteropError: naming the tensor that is missing, has the wrong shape,
            or is a head not tied to the token table.
    """
    named = {}
    for key, value in tensors.items():
        key = key if key.startswith(("transformer.", "lm_head.")) else f"transformer.{key}"
        if key.endswith((".attn.bias", ".attn.masked_bias")) and ".c_attn." not in key:
            continue
        named[key] = value
    head = named.pop("lm_head.weight", None)
    pairs = name_map(config.n_layers)
    out = take_tensors(named, [(ours, theirs) for ours, theirs, _ in pairs], source)
    for ours, _, transposed in pairs:
        if transposed:
            out[ours] = out[ours].t().contiguous()
    return check_state(out, head, "lm_head.weight", "wte", config, source)


class Gpt2Mapper:
    """:class:`octlm.export.hf_common.Mapper` for ``GPT2LMHeadModel``."""

    model_type = MODEL_TYPE
    architecture = "GPT2LMHeadModel"
    vocab_tensors = ("wte.weight", "lm_head.weight")

    def check(self, config: DecoderConfig, scaling: object | None) -> None:
        gpt2_config(config, 0)
        export_activation(config, "GPT-2")
        if scaling is not None:
            raise InteropError("RoPE scaling applies to rotary models; GPT-2 has a learned position table")

    def hf_config(self, model: Decoder, eot_id: int) -> dict:
        return gpt2_config(model.config, eot_id)

    def to_hf_state(self, model: Decoder) -> dict[str, torch.Tensor]:
        return to_gpt2_state(model)

    def import_config(self, hf: dict, source: Path) -> tuple[DecoderConfig, dict]:
        return decoder_config(hf, source), {}

    def from_hf_state(
        self, tensors: dict[str, torch.Tensor], config: DecoderConfig, extra: dict, source: Path
    ) -> dict[str, torch.Tensor]:
        return from_gpt2_state(tensors, config, source)


__all__ = ["Gpt2Mapper", "decoder_config", "from_gpt2_state", "gpt2_config", "gpt2_scheme", "name_map", "to_gpt2_state"]
