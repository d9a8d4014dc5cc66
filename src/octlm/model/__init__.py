"""The model: :class:`Decoder` (token table, position scheme, blocks, tied head), its config, cache and weights file."""

from octlm.model.config import ACTIVATIONS, DecoderConfig, DecoderFieldError
from octlm.model.decoder import Decoder, cross_entropy
from octlm.model.kvcache import KVCache, LayerCache
from octlm.model.sampling import sample_next

__all__ = ["ACTIVATIONS", "Decoder", "DecoderConfig", "DecoderFieldError", "KVCache", "LayerCache", "cross_entropy", "sample_next"]
