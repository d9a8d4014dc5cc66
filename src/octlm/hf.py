"""Moving decoders between octlm and Hugging Face transformers' GPT-2.

octlm's learned-position decoder is GPT-2's architecture (Radford et al. 2019):
pre-LayerNorm blocks (eps 1e-5), biases on every linear layer except the head,
one fused query/key/value projection, a 4x MLP with GELU, a final LayerNorm and
a head tied to the token table. The files differ only in names and in one
layout: GPT-2's ``Conv1D`` stores each weight as ``[in, out]`` where
``nn.Linear`` stores ``[out, in]``, so those weights are transposed on the way.

What maps to a GPT-2 ``config.json``:

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
``position`` learned      ``wpe``; every other scheme has no GPT-2 form
========================  =================================================

Only safetensors weights are read or written; a checkpoint that has only
``pytorch_model.bin`` (a pickle) is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from octlm.errors import OctlmError
from octlm.fileio import atomic_write, atomic_write_json
from octlm.model import Decoder, DecoderConfig
from octlm.positions import SCHEMES, gpt2_scheme
from octlm.run import RunFolder
from octlm.tokenizer import END_OF_TEXT, Tokenizer

#: octlm activation -> GPT-2 activation_function written on export.
EXPORT_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
#: GPT-2 activation_function -> octlm activation accepted on import.
IMPORT_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
LAYER_NORM_EPS = 1e-5

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


class InteropError(OctlmError):
    """A model or checkpoint has no faithful form on the other side; the message says which option."""


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
            table (``is_gpt2_table``) or an activation GPT-2 does not name.
    """
    if not SCHEMES[config.position].is_gpt2_table:
        raise InteropError(
            f"position={config.position!r} has no GPT-2 form: GPT-2 adds a learned position table (wpe) and nothing else; "
            f"export-hf takes runs trained with --position {gpt2_scheme()}"
        )
    if config.activation not in EXPORT_ACTIVATION:
        raise InteropError(f"activation={config.activation!r} has no GPT-2 name; GPT-2 takes gelu or gelu_tanh")
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.context_length,
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "n_inner": 4 * config.d_model,
        "activation_function": EXPORT_ACTIVATION[config.activation],
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "torch_dtype": "float32",
    }


def decoder_config(gpt2: dict, source: Path) -> DecoderConfig:
    """The octlm config of a GPT-2 ``config.json`` dict.

    Raises:
        InteropError: naming the key, for anything octlm's decoder would
            compute differently (another model type or activation, an MLP
            width other than 4 x n_embd, a LayerNorm eps other than 1e-5,
            unscaled or layer-scaled attention, cross-attention).
    """
    def refuse(key: str, why: str) -> InteropError:
        return InteropError(f"{source}: {key}={gpt2.get(key)!r}: {why}; octlm cannot represent this model")

    if gpt2.get("model_type") != "gpt2":
        raise refuse("model_type", "import-hf reads GPT-2 checkpoints (model_type 'gpt2')")
    activation = gpt2.get("activation_function", "gelu_new")
    if activation not in IMPORT_ACTIVATION:
        raise refuse("activation_function", f"octlm's MLP computes {', '.join(IMPORT_ACTIVATION)}")
    d_model = gpt2.get("n_embd", 768)
    if gpt2.get("n_inner") not in (None, 4 * d_model):
        raise refuse("n_inner", f"octlm's MLP is 4 x n_embd = {4 * d_model} wide")
    if not math.isclose(gpt2.get("layer_norm_epsilon", 1e-5), LAYER_NORM_EPS, rel_tol=1e-9):
        raise refuse("layer_norm_epsilon", f"octlm's LayerNorms use {LAYER_NORM_EPS}")
    if not gpt2.get("scale_attn_weights", True):
        raise refuse("scale_attn_weights", "octlm scales attention scores by 1/sqrt(head_dim)")
    if gpt2.get("scale_attn_by_inverse_layer_idx", False):
        raise refuse("scale_attn_by_inverse_layer_idx", "octlm scales every layer's scores alike")
    if gpt2.get("add_cross_attention", False):
        raise refuse("add_cross_attention", "octlm's decoder has no cross-attention")
    if not gpt2.get("tie_word_embeddings", True):
        raise refuse("tie_word_embeddings", "octlm's head is always the token table")
    try:
        return DecoderConfig(
            vocab_size=gpt2.get("vocab_size", 50257),
            context_length=gpt2.get("n_positions", 1024),
            d_model=d_model,
            n_heads=gpt2.get("n_head", 12),
            n_layers=gpt2.get("n_layer", 12),
            dropout=float(gpt2.get("resid_pdrop", 0.0)),
            activation=IMPORT_ACTIVATION[activation],
            position=gpt2_scheme(),
        )
    except ValueError as err:
        raise InteropError(f"{source}: {err}") from None


def to_gpt2_state(model: Decoder) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT2LMHeadModel's names and layouts (no ``lm_head.weight``: tied)."""
    state = model.state_dict()
    out = {}
    for ours, theirs, transposed in name_map(model.config.n_layers):
        out[theirs] = (state[ours].t() if transposed else state[ours]).detach().cpu().contiguous()
    return out


def from_gpt2_state(tensors: dict[str, torch.Tensor], config: DecoderConfig, source: Path) -> dict[str, torch.Tensor]:
    """GPT-2 tensors (with or without the ``transformer.`` prefix) as an octlm state dict.

    The causal-mask buffers old checkpoints carry (``attn.bias``,
    ``attn.masked_bias``) are dropped; a stored ``lm_head.weight`` must equal
    the token table.

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
    out = {}
    for ours, theirs, transposed in name_map(config.n_layers):
        if theirs not in named:
            raise InteropError(f"{source}: tensor {theirs} missing; the checkpoint does not match its config.json")
        value = named.pop(theirs)
        out[ours] = value.t().contiguous() if transposed else value
    if named:
        raise InteropError(f"{source}: tensors octlm has no place for: {', '.join(sorted(named)[:5])}")
    if head is not None and not torch.equal(head, out["token_embedding.weight"]):
        raise InteropError(f"{source}: lm_head.weight differs from the token table (wte); octlm's head is always tied to it")
    reference = Decoder(config).state_dict()
    for key, value in out.items():
        if tuple(value.shape) != tuple(reference[key].shape):
            raise InteropError(f"{source}: {key} has shape {list(value.shape)}, the config implies {list(reference[key].shape)}")
    return {k: v.float() for k, v in out.items()}


def export_hf(run_dir: str | Path, out_dir: str | Path, overwrite: bool = False) -> dict:
    """Write a learned-position run as a transformers GPT-2 checkpoint.

    ``out_dir`` gets ``config.json``, ``model.safetensors`` (the head tied:
    stored once, as ``wte``), ``generation_config.json``, and the tokenizer as
    ``tokenizer.json`` with ``tokenizer_config.json``, so
    ``GPT2LMHeadModel.from_pretrained(out_dir)`` and
    ``AutoTokenizer.from_pretrained(out_dir)`` load it.

    Returns a summary dict (``out_dir``, ``files``, ``parameters``).

    Raises:
        RunError: when the run cannot be loaded; InteropError for a run GPT-2
            cannot represent; OctlmError when ``out_dir`` holds files and
            ``overwrite`` is not set.
    """
    source, target = RunFolder(run_dir, "RUN_DIR"), RunFolder(out_dir, "OUT_DIR")
    if source.config_path.is_file():
        try:
            gpt2_config(DecoderConfig.from_dict(source.read_config()["model"]), 0)  # refuse before loading weights
        except (TypeError, ValueError):
            pass  # load_run names the problem
    model, tokenizer = source.load()
    config = gpt2_config(model.config, tokenizer.eot_id)
    _check_export_target(target, overwrite)
    with target.staged() as staging:
        atomic_write(staging / "model.safetensors", save(to_gpt2_state(model), metadata={"format": "pt"}))
        atomic_write_json(staging / "config.json", config)
        atomic_write_json(staging / "generation_config.json", {"bos_token_id": tokenizer.eot_id, "eos_token_id": tokenizer.eot_id})
        atomic_write(staging / "tokenizer.json", tokenizer.to_str())
        atomic_write_json(staging / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": END_OF_TEXT,
            "eos_token": END_OF_TEXT,
            "unk_token": END_OF_TEXT,
            "model_max_length": model.config.context_length,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            # transformers registers eos_token as an added token that it matches in
            # raw text; octlm reads a literal "<|endoftext|>" in a text as text.
            "split_special_tokens": True,
        })
    files = sorted(p.name for p in target.path.iterdir())
    return {"out_dir": str(out_dir), "files": files, "parameters": model.num_parameters(), "config": config}


def read_gpt2_tensors(in_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of a GPT-2 checkpoint folder: ``model.safetensors``, or the shards its index names.

    Raises:
        InteropError: when there is no safetensors file (``pytorch_model.bin``
            alone is refused: loading it would unpickle), or a file is damaged.
    """
    single, index = in_dir / "model.safetensors", in_dir / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as err:
            raise InteropError(f"{index}: not a safetensors index ({err})") from None
        files = [in_dir / name for name in sorted(set(weight_map.values()))]
    elif (in_dir / "pytorch_model.bin").is_file():
        raise InteropError(
            f"{in_dir / 'pytorch_model.bin'}: a pickle, which octlm never loads (unpickling can run code); convert it to "
            f"safetensors first, e.g. GPT2LMHeadModel.from_pretrained(IN).save_pretrained(OUT) with transformers"
        )
    else:
        raise InteropError(f"{in_dir}: no model.safetensors; is this a transformers GPT-2 checkpoint folder?")
    tensors = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                tensors.update({key: handle.get_tensor(key) for key in handle.keys()})
        except (SafetensorError, OSError) as err:
            raise InteropError(f"{path}: cannot read weights ({err}); the file is missing, truncated or corrupted") from None
    return tensors


def read_gpt2_tokenizer(in_dir: Path) -> Tokenizer:
    """The checkpoint's byte-level BPE: ``tokenizer.json``, else ``vocab.json`` + ``merges.txt``.

    Raises:
        InteropError: when neither is there or the vocabulary has no ``<|endoftext|>``.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    try:
        if (in_dir / "tokenizer.json").is_file():
            hf = HFTokenizer.from_file(str(in_dir / "tokenizer.json"))
        elif (in_dir / "vocab.json").is_file() and (in_dir / "merges.txt").is_file():
            hf = HFTokenizer(models.BPE.from_file(str(in_dir / "vocab.json"), str(in_dir / "merges.txt")))
            hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            hf.decoder = decoders.ByteLevel()
        else:
            raise InteropError(f"{in_dir}: no tokenizer.json (or vocab.json and merges.txt); octlm needs the model's tokenizer")
    except InteropError:
        raise
    except Exception as err:  # tokenizers raises plain Exception on a bad file
        raise InteropError(f"{in_dir}: cannot read the tokenizer ({err})") from None
    try:
        return Tokenizer(hf)
    except ValueError:
        raise InteropError(f"{in_dir}: the tokenizer has no {END_OF_TEXT} token, which octlm uses between documents") from None


def import_hf(in_dir: str | Path, run_dir: str | Path, overwrite: bool = False) -> dict:
    """Bring a local transformers GPT-2 checkpoint into an octlm run folder.

    The folder gets ``config.json``, ``model.safetensors`` and
    ``tokenizer.json``, which :func:`octlm.load_run`, ``octlm sample`` and
    ``octlm bench`` read. Nothing is downloaded.

    Raises:
        InteropError: for a checkpoint octlm cannot represent or read (the
            message names the key or file); OctlmError when ``run_dir`` holds
            files and ``overwrite`` is not set.
    """
    from octlm.run import CONFIG, TOKENIZER, WEIGHTS, save_weights

    in_dir, run_dir = Path(in_dir), Path(run_dir)
    if not in_dir.is_dir():
        raise InteropError(f"{in_dir}: no such folder; give a local GPT-2 checkpoint folder (config.json, model.safetensors, tokenizer)")
    config_path = in_dir / "config.json"
    try:
        gpt2 = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InteropError(f"{config_path}: missing; is {in_dir} a transformers checkpoint folder?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InteropError(f"{config_path}: not valid JSON ({err})") from None
    if not isinstance(gpt2, dict):
        raise InteropError(f"{config_path}: holds a JSON {type(gpt2).__name__}, not the object of a transformers config")
    config = decoder_config(gpt2, config_path)
    state = from_gpt2_state(read_gpt2_tensors(in_dir), config, in_dir)
    tokenizer = read_gpt2_tokenizer(in_dir)
    if tokenizer.vocab_size != config.vocab_size:
        raise InteropError(
            f"{in_dir}: the tokenizer has {tokenizer.vocab_size} tokens but config.json says vocab_size={config.vocab_size}; "
            f"octlm needs one row of the token table per token"
        )
    model = Decoder(config)
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    if run_dir.resolve() == in_dir.resolve():
        raise InteropError(f"RUN_DIR {run_dir} is IN_DIR; the import would replace the checkpoint it reads: choose another RUN_DIR")
    target = RunFolder(run_dir, "RUN_DIR")
    target.check_new_run(overwrite)
    with target.staged() as staging:
        save_weights(staging / WEIGHTS, model)
        tokenizer.save(staging / TOKENIZER)
        RunFolder(staging).write_config(config, {"imported_from": str(in_dir.resolve())})
    files = sorted([CONFIG, WEIGHTS, TOKENIZER])
    return {"run_dir": str(run_dir), "files": files, "parameters": model.num_parameters(), "model": config.to_dict()}


def _check_export_target(target: RunFolder, overwrite: bool) -> None:
    # Like a run folder: never replaced without --overwrite, and then only when it is an export.
    folder = target.path

    def refuse(found: RunFolder) -> str | None:
        if not overwrite:
            return None  # the plain "already holds files" comes first
        if found.is_octlm_run():
            return f"OUT_DIR {folder}: holds an octlm run, which export-hf never replaces; choose another OUT_DIR"
        if not found.config_path.is_file():
            return f"{folder}: holds files that are not a model checkpoint; refusing to overwrite them"
        return None

    target.check_target(overwrite, refuse, f"{folder}: already holds files; choose another folder or pass --overwrite to replace it")


__all__ = [
    "EXPORT_ACTIVATION",
    "IMPORT_ACTIVATION",
    "InteropError",
    "decoder_config",
    "export_hf",
    "from_gpt2_state",
    "gpt2_config",
    "import_hf",
    "name_map",
    "read_gpt2_tensors",
    "read_gpt2_tokenizer",
    "to_gpt2_state",
]
