"""The checks a run's options must pass before anything is read or written.

Each option's own range is checked from its declaration
(:func:`octlm.declare.check_fields`); what is checked here is how options go
together: a scheme option the chosen position scheme does not read, a Muon
option under AdamW, a warm-up not shorter than the run, a model shape
:class:`~octlm.model.DecoderConfig` refuses. :func:`check_options` runs them
all, naming the flag to change.
"""

from __future__ import annotations

from octlm.declare import check_fields, flag, flat_values, option_default, option_fields
from octlm.errors import OctlmError
from octlm.model.positions import SCHEMES
from octlm.train.init_from import check_scaling_options
from octlm.train.options import MUON_OPTIONS, SEED, TrainOptions, resolved_max_steps, resolved_warmup_steps


def scheme_options(position: str) -> tuple[set[str], set[str]]:
    """``(read, unread)``: the scheme options (``PositionScheme.reads`` of any scheme) scheme ``position`` reads, and
    the rest."""
    every = {name for cls in SCHEMES.values() for name in cls.reads}
    read = set(SCHEMES[position].reads) if position in SCHEMES else every
    return read, every - read


def check_scheme_options(opts) -> None:
    """Refuse a scheme option set away from its default for a scheme that does not read it (``--rope-layout`` with
    learned).

    Raises:
        OctlmError: naming the option, the scheme and the schemes that read it.
    """
    values, position = flat_values(opts), opts.model.position
    defaults = {f.name: option_default(f) for f in option_fields(type(opts))}
    for name in sorted(scheme_options(position)[1]):
        if name in defaults and values[name] != defaults[name]:
            names = [n for n, cls in SCHEMES.items() if name in cls.reads]
            readers = names[0] + " reads" if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]} read"
            raise OctlmError(
                f"{flag(name)} {values[name]} means nothing for --position {position}: only {readers} "
                f"it; drop {flag(name)}, or choose --position {names[0]}"
            )


def check_optimizer_options(opts) -> None:
    """Refuse a Muon option set away from its default when the run trains with AdamW alone.

    Raises:
        OctlmError: naming the option and the fix.
    """
    if opts.optimizer == "muon":
        return
    defaults = {f.name: option_default(f) for f in option_fields(type(opts))}
    for name in MUON_OPTIONS:
        if getattr(opts, name) != defaults[name]:
            raise OctlmError(
                f"{flag(name)} {getattr(opts, name)} means nothing with --optimizer {opts.optimizer}: "
                f"only Muon reads it; add --optimizer muon, or drop {flag(name)}"
            )


def check_weight_decay(opts) -> None:
    """Refuse a learning rate and decoupled weight decay whose product would zero or flip the decayed matrices.

    Decoupled decay (Loshchilov & Hutter 2019; torch's AdamW and Muon alike) scales a decayed matrix by
    ``1 - lr x wd`` each step, so ``lr x wd >= 1`` at the peak leaves nothing of the weights, or turns their sign,
    before the gradient's update; training then ends in NaN, whose message could only blame the learning rate.

    Raises:
        OctlmError: naming both flags, their product and the fix for either.
    """
    defaults = {f.name: option_default(f) for f in option_fields(TrainOptions)}
    pairs = [("learning_rate", "weight_decay")] + (
        [("muon_lr", "muon_weight_decay")] if opts.optimizer == "muon" else []
    )
    pairs += [("embedding_lr", "weight_decay")] if getattr(opts, "embedding_lr", None) is not None else []
    for rate, decay in pairs:
        lr, wd = getattr(opts, rate), getattr(opts, decay)
        if lr * wd >= 1:
            usual = "--learning-rate's" if defaults[rate] is None else f"{defaults[rate]:g}"
            raise OctlmError(
                f"{flag(rate)} {lr:g} x {flag(decay)} {wd:g} = {lr * wd:g}: decoupled weight decay scales each "
                f"decayed matrix by 1 - {lr * wd:g} per step at the peak, which zeroes it or flips its sign; keep "
                f"the product below 1 ({flag(decay)} below {1 / lr:g} at this rate, or {flag(rate)} below {1 / wd:g}; "
                f"the defaults are "
                f"{usual} and {defaults[decay]:g}, or {flag(decay)} 0 turns the decay off)"
            )


def check_options(opts: TrainOptions) -> None:
    """Reject option values that cannot work, naming the flag; nothing is read or written before this passes.

    Raises:
        OctlmError: for a value outside its declared bounds, a warm-up not
            shorter than the run, an unknown text encoding, a scheme option the
            chosen scheme does not read (:func:`check_scheme_options`), or a model shape
            :class:`~octlm.model.decoder.DecoderConfig` refuses (named by its flag:
            ``--d-model=30 is not divisible ...``).
    """
    for name, value, give in (
        ("--out", opts.out, "a folder for the run, e.g. runs/NAME"),
        ("--init-from", opts.init_from, "the run folder to start from"),
        ("--tokenizer", opts.tokenizer, "a tokenizer.json"),
    ):
        if value == "":  # argparse takes '' as a value, which would quietly mean '.' or nothing
            raise OctlmError(f"{name} got an empty path ''; give {give}, or leave {name} out")
    if opts.tokenizer and opts.init_from:
        raise OctlmError(
            f"--tokenizer {opts.tokenizer} with --init-from {opts.init_from}: a fine-tune keeps its source run's "
            "tokenizer, whose ids its token rows mean; drop --tokenizer"
        )
    vocab_default = option_default(next(f for f in option_fields(TrainOptions) if f.name == "vocab_size"))
    if opts.tokenizer and opts.vocab_size != vocab_default:
        raise OctlmError(
            f"--vocab-size {opts.vocab_size} with --tokenizer {opts.tokenizer}: the vocabulary is the file's; drop "
            "--vocab-size"
        )
    check_fields(opts)
    check_scheme_options(opts)
    check_optimizer_options(opts)
    check_weight_decay(opts)
    check_scaling_options(opts)
    steps, warmup = resolved_max_steps(opts), resolved_warmup_steps(opts)
    if steps is not None and warmup >= steps:
        raise OctlmError(
            f"--warmup-steps {warmup} is not below the run's {steps} steps (--max-steps): the learning rate would stop "
            f"at {min(steps, warmup)}/{warmup} of its peak and never decay, unlike the schedule --help describes; "
            f"give --warmup-steps below {steps} (a tenth of the run, {steps // 10}, is common) or a larger --max-steps"
        )


def check_seed(seed: int, flag: str = "--seed") -> None:
    """Raise :class:`OctlmError` unless ``0 <= seed <= MAX_SEED``."""
    if not SEED.admits(seed):
        raise OctlmError(f"{flag} must be {SEED.phrase()}, got {seed}")


__all__ = [
    "check_optimizer_options",
    "check_options",
    "check_weight_decay",
    "check_scheme_options",
    "check_seed",
    "scheme_options",
]
