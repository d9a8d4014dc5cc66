"""What the leaderboard trains: its corpora, the studies of each, and the options every study shares.

The protocol is the length study's headline one (docs/length-study.md, "Three seeds on both built-in corpora"):
the default shape (2 layers, 4 heads, ``d_model`` 128, GPT-2 blocks, a 1,024-token BPE), T = 128 tokens, 679 Muon
steps of 32 blocks, seeds 1337 to 1339, one thread per model (bits per byte then repeat on one machine), no
extension stage, both readings at 1x to 16x T. Every registered scheme is a row of one study; the windowed-RoPE /
global-NoPE hybrid is a ``--layouts`` row of the same study; RoPE with learned sinks and RoPE with the output gate
switch a whole study's attention, so each is a study of its own, on the same text, tokenizer and seeds, whose rows
pair window by window with the first (:mod:`octlm.studies.leaderboard.board`). The untrained RoPE scalings are
readings of the RoPE row, as in every length study.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The options every study of the leaderboard is run with: the headline protocol.
HEADLINE = ("--seeds", "3", "--max-steps", "679", "--extend-to", "0", "--threads", "1")
#: The hybrid of Yang et al. 2025 ("Rope to Nope and Back Again") at the default two layers: a RoPE layer that sees
#: its last 32 tokens, then a global NoPE layer.
HYBRID = "swa-nope=rope/w32 none"
#: The standard library's packages the code corpus reads: its docstrings, comments and code, 1.72 MB (all of it
#: holds ten times the validation text, which put one study past three hours on two cores).
STDLIB_PACKAGES = ("asyncio", "email", "http", "json", "xml", "concurrent", "importlib")


def _stdlib_packages() -> list[str]:
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    return [str(root / name) for name in STDLIB_PACKAGES]


@dataclass(frozen=True)
class Corpus:
    """One text the leaderboard trains on: ``name`` names its study folders, ``title`` its tables and findings,
    ``short`` the README table's column heads; ``text()`` gives ``--text``'s values."""

    name: str
    title: str
    text: Callable[[], list[str]]
    short: str


CORPORA = {
    "shakespeare": Corpus("shakespeare", "tinyshakespeare", lambda: ["tinyshakespeare"], "tinyshakespeare"),
    "stdlib": Corpus("stdlib", "the standard library (seven packages)", _stdlib_packages, "stdlib"),
}


@dataclass(frozen=True)
class Study:
    """One length study of each corpus: its own options beside :data:`HEADLINE`, and ``rows``, the labels it puts on
    the board (study label -> board label; empty: every row under its own label)."""

    name: str
    options: tuple[str, ...]
    rows: dict[str, str] = field(default_factory=dict)


def rotary() -> str:
    """The scheme the variants are built on: the first registered one that every RoPE scaling acts on (RoPE)."""
    from octlm.model.positions import ROPE_SCALINGS, SCHEMES

    return next(name for name, cls in SCHEMES.items() if set(ROPE_SCALINGS) <= set(cls.scalings()))


def studies() -> list[Study]:
    """The leaderboard's studies of one corpus: every registered scheme (in registration order) and the hybrid in
    one; RoPE with learned sinks and RoPE with the output gate each in its own."""
    from octlm.model.scheme_catalog import SCHEMES

    rope = rotary()
    return [
        Study("schemes", ("--schemes", *SCHEMES, "--layouts", HYBRID)),
        Study("sinks", ("--schemes", rope, "--attention-sinks", "--rope-scalings"), {rope: f"{rope}-sinks"}),
        Study("gate", ("--schemes", rope, "--output-gate", "--rope-scalings"), {rope: f"{rope}-gate"}),
    ]


def _each(schemes: list[str], suffix: str, *options: str) -> Study:
    """A study of ``schemes`` with ``options`` beside them, its rows labelled ``<scheme>-<suffix>``."""
    return Study(suffix, ("--schemes", *schemes, *options, "--rope-scalings"), {s: f"{s}-{suffix}" for s in schemes})


def menu_studies() -> list[Study]:
    """The first layer's menu beside its controls, one study per option (each is study-wide in ``octlm length``):
    the Day-1 model plain, and the length study's schemes whose position acts inside attention alone (NoPE, RoPE,
    ALiBi) plain, with Canon-A, with Canon-ABCD and with the smear gate;
    RoPE turning half of each head with and without the key offset; the Day-1 model with each token-table option,
    and widened to about the parameters of those that add some (:data:`WIDER_CONTROLS`). The RoPE scalings are left
    to the leaderboard."""
    from octlm.model.positions import length_study_schemes
    from octlm.model.positions.registry import evicting_schemes
    from octlm.model.scheme_catalog import default_scheme

    rope, day1 = rotary(), default_scheme()
    # Order from the neighbours matters where the token's vector carries no position: the length study's schemes
    # whose position acts inside attention alone (NoPE, RoPE, ALiBi); a learned or sinusoidal row already has it.
    schemes = [name for name in length_study_schemes() if name in evicting_schemes()]
    return [
        Study("plain", ("--schemes", day1, *schemes, "--rope-scalings")),
        _each(schemes, "canonA", "--canon", "A"),
        _each(schemes, "canonABCD", "--canon", "ABCD"),
        _each(schemes, "smear", "--smear-gate"),
        _each([rope], "half", "--partial-rotary-factor", "0.5"),
        _each([rope], "half-koff", "--partial-rotary-factor", "0.5", "--key-offset"),
        _each([day1], "norm", "--embedding-norm", "norm"),
        _each([day1], "l2", "--embedding-norm", "l2"),
        _each([day1], "sqrtd", "--embedding-scale", "sqrt-d"),
        _each([day1], "lr1e-2", "--embedding-lr", "1e-2"),
        _each([day1], "x0", "--x0-skips"),
        _each([day1], "values", "--value-embeddings"),
        _each([day1], "bigram", "--bigram-rows", "5120"),
        _each([day1], "untied", "--untied-head"),
        *(_each([day1], f"d{width}", "--d-model", str(width)) for width in WIDER_CONTROLS),
    ]


#: The Day-1 model widened to about the parameters of the menu's options that add some, and the options (study names)
#: each width matches: at ``d_model`` 144 it holds 667,584 (value embeddings 675,456, the untied head 675,328), at 200
#: 1,196,000 (5,120 bigram rows 1,199,616): the nearest widths the four heads divide, each just under, so an option
#: ahead of its control is not ahead by size.
WIDER_CONTROLS = {144: ("values", "untied"), 200: ("bigram",)}


def menu_controls() -> dict[str, tuple[str, ...]]:
    """Each option's row on the menu board and the rows it is compared with, window by window (board labels).

    A position option (Canon-A, Canon-ABCD, the smear gate) is compared with its scheme plain; with every scheme but
    RoPE also with RoPE plain and RoPE with the same option, the comparisons of Allen-Zhu 2025 (Canon lifts NoPE to
    RoPE) and of the public small-scale check. The key offset is compared with RoPE turning half of each head (its
    only difference) and with RoPE; RoPE turning half with RoPE. A token-table option is compared with the Day-1
    model, and one that adds parameters also with the Day-1 model widened to about its size (:data:`WIDER_CONTROLS`).
    """
    from octlm.model.positions import length_study_schemes
    from octlm.model.positions.registry import evicting_schemes
    from octlm.model.scheme_catalog import default_scheme

    rope, day1 = rotary(), default_scheme()
    pairs: dict[str, tuple[str, ...]] = {}
    for option in ("canonA", "canonABCD", "smear"):
        for scheme in (name for name in length_study_schemes() if name in evicting_schemes()):
            beside_rope = () if scheme == rope else (rope, f"{rope}-{option}")
            pairs[f"{scheme}-{option}"] = (scheme, *beside_rope)
    pairs[f"{rope}-half"] = (rope,)
    pairs[f"{rope}-half-koff"] = (f"{rope}-half", rope)
    wider = {name: f"{day1}-d{width}" for width, names in WIDER_CONTROLS.items() for name in names}
    for study in menu_studies():
        if list(study.rows) == [day1] and study.name not in (f"d{width}" for width in WIDER_CONTROLS):
            pairs[study.rows[day1]] = (day1, *([wider[study.name]] if study.name in wider else []))
    return pairs


#: The sub-boards the findings compare within, beside the whole board: RoPE and its untrained scalings (so that the
#: best scaling is the best among all that were run, not only against plain RoPE), and RoPE beside RoPE with learned
#: sinks and with the output gate. :func:`in_group` says which rows each holds.
GROUPS = ("scalings", "sinks and gate")


def is_scaling(label: str) -> bool:
    """Whether the board row ``label`` is an untrained scaling read from a scheme's row (``<scheme>+<scaling>``)."""
    from octlm.model.positions import ROPE_SCALINGS

    base, _, scaling = label.rpartition("+")
    return bool(base) and scaling in ROPE_SCALINGS


def in_group(group: str, label: str) -> bool:
    """Whether the board row ``label`` belongs to the sub-board ``group`` of :data:`GROUPS`."""
    rope = rotary()
    if group == "scalings":
        return label == rope or label.startswith(f"{rope}+")
    return label in (rope, f"{rope}-sinks", f"{rope}-gate")


#: The boards ``scripts/leaderboard.py`` runs and writes: the position schemes, and the first layer's menu.
BOARDS = {"schemes": studies, "menu": menu_studies}


def study_folder(out: Path, corpus: Corpus, study: Study) -> Path:
    """Where the leaderboard in ``out`` keeps one corpus's study."""
    return Path(out) / f"{corpus.name}-{study.name}"


def command(out: Path, corpus: Corpus, study: Study) -> list[str]:
    """``octlm``'s arguments for one study of the leaderboard in ``out``."""
    return [
        "length",
        "--text",
        *corpus.text(),
        *HEADLINE,
        *study.options,
        "--out",
        str(study_folder(out, corpus, study)),
    ]


__all__ = [
    "BOARDS",
    "CORPORA",
    "HEADLINE",
    "HYBRID",
    "STDLIB_PACKAGES",
    "Corpus",
    "Study",
    "GROUPS",
    "command",
    "in_group",
    "is_scaling",
    "menu_controls",
    "menu_studies",
    "WIDER_CONTROLS",
    "rotary",
    "studies",
    "study_folder",
]
