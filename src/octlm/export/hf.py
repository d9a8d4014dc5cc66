"""Moving decoders between octlm and Hugging Face transformers.

With GPT-2's block (``block="gpt2"``, the default) each position scheme
names the transformers ``model_type`` that holds it
(``hf_model_type`` of its :class:`~octlm.model.positions.SchemeFacts`) or says why none does (``hf_refusal``);
with Llama's block (``block="llama"``) the layers' schemes, windows and
QK-norm pick one of three architectures (:mod:`octlm.export.hf_hybrid`).
One mapper per architecture translates config and tensors:

=================================  =====================================  ==========================
octlm run                          transformers                           mapper
=================================  =====================================  ==========================
learned                            ``GPT2LMHeadModel`` (gpt2)             :mod:`octlm.export.hf_gpt2`
rope                               ``GPTNeoXForCausalLM`` (gpt_neox)      :mod:`octlm.export.hf_neox`
none (NoPE)                        GPT-NeoX with partial_rotary_factor 0  :mod:`octlm.export.hf_neox`
prope (p-RoPE)                     GPT-NeoX over its turning pairs        :mod:`octlm.export.hf_neox`
llama block, rope                  ``LlamaForCausalLM`` (llama)           :mod:`octlm.export.hf_llama`
llama block, rope and none         ``SmolLM3ForCausalLM`` (smollm3)       :mod:`octlm.export.hf_llama`
layers, one window size
llama block, QK-norm, rope,        ``Qwen3ForCausalLM`` (qwen3)           :mod:`octlm.export.hf_llama`
one window size
llama block, --attention-sinks,    ``GptOssForCausalLM`` (gpt_oss), one   :mod:`octlm.export.hf_gpt_oss`
rope, one window size              expert per MLP
others                             refused, naming what and why           ``hf_refusal``,
                                                                          :mod:`octlm.export.hf_hybrid`
=================================  =====================================  ==========================

GPT-2 and GPT-NeoX go both ways; Llama, SmolLM3, Qwen3 and GPT-OSS are written only
(import-hf reads GPT-2 and GPT-NeoX). SmolLM3 needs transformers 4.53 or
newer, the ``hf`` extra's floor.

This module holds what they share: picking the mapper, the folder checks,
and ``export_hf``/``import_hf`` themselves; the weight and tokenizer files
are read and written by :mod:`octlm.export.hf_files`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save

from octlm.declare import REQUIRED, option, same_as
from octlm.errors import OctlmError
from octlm.export.hf_common import (
    EXPORT_ACTIVATION,
    IMPORT_ACTIVATION,
    InteropError,
    Mapper,
    recipe_refusal,
    served_length,
)
from octlm.export.hf_files import read_hf_tensors, read_hf_tokenizer, write_tokenizer
from octlm.export.hf_gpt2 import Gpt2Mapper, decoder_config, from_gpt2_state, gpt2_config, name_map, to_gpt2_state
from octlm.export.hf_gpt_oss import GptOssMapper
from octlm.export.hf_llama import FAMILY_MAPPERS, family_mapper
from octlm.export.hf_neox import NeoxMapper
from octlm.fileio import atomic_write, atomic_write_json
from octlm.model import Decoder, DecoderConfig
from octlm.model.layout import layout_text
from octlm.model.positions import SCHEMES, RopeScaling, facts_of
from octlm.run.folder import RunFolder
from octlm.run.load import load_run
from octlm.run.scaling import RopeScalingOptions
from octlm.train.options import TrainOptions

#: One mapper per transformers ``model_type`` octlm reads and writes; Llama's block is written only
#: (:data:`octlm.export.hf_llama.FAMILY_MAPPERS`).
MAPPERS: dict[str, Mapper] = {m.model_type: m for m in (Gpt2Mapper(), NeoxMapper())}


def exportable_schemes() -> list[str]:
    """The position schemes some transformers architecture holds."""
    return sorted(name for name, cls in SCHEMES.items() if facts_of(cls).hf_model_type in MAPPERS)


def mapper_for(config: DecoderConfig) -> Mapper:
    """The mapper that writes ``config``: by its block, then its layout or position scheme.

    GPT-2's block goes to GPT-2 or GPT-NeoX by the scheme; Llama's block to
    Llama, SmolLM3 or Qwen3 by what its layers do (:mod:`octlm.export.hf_hybrid`).

    Raises:
        InteropError: naming the option, and why, when no transformers architecture computes the run alike.
    """
    why = recipe_refusal(config) or _gpt2_block_refusal(config)
    if why:
        raise InteropError(f"{why}; octlm cannot export this run to a transformers architecture that computes it alike")
    if config.block != "gpt2":
        return GptOssMapper() if config.attention_sinks else family_mapper(config)
    facts = facts_of(config.position)
    if facts.hf_model_type not in MAPPERS:
        raise InteropError(
            f"position={config.position!r} has no transformers form: {facts.hf_refusal}; export-hf takes "
            f"runs trained with --position {' or '.join(exportable_schemes())}"
        )
    return MAPPERS[facts.hf_model_type]


def _gpt2_block_refusal(config: DecoderConfig) -> str | None:
    if config.block != "gpt2" or not (config.layers or config.qk_norm):
        return None
    said = ", ".join(
        part
        for part, present in (
            (f"layers={layout_text(config.layers)!r}", config.layers),
            ("qk_norm=True", config.qk_norm),
        )
        if present
    )
    return (
        f"{said} with GPT-2's block (block='gpt2'): transformers' GPT-2 and GPT-NeoX have one scheme in every layer, "
        "global, without QK-norm; the architectures with layouts and QK-norm (SmolLM3, Qwen3) have Llama's block "
        "(train with --block llama)"
    )


def _precheck(run_dir: Path, method: str | None, factor: float | None) -> None:
    # Refuse from config.json alone, before the weights are read; load_run names any other problem.
    source = RunFolder(run_dir, "RUN_DIR")
    if not source.config_path.is_file():
        return
    try:
        config = DecoderConfig.from_dict(source.read_config()["model"])
        scaling = RopeScaling(method, factor, config.context_length) if method and factor else None
    except (TypeError, ValueError, KeyError, OctlmError):
        return
    mapper_for(config).check(config, scaling)


@dataclass
class ExportHfOptions:
    """Everything ``octlm export-hf`` takes (the arguments of :func:`export_hf`)."""

    run_dir: str = option(REQUIRED, "run folder made by octlm train (or import-hf)", positional=True, metavar="RUN_DIR")
    out_dir: str = option(
        REQUIRED, "folder to write the transformers checkpoint to", positional=True, metavar="OUT_DIR"
    )
    overwrite: bool = option(False, "replace OUT_DIR when it already holds a checkpoint")
    rope_scaling: str | None = same_as(RopeScalingOptions, "rope_scaling")
    rope_factor: float | None = same_as(RopeScalingOptions, "rope_factor")
    threads: int | None = same_as(TrainOptions, "threads")


@dataclass
class ImportHfOptions:
    """Everything ``octlm import-hf`` takes (the arguments of :func:`import_hf`)."""

    in_dir: str = option(
        REQUIRED, "local transformers GPT-2 or GPT-NeoX checkpoint folder", positional=True, metavar="IN_DIR"
    )
    run_dir: str = option(REQUIRED, "octlm run folder to create", positional=True, metavar="RUN_DIR")
    overwrite: bool = option(False, "replace RUN_DIR when it already holds an octlm run")
    threads: int | None = same_as(TrainOptions, "threads")


#: What export-hf writes, all that ``--overwrite`` may replace in OUT_DIR.
EXPORT_FILES = frozenset(
    {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
)


def export_hf(
    run_dir: str | Path,
    out_dir: str | Path,
    overwrite: bool = False,
    rope_scaling: str | None = None,
    rope_factor: float | None = None,
) -> dict:
    """Write a run as a transformers checkpoint of the architecture that computes it (:func:`mapper_for`).

    ``out_dir`` gets ``config.json``, ``model.safetensors`` (the head tied:
    stored once, as the token table), ``generation_config.json``, and the
    tokenizer (:func:`octlm.export.hf_files.write_tokenizer`), so
    ``AutoModelForCausalLM`` and ``AutoTokenizer`` ``.from_pretrained(out_dir)``
    load it with octlm's logits and ids. ``rope_scaling``/``rope_factor`` (as ``octlm sample``
    takes them) write a RoPE scaling into the checkpoint where transformers
    computes that method alike.

    Returns a summary dict (``out_dir``, ``files``, ``parameters``,
    ``architecture``, ``config``).

    Raises:
        RunError: when the run cannot be loaded; InteropError for a run no
            transformers architecture represents (the message says why);
            OctlmError when ``out_dir`` holds files and ``overwrite`` is not
            set, or for a bad scaling option.
    """
    from octlm.run.scaling import apply_rope_scaling

    run_dir, target = Path(run_dir), RunFolder(out_dir, "OUT_DIR")
    _precheck(run_dir, rope_scaling, rope_factor)
    model, tokenizer = load_run(run_dir)
    mapper = mapper_for(model.config)
    apply_rope_scaling(model, rope_scaling, rope_factor)
    mapper.check(model.config, getattr(model.positions, "scaling", None))
    config = mapper.hf_config(model, tokenizer.eot_id)
    _check_export_target(target, overwrite)
    with target.staged() as staging:
        atomic_write(staging / "model.safetensors", save(mapper.to_hf_state(model), metadata={"format": "pt"}))
        atomic_write_json(staging / "config.json", config)
        atomic_write_json(
            staging / "generation_config.json", {"bos_token_id": tokenizer.eot_id, "eos_token_id": tokenizer.eot_id}
        )
        write_tokenizer(staging, tokenizer, served_length(model.config, getattr(model.positions, "scaling", None)))
    files = sorted(p.name for p in target.path.iterdir())
    return {
        "out_dir": str(out_dir),
        "files": files,
        "parameters": model.num_parameters(),
        "architecture": mapper.architecture,
        "config": config,
    }


def read_hf_config(in_dir: Path) -> dict:
    """The ``config.json`` object of a checkpoint folder.

    Raises:
        InteropError: when the folder or file is missing, or it is not a JSON object.
    """
    if not in_dir.is_dir():
        raise InteropError(
            f"{in_dir}: no such folder; give a local transformers checkpoint folder (config.json, "
            "model.safetensors, tokenizer)"
        )
    config_path = in_dir / "config.json"
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InteropError(f"{config_path}: missing; is {in_dir} a transformers checkpoint folder?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InteropError(f"{config_path}: not valid JSON ({err})") from None
    if not isinstance(hf, dict):
        raise InteropError(f"{config_path}: holds a JSON {type(hf).__name__}, not the object of a transformers config")
    if RunFolder(in_dir).kind() == "octlm run":
        raise InteropError(
            f"{in_dir}: this is an octlm run, not a transformers checkpoint; octlm reads it as it is "
            f"(`octlm sample --run {in_dir}`), and `octlm export-hf {in_dir} OUT_DIR` writes it as one"
        )
    if hf.get("model_type") in FAMILY_MAPPERS:
        raise InteropError(
            f"{config_path}: model_type={hf.get('model_type')!r}: import-hf reads {', '.join(sorted(MAPPERS))} "
            f"checkpoints; export-hf writes {hf['model_type']} (from a --block llama run) but import-hf does not read "
            "it back (the run that was exported is where to continue)"
        )
    if hf.get("model_type") not in MAPPERS:
        raise InteropError(
            f"{config_path}: model_type={hf.get('model_type')!r}: import-hf reads {', '.join(sorted(MAPPERS))} "
            f"checkpoints; octlm cannot represent this model"
        )
    return hf


def import_hf(in_dir: str | Path, run_dir: str | Path, overwrite: bool = False) -> dict:
    """Bring a local transformers checkpoint (GPT-2 or GPT-NeoX) into an octlm run folder.

    The folder gets ``config.json``, ``model.safetensors`` and
    ``tokenizer.json``, which :func:`octlm.load_run`, ``octlm sample`` and
    ``octlm bench`` read. Nothing is downloaded. A RoPE scaling the
    checkpoint applies is a run-time setting in octlm: it is recorded in the
    run's ``config.json`` (``train.rope_scaling``) and returned, for
    ``--rope-scaling``/``--rope-factor``. A token table padded past the
    tokenizer's tokens loses its padding rows (:func:`drop_padding_rows`);
    their count is recorded and returned as ``padding_rows_dropped``.

    Raises:
        InteropError: for a checkpoint octlm cannot represent or read (the
            message names the key or file), or a tokenizer with more tokens
            than the table has rows; OctlmError when ``run_dir`` holds
            files and ``overwrite`` is not set.
    """
    from octlm.model.weights import save_weights
    from octlm.run.folder import CONFIG, TOKENIZER, WEIGHTS

    in_dir, run_dir = Path(in_dir), Path(run_dir)
    hf = read_hf_config(in_dir)
    mapper = MAPPERS[hf["model_type"]]
    config, record = mapper.import_config(hf, in_dir / "config.json")
    tokenizer = read_hf_tokenizer(in_dir)
    tensors, padding = read_hf_tensors(in_dir), config.vocab_size - tokenizer.vocab_size
    if padding < 0:
        raise InteropError(
            f"{in_dir}: the tokenizer has {tokenizer.vocab_size} tokens but config.json says "
            f"vocab_size={config.vocab_size}; octlm needs one row of the token table per token"
        )
    if padding:
        tensors = drop_padding_rows(tensors, mapper.vocab_tensors, config.vocab_size, tokenizer.vocab_size)
        config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
        record = {**record, "padding_rows_dropped": padding}
    state = mapper.from_hf_state(tensors, config, record, in_dir)
    model = Decoder(config)
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    if run_dir.resolve() == in_dir.resolve():
        raise InteropError(
            f"RUN_DIR {run_dir} is IN_DIR; the import would replace the checkpoint it reads: choose another RUN_DIR"
        )
    target = RunFolder(run_dir, "RUN_DIR")
    target.check_new_run(overwrite)
    with target.staged() as staging:
        save_weights(staging / WEIGHTS, model)
        tokenizer.save(staging / TOKENIZER)
        RunFolder(staging).write_config(
            config, {"imported_from": str(in_dir.resolve()), "architecture": mapper.architecture, **record}
        )
    files = sorted([CONFIG, WEIGHTS, TOKENIZER])
    return {
        "run_dir": str(run_dir),
        "files": files,
        "parameters": model.num_parameters(),
        "architecture": mapper.architecture,
        "model": config.to_dict(),
        **record,
    }


def drop_padding_rows(
    tensors: dict[str, torch.Tensor], names: tuple[str, ...], rows: int, tokens: int
) -> dict[str, torch.Tensor]:
    """``tensors`` with the token table and a stored head cut from ``rows`` rows to the tokenizer's ``tokens``.

    Checkpoints pad the table to a multiple of 64 or 128 for faster matrix
    products (Pythia: 50,304 rows for 50,277 tokens); no token id reaches a
    padding row, and the head's padding rows only add logits for ids no
    tokenizer gives, so the real tokens' logits are unchanged. ``names`` are
    the tensor name endings of the mapper's token-sized tensors
    (``Mapper.vocab_tensors``); a tensor of another row count is left for the
    shape check to name.
    """
    return {
        key: value[:tokens] if key.endswith(names) and value.dim() == 2 and value.shape[0] == rows else value
        for key, value in tensors.items()
    }


def _check_export_target(target: RunFolder, overwrite: bool) -> None:
    # Like a run folder: never replaced without --overwrite, and then only when it is an export.
    folder = target.path

    def refuse(found: RunFolder) -> str | None:
        if not overwrite:
            return None  # the plain "already holds files" comes first
        if found.is_octlm_run():
            return f"OUT_DIR {folder}: holds an octlm run, which export-hf never replaces; choose another OUT_DIR"
        if not found.config_path.is_file():
            return (
                f"OUT_DIR {folder}: holds files that are not a model checkpoint, which export-hf never replaces; "
                "choose another OUT_DIR"
            )
        return None

    target.check_target(
        overwrite,
        refuse,
        f"OUT_DIR {folder}: already holds files; choose another OUT_DIR or pass --overwrite to replace it",
        foreign=lambda found: [name for name in found.names() if name not in EXPORT_FILES],
    )


#: The names these functions had when GPT-2 was the only architecture.
read_gpt2_tensors, read_gpt2_tokenizer = read_hf_tensors, read_hf_tokenizer

__all__ = [
    "EXPORT_ACTIVATION",
    "IMPORT_ACTIVATION",
    "MAPPERS",
    "ExportHfOptions",
    "ImportHfOptions",
    "InteropError",
    "decoder_config",
    "export_hf",
    "exportable_schemes",
    "from_gpt2_state",
    "gpt2_config",
    "import_hf",
    "mapper_for",
    "name_map",
    "read_gpt2_tensors",
    "read_gpt2_tokenizer",
    "read_hf_config",
    "to_gpt2_state",
]
