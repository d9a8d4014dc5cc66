"""``octlm sample``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
from octlm.errors import OctlmError
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sample",
        help="generate text from a trained run",
        formatter_class=Formatter,
        description="Generate text from a run. A learned-position model sees only the last context_length tokens\\n"
        "once the text is longer (the window slides); other schemes see all of it.",
    )
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="run folder made by octlm train")
    p.add_argument("--prompt", default="", help="text to continue (empty: start a new document)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=40, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples to draw")
    p.add_argument("--seed", type=int, default=1337, help="random seed")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    import torch

    from octlm.run import load_run
    from octlm.train import resolve_device

    if args.max_new_tokens < 0:
        raise OctlmError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if args.temperature < 0:
        raise OctlmError(f"--temperature must be >= 0, got {args.temperature}")
    if args.top_k < 0:
        raise OctlmError(f"--top-k must be >= 0 (0 means all tokens), got {args.top_k}")
    if args.num_samples < 1:
        raise OctlmError(f"--num-samples must be >= 1, got {args.num_samples}")
    device = resolve_device(args.device)
    model, tokenizer = load_run(args.run, device)
    ids = tokenizer.encode(args.prompt) if args.prompt else [tokenizer.eot_id]
    limit = model.max_length
    if limit is not None and len(ids) > limit:
        report.warn(f"the prompt is {len(ids)} tokens; this learned-position model sees only its last {limit}")
    generator = torch.Generator(device=device).manual_seed(args.seed)
    samples = []
    for _ in range(args.num_samples):
        out = model.generate(torch.tensor([ids], device=device), args.max_new_tokens, args.temperature, args.top_k or None, generator)
        samples.append(tokenizer.decode(out[0, len(ids) :].tolist()))
    text = ("\\n" + "-" * 60 + "\\n").join(args.prompt + s for s in samples)
    report.result({"prompt": args.prompt, "samples": samples, "prompt_tokens": len(ids)}, text)
    return 0
