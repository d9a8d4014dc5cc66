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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from octlm.declare import flag

#: The data symbols: digits 0..9 of copy, reverse and passkey.
DIGITS = 10
#: The values of recall, drawn without repetition within an instance as Zoology draws them: with ten, four pairs
#: repeat a value in half the instances, and the model cannot tell which key a repeated value answered.
RECALL_VALUES = 128
#: Recall's own training (Task.training): Zoology's shape, two layers of one head, with AdamW, on up to four pairs;
#: the task study's three layers of four narrow heads with Muon stay on recall's plateau (docs/tasks.md).
RECALL_TRAINING = {
    "task_length": 4,
    "n_layers": 2,
    "n_heads": 1,
    "optimizer": "adamw",
    "learning_rate": 3e-4,
    "max_steps": 16000,
}
#: Digits of the passkey (Mohtashami & Jaggi 2023 hide a 5-digit number).
PASSKEY_DIGITS = 5
#: Largest count of ``count``: answers stay single tokens seen in training at every length.
MAX_COUNT = 9
#: The WRITE token of flip-flop (bits are 0 and 1; IGNORE and READ follow it).
WRITE = 2
#: Probability that a flip-flop instruction after the first writes (Liu et al. 2023's 0.1 write to 0.8 ignore).
FLIP_FLOP_WRITE = 1 / 9
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
        scored: ``fn(size) -> [answer_length(size)] bools``, the answer tokens
            that are scored (the loss and exact match); ``None``: all of them.
            Recall's asked keys are part of its answer but not scored: they
            are drawn at random, and a model reads them rather than predicts them.
        make_at_depth: for a task that hides one needle in filler (passkey),
            ``fn(size, count, max_size, generator, low, high)``: instances
            whose needle sits at a depth in ``[low, high)`` (``high`` 1 takes
            the end too), the depth being the fraction of the filler before
            it (0: at the start, farthest from the question; 1: just before
            it); ``None`` for other tasks.
        held_out: ``fn() -> Task``, the same task drawing from held-out data
            (a needle task's filler from the validation split,
            :mod:`octlm.studies.tasks.needle`), which :meth:`evaluation` gives;
            ``None``: the task's data are all generated, training's and
            evaluation's alike.
        in_all: whether ``--task all`` runs it; the state-tracking tasks
            (:mod:`octlm.studies.tasks.state_tasks`) run only when named, so that
            ``--task all`` stays the measured seven.
        training: the task study's options this task is trained with where it
            needs other than the study's defaults to be learned at 1x by the
            best scheme (docs/tasks.md), ``{option name: value}``: its steps
            (``max_steps``), its longest training size (``task_length``), its
            model (``d_model``, ``n_heads``, ``n_layers``) and optimizer
            (``optimizer``, ``learning_rate``). Each applies unless the person
            sets that option (:meth:`~octlm.studies.tasks.options.TaskOptions.for_task`).
    """

    name: str
    description: str
    vocab_size: Callable[[int], int]
    sequence_length: Callable[[int], int]
    answer_length: Callable[[int], int]
    make: Callable[[int, int, int, torch.Generator], Tensor]
    make_at_depth: Callable[..., Tensor] | None = None
    scored: Callable[[int], list[bool]] | None = None
    held_out: Callable[[], Task] | None = None
    in_all: bool = True
    training: Mapping[str, object] = field(default_factory=dict, compare=False)

    def evaluation(self) -> Task:
        """The task evaluation draws from: :attr:`held_out`'s, or this one."""
        return self if self.held_out is None else self.held_out()

    def answer_mask(self, size: int) -> Tensor:
        """Which of the ``answer_length(size)`` answer tokens are scored, bool [answer_length(size)]."""
        if self.scored is None:
            return torch.ones(self.answer_length(size), dtype=torch.bool)
        return torch.tensor(self.scored(size), dtype=torch.bool)

    def batch(self, size: int, count: int, max_size: int, generator: torch.Generator) -> Tensor:
        """``count`` instances of ``size`` input items, int64 [count, sequence_length(size)].

        Raises:
            ValueError: when ``size`` is not in ``1 .. max_size`` or ``count`` < 1.
        """
        if not 1 <= size <= max_size or count < 1:
            raise ValueError(
                f"{self.name}: need 1 <= size <= max_size ({max_size}) and count >= 1, got size {size}, count {count}"
            )
        return self.make(size, count, max_size, generator)

    def depth_slots(self, size: int, low: float, high: float) -> list[int]:
        """The needle's possible places ``where`` (filler tokens before it, ``0 .. size``) at a depth in ``[low, high)``
        (``high`` 1: the end too)."""
        return [w for w in range(size + 1) if low <= w / size < high or (high >= 1.0 and w == size)]

    def batch_at_depth(
        self, size: int, count: int, max_size: int, generator: torch.Generator, low: float, high: float
    ) -> Tensor | None:
        """``count`` instances of ``size`` items whose needle sits at a depth in ``[low, high)``; ``None`` when no place
        of ``size`` lies there.

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
    """Values 0..127, keys 128 .. 128 + max_size - 1, SEP = 128 + max_size. ``k_1 v_1 .. k_n v_n SEP k_a v_a ..``.

    Multi-query associative recall (Arora et al. 2023, Zoology, §3): after the
    pairs every key is asked once, in a fresh order, each followed by its
    value; only the values are scored (:attr:`Task.scored`). The keys of one
    instance are distinct (a random subset of the key symbols) and so are its
    values (of :data:`RECALL_VALUES`), so each asked key has exactly one value
    and each value one key.
    """
    keys = torch.rand(count, max_size, generator=g).argsort(dim=1)[:, :size] + RECALL_VALUES
    values = torch.rand(count, RECALL_VALUES, generator=g).argsort(dim=1)[:, :size]
    pairs = torch.stack((keys, values), dim=2).reshape(count, 2 * size)
    asked = torch.rand(count, size, generator=g).argsort(dim=1)[:, : queries(size)]
    answer = torch.stack((keys.gather(1, asked), values.gather(1, asked)), dim=2).reshape(count, -1)
    return torch.cat((pairs, _separator(count, RECALL_VALUES + max_size), answer), dim=1)


def queries(size: int) -> int:
    """Keys asked in a recall instance of ``size`` pairs: every one."""
    return size


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
    rows = [
        torch.cat((filler[r, : where[r]], torch.tensor([marker]), key[r], filler[r, where[r] :])) for r in range(count)
    ]
    return torch.cat((torch.stack(rows), _separator(count, marker + 1), key), dim=1)


def _selective_copy(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Symbols 0..9, BLANK = 10, SEP = 11. ``size`` slots, :func:`marked` of them holding a symbol and the rest BLANK,
    then ``SEP`` and the symbols in order.

    The selective copy of Golovneva et al. 2024 (CoPE, §5.2; the Mamba paper's
    selective copying, Gu & Dao 2023): what to copy is found by content, not
    by position. The filled slots are a uniformly drawn subset.
    """
    k = marked(size)
    where = torch.rand(count, size, generator=g).argsort(dim=1)[:, :k].sort(dim=1).values
    symbols = torch.randint(0, DIGITS, (count, k), generator=g)
    slots = torch.full((count, size), DIGITS, dtype=torch.long).scatter(1, where, symbols)
    return torch.cat((slots, _separator(count, DIGITS + 1), symbols), dim=1)


def marked(size: int) -> int:
    """Symbols to copy among ``size`` slots of selective copy: a quarter, at least one."""
    return max(1, size // 4)


def _count(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Symbols 0..9, SEP = 10, counts 0..9 as tokens 11..20. ``x_1 .. x_n SEP q c``: ``q`` occurs ``c`` times among the
    ``x``.

    The count ``c`` is drawn uniformly from ``0 .. min(9, size)`` and ``q``
    placed in that many uniformly drawn slots; the other slots hold the nine
    other symbols. Longer instances hold more distractors, never a count
    outside 0..9, so every answer token is one training has seen (counting as
    Golovneva et al. 2024, CoPE §5.3, probe it: by content, with position of no help).
    """
    q = torch.randint(0, DIGITS, (count, 1), generator=g)
    c = (torch.rand(count, 1, generator=g) * (min(MAX_COUNT, size) + 1)).long()
    others = (q + torch.randint(1, DIGITS, (count, size), generator=g)) % DIGITS
    hit = torch.rand(count, size, generator=g).argsort(dim=1).argsort(dim=1) < c
    x = torch.where(hit, q.expand(count, size), others)
    return torch.cat((x, _separator(count, DIGITS), q, c + DIGITS + 1), dim=1)


def _flip_flop(size: int, count: int, max_size: int, g: torch.Generator) -> Tensor:
    """Bits 0, 1; WRITE = 2, IGNORE = 3, READ = 4. ``size`` instructions ``op b``, then ``READ b``: the bit of the last
    WRITE.

    Flip-flop language modelling (Liu et al. 2023, §3): the first instruction
    writes, each later one writes with probability :data:`FLIP_FLOP_WRITE` and
    is ignored otherwise (their FFL(0.8) draws write, ignore and read with
    0.1, 0.8, 0.1; here the only read is the last), every bit uniform. The
    answer may lie far back across ignored bits: sparse long-range dependence.
    """
    ops = torch.where(torch.rand(count, size, generator=g) < FLIP_FLOP_WRITE, WRITE, WRITE + 1)
    ops[:, 0] = WRITE
    bits = torch.randint(0, 2, (count, size), generator=g)
    last = (torch.arange(size) * (ops == WRITE)).argmax(dim=1, keepdim=True)
    pairs = torch.stack((ops, bits), dim=2).reshape(count, 2 * size)
    return torch.cat((pairs, _separator(count, WRITE + 2), bits.gather(1, last)), dim=1)


#: Steps until the best scheme learns copy and count at 1x on three seeds (docs/tasks.md, "Sizing the tasks").
COPY_STEPS = COUNT_STEPS = 2000

_register(
    Task(
        "copy",
        "repeat the symbols after the separator",
        lambda m: DIGITS + 1,
        lambda n: 2 * n + 1,
        lambda n: n,
        _copy,
        training={"max_steps": COPY_STEPS},
    )
)
_register(
    Task(
        "reverse",
        "repeat the symbols in reverse order",
        lambda m: DIGITS + 1,
        lambda n: 2 * n + 1,
        lambda n: n,
        _reverse,
    )
)
_register(
    Task(
        "recall",
        "associative recall: key-value pairs, then every key; answer each one's value",
        lambda m: RECALL_VALUES + m + 1,
        lambda n: 2 * n + 1 + 2 * queries(n),
        lambda n: 2 * queries(n),
        _recall,
        scored=lambda n: [False, True] * queries(n),
        training=RECALL_TRAINING,
    )
)
_register(
    Task(
        "passkey",
        "a 5-digit number hidden in filler; answer it",
        lambda m: DIGITS + FILLER + 2,
        lambda n: n + 2 * PASSKEY_DIGITS + 2,
        lambda n: PASSKEY_DIGITS,
        _passkey,
        _passkey_at,
    )
)
_register(
    Task(
        "selective-copy",
        "copy only the symbols among blanks, in order",
        lambda m: DIGITS + 2,
        lambda n: n + 1 + marked(n),
        marked,
        _selective_copy,
    )
)
_register(
    Task(
        "count",
        "how many times the asked symbol occurs (0 to 9)",
        lambda m: DIGITS + MAX_COUNT + 2,
        lambda n: n + 3,
        lambda n: 1,
        _count,
        training={"max_steps": COUNT_STEPS},
    )
)
_register(
    Task(
        "flip-flop",
        "instructions write, ignore a bit; answer the last written bit",
        lambda m: WRITE + 3,
        lambda n: 2 * n + 2,
        lambda n: 1,
        _flip_flop,
    )
)


def as_flags(own: Mapping[str, object]) -> str:
    """A task's own training as the flags it stands for: ``--task-length 4 --n-layers 2 ...``."""
    return " ".join(f"{flag(k)} {v}" for k, v in own.items())


def own_training_said() -> str:
    """Each task's own training as the flags it stands for: ``copy: --max-steps 2000; recall: --task-length 4 ...``."""
    return "; ".join(f"{name}: {as_flags(task.training)}" for name, task in TASKS.items() if task.training)


__all__ = [
    "DIGITS",
    "FILLER",
    "FLIP_FLOP_WRITE",
    "MAX_COUNT",
    "PASSKEY_DIGITS",
    "RECALL_TRAINING",
    "RECALL_VALUES",
    "TASKS",
    "WRITE",
    "Task",
    "as_flags",
    "marked",
    "own_training_said",
    "queries",
]
