"""``octlm length``: the text study (:class:`~octlm.studies.length.options.LengthOptions`), or with ``--task`` the task
study (:class:`~octlm.studies.tasks.options.TaskOptions`).

One command serves both protocols, so its flags are the union of both
options classes; the options given decide which study runs, and a flag the
chosen study does not read is refused by name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from octlm.cli.program import Formatter, add_common, add_dataclass_options, given_options
from octlm.data.corpora import builtin_help
from octlm.declare import build, flag, option_fields
from octlm.errors import OctlmError
from octlm.report import HeldResult, Reporter
from octlm.studies.length.options import LengthOptions
from octlm.studies.shared.progress import PROGRESS
from octlm.studies.tasks.options import TaskOptions

TEXT_ONLY = {f.name for f in option_fields(LengthOptions)} - {f.name for f in option_fields(TaskOptions)}
TASK_ONLY = [f for f in option_fields(TaskOptions) if f.name not in {g.name for g in option_fields(LengthOptions)}]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "length",
        help="train one model per position scheme and compare them past the training length",
        formatter_class=Formatter,
        description="The length study. Trains one decoder per position scheme, and per layer layout with --layouts\n"
        "(same text, seed, shape and budget),\n"
        "then measures validation bits per byte at 1x, 2x, 4x, 8x and 16x the training length T, and the\n"
        "RoPE model again under each context-extension method (factor = length / T). Every length scores\n"
        "the same validation targets in two readings: non-overlapping windows of that length, each starting\n"
        "from nothing, and sliding windows advancing by --eval-stride (L/2 by default) that score only new\n"
        "targets, so each sees at least L - stride tokens of context. It records every model's attention\n"
        "(entropy, distance, first-token mass, largest logit) at every length. Learned positions show\n"
        "n/a past T (their table has no rows there). Then the extension stage fine-tunes copies of the rope\n"
        "(plain, linear, NTK, YaRN, Llama 3), learned, alibi and none models at 4 x T for 100 steps (--extend-to,\n"
        "--extend-steps; --extend-to 0 skips it) and scores them at every length. Writes length.md,\n"
        "length.jsonl, length.png, attention.png and extend.png into --out. With --task, a synthetic task\n"
        "study instead (tasks.md, tasks.jsonl, tasks.png; passkey adds tasks-depth.png; several tasks add\n"
        "ranking.png, each scheme's mean reciprocal rank across them).",
        epilog="examples:\n  octlm length --text tinyshakespeare --out runs/length\n"
        "  octlm length --text notes.txt --out runs/quick --time-budget 30 --train-length 64 --schemes rope alibi "
        "--extend-to 0\n"
        "  octlm length --task copy --out runs/copy --seeds 5\n"
        "  octlm length --task all --out runs/tasks --max-steps 300\n"
        "  octlm length --task copy reverse --randomize-positions 8 --schemes rope alibi --out runs/rand\n"
        "  octlm length --preset ruoss2023 --out runs/ruoss\n"
        "  octlm length --out runs/length --reread --context-curve\n\n" + builtin_help(),
    )
    add_dataclass_options(p, LengthOptions)
    add_dataclass_options(p, TaskOptions, only=TASK_ONLY)
    add_reading_options(p)
    add_common(p)
    p.set_defaults(func=run, parser=p)


#: What --reread takes besides the readings: the study folder and where to compute.
REREAD_TAKES = {"out", "reread", "device", "threads", "json", "quiet", "argv", "func", "parser"}


def add_reading_options(p: argparse.ArgumentParser) -> None:
    """The opt-in readings of the text study (:mod:`octlm.studies.length.readings`) and ``--reread``."""
    from octlm.studies.length.readings.catalog import registry

    group = p.add_argument_group(
        "opt-in readings (text study)",
        "measurements of the trained models the default study leaves out; with --reread on a finished study's --out "
        "(no training: its models and options are read back, the records appended and length.md rewritten)",
    )
    group.add_argument(
        "--reread",
        action="store_true",
        help="compute the named readings on the finished study at --out without training again",
    )
    for reading in registry().values():
        group.add_argument(reading.flag, action="store_true", dest=reading.dest, help=reading.help)
        for param in reading.params:
            group.add_argument(
                param.flag, type=int, default=None, dest=param.name, help=param.help, metavar=param.metavar
            )


def asked_readings(args: argparse.Namespace, given: set[str]) -> tuple[list[str], dict]:
    """The readings the flags name and their options' values (each checked).

    Raises:
        OctlmError: for a reading's option without its reading, or a bad value, naming the flag.
    """
    from octlm.studies.length.readings.catalog import registry

    names, params = [], {}
    for reading in registry().values():
        on = getattr(args, reading.dest, False)
        names += [reading.name] if on else []
        for param in reading.params:
            if param.name in given:
                if not on:
                    raise OctlmError(f"{param.flag} sets {reading.flag}: add {reading.flag} or drop {param.flag}")
                params[param.name] = param.check(getattr(args, param.name))
    return names, params


def refuse_readings(args: argparse.Namespace, names: list[str], params: dict, given: set[str], opts) -> None:
    """Refuse readings the study cannot take: with --task, with --shard, or --reread with a study option or none, or
    with values that cannot work at the study's training length (:attr:`Reading.check`).

    Raises:
        OctlmError: naming the flag and the fix.
    """
    if args.reread:
        if other := sorted(given - REREAD_TAKES - {n.replace("-", "_") for n in names} - set(args.reading_params)):
            raise OctlmError(
                f"{flag(other[0])} means nothing with --reread: the readings use the study's own recorded options; "
                f"drop {flag(other[0])}"
            )
        if not names or args.out is None:
            raise OctlmError("--reread needs --out DONE (a finished study) and a reading, e.g. --context-curve")
        return
    if names and isinstance(opts, TaskOptions):
        raise OctlmError(f"--{names[0]} reads a text study's models, not --task's; drop --{names[0]}")
    if names and opts.shard:
        raise OctlmError(
            f"--{names[0]} with --shard: finish the study first, then run octlm length --out {opts.out} "
            f"--reread --{names[0]}"
        )
    from octlm.studies.length.readings.catalog import registry

    for name in names:  # before anything trains
        reading = registry()[name]
        reading.check(reading.values(params), opts.train_length)
        reading.check_study(reading.values(params), opts)


def study_options(args: argparse.Namespace) -> LengthOptions | TaskOptions:
    """The options of the study the parsed flags ask for: :class:`TaskOptions` with ``--task`` or ``--preset``, else
    :class:`LengthOptions`.

    Each class fills what was not given with its own defaults (the task study
    trains a smaller model for more steps).

    Raises:
        OctlmError: for a flag the chosen study does not read, naming it.
    """
    given = given_options(args.parser, args.argv[1:]) - {"json", "quiet"}
    if args.task is None and args.preset is None:
        if task_only := sorted(given & {f.name for f in TASK_ONLY}):
            raise OctlmError(
                f"{flag(task_only[0])} needs --task (or --preset): it sets the synthetic task study; "
                "add --task NAME or drop it"
            )
        cls = LengthOptions
    else:
        if text_only := sorted(given & TEXT_ONLY):
            raise OctlmError(
                f"{flag(text_only[0])} means nothing with --task: the task study generates its own sequences, trains "
                f"--max-steps steps and scores exact match at --multipliers x --task-length; "
                f"drop {flag(text_only[0])}"
            )
        cls = TaskOptions
    names = {f.name for f in option_fields(cls)}
    return build(
        cls, {name: getattr(args, name) for name in given & names | ({"task"} if cls is TaskOptions else set())}
    )


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.studies.length.readings.catalog import registry
    from octlm.studies.length.reread import run_readings
    from octlm.studies.length.study import length_study
    from octlm.studies.tasks.study import task_study

    given = given_options(args.parser, args.argv[1:])
    args.reading_params = [p.name for r in registry().values() for p in r.params]
    names, params = asked_readings(args, given)
    opts = None if args.reread else study_options(args)
    refuse_readings(args, names, params, given, opts)
    if args.reread:
        result = run_readings(args.out, names, params, args.device, args.threads, report)
        report.result(result, f"{result['text']}\n\nwrote {', '.join(result['written'])}")
        return 0
    try:
        if isinstance(opts, TaskOptions):
            task_study(opts, report, given_options(args.parser, args.argv[1:]))
        elif not names:
            length_study(opts, report)
        else:  # the readings' records and files join the study's result, which stays the last JSON line
            held = HeldResult(report)
            study = length_study(opts, held)
            readings = run_readings(opts.out, names, params, opts.device, opts.threads, report)
            result = {**study, "readings": names, "written": readings["written"]}
            report.result(result, f"{held.text}\n\n{readings['text']}\n\nwrote {', '.join(readings['written'])}")
    except KeyboardInterrupt:
        # Every finished part of the study is recorded in its folder (octlm.studies.shared.progress).
        if opts.out and (Path(opts.out) / PROGRESS).is_dir():
            report.warn(
                f"the study's finished parts stay in {opts.out}; the same command continues it where it stopped "
                "(--overwrite starts it again)"
            )
        elif names and opts.out and (Path(opts.out) / "length.jsonl").is_file():
            report.warn(
                f"the study in {opts.out} is finished; its readings were not written: octlm length --out {opts.out} "
                f"--reread {' '.join('--' + n for n in names)} computes them"
            )
        raise
    return 0
