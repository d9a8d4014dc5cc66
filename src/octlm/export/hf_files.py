"""The weight and tokenizer files of a transformers checkpoint folder, beside its ``config.json``.

Weights are read from safetensors only (``model.safetensors`` or the shards
its index names): a checkpoint that has only ``pytorch_model.bin``, a
pickle, is refused. The tokenizer is read from ``tokenizer.json`` (or
``vocab.json`` + ``merges.txt``) and written beside every export, so
``AutoTokenizer`` gives octlm's ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from octlm.data.tokenizer import END_OF_TEXT, Tokenizer
from octlm.export.hf_common import InteropError
from octlm.fileio import atomic_write, atomic_write_json


def write_tokenizer(out_dir: Path, tokenizer: Tokenizer, model_max_length: int) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json``: ``AutoTokenizer`` then gives octlm's ids.

    ``model_max_length`` is the length the exported model serves, where ``truncation=True`` cuts.
    """
    atomic_write(out_dir / "tokenizer.json", tokenizer.to_str())
    atomic_write_json(
        out_dir / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": END_OF_TEXT,
            "eos_token": END_OF_TEXT,
            "unk_token": END_OF_TEXT,
            "model_max_length": model_max_length,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            # transformers registers eos_token as an added token that it matches in
            # raw text; octlm reads a literal "<|endoftext|>" in a text as text.
            "split_special_tokens": True,
        },
    )


def read_hf_tensors(in_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers checkpoint folder: ``model.safetensors``, or the shards its index names.

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
            f"{in_dir / 'pytorch_model.bin'}: a pickle, which octlm never loads (unpickling can run code); convert it "
            "to safetensors first, e.g. AutoModelForCausalLM.from_pretrained(IN).save_pretrained(OUT) with transformers"
        )
    else:
        raise InteropError(f"{in_dir}: no model.safetensors; is this a transformers checkpoint folder?")
    tensors = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                tensors.update({key: handle.get_tensor(key) for key in handle.keys()})
        except (SafetensorError, OSError) as err:
            raise InteropError(
                f"{path}: cannot read weights ({err}); the file is missing, truncated or corrupted"
            ) from None
    return tensors


def read_hf_tokenizer(in_dir: Path) -> Tokenizer:
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
            raise InteropError(
                f"{in_dir}: no tokenizer.json (or vocab.json and merges.txt); octlm needs the model's tokenizer"
            )
    except InteropError:
        raise
    except Exception as err:  # tokenizers raises plain Exception on a bad file
        raise InteropError(f"{in_dir}: cannot read the tokenizer ({err})") from None
    try:
        return Tokenizer(hf)
    except ValueError:
        raise InteropError(
            f"{in_dir}: the tokenizer has no {END_OF_TEXT} token, which octlm uses between documents"
        ) from None


__all__ = ["read_hf_tensors", "read_hf_tokenizer", "write_tokenizer"]
