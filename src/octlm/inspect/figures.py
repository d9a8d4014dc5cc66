"""Figures of a trained run's first layer, drawn with matplotlib (``octlm embeddings``).

* :func:`position_figure`: the cosine similarity of every pair of position
  vectors as a heatmap, and beside it the mean similarity at each distance,
  next to the sinusoidal formula (Vaswani et al. 2017 §3.5) of the same size.
* :func:`pca_figure`: the token table projected on its first two principal
  components, coloured by how often each token occurs in training, with the
  most frequent tokens and the asked-for tokens and their neighbours labelled.

Both return a :class:`matplotlib.figure.Figure` built without pyplot and
drawn on an Agg canvas (:func:`png_bytes`), so no display or backend is
involved; :func:`save_png` writes one atomically. Every module of octlm that
draws imports matplotlib through this one (``Figure`` is here for them), so
a backend inherited from a notebook cannot break the import.
"""

from __future__ import annotations

import functools
import io
import json
import os
import sys
from pathlib import Path

import numpy as np


def _import_matplotlib() -> None:
    """Import matplotlib whatever backend the environment's ``MPLBACKEND`` names.

    Jupyter and Colab set ``MPLBACKEND=module://matplotlib_inline.backend_inline``
    and pass it on to the shells they start; where that backend is not
    installed matplotlib refuses the name at import (3.9 and later; earlier
    versions refuse unknown plain names), and ``octlm train`` ended with a
    traceback after saving its model. octlm draws files, never windows, so
    matplotlib is imported with the variable unset; the inherited value is
    then given to matplotlib where it accepts it, as its own import would,
    so that a notebook's pyplot keeps its backend.
    """
    if "matplotlib" in sys.modules:
        return
    inherited = os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib
    finally:
        if inherited is not None:
            os.environ["MPLBACKEND"] = inherited
    if inherited:
        try:
            matplotlib.rcParams["backend"] = inherited
        except ValueError:
            pass


_import_matplotlib()

from matplotlib import patheffects  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from octlm.data.token_display import visible_token  # noqa: E402
from octlm.fileio import atomic_write  # noqa: E402
from octlm.inspect.diagnostics import cosine_similarity_matrix  # noqa: E402
from octlm.model.positions import PositionVectors, sinusoidal_positions  # noqa: E402

#: Fonts whose glyphs are placeholders (one box for every code point): never used to draw a label.
_PLACEHOLDER_FONTS = ("Last Resort",)


@functools.cache
def font_coverage() -> tuple[tuple[str, frozenset[int]], ...]:
    """``(family, code points it has glyphs for)`` for every font matplotlib finds, DejaVu Sans first.

    Fonts FreeType cannot size (colour bitmap emoji fonts, broken files) are
    left out: matplotlib would draw them as boxes too.
    """
    from matplotlib import font_manager, ft2font

    fonts, seen = [], set()
    for entry in sorted(font_manager.fontManager.ttflist, key=lambda f: (f.name != "DejaVu Sans", f.name)):
        if entry.name in seen or entry.name.startswith(_PLACEHOLDER_FONTS):
            continue
        try:
            font = ft2font.FT2Font(entry.fname)
            font.set_size(10, 72)
            points = frozenset(font.get_charmap())
        except (OSError, RuntimeError, ValueError):
            continue
        seen.add(entry.name)
        fonts.append((entry.name, points))
    return tuple(fonts)


def _escaped(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def shown_label(text: str) -> tuple[str, list[str]]:
    """A token label as the figures draw it, and the font families to draw it with.

    The text is :func:`visible_token`'s; each character is drawn with the
    first installed font that has a glyph for it (DejaVu Sans, matplotlib's
    own, first), so CJK or emoji tokens show as themselves where a font for
    them is installed. A character no installed font can draw is written as
    its code point, ``\\u4e16`` or ``\\U0001f600``, instead of an empty box;
    ``$`` is kept out of mathtext.
    """
    families = ["DejaVu Sans"]
    shown = []
    for c in visible_token(text):
        family = next((name for name, points in font_coverage() if ord(c) in points), None)
        if family is None:
            shown.append(_escaped(c))
            continue
        shown.append(c)
        if family not in families:
            families.append(family)
    return "".join(shown).replace("$", r"\$"), families


def mean_by_distance(similarity: np.ndarray) -> np.ndarray:
    """Mean of the ``d``-th diagonal of a square matrix [T, T] for ``d`` in ``0 .. T-1`` -> [T]."""
    n = similarity.shape[0]
    return np.array([np.diagonal(similarity, offset=d).mean() for d in range(n)])


def position_figure(positions: PositionVectors, title: str) -> Figure:
    """Heatmap of the position similarity map plus similarity against distance.

    Args:
        positions: the run's position vectors [T, C] (:func:`octlm.inspect.embeddings.run_position_vectors`).
        title: names the run in the figure's title.
    """
    vectors = positions.vectors.float()
    length, width = vectors.shape
    similarity = cosine_similarity_matrix(vectors).numpy()
    formula = cosine_similarity_matrix(sinusoidal_positions(length, width)).numpy()

    figure = Figure(figsize=(12, 5.4), dpi=110, layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=[1.05, 1])
    image = left.imshow(similarity, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    left.set_title(
        f"cosine similarity of {positions.source} position vectors\n({length} positions × {width} numbers)", fontsize=11
    )
    left.set_xlabel("position s")
    left.set_ylabel("position t")
    figure.colorbar(image, ax=left, label="cosine similarity", shrink=0.85)

    distance = np.arange(length)
    right.plot(
        distance, mean_by_distance(similarity), color="#1f77b4", linewidth=2, label=f"this run ({positions.source})"
    )
    right.plot(
        distance,
        mean_by_distance(formula),
        color="#d62728",
        linewidth=1.5,
        linestyle="--",
        label=f"sinusoidal formula, width {width}",
    )
    right.axhline(0, color="#999", linewidth=0.8)
    right.set_xlim(0, length - 1)
    right.set_ylim(-1.05, 1.05)
    right.set_xlabel("distance |t − s| (positions)")
    right.set_ylabel("mean cosine similarity")
    right.set_title("similarity against distance", fontsize=11)
    right.grid(alpha=0.3)
    right.legend(loc="upper right", fontsize=9)
    figure.suptitle(title, fontsize=13)
    return figure


def loss_figure(records: list[dict], title: str) -> Figure:
    """Training and validation loss (nats per token) against step, from the records of ``metrics.jsonl``."""
    figure = Figure(figsize=(8, 4.8), dpi=110, layout="constrained")
    axes = figure.subplots()
    for kind, key, style in (
        ("train", "loss", dict(color="#1f77b4", linewidth=1.2)),
        ("eval", "val_loss", dict(color="#d62728", linewidth=2, marker="o", markersize=4)),
    ):
        points = [
            (r["step"], r[key]) for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))
        ]
        if points:
            steps, losses = zip(*points, strict=True)
            axes.plot(steps, losses, label="training" if kind == "train" else "validation", **style)
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats per token)")
    axes.set_title(title, fontsize=11)
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(loc="upper right", fontsize=9)
    return figure


LOSS_FIGURE = "loss.png"  # in a run folder, beside metrics.jsonl


def write_loss_figure(metrics_path: str | Path, path: str | Path, title: str) -> Path | None:
    """:func:`loss_figure` of a run's ``metrics.jsonl`` written to ``path`` (PNG, atomically); ``None`` when nothing was
    logged."""
    lines = Path(metrics_path).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return save_png(loss_figure(records, title), path) if records else None


def pca_figure(
    coords: np.ndarray,
    explained: np.ndarray,
    labels: list[str],
    counts: np.ndarray | None,
    title: str,
    marked: list[int] = (),
    neighbours: dict[int, list[int]] | None = None,
    n_frequent: int = 30,
) -> Figure:
    """Scatter of the token table's first two principal components.

    Args:
        coords: [vocab_size, 2] projected rows (:func:`octlm.inspect.embeddings.pca_2d`).
        explained: [2] fractions of variance of the two components.
        labels: every token's text, by id.
        counts: training-split count of every token, or ``None``.
        title: names the run.
        marked: token ids to ring in red and label (the asked-for tokens).
        neighbours: ``{token id: [neighbour ids]}`` to ring and label in black.
        n_frequent: how many of the most frequent tokens to label.
    """
    figure = Figure(figsize=(11, 8.5), dpi=110, layout="constrained")
    axes = figure.subplots()
    x, y = coords[:, 0], coords[:, 1]
    if counts is not None:
        shown = np.maximum(counts, 1)
        order = np.argsort(shown)
        norm = LogNorm(vmin=1, vmax=max(2, shown.max()))
        points = axes.scatter(
            x[order], y[order], c=shown[order], s=14, cmap="viridis_r", norm=norm, alpha=0.85, linewidths=0
        )
        figure.colorbar(
            points, ax=axes, label="times seen in the training split (log scale; 1 = never or once)", shrink=0.8
        )
        frequent = [int(i) for i in np.argsort(-counts, kind="stable")[:n_frequent]]
    else:
        axes.scatter(x, y, s=14, color="#1f77b4", alpha=0.7, linewidths=0)
        frequent = []
    neighbours = neighbours or {}
    near = [n for ids in neighbours.values() for n in ids if n not in marked]
    near = list(dict.fromkeys(near))
    for i in near:
        axes.scatter([x[i]], [y[i]], s=60, facecolors="none", edgecolors="black", linewidths=1.2, zorder=3)
    for i in marked:
        axes.scatter([x[i]], [y[i]], s=120, facecolors="none", edgecolors="#d62728", linewidths=2, zorder=4)
    labels_to_place = [(i, {"fontsize": 11, "fontweight": "bold", "color": "#d62728"}) for i in marked]
    labels_to_place += [(i, {"fontsize": 9, "color": "black"}) for i in near]
    labels_to_place += [(i, {"fontsize": 8, "color": "#444"}) for i in frequent if i not in near and i not in marked]
    _place_labels(figure, axes, coords, labels, labels_to_place)
    axes.set_xlabel(f"PC1 ({100 * explained[0]:.1f}% of variance)")
    axes.set_ylabel(f"PC2 ({100 * explained[1]:.1f}% of variance)")
    how = f"labels: the {len(frequent)} most frequent tokens" if frequent else "no token counts (train.bin missing)"
    if marked:
        how += "; red: asked-for tokens; black rings: their nearest neighbours"
    axes.set_title(f"token embeddings, first two principal components ({len(labels)} tokens)\n{how}", fontsize=11)
    axes.grid(alpha=0.25)
    figure.suptitle(title, fontsize=13)
    return figure


#: Where a label may sit relative to its point, in points: tried in this order.
_OFFSETS = [
    (5, 4),
    (5, -12),
    (-5, 4),
    (-5, -12),
    (0, 10),
    (0, -18),
    (12, 14),
    (12, -24),
    (-12, 14),
    (-12, -24),
    (20, 0),
    (-20, 0),
]


def _place_labels(figure: Figure, axes, coords: np.ndarray, labels: list[str], items: list[tuple[int, dict]]) -> None:
    """Label points without letting labels overlap: greedy, in the order given (most important first).

    Each label tries the offsets of :data:`_OFFSETS` and takes the first whose
    box (estimated from the font size) overlaps no label placed before; a
    label that fits nowhere is dropped, unless it is bold (asked for), which
    then takes the first offset with a leader line.
    """
    figure.draw_without_rendering()  # fixes the constrained layout, so data -> pixel transforms hold
    to_pixels = axes.transData.transform
    scale = figure.dpi / 72.0
    placed: list[tuple[float, float, float, float]] = []
    for index, style in items:
        text, families = shown_label(labels[index])
        size = style["fontsize"] * scale
        width, height = 0.62 * size * max(1, len(text)), 1.2 * size
        px, py = to_pixels(coords[index])
        chosen = None
        for dx, dy in _OFFSETS:
            left = px + dx * scale - (width if dx < 0 else 0)
            bottom = py + dy * scale
            box = (left, bottom, left + width, bottom + height)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                chosen = (dx, dy, box)
                break
        if chosen is None:
            if style.get("fontweight") != "bold":
                continue
            dx, dy = 24, 24
            chosen = (dx, dy, (px + dx * scale, py + dy * scale, px + dx * scale + width, py + dy * scale + height))
        dx, dy, box = chosen
        placed.append(box)
        axes.annotate(
            text,
            coords[index],
            xytext=(dx, dy),
            textcoords="offset points",
            ha="right" if dx < 0 else "left",
            va="bottom",
            arrowprops={"arrowstyle": "-", "color": "#888", "linewidth": 0.6} if abs(dx) > 10 or abs(dy) > 12 else None,
            zorder=5,
            path_effects=[patheffects.withStroke(linewidth=3, foreground="white")],
            fontfamily=families,
            **style,
        )


def png_bytes(figure) -> bytes:
    """``figure`` rendered as a PNG file's bytes, on an Agg canvas whatever matplotlib's backend."""
    buffer = io.BytesIO()
    FigureCanvasAgg(figure)
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def save_png(figure: Figure, path: str | Path) -> Path:
    """Render ``figure`` to PNG and write it to ``path`` atomically."""
    atomic_write(path, png_bytes(figure))
    Path(path).chmod(0o644)
    return Path(path)


__all__ = [
    "Figure",
    "LOSS_FIGURE",
    "font_coverage",
    "loss_figure",
    "mean_by_distance",
    "pca_figure",
    "position_figure",
    "save_png",
    "shown_label",
    "write_loss_figure",
]
