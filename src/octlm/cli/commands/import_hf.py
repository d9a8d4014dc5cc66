"""``octlm import-hf``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.export.hf import ImportHfOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import-hf",
        help="bring a local Hugging Face transformers GPT-2 or GPT-NeoX checkpoint into an octlm run folder",
        formatter_class=Formatter,
        description="Read a local GPT-2 or GPT-NeoX checkpoint folder (config.json, model.safetensors, "
        "tokenizer.json or\n"
        "vocab.json + merges.txt) and write an octlm run folder that octlm sample and octlm bench read.\n"
        "GPT-2 becomes --position learned, GPT-NeoX rope (half layout; interleaved if octlm exported it) or, with\n"
        "partial_rotary_factor 0, none. A linear, yarn or llama3 rope scaling is recorded in the run's "
        "config.json and printed:\n"
        "pass it to octlm sample as --rope-scaling/--rope-factor.\n"
        "A token table padded past the tokenizer's tokens (to a multiple of 64, as Pythia's) loses its padding rows.\n"
        "Nothing is downloaded; pytorch_model.bin (a pickle) is refused. Configs octlm cannot compute\n"
        "exactly (another MLP width, LayerNorm eps, attention scaling, untied head, parallel residual, another rope\n"
        "type) are refused by name.",
        epilog="example:\n  octlm import-hf ~/models/gpt2 runs/gpt2 && octlm bench --run runs/gpt2 --token ' the'",
    )
    add_dataclass_options(p, ImportHfOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.export.hf import import_hf
    from octlm.train.device import torch_settings

    opts = options_from(args, ImportHfOptions)
    with torch_settings(opts.threads, False):
        result = import_hf(opts.in_dir, opts.run_dir, opts.overwrite)
    if padding := result.get("padding_rows_dropped"):
        report.event(
            "padding",
            f"dropped {padding} padding rows of the token table (and of the head): {model_rows(result, padding)}",
            rows=padding,
        )
    model = result["model"]
    shape = (
        f"{model['n_layers']} layers, d_model {model['d_model']}, {model['n_heads']} heads, "
        f"context_length {model['context_length']}, vocab_size {model['vocab_size']}"
    )
    scaling = result.get("rope_scaling")
    extra = (
        f"; it was saved with RoPE scaling: sample with --rope-scaling {scaling['method']} --rope-factor "
        f"{scaling['factor']:g}"
        if scaling
        else ""
    )
    report.result(
        result,
        f"wrote {result['run_dir']}/ ({result['parameters']:,} parameters: {shape}, {result['architecture']}){extra}",
    )
    return 0


def model_rows(result: dict, padding: int) -> str:
    """Why the padding rows go, in words: the checkpoint's rows against the tokenizer's tokens."""
    tokens = result["model"]["vocab_size"]
    return (
        f"the checkpoint has {tokens + padding:,} rows for the tokenizer's {tokens:,} tokens; no token id reaches "
        "them, so the tokens' logits are unchanged"
    )
