"""Position schemes: how a decoder learns where each token sits.

Attention by itself is blind to order (the seed, "Attention doesn't know the
order"), so every scheme injects position at exactly one of three places:

* ``embed``      -- added to the token vectors before the first block
                    (learned table, sinusoidal waves);
* ``rotate``     -- applied to queries and keys inside every attention layer
                    (RoPE);
* ``score_bias`` -- added to the attention scores (ALiBi); a bias that
                    reads the queries and keys (CoPE) or differs by layer
                    (KERPLE) overrides ``attention_bias``, which calls it.

Two more hooks serve schemes that read the tokens or replace the softmax:
``read_input`` sees each attention layer's input first (FoX's forget gates) and
returns what it read, which the layer hands back to the scheme's bias or
``attend`` as ``seen``; ``attend`` forms the weights itself when ``attends`` is set (stick-breaking).

A scheme is a small ``nn.Module`` that overrides only the hooks it needs; the
base class makes every hook a no-op. Schemes are found by name in
:data:`SCHEMES`, so adding one means writing one class in a module of this
package (by the hook it uses), decorating it with :func:`register` and
importing the module below; or, outside octlm, in a module of one's own loaded
with ``--plugin`` or an ``octlm.positions`` entry point (:mod:`.plugins`). Nothing else in octlm names a scheme:
what other modules need to know (a name for people, the explorer's vectors,
which transformers model holds it, whether the length study trains it, whether
its cache can evict) they read from the record registered beside the class,
:class:`SchemeFacts`, through :func:`facts_of`; what its arithmetic decides (the
memory a score bias takes, which RoPE scalings apply) they ask the scheme.

All hooks take ``offset``: the absolute position of the first token they see,
so cached decoding (which feeds one new token at position ``offset``) gives the
same vectors as a full forward pass. In a cached step the keys reach further
back than the queries: they always *end* where the queries end.

The waves the sinusoidal table and RoPE share are in :mod:`octlm.model.positions.waves`; RoPE's
context-extension methods (linear, NTK, dynamic NTK, YaRN) in :mod:`octlm.model.positions.rope_scaling`.
"""

from octlm.model.positions import plugins  # noqa: F401  (installs the entry point loader on SCHEMES)
from octlm.model.positions.absolute import LearnedPositions, SinusoidalPositions
from octlm.model.positions.attention_bias import FIRE_THRESHOLD, ALiBiPositions, FIREBias, KERPLEBias, T5RelativeBias
from octlm.model.positions.base import SCORE_BIAS_BYTES, PositionScheme
from octlm.model.positions.contextual import ContextualPositions
from octlm.model.positions.distances import alibi_slopes
from octlm.model.positions.facts import OPT_IN, PositionVectors, SchemeFacts, facts_of
from octlm.model.positions.nope import NoPositions
from octlm.model.positions.path import PaTHAttention
from octlm.model.positions.prope import PartialFrequencyRoPE
from octlm.model.positions.recency import ForgettingAttention, StickBreakingAttention
from octlm.model.positions.registry import (
    PLUGIN_SOURCES,
    SCHEME_NAMES,
    SCHEMES,
    build,
    default_scheme,
    evicting_schemes,
    length_study_schemes,
    put_in_table_order,
    random_position_schemes,
    register,
    schemes_taking,
    task_study_schemes,
    unbounded_schemes,
)
from octlm.model.positions.rope_scaling import ROPE_SCALINGS, RopeScaling
from octlm.model.positions.rotary import ROPE_LAYOUTS, RotaryPositions, rotary_dim
from octlm.model.positions.waves import DEFAULT_BASE, SINUSOIDAL_LAYOUTS, rope_inverse_frequencies, sinusoidal_positions
from octlm.model.positions.xpos import XPosRotation

#: The order of every table that lists schemes (octlm length's rows and default --schemes, the page's list, the
#: flags' order in --help): the absolute schemes, RoPE, the biases, RoPE's variants, CoPE, none, and the schemes that
#: read the tokens. Data, not the order the modules above happen to import in; a scheme not named here follows them.
TABLE_ORDER = (
    "learned",
    "sinusoidal",
    "rope",
    "alibi",
    "t5",
    "fire",
    "kerple",
    "xpos",
    "prope",
    "cope",
    "none",
    "fox",
    "stickbreaking",
    "pathattn",
)
put_in_table_order(TABLE_ORDER)

__all__ = [
    "DEFAULT_BASE",
    "FIRE_THRESHOLD",
    "OPT_IN",
    "PLUGIN_SOURCES",
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "SCHEMES",
    "SCHEME_NAMES",
    "SCORE_BIAS_BYTES",
    "SINUSOIDAL_LAYOUTS",
    "TABLE_ORDER",
    "ALiBiPositions",
    "ContextualPositions",
    "FIREBias",
    "ForgettingAttention",
    "KERPLEBias",
    "LearnedPositions",
    "NoPositions",
    "PaTHAttention",
    "PartialFrequencyRoPE",
    "PositionScheme",
    "PositionVectors",
    "RopeScaling",
    "RotaryPositions",
    "SchemeFacts",
    "SinusoidalPositions",
    "StickBreakingAttention",
    "T5RelativeBias",
    "XPosRotation",
    "alibi_slopes",
    "build",
    "default_scheme",
    "evicting_schemes",
    "facts_of",
    "length_study_schemes",
    "put_in_table_order",
    "task_study_schemes",
    "random_position_schemes",
    "register",
    "rope_inverse_frequencies",
    "rotary_dim",
    "schemes_taking",
    "sinusoidal_positions",
    "unbounded_schemes",
]
