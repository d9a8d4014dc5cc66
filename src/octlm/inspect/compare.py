"""``octlm compare``: runs side by side, the options in which they differ, their final figures and one plot of their
curves.

Each run is read from its own folder: ``config.json`` (the options, the
model's among them), ``metrics.jsonl`` (the training loss, and the validation
loss and bits per byte of each evaluation). A study folder stands for the runs
it trained (``runs/<model>/``, as ``octlm length`` writes them). With
``--out DIR`` the table (``compare.md``), the numbers (``compare.json``) and
the figure (``compare.png``: loss, and bits per byte, against step) are
written into ``DIR``, built beside it and moved into place when complete; a
folder that holds anything but an earlier comparison is never replaced.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from octlm.declare import REQUIRED, check_fields, option
from octlm.errors import OctlmError, RunError
from octlm.inspect.compare_units import not_comparable, tokenizer_key, validation_text_key
from octlm.model.config import stored_layout_text
from octlm.model.layout import LayerSpec, layout_text
from octlm.report import Reporter, SilentReporter
from octlm.run.folder import RUN_SUBFOLDERS, RunFolder
from octlm.run.outputs import check_out_spares

#: What ``--out`` receives; an earlier comparison there is replaced, anything else never.
FILES = {"figure": "compare.png", "table": "compare.md", "numbers": "compare.json"}
#: Options that differ between any two runs without making them different experiments.
NOT_COMPARED = {"out", "overwrite", "log_to", "log_group", "threads", "device", "resume"}
#: The final figures of a run, from its last evaluation (the full validation split when the run finished).
FINAL = ("val_loss", "val_bpb", "val_perplexity")
#: Where a study keeps the runs it trained (:data:`octlm.studies.length.options.RUNS`).
STUDY_RUNS = "runs"


@dataclass
class CompareOptions:
    """Everything ``octlm compare`` takes."""

    runs: list[str] = option(
        REQUIRED,
        "run folders made by octlm train, or study folders (each stands for the runs in its runs/)",
        nargs="+",
        positional=True,
        metavar="RUN_DIR",
    )
    out: str | None = option(
        None,
        "folder for compare.png (loss and bits per byte against step), compare.md and compare.json "
        "(default: print the table only); an earlier comparison there is replaced, "
        "a folder holding anything else never",
        metavar="DIR",
    )
    overwrite: bool = option(
        False,
        "accepted for scripts written for other commands; an earlier comparison is always replaced and "
        "other files never are",
    )


@dataclass
class ComparedRun:
    """One run: its label, folder, options (flat), the records of its ``metrics.jsonl``, and what its validation text
    and tokenizer are (:mod:`octlm.inspect.compare_units`; ``None`` where the folder does not say)."""

    label: str
    path: Path
    options: dict
    records: list[dict]
    text: str | None = None
    tokenizer: str | None = None

    def final(self) -> dict:
        """The last evaluation's figures (nats per token, bits per byte, perplexity), its step and the last training
        loss."""
        evals = [r for r in self.records if r.get("kind") == "eval"]
        trains = [r for r in self.records if r.get("kind") == "train"]
        last = evals[-1] if evals else {}
        return {
            "step": last.get("step"),
            **{key: last.get(key) for key in FINAL},
            "train_loss": trains[-1]["loss"] if trains else None,
            "finished": any(r.get("kind") == "finished" for r in self.records),
        }

    def curve(self, kind: str, key: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of ``key`` in the records of ``kind`` (``train`` or ``eval``)."""
        points = [
            (r["step"], r[key]) for r in self.records if r.get("kind") == kind and isinstance(r.get(key), (int, float))
        ]
        return [s for s, _ in points], [v for _, v in points]


def _read_run(path: Path, label: str, report: Reporter) -> ComparedRun:
    folder = RunFolder(path, "RUN_DIR")
    config = folder.read_config()  # RunError naming the file when it is missing or damaged
    model = config.get("model") or {}
    options = {**model, **(config.get("train") or {}), "layers": _layout(model)}
    if not folder.metrics_path.is_file():
        raise RunError(
            f"{path}: no metrics.jsonl, so nothing to compare; give the folder of a run that trained (octlm train)"
        )
    records = _read_metrics(folder.metrics_path, report)
    return ComparedRun(label, path, options, records, validation_text_key(path, options), tokenizer_key(path))


def _layout(model: dict) -> object:
    """The layout of a ``config.json`` ``model`` section as ``--layers`` writes it, whether it keeps a list of layers
    or (an older run) a string, or none (older still: one scheme throughout), so the same layers compare equal."""
    text = stored_layout_text(model)
    if isinstance(text, list):  # no config could be made of the section (a plug-in not imported): the layers anyway
        try:
            return layout_text([LayerSpec(**layer) for layer in text])
        except TypeError:
            return text
    return text


def _read_metrics(path: Path, report: Reporter) -> list[dict]:
    """The records of a ``metrics.jsonl``; a last line without its newline (a run still training is writing it) is
    left out with a warning, where a complete line that is no JSON object is damage (RunError)."""
    *lines, tail = path.read_bytes().split(b"\n")  # tail: b"" when the file ends in a newline
    records = [_record(line, number, path) for number, line in enumerate(lines, 1)]
    if tail:
        try:
            records.append(_record(tail, len(lines) + 1, path))  # all but its newline was written
        except RunError:
            report.warn(
                f"{path}: line {len(lines) + 1} is still being written (no newline yet; a run still training), "
                "so it is left out"
            )
    return records


def _record(line: bytes, number: int, path: Path) -> dict:
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # not UTF-8, or not JSON
        record = None
    if not isinstance(record, dict):
        raise RunError(f"{path}: line {number} is not JSON; the file is damaged (put the run's own file back)")
    return record


def find_runs(given: list[str], report: Reporter | None = None) -> list[ComparedRun]:
    """Each RUN_DIR's run, or for a study folder each run in its ``runs/`` (labelled ``study/model``), in the order
    given; ``report`` hears of a ``metrics.jsonl`` line left out because a run is still writing it.

    Raises:
        OctlmError: for a path that is neither an octlm run nor a study folder with runs.
        RunError: for a run whose ``config.json`` or ``metrics.jsonl`` is missing or damaged.
    """
    report = report if report is not None else SilentReporter()
    runs: list[ComparedRun] = []
    for name in given:
        path = Path(name)
        if not path.is_dir():
            what = "is a file, not a run folder" if path.exists() else "no such folder"
            raise OctlmError(f"{path}: {what}; give run folders made by octlm train, or study folders")
        if RunFolder(path).is_octlm_run() or (path / "config.json").is_file():
            runs.append(_read_run(path, name, report))
            continue
        inside = sorted(
            p
            for p in (path / STUDY_RUNS).glob("*")
            if p.is_dir() and not p.name.startswith(".") and RunFolder(p).is_octlm_run()
        )
        if not inside:
            raise OctlmError(
                f"{path}: neither an octlm run (no config.json) nor a study folder with runs in {STUDY_RUNS}/; "
                f"give run folders made by octlm train, or folders made by octlm length --text"
            )
        runs.extend(_read_run(p, f"{path.name}/{p.name}", report) for p in inside)
    return runs


def differing_options(runs: list[ComparedRun]) -> dict[str, list]:
    """``{option: [value of each run]}`` for the options whose values are not all equal (a run without it: ``None``)."""
    names = sorted({name for run in runs for name in run.options} - NOT_COMPARED)
    table = {name: [run.options.get(name) for run in runs] for name in names}
    return {name: values for name, values in table.items() if any(v != values[0] for v in values)}


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) and abs(value) < 1e4 else f"{value:.4g}"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def comparison_table(runs: list[ComparedRun], differing: dict[str, list]) -> str:
    """A Markdown table: one column per run; a row per differing option, then the final figures."""
    head = "| | " + " | ".join(run.label for run in runs) + " |"
    rows = [head, "|---|" + "---|" * len(runs)]
    rows += [f"| {name} | " + " | ".join(_cell(v) for v in values) + " |" for name, values in differing.items()]
    finals = [run.final() for run in runs]
    labels = {
        "step": "steps evaluated",
        "val_loss": "val loss (nats/token)",
        "val_bpb": "val bits per byte",
        "val_perplexity": "val perplexity",
        "train_loss": "last train loss (nats/token)",
        "finished": "finished",
    }
    rows += [f"| **{text}** | " + " | ".join(_cell(f[key]) for f in finals) + " |" for key, text in labels.items()]
    return "\n".join(rows) + "\n"


def comparison_figure(runs: list[ComparedRun]):
    """Loss (training solid, validation dashed, nats per token) and validation bits per byte against step, one colour
    per run."""
    from octlm.inspect.figures import Figure

    figure = Figure(figsize=(12, 4.8), dpi=110, layout="constrained")
    loss_axes, bpb_axes = figure.subplots(1, 2)
    for index, run in enumerate(runs):
        colour = f"C{index % 10}"
        loss_axes.plot(
            *run.curve("train", "loss"), color=colour, linewidth=1.1, alpha=0.8, label=f"{run.label} (training)"
        )
        loss_axes.plot(
            *run.curve("eval", "val_loss"),
            color=colour,
            linewidth=2,
            linestyle="--",
            marker="o",
            markersize=3,
            label=f"{run.label} (validation)",
        )
        bpb_axes.plot(
            *run.curve("eval", "val_bpb"), color=colour, linewidth=2, marker="o", markersize=3, label=run.label
        )
    for axes, label in ((loss_axes, "loss (nats per token)"), (bpb_axes, "validation bits per byte")):
        axes.set_xlabel("step")
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=8)
    figure.suptitle(f"octlm compare: {len(runs)} runs", fontsize=11)
    return figure


def _check_out(out: RunFolder, runs: list[str]) -> None:
    """The one overwrite policy: an earlier comparison is replaced; a run, a study or a person's files never are, nor an
    input."""
    check_out_spares(out.path, "--out", [("RUN_DIR", r) for r in runs])

    def refuse(found: RunFolder) -> str | None:
        if {p.name for p in found.path.iterdir()} <= set(FILES.values()):
            return None
        what = "an octlm run" if found.is_octlm_run() else "files that are not an octlm comparison"
        return f"--out {found.path}: holds {what}, which octlm compare never replaces; choose a new or empty folder"

    out.check_target(True, refuse, "")


def compare(opts: CompareOptions, report: Reporter) -> dict:
    """Run ``octlm compare``: the table printed, and with ``--out`` compare.png, compare.md and compare.json written.

    Returns the result dict: ``runs`` (label, path, final figures), ``differing`` options, ``not_comparable`` (each
    reason some figures do not compare, :func:`~octlm.inspect.compare_units.not_comparable`: also a warning and a
    line of compare.md), ``files`` (or ``None`` without ``--out``).

    Raises:
        OctlmError: for a RUN_DIR that is no run nor study, a damaged run, or an
            ``--out`` that holds other files or one of the runs.
    """
    from octlm.fileio import atomic_write
    from octlm.inspect.figures import save_png

    check_fields(opts)
    out = RunFolder(Path(opts.out), "--out") if opts.out else None
    if out is not None:
        _check_out(out, opts.runs)  # before anything is read: a bad --out costs nothing
    runs = find_runs(opts.runs, report)
    differing = differing_options(runs)
    table = comparison_table(runs, differing)
    caveats = not_comparable([r.label for r in runs], [r.text for r in runs], [r.tokenizer for r in runs])
    for caveat in caveats:
        report.warn(caveat["message"], figures=caveat["figures"])
    result = {
        "runs": [{"label": r.label, "path": str(r.path), **r.final()} for r in runs],
        "differing": differing,
        "not_comparable": caveats,
        "files": None,
    }
    if out is not None:
        with out.staged() as staging:
            save_png(comparison_figure(runs), staging / FILES["figure"])
            notes = "".join(f"\n**Does not compare:** {caveat['message']}.\n" for caveat in caveats)
            atomic_write(staging / FILES["table"], f"# octlm compare\n\n{table}{notes}")
            atomic_write(
                staging / FILES["numbers"],
                json.dumps({k: v for k, v in result.items() if k != "files"}, indent=2) + "\n",
            )
        result["files"] = {key: str(out.path / name) for key, name in FILES.items()}
    lines = [table.rstrip()] + ([f"wrote {path}" for path in result["files"].values()] if result["files"] else [])
    report.result(result, "\n".join(lines))
    return result


assert not set(FILES.values()) & set(RUN_SUBFOLDERS)  # a comparison is never mistaken for a run's own folder

__all__ = [
    "CompareOptions",
    "ComparedRun",
    "FILES",
    "compare",
    "comparison_figure",
    "comparison_table",
    "differing_options",
    "find_runs",
]
