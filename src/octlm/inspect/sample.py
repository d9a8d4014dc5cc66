"""Sampling text from a model: ``octlm sample`` (:func:`sample`) and the end-of-training report
(:func:`sample_from`)."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch

from octlm.data.tokenizer import Tokenizer
from octlm.declare import REQUIRED, at_least, finite, option, same_as
from octlm.errors import OctlmError
from octlm.model import Decoder
from octlm.model.positions import facts_of
from octlm.report import Reporter, memory_size
from octlm.run.scaling import RopeScalingOptions, apply_rope_scaling
from octlm.train.options import TrainOptions


def _check_utf8(prompt: str) -> None:
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        # argv bytes that are not UTF-8 arrive as lone surrogates (PEP 383)
        raise OctlmError(
            f"--prompt is not valid UTF-8 (at character {err.start}); pass the prompt as UTF-8 text"
        ) from None


@dataclass
class SampleOptions:
    """Everything ``octlm sample`` takes."""

    run: str = option(REQUIRED, "run folder made by octlm train", metavar="RUN_DIR")
    prompt: str = option("", "text to continue (empty: start a new document)", check=_check_utf8)
    max_new_tokens: int = option(200, "tokens to generate", bounds=at_least(0))
    temperature: float = option(0.8, "softmax temperature (0: greedy)", bounds=finite(note="(0: greedy)"))
    top_k: int = option(
        40,
        "sample among the k most likely tokens, exactly k: of tokens tied with the k-th, the lowest ids (0: all)",
        bounds=at_least(0, "(0 means all tokens)"),
    )
    num_samples: int = option(1, "independent samples to draw", bounds=at_least(1))
    seed: int = same_as(TrainOptions, "seed", help="random seed")
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")
    rope_scaling: str | None = same_as(RopeScalingOptions, "rope_scaling")
    rope_factor: float | None = same_as(RopeScalingOptions, "rope_factor")
    no_cache: bool = option(False, "recompute the whole sequence at every step (slow; for comparison)")
    cache_window: int | None = option(
        None,
        "decode with a cache of the last W tokens only, "
        "placed at positions within the cache (StreamingLLM; --cache-sinks + W at most the run's context length; "
        "RoPE, ALiBi and the other schemes acting inside attention)",
        bounds=at_least(1, "tokens"),
        metavar="W",
    )
    cache_sinks: int = option(
        0,
        "with --cache-window: also keep the first S tokens, the attention sinks (Xiao et al. 2023 use 4)",
        bounds=at_least(0, "tokens"),
        metavar="S",
    )


def sample_from(
    model: Decoder,
    tokenizer: Tokenizer,
    prompt: str,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    device: torch.device,
) -> str:
    """Generate ``max_new_tokens`` after ``prompt`` (after ``<|endoftext|>`` when empty); returns only the new text."""
    ids = tokenizer.encode(prompt) if prompt else [tokenizer.eot_id]
    generator = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        out = model.generate(
            torch.tensor([ids], device=device), max_new_tokens, temperature, top_k, generator=generator
        )
    finally:
        model.train(was_training)
    return tokenizer.decode(out[0, len(ids) :].tolist())


def check_bias_memory(model: Decoder, length: int, device: torch.device) -> None:
    """Refuse a sequence whose attention score bias would not fit in memory, instead of failing inside torch.

    A score bias (ALiBi's, for one) grows with the length squared; the
    scheme estimates it (``PositionScheme.score_bias_bytes``).

    Raises:
        OctlmError: when the bias for ``length`` tokens exceeds the memory this process may take
            (:func:`octlm.train.memory_limit.memory_limit`).
    """
    from octlm.train.memory_limit import memory_limit

    need = model.positions.score_bias_bytes(model.config.n_heads, length)
    if not need:
        return
    limit = memory_limit(device)
    if limit is not None and need > limit.n_bytes:
        longest = int((limit.n_bytes * length**2 / need) ** 0.5)
        label = facts_of(model.positions).label
        raise OctlmError(
            f"the prompt plus --max-new-tokens is {length:,} tokens; {label}'s bias for that length "
            f"needs about {memory_size(need)}, more than {limit.describe()}: keep it under {longest:,} tokens"
        )


def _show(text: str) -> None:
    """Print generated text at once, its control characters escaped (a barely trained model emits them)."""
    from octlm.data.token_display import printable_text

    sys.stdout.write(printable_text(text))
    sys.stdout.flush()


def _show_token(stream, token: torch.Tensor) -> None:
    """``on_token`` of :meth:`Decoder.generate`: print what the new token [1, 1] made final."""
    _show(stream.push(int(token[0, 0])))


#: Printed between two samples.
SEPARATOR = "\n" + "-" * 60 + "\n"


def _draw(
    model: Decoder, tokenizer: Tokenizer, ids: list[int], opts: SampleOptions, device: torch.device, streaming: bool
) -> list[str]:
    """``opts.num_samples`` continuations of ``ids``; each piece is printed as it comes when ``streaming``."""
    from octlm.data.token_display import TextStream

    generator = torch.Generator(device=device).manual_seed(opts.seed)
    samples = []
    try:
        for n in range(opts.num_samples):
            stream = TextStream(tokenizer)
            if streaming:
                _show((SEPARATOR if n else "") + opts.prompt)
            out = model.generate(
                torch.tensor([ids], device=device),
                opts.max_new_tokens,
                opts.temperature,
                opts.top_k or None,
                not opts.no_cache,
                generator=generator,
                on_token=functools.partial(_show_token, stream) if streaming else None,
                cache=_stream_cache(model, opts),
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
    return samples


def _stream_cache(model: Decoder, opts: SampleOptions):
    """A new :class:`~octlm.model.streaming.StreamingCache` for ``--cache-window``, or ``None`` (the ordinary cache)."""
    from octlm.model.streaming import StreamingCache

    return None if opts.cache_window is None else StreamingCache(len(model.blocks), opts.cache_sinks, opts.cache_window)


def check_cache_options(model: Decoder, opts: SampleOptions) -> None:
    """Refuse ``--cache-window`` and ``--cache-sinks`` where they cannot work (as
    :func:`~octlm.model.streaming.check_streaming` says).

    Raises:
        OctlmError: naming the flag and the fix.
    """
    from octlm.model.streaming import check_streaming

    if opts.cache_window is None:
        if opts.cache_sinks:
            raise OctlmError(
                f"--cache-sinks {opts.cache_sinks} needs --cache-window W (the recent tokens kept beside them)"
            )
        return
    if opts.no_cache:
        raise OctlmError("--cache-window decodes with a cache and --no-cache without one; choose one")
    if opts.rope_scaling is not None:
        # The cache places its tokens at 0 .. sinks + window - 1, inside T: a scaling can only move trained positions.
        raise OctlmError(
            f"--rope-scaling {opts.rope_scaling} with --cache-window: the streaming cache keeps every position below "
            f"the {model.config.context_length} tokens trained on, so the scaling cannot act past them and only moves "
            "positions the model knew; drop --rope-scaling, or decode without --cache-window"
        )
    try:
        check_streaming(model, opts.cache_sinks, opts.cache_window)
    except ValueError as err:
        raise OctlmError(f"--cache-window {opts.cache_window}: {err}") from None


def sample(opts: SampleOptions, report: Reporter) -> dict:
    """Run ``octlm sample``: load the run, apply any RoPE scaling, draw the samples and report them.

    People see each piece as it is generated (Ctrl-C keeps what they saw);
    with ``--json`` or ``--quiet`` only the finished result is printed.
    Returns the result dict (prompt, samples, prompt_tokens, use_cache, rope_scaling).

    Raises:
        OctlmError: for an option out of range, a missing or damaged run, a
            RoPE scaling the model cannot take, or a length whose score bias
            would not fit in the device's memory.
    """
    from octlm.data.token_display import printable_text
    from octlm.declare import check_fields
    from octlm.run.load import load_run
    from octlm.train.device import resolve_device

    check_fields(opts)
    device = resolve_device(opts.device)
    model, tokenizer = load_run(opts.run, device)
    apply_rope_scaling(model, opts.rope_scaling, opts.rope_factor)
    check_cache_options(model, opts)
    ids = tokenizer.encode(opts.prompt) if opts.prompt else [tokenizer.eot_id]
    limit = model.max_length
    if limit is not None and len(ids) > limit:
        report.warn(f"the prompt is {len(ids)} tokens; this learned-position model sees only its last {limit}")
    length = len(ids) + opts.max_new_tokens
    check_bias_memory(
        model, length if opts.cache_window is None else min(length, opts.cache_sinks + opts.cache_window), device
    )
    streaming = not (report.json_mode or report.quiet)
    samples = _draw(model, tokenizer, ids, opts, device, streaming)
    text = None if streaming else printable_text(SEPARATOR.join(opts.prompt + s for s in samples))
    scaling = getattr(model.positions, "scaling", None)
    result = {
        "prompt": opts.prompt,
        "samples": samples,
        "prompt_tokens": len(ids),
        "use_cache": not opts.no_cache,
        "rope_scaling": None
        if scaling is None
        else {"method": scaling.method, "factor": scaling.factor, "original_length": scaling.original_length},
    }
    if opts.cache_window is not None:
        result.update(cache_window=opts.cache_window, cache_sinks=opts.cache_sinks)
    report.result(result, text)
    return result


__all__ = ["SampleOptions", "check_bias_memory", "sample", "sample_from"]
