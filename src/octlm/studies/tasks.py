"""Synthetic tasks with exact answers, for comparing position schemes past the training length.

Kazemnejad et al. 2023 and Ruoss et al. 2023 train small decoders on generated
sequences whose answer is exact, then test them on longer ones. Each task
here builds a batch of token sequences ``prompt SEP answer`` from its own
small vocabulary (no tokenizer): symbols are plain integers, listed in the
task's docstring. ``size`` is the number of input items (symbols, pairs or
filler tokens); all sequences of one batch have the same size, so a batch is
a plain int64 tensor [count, sequence_length(size)] with the answer in its
last ``answer_length(size)`` columns.

Every draw comes from the ``torch.Generator`` passed in, so a seed fixes the
data. The answers are right by construction: each generator writes the
answer from the prompt it has just drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

#: The data symbols: digits 0..9 of copy, reverse and passkey, the values of recall.
DIGITS = 10
#: Digits of the passkey (Mohtashami & Jaggi 2023 hide a 5-digit number).
PASSKEY_DIGITS = 5
#: The repeating filler of passkey, three symbols long ("the grass is green ...").
FILLER = 3


@dataclass(frozen=True)
class Task:
    """One synthetic task: its vocabulary, shapes and generator.

    Attributes:
        name: what ``octlm length --task`` calls it.
        description: one line for people.
        vocab_size: ``fn(max_size) -> tokens`` the model needs to read every
            size up to ``max_size`` (recall's keys grow with it).
        sequence_length: ``fn(size) -> tokens`` of one instance.
        answer_length: ``fn(size) -> tokens`` of its answer (the last ones).
        make: ``fn(size, count, max_size, generator) -> int64 [count, sequence_length(size)]``.
        make_at_depth: for a task that hides one needle in filler (passkey),
            ``fn(size, count, max_size, generator, low, high)``: instances
            whose needle sits at a depth in ``[low, high)`` (``high`` 1 takes
            the end too), the depth being the fraction of the filler before
            it (0: at the start, farthest from the question; 1: just before
            it); ``None`` for other tasks.
    """

    name: str
    description: str
    vocab_size: Callable[[int], int]
    sequence_length: Callable[[int], int]
    answer_length: Callable[[int], int]
    make: Callable[[int, int, int, torch.Generator], Tensor]
    make_at_depth: Callable[..., Tensor] | None = None

    def batch(self, size: int, count: int, max_size: int, generator: torch.Generator) -> Tensor:
        """``count`` instances of ``size`` input items, int64 [count, sequence_length(size)].

        Raises:
            ValueError: when ``size`` is not in ``1 .. max_size`` or ``count`` < 1.
        """
        if not 1 <= size <= max_size or count < 1:
            raise ValueError(f"{self.name}: need 1 <= size <= max_size ({max_size}) and count >= 1, got size {size}, count {count}")
        return self.make(size, count, max_size, generator)

    def depth_slots(self, size: int, low: float, high: float) -> list[int]:
        """The needle's possible places ``where`` (filler tokens before it, ``0 .. size``) at a depth in ``[low, high)`` (``high`` 1: the end too)."""
        return [w for w in range(size + 1) if low <= w / size < high or (high >= 1.0 and w == size)]

    def batch_at_depth(self, size: int, count: int, max_size: int, generator: torch.Generator, low: float, high: float) -> Tensor | None:
        """``count`` instances of ``size`` items whose needle sits at a depth in ``[low, high)``; ``None`` when no place of ``size`` lies there.

        Raises:
            ValueError: as :meth:`batch`, or for a task without a needle.
        """
        if self.make_at_depth is None:
            raise ValueError(f"{self.name} hides no needle; only a needle task has a depth")
        self.batch(size, 1, max_size, torch.Generator().manual_seed(0))  # the same size checks
        slots = self.depth_slots(size, low, high)
        return self.make_at_depth(size, count, max_size, generator, slots) if slots else None


TASKS: dict[str, Task] = {}


def _register(task: Task) -> Task:
    TASKS[task.name] = task
    return task


def _separator(count: int, symbol: int) -> Tensor:
    return torch.full((count, 1), symbol, dtype=torch.long)


def _copy(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Symbols 0..9; SEP = 10. ``x_1 .. x_n SEP x_1 .. x_n``."""
    x = torch.randint(0, DIGITS, (count, size), generator=g)
    return torch.cat((x, _separator(count, DIGITS), x), dim=1)


def _reverse(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Symbols 0..9; SEP = 10. ``x_1 .. x_n SEP x_n .. x_1``."""
    x = torch.randint(0, DIGITS, (count, size), generator=g)
    return torch.cat((x, _separator(count, DIGITS), x.flip(1)), dim=1)


def _recall(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Values 0..9, keys 10 .. 10 + max_size - 1, SEP = 10 + max_size. ``k_1 v_1 .. k_n v_n SEP k_q v_q``.

    The keys of one instance are distinct (a random subset of the key
    symbols), so the queried key ``k_q`` (one of them, uniformly) has exactly
    one value.
    """
    keys = torch.rand(count, max_size, generator=g).argsort(dim=1)[:, :size] + DIGITS
    values = torch.randint(0, DIGITS, (count, size), generator=g)
    pairs = torch.stack((keys, values), dim=2).reshape(count, 2 * size)
    query = torch.randint(0, size, (count, 1), generator=g)
    asked = torch.cat((keys.gather(1, query), values.gather(1, query)), dim=1)
    return torch.cat((pairs, _separator(count, DIGITS + max_size), asked), dim=1)


def _passkey(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Digits 0..9, filler 10..12 (repeating 10 11 12 10 ...), KEY = 13, SEP = 14.

    ``size`` filler tokens with ``KEY d_1 .. d_5`` inserted after a uniformly
    drawn number of them (0 .. size), then ``SEP d_1 .. d_5``.
    """
    return _passkey_at(size, count, max_size, g, list(range(size + 1)))


def _passkey_at(size: int, count: int, max_size: int, g: torch.Generator, slots: list[int]) -> Tensor:
    """:func:`_passkey` with the key after a number of filler tokens drawn uniformly from ``slots``."""
    filler = (torch.arange(size) % FILLER + DIGITS).expand(count, size)
    key = torch.randint(0, DIGITS, (count, PASSKEY_DIGITS), generator=g)
    where = torch.tensor(slots)[torch.randint(0, len(slots), (count,), generator=g)]
    marker = DIGITS + FILLER
    rows = [torch.cat((filler[r, : where[r]], torch.tensor([marker]), key[r], filler[r, where[r] :])) for r in range(count)]
    return torch.cat((torch.stack(rows), _separator(count, marker + 1), key), dim=1)


_register(Task("copy", "repeat the symbols after the separator", lambda m: DIGITS + 1, lambda n: 2 * n + 1, lambda n: n, _copy))
_register(Task("reverse", "repeat the symbols in reverse order", lambda m: DIGITS + 1, lambda n: 2 * n + 1, lambda n: n, _reverse))
_register(Task("recall", "associative recall: key-value pairs, then a key; answer its value",
               lambda m: DIGITS + m + 1, lambda n: 2 * n + 3, lambda n: 1, _recall))
_register(Task("passkey", "a 5-digit number hidden in filler; answer it",
               lambda m: DIGITS + FILLER + 2, lambda n: n + 2 * PASSKEY_DIGITS + 2, lambda n: PASSKEY_DIGITS, _passkey, _passkey_at))


__all__ = ["DIGITS", "FILLER", "PASSKEY_DIGITS", "TASKS", "Task"]
