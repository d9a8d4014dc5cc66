"""How a task model is scored: exact match of fresh instances at each size, and of a needle task by depth.

An instance counts when its whole answer is right: the greedy choice at every answer position (given the right tokens
before it, which is what greedy decoding sees as long as it has been right) is the answer token. Each size's instances
come from a generator seeded apart from training's (:data:`EVAL_SEED_OFFSET`), each depth bin's apart again.
"""

from __future__ import annotations

import torch

from octlm.model import Decoder
from octlm.studies.tasks.generators import Task
from octlm.studies.tasks.needle_report import attention_records
from octlm.studies.tasks.options import EVAL_COUNT, Variant
from octlm.studies.tasks.records import TaskRow

#: The evaluation generator's seed is the run's seed plus this, so its data never meets training's.
EVAL_SEED_OFFSET = 10**6
#: Bins of needle depth that passkey is scored in, from the start of the filler to its end (as needle-in-a-haystack
#: evaluations draw it).
DEPTH_BINS = 10
#: Each depth bin's evaluation generator is seeded this far from the last, clear of every size's.
DEPTH_SEED_STEP = 1000


@torch.no_grad()
def exact_match(model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device) -> float | None:
    """Fraction of :data:`EVAL_COUNT` fresh instances of ``size`` items whose whole answer is right; ``None`` past a
    table."""
    if model.max_length is not None and task.sequence_length(size) - 1 > model.max_length:
        return None
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size)
    return _all_right(model, task.evaluation().batch(size, EVAL_COUNT, longest, g).to(device), task, size)


@torch.no_grad()
def exact_match_by_depth(
    model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device
) -> list[float | None] | None:
    """Exact match of :data:`EVAL_COUNT` fresh instances in each of :data:`DEPTH_BINS` bins of needle depth (start to
    end); ``None`` for a task without a needle.

    An entry is ``None`` where no place of ``size`` filler tokens lies in the
    bin, or past a learned table. Each bin draws from its own generator, kept
    apart from training's and from :func:`exact_match`'s.
    """
    if task.make_at_depth is None:
        return None
    scores: list[float | None] = []
    for b in range(DEPTH_BINS):
        g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size + DEPTH_SEED_STEP * (b + 1))
        tokens = task.evaluation().batch_at_depth(size, EVAL_COUNT, longest, g, b / DEPTH_BINS, (b + 1) / DEPTH_BINS)
        scores.append(None if tokens is None else _all_right(model, tokens.to(device), task, size))
    return scores


def _all_right(model: Decoder, tokens: torch.Tensor, task: Task, size: int) -> float | None:
    """Fraction of the rows of ``tokens`` (instances of ``size`` items) whose every scored answer token is the greedy
    choice; ``None`` past a table."""
    if model.max_length is not None and tokens.shape[1] - 1 > model.max_length:
        return None
    answer, scored = task.answer_length(size), task.answer_mask(size).to(tokens.device)
    guess = model(tokens[:, :-1])[:, -answer:][:, scored].argmax(dim=-1)
    return float((guess == tokens[:, -answer:][:, scored]).all(dim=1).float().mean())


def score_model(
    model: Decoder,
    record: dict,
    task: Task,
    variant: Variant,
    seed: int,
    multipliers: list[int],
    sizes: list[int],
    device: torch.device,
) -> tuple[list[dict], list[dict]]:
    """One trained model's records: ``([record, eval records], [depth records])``, exact match at every size
    (``multipliers[i]`` x the task length = ``sizes[i]`` items) and, for a needle task, by depth and its attention."""
    row, evals, depths = TaskRow.of_variant(variant).to_json(), [], []
    for m, size in zip(multipliers, sizes, strict=True):
        accuracy = exact_match(model, task, size, max(sizes), seed, device)
        evals.append(
            {
                "record": "eval",
                "task": task.name,
                **row,
                "seed": seed,
                "multiplier": m,
                "size": size,
                "exact_match": accuracy,
            }
        )
        if (by_depth := exact_match_by_depth(model, task, size, max(sizes), seed, device)) is not None:
            depths.append(
                {
                    "record": "depth",
                    "task": task.name,
                    **row,
                    "seed": seed,
                    "multiplier": m,
                    "size": size,
                    "depth_bins": [[b / DEPTH_BINS, (b + 1) / DEPTH_BINS] for b in range(DEPTH_BINS)],
                    "exact_match": by_depth,
                }
            )
    evals += attention_records(model, task, row, seed, multipliers, sizes, device)  # needle tasks only
    return [record, *evals], depths


__all__ = ["DEPTH_BINS", "EVAL_COUNT", "EVAL_SEED_OFFSET", "exact_match", "exact_match_by_depth", "score_model"]
