"""The leaderboard as Markdown: per corpus and reading a table of every row at every length, and the README's
compact table (non-overlapping windows at 1x, 4x and 16x T on each corpus).

A cell is the row's mean bits per byte over the seeds. The column's best is bold, with its sample standard
deviation; every other row gives its difference from the best with its 95% interval and how many seeds alone agree
(``3/3``), marked ``≈`` when the interval holds zero (the row is not separated from the best) and ``=`` when it
computes the best row's numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from octlm.studies.leaderboard.findings import findings
from octlm.studies.leaderboard.protocol import WIDER_CONTROLS
from octlm.studies.length.findings import signed

#: What the findings are, above them (the README's findings are the same lines).
FINDINGS_INTRO = (
    "Written from the columns below, in the reading of non-overlapping windows: per corpus and question, the best "
    "row's bits per byte, the rows whose 95% interval against it holds zero (not separated), and the nearest row "
    "behind it, each difference (row minus best) with its interval and the seeds that agree alone. The scalings and "
    "RoPE with sinks or the gate are compared among themselves (their own columns), not with every row."
)
#: How each reading is named in the tables' headings.
READING_TITLES = {"bpb": "non-overlapping windows", "sliding_bpb": "sliding windows (stride L/2)"}
#: The README's columns: multipliers of T in the reading of non-overlapping windows.
README_MULTIPLIERS = (1, 4, 16)


def cell(c: dict, seeds: int) -> str:
    """One cell of the full tables."""
    status = c["status"]
    if status in ("n/a", "not run"):
        return status
    if status == "best":
        spread = f" ± {c['sd']:.3f}" if c.get("sd") is not None else ""
        return f"**{c['bpb']:.3f}**{spread}"
    if status == "equal":
        return f"= {c['bpb']:.3f}"
    mark = "≈ " if status == "not separated" else ""
    agree = f", {c['seeds_agreeing']}/{seeds}" if seeds > 1 else ""
    return f"{mark}{c['bpb']:.3f} ({signed(c['difference'])} [{signed(c['low'])}, {signed(c['high'])}]{agree})"


def _labels(columns: list[dict]) -> list[str]:
    return list(dict.fromkeys(c["label"] for col in columns for c in col["cells"]))


def best_line(col: dict) -> str:
    """Which row is best in a column, and which rows it does not separate itself from."""
    if col["best"] is None:
        return "no row was run on every seed"
    tied = [f"`{c['label']}`" for c in col["cells"] if c["status"] == "not separated"]
    if not tied:
        return f"`{col['best']}`, ahead of every other row at 95%"
    return f"`{col['best']}`, not separated from {', '.join(tied)}"


def reading_table(columns: list[dict], train_length: int) -> str:
    """One corpus's table in one reading: a row per board row, a column per length, then the best per column."""
    seeds = max((len(c.get("seeds", [])) for col in columns for c in col["cells"]), default=1)
    heads = [f"{col['multiplier']}x ({col['eval_length']})" for col in columns]
    lines = ["| row | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(heads)]
    for label in _labels(columns):
        cells = [next((c for c in col["cells"] if c["label"] == label), {"status": "n/a"}) for col in columns]
        lines.append(f"| `{label}` | " + " | ".join(cell(c, seeds) for c in cells) + " |")
    lines.append("")
    lines += [f"* best at {col['multiplier']}x: {best_line(col)}" for col in columns]
    return "\n".join(lines)


def readme_table(
    columns: list[dict], titles: dict[str, str], hidden: Callable[[str], bool] = lambda label: False
) -> str:
    """The README's table: a row per board row but the ``hidden`` ones, per corpus (``titles``: its column head) the
    non-overlapping windows at 1x, 4x and 16x T; the best bold, a row not separated from it marked ≈ (the best and
    the marks are the whole board's)."""
    chosen = [
        col
        for corpus in titles
        for m in README_MULTIPLIERS
        for col in columns
        if col["corpus"] == corpus and col["reading"] == "bpb" and col["multiplier"] == m
    ]
    heads = [f"{titles[col['corpus']]} {col['multiplier']}x" for col in chosen]
    lines = ["| row | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(heads)]
    for label in (label for label in _labels(chosen) if not hidden(label)):
        out = []
        for col in chosen:
            c = next((c for c in col["cells"] if c["label"] == label), {"status": "n/a"})
            status = c["status"]
            text = status if status in ("n/a", "not run") else f"{c['bpb']:.3f}"
            out.append({"best": f"**{text}**", "not separated": f"≈ {text}", "equal": f"= {text}"}.get(status, text))
        lines.append(f"| `{label}` | " + " | ".join(out) + " |")
    return "\n".join(lines)


__all__ = ["INTROS", "README_MULTIPLIERS", "READING_TITLES", "best_line", "cell", "reading_table", "readme_table"]


#: Each board's title and what it holds, to open its document.
INTROS = {
    "schemes": (
        "# The leaderboard",
        "",
        "Every registered position scheme, the windowed-RoPE / global-NoPE hybrid, RoPE with learned sinks, RoPE with "
        "the output gate and the untrained RoPE scalings, under one protocol: the same text, tokenizer, shape, seeds "
        "and 679 Muon steps at T = 128 tokens ([the protocol](length-study.md#three-seeds-on-both-built-in-corpora); "
        "679 is the step count the default study's 180-second budget gave on the AMD machine, kept fixed so that "
        "every row trains alike on any machine).",
    ),
    "menu": (
        "# The first layer's menu, measured",
        "",
        "Each option of the first layer ([neighbours](neighbours.md), [training](training.md)) beside its control "
        "under the leaderboard's protocol (679 Muon steps at T = 128, three seeds), at equal steps: Canon layers and "
        "the smear gate on the length study's schemes whose position acts inside attention alone, the key offset on "
        "RoPE turning half of each head, the token-table options on the Day-1 model. An option that adds parameters "
        "has a control of about its size: the Day-1 model widened to the nearest width its heads divide under the "
        "option's parameters ("
        + "; ".join(f"`d_model` {w} for {', '.join(f'`{n}`' for n in names)}" for w, names in WIDER_CONTROLS.items())
        + ", the rows ending `-d<width>`); the parameters of each row are in its study's `length.md`.",
    ),
}


def pair_cell(p: dict, seeds: int) -> str:
    """One cell of a table of options against their controls: the difference (option minus control) with its
    interval and agreeing seeds, bold where the option is ahead at 95%, ``≈`` where not separated."""
    text = f"{signed(p['difference'])} [{signed(p['low'])}, {signed(p['high'])}], {p['seeds_agreeing']}/{seeds}"
    return {"ahead": f"**{text}**", "not separated": f"≈ {text}", "equal": f"= {text}"}.get(p["status"], text)


def pairs_table(pairs: list[dict], seeds: int) -> str:
    """One corpus's options against their controls in one reading: a line per pair, a column per length (``n/a``
    where either row has no score, such as a learned table past T), then per length the options ahead and behind."""
    multipliers = sorted({p["multiplier"] for p in pairs})
    lengths = {p["multiplier"]: p["eval_length"] for p in pairs}
    found = {(p["row"], p["control"], p["multiplier"]): p for p in pairs}
    lines = ["| option − control | " + " | ".join(f"{m}x ({lengths[m]})" for m in multipliers) + " |"]
    lines.append("| --- |" + " --- |" * len(multipliers))
    for row, control in dict.fromkeys((p["row"], p["control"]) for p in pairs):
        cells = [pair_cell(p, seeds) if (p := found.get((row, control, m))) else "n/a" for m in multipliers]
        lines.append(f"| `{row}` − `{control}` | " + " | ".join(cells) + " |")
    lines.append("")
    for m in multipliers:
        said = {
            verdict: ", ".join(
                f"`{p['row']}` (vs `{p['control']}`)" for p in pairs if p["multiplier"] == m and p["status"] == verdict
            )
            or "no option"
            for verdict in ("ahead", "behind")
        }
        lines.append(f"* at {m}x ahead of the control: {said['ahead']}; behind it: {said['behind']}")
    return "\n".join(lines)


PAIRS_INTRO = (
    "Each option's row minus each of its controls, in bits per byte (below zero: the option predicts better), with "
    "the 95% interval of the same paired bootstrap and the seeds that agree alone; **bold**: the option is ahead at "
    "95%; `≈`: not separated. The controls: a position option against its scheme plain, and on NoPE and ALiBi also "
    "against RoPE plain and RoPE with the same option; the key offset against RoPE turning half of each head; a "
    "token-table option against the Day-1 model and, where it adds parameters, the Day-1 model widened to about its "
    "size."
)


def pairs_name(figure: str) -> str:
    """The file name of the menu board's figure of options against their controls, beside the board's ``figure``."""
    return figure.removesuffix(".png") + "-pairs.png"


def missing(head: dict) -> list[str]:
    """The document's lines on what is not on the board yet: corpora not run, studies not finished (each after a
    blank line); none for a whole board."""
    lines: list[str] = []
    if head.get("not_run"):
        # the first command runs the corpora `write` was given (``asked``): those need no other --corpus
        left = [name for name in head["not_run"] if name not in head.get("asked", [])]
        how = f"the first command above with `--corpus {' '.join(left)}`" if left else "the first command above"
        lines += [
            "",
            f"Not run yet, so not on this board: {'; '.join(head['not_run'].values())} ({how} runs it, then `write` "
            "with every corpus).",
        ]
    if head.get("unfinished"):
        still = "; ".join(
            f"{head['corpora'][name]}'s {', '.join(f'`{study}`' for study in names)}"
            for name, names in head["unfinished"].items()
        )
        lines += [
            "",
            f"Not finished yet, so not on this board: {still} (the first command above runs them, keeping the "
            "finished; a column's best, and so every difference from it, may change when they join).",
        ]
    return lines


def document(records: list[dict], commands: list[str], figure: str = "leaderboard.png") -> str:
    """docs/leaderboard.md (or the menu board's document) from the board's records (``leaderboard.jsonl``) and the
    commands that made it; ``figure``: the file name of the board's figure beside it."""
    head = next(r for r in records if r["record"] == "leaderboard")
    sources = [r for r in records if r["record"] == "source"]
    columns = [r for r in records if r["record"] == "column"]
    versions = sorted({s["octlm_version"] for s in sources if s.get("octlm_version")})
    lines = [
        *INTROS[head.get("board", "schemes")],
        "Generated by `scripts/leaderboard.py`; do not edit by hand.",
        "",
        "```bash",
        *commands,
        "```",
        "",
        "Studies: "
        + ", ".join(f"`{Path(s['folder']).name}`" for s in sources)
        + f"; octlm {', '.join(versions) or 'unknown'}.",
        "",
        "Each cell is the row's bits per byte, mean over the seeds (lower is better). The column's best is **bold**, "
        "with its sample standard deviation; every other row gives its difference from the best with its "
        f"{head['confidence']:.0%} interval (a paired bootstrap over the validation windows crossed with the seeds, "
        f"{head['resamples']:,} resamples, generator seed {head['bootstrap_seed']}) and in how many seeds alone the "
        "same verdict holds. `≈`: the interval holds zero, so the row is not separated from the best; `=`: it computes "
        "the best row's numbers (every RoPE scaling at 1x); `n/a`: the row has no score there (a learned table past "
        "T); `not run`: some seed is missing.",
        "",
        f"![Every row's bits per byte against the evaluation length]({figure})",
    ]
    lines += missing(head)
    if head.get("board", "schemes") == "schemes":
        lines += ["", "## Findings", "", FINDINGS_INTRO, "", findings(records)]
    train_length = columns[0]["eval_length"] // columns[0]["multiplier"] if columns else 0
    for corpus, title in head["corpora"].items():
        for reading, reading_title in READING_TITLES.items():
            chosen = [c for c in columns if c["corpus"] == corpus and c["reading"] == reading]
            if chosen:
                lines += ["", f"## {title}, {reading_title}", "", reading_table(chosen, train_length)]
        ours = [c for col in columns if col["corpus"] == corpus for c in col["cells"]]
        seeds = max((len(c.get("seeds", [])) for c in ours), default=1)
        for reading, reading_title in READING_TITLES.items():
            pairs = [p for p in records if p["record"] == "pair" and p["corpus"] == corpus and p["reading"] == reading]
            if pairs:
                lines += ["", f"## {title}: each option against its controls, {reading_title}", "", PAIRS_INTRO]
                if reading == "bpb" and corpus == next(iter(head["corpora"])):
                    lines += ["", f"![Each option against its controls, with 95% intervals]({pairs_name(figure)})"]
                lines += ["", pairs_table(pairs, seeds)]
    return "\n".join(lines) + "\n"


__all__ += ["PAIRS_INTRO", "document", "missing", "pair_cell", "pairs_name", "pairs_table"]
