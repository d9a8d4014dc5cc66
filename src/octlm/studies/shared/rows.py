"""A study's layout rows (``--layouts``): a layer layout trained beside the position schemes, under a short label.

Each value of ``--layouts`` is ``LAYOUT`` or ``NAME=LAYOUT``. LAYOUT is what
``octlm train --layers`` takes (:mod:`octlm.model.layout`) with one rule
more: every entry names its scheme (``rope/w64*3 none``, not ``w64*3 none``),
because a study has no ``--position`` for an entry to take; its schemes are
rows of their own.

The label names the row in every table and record, its run folder and its
records in ``progress/``, so it holds only letters, digits, ``.``, ``_`` and
``-`` (no ``+``: a ``+`` in a label marks a RoPE scaling or randomized
positions; no ``@``: a fine-tune): NAME, or without one the layout spelled in
those characters (``rope/w64*3 none`` is ``rope-w64x3_none``).

Each layout row trains as ``octlm train --layers LAYOUT --position P`` with
every other option the study gives its scheme rows. ``P`` is what octlm
train's checks read (a RoPE scaling needs a ``--position`` that takes it), so
it is the scheme of the first global layer that takes a RoPE scaling, else
the layer scheme that reads the most options (:func:`row_position`).

RoPE scalings act only where positions run past what a layer met in training:
a window layer never sees a distance of ``W`` or more at any length, so only
a layout's *global* layers make it take a scaling (:func:`row_scalings`),
whether scored under one untrained (``--rope-scalings``) or fine-tuned with
one in the extension stage (:func:`row_extensions`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from octlm.declare import option, refused
from octlm.errors import OctlmError
from octlm.model.layout import LayoutError, read_entries
from octlm.model.positions import ROPE_SCALINGS, SCHEME_NAMES, SCHEMES, facts_of
from octlm.model.token_vectors import PLAIN

#: A row's label: its run folder's name and part of its records' names in ``progress/``.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: What a label may hold, for messages.
LABEL_SAYS = "letters, digits, '.', '_' and '-', starting with a letter or digit (it names the row's run folder)"
#: RoPE scalings a layout fine-tunes with beyond plain fine-tuning, on its global layers that take them: YaRN, which
#: SmolLM3 ships for the RoPE layers of its RoPE/NoPE 3:1 layout, and which leaves the fast-turning pairs (the short
#: distances) as trained. The all-RoPE row measures the other methods; each one more is a fine-tune per layout.
LAYOUT_SCALINGS = ("yarn",)
#: ``--layouts``' help, the same in the text and the task study.
LAYOUTS_HELP = (
    "layer layouts to train as rows beside --schemes, each LAYOUT or NAME=LAYOUT, "
    "LAYOUT as octlm train --layers takes it with every entry naming its scheme, e.g. "
    "'rope-nope=rope*3 none' 'swa-nope=rope/w32*3 none'; each row trains with the text, seed, "
    "shape and steps of the scheme rows, under the label NAME (or the layout spelled rope-w32x3_none)"
)


def schemes_option(default: Callable[[], list[str]], trains: str):
    """A study's ``--schemes``: any registered scheme, ``default`` read from the registry when used (each scheme
    says whether the study trains it, and a plug-in registered after import takes part); ``trains`` says which in
    the help."""
    return option(
        default,
        f"position schemes to train and compare (default: {trains})",
        nargs="+",
        choices=SCHEME_NAMES,
        metavar="SCHEME",
    )


def layouts_option():
    """A study's ``--layouts`` (:data:`LAYOUTS_HELP`), read by :func:`layout_rows`."""
    return option([], LAYOUTS_HELP, nargs="*", metavar="LAYOUT")


@dataclass(frozen=True)
class Layer:
    """One layer of a layout row as the study reads it: its scheme (``None`` when the entry names none), whether
    it attends globally (no ``wN`` key, or ``global`` after it), and its entry as written (``*K`` included)."""

    scheme: str | None
    global_: bool
    entry: str


@dataclass(frozen=True)
class LayoutRow:
    """One ``--layouts`` value.

    Attributes:
        label: the row's name (see the module's docstring).
        layers: the layout, its entries separated by one space (``DecoderConfig.layers``).
        given: the value as given, for messages.
    """

    label: str
    layers: str
    given: str

    @property
    def read(self) -> list[Layer]:
        """The layers, one per layer (an entry ``*K`` counts K), as far as the study reads them; read by the one
        reader of a layout (:func:`octlm.model.layout.read_entries`), so an entry the model would refuse raises its
        :class:`~octlm.model.layout.LayoutError` here too."""
        return [
            layer
            for entry in read_entries(self.layers)
            for layer in [Layer(entry.scheme, entry.keys.get("window") is None, entry.written)] * entry.repeat
        ]

    @property
    def schemes(self) -> list[str]:
        """The distinct schemes of its layers, in layer order."""
        return list(dict.fromkeys(layer.scheme for layer in self.read if layer.scheme is not None))


def spelled(layers: str) -> str:
    """A layout in the characters of a label: ``*`` as ``x``, ``/`` as ``-``, a space as ``_``, ``+`` dropped
    (``theta1e+6`` is ``theta1e6``); anything else a label cannot hold as ``-``."""
    text = layers.replace("+", "").replace("*", "x").replace("/", "-").replace(" ", "_")
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)


def layout_row(value: str) -> LayoutRow:
    """The row of one ``--layouts`` value, ``LAYOUT`` or ``NAME=LAYOUT``.

    Raises:
        OctlmError: naming the value, for an empty layout, an entry the layout's reader refuses
            (:func:`~octlm.model.layout.read_entries`) or a name a label cannot be.
    """
    name, sep, layers = value.partition("=")
    if not sep:
        name, layers = "", value
    layers = " ".join(layers.split())
    if not layers:
        raise OctlmError(f"--layouts {shlex.quote(value)}: give a layout after the name, e.g. rope-nope=rope*3 none")
    try:
        read_entries(layers)
    except LayoutError as err:
        raise OctlmError(f"--layouts {shlex.quote(value)}:{err}") from None
    if sep and not LABEL.fullmatch(name):
        raise OctlmError(f"--layouts {shlex.quote(value)}: the name {name!r} may hold only {LABEL_SAYS}")
    label = name or spelled(layers)
    if not LABEL.fullmatch(label):
        raise OctlmError(f"--layouts {shlex.quote(value)}: give it a name, NAME=LAYOUT, where NAME holds {LABEL_SAYS}")
    return LayoutRow(label, layers, value)


def layout_rows(values: list[str]) -> list[LayoutRow]:
    """The rows of ``--layouts``, in the order given (:func:`layout_row`)."""
    return [layout_row(value) for value in values]


def check_rows(rows: list[LayoutRow], schemes: list[str]) -> None:
    """Refuse layout rows that would collide or that leave a layer without a scheme, before any model is built.

    Raises:
        OctlmError: naming the layout, the layer where one is at fault, and the fix: a layer whose entry names no
            scheme, a label given twice or equal to a ``--schemes`` row, or one layout given twice.
    """
    for row in rows:
        where = f"--layouts {shlex.quote(row.given)}:"
        for number, layer in enumerate(row.read, start=1):
            if layer.scheme is None:
                raise OctlmError(
                    f"{where} layer {number} ({layer.entry!r}) names no scheme; "
                    f"in a study every entry names one (e.g. rope/{layer.entry}), "
                    "since the study's --schemes are rows of their own and give it no --position"
                )
        if row.label in schemes:
            raise OctlmError(
                f"{where} its label {row.label} is also a --schemes row; name it, e.g. {row.label}-layout={row.layers}"
            )
    labels = [row.label for row in rows]
    if twice := next((label for label in labels if labels.count(label) > 1), None):
        raise OctlmError(f"--layouts: two layouts are labelled {twice}; give each its own name, NAME=LAYOUT")
    layouts = [row.layers for row in rows]
    if twice := next((layers for layers in layouts if layouts.count(layers) > 1), None):
        named = " and ".join(row.label for row in rows if row.layers == twice)
        raise OctlmError(f"--layouts lists {twice!r} twice ({named}): it would train the same model twice; drop one")


def row_position(row: LayoutRow) -> str:
    """The ``--position`` the row's model trains with: the scheme of its first global layer that takes a RoPE scaling,
    else the first of its schemes that reads the most options."""
    scaled = [layer.scheme for layer in row.read if layer.global_ and SCHEMES[layer.scheme].scalings()]
    if scaled:
        return scaled[0]
    return max(row.schemes, key=lambda scheme: len(SCHEMES[scheme].reads))


def row_scalings(row: LayoutRow) -> list[str]:
    """The RoPE scalings (in :data:`ROPE_SCALINGS` order) some global layer of the row takes."""
    taken = {method for layer in row.read if layer.global_ for method in SCHEMES[layer.scheme].scalings()}
    return [method for method in ROPE_SCALINGS if method in taken]


def scalings_taken(schemes: list[str], layouts: list[LayoutRow] = ()) -> list[str]:
    """The RoPE scalings (in :data:`ROPE_SCALINGS` order) that at least one of ``schemes`` or ``layouts`` takes."""
    taken = {m for s in schemes if s in SCHEMES for m in SCHEMES[s].scalings()}
    return [m for m in ROPE_SCALINGS if m in taken.union(*(row_scalings(row) for row in layouts))]


def row_extensions(row: LayoutRow) -> list[str | None]:
    """The fine-tunes the extension stage makes of the row: ``None`` (plain fine-tuning) when every layer's scheme
    takes it, then each of :data:`LAYOUT_SCALINGS` that one of its global layers' schemes fine-tunes with; ``[]``
    when some layer's scheme stays out of the stage (as p-RoPE does)."""
    if not all(None in facts_of(scheme).extension_methods for scheme in row.schemes):
        return []
    tuned = {method for layer in row.read if layer.global_ for method in facts_of(layer.scheme).extension_methods}
    return [None, *(method for method in LAYOUT_SCALINGS if method in tuned)]


def unread_options(row: LayoutRow) -> set[str]:
    """The scheme options (``PositionScheme.reads`` of any scheme) no layer of the row reads: the study keeps them at
    their defaults for its model, as it does for a scheme row."""
    every = {name for cls in SCHEMES.values() for name in cls.reads}
    return every - {name for scheme in row.schemes for name in SCHEMES[scheme].reads}


def layout_settings(row: LayoutRow) -> dict:
    """The ``octlm train`` options that make a model the row's: ``{"layers", "position"}`` (:func:`row_position`)."""
    return {"layers": row.layers, "position": row_position(row)}


def legend(values: list[str]) -> str:
    """A Markdown line naming each layout row's layers, to head a study's tables (``""`` without layout rows)."""
    rows = layout_rows(values)
    said = ", ".join(f"`{row.label}` = `--layers {row.layers}`" for row in rows)
    return f"Layout rows (each entry a layer, from the input; docs/layouts.md): {said}.\n\n" if rows else ""


def carried(options: dict) -> str:
    """A Markdown line saying what every model of the study carries besides its scheme (learned sinks, an output
    gate, Canon layers, a first-layer option), to head its tables (``""`` when nothing: the rows' labels name the
    scheme alone)."""
    said = [
        what.format(options.get(name))
        for name, what in (
            ("attention_sinks", "learned attention sinks (--attention-sinks; docs/sinks-and-gates.md)"),
            ("output_gate", "an output gate (--output-gate; docs/sinks-and-gates.md)"),
            ("canon", "Canon layers at {} (--canon)"),
            ("key_offset", "keys carrying their predecessor's unturned channels (--key-offset)"),
            ("value_embeddings", "value embeddings (--value-embeddings)"),
            ("bigram_rows", "a hashed bigram table of {} rows (--bigram-rows)"),
            ("untied_head", "an output head of its own (--untied-head)"),
            ("smear_gate", "a smear gate (--smear-gate)"),
            ("x0_skips", "the embedding added back before each block (--x0-skips)"),
            ("embedding_norm", "token rows through --embedding-norm {}"),
            ("embedding_scale", "token rows scaled by --embedding-scale {}"),
            ("embedding_lr", "a token table trained at its own peak rate {} (--embedding-lr)"),
        )
        if options.get(name) not in (None, False, "", PLAIN)  # a study from before these options has none
    ]
    return f"Every model of this study has {' and '.join(said)}.\n\n" if said else ""


def check_layouts(rows: list[LayoutRow], schemes: list[str], models: Callable[[LayoutRow], list]) -> None:
    """Refuse, before anything is written, a layout row that cannot train: :func:`check_rows`, then the row's models
    (``models(row)``: their ``octlm train`` options) as the model and ``octlm train`` check them.

    Raises:
        OctlmError: one line that begins with the layout as given and names the layer and the fix where the layout
            is at fault (``--layouts 'rope/w0 none': layer 1 ('rope/w0'): a window of 0 tokens sees nothing; ...``).
    """
    from octlm.train.option_checks import check_options

    check_rows(rows, schemes)
    for row in rows:
        where = f"--layouts {shlex.quote(row.given)}:"
        try:
            built = models(row)
        except ValueError as err:  # DecoderConfig's: a LayoutError on layers, which begins with a space
            fault = refused(err) if getattr(err, "field", None) != "layers" else OctlmError(f"{where}{err.rest}")
            raise fault from None
        for train in built:
            try:
                check_options(train)
            except OctlmError as err:
                raise OctlmError(f"{where} {err}") from None


__all__ = [
    "LAYOUT_SCALINGS",
    "Layer",
    "LayoutRow",
    "check_rows",
    "layout_row",
    "layout_rows",
    "LAYOUTS_HELP",
    "check_layouts",
    "layout_settings",
    "legend",
    "unread_options",
    "row_extensions",
    "row_position",
    "row_scalings",
    "scalings_taken",
    "spelled",
]
