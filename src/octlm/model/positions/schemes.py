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

The waves the sinusoidal table and RoPE share are in :mod:`octlm.model.positions.waves`; RoPE's
context-extension methods (linear, NTK, dynamic NTK, YaRN) in :mod:`octlm.model.positions.rope_scaling`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.model.positions.distances import alibi_slopes, causal_distances, t5_buckets
from octlm.model.positions.base import (
    SCHEMES, SCHEME_NAMES, SCORE_BIAS_BYTES, PositionScheme, PositionVectors, length_study_schemes,
    random_position_schemes, register, schemes_taking, unbounded_schemes,
)
from octlm.model.positions.rope_scaling import ROPE_SCALINGS, RopeScaling, ScalableRotation
from octlm.model.positions.waves import DEFAULT_BASE, SINUSOIDAL_LAYOUTS, rope_inverse_frequencies, sinusoidal_positions, supports_float64

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.decoder import DecoderConfig

#: "interleaved": channel pairs (2i, 2i+1), as Su et al. 2021 write it;
#: "half": pairs (i, i + d/2), the rotate_half layout of GPT-NeoX and LLaMA.
ROPE_LAYOUTS = ("interleaved", "half")


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
    takes_random_positions = True

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        # Randomized positions reach past T, so the table has a row for every position they draw.
        self.table = nn.Embedding(self.random_range, config.d_model)

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
        return x + self.table(self.position_ids(x.shape[1], offset, x.device))

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
    takes_random_positions = True

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
        if self.training and self.drawn is not None:
            rows = sinusoidal_positions(self.random_range, x.shape[2], 0, self.base, x.device, self.layout)
            table = rows[self.position_ids(x.shape[1], offset, x.device)]
        else:
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

    ``set_rope_scaling`` (from :class:`octlm.model.positions.rope_scaling.ScalableRotation`)
    stretches the rotation past the training length without training
    (:class:`RopeScaling`: linear, NTK-aware, dynamic NTK, YaRN). It is a
    run-time setting for evaluation and sampling, not part of the trained
    config; ``None`` (the default) is plain RoPE.
    """

    label = "RoPE"
    description = "queries and keys rotated by their position, so scores see relative distance (Su et al. 2021)"
    hf_model_type = "gpt_neox"
    reads = ("rope_theta", "rope_layout", "partial_rotary_factor")
    takes_random_positions = True

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
        return self.angles_at(self.position_ids(length, offset, device), offset + length if seq_len is None else seq_len)

    def angles_at(self, positions: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at ``positions`` [N], as :meth:`angles`: float32 [N, rotary_dim // 2]."""
        inv_freq, attention = self.frequencies(seq_len)
        dtype = torch.float64 if supports_float64(positions.device) else torch.float32
        t = positions.to(dtype)
        angle = torch.outer(t, inv_freq.to(device=t.device, dtype=dtype))
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
        distance = causal_distances(q_len, k_len, offset, self.slopes.device).float()
        return -self.slopes[:, None, None] * distance

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses ALiBi: position is a distance penalty on attention scores, not a vector."


@register("t5")
class T5RelativeBias(PositionScheme):
    """T5's relative position bias (Raffel et al. 2020 §2.1).

    A learned scalar per head and distance bucket is added to the attention
    score of query ``i`` on key ``j``: ``bias[h, i, j] = table[bucket(i - j), h]``
    (:func:`octlm.model.positions.distances.t5_buckets`: exact buckets for the nearest
    ``num_buckets // 2`` distances, logarithmic ones up to ``max_distance``,
    then one shared bucket). Causal, so buckets look back only. As in T5, one
    table (``bias_table``: ``nn.Embedding(t5_num_buckets, n_heads)``) serves
    every layer, and no vector is added to the embedding; no maximum length,
    since every distance past ``max_distance`` shares the last bucket. The
    bias goes to attention as an additive float mask [1, H, Tq, Tk].
    """

    label = "the T5 bias"
    description = "a learned bias per head and bucket of distance, added to the attention scores (Raffel et al. 2020)"
    reads = ("t5_num_buckets", "t5_max_distance")
    in_length_study = False  # opt-in: the default study's 30 minutes hold five models

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.num_buckets, self.max_distance = config.t5_num_buckets, config.t5_max_distance
        self.bias_table = nn.Embedding(config.t5_num_buckets, config.n_heads)

    @classmethod
    def check_config(cls, config: "DecoderConfig") -> None:
        super().check_config(config)
        if config.t5_num_buckets < 2 or config.t5_max_distance <= config.t5_num_buckets // 2:
            raise ValueError(f"t5_max_distance must exceed t5_num_buckets // 2 (= {config.t5_num_buckets // 2}) and t5_num_buckets must be >= 2, "
                             f"got {config.t5_max_distance} and {config.t5_num_buckets}")

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset ..``, keys ending where the queries end (future keys: bucket 0, masked by the caller)."""
        buckets = t5_buckets(causal_distances(q_len, k_len, offset, self.bias_table.weight.device), self.num_buckets, self.max_distance)
        return self.bias_table(buckets).permute(2, 0, 1)

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses the T5 bias: position is a learned number per distance bucket on attention scores, not a vector."


#: FIRE's MLP width and initial values (Li et al. 2023, appendix: 32 hidden units, c = 0.1, L = 512).
FIRE_HIDDEN, FIRE_C, FIRE_THRESHOLD = 32, 0.1, 512.0


@register("fire")
class FIREBias(PositionScheme):
    """FIRE: functional interpolation for relative positions (Li et al. 2023, §3.2, eq. 4).

    ``bias[h, i, j] = f(psi(i - j) / psi(max(L, i)))[h]`` with
    ``psi(x) = log(|c| x + 1)``. The distance is divided by (a transform of)
    the query's own position, so every bias input lies in [0, 1] at any
    length ("progressive interpolation"); the threshold ``L`` keeps short
    sequences from being stretched. ``c`` and ``L = |l| * 512`` are learned
    (``l`` starts at 1, so that ``L`` moves at the pace of the other
    weights), and ``f`` is a two-layer ReLU MLP ``1 -> 32 -> n_heads``, one
    for all layers. Future keys get distance 0 and are masked by the caller.
    Shapes: bias [H, Tq, Tk]; no maximum length. The bias goes to attention as
    an additive float mask [1, H, Tq, Tk].
    """

    label = "FIRE"
    description = "a learned MLP of the distance over the query's position, added to the attention scores (Li et al. 2023)"
    in_length_study = False  # opt-in: the default study's 30 minutes hold five models

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        self.c = nn.Parameter(torch.tensor(FIRE_C))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        self.mlp = nn.Sequential(nn.Linear(1, FIRE_HIDDEN), nn.ReLU(), nn.Linear(FIRE_HIDDEN, config.n_heads))

    def psi(self, x: Tensor) -> Tensor:
        """``log(|c| x + 1)``, elementwise on float ``x`` >= 0."""
        return torch.log1p(self.c.abs() * x)

    def interpolated(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """The MLP's input ``psi(i - j) / psi(max(L, i))`` [q_len, k_len], in [0, 1]; the explainer page draws it."""
        distance = causal_distances(q_len, k_len, offset, self.c.device)
        query = torch.arange(offset, offset + q_len, device=self.c.device, dtype=torch.float32)
        threshold = self.threshold_scale.abs() * FIRE_THRESHOLD
        return self.psi(distance.clamp(min=0).float()) / self.psi(torch.maximum(query, threshold))[:, None]

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset ..``, keys ending where the queries end."""
        return self.mlp(self.interpolated(q_len, k_len, offset).unsqueeze(-1)).permute(2, 0, 1)

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses FIRE: position is a learned function of relative distance on attention scores, not a vector."


@register("xpos")
class XPosRotation(RotaryPositions):
    """xPos: RoPE with an exponential decay (Sun et al. 2023, §3.2, "Extrapolatable Position Embedding").

    Queries and keys are rotated as by RoPE (:class:`RotaryPositions`, with
    its config, layouts and scalings); then channel pair ``i`` of a query at
    position ``n`` is multiplied by ``zeta_i ** (n / scale_base)`` and of a
    key at position ``m`` by ``zeta_i ** (-m / scale_base)``, with
    ``zeta_i = (i / (d / 2) + gamma) / (1 + gamma)``, ``gamma = 0.4``,
    ``d = rotary_dim``, ``scale_base = 512``. Their product decays as
    ``zeta_i ** ((n - m) / scale_base)``: a relative, per-pair attenuation of
    far keys. Positions are absolute (not centred, as the paper's code
    does), so a cached key keeps its factor; in float32 the key factor stays
    finite for sequences up to tens of thousands of tokens. Shapes as RoPE:
    queries and keys [B, H, T, head_dim]; no maximum length.
    """

    label = "xPos"
    description = "RoPE with a per-channel decay that makes the score fade with distance (Sun et al. 2023)"
    in_length_study = False  # opt-in: the default study's 30 minutes hold five models
    hf_model_type = None
    hf_refusal = "transformers' GPT-NeoX rotates queries and keys but has no xPos decay"
    gamma, scale_base = 0.4, 512.0

    def __init__(self, config: "DecoderConfig") -> None:
        super().__init__(config)
        pairs = torch.arange(self.rotary_dim // 2, dtype=torch.float64)
        self.register_buffer("zeta", (pairs / (self.rotary_dim / 2) + self.gamma) / (1 + self.gamma), persistent=False)

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        q, k = super().rotate(q, k, offset)
        q_len, k_len = q.shape[-2], k.shape[-2]
        end = offset + q_len
        positions = self.position_ids(max(q_len, k_len), end - max(q_len, k_len), q.device)
        dtype = torch.float64 if supports_float64(q.device) else torch.float32
        log_zeta = self.zeta.to(device=q.device, dtype=dtype).log() / self.scale_base
        decay = (positions.to(dtype)[:, None] * log_zeta).exp().float()  # [span, pairs]: zeta ** (n / scale_base)
        return self._scale(q, decay[-q_len:]), self._scale(k, decay[-k_len:].reciprocal())

    def _scale(self, x: Tensor, factor: Tensor) -> Tensor:
        """Multiply each rotated channel pair of ``x`` [B, H, T, D] by ``factor`` [T, pairs]; passed channels keep 1."""
        per_channel = factor.repeat_interleave(2, dim=-1) if self.layout == "interleaved" else factor.repeat(1, 2)
        rest = per_channel.new_ones(per_channel.shape[0], x.shape[-1] - self.rotary_dim)
        return (x.float() * torch.cat((per_channel, rest), dim=-1)).to(x.dtype)


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
    "DEFAULT_BASE", "ROPE_LAYOUTS", "ROPE_SCALINGS", "SCHEMES", "SCHEME_NAMES", "SCORE_BIAS_BYTES", "SINUSOIDAL_LAYOUTS",
    "ALiBiPositions", "FIREBias", "LearnedPositions", "NoPositions", "PositionScheme", "PositionVectors", "RopeScaling",
    "RotaryPositions", "SinusoidalPositions", "T5RelativeBias", "XPosRotation", "alibi_slopes", "build", "check", "length_study_schemes",
    "random_position_schemes", "register", "rope_inverse_frequencies", "rotary_dim", "schemes_taking", "sinusoidal_positions", "unbounded_schemes",
]
