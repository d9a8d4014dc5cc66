"""The leaderboard as one figure: bits per byte against the evaluation length, a line per row, a panel per corpus and
reading, and per corpus one panel of RoPE beside its untrained scalings (``leaderboard.png``)."""

from __future__ import annotations

from matplotlib import colormaps
from matplotlib.figure import Figure

from octlm.studies.leaderboard.markdown import READING_TITLES
from octlm.studies.leaderboard.protocol import in_group, is_scaling

FIGURE = "leaderboard.png"


def series(columns: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """Per row label, the multipliers where it has a mean and the means there (a row without one, such as a learned
    table past T, stops where its scores stop)."""
    found: dict[str, tuple[list[int], list[float]]] = {}
    for col in sorted(columns, key=lambda c: c["multiplier"]):
        for cell in col["cells"]:
            if "bpb" in cell:
                xs, ys = found.setdefault(cell["label"], ([], []))
                xs.append(col["multiplier"])
                ys.append(cell["bpb"])
    return found


def leaderboard_figure(records: list[dict]) -> Figure:
    """A row of panels per corpus: one per reading with every row but the scalings, then RoPE and its untrained
    scalings in non-overlapping windows (the scalings of every scheme would bury the schemes); in each, the mean bits
    per byte over the seeds at each multiple of T, on a log-2 axis. The rows keep one colour and line style throughout.
    """
    head = next(r for r in records if r["record"] == "leaderboard")
    columns = [r for r in records if r["record"] == "column"]
    corpora = [c for c in head["corpora"] if any(col["corpus"] == c for col in columns)]
    labels = list(dict.fromkeys(cell["label"] for col in columns for cell in col["cells"]))
    labels.sort(key=is_scaling)  # the schemes' own rows take the first colours, so no two of them share one
    palette = colormaps["tab20"]
    style = {label: (palette(i % 20), ("-", "--", ":")[i // 20 % 3]) for i, label in enumerate(labels)}
    figure = Figure(figsize=(16, 4.5 * len(corpora) + 1), layout="constrained")
    panels = figure.subplots(len(corpora), len(READING_TITLES) + 1, squeeze=False)
    views = [(reading, title, lambda label: not is_scaling(label)) for reading, title in READING_TITLES.items()]
    views.append(
        ("bpb", "RoPE's untrained scalings, non-overlapping windows", lambda label: in_group("scalings", label))
    )
    for i, corpus in enumerate(corpora):
        for j, (reading, title, shown) in enumerate(views):
            axes = panels[i][j]
            chosen = [c for c in columns if c["corpus"] == corpus and c["reading"] == reading]
            for label, (xs, ys) in series(chosen).items():
                if shown(label):
                    colour, line = style[label]
                    axes.plot(xs, ys, line, color=colour, marker=".", label=label)
            axes.set_xscale("log", base=2)
            axes.set_xlabel("evaluation length / T")
            axes.set_ylabel("bits per byte (lower is better)")
            axes.set_title(f"{head['corpora'][corpus]}, {title}", fontsize=9)
        panels[i][-1].legend(fontsize=7)
    handles, names = panels[0][0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside right upper", fontsize=7)
    return figure


__all__ = ["FIGURE", "leaderboard_figure", "series"]
