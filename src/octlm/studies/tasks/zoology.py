"""Multi-query associative recall as Zoology sets it (Arora et al. 2023, "Zoology: Measuring and Improving Recall in
Efficient Language Models", arXiv 2312.04927, §3 and Figure 2), for reproducing their points beside octlm's own
``recall`` task (:mod:`octlm.studies.tasks.generators`).

An instance of ``length`` tokens over a vocabulary of ``vocab_size`` opens with ``pairs`` key-value pairs, keys drawn
without repetition from ``1 .. vocab_size/2 - 1`` and values from ``vocab_size/2 .. vocab_size - 1``. The rest of the
sequence asks every key once, at an even offset ``2 g`` after the pairs, the gaps ``g`` drawn without repetition with
probability proportional to ``a g^(a-1)`` (``a`` = 0.01: most questions come soon after the pairs, as a repeated
bigram does in text); every other place holds a random token. The target after each asked key is its value; every
other target is not scored (``IGNORE``). What differs from octlm's ``recall``: the vocabulary (thousands of tokens,
not ten digits and the keys), every key asked instead of a quarter, and questions scattered among random tokens
instead of following a separator.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

#: The target of a place whose next token is not scored (cross_entropy's ignore_index).
IGNORE = -100
#: Zoology's power-law exponent for the gaps between the pairs and the questions.
POWER_A = 0.01


def gap_weights(space: int, power_a: float = POWER_A) -> np.ndarray:
    """Probability of each gap ``0 .. space - 1`` (in pairs of places): ``a (g + 1)^(a - 1)``, normalised."""
    weights = power_a * np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
    return weights / weights.sum()


def mqar(
    count: int, length: int, pairs: int, vocab_size: int, seed: int, power_a: float = POWER_A
) -> tuple[Tensor, Tensor]:
    """``count`` instances: inputs int64 [count, length] and targets int64 [count, length] (``IGNORE`` where not
    scored; the value of the key just read where scored).

    Raises:
        ValueError: for an odd ``length``, pairs that do not fit twice in it (the pairs and their questions), or a
            vocabulary too small for ``pairs`` distinct keys and values.
    """
    context = 2 * pairs
    space = (length - context) // 2
    if length % 2 or space < pairs or vocab_size // 2 - 1 < pairs:
        raise ValueError(
            f"mqar: length {length} must be even and hold {pairs} pairs twice, and vocab_size {vocab_size} must give "
            f"{pairs} distinct keys and values"
        )
    rng = np.random.default_rng(seed)
    half = vocab_size // 2
    keys = np.stack([rng.choice(np.arange(1, half), size=pairs, replace=False) for _ in range(count)])
    values = np.stack([rng.choice(np.arange(half, vocab_size), size=pairs, replace=False) for _ in range(count)])
    p = gap_weights(space, power_a)
    gaps = np.stack([rng.choice(space, size=pairs, replace=False, p=p) for _ in range(count)])
    inputs = rng.integers(0, vocab_size, size=(count, length))
    targets = np.full((count, length), IGNORE, dtype=np.int64)
    inputs[:, 0:context:2], inputs[:, 1:context:2] = keys, values
    rows = np.arange(count)[:, None]
    asked = context + 2 * gaps
    inputs[rows, asked] = keys
    targets[rows, asked] = values  # the target at a place is the next token: the value after the asked key
    return torch.from_numpy(inputs).long(), torch.from_numpy(targets)


__all__ = ["IGNORE", "POWER_A", "gap_weights", "mqar"]
