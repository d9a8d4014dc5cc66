"""Retrieval in real text: key-value needles hidden in a corpus's own text, RULER's needle-in-a-haystack variants.

Hsieh et al. 2024 (RULER, arXiv 2404.06654, §3.1) hide needles "the special
magic number for KEY is VALUE" in essays at a chosen depth and length, ask for
the value(s) at the end, and vary what is hidden and asked:

* ``needle-single``: one needle, its key asked (RULER's niah_single);
* ``needle-multikey``: :data:`NEEDLES` needles with distinct keys, one asked,
  the other three distractors (niah_multikey_1);
* ``needle-multivalue``: :data:`NEEDLES` needles of one key, all its values
  asked, in the order the text gives them (niah_multivalue);
* ``needle-multiquery``: :data:`NEEDLES` needles with distinct keys, all asked
  (niah_multiquery).

Here the haystack is real text: ``size`` consecutive bytes of a corpus
(:class:`Haystack`, training's from the training split and evaluation's from
the validation split, as ``octlm train`` splits text), read at byte level as
the task study's tasks read their own small vocabularies (no tokenizer).
Needles and question are symbols outside the bytes, so a key or value can
never occur in the text by chance. Vocabulary (:data:`VOCAB` tokens):

* ``0 .. 255``: the filler's UTF-8 bytes;
* ``256 .. 265``: value digits; a value is :data:`VALUE_LENGTH` of them;
* ``266 .. 273``: key letters; a key is :data:`KEY_LENGTH` of them;
* :data:`KEY` 274, :data:`IS` 275, :data:`QUERY` 276.

A needle is ``KEY k_1 k_2 IS v_1 v_2 v_3``; an instance is the filler with the
needles inserted, then ``QUERY`` and, for each asked key, ``k_1 k_2 IS`` and
its value(s). Only the values are scored (:attr:`~octlm.studies.tasks.generators.Task.scored`):
the asked keys are given, as recall's are, so one instance of multiquery asks
four questions in a row. RULER scores the fraction of values that appear in
free text; here the whole answer must be right, as every task of the study.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from octlm.errors import OctlmError
from octlm.studies.tasks.generators import Task

BYTES = 256
#: Value digits, and digits per value (RULER's values are 7-digit numbers; three keep the answer short at this scale).
VALUE_DIGITS, VALUE_LENGTH = 10, 3
#: Key letters, and letters per key: 64 keys, so four distinct ones are drawn easily.
KEY_LETTERS, KEY_LENGTH = 8, 2
KEY = BYTES + VALUE_DIGITS + KEY_LETTERS
IS = KEY + 1
QUERY = KEY + 2
VOCAB = QUERY + 1
#: Tokens of one needle: ``KEY k_1 k_2 IS v_1 v_2 v_3``.
NEEDLE_LENGTH = 1 + KEY_LENGTH + 1 + VALUE_LENGTH
#: Needles of the multi variants: RULER's num_needle_k, num_needle_v and num_needle_q of 4.
NEEDLES = 4
#: The built-in corpus the needle tasks read when ``--text`` is not given.
DEFAULT_TEXT = "tinyshakespeare"
#: Share of each document held out for validation: octlm train's default ``--val-fraction``.
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class NeedleVariant:
    """What a variant hides and asks: ``needles`` in the text, with ``keys`` distinct keys, ``asked`` of them asked."""

    name: str
    description: str
    needles: int
    keys: int
    asked: int

    @property
    def values_per_key(self) -> int:
        """Needles (values) of each key."""
        return self.needles // self.keys

    def scored(self) -> list[bool]:
        """The answer's scored tokens: per asked key, its key and IS given, its values scored."""
        return ([False] * (KEY_LENGTH + 1) + [True] * self.values_per_key * VALUE_LENGTH) * self.asked


VARIANTS: dict[str, NeedleVariant] = {
    v.name: v
    for v in (
        NeedleVariant("needle-single", "one key-value needle in real text; answer its value", 1, 1, 1),
        NeedleVariant("needle-multikey", f"{NEEDLES} needles of distinct keys in real text; answer one", NEEDLES, 4, 1),
        NeedleVariant("needle-multivalue", f"{NEEDLES} values of one key in real text; answer all", NEEDLES, 1, 1),
        NeedleVariant("needle-multiquery", f"{NEEDLES} needles in real text; answer every one", NEEDLES, 4, 4),
    )
}


@dataclass(frozen=True)
class Haystack:
    """A corpus as filler: its training and validation text as UTF-8 bytes, and what ``--text`` named."""

    source: str
    train: bytes
    validation: bytes


@functools.lru_cache(maxsize=4)
def load_haystack(text: tuple[str, ...] | None = None) -> Haystack:
    """The corpus ``--text`` names (:data:`DEFAULT_TEXT` for ``None`` or empty), split as ``octlm train`` splits it:
    the first 90% of each document trains, the last 10% validates (:func:`octlm.data.text.split_documents`); each
    split's documents joined by a newline.

    Raises:
        DataError: as :func:`octlm.data.reading.read_documents` (a missing path, a binary file).
    """
    from octlm.data.reading import read_documents
    from octlm.data.text import split_documents

    names = list(text) if text else [DEFAULT_TEXT]
    docs, _ = read_documents(names)
    train, val = split_documents(docs, VAL_FRACTION)
    return Haystack(" ".join(names), "\n".join(train).encode("utf-8"), "\n".join(val).encode("utf-8"))


def check_haystack(name: str, text: tuple[str, ...], train_size: int, eval_size: int) -> None:
    """Refuse a corpus whose training split holds fewer than ``train_size`` bytes or validation split fewer than
    ``eval_size``, before anything is trained.

    Raises:
        OctlmError: naming both splits' sizes and the fix; DataError as :func:`load_haystack`.
    """
    haystack = load_haystack(text)
    if len(haystack.train) < train_size or len(haystack.validation) < eval_size:
        raise OctlmError(
            f"--task {name}: --text {haystack.source} holds {len(haystack.train)} training and "
            f"{len(haystack.validation)} validation bytes, and the study needs {train_size} and {eval_size} "
            "(--task-length, and it times the largest --multipliers); give more text or lower them"
        )


def key_tokens(key: int) -> list[int]:
    """Key number ``key`` (``0 .. KEY_LETTERS ** KEY_LENGTH - 1``) as its :data:`KEY_LENGTH` letter tokens."""
    return [BYTES + VALUE_DIGITS + (key // KEY_LETTERS**i) % KEY_LETTERS for i in reversed(range(KEY_LENGTH))]


def _instance(variant: NeedleVariant, filler: list[int], slots: list[int], g: torch.Generator) -> list[int]:
    """One instance: ``filler`` with the needles inserted, QUERY, the answer.

    Needle ``j`` holds key ``j % keys``; the first asked key's first needle
    (the *placed* needle) goes after ``slots[r]`` filler tokens for a
    uniformly drawn ``r``; the others after a uniform number in ``0 .. size``.
    Needles at one place keep their index order.
    """
    size = len(filler)
    keys = torch.randperm(KEY_LETTERS**KEY_LENGTH, generator=g)[: variant.keys].tolist()
    values = torch.randint(0, VALUE_DIGITS, (variant.needles, VALUE_LENGTH), generator=g) + BYTES
    asked = torch.randperm(variant.keys, generator=g)[: variant.asked].tolist()
    where = torch.randint(0, size + 1, (variant.needles,), generator=g).tolist()
    where[asked[0]] = slots[int(torch.randint(0, len(slots), (1,), generator=g))]
    order = sorted(range(variant.needles), key=lambda j: (where[j], j))
    out, at = [], 0
    for j in order:
        out += filler[at : where[j]] + [KEY, *key_tokens(keys[j % variant.keys]), IS, *values[j].tolist()]
        at = where[j]
    out += filler[at:] + [QUERY]
    for a in asked:
        out += [*key_tokens(keys[a]), IS]
        out += [v for j in order if j % variant.keys == a for v in values[j].tolist()]
    return out


def _filler(source: bytes, size: int, count: int, g: torch.Generator) -> list[list[int]]:
    """``count`` windows of ``size`` consecutive bytes of ``source``, each starting at a uniformly drawn byte."""
    starts = torch.randint(0, len(source) - size + 1, (count,), generator=g).tolist()
    return [list(source[s : s + size]) for s in starts]


def _make_at(variant: NeedleVariant, source: bytes, size, count, max_size, g, slots) -> Tensor:
    """``count`` instances of ``size`` filler bytes from ``source``, int64 [count, sequence_length(size)]."""
    if size > len(source):
        raise OctlmError(
            f"{variant.name}: an instance of {size} filler bytes needs that much text, and the split holds "
            f"{len(source)}; give more --text or lower --task-length or --multipliers"
        )
    rows = [_instance(variant, filler, slots, g) for filler in _filler(source, size, count, g)]
    return torch.tensor(rows, dtype=torch.long)


def _task(variant: NeedleVariant, source: bytes, held_out: bytes | None) -> Task:
    answer = len(variant.scored())
    make_at = functools.partial(_make_at, variant, source)
    return Task(
        variant.name,
        variant.description,
        lambda m: VOCAB,
        lambda n: n + variant.needles * NEEDLE_LENGTH + 1 + answer,
        lambda n: answer,
        lambda n, c, m, g: make_at(n, c, m, g, list(range(n + 1))),
        make_at,
        lambda n: variant.scored(),
        None if held_out is None else lambda: _task(variant, held_out, None),
    )


def needle_task(name: str, text: tuple[str, ...] | None = None) -> Task:
    """Needle task ``name`` (a key of :data:`VARIANTS`) on the corpus ``text`` names: filler from its training split,
    and from its validation split in :meth:`~octlm.studies.tasks.generators.Task.evaluation`.

    Raises:
        KeyError: for a name that is no needle task.
        DataError: as :func:`load_haystack`.
    """
    haystack = load_haystack(text)
    return _task(VARIANTS[name], haystack.train, haystack.validation)


def needle_segments(variant: NeedleVariant, row: list[int]) -> tuple[list[str], list[int]]:
    """Each token's segment in ``row`` (one instance), and the positions that predict a scored token.

    Segments (Yang et al. 2025, arXiv 2501.18795, Figure 1: begin, needle,
    context, end): ``needle``, the tokens of a needle that holds an asked key;
    ``question``, ``QUERY`` and everything after it; ``start``, the first
    :data:`START_TOKENS` of the rest; ``filler``, the rest (the text, and the
    needles of keys not asked: distractors are haystack).
    """
    asked_keys = set()
    first = row.index(QUERY)
    answer = row[first + 1 :]
    step = KEY_LENGTH + 1 + variant.values_per_key * VALUE_LENGTH
    for a in range(variant.asked):
        asked_keys.add(tuple(answer[a * step : a * step + KEY_LENGTH]))
    kinds = ["filler"] * len(row)
    for i, token in enumerate(row[:first]):
        if token == KEY and tuple(row[i + 1 : i + 1 + KEY_LENGTH]) in asked_keys:
            kinds[i : i + NEEDLE_LENGTH] = ["needle"] * NEEDLE_LENGTH
    kinds[:START_TOKENS] = [k if k == "needle" else "start" for k in kinds[:START_TOKENS]]
    kinds[first:] = ["question"] * (len(row) - first)
    scored = [first + 1 + i for i, s in enumerate(variant.scored()) if s]
    return kinds, [p - 1 for p in scored]


#: Tokens at the start of the sequence counted apart: where attention sinks gather (Xiao et al. 2024).
START_TOKENS = 4
SEGMENTS = ("start", "needle", "filler", "question")


__all__ = [
    "DEFAULT_TEXT",
    "IS",
    "KEY",
    "KEY_LENGTH",
    "NEEDLES",
    "NEEDLE_LENGTH",
    "QUERY",
    "SEGMENTS",
    "START_TOKENS",
    "VALUE_LENGTH",
    "VARIANTS",
    "VOCAB",
    "Haystack",
    "check_haystack",
    "NeedleVariant",
    "key_tokens",
    "load_haystack",
    "needle_segments",
    "needle_task",
]
