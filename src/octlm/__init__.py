"""octlm: a small language-model lab about token embeddings and position encodings."""

from octlm.model import Decoder, DecoderConfig, KVCache, record_attention
from octlm.model.positions import alibi_slopes, sinusoidal_positions

__version__ = "0.1.0"

__all__ = ["Decoder", "DecoderConfig", "KVCache", "__version__", "alibi_slopes", "load_run", "record_attention", "sinusoidal_positions"]


def __getattr__(name: str):
    # load_run pulls in tokenizers and safetensors; keep `import octlm` light.
    if name == "load_run":
        from octlm.run.load import load_run

        return load_run
    raise AttributeError(f"module 'octlm' has no attribute {name!r}")
