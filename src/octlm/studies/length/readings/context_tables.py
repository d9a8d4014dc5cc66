"""The ``--context-curve`` section of ``length.md`` and its figure, ``context.png``, from the reading's records
(:mod:`octlm.studies.length.readings.context_curve`)."""

from __future__ import annotations

from octlm.studies.shared.core import mean_std


def _by_label(records: list[dict]) -> dict[str, dict[int, list[float]]]:
    """``{label: {c: [bpb per seed]}}`` of the ``context`` records, in their order."""
    found: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if r["record"] == "context":
            found.setdefault(r["label"], {}).setdefault(r["context"], []).append(r["bpb"])
    return found


def _cell(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    mean, std = mean_std(values)
    return f"{mean:.4f}" + (f"±{std:.4f}" if std is not None else "")


def _context(c: int | None, longest: int) -> str:
    return f"beyond {longest}" if c is None else str(c)


def sentence(record: dict, train_length: int) -> str:
    """One sentence on a model's effective context, from its ``effective_context`` record."""
    label, c, threshold = record["label"], record["effective"], record["threshold"]
    interval = f"[{_context(record['low'], record['longest'])}, {_context(record['high'], record['longest'])}]"
    if c is None:
        short = [g for g in record["gains"] if g["difference"] >= threshold]
        last = max(short, key=lambda g: (g["from"], g["to"])) if short else None
        return (
            f"`{label}` has no context length short of {record['longest']} that every longer one misses by less than "
            f"{threshold}: going from {last['from']} to {last['to']} tokens lowers bits per byte by "
            f"{last['difference']:.4f} (95% interval [{last['low']:.4f}, {last['high']:.4f}]); "
            f"replicates put its knee in {interval}."
            if last
            else f"`{label}` has a single context length: no gain to measure."
        )
    where = "within" if c <= train_length else "past"
    return (
        f"`{label}` uses about {c} token{'' if c == 1 else 's'} of context ({where} its training length "
        f"{train_length}): no longer context lowers its bits per byte by {threshold} or more, and replicates put "
        f"its knee in {interval}."
    )


def context_markdown(records: list[dict], train_length: int) -> str:
    """The section: bits per byte by context length (a row per c, a column per model; mean ± std over seeds), then
    each model's effective context with its interval and a sentence."""
    curves = _by_label(records)
    effective = {r["label"]: r for r in records if r["record"] == "effective_context"}
    sample = next((r for r in records if r["record"] == "context_targets"), {"positions": []})
    labels = list(curves)
    grid = sorted({c for cells in curves.values() for c in cells})
    any_record = next(iter(effective.values()), None)
    lines = [
        "## Loss against available context",
        "",
        f"Bits per byte of the same {len(sample['positions'])} validation targets, each predicted from exactly c "
        f"tokens before it (trained at T = {train_length}; lower is better; n/a: past a learned table's rows):",
        "",
        "| c | " + " | ".join(f"`{label}`" for label in labels) + " |",
        "| ---: |" + " ---: |" * len(labels),
    ]
    for c in grid:
        lines.append(f"| {c} | " + " | ".join(_cell(curves[label].get(c)) for label in labels) + " |")
    if any_record is not None:
        lines += [
            "",
            f"Effective context: the smallest c that no longer context beats by {any_record['threshold']} bits per "
            f"byte or more; its interval: the central {any_record['confidence']:.0%} of the knees the same rule "
            f"finds in each replicate of a paired bootstrap over the targets crossed with {any_record['seeds']} "
            f"seed{'' if any_record['seeds'] == 1 else 's'} ({any_record['resamples']:,} resamples, "
            f"generator seed {any_record['bootstrap_seed']}).",
            "",
            "| model | effective context | interval |",
            "| --- | ---: | ---: |",
        ]
        for label, r in effective.items():
            shown = _context(r["effective"], r["longest"])
            lines.append(
                f"| `{label}` | {shown} | [{_context(r['low'], r['longest'])}, {_context(r['high'], r['longest'])}] |"
            )
        lines += ["", *(f"- {sentence(r, train_length)}" for r in effective.values())]
    return "\n".join(lines) + "\n"


def context_plot(records: list[dict], train_length: int) -> bytes:
    """PNG bytes: bits per byte against c (log2 axis), one line per model (mean over seeds, ± std shaded), a dotted
    line at T, and each model's effective context marked."""
    import numpy as np

    from octlm.inspect.figures import Figure, png_bytes

    curves = _by_label(records)
    effective = {r["label"]: r["effective"] for r in records if r["record"] == "effective_context"}
    fig = Figure(figsize=(8, 5), dpi=110)
    ax = fig.subplots(1, 1)
    for k, (label, cells) in enumerate(curves.items()):
        xs = sorted(cells)
        ys = np.array([np.mean(cells[c]) for c in xs])
        sd = np.array([np.std(cells[c], ddof=1) if len(cells[c]) > 1 else 0.0 for c in xs])
        ax.plot(xs, ys, marker="o", color=f"C{k % 10}", label=label)
        ax.fill_between(xs, ys - sd, ys + sd, color=f"C{k % 10}", alpha=0.15)
        if effective.get(label) in cells:
            c = effective[label]
            ax.plot([c], [np.mean(cells[c])], marker="*", markersize=14, color=f"C{k % 10}")
    ax.axvline(train_length, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel(f"tokens of context c (dotted: training length T={train_length}; star: effective context)")
    ax.set_ylabel("validation bits per byte")
    ax.set_title("loss against available context (the same targets at every c)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


__all__ = ["context_markdown", "context_plot", "sentence"]
