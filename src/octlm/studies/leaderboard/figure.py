"""The leaderboard as one figure: bits per byte against the evaluation length, a line per row, a panel per corpus and
reading, and per corpus one panel of RoPE beside its untrained scalings where the board has some
(``leaderboard.png``)."""

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
    views = [(reading, title, lambda label: not is_scaling(label)) for reading, title in READING_TITLES.items()]
    if any(is_scaling(label) for label in labels):  # a board without scalings (the menu) would show RoPE alone there
        views.append(
            ("bpb", "RoPE's untrained scalings, non-overlapping windows", lambda label: in_group("scalings", label))
        )
    figure = Figure(figsize=(16 if len(views) > 2 else 12, 4.5 * len(corpora) + 1), layout="constrained")
    panels = figure.subplots(len(corpora), len(views), squeeze=False)
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
        if len(views) > len(READING_TITLES):
            panels[i][-1].legend(fontsize=7)
    handles, names = panels[0][0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside right upper", fontsize=7)
    return figure


#: The lengths the menu board's second figure shows each option against its controls at (multiples of T).
PAIR_MULTIPLIERS = (1, 16)


def pairs_figure(records: list[dict], multipliers: tuple[int, ...] = PAIR_MULTIPLIERS) -> Figure:
    """The menu board's options against their controls: per corpus a panel per multiple of T in ``multipliers``, a
    line per pair (option minus control, non-overlapping windows) with its 95% interval as a bar, filled where the
    option is ahead or behind at 95%, hollow where not separated; a pair with no score at a length (a learned table
    past T) is left out of that panel."""
    head = next(r for r in records if r["record"] == "leaderboard")
    pairs = [r for r in records if r["record"] == "pair" and r["reading"] == "bpb"]
    corpora = [c for c in head["corpora"] if any(p["corpus"] == c for p in pairs)]
    names = list(dict.fromkeys(f"{p['row']} − {p['control']}" for p in pairs))
    figure = Figure(figsize=(12, 0.22 * len(names) * len(corpora) + 1.5), layout="constrained")
    panels = figure.subplots(len(corpora), len(multipliers), squeeze=False)
    for i, corpus in enumerate(corpora):
        for j, multiplier in enumerate(multipliers):
            axes = panels[i][j]
            for p in (p for p in pairs if p["corpus"] == corpus and p["multiplier"] == multiplier):
                y = names.index(f"{p['row']} − {p['control']}")
                colour = {"ahead": "tab:green", "behind": "tab:red"}.get(p["status"], "tab:grey")
                axes.plot([p["low"], p["high"]], [y, y], color=colour)
                face = colour if p["status"] in ("ahead", "behind") else "white"
                axes.plot([p["difference"]], [y], "o", color=colour, markerfacecolor=face)
            axes.axvline(0, color="black", linewidth=0.8)
            axes.set_yticks(range(len(names)), names if j == 0 else [""] * len(names), fontsize=7)
            axes.set_ylim(len(names) - 0.5, -0.5)
            axes.set_xlabel("option minus control, bits per byte (below zero: the option is ahead)")
            axes.set_title(f"{head['corpora'][corpus]}, {multiplier}x T, non-overlapping windows", fontsize=9)
    return figure


__all__ = ["FIGURE", "PAIR_MULTIPLIERS", "leaderboard_figure", "pairs_figure", "series"]
