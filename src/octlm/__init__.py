"""octlm: a small language-model lab about token embeddings and position encodings."""

from octlm.version import RELEASE as __version__  # the release; octlm.version.build_version() adds the commit

__all__ = [
    "Decoder",
    "DecoderConfig",
    "KVCache",
    "__version__",
    "alibi_slopes",
    "load_run",
    "record_attention",
    "sinusoidal_positions",
]

# Where each public name lives. `import octlm` stays light (no torch) so that the command's entry point
# (octlm.console) can catch a Ctrl-C during the seconds torch takes to import.
_HOMES = {
    "Decoder": "octlm.model",
    "DecoderConfig": "octlm.model",
    "KVCache": "octlm.model",
    "record_attention": "octlm.model",
    "alibi_slopes": "octlm.model.positions",
    "sinusoidal_positions": "octlm.model.positions",
    "load_run": "octlm.run.load",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'octlm' has no attribute {name!r}")
