"""The options of a resumed run: the run's own, merged with those given again as each option's declaration allows.

Every option says what ``octlm train --resume`` may do with it
(:class:`octlm.declare.Resume`): keep it (``FIXED``: part of the checkpoint's
config digest), take it anew (``FREE``), take it with a warning
(``RETUNABLE``), or name only the run itself (``RUN_FOLDER``).
"""

from __future__ import annotations

from pathlib import Path

from octlm.declare import Resume, flag, option_default, option_fields, refused
from octlm.errors import OctlmError, RunError
from octlm.model.config import stored_layout_text
from octlm.option_values import checked_values
from octlm.run.folder import CONFIG, RunFolder
from octlm.run.load import check_scheme_found, load_config
from octlm.train.options import MUON_OPTIONS, UNRECORDED, TrainOptions, model_options


def resume_policy(cls=TrainOptions) -> dict[str, Resume]:
    """``{option: what --resume may do with it}``, read from the declarations."""
    return {f.name: f.metadata["resume"] for f in option_fields(cls)}


def changeable_on_resume(cls=TrainOptions) -> frozenset[str]:
    """The options a resumed run may take anew: those left out of a checkpoint's config digest."""
    return frozenset(name for name, policy in resume_policy(cls).items() if policy is not Resume.FIXED)


def _must_match(name: str, value, then, run_dir: Path) -> str | None:
    if value == then:
        return None
    return (
        f"{flag(name)} {value} contradicts the run being resumed, which has {name}={then!r} "
        f"({run_dir / 'config.json'}); a resumed run keeps its model shape, data, seed and optimiser settings: "
        f"drop {flag(name)}, or start a new run with --out"
    )


def stored_options(run_dir: Path) -> dict:
    """The ``train`` section of a run's ``config.json``, checked and keyed by option name.

    An option the run's ``config.json`` has no key for (written before the
    option existed) takes the value runs then trained with where that is not
    today's default (:data:`~octlm.train.options.UNRECORDED`: AdamW for
    ``optimizer``), so an older run resumes as it trained.

    Raises:
        RunError: naming the file when the section is not an object or holds
            a value of the wrong type (the file is damaged).
    """
    where = f"--resume {run_dir}: {run_dir / CONFIG}"
    config = load_config(run_dir)
    check_scheme_found(RunFolder(run_dir), config)  # a plug-in's scheme, not a damaged file
    stored = config.get("train", {})
    if not isinstance(stored, dict):
        raise RunError(
            f'{where}: its "train" section must be an object of options, got {type(stored).__name__}; '
            "the file is damaged"
        )
    model = config.get("model")
    if isinstance(model, dict):
        # The model's options live in the "model" section; a run written before octlm nested them kept them under
        # "train" too.
        model = {**model, "layers": stored_layout_text(model)} if "layers" in model else model
        stored = {**{name: value for name, value in model.items() if name in model_options()}, **stored}
    # A key the run's octlm did not write: the run trained with what that octlm did, not with today's default
    # (UNRECORDED).
    stored = {**UNRECORDED, **stored}
    # stored resolved (octlm.train.init_from.scaling_record); the option is its method
    if isinstance(stored.get("rope_scaling"), dict):
        stored = {**stored, "rope_scaling": stored["rope_scaling"].get("method")}
    try:
        return checked_values(stored, where, TrainOptions, stored=True)
    except OctlmError as err:
        raise RunError(
            f"{err} (the file is damaged: put the run's own config.json back, or start a new run with --out)"
        ) from None


def resume_options(run_dir: Path, opts: TrainOptions, given: set[str]) -> tuple[TrainOptions, list[str]]:
    """The options of a resumed run: the run's own, with the ones given now that its declaration lets change.

    Each option given now goes by its :class:`Resume` policy: ``FIXED`` ones
    must equal the run's, ``FREE`` and ``RETUNABLE`` ones replace it, and
    ``RUN_FOLDER`` ones may only name the run itself.

    Returns ``(options, changes)`` where ``changes`` lists, for the person,
    re-tuned options that make the run differ from an uninterrupted one.

    Raises:
        OctlmError: when an option given now contradicts the run (a different
            model shape, data, seed or optimiser setting), naming it and the
            run's value; or for ``--overwrite`` or another ``--out``.
        RunError: when the run's ``config.json`` is damaged.
    """
    stored = stored_options(run_dir)
    merged, changes = dict(stored), []
    fields = {f.name: f for f in option_fields(TrainOptions)}
    values = opts.to_dict()
    for name in sorted(given):
        meta = fields[name].metadata
        value, then = values[name], stored.get(name, option_default(fields[name]))
        if name in MUON_OPTIONS and stored.get("optimizer") != "muon":
            # its config.json keeps Muon's defaults, which nothing reads: "contradicts ..., which has 0.25" misleads
            raise OctlmError(
                f"{flag(name)} {value} means nothing to the run being resumed: it trains with --optimizer "
                f"{stored.get('optimizer')} ({run_dir / CONFIG}), and only Muon reads {flag(name)}; drop {flag(name)}"
            )
        refuse = meta["resume_check"] or (_must_match if meta["resume"] is Resume.FIXED else None)
        if refuse is not None and (message := refuse(name, value, then, run_dir)):
            raise OctlmError(message)
        if meta["resume"] is Resume.RETUNABLE and value != then:
            changes.append(f"{flag(name)} {value} (was {then})")
        if meta["resume"] in (Resume.FREE, Resume.RETUNABLE):
            merged[name] = value
    merged.update(out=str(run_dir), overwrite=False)
    try:
        return TrainOptions.of(**merged), changes
    except ValueError as err:  # the model refuses a value (a damaged or hand-edited config.json, or a flag given now)
        raise OctlmError(f"{refused(err)} (from the flags given now or the run's {run_dir / CONFIG})") from None


__all__ = ["changeable_on_resume", "resume_options", "resume_policy", "stored_options"]
