"""The model: :class:`Decoder` (token table, position scheme, blocks, tied head), its config, cache and weights file."""

from octlm.model.attention_maps import AttentionMaps, record_attention
from octlm.model.config import ACTIVATIONS, DecoderConfig, DecoderFieldError
from octlm.model.decoder import Decoder, cross_entropy
from octlm.model.kvcache import KVCache, LayerCache
from octlm.model.sampling import sample_next

__all__ = [
    "ACTIVATIONS",
    "AttentionMaps",
    "Decoder",
    "DecoderConfig",
    "DecoderFieldError",
    "KVCache",
    "LayerCache",
    "cross_entropy",
    "record_attention",
    "sample_next",
]
