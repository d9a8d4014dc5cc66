"""``octlm export-hf``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.export.hf import ExportHfOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-hf",
        help="write a run as a Hugging Face transformers checkpoint "
        "(GPT-2, GPT-NeoX, Llama, SmolLM3, Qwen3 or GPT-OSS)",
        formatter_class=Formatter,
        description="Write RUN_DIR as a transformers checkpoint in OUT_DIR (config.json, "
        "model.safetensors with the head tied,\n"
        "tokenizer.json, tokenizer_config.json) that AutoModelForCausalLM.from_pretrained(OUT_DIR) "
        "loads with the same logits\n"
        "and AutoTokenizer with the same ids. With GPT-2's block, --position learned becomes "
        "GPT2LMHeadModel; rope (either\n"
        "layout, partial rotary) and none become GPTNeoXForCausalLM. With --block llama, RoPE in every layer becomes\n"
        "LlamaForCausalLM; a --layers layout of rope and none layers, windowed at one size, SmolLM3ForCausalLM;\n"
        "--qk-norm on every layer with RoPE (windowed at one size or not) Qwen3ForCausalLM (SmolLM3 and Qwen3 need\n"
        "transformers 4.53 or newer); --attention-sinks with RoPE in every layer (windowed at one size or not)\n"
        "GptOssForCausalLM, one expert per MLP (the Llama-block ones are export only). Refused with the reason:\n"
        "alibi and sinusoidal, RoPE bases or windows that differ by layer, logn layers, QK-norm on some layers,\n"
        "layouts in GPT-2's block, and runs trained with --randomize-positions, --document-mask or\n"
        "--attention-scale (transformers computes them otherwise).\n"
        "--rope-scaling writes a RoPE scaling into the checkpoint: "
        "linear, yarn and llama3 as transformers' own, ntk as a\n"
        "larger rope_theta; dynamic-ntk is refused (transformers keeps keys cached under older frequencies).",
        epilog="example:\n  octlm export-hf runs/shakespeare hf/shakespeare\n"
        "  octlm export-hf runs/rope hf/rope-x4 --rope-scaling yarn --rope-factor 4\n"
        '  python -c "from transformers import AutoModelForCausalLM; '
        "AutoModelForCausalLM.from_pretrained('hf/shakespeare')\"",
    )
    add_dataclass_options(p, ExportHfOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.export.hf import export_hf
    from octlm.train.device import torch_settings

    opts = options_from(args, ExportHfOptions)
    with torch_settings(opts.threads, False):
        result = export_hf(opts.run_dir, opts.out_dir, opts.overwrite, opts.rope_scaling, opts.rope_factor)
    report.result(
        result,
        f"wrote {', '.join(result['files'])} to {result['out_dir']}/ ({result['parameters']:,} parameters); "
        f"load it with {result['architecture']}.from_pretrained({result['out_dir']!r})",
    )
    return 0
