"""Whether the text study's validation split holds its lengths: the checks that read the text, made before anything
is trained (:func:`octlm.studies.length.study.length_study`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from octlm.errors import OctlmError
from octlm.studies.length.options import RUNS

if TYPE_CHECKING:  # pragma: no cover
    from octlm.studies.length.options import LengthOptions


def check_eval_tokens(opts: LengthOptions) -> None:
    """Refuse an ``--eval-tokens`` (tokens per evaluation batch) below the longest evaluated length in tokens.

    A batch holds ``eval_tokens // L`` windows of L tokens; below one window the
    scorer falls back to one window per pass, much slower than the batch the
    user meant, so the value cannot have meant what it says.

    Raises:
        OctlmError: naming the value, the longest length (multiplier x ``--train-length``) and the fix.
    """
    longest_m = max(opts.resolved().multipliers)  # with --extend-to, whose fine-tunes are scored too
    longest = longest_m * opts.train_length
    if opts.eval_tokens < longest:
        raise OctlmError(
            f"--eval-tokens {opts.eval_tokens} is below {longest}, the longest evaluated window ({longest_m} x "
            f"--train-length {opts.train_length}): it is the batch size of evaluation in tokens, and a batch holds "
            f"whole windows; give --eval-tokens {longest} or more (default 8192), or lower --multipliers"
        )


def validation_tokens(opts: LengthOptions) -> int:
    """Tokens in the validation split, read, split and tokenized as :func:`octlm.train.corpus.prepare_corpus` does.

    Costs one tokenizer training (under a second for tinyshakespeare), which
    is what lets the study refuse a too-long evaluation length before it
    trains anything.
    """
    from octlm.data.tokens import encode_stream
    from octlm.train.corpus import split_and_tokenize

    # Every model of the study reads the same text; only the text options matter here, not the folder.
    text = split_and_tokenize(opts.train_options(opts.schemes[0], Path(RUNS)))
    return len(encode_stream(text.tokenizer, text.val_texts))


def check_validation_length(n_tokens: int, opts: LengthOptions) -> int:
    """The number of windows of the longest evaluation length in ``n_tokens`` validation tokens (>= 1).

    Raises:
        OctlmError: when not even one window (longest length + 1 tokens) fits,
            naming the longest multiplier the text supports.
    """
    T, longest_m = opts.train_length, max(opts.multipliers)
    longest = longest_m * T
    n_windows = (n_tokens - 1) // longest
    if n_windows >= 1:
        return n_windows
    supported = (n_tokens - 1) // T
    fix = (
        f"lower --multipliers to at most {supported} (the longest length this text supports is "
        f"{supported * T} tokens), "
        if supported >= 1
        else "lower --train-length, "
    )
    raise OctlmError(
        f"--multipliers {longest_m}: the validation split holds {n_tokens} tokens, fewer than one window of "
        f"{longest + 1} for "
        f"the longest length ({longest_m} x {T}); {fix}give more text or raise --val-fraction (now {opts.val_fraction})"
    )


__all__ = ["check_eval_tokens", "check_validation_length", "validation_tokens"]
