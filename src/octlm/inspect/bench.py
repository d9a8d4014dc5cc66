"""``octlm bench``: forward-pass time per context length and the nearest-neighbour diagnostic.

Without ``--run`` it builds an untrained Day-1 model, whose neighbours are
random by construction: that run proves the code path, not the model.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass

import torch

from octlm.data.token_display import argv_text, visible_token
from octlm.data.tokenizer import Tokenizer
from octlm.declare import at_least, check_fields, option, same_as
from octlm.errors import OctlmError
from octlm.inspect.diagnostics import embedding_diagnostic, format_diagnostic
from octlm.model import Decoder, DecoderConfig
from octlm.report import Reporter
from octlm.train.device import resolve_device
from octlm.train.options import TrainOptions

#: How a --token argument is read (parse_token), for the --help of every command that takes tokens.
TOKEN_RULE = "an argument of ASCII digits is a token id; any other argument is text that must be exactly one token"


@dataclass
class BenchOptions:
    """Everything ``octlm bench`` takes."""

    run: str | None = option(None, "run folder (default: an untrained Day-1 model)", metavar="RUN_DIR")
    token: list[str] = option(
        [], f"tokens whose neighbours to show (e.g. --token ' the' ROMEO 5): {TOKEN_RULE}", nargs="+", action="extend"
    )
    k: int = option(5, "neighbours to show", bounds=at_least(1))
    batch_size: int = same_as(TrainOptions, "batch_size", default=8, help="sequences per timed forward pass")
    repeats: int = option(5, "timed repeats per length (the median is reported)", bounds=at_least(1))
    device: str = same_as(TrainOptions, "device", default="cpu", help="auto, cpu, cuda, cuda:N or mps")
    seed: int = same_as(TrainOptions, "seed", default=0, help="seed of the untrained model")
    threads: int | None = same_as(TrainOptions, "threads")


def bench_lengths(model: Decoder) -> list[int]:
    """Context lengths to time: powers of two up to the table (or 4x the training length)."""
    limit = model.max_length or 4 * model.config.context_length
    lengths = [2**i for i in range(4, 16) if 2**i <= limit]
    if limit not in lengths:
        lengths.append(limit)
    return lengths


@torch.no_grad()
def time_forward(model: Decoder, length: int, batch_size: int, repeats: int, device: torch.device) -> float:
    """Median seconds of one forward pass on random ids [batch_size, length]."""
    ids = torch.randint(0, model.config.vocab_size, (batch_size, length), device=device)
    model(ids)  # warm-up: allocations, kernel selection
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(ids)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


#: A --token argument that is a token id: ASCII digits, with an optional minus
#: (so that -1 is refused as an id, not looked up as text). str.isdigit() is not
#: the rule: it accepts '²' and '١', which int() refuses or reads as another number.
TOKEN_ID = re.compile(r"-?[0-9]+")


def parse_token(spec: str, tokenizer: Tokenizer | None, vocab_size: int) -> int:
    """A ``--token`` value (``octlm bench``, ``octlm embeddings``): an id or one token's text.

    The rule: an argument of ASCII digits 0-9 (optionally after a minus) is a
    token id; every other argument is text that must encode to exactly one
    token (``' the'``, ``ROMEO``, ``'²'``). A token whose text is ASCII digits
    is therefore given by its id, which the output prints beside each token.

    Raises:
        OctlmError: for an id outside the vocabulary, text that is not
            exactly one token (or no tokenizer to encode it), or command-line
            bytes that are not UTF-8 (:func:`~octlm.data.token_display.argv_text`).
    """
    spec = argv_text(spec, "--token")  # the tokenizer takes no lone surrogate (TypeError)
    if TOKEN_ID.fullmatch(spec):
        token_id = int(spec)
        if not 0 <= token_id < vocab_size:
            raise OctlmError(f"--token {spec}: id outside the vocabulary [0, {vocab_size})")
        return token_id
    if tokenizer is None:
        raise OctlmError(f"--token {spec!r}: text needs a tokenizer; give --run RUN_DIR or a numeric id")
    ids = tokenizer.encode(spec)
    if not ids:
        raise OctlmError(f"--token {spec!r} is no token; give a token's text (' the') or its id (42)")
    if len(ids) != 1:
        # visible_token, not repr: a byte token's label already reads \xc2, which repr would double
        pieces = ", ".join(f"'{visible_token(tokenizer.token_str(i))}'" for i in ids)
        raise OctlmError(f"--token {spec!r} is {len(ids)} tokens ({pieces}); give one of them")
    return ids[0]


def bench(opts: BenchOptions, report: Reporter) -> dict:
    """Run ``octlm bench`` and report; returns the result dict.

    Raises:
        OctlmError: for an option out of range, a missing or damaged run, or
            a ``--token`` that is no token (:func:`parse_token`).
    """
    from octlm.run.load import load_run

    check_fields(opts)
    device = resolve_device(opts.device)
    if opts.run:
        model, tokenizer = load_run(opts.run, device)
        source = opts.run
    else:
        torch.manual_seed(opts.seed)
        model, tokenizer = Decoder(DecoderConfig()).to(device).eval(), None
        source = "untrained Day-1 model"
    extra = [parse_token(spec, tokenizer, model.config.vocab_size) for spec in opts.token]
    timings = []
    for length in bench_lengths(model):
        seconds = time_forward(model, length, opts.batch_size, opts.repeats, device)
        timings.append(
            {"context_length": length, "seconds": seconds, "tokens_per_second": opts.batch_size * length / seconds}
        )
        report.event("forward", None, **timings[-1])
    diagnostic = embedding_diagnostic(model, tokenizer, extra, opts.k)
    result = {
        "model": source,
        "position": model.config.position,
        "device": str(device),
        "batch_size": opts.batch_size,
        "forward": timings,
        "nearest": diagnostic,
    }
    lines = [f"{source}: position={model.config.position}, device={device}, batch {opts.batch_size}", "forward pass:"]
    lines += [
        f"  T={t['context_length']:>5}: {t['seconds'] * 1e3:8.2f} ms  {t['tokens_per_second']:>12,.0f} tokens/s"
        for t in timings
    ]
    lines += [
        "",
        format_diagnostic(diagnostic, "the layer layout" if model.config.layers else model.config.position),
    ]
    if not opts.run:
        lines.append("(untrained: the neighbours are random, which shows only that the code path works)")
    report.result(result, "\n".join(lines))
    return result


__all__ = ["TOKEN_RULE", "BenchOptions", "bench", "bench_lengths", "parse_token", "time_forward"]
