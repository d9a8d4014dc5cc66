"""What every transformers architecture mapper shares: the error, the block checks, the tensor checks.

A mapper (:mod:`octlm.export.hf_gpt2`, :mod:`octlm.export.hf_neox`) translates one
transformers ``model_type`` both ways. :mod:`octlm.export.hf` picks it by the
``hf_model_type`` a position scheme names on export, and by the checkpoint's
``model_type`` on import.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

import torch

from octlm.errors import OctlmError
from octlm.model import Decoder, DecoderConfig
from octlm.model.attention_recipes import NO_SCALE
from octlm.model.token_vectors import PLAIN

#: octlm activation -> transformers activation name written on export (both are ACT2FN keys).
EXPORT_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
#: transformers activation name -> octlm activation accepted on import.
IMPORT_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
#: octlm's LayerNorms use torch's default eps.
LAYER_NORM_EPS = 1e-5


class InteropError(OctlmError):
    """A model or checkpoint has no faithful form on the other side; the message says which option."""


class Mapper(Protocol):
    """One transformers architecture, both ways.

    ``import_config`` returns the octlm config and what the run folder records
    beside it (e.g. a RoPE scaling, which octlm applies at run time).
    """

    model_type: str
    architecture: str
    #: endings of the names of the tensors with one row per token (the token table, a stored head)
    vocab_tensors: tuple[str, ...]

    def check(self, config: DecoderConfig, scaling: object | None) -> None: ...
    def hf_config(self, model: Decoder, eot_id: int) -> dict: ...
    def to_hf_state(self, model: Decoder) -> dict[str, torch.Tensor]: ...
    def import_config(self, hf: dict, source: Path) -> tuple[DecoderConfig, dict]: ...
    def from_hf_state(
        self, tensors: dict[str, torch.Tensor], config: DecoderConfig, extra: dict, source: Path
    ) -> dict[str, torch.Tensor]: ...


def refusal(hf: dict, source: Path, key: str, why: str, default: object = None) -> InteropError:
    """The error for a config key octlm cannot compute alike: ``SOURCE: key=value: why; ...``."""
    return InteropError(f"{source}: {key}={hf.get(key, default)!r}: {why}; octlm cannot represent this model")


def import_block(
    hf: dict, source: Path, d_model: int, activation: tuple[str, str], eps_key: str, width_key: str
) -> str:
    """Check what octlm's block fixes (MLP width 4 x d_model, LayerNorm eps, GELU kind); return octlm's activation.

    Each architecture names these keys its own way, hence the key arguments;
    ``activation`` is the activation key and the architecture's default for it.

    Raises:
        InteropError: naming the key whose value octlm's block would compute differently.
    """
    activation_key, default = activation
    name = hf.get(activation_key, default)
    if name not in IMPORT_ACTIVATION:
        raise refusal(hf, source, activation_key, f"octlm's MLP computes {', '.join(IMPORT_ACTIVATION)}", default)
    if hf.get(width_key) not in (None, 4 * d_model):
        raise refusal(hf, source, width_key, f"octlm's MLP is 4 x hidden size = {4 * d_model} wide")
    if not math.isclose(hf.get(eps_key, LAYER_NORM_EPS), LAYER_NORM_EPS, rel_tol=1e-9):
        raise refusal(hf, source, eps_key, f"octlm's LayerNorms use {LAYER_NORM_EPS}", LAYER_NORM_EPS)
    return IMPORT_ACTIVATION[name]


def export_activation(config: DecoderConfig, architecture: str) -> str:
    """The transformers activation name of ``config.activation``; ``InteropError`` when it has none."""
    if config.activation not in EXPORT_ACTIVATION:
        raise InteropError(
            f"activation={config.activation!r} has no {architecture} name; it takes {' or '.join(EXPORT_ACTIVATION)}"
        )
    return EXPORT_ACTIVATION[config.activation]


def first_layer_refusal(config: DecoderConfig) -> str | None:
    """Why no architecture export-hf writes computes ``config``'s first layer alike, or ``None``: a norm or scale of
    the token rows, a smear gate, or the embedding added back before each block (:mod:`octlm.model.token_vectors`)."""
    if config.embedding_norm != PLAIN:
        other = (
            "BLOOM's embedding LayerNorm comes with ALiBi and tanh GELU, which octlm does not write"
            if config.embedding_norm == "norm"
            else "no transformers architecture puts the token rows on the unit sphere"
        )
        return (
            f"embedding_norm={config.embedding_norm!r}: GPT-2, GPT-NeoX, Llama, SmolLM3, Qwen3 and GPT-OSS pass the "
            f"token rows to the first block as they are ({other}; train without --embedding-norm to export)"
        )
    if config.embedding_scale != PLAIN:
        return (
            f"embedding_scale={config.embedding_scale!r}: Gemma multiplies the token rows by sqrt(hidden_size), but "
            "with its own RMSNorm (1 + gain) and GeGLU MLP, which octlm does not write, and the architectures it "
            "writes scale nothing (train without --embedding-scale to export)"
        )
    if config.smear_gate:
        return (
            "smear_gate=True: no transformers architecture adds the previous token's row to each row "
            "(train without --smear-gate to export)"
        )
    if config.x0_skips:
        return (
            "x0_skips=True: no transformers architecture adds the embedding back before each block "
            "(train without --x0-skips to export)"
        )
    if config.bigram_rows:
        return (
            f"bigram_rows={config.bigram_rows}: no transformers architecture adds a hashed bigram table to the token "
            "rows (train without --bigram-rows to export)"
        )
    return None


def recipe_refusal(config: DecoderConfig) -> str | None:
    """Why no architecture export-hf writes computes a training recipe of ``config`` alike, whatever the block, or
    ``None``: one of :func:`first_layer_refusal`'s, a length-scaled logit, randomized positions, a document mask,
    learned sinks or the output gate."""
    if why := first_layer_refusal(config):
        return why
    if config.attention_scale != NO_SCALE:
        return (
            f"attention_scale={config.attention_scale!r}: transformers' GPT-2, GPT-NeoX, Llama, SmolLM3 and Qwen3 "
            "never scale the logits with the length (Qwen's LogN-Scaling lives in its own remote code, Llama 4's "
            "temperature tuning is another formula)"
        )
    if config.randomize_positions > 1:
        return (
            f"randomize_positions={config.randomize_positions}: octlm places a sequence of n tokens at n sorted "
            f"positions drawn from 0 .. {config.randomize_positions} x context_length - 1 (one draw per length, as it "
            "trained), transformers at 0 .. n - 1, which this model almost never trained on "
            "(train without --randomize-positions to export)"
        )
    if config.document_mask:
        return (
            "document_mask: transformers' architectures attend across <|endoftext|> and do not restart positions there"
        )
    return attention_refusal(config)


def attention_refusal(config: DecoderConfig) -> str | None:
    """Why no architecture export-hf writes carries the run's learned sinks, output gate, Canon layers
    (:mod:`octlm.model.canon`) or key offset (:mod:`octlm.model.key_offset`), or ``None``; sinks with Llama's block go
    to GPT-OSS (:mod:`octlm.export.hf_gpt_oss`)."""
    if config.attention_sinks and config.block != "llama":
        return (
            f"attention_sinks=True with block={config.block!r}: GPT-OSS, the transformers architecture with learned "
            "sinks (the same extra term in the softmax's denominator), has Llama's block (RMSNorm, SwiGLU), and "
            "GPT-2 and GPT-NeoX have no sinks (train with --block llama to export to GPT-OSS)"
        )
    if config.output_gate:
        return (
            "output_gate=True: Qwen3-Next has Qiu et al.'s sigmoid gate after attention, but always with its own "
            "QK-norm and zero-centred RMSNorm, partial RoPE and linear-attention and expert layers by default; octlm "
            "does not write that architecture, and GPT-2, GPT-NeoX, Llama, SmolLM3, Qwen3 and GPT-OSS have no gate "
            "(train without --output-gate to export)"
        )
    if config.canon:
        return (
            f"canon={config.canon!r}: no transformers architecture has Canon layers (the authors' LlamaCanon is "
            "remote code, not a transformers class; train without --canon to export)"
        )
    if config.value_embeddings:
        return (
            "value_embeddings=True: no transformers architecture adds token tables to the values (train without "
            "--value-embeddings to export)"
        )
    if config.key_offset:
        return (
            "key_offset=True: no transformers architecture moves part of each key to the next position (train "
            "without --key-offset to export)"
        )
    return None


def served_length(config: DecoderConfig, scaling: object | None) -> int:
    """Tokens the exported model is for: the trained ``context_length``, or under a RoPE scaling its target length.

    ``--rope-factor`` is the target length over the length trained on, so a
    scaling serves ``factor x original_length`` tokens (at least ``context_length``:
    an imported checkpoint may already say more). Written as the tokenizer's
    ``model_max_length``, so ``tokenizer(..., truncation=True)`` keeps what the model reads.
    """
    if scaling is None:
        return config.context_length
    return max(config.context_length, int(scaling.original_length * scaling.factor))


def build_config(source: Path, **fields) -> DecoderConfig:
    """``DecoderConfig(**fields)``, its ``ValueError`` turned into an ``InteropError`` naming ``source``."""
    try:
        return DecoderConfig(**fields)
    except ValueError as err:
        raise InteropError(f"{source}: {err}") from None


def take_tensors(named: dict[str, torch.Tensor], pairs: list[tuple[str, str]], source: Path) -> dict[str, torch.Tensor]:
    """Move ``named[theirs]`` to ``out[ours]`` for each pair; every tensor must be used exactly once.

    Raises:
        InteropError: naming a missing tensor, or the ones octlm has no place for.
    """
    out = {}
    for ours, theirs in pairs:
        if theirs not in named:
            raise InteropError(f"{source}: tensor {theirs} missing; the checkpoint does not match its config.json")
        out[ours] = named.pop(theirs)
    if named:
        raise InteropError(f"{source}: tensors octlm has no place for: {', '.join(sorted(named)[:5])}")
    return out


def check_state(
    out: dict[str, torch.Tensor],
    head: torch.Tensor | None,
    head_name: str,
    table_name: str,
    config: DecoderConfig,
    source: Path,
) -> dict[str, torch.Tensor]:
    """Check a converted state against ``config`` and return it as float32.

    ``head`` is the checkpoint's output head, if it stores one: with
    ``tie_word_embeddings`` true it must equal the token table (transformers
    would tie it and drop what is stored); with it false (``config.untied_head``)
    it must be there, and becomes ``lm_head.weight``.

    Raises:
        InteropError: naming a tensor with the wrong shape, a tied head that is not the token table, or an untied
            head that is missing.
    """
    if config.untied_head:
        if head is None:
            raise InteropError(f"{source}: tie_word_embeddings is false but the checkpoint stores no {head_name}")
        out = {**out, "lm_head.weight": head}
    elif head is not None and not torch.equal(head, out["token_embedding.weight"]):
        raise InteropError(
            f"{source}: {head_name} differs from the token table ({table_name}) while tie_word_embeddings is true; "
            "set it false in config.json to import the head as stored"
        )
    reference = Decoder(config).state_dict()
    for key, value in out.items():
        if tuple(value.shape) != tuple(reference[key].shape):
            raise InteropError(
                f"{source}: {key} has shape {list(value.shape)}, the config implies {list(reference[key].shape)}"
            )
    return {k: v.float() for k, v in out.items()}


def check_scaled_windows(config: DecoderConfig, scaling, architecture: str) -> None:
    """Refuse a RoPE scaling for a layout with RoPE window layers that octlm leaves unscaled (their window fits the
    length trained on) where ``architecture``, whose one rotary embedding serves every layer, would scale them too.

    Raises:
        InteropError: naming the layers, the scaling and the fix.
    """
    from octlm.model.scheme_catalog import SCHEMES

    if scaling is None:
        return
    kept = [
        str(i + 1)
        for i, spec in enumerate(config.layers)
        if spec.window is not None
        and spec.window <= scaling.original_length
        and scaling.method in SCHEMES[spec.position].scalings()
    ]
    if kept:
        raise InteropError(
            f"--rope-scaling {scaling.method}: octlm leaves the window layers ({', '.join(kept)}) unscaled, since "
            f"their windows fit the {scaling.original_length} tokens trained on, but {architecture} scales every "
            "RoPE layer, window layers included; export without --rope-scaling"
        )


__all__ = [
    "attention_refusal",
    "check_scaled_windows",
    "recipe_refusal",
    "EXPORT_ACTIVATION",
    "IMPORT_ACTIVATION",
    "LAYER_NORM_EPS",
    "InteropError",
    "Mapper",
    "build_config",
    "check_state",
    "export_activation",
    "import_block",
    "refusal",
    "served_length",
    "take_tensors",
]
