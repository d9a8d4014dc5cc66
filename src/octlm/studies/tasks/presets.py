"""Task-study presets named after a paper: ``octlm length --task ... --preset ruoss2023``.

A preset sets what the paper sets and octlm can run (training and test
lengths, model shape, steps, seeds, schemes, randomized positions), as data:
one dict of option values per paper, applied by :func:`apply_preset`. A flag
given with a preset must agree with it, or the study is refused by name, so a
run called ``ruoss2023`` is always that protocol. What octlm's protocol cannot
match (encoder-only models, the papers' tasks octlm lacks, their step counts
on a CPU) is listed in :attr:`Preset.differs` and in docs/tasks.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from octlm.declare import flag, option_default, option_fields
from octlm.errors import OctlmError
from octlm.model.positions import SCHEMES, facts_of


@dataclass(frozen=True)
class Preset:
    """One paper's protocol as octlm runs it.

    Attributes:
        name: the ``--preset`` value.
        paper: the source, author, year and section.
        settings: ``{TaskOptions field: value}`` the preset sets.
        hardware: ``"cpu"`` (sized for 2 cores) or ``"gpu"``.
        expected: how long it takes, and where that figure comes from.
        differs: what differs from the paper, for the docs and ``--help``.
    """

    name: str
    paper: str
    settings: dict[str, Any]
    hardware: str
    expected: str
    differs: str


def paper_schemes(paper: str) -> list[str]:
    """The schemes the paper of preset ``paper`` compares (each scheme says so: ``in_papers``), in registration
    order."""
    return [name for name, cls in SCHEMES.items() if paper in facts_of(cls).in_papers]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "ruoss2023",
            "Ruoss et al. 2023, Randomized positional encodings boost length generalization of Transformers, §4",
            # Their small models: 5 layers, width 64, trained on lengths up to 40, positions drawn from 2,048 (about 25
            # x the
            # longest copy instance of 81 tokens); each scheme both plain and randomized.
            {
                "task": ["copy"],
                "task_length": 40,
                "multipliers": [1, 2, 4],
                "d_model": 64,
                "n_layers": 5,
                "n_heads": 8,
                "schemes": paper_schemes("ruoss2023"),
                "randomize_positions": 25,
                "seeds": 3,
                "max_steps": 1000,
            },
            "cpu",
            "30.6 minutes on one thread beside other jobs (docs/tasks.md)",
            "decoder-only with a causal mask where the paper trains encoder-only models; "
            "duplicate string only (octlm's copy), not the other fourteen tasks, "
            "so that 18 models fit the hour on 2 cores; 1,000 steps of Muon where the paper trains far longer; "
            "tested to 4x (160 items) where the paper tests up to 500",
        ),
        Preset(
            "kazemnejad2023",
            "Kazemnejad et al. 2023, The impact of positional encoding on length generalization in Transformers, §4",
            # A decoder of about 100M parameters, trained on instances up to L = 20 and tested up to 2L, three seeds,
            # five schemes.
            {
                "task": ["copy", "reverse", "recall", "selective-copy", "count", "flip-flop", "passkey"],
                "task_length": 20,
                "multipliers": [1, 2],
                "d_model": 768,
                "n_layers": 12,
                "n_heads": 12,
                "schemes": paper_schemes("kazemnejad2023"),
                "seeds": 3,
                "max_steps": 5000,
            },
            "gpu",
            "not measured (no GPU was lent when it was written): 105 models x 5,000 steps, estimated at 3 to 5 hours "
            "on one H200 (20 to 35 ms a step, bound by kernel launches at this batch) and days on 2 CPU cores",
            "octlm's seven tasks, of which only copy and reverse are the paper's (it also has addition, sorting, "
            "polynomial evaluation, summation, parity, LEGO, SCAN and PCFG); no scratchpad; sinusoidal stands for the "
            "paper's absolute embedding; 5,000 steps of Muon rather than the paper's schedule",
        ),
    )
}


def apply_preset(opts, given: set[str] | None = None):
    """``opts`` with its preset's settings filled in; ``opts`` itself when it names none.

    A field the preset sets keeps its value only if it still has its declared
    default or already equals the preset's. ``given`` (the flags the person
    typed, from the command line) also catches a flag typed with its default value.

    Raises:
        OctlmError: for a field set to something else than the preset says,
            naming the flag, both values and the fix.
    """
    if opts.preset is None:
        return opts
    preset = PRESETS[opts.preset]
    fields = {f.name: f for f in option_fields(type(opts))}
    changes = {}
    for name, value in preset.settings.items():
        current = getattr(opts, name)
        typed = given is not None and name in given
        if current != value and (typed or current != option_default(fields[name])):
            raise OctlmError(
                f"{flag(name)} {_shown(current)} conflicts with --preset {preset.name}, which sets {flag(name)} "
                f"{_shown(value)} (as {preset.paper.split(',')[0]}); drop {flag(name)} or drop --preset"
            )
        changes[name] = value
    return dataclasses.replace(opts, **changes)


def _shown(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


__all__ = ["PRESETS", "Preset", "apply_preset", "paper_schemes"]
