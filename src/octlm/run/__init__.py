"""Run folders: what a training run leaves on disk (:mod:`octlm.run.folder`), output folders (:mod:`octlm.run.outputs`),
loading a run back (:mod:`octlm.run.load`) and the RoPE scaling it runs under (:mod:`octlm.run.scaling`)."""

from octlm.run.folder import RunFolder
from octlm.run.load import load_config, load_run

__all__ = ["RunFolder", "load_config", "load_run"]
