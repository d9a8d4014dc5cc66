"""State-tracking tasks for the task study: the S5 word problem and parity.

Merrill et al. 2024 (*The Illusion of State in State-Space Models*) show that
composing permutations of five elements (the word problem of the group S5) is
NC1-complete, so (unless TC0 = NC1) no fixed-depth transformer of their class
solves it at every length; PaTH (Yang et al. 2025) tests position schemes on
such word problems, beside flip-flop. Parity is the smallest state to
track: one bit, flipped by every 1 (Hahn 2020; Anil et al. 2022 test its
length generalization).

Those papers score the state after every prefix (a tagging task). The task
study's instances end in ``SEP answer``, each answer token predicted from the
tokens before it, so the states of earlier prefixes written into the sequence
would hand the model the previous state one step back and turn tracking into
a local look-up; here only the final state is asked, as flip-flop asks only
the last written bit. ``size`` is the number of group elements read.

The tasks register themselves in :data:`octlm.studies.tasks.generators.TASKS` (that
module imports this one) with ``in_all`` false: ``--task all`` stays the seven
measured tasks, and these run when named (``--task s5 parity``).
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from octlm.studies.tasks.generators import TASKS, Task

#: Items permuted by an element of S5.
S5_ITEMS = 5
#: Elements of S5, 5! = 120. Token t is the t-th permutation of 0..4 in lexicographic order (token 0 the identity).
S5_ELEMENTS = 120
#: The separator of s5, after the 120 element tokens.
S5_SEP = S5_ELEMENTS
#: The separator of parity, after the bits 0 and 1.
PARITY_SEP = 2


def _s5_table() -> Tensor:
    """``table[a, b]``: the token of the arrangement reached by applying ``b`` to arrangement ``a``, int64 [120, 120].

    A permutation ``p`` rearranges five items ``x`` into ``x[p[0]] .. x[p[4]]`` (the item at place ``p[k]`` moves to
    place ``k``); applying ``b`` after ``a`` to the items 0..4 in order gives ``a[b[k]]`` at place ``k``.
    """
    perms = torch.tensor(list(itertools.permutations(range(S5_ITEMS))))  # [120, 5], lexicographic
    code = perms @ (S5_ITEMS ** torch.arange(S5_ITEMS - 1, -1, -1))  # base-5 number of each permutation
    token_of = torch.full((S5_ITEMS**S5_ITEMS,), -1, dtype=torch.long)
    token_of[code] = torch.arange(S5_ELEMENTS)
    after = perms[:, perms]  # [a, b, k] = a[b[k]]
    return token_of[after @ (S5_ITEMS ** torch.arange(S5_ITEMS - 1, -1, -1))]


_TABLE = _s5_table()


def _s5(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Elements 0..119 (:data:`S5_ELEMENTS`), SEP = 120. ``g_1 .. g_n SEP s``: ``s`` is the arrangement of the items
    0..4 after applying ``g_1``, then ``g_2``, ..., then ``g_n`` (:func:`_s5_table`), a token of the same 120.

    Every element is drawn uniformly, so every prefix's state is uniform too and the answer depends on each element
    read: chance is 1/120 at every length.
    """
    elements = torch.randint(0, S5_ELEMENTS, (count, size), generator=g)
    state = torch.zeros(count, dtype=torch.long)  # the identity
    for i in range(size):  # a scan: sizes are tens, and each step is one gather over the batch
        state = _TABLE[state, elements[:, i]]
    sep = torch.full((count, 1), S5_SEP, dtype=torch.long)
    return torch.cat((elements, sep, state[:, None]), dim=1)


def _parity(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Bits 0, 1; SEP = 2. ``b_1 .. b_n SEP p``: ``p`` is 1 when an odd number of the bits are 1. Bits are uniform,
    so chance is 1/2."""
    bits = torch.randint(0, 2, (count, size), generator=g)
    sep = torch.full((count, 1), PARITY_SEP, dtype=torch.long)
    return torch.cat((bits, sep, bits.sum(dim=1, keepdim=True) % 2), dim=1)


STATE_TASKS = (
    Task(
        "s5",
        "compose permutations of 5 items (the S5 word problem); answer the final arrangement",
        lambda m: S5_ELEMENTS + 1,
        lambda n: n + 2,
        lambda n: 1,
        _s5,
        in_all=False,
    ),
    Task(
        "parity",
        "bits; answer whether an odd number of them are 1",
        lambda m: PARITY_SEP + 1,
        lambda n: n + 2,
        lambda n: 1,
        _parity,
        in_all=False,
    ),
)
for _task in STATE_TASKS:
    TASKS[_task.name] = _task

__all__ = ["PARITY_SEP", "S5_ELEMENTS", "S5_ITEMS", "S5_SEP", "STATE_TASKS"]
