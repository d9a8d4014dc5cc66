"""Whether a checkpointed run may go on, and how: its global batch, the limit it reached, its finished record.

A run resumes under the global batch it trained with (``--batch-size`` x
processes). One stopped at its limit (``--max-steps``, ``--time-budget``) may
still resume when ``metrics.jsonl`` holds no :data:`FINISHED` record past its
checkpoint: it was stopped during the final evaluation, the loss curve or the
report, and resuming does just those. :mod:`octlm.train.run_setup` asks these
questions of the checkpoint it opens; :class:`octlm.train.trainer.Trainer`
writes the record once the run is done.
"""

from __future__ import annotations

import json

from octlm.errors import OctlmError

#: The kind of the record ``metrics.jsonl`` ends with once a run's full final evaluation and report are done.
FINISHED = "finished"


def reached_limit(state: dict, step: int, max_steps: int | None, time_budget: float | None) -> str | None:
    """The limit a run at ``step`` (its checkpoint's ``state``) has reached, as the flag that set it (``--max-steps
    12``), or ``None``."""
    if max_steps is not None and step >= max_steps:
        return f"--max-steps {max_steps}"
    if time_budget is not None and state["elapsed_s"] >= time_budget:
        return f"--time-budget {time_budget:g}s"
    return None


def finished_after(folder, state: dict) -> bool:
    """Whether ``folder``'s ``metrics.jsonl``, past the place the checkpoint recorded, holds the :data:`FINISHED`
    record.

    A run stopped at its limit during the final evaluation, the loss curve or the
    report has none: resuming it does them, instead of refusing a finished run.
    """
    try:
        with folder.metrics_path.open("rb") as handle:
            handle.seek(state["metrics_bytes"])
            tail = handle.read()
    except OSError:
        return False
    for line in tail.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill: not the record
        if isinstance(record, dict) and record.get("kind") == FINISHED:
            return True
    return False


def check_resumable(state: dict, step: int, opts, world_size: int, max_steps: int | None, folder) -> str | None:
    """Whether a run at ``step`` (its checkpoint's ``state``) may go on under ``opts``: the note of a new limit, or
    ``None``.

    A run at its limit may go on only when it never finished its final
    evaluation and report (:func:`finished_after`): it then does just those.

    Raises:
        OctlmError: for a global batch (``--batch-size`` x ``world_size``
            processes, blocks per step) that differs from the run's, or a limit
            (``--max-steps``, ``--time-budget`` in seconds) the run has reached and finished,
            or a ``--max-steps`` below ``step``.
    """
    global_batch = opts.batch_size * world_size
    if global_batch != state["global_batch"]:
        then = state["global_batch"]
        raise OctlmError(
            f"--batch-size {opts.batch_size} x {world_size} process(es) = {global_batch} blocks per step, but the run "
            f"trained on {then} ({state['world_size']} x {then // state['world_size']}); "
            f"keep the global batch: --batch-size {then // world_size if then % world_size == 0 else '?'}"
        )
    if max_steps is not None and max_steps < step:
        # Nothing would train, yet config.json would claim fewer steps than the weights had.
        raise OctlmError(
            f"--resume {folder}: --max-steps {max_steps} is below step {step}, where the run already is; "
            f"give a --max-steps above {step} (the total for the run, not an addition)"
        )
    limit = reached_limit(state, step, max_steps, opts.time_budget)
    if limit is not None and finished_after(folder, state):
        raise OctlmError(
            f"--resume {folder}: the run is at step {step}, already at or past {limit}; to train further give a larger "
            f"--max-steps or --time-budget (the total for the run, not an addition)"
        )
    if (max_steps, opts.time_budget) == (state["max_steps"], state["time_budget"]):
        return None
    return (
        f"the run's limit is now {max_steps} steps"
        + (f" / {opts.time_budget:g}s" if opts.time_budget else "")
        + f" (was {state['max_steps']} steps"
        + (f" / {state['time_budget']:g}s" if state["time_budget"] else "")
        + "): the learning-rate schedule stretches to the new end"
    )


def resume_line(state: dict, step: int, time_budget: float | None, max_steps: int | None, folder) -> str:
    """The line a resumed session opens with: where training goes on, or that only the final evaluation and report are
    left."""
    limit = reached_limit(state, step, max_steps, time_budget)
    if limit is None:
        return f"resuming {folder} at step {step}"
    return (
        f"{folder} is at step {step}, its limit ({limit}), with no record of a finished final evaluation; "
        f"doing the final evaluation, loss curve and report now (no training step)"
    )


__all__ = ["FINISHED", "check_resumable", "finished_after", "reached_limit", "resume_line"]
