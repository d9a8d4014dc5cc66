"""The token rows the training text never selects, and where training left them.

A brought tokenizer (``--tokenizer``: GPT-2's 50,257 tokens) gives a small
corpus a table whose rows are mostly never looked up. With the head tied to
the table, such a row still moves: every softmax pushes its logit down, so its
gradient is the sum over the batch of the hidden states, each weighted by the
probability the model gives the row there. That is nearly one direction for all
such rows, so they drift together, away from where the hidden states point;
their mutual cosine says how far. With an untied head they get no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class RowGroup:
    """Rows of one kind: how many, their mean L2 norm, and the mean cosine similarity over their distinct pairs
    (``None`` with fewer than two rows)."""

    rows: int
    mean_norm: float | None
    mean_cosine: float | None


def row_group(table: Tensor) -> RowGroup:
    """Count, mean norm and mean pairwise cosine of the rows of ``table`` [N, C].

    The mean over the N(N-1)/2 distinct pairs is exact without forming them:
    with unit rows u_i, ``|sum u_i|^2 = N + 2 * sum_{i<j} u_i . u_j`` (float64).
    A zero row counts as a zero unit vector.
    """
    x = table.detach().to(torch.float64).cpu()
    n = x.shape[0]
    if n == 0:
        return RowGroup(0, None, None)
    norms = x.norm(dim=1)
    units = x / norms.clamp_min(1e-12)[:, None]
    self_dots = float((units * units).sum())  # N, less any zero rows
    pairs = (float(units.sum(dim=0).square().sum()) - self_dots) / (n * (n - 1)) if n > 1 else None
    return RowGroup(n, float(norms.mean()), pairs)


def seen_and_unseen(table: Tensor, counts: np.ndarray) -> tuple[RowGroup, RowGroup]:
    """The rows of ``table`` [V, C] whose token occurs in the training split (``counts[v] > 0``, counts int [V])
    and those whose token never does.

    Raises:
        ValueError: when ``counts`` does not have one entry per row.
    """
    if counts.shape != (table.shape[0],):
        raise ValueError(f"counts has shape {counts.shape}; the table has {table.shape[0]} rows")
    seen = torch.from_numpy(np.asarray(counts) > 0)
    return row_group(table[seen]), row_group(table[~seen])


def unseen_line(seen: RowGroup, unseen: RowGroup) -> str | None:
    """One line for the terminal on the unseen rows beside the seen ones, or ``None`` when every row is seen."""
    if unseen.rows == 0:
        return None
    total = seen.rows + unseen.rows
    cosine = "" if unseen.mean_cosine is None else f", mean cosine between two {unseen.mean_cosine:.3f}"
    seen_cosine = "" if seen.mean_cosine is None else f", {seen.mean_cosine:.3f}"
    seen_norm = "-" if seen.mean_norm is None else f"{seen.mean_norm:.3f}"
    return (
        f"rows the training split never selects: {unseen.rows:,} of {total:,} ({unseen.rows / total:.0%}), "
        f"mean norm {unseen.mean_norm:.3f}{cosine} (the {seen.rows:,} seen rows: {seen_norm}{seen_cosine})"
    )


__all__ = ["RowGroup", "row_group", "seen_and_unseen", "unseen_line"]
