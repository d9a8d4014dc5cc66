"""octlm's rotary and position-free decoders as transformers' GPT-NeoX, and back.

GPT-NeoX (Black et al. 2022) with ``use_parallel_residual=False`` is octlm's
block: pre-LayerNorm (eps 1e-5), ``x + attn(ln(x))`` then ``x + mlp(ln(x))``,
biases on every linear layer, a 4x GELU MLP, scores scaled by
1/sqrt(head_dim), rotary queries and keys. Two layouts differ:

* the fused query/key/value rows: octlm's are ``[q | k | v]``, each
  ``[head, head_dim]``; GPT-NeoX's are ``[head, (q | k | v), head_dim]``;
* the rotated channel pairs: GPT-NeoX turns ``(i, i + rotary_dim/2)``
  (octlm's ``rope_layout="half"``). For an ``interleaved`` octlm model
  (pairs ``(2i, 2i+1)``) the query and key rows of each head are reordered,
  even channels first, then odd ones; a query and a key reordered alike give
  the same dot product, so the logits are the same. The layout is recorded
  under ``"octlm"`` in ``config.json`` (transformers ignores it), so import
  puts the rows back.
* a scheme that turns only its ``k`` fastest pairs (``turning_pairs``
  below ``rotary_dim / 2``) is GPT-NeoX partial rotary over ``2k`` channels
  (``rotary_pct = 2k / head_dim``) with base ``rope_theta ** (2k / rotary_dim)``,
  whose frequencies ``base ** (-2i / 2k)`` are the scheme's
  ``rope_theta ** (-2i / rotary_dim)``; the turning channels' rows go first.
  ``"octlm"`` then also records the scheme and its options, for import.

===========================  ==================================================
octlm                        GPT-NeoX ``config.json``
===========================  ==================================================
``d_model``, ``n_heads``     ``hidden_size``, ``num_attention_heads``
``n_layers``                 ``num_hidden_layers`` (``intermediate_size`` = 4 x)
``context_length``           ``max_position_embeddings`` (under a RoPE scaling
                             other than YaRN, the length served, with
                             ``"octlm"``'s ``context_length`` the trained one)
``dropout``                  ``hidden_dropout``, ``attention_dropout``
``activation``               ``hidden_act``: gelu, or gelu_pytorch_tanh
``rope_theta``               ``rope_parameters.rope_theta``; ``rotary_emb_base``
``partial_rotary_factor``    ``rope_parameters.partial_rotary_factor``;
                             ``rotary_pct`` (0: NoPE)
RoPE scaling (run time)      ``rope_parameters``: linear -> "linear", yarn ->
                             "yarn", llama3 -> "llama3", ntk -> a larger
                             ``rope_theta``;
                             dynamic-ntk is refused (see below); the same in
                             ``rope_scaling``, without the base and fraction
tied head                    ``tie_word_embeddings`` true (``lm_head`` not stored); untied: false, ``embed_out``
===========================  ==================================================

Each RoPE setting is written in both spellings transformers reads, version
5's ``rope_parameters`` and version 4's ``rotary_pct``, ``rotary_emb_base``
and ``rope_scaling``; the rotation and the RoPE scaling, both ways, are
:mod:`octlm.export.hf_neox_rope`'s.
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
    served_length,
    take_tensors,
)
from octlm.export.hf_neox_rope import import_rope, neox_rotation, rotates, scaling_parameters, transformers4_rope
from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES, RopeScaling, facts_of, rotary_dim

MODEL_TYPE = "gpt_neox"
#: GPT-NeoX's tanh GELU is torch's own (``F.gelu(approximate="tanh")``), bit for bit what octlm computes.
_TANH_GELU = "gelu_pytorch_tanh"

_BLOCK = [
    ("ln_attn", "input_layernorm"),
    ("attn.qkv", "attention.query_key_value"),
    ("attn.proj", "attention.dense"),
    ("ln_mlp", "post_attention_layernorm"),
    ("mlp.up", "mlp.dense_h_to_4h"),
    ("mlp.down", "mlp.dense_4h_to_h"),
]
_TOP = [
    ("token_embedding.weight", "gpt_neox.embed_in.weight"),
    ("ln_final.weight", "gpt_neox.final_layer_norm.weight"),
    ("ln_final.bias", "gpt_neox.final_layer_norm.bias"),
]


def neox_scheme(rotary: bool) -> str:
    """The scheme a GPT-NeoX checkpoint is: the one with ``hf_model_type`` gpt_neox that rotates iff ``rotary``."""
    return next(n for n, c in SCHEMES.items() if facts_of(c).hf_model_type == MODEL_TYPE and rotates(n) == rotary)


def name_map(n_layers: int) -> list[tuple[str, str]]:
    """``(octlm name, GPTNeoXForCausalLM name)`` for every stored tensor (the tied head excluded)."""
    pairs = list(_TOP)
    for i in range(n_layers):
        for ours, theirs in _BLOCK:
            pairs += [(f"blocks.{i}.{ours}.{p}", f"gpt_neox.layers.{i}.{theirs}.{p}") for p in ("weight", "bias")]
    return pairs


def turned_channels(config: DecoderConfig) -> torch.Tensor:
    """Index [head_dim]: GPT-NeoX's query/key channel ``c`` of a head is octlm's channel ``turned[c]``.

    The turning channels first, in GPT-NeoX's pairs ``(j, j + k)`` (octlm's
    ``(2j, 2j + 1)`` for the interleaved layout, ``(j, j + rotary_dim / 2)``
    for half), then every other channel in order (passed through).
    """
    D = config.head_dim
    if not rotates(config.position):
        return torch.arange(D)
    dim, k = rotary_dim(config), SCHEMES[config.position].turning_pairs(config)
    if config.rope_layout == "interleaved":
        first = torch.cat((torch.arange(0, 2 * k, 2), torch.arange(1, 2 * k, 2)))
    else:
        first = torch.cat((torch.arange(k), torch.arange(dim // 2, dim // 2 + k)))
    rest = torch.tensor([c for c in range(D) if c not in set(first.tolist())], dtype=torch.long)
    return torch.cat((first, rest))


def qkv_rows(config: DecoderConfig) -> torch.Tensor:
    """Index [3 * d_model]: GPT-NeoX's fused row ``r`` is octlm's row ``rows[r]``.

    Rows go head by head, each head's query, key and value in turn; a head's
    query and key rows in :func:`turned_channels` order.
    """
    C, H, D = config.d_model, config.n_heads, config.head_dim
    plain, turned = torch.arange(D), turned_channels(config)
    return torch.cat([part * C + h * D + (turned if part < 2 else plain) for h in range(H) for part in range(3)])


def max_positions(config: DecoderConfig, scaling: RopeScaling | None) -> int:
    """``max_position_embeddings``: the length the model serves (:func:`served_length`), as transformers reads it.

    Transformers takes it as the length after scaling: Llama 3's rope_type warns
    unless ``original_max_position_embeddings`` is below it. YaRN alone keeps
    the trained length: transformers 4.45 (where GPT-2, GPT-NeoX and Llama exports still load)
    reads ``max_position_embeddings`` as YaRN's length before scaling, where
    version 5 reads ``original_max_position_embeddings`` and takes a ratio of 1
    between the two as no statement.
    """
    if scaling is not None and scaling.method == "yarn":
        return config.context_length
    return served_length(config, scaling)


def neox_config(model: Decoder, eot_id: int) -> dict:
    """The ``config.json`` of the GPT-NeoX equivalent of ``model`` (with its run-time RoPE scaling, if set).

    Raises:
        InteropError: for a scheme GPT-NeoX does not hold, an activation it
            does not name, or a RoPE scaling it cannot compute alike.
    """
    config = model.config
    check_config(config)
    rotary = rotates(config.position)
    rope = {
        "rope_type": "default",
        "rope_theta": float(config.rope_theta),
        "partial_rotary_factor": config.partial_rotary_factor if rotary else 0.0,
    }
    if rotary and neox_rotation(config)[0] != rotary_dim(config):
        dim, theta = neox_rotation(config)
        rope.update(rope_theta=theta, partial_rotary_factor=dim / config.head_dim)
    scaling = getattr(model.positions, "scaling", None)
    rope.update(scaling_parameters(scaling, config))
    out = {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "intermediate_size": 4 * config.d_model,
        "hidden_act": _TANH_GELU if config.activation == "gelu_tanh" else export_activation(config, "GPT-NeoX"),
        "hidden_dropout": config.dropout,
        "attention_dropout": config.dropout,
        "max_position_embeddings": max_positions(config, scaling),
        "layer_norm_eps": LAYER_NORM_EPS,
        "use_parallel_residual": False,
        "attention_bias": True,
        "rope_parameters": rope,
        **transformers4_rope(rope, config),
        "tie_word_embeddings": not config.untied_head,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "dtype": "float32",
    }
    if rotary:
        out["octlm"] = {"rope_layout": config.rope_layout}
        if out["max_position_embeddings"] != config.context_length:  # import gives the run its trained length back
            out["octlm"]["context_length"] = config.context_length
        if config.position != neox_scheme(True):  # a scheme GPT-NeoX computes but import would not guess
            out["octlm"].update(
                position=config.position, **{name: getattr(config, name) for name in SCHEMES[config.position].reads}
            )
    return out


def check_config(config: DecoderConfig) -> None:
    """Raise ``InteropError`` when GPT-NeoX cannot hold ``config``'s scheme or activation."""
    if facts_of(config.position).hf_model_type != MODEL_TYPE:
        raise InteropError(
            f"position={config.position!r} has no GPT-NeoX form: GPT-NeoX rotates queries and keys, or with "
            f"partial_rotary_factor 0 adds no position at all"
        )
    export_activation(config, "GPT-NeoX")
    if rotates(config.position):
        dim = neox_rotation(config)[0]
        # transformers' rotary_ndims = int(head_dim * rotary_pct)
        if int(config.head_dim * (dim / config.head_dim)) != dim:
            raise InteropError(
                f"position={config.position!r} turns {dim} of {config.head_dim} channels per head, which "
                f"rotary_pct = {dim / config.head_dim!r} does not give back in transformers; pick another head_dim"
            )


def trained_length(hf: dict, recorded: dict, source: Path) -> int:
    """The octlm ``context_length`` of a GPT-NeoX config: the length octlm's export recorded, else
    ``max_position_embeddings``.

    Raises:
        InteropError: when the recorded length is not a positive whole number.
    """
    if "context_length" not in recorded:
        return hf.get("max_position_embeddings", 2048)  # a bad value is named by DecoderConfig's check
    length = recorded["context_length"]
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise InteropError(
            f'{source}: "octlm" context_length={length!r} is not a positive whole number of tokens; remove the '
            f'"octlm" entry to import the checkpoint at max_position_embeddings'
        )
    return length


def decoder_config(hf: dict, source: Path) -> tuple[DecoderConfig, dict]:
    """The octlm config of a GPT-NeoX ``config.json`` dict, and what the run records beside it.

    Raises:
        InteropError: naming the key, for anything octlm's decoder would
            compute differently (parallel residual, no attention biases, MLP
            width, eps, activation, a RoPE type octlm lacks).
    """
    d_model = hf.get("hidden_size", 6144)
    activation = import_block(hf, source, d_model, ("hidden_act", "gelu"), "layer_norm_eps", "intermediate_size")
    if hf.get("use_parallel_residual", True):
        raise refusal(
            hf, source, "use_parallel_residual", "octlm's MLP reads the output of attention (sequential residual)", True
        )
    if not hf.get("attention_bias", True):
        raise refusal(hf, source, "attention_bias", "octlm's attention projections have biases")
    recorded = hf.get("octlm") or {}
    context_length = trained_length(hf, recorded, source)
    theta, factor, record = import_rope(hf, source, context_length)
    shape = dict(
        untied_head=not hf.get("tie_word_embeddings", False),  # GPTNeoXConfig's default: untied
        vocab_size=hf.get("vocab_size", 50432),
        context_length=context_length,
        d_model=d_model,
        n_heads=hf.get("num_attention_heads", 64),
        n_layers=hf.get("num_hidden_layers", 44),
        dropout=float(hf.get("hidden_dropout", 0.0)),
        activation=activation,
    )
    if factor == 0:
        return build_config(source, **shape, position=neox_scheme(False)), {}
    layout = recorded.get("rope_layout", "half")
    position = recorded.get("position")
    if position in SCHEMES and facts_of(position).hf_model_type == MODEL_TYPE and rotates(position):
        config = build_config(
            source, **shape, position=position, **{k: recorded[k] for k in SCHEMES[position].reads if k in recorded}
        )
        dim, base = neox_rotation(config)
        if dim != int(config.head_dim * factor) or (dim and abs(base - theta) > 1e-9 * theta):
            raise InteropError(
                f"{source}: the rotation of rotary_pct {factor} and base {theta} is not the recorded "
                f"position={position!r}'s; "
                f'remove the "octlm" entry to import it as {neox_scheme(True)!r}'
            )
        return config, record
    return build_config(
        source, **shape, position=neox_scheme(True), rope_theta=theta, rope_layout=layout, partial_rotary_factor=factor
    ), record


class NeoxMapper:
    """:class:`octlm.export.hf_common.Mapper` for ``GPTNeoXForCausalLM``."""

    model_type = MODEL_TYPE
    architecture = "GPTNeoXForCausalLM"
    vocab_tensors = ("embed_in.weight", "lm_head.weight", "embed_out.weight")

    def check(self, config: DecoderConfig, scaling: RopeScaling | None) -> None:
        check_config(config)
        scaling_parameters(scaling, config)

    def hf_config(self, model: Decoder, eot_id: int) -> dict:
        return neox_config(model, eot_id)

    def to_hf_state(self, model: Decoder) -> dict[str, torch.Tensor]:
        """``model``'s weights under GPTNeoXForCausalLM's names, the fused rows reordered (``lm_head`` only when
        untied)."""
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        rows = qkv_rows(model.config)
        for i in range(model.config.n_layers):
            for p in ("weight", "bias"):
                state[f"blocks.{i}.attn.qkv.{p}"] = state[f"blocks.{i}.attn.qkv.{p}"][rows]
        # embed_out: the name transformers itself saves the head under, which its 4.x versions also read
        head = {"embed_out.weight": state["lm_head.weight"]} if model.config.untied_head else {}
        return {theirs: state[ours].contiguous() for ours, theirs in name_map(model.config.n_layers)} | head

    def import_config(self, hf: dict, source: Path) -> tuple[DecoderConfig, dict]:
        return decoder_config(hf, source)

    def from_hf_state(
        self, tensors: dict[str, torch.Tensor], config: DecoderConfig, extra: dict, source: Path
    ) -> dict[str, torch.Tensor]:
        """GPT-NeoX tensors as an octlm state dict; a stored head (``lm_head`` or the older ``embed_out``) must be the
        token table, or with ``config.untied_head`` be there (:func:`~octlm.export.hf_common.check_state`)."""
        named = {k: v for k, v in tensors.items() if not k.endswith((".attention.bias", ".attention.masked_bias"))}
        head_name = next((k for k in ("lm_head.weight", "embed_out.weight") if k in named), "lm_head.weight")
        head = named.pop(head_name, None)
        out = take_tensors(named, name_map(config.n_layers), source)
        order = torch.argsort(qkv_rows(config))
        for i in range(config.n_layers):
            for p in ("weight", "bias"):
                key = f"blocks.{i}.attn.qkv.{p}"
                if out[key].shape[0] == order.shape[0]:  # a wrong shape is named by check_state
                    out[key] = out[key][order].contiguous()
        return check_state(out, head, head_name, "gpt_neox.embed_in", config, source)


__all__ = [
    "NeoxMapper",
    "decoder_config",
    "name_map",
    "neox_config",
    "qkv_rows",
]
