"""``octlm length --reread``: the named readings computed on a finished length study, and its files written again.

The models and options are read back from the study folder
(:func:`~octlm.studies.length.readings.reading.load_study`); the readings' records replace those of an earlier run of
the same readings in ``length.jsonl``, and ``length.md`` and the figures are rewritten
(:func:`~octlm.studies.length.study.rewrite`).
"""

from __future__ import annotations

from pathlib import Path

from octlm.report import Reporter
from octlm.studies.length.readings.catalog import registry, sections
from octlm.studies.length.readings.reading import load_study
from octlm.studies.length.study import rewrite
from octlm.train.device import resolve_device, torch_settings


def run_readings(
    out: str | Path, names: list[str], params: dict, device: str, threads: int | None, report: Reporter
) -> dict:
    """Compute the readings ``names`` on the finished study at ``out`` and write them in (see the module docstring);
    returns ``{"out", "readings", "records", "written", "text"}``: the new records' count, the files written and the
    readings' new ``length.md`` sections (markdown).

    Raises:
        OctlmError: for a folder that is no finished study (:func:`~octlm.studies.length.readings.reading.load_study`),
            or a bad reading option.
    """
    readings = registry()
    study = load_study(out)
    new: list[dict] = []
    for name in names:  # every reading's values before any computes
        readings[name].check(readings[name].values(params), study.train_length)
    with torch_settings(threads, False):
        target = resolve_device(device)
        for name in names:
            reading = readings[name]
            values = reading.values(params)
            models = len(study.models())
            report.event("reading", f"{name} on {models} model{'s' * (models != 1)} of {study.out}", reading=name)
            new += reading.compute(study, values, target, report)
    replaced = {kind for name in names for kind in readings[name].kinds}
    study.records = [r for r in study.records if r["record"] not in replaced] + new
    written = rewrite(study)
    text = sections(study, new)[0].strip()
    return {"out": str(study.out), "readings": names, "records": len(new), "written": written, "text": text}


__all__ = ["run_readings"]
