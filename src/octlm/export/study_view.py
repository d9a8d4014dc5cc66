"""What the page shows about a length study (``octlm serve --study``, ``octlm export-web --study``).

A length study is a folder made by ``octlm length``: ``length.jsonl`` (its
records, :mod:`octlm.studies.length.study`) and ``runs/<label>/`` (one run folder
per model and seed). The page draws bits per byte against length under both
readings (non-overlapping windows, ``bpb``; sliding windows, ``sliding_bpb``),
the extension stage's curves, and every model's attention at every length it
was scored at (:mod:`octlm.inspect.attention_view`), for the study's first
seed. A study made before a record or field existed is shown with what it
has; ``missing`` says what it lacks, in words the page prints.
"""

from __future__ import annotations

import json
from pathlib import Path

from octlm.errors import OctlmError
from octlm.inspect.attention_view import (
    ATTENTION_FORMAT,
    MAP_SIDE,
    attention_views,
    map_side,
    unavailable,
    window_labels,
)
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.studies.length.options import RUNS
from octlm.studies.length.records import ScoredModel, TrainRecord
from octlm.studies.length.study import FILES
from octlm.studies.shared.progress import PROGRESS, unfinished_options

#: Version of the data layout ``web/src/study/data.ts`` reads.
STUDY_VIEW_FORMAT = 1
#: Fields of an eval record the page does not draw: per window position and per window (what the comparisons'
#: bootstrap resamples, octlm.studies.length.comparisons), thousands of numbers a record.
_UNDRAWN = (
    "position_loss",
    "position_bytes",
    "window_nats",
    "window_bytes",
    "sliding_window_nats",
    "sliding_window_bytes",
)

#: The fields of each record kind that the page (``web/src/study``) and :func:`study_view` read, and their JSON
#: types; a name ending in ``?`` is optional (absent from a study made before it existed), as in ``data.ts``.
#: Other kinds and other fields pass unchecked (an older or newer study keeps its own).
PAGE_FIELDS: dict[str, dict[str, str]] = {
    "study": {"train_length": "a number", "lengths": "a list of numbers", "targets": "a number"},
    "train": {"position": "a string", "seed?": "a number", "steps?": "a number", "run_dir?": "a string or null"},
    "eval": {
        "label": "a string",
        "position": "a string",
        "eval_length": "a number",
        "status": "a string",
        "bpb": "a number or null",
        "rope_scaling": "a string or null",
        "rope_factor": "a number or null",
        "seed?": "a number",
        "sliding_bpb?": "a number or null",
        "eval_stride?": "a number or null",
        "extended_to?": "a number",
    },
    "curve": {"label": "a string", "eval_length": "a number", "step": "a number", "bpb": "a number"},
    "attention": {
        "label": "a string",
        "eval_length": "a number",
        "seed": "a number or null",
        "mean_entropy?": "a list of lists of numbers",
        "mean_distance?": "a list of lists of numbers",
        "sink_mass?": "a list of lists of numbers",
        "max_logit?": "a list of lists of numbers",
    },
}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Each type of :data:`PAGE_FIELDS`: whether a JSON value is of it.
_TYPES = {
    "a number": _is_number,
    "a number or null": lambda v: v is None or _is_number(v),
    "a string": lambda v: isinstance(v, str),
    "a string or null": lambda v: v is None or isinstance(v, str),
    "a list of numbers": lambda v: isinstance(v, list) and all(map(_is_number, v)),
    "a list of lists of numbers": lambda v: isinstance(v, list) and all(_TYPES["a list of numbers"](row) for row in v),
}


def _what(value) -> str:
    """A JSON value's type in words: ``a string``, ``null``, ``a list holding a string``."""
    if isinstance(value, list):
        odd = [v for v in value if not _is_number(v)]
        return f"a list holding {_what(odd[0])}" if odd else "a list of numbers"
    names = ((bool, "true or false"), (str, "a string"), ((int, float), "a number"), (dict, "an object"))
    return next((name for kind, name in names if isinstance(value, kind)), "null")


def record_problem(record: dict) -> str | None:
    """What the page cannot read in ``record`` (:data:`PAGE_FIELDS`): a required field it lacks or one of another type;
    else None."""
    for name, kind in PAGE_FIELDS.get(record["record"], {}).items():
        field = name.rstrip("?")
        if field not in record:
            if name == field:
                return f'the {record["record"]} record lacks "{field}"'
        elif not _TYPES[kind](record[field]):
            return f'the {record["record"]} record\'s "{field}" is {_what(record[field])}, expected {kind}'
    return None


def is_study(path: Path) -> bool:
    """Whether ``path`` is a folder holding a length study's records (``length.jsonl``)."""
    return (path / FILES.jsonl).is_file()


def check_study_folder(path: Path, flag: str = "--study") -> None:
    """Refuse, in one line naming the fix, a ``path`` that is not a length study.

    Raises:
        OctlmError: for a missing path, a file, a run folder, a task study, a study stopped before its tables, or
            a folder without ``length.jsonl``.
    """
    # The folder named may exist with other files (or be a task study), where `octlm length --out` refuses to write; a
    # new folder beside it, not inside it, keeps one study's files out of another's.
    new = path if not path.exists() else path.with_name(f"{path.name}-length")
    make = f"make one with `octlm length --text FILE --out {new}`"
    if not path.exists():
        raise OctlmError(f"{flag} {path}: no such folder; {make}")
    if not path.is_dir():
        raise OctlmError(
            f"{flag} {path}: is a file; give the study folder (made by octlm length) that holds {FILES.jsonl}"
        )
    if RunFolder(path).is_octlm_run():
        raise OctlmError(
            f"{flag} {path}: is a run folder made by octlm train, not a length study; show it with --run {path}"
        )
    if not is_study(path):
        _refuse_unfinished(path, flag)
        others = sorted(p.name for p in path.glob("*.jsonl"))
        what = f"it holds {', '.join(others)}, not {FILES.jsonl}" if others else f"no {FILES.jsonl}"
        raise OctlmError(
            f"{flag} {path}: not a length study ({what}); the page shows folders made by `octlm length --text`; {make}"
        )


def _refuse_unfinished(path: Path, flag: str) -> None:
    """Refuse a study stopped before its tables (it holds ``progress/study.json``), naming how to finish it."""
    try:
        options = unfinished_options(path)
    except OctlmError:  # a damaged study.json still marks an unfinished study; its kind is unknown
        options = {}
    if options is None:
        return
    finished = f"{flag} {path}: an unfinished {{}} (its finished parts are in {PROGRESS}/)"
    # Only a task study's options have task_length (study.json holds the options of octlm length or length --task).
    if "task_length" in options:
        raise OctlmError(
            finished.format("task study") + ", not a length study; run the same octlm length --task command to "
            "finish it; the page shows length studies made by `octlm length --text`"
        )
    raise OctlmError(
        finished.format("length study") + "; run the same octlm length command to finish it, then serve it"
    )


def read_records(path: Path) -> list[dict]:
    """The records of ``path/length.jsonl``, in order.

    Raises:
        OctlmError: naming the file and line of a line that is not a JSON
            object, or of a record the page cannot read (:func:`record_problem`:
            a required field missing or of the wrong type), and for a file
            with no ``study`` record.
    """
    jsonl = path / FILES.jsonl
    records = []
    for number, line in enumerate(jsonl.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise OctlmError(f"{jsonl}:{number}: not a JSON line ({err}); the study's records are damaged") from None
        if not isinstance(record, dict) or not isinstance(record.get("record"), str):
            raise OctlmError(
                f"{jsonl}:{number}: not a study record (a JSON object with a 'record' field); "
                "the study's records are damaged"
            )
        if problem := record_problem(record):
            raise OctlmError(
                f"{jsonl} line {number}: {problem}; the page cannot show it: re-run `octlm length`, or repair the line"
            )
        records.append(record)
    if not any(r["record"] == "study" for r in records):
        raise OctlmError(
            f"{jsonl}: holds no 'study' record; it is not a finished length study (octlm length writes it last), "
            "run the study again"
        )
    return records


def missing_parts(records: list[dict]) -> list[str]:
    """What an older study lacks that the page would show, one sentence each (empty for a current study)."""
    evals = [r for r in records if r["record"] == "eval"]
    missing = []
    if evals and not any("sliding_bpb" in r for r in evals):
        missing.append(
            "the sliding-window reading: this study was made before octlm length scored sliding windows "
            "(its eval records have no sliding_bpb), so only the non-overlapping reading is shown; "
            "run the study again to get both"
        )
    if evals and not any(r["record"] == "attention" for r in records):
        missing.append(
            "the study's attention statistics (attention records, over its evaluation windows): this study was made "
            "before octlm length recorded them; the statistics under each map are those of the one window shown"
        )
    return missing


def _run_folders(path: Path, records: list[dict]) -> dict[tuple[str, int], Path]:
    """``(model name, seed) -> run folder`` from the train records (the folder's name under ``runs/``, so a moved study
    still finds them)."""
    folders = {}
    for r in records:
        if r["record"] == "train" and r.get("run_dir"):
            folders[(TrainRecord.from_json(r).label, r.get("seed"))] = path / RUNS / Path(r["run_dir"]).name
    return folders


def _maps_of(records: list[dict], folders: dict, seed: int, tokens, report: Reporter) -> tuple[list[dict], int]:
    """Every model's attention at every length it was scored at, for ``seed``: one entry per label, in the records'
    order, and the maps' side (:func:`map_side`).

    A scaled label (``rope+yarn``) is its base run under the record's
    ``rope_scaling`` and ``rope_factor`` (``rope+logn``: its ``attention_scale``); an extended one (``extended_to``)
    is its own run, under the scaling its run saved.
    """
    from octlm.run.load import load_run

    by_label: dict[str, dict] = {}
    passes: dict[tuple, list[tuple[dict, int]]] = {}  # (folder, scaling) -> the entries and lengths it serves
    for r in (r for r in records if r["record"] == "eval" and r.get("seed") == seed):
        scored = ScoredModel.of(r)
        folder = folders.get((scored.run_name, seed))
        entry = by_label.setdefault(
            scored.label, {"label": scored.label, "position": scored.row, "seed": seed, "lengths": []}
        )
        entry["lengths"].append({"length": int(r["eval_length"])})
        if folder is None or not folder.is_dir():
            entry["lengths"][-1]["note"] = f"its run folder ({RUNS}/{folder.name if folder else r['label']}) is missing"
            continue
        scaling = None if scored.fine_tuned or not scored.scaling else (scored.scaling, float(scored.factor or 1.0))
        passes.setdefault((folder, scaling, scored.attention_scale), []).append(
            (entry["lengths"][-1], int(r["eval_length"]))
        )
    models: dict[Path, object] = {folder: load_run(folder, "cpu")[0] for folder, _, _ in list(passes)[:1]}
    shape = next((m.config.n_layers * m.config.n_heads for m in models.values()), 1)
    side = map_side(sum(len(wanted) for wanted in passes.values()), shape)  # the models of a study share their shape
    bar = report.progress(len(passes), "attention maps", unit="pass")
    for (folder, scaling, attention_scale), wanted in passes.items():
        model = models.get(folder) or models.setdefault(folder, load_run(folder, "cpu")[0])
        trained_scale = model.config.attention_scale
        if scaling is not None:
            model.set_rope_scaling(*scaling)
        if attention_scale is not None:
            model.set_attention_scale(attention_scale)
        notes = {
            length: unavailable(model, length)
            or (None if len(tokens) >= length else f"the validation text holds {len(tokens)} tokens")
            for _, length in wanted
        }
        shown = [length for length, note in notes.items() if note is None]
        views = attention_views(model, [int(i) for i in tokens[: max(shown, default=0)]], shown, side=side)
        for slot, length in wanted:
            slot.update({"note": notes[length]} if notes[length] else views[length])
        if scaling is not None:
            model.set_rope_scaling(None)  # its base run again, for the next scaling of the same folder
        model.set_attention_scale(trained_scale)
        bar.update()
    bar.close()
    return list(by_label.values()), side


def study_view(path: str | Path, report: Reporter | None = None) -> dict:
    """Everything the page shows about a length study, as a JSON-ready dict (read by ``web/src/study/data.ts``).

    Keys: ``format``, ``kind`` (``"study"``), ``name``, ``study`` (the study
    record), ``train``, ``eval`` (without per-position loss), ``curve`` and
    ``attention_records`` (the records as written), ``missing`` (see
    :func:`missing_parts`), ``attention`` (``{"format", "seed", "side",
    "tokens", "models": [{"label", "position", "seed", "lengths": [maps |
    {"length", "note"}]}]}``); the maps of a model that turns channel pairs
    carry its RoPE frequency probe (``frequencies``, see
    :func:`octlm.inspect.attention_view.frequency_probe`).

    ``report`` shows a progress bar over the models' passes (a default
    study's 16 models take seconds to a minute on a CPU).

    Raises:
        OctlmError: for a folder that is not a length study
            (:func:`check_study_folder`) or damaged records.
    """
    path = Path(path)
    check_study_folder(path)
    records = read_records(path)
    folders = _run_folders(path, records)
    evals = [r for r in records if r["record"] == "eval"]
    seeds = sorted({r["seed"] for r in evals if "seed" in r})
    tokens, labels, models, side = [], [], [], MAP_SIDE
    if seeds and (existing := [f for f in folders.values() if f.is_dir()]):
        tokens = RunFolder(existing[0]).tokens("val")
        tokenizer = RunFolder(existing[0]).read_tokenizer()
        labels = window_labels(tokenizer, tokens[:MAP_SIDE])
        models, side = _maps_of(records, folders, seeds[0], tokens, report or Reporter(quiet=True))
    return {
        "format": STUDY_VIEW_FORMAT,
        "kind": "study",
        "name": path.resolve().name,
        "study": next(r for r in records if r["record"] == "study"),
        "train": [r for r in records if r["record"] == "train"],
        "eval": [{k: v for k, v in r.items() if k not in _UNDRAWN} for r in evals],
        "curve": [r for r in records if r["record"] == "curve"],
        "attention_records": [r for r in records if r["record"] == "attention"],
        "missing": missing_parts(records),
        "attention": {
            "format": ATTENTION_FORMAT,
            "seed": seeds[0] if seeds else None,
            "side": side,
            "tokens": labels,
            "models": models,
        },
    }


__all__ = [
    "PAGE_FIELDS",
    "STUDY_VIEW_FORMAT",
    "check_study_folder",
    "is_study",
    "missing_parts",
    "read_records",
    "record_problem",
    "study_view",
]
