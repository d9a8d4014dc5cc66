"""Position schemes: how a decoder learns where each token sits.

Attention by itself is blind to order (the seed, "Attention doesn't know the
order"), so every scheme injects position at exactly one of three places:

* ``embed``      -- added to the token vectors before the first block
                    (learned table, sinusoidal waves);
* ``rotate``     -- applied to queries and keys inside every attention layer
                    (RoPE);
* ``score_bias`` -- added to the attention scores (ALiBi).

A scheme is a small ``nn.Module`` that overrides only the hooks it needs; the
base class makes every hook a no-op. Schemes are found by name in
:data:`SCHEMES`, so adding one means writing one class in this module and
decorating it with :func:`register`. Nothing else in octlm names a scheme:
what other modules need to know (a name for people, the explorer's vectors,
the memory a score bias takes, which RoPE scalings apply, which transformers
model holds it, whether the length study trains it) they ask the scheme, through the
class attributes and methods of :class:`PositionScheme`.

All hooks take ``offset``: the absolute position of the first token they see,
so cached decoding (which feeds one new token at position ``offset``) gives the
same vectors as a full forward pass. In a cached step the keys reach further
back than the queries: they always *end* where the queries end.

The waves the sinusoidal table and RoPE share are in :mod:`octlm.waves`; RoPE's
context-extension methods (linear, NTK, dynamic NTK, YaRN) in :mod:`octlm.rope_scaling`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from octlm.rope_scaling import ROPE_SCALINGS, RopeScaling, ScalableRotation
from octlm.waves import DEFAULT_BASE, SINUSOIDAL_LAYOUTS, rope_inverse_frequencies, sinusoidal_positions, supports_float64

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model import DecoderConfig

SCHEMES: dict[str, type["PositionScheme"]] = {}

#: "interleaved": channel pairs (2i, 2i+1), as Su et al. 2021 write it; "half": pairs (i, i + d/2), GPT-NeoX's and LLaMA's rotate_half.
ROPE_LAYOUTS = ("interleaved", "half")
#: Bytes per score entry [head, query, key] a score bias costs in attention: the float32 bias, the masked scores, the weights.
SCORE_BIAS_BYTES = 3 * 4


def register(name: str) -> Callable[[type["PositionScheme"]], type["PositionScheme"]]:
    """Class decorator adding a scheme to :data:`SCHEMES` under ``name``."""

    def wrap(cls: type[PositionScheme]) -> type[PositionScheme]:
        cls.name = name
        SCHEMES[name] = cls
        return cls

    return wrap


class _SchemeNames:
    """The names in :data:`SCHEMES`, sorted and read afresh at every use, so argparse choices follow the registry."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in SCHEMES

    def __iter__(self):
        return iter(sorted(SCHEMES))

    def __repr__(self) -> str:
        return repr(sorted(SCHEMES))


#: Live, sorted view of the registered names (``choices`` of ``--position``).
SCHEME_NAMES = _SchemeNames()


def unbounded_schemes() -> list[str]:
    """Names of the schemes that can address any position (no table limit)."""
    return sorted(name for name, cls in SCHEMES.items() if not cls.has_table_limit)


def length_study_schemes() -> list[str]:
    """Schemes ``octlm length`` trains by default, in registration order (the order of its table)."""
    return [name for name, cls in SCHEMES.items() if cls.in_length_study]


def schemes_taking(method: str) -> list[str]:
    """Names of the schemes that accept the RoPE scaling ``method`` (:data:`ROPE_SCALINGS`)."""
    return [name for name, cls in SCHEMES.items() if method in cls.scalings()]


@dataclass
class PositionVectors:
    """Position vectors of a run, [length, width], and where they come from (for the explorer).

    ``source`` is ``"learned"`` (trained rows) or ``"computed"`` (from a
    formula); ``description`` says what they are in a sentence.
    """

    vectors: Tensor
    source: str
    description: str


class PositionScheme(nn.Module):
    """Base class: no position signal anywhere.

    Subclasses override ``embed``, ``rotate`` or ``score_bias``, and the
    class attributes below where the default does not fit. ``max_length`` is
    the number of positions the scheme can address, or ``None`` when any
    length works.
    """

    name = "base"
    #: what people call it, in messages ("ALiBi's bias ...")
    label = "no position"
    #: one line for people: where the scheme puts position
    description = "no position signal: the causal mask is the only order information"
    has_table_limit = False
    reads: tuple[str, ...] = ()  #: DecoderConfig fields beyond the shape it reads: options meaningful for it alone
    #: trained by ``octlm length`` unless ``--schemes`` says otherwise (each model costs its time budget)
    in_length_study = True
    #: transformers ``model_type`` export-hf writes the scheme as (a mapper in octlm.hf), or None: then ``hf_refusal`` says why
    hf_model_type: str | None = None
    hf_refusal = "no transformers architecture computes this scheme"

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__()

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        """Raise ``ValueError`` naming the field when ``config`` cannot use this scheme."""

    @classmethod
    def scalings(cls) -> tuple[str, ...]:
        """Names in :data:`ROPE_SCALINGS` this scheme takes at run time; none here.

        A scheme that names any also defines ``set_rope_scaling(scaling: RopeScaling | None)``.
        """
        return ()

    @property
    def max_length(self) -> int | None:
        return None

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Return token vectors ``x`` [B, T, C] with position added (here: unchanged)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Return queries [B, H, Tq, D] and keys [B, H, Tk, D] with position applied (here: unchanged).

        Queries sit at positions ``offset .. offset + Tq - 1``; keys end where
        the queries end, at ``offset + Tq - Tk .. offset + Tq - 1`` (a cached
        step has ``Tk >= Tq``).
        """
        return q, k

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor | None:
        """Additive bias for attention scores [H, q_len, k_len], or ``None``."""
        return None

    def length_state(self, seq_len: int) -> object:
        """What the position signal of a ``seq_len``-token sequence depends on besides the positions; ``None`` here.

        Keys and values cached under one state are stale under another: a
        position's signal feeds every later layer, so the cache must be
        refilled (``Decoder.next_token_logits`` does that). RoPE under
        dynamic NTK is the case today: its frequencies change with the length.
        """
        return None

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """Bytes the score bias of a ``length``-token sequence takes in attention, 0 without one.

        A bias goes to attention as a float mask [n_heads, T, T] with the
        weights beside it, so it grows with T squared (sample checks it
        against the device's memory).
        """
        if type(self).score_bias is PositionScheme.score_bias:
            return 0
        return SCORE_BIAS_BYTES * n_heads * length**2

    def explorer_vectors(self, added: Tensor | None, length: int) -> PositionVectors | None:
        """What the embedding explorer shows for positions ``0 .. length - 1``, or ``None``.

        ``added`` is what the scheme adds to zero token vectors there,
        [length, C] (:func:`octlm.diagnostics.position_vectors`), or ``None``
        when it adds nothing. Here: those rows, computed by formula.
        """
        if added is None:
            return None
        return PositionVectors(added.float().cpu(), "computed", f"The {self.name} rows this run adds, computed by formula: {length} rows of {added.shape[1]}.")

    @classmethod
    def explorer_note(cls) -> str:
        """Why the explorer shows no position vectors, when :meth:`explorer_vectors` gives ``None``."""
        return f"This run's scheme ({cls.name}) adds no position vectors."


@register("learned")
class LearnedPositions(PositionScheme):
    """A learned table of position rows, added to the token vectors (GPT-2).

    Holds ``table``: ``nn.Embedding(context_length, d_model)``, initialised
    N(0, 0.02) by the decoder. Row ``t`` is added to the token at position
    ``t``; the table stops at its last row, so position ``context_length`` has
    no vector and asking for it raises ``ValueError`` (never an invented row).
    """

    label = "the learned table"
    description = "a learned row per position, added to the token vectors (GPT-2)"
    has_table_limit = True
    hf_model_type = "gpt2"

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.table = nn.Embedding(config.context_length, config.d_model)

    @property
    def max_length(self) -> int:
        return self.table.num_embeddings

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.max_length:
            raise ValueError(
                f"learned positions have {self.max_length} rows (positions 0..{self.max_length - 1}) "
                f"but the input needs positions {offset}..{end - 1} (length {end}); "
                f"crop the sequence to {self.max_length} tokens or use a scheme without a table "
                f"limit: {', '.join(unbounded_schemes())}"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.table(positions)

    def explorer_vectors(self, added: Tensor | None, length: int) -> PositionVectors:
        """The trained rows themselves (``added`` is ``table.weight[:length]``)."""
        return PositionVectors(added.float().cpu(), "learned", f"The run's learned table: {length} trained rows of {added.shape[1]} numbers.")


@register("sinusoidal")
class SinusoidalPositions(PositionScheme):
    """Fixed sine/cosine rows added to the token vectors (Vaswani et al. 2017 §3.5).

    No parameters and no maximum length: the rows come from
    :func:`sinusoidal_positions` on every call, so the same model can be run
    at any length (whether it generalises there is what ``octlm length`` asks).

    The token vectors are multiplied by ``sqrt(d_model)`` before the rows are
    added, as Vaswani et al. 2017 §3.4 do. octlm's token table starts at
    N(0, 0.02), so a token row has norm ~0.02 sqrt(C) while a sinusoidal row
    has norm sqrt(C / 2): without the factor the token signal is ~35 times
    weaker than the position signal, and with octlm's AdamW weight decay the
    Day-1 model stayed at the unigram loss (training loss 5.77 nats after 420
    steps on tinyshakespeare, where the scaled model reached 3.99 after 380).
    """

    label = "sinusoidal"
    description = "fixed sine/cosine rows added to the (scaled) token vectors (Vaswani et al. 2017)"
    hf_refusal = "no transformers architecture adds fixed sine/cosine rows to sqrt(d_model)-scaled token vectors"
    reads = ("sinusoidal_layout",)

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.base = DEFAULT_BASE
        self.layout = config.sinusoidal_layout
        self.token_scale = math.sqrt(config.d_model)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        if config.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ValueError(f"sinusoidal_layout must be one of {', '.join(SINUSOIDAL_LAYOUTS)}, got {config.sinusoidal_layout!r}")

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """``sqrt(C) * x + P[offset : offset + T]`` for token vectors ``x`` [B, T, C]."""
        table = sinusoidal_positions(x.shape[1], x.shape[2], offset, self.base, x.device, self.layout)
        return x * self.token_scale + table.to(x.dtype)


@register("rope")
class RotaryPositions(ScalableRotation, PositionScheme):
    """Rotary position embedding, RoPE (Su et al. 2021).

    Adds nothing to the embedding. Inside every attention layer, channel pair
    ``i`` of each query and key at position ``t`` is rotated by the angle
    ``t * rope_theta ** (-2i / rotary_dim)``. A rotation keeps vector norms,
    and the dot product of a query rotated to ``t`` with a key rotated to
    ``s`` depends on ``t - s`` only, so attention sees relative distance.

    Config: ``rope_theta`` (wavelength base); ``rope_layout`` picks which
    channels pair up (``interleaved``: (2i, 2i+1) as in the paper; ``half``:
    (i, i + rotary_dim/2), the rotate_half layout of GPT-NeoX and LLaMA);
    ``partial_rotary_factor`` rotates only the first
    ``rotary_dim = head_dim * factor`` channels of each head and passes the
    rest through (GPT-NeoX).

    Shapes: queries and keys [B, H, T, head_dim]; ``rotary_dim`` must be even
    and >= 2. No table, so no maximum length: angles are computed from the
    positions on every call, in float64.

    ``set_rope_scaling`` (from :class:`octlm.rope_scaling.ScalableRotation`)
    stretches the rotation past the training length without training
    (:class:`RopeScaling`: linear, NTK-aware, dynamic NTK, YaRN). It is a
    run-time setting for evaluation and sampling, not part of the trained
    config; ``None`` (the default) is plain RoPE.
    """

    label = "RoPE"
    description = "queries and keys rotated by their position, so scores see relative distance (Su et al. 2021)"
    hf_model_type = "gpt_neox"
    reads = ("rope_theta", "rope_layout", "partial_rotary_factor")

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.theta = config.rope_theta
        self.layout = config.rope_layout
        self.rotary_dim = rotary_dim(config)
        self.scaling: RopeScaling | None = None
        self.register_buffer("inv_freq", rope_inverse_frequencies(self.rotary_dim, config.rope_theta), persistent=False)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        if config.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be one of {', '.join(ROPE_LAYOUTS)}, got {config.rope_layout!r}")
        if not 0.0 < config.partial_rotary_factor <= 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {config.partial_rotary_factor}")
        dim = rotary_dim(config)
        if dim < 2 or dim % 2:
            raise ValueError(
                f"position='rope' rotates channel pairs, so the rotated part of each head must be even; got "
                f"head_dim={config.head_dim} (d_model={config.d_model}, n_heads={config.n_heads}) x "
                f"partial_rotary_factor={config.partial_rotary_factor} = {dim} channels"
            )
        if not config.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {config.rope_theta}")

    def angles(self, length: int, offset: int, device: torch.device, seq_len: int | None = None) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at positions ``offset .. offset + length - 1``.

        Each is float32 [length, rotary_dim // 2], already multiplied by the
        scaling's attention factor. ``seq_len`` is the current sequence length
        (default ``offset + length``), which only dynamic NTK reads.
        """
        inv_freq, attention = self.frequencies(offset + length if seq_len is None else seq_len)
        dtype = torch.float64 if supports_float64(device) else torch.float32
        t = torch.arange(offset, offset + length, device=device, dtype=dtype)
        angle = torch.outer(t, inv_freq.to(device=device, dtype=dtype))
        return (angle.cos() * attention).float(), (angle.sin() * attention).float()

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q_len, k_len = q.shape[-2], k.shape[-2]
        end = offset + q_len
        span = max(q_len, k_len)
        if end - span < 0:
            raise ValueError(f"rotate: {k_len} keys ending at position {end - 1} would start before position 0")
        # One set of angles for the longer span; queries and keys both end at `end`.
        cos, sin = self.angles(span, end - span, q.device, seq_len=end)
        return self._rotate_one(q, cos[span - q_len :], sin[span - q_len :]), self._rotate_one(k, cos[span - k_len :], sin[span - k_len :])

    def explorer_vectors(self, added: Tensor | None, length: int) -> PositionVectors:
        """``[cos(t w_i) | sin(t w_i)]`` over the channel pairs (Su et al. 2021), [length, rotary_dim].

        RoPE adds no vectors; the cosine similarity of two such rows is the
        mean of ``cos(w_i (t - s))``, the score of a query and a key with
        equal unit pairs.
        """
        cos, sin = self.angles(length, 0, self.inv_freq.device)
        return PositionVectors(
            torch.cat((cos, sin), dim=-1).float().cpu(), "computed",
            f"RoPE adds no vectors; this is the score it gives a query and a key with equal unit channel pairs "
            f"({cos.shape[1]} pairs, rope_theta {self.theta:g}), computed from its rotation angles.",
        )

    def _rotate_one(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        rotated, passed = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        if self.layout == "interleaved":
            a, b = rotated[..., 0::2].float(), rotated[..., 1::2].float()
            out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        else:
            a, b = rotated.float().chunk(2, dim=-1)
            out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        out = out.to(x.dtype)
        return out if passed.shape[-1] == 0 else torch.cat((out, passed), dim=-1)


def rotary_dim(config: "DecoderConfig") -> int:
    """Channels of each head that RoPE rotates: ``int(head_dim * partial_rotary_factor)``."""
    return int(config.head_dim * config.partial_rotary_factor)


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head ALiBi slopes m_h (Press et al. 2022, §3), float32 [n_heads].

    For a power of two ``n``, the slopes are the geometric sequence starting
    at ``2 ** (-8 / n)`` with that same ratio: for 8 heads, 1/2, 1/4, ...,
    1/256. For other head counts the paper's reference code takes the slopes
    of the largest power of two ``p`` below ``n`` and fills the remaining
    ``n - p`` heads with every other slope of ``2p`` heads.

    Raises:
        ValueError: when ``n_heads`` < 1.
    """
    if n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(p)
    if p < n_heads:
        slopes += power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


@register("alibi")
class ALiBiPositions(PositionScheme):
    """Attention with Linear Biases, ALiBi (Press et al. 2022).

    Adds nothing to the embedding and rotates nothing. Head ``h`` adds
    ``-m_h * (i - j)`` to the score of query position ``i`` on key position
    ``j <= i`` (:func:`alibi_slopes`), so attention fades with distance at a
    per-head rate. No table, so no maximum length; the bias goes to
    ``scaled_dot_product_attention`` as an additive float mask.
    """

    label = "ALiBi"
    description = "a penalty growing linearly with distance, added to the attention scores (Press et al. 2022)"
    hf_refusal = ("transformers' MPT and BLOOM share octlm's ALiBi slopes for 1 to 16 heads, but MPT has no biases in its linear layers "
                  "and LayerNorms, which octlm's blocks have, and BLOOM normalises the token rows before the first block and has only tanh GELU")

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.register_buffer("slopes", alibi_slopes(config.n_heads), persistent=False)

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset .. offset+q_len-1``, keys ending where the queries end.

        Entries for future keys (``j > i``) are ``-m (i - j) > 0``; the caller
        masks them out.
        """
        device = self.slopes.device
        i = torch.arange(offset, offset + q_len, device=device)
        j = torch.arange(offset + q_len - k_len, offset + q_len, device=device)
        distance = (i[:, None] - j[None, :]).float()
        return -self.slopes[:, None, None] * distance

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses ALiBi: position is a distance penalty on attention scores, not a vector."


@register("none")
class NoPositions(PositionScheme):
    """NoPE: no position signal at all (Kazemnejad et al. 2023).

    The embedding is the token row alone and attention gets no rotation or
    bias; the causal mask is the only order information, which a decoder can
    still turn into a sense of position. No maximum length.
    """

    label = "NoPE"
    description = PositionScheme.description
    hf_model_type = "gpt_neox"  # with partial_rotary_factor 0: nothing turns

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses no position signal (NoPE): only the causal mask tells positions apart."


def build(config: "DecoderConfig") -> PositionScheme:
    """Instantiate the scheme named by ``config.position``.

    Raises:
        ValueError: for an unknown name (listing the known ones) or a config
            the scheme cannot use.
    """
    check(config)
    return SCHEMES[config.position](config)


def check(config: "DecoderConfig") -> None:
    """Validate ``config.position`` and the fields that scheme depends on."""
    if config.position not in SCHEMES:
        raise ValueError(
            f"position={config.position!r} is not a known scheme; choose one of: {', '.join(sorted(SCHEMES))}"
        )
    SCHEMES[config.position].check_config(config)


__all__ = [
    "DEFAULT_BASE", "ROPE_LAYOUTS", "ROPE_SCALINGS", "SCHEMES", "SCHEME_NAMES", "SCORE_BIAS_BYTES", "SINUSOIDAL_LAYOUTS", "ALiBiPositions",
    "LearnedPositions", "NoPositions", "PositionScheme", "PositionVectors", "RopeScaling", "RotaryPositions", "SinusoidalPositions", "alibi_slopes",
    "build", "check", "length_study_schemes", "register", "rope_inverse_frequencies", "rotary_dim", "schemes_taking", "sinusoidal_positions", "unbounded_schemes",
]
