"""``octlm sample``."""

from __future__ import annotations

import argparse
import functools
import sys

from octlm.cli import Formatter, add_common
from octlm.errors import OctlmError
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sample",
        help="generate text from a trained run",
        formatter_class=Formatter,
        description="Generate text from a run, with a key/value cache. A learned-position model sees only the last\n"
        "context_length tokens once the text is longer (the window slides); other schemes see all of it.\n"
        "A RoPE model can be stretched past its training length with --rope-scaling and --rope-factor.",
        epilog="example:\n  octlm sample --run runs/rope --max-new-tokens 1000 --rope-scaling yarn --rope-factor 8",
    )
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="run folder made by octlm train")
    p.add_argument("--prompt", default="", help="text to continue (empty: start a new document)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=40, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples to draw")
    p.add_argument("--seed", type=int, default=1337, help="random seed")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    add_rope_scaling_options(p)
    p.add_argument("--no-cache", action="store_true", help="recompute the whole sequence at every step (slow; for comparison)")
    add_common(p)
    p.set_defaults(func=run)


def _show(text: str) -> None:
    """Print generated text at once, its control characters escaped (a barely trained model emits them)."""
    from octlm.tokenizer import printable_text

    sys.stdout.write(printable_text(text))
    sys.stdout.flush()


def _show_token(stream, token) -> None:
    """``on_token`` of :meth:`Decoder.generate`: print what the new token [1, 1] made final."""
    _show(stream.push(int(token[0, 0])))


def check_bias_memory(model, length: int, device) -> None:
    """Refuse a sequence whose attention score bias would not fit in memory, instead of failing inside torch.

    A score bias (ALiBi's, for one) grows with the length squared; the
    scheme estimates it (``PositionScheme.score_bias_bytes``).
    """
    from octlm.device import device_memory_bytes

    need = model.positions.score_bias_bytes(model.config.n_heads, length)
    if not need:
        return
    total = device_memory_bytes(device)
    if total is not None and need > total:
        longest = int((total * length**2 / need) ** 0.5)
        raise OctlmError(
            f"the prompt plus --max-new-tokens is {length:,} tokens; {model.positions.label}'s bias for that length needs about "
            f"{need / 2**30:,.0f} GiB, more than this {device.type} has ({total / 2**30:.0f} GiB): keep it under {longest:,} tokens"
        )


def add_rope_scaling_options(p: argparse.ArgumentParser) -> None:
    """``--rope-scaling`` and ``--rope-factor``, shared by the commands that run a trained model."""
    from octlm.positions import ROPE_SCALINGS

    p.add_argument(
        "--rope-scaling", choices=list(ROPE_SCALINGS), default=None,
        help="run a RoPE model past its training length without training: linear position interpolation, "
        "NTK-aware base, dynamic NTK or YaRN (default: none, plain RoPE)",
    )
    p.add_argument(
        "--rope-factor", type=float, default=None,
        help="scale of --rope-scaling, >= 1: target length / training length (for dynamic-ntk the multiplier of "
        "current length / training length; default 1 there); required for linear, ntk and yarn",
    )


def apply_rope_scaling(model, method: str | None, factor: float | None) -> None:
    """Set ``--rope-scaling``/``--rope-factor`` on a loaded model.

    Raises:
        OctlmError: when the model is not a RoPE model, or the factor is
            missing or below 1.
    """
    if method is None:
        if factor is not None:
            raise OctlmError("--rope-factor needs --rope-scaling (linear, ntk, dynamic-ntk or yarn)")
        return
    if factor is None:
        if method != "dynamic-ntk":
            raise OctlmError(f"--rope-scaling {method} needs --rope-factor F (target length / training length, e.g. 4)")
        factor = 1.0
    try:
        model.set_rope_scaling(method, factor)
    except ValueError as err:
        raise OctlmError(f"--rope-scaling {method} --rope-factor {factor:g}: {err}") from None


def run(args: argparse.Namespace, report: Reporter) -> int:
    import torch

    from octlm.options import check_seed
    from octlm.run import load_run
    from octlm.tokenizer import TextStream, printable_text
    from octlm.device import resolve_device

    if args.max_new_tokens < 0:
        raise OctlmError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if not 0 <= args.temperature < float("inf"):
        raise OctlmError(f"--temperature must be a finite number >= 0 (0: greedy), got {args.temperature}")
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        # argv bytes that are not UTF-8 arrive as lone surrogates (PEP 383)
        raise OctlmError(f"--prompt is not valid UTF-8 (at character {err.start}); pass the prompt as UTF-8 text") from None
    if args.top_k < 0:
        raise OctlmError(f"--top-k must be >= 0 (0 means all tokens), got {args.top_k}")
    if args.num_samples < 1:
        raise OctlmError(f"--num-samples must be >= 1, got {args.num_samples}")
    check_seed(args.seed)
    device = resolve_device(args.device)
    model, tokenizer = load_run(args.run, device)
    apply_rope_scaling(model, args.rope_scaling, args.rope_factor)
    ids = tokenizer.encode(args.prompt) if args.prompt else [tokenizer.eot_id]
    limit = model.max_length
    if limit is not None and len(ids) > limit:
        report.warn(f"the prompt is {len(ids)} tokens; this learned-position model sees only its last {limit}")
    check_bias_memory(model, len(ids) + args.max_new_tokens, device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    # People see each piece as it is generated, so Ctrl-C keeps what they saw;
    # --json and --quiet print only the finished result.
    streaming = not (report.json_mode or report.quiet)
    separator = "\n" + "-" * 60 + "\n"
    samples = []
    try:
        for n in range(args.num_samples):
            stream = TextStream(tokenizer)
            if streaming:
                _show((separator if n else "") + args.prompt)
            prompt = torch.tensor([ids], device=device)
            out = model.generate(
                prompt, args.max_new_tokens, args.temperature, args.top_k or None, not args.no_cache, generator=generator,
                on_token=functools.partial(_show_token, stream) if streaming else None,
            )
            samples.append(tokenizer.decode(out[0, len(ids) :].tolist()))
            if streaming:
                _show(stream.finish())
    except KeyboardInterrupt:
        if streaming:
            _show("\n")  # the interrupted line ends, so the message after it starts a line of its own
        raise
    if streaming:
        _show("\n")
    text = None if streaming else printable_text(separator.join(args.prompt + s for s in samples))
    scaling = getattr(model.positions, "scaling", None)
    result = {
        "prompt": args.prompt,
        "samples": samples,
        "prompt_tokens": len(ids),
        "use_cache": not args.no_cache,
        "rope_scaling": None if scaling is None else {"method": scaling.method, "factor": scaling.factor, "original_length": scaling.original_length},
    }
    report.result(result, text)
    return 0
