"""``octlm export-hf``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-hf",
        help="write a learned-position run as a Hugging Face transformers GPT-2 checkpoint",
        formatter_class=Formatter,
        description="Write RUN_DIR as a GPT-2 checkpoint in OUT_DIR (config.json, model.safetensors with the head tied,\n"
        "tokenizer.json, tokenizer_config.json) that GPT2LMHeadModel.from_pretrained(OUT_DIR) loads, with the same logits.\n"
        "Only --position learned maps to GPT-2; rope, alibi, sinusoidal and none are refused.",
        epilog="example:\n  octlm export-hf runs/shakespeare hf/shakespeare\n"
        "  python -c \"from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained('hf/shakespeare')\"",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run folder made by octlm train (or import-hf)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="folder to write the GPT-2 checkpoint to")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR when it already holds a checkpoint")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.hf import export_hf

    result = export_hf(args.run_dir, args.out_dir, args.overwrite)
    report.result(result, f"wrote {', '.join(result['files'])} to {result['out_dir']}/ ({result['parameters']:,} parameters); "
                  f"load it with GPT2LMHeadModel.from_pretrained({result['out_dir']!r})")
    return 0
