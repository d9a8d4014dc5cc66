"""The decoder: token table, position scheme, pre-LayerNorm blocks, tied head.

Read top to bottom: config, attention, MLP, block, decoder. The first layer
(``_embed``) is the part octlm exists to study; position schemes live in
:mod:`octlm.model.positions.schemes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.positions import schemes as position_schemes
from octlm.model.kvcache import KVCache, LayerCache


#: MLP nonlinearities by name: the ``approximate`` argument of ``F.gelu``.
ACTIVATIONS = {"gelu": "none", "gelu_tanh": "tanh"}


class DecoderFieldError(ValueError):
    """A :class:`DecoderConfig` value that cannot work.

    ``field`` names it and ``rest`` says the rest, so the command line can
    name its own flag (``--d-model=30 is not ...``) where Python reads
    ``DecoderConfig.d_model=30 is not ...``.
    """

    def __init__(self, field: str, rest: str) -> None:
        super().__init__(f"DecoderConfig.{field}{rest}")
        self.field, self.rest = field, rest


@dataclass
class DecoderConfig:
    """Shape of a decoder. Defaults are octlm's Day-1 baseline.

    Attributes:
        vocab_size: rows of the token table (tokens). Day 1: 1,024.
        context_length: tokens per training block; also the number of rows of
            a learned position table. Day 1: 128.
        d_model: model width C (columns of every table). Day 1: 128.
        n_heads: attention heads; ``head_dim = d_model // n_heads``.
        n_layers: transformer blocks.
        dropout: dropout probability on attention weights and residual
            branches (0 disables it).
        activation: the MLP's GELU: ``gelu`` (exact, with erf) or
            ``gelu_tanh`` (its tanh approximation, GPT-2's ``gelu_new``;
            Hendrycks & Gimpel 2016), kept so imported GPT-2 weights compute
            what they were trained to.
        position: a name in :data:`octlm.model.positions.schemes.SCHEMES`.
        rope_theta: RoPE wavelength base (Su et al. 2021), used by ``rope``.
        rope_layout: which channels RoPE pairs: ``interleaved`` (2i, 2i+1) or
            ``half`` (i, i + d/2, GPT-NeoX/LLaMA).
        partial_rotary_factor: fraction of each head RoPE rotates (1: all).
        sinusoidal_layout: ``interleaved`` (sin, cos, sin, ...) or
            ``concatenated`` ([sin | cos]).
        t5_num_buckets, t5_max_distance: T5 bias buckets and the distance
            (tokens) where the last one starts (Raffel et al. 2020: 32, 128).
        randomize_positions: F >= 1; with F > 1, training positions are a
            sorted random subset of ``0 .. F * context_length - 1`` (Ruoss et
            al. 2023), for schemes that take it (learned, sinusoidal, RoPE).

    Raises:
        ValueError: on construction, naming the field and value, when a size
            is not positive, ``d_model`` is not divisible by ``n_heads``,
            dropout is outside [0, 1), the position name is unknown, or the
            scheme cannot use the shape (odd ``head_dim`` with RoPE).
    """

    vocab_size: int = 1024
    context_length: int = 128
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.0
    activation: str = "gelu"
    position: str = "learned"
    rope_theta: float = position_schemes.DEFAULT_BASE
    rope_layout: str = "interleaved"
    partial_rotary_factor: float = 1.0
    sinusoidal_layout: str = "interleaved"
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    randomize_positions: int = 1

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "n_heads", "n_layers", "t5_num_buckets", "t5_max_distance", "randomize_positions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise DecoderFieldError(name, f" must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise DecoderFieldError(
                "d_model", f"={self.d_model} is not divisible by n_heads={self.n_heads}; pick n_heads among the divisors of d_model"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise DecoderFieldError("dropout", f" must be in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise DecoderFieldError("activation", f" must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        position_schemes.check(self)

    @property
    def head_dim(self) -> int:
        """Channels per attention head: ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DecoderConfig":
        """Build from a dict, rejecting unknown keys with a ``ValueError`` naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown DecoderConfig field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``.

    Input and output [B, T, C]. The position scheme may rotate queries and
    keys or bias the scores; with neither, the causal mask is the only order
    information attention gets.

    Every path goes through ``F.scaled_dot_product_attention``: without a
    score bias and without a cache it passes ``is_causal=True`` and no mask
    (any fused kernel may run); a one-token cached step needs no mask at all;
    a multi-token step on top of a cache passes a boolean mask [T, S]; ALiBi
    passes its bias as an additive float mask [1, H, T, S] with ``-inf`` on
    future keys.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: Tensor, positions: position_schemes.PositionScheme, offset: int = 0, cache: LayerCache | None = None
    ) -> Tensor:
        """[B, T, C] at positions ``offset ..`` -> [B, T, C]; with ``cache``, attend to its keys too and extend it."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = positions.rotate(q, k, offset)
        if cache is not None:
            k, v = cache.append(k, v)
        S = k.shape[-2]
        bias = positions.score_bias(T, S, offset)
        dropout = self.dropout if self.training else 0.0
        if bias is None and (T == S or T == 1):
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=T > 1)
        else:
            # Query i (at offset + i) may see key j (at offset + T - S + j) when j <= i + S - T.
            causal = None if T == 1 else torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            if bias is None:
                mask = causal
            else:
                mask = bias.to(q.dtype) if causal is None else bias.to(q.dtype).masked_fill(~causal, float("-inf"))
                mask = mask.unsqueeze(0)  # [1, H, T, S]: the 4-D shape the CPU flash kernel also accepts
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    """Position-wise feed-forward layer: C -> 4C -> GELU -> C, on [B, T, C]."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, 4 * config.d_model)
        self.down = nn.Linear(4 * config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.approximate = ACTIVATIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.down(F.gelu(self.up(x), approximate=self.approximate)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(
        self, x: Tensor, positions: position_schemes.PositionScheme, offset: int = 0, cache: LayerCache | None = None
    ) -> Tensor:
        x = x + self.attn(self.ln_attn(x), positions, offset, cache)
        return x + self.mlp(self.ln_mlp(x))


class Decoder(nn.Module):
    """A GPT-style decoder whose output head is tied to its token table.

    Attributes:
        token_embedding: ``nn.Embedding(vocab_size, d_model)``; token id ``i``
            becomes row ``E[i]``.
        positions: the position scheme (:mod:`octlm.model.positions.schemes`).
        position_embedding: the scheme's ``nn.Embedding`` when positions are
            a learned table, else ``None``.
        lm_head: ``nn.Linear(d_model, vocab_size, bias=False)`` whose weight
            *is* ``token_embedding.weight`` (one Parameter, stored once).

    ``model(token_ids)`` maps int64 ids [B, T] to logits [B, T, vocab_size].
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = position_schemes.build(config)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_final = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(_init_weights)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the output head use the token table's Parameter (again, after loading)."""
        self.lm_head.weight = self.token_embedding.weight

    @property
    def position_embedding(self) -> nn.Embedding | None:
        table = getattr(self.positions, "table", None)
        return table if isinstance(table, nn.Embedding) else None

    @property
    def max_length(self) -> int | None:
        """Longest sequence (tokens) the position scheme can address, or ``None``."""
        return self.positions.max_length

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters (the tied head counted once); optionally without token/position tables."""
        params = {id(p): p for p in self.parameters()}
        total = sum(p.numel() for p in params.values())
        if exclude_embeddings:
            total -= self.token_embedding.weight.numel()
            if self.position_embedding is not None:
                total -= self.position_embedding.weight.numel()
        return total

    def _embed(self, token_ids: Tensor, offset: int = 0) -> Tensor:
        """The first layer: token rows plus the scheme's position signal, [B, T] -> [B, T, C]."""
        return self.positions.embed(self.token_embedding(token_ids), offset)

    def set_rope_scaling(self, method: str | None, factor: float = 1.0, original_length: int | None = None) -> None:
        """Run a RoPE model past its training length without training, or (``method=None``) stop doing so.

        Args:
            method: ``linear`` (Chen et al. 2023), ``ntk``, ``dynamic-ntk`` or
                ``yarn`` (Peng et al. 2023); see :data:`octlm.model.positions.rope_scaling.ROPE_SCALINGS`.
            factor: the scale (>= 1), usually target length / training length;
                for ``dynamic-ntk`` the multiplier of the length ratio.
            original_length: the length trained on (default ``context_length``).

        Raises:
            ValueError: when the model's scheme does not take the method
                (its ``scalings()``), the method is unknown or the factor is below 1.
        """
        scaling = None if method is None else position_schemes.RopeScaling(method, factor, original_length or self.config.context_length)
        if method is not None and method not in self.positions.scalings():
            takers = " or ".join(map(repr, position_schemes.schemes_taking(method)))
            raise ValueError(f"RoPE scaling ({method}) needs position={takers}; this model uses position={self.config.position!r}")
        if self.positions.scalings():
            self.positions.set_rope_scaling(scaling)

    def forward(self, token_ids: Tensor, offset: int = 0, cache: KVCache | None = None) -> Tensor:
        """Logits for every position.

        Args:
            token_ids: integer tensor [B, T] with values in ``[0, vocab_size)``.
            offset: absolute position of ``token_ids[:, 0]`` (tokens), >= 0.
            cache: a :class:`KVCache` holding positions ``0 .. offset - 1``
                (so ``offset == cache.length``); the new tokens attend to them
                and are added to it.

        Returns:
            float logits [B, T, vocab_size] (nats, before softmax).

        Raises:
            ValueError: when ``token_ids`` is not a 2-D integer tensor, holds
                an id outside ``[0, vocab_size)`` (checked on CPU tensors in
                eager mode only, see below), ``offset`` is negative or differs
                from ``cache.length``, or a learned position table is too
                short for ``offset + T``.

        The id range is checked where ids enter octlm (token files when they
        are opened, prompts in :meth:`generate`), not here on an accelerator or
        under ``torch.compile``: reading the range back is a host-device sync
        per forward pass and a graph break. On CPU tensors in eager mode it
        costs nothing of the kind, and a Python caller's bad id gets a clear
        error instead of an IndexError from inside torch.
        """
        return self.lm_head(self.ln_final(self._hidden(token_ids, offset, cache)))

    def _hidden(self, token_ids: Tensor, offset: int = 0, cache: KVCache | None = None) -> Tensor:
        """The last block's output [B, T, C], before the final LayerNorm."""
        self._check_input(token_ids, offset)
        if cache is not None and offset != cache.length:
            raise ValueError(f"offset={offset} but the cache holds positions 0..{cache.length - 1}; pass offset=cache.length")
        self.positions.draw_positions(token_ids.shape[1])
        x = self.dropout(self._embed(token_ids, offset))
        for i, block in enumerate(self.blocks):
            x = block(x, self.positions, offset, None if cache is None else cache.layers[i])
        return x

    @torch.no_grad()
    def next_token_logits(self, token_ids: Tensor, cache: KVCache | None = None) -> Tensor:
        """float32 logits [B, vocab_size] for the token after ``token_ids`` [B, N].

        Without ``cache`` this is a full forward pass over the sequence (or,
        for a learned position table, over its last ``context_length`` tokens).
        With a cache that holds the first ``cache.length < N`` tokens, only
        the new ones are computed and added to it. Two cases empty the cache
        and prefill again, because every cached entry would change: a
        learned-position sequence longer than its table (the cropped window
        moves every position), and RoPE under dynamic NTK past the training
        length (the frequencies change with the length; the scheme's
        ``length_state`` tells). Both stay exact but are no faster than
        recomputing.

        Raises:
            ValueError: when the cache holds as many tokens as ``token_ids``
                or more, besides the checks of ``forward``.
        """
        limit, n = self.max_length, token_ids.shape[1]
        if cache is None:
            window = token_ids if limit is None else token_ids[:, -limit:]
            return self(window)[:, -1, :].float()
        cropped = limit is not None and n > limit
        window = token_ids[:, -limit:] if cropped else token_ids
        state = self.positions.length_state(window.shape[1])
        if cropped or state != cache.state:
            cache.reset()
        elif cache.length >= n:
            raise ValueError(f"the cache already holds {cache.length} tokens; give the sequence with its new token(s) ({n} given)")
        cache.state = state
        hidden = self._hidden(window[:, cache.length :], cache.length, cache)
        return self.lm_head(self.ln_final(hidden[:, -1:]))[:, -1, :].float()

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        use_cache: bool = True,
        *,
        generator: torch.Generator | None = None,
        on_token: Callable[[Tensor], None] | None = None,
    ) -> Tensor:
        """Continue ``prompt_ids`` [B, T0] by ``max_new_tokens`` tokens; returns [B, T0 + max_new_tokens].

        ``temperature`` 0 picks the most likely token (greedy); otherwise
        logits are divided by it and sampled (with ``generator``), keeping
        only the ``top_k`` most likely tokens when given.

        ``use_cache`` keeps every layer's keys and values (:class:`KVCache`),
        so each step computes one token; without it each step recomputes the
        whole sequence. Both give the same logits (to float rounding) for
        every scheme. A model with a learned position table sees only the
        last ``context_length`` tokens once the sequence is longer (the
        window slides; with a cache the window is prefilled again at each
        such step); sinusoidal, RoPE (scaled or not), ALiBi and NoPE see the
        whole sequence.

        ``on_token``, when given, is called with each step's new tokens
        (int64 [B, 1]) as soon as they are picked, so a caller can show text
        while the rest is generated; an exception it raises (or a Ctrl-C
        during generation) stops generation. It changes nothing about which
        tokens are picked.

        Raises:
            ValueError: for a negative ``max_new_tokens`` or ``temperature``,
                or ``top_k`` < 1, besides the input checks of ``forward``.
            TypeError: when ``use_cache`` is not a bool (a generator passed
                by position: pass ``generator=`` by keyword).
        """
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}; pass a generator as generator=...")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        self._check_input(prompt_ids, 0)
        self._check_range(prompt_ids)  # once per call: the prompt is where ids enter
        ids = prompt_ids
        capacity = prompt_ids.shape[1] + max_new_tokens
        cache = KVCache(len(self.blocks), capacity if self.max_length is None else min(capacity, self.max_length)) if use_cache else None
        for _ in range(max_new_tokens):
            logits = self.next_token_logits(ids, cache)
            token = sample_next(logits, temperature, top_k, generator)
            ids = torch.cat((ids, token), dim=1)
            if on_token is not None:
                on_token(token)
        return ids

    def _check_input(self, token_ids: Tensor, offset: int) -> None:
        if not isinstance(token_ids, Tensor):
            raise ValueError(f"token_ids must be a torch.Tensor of shape [B, T], got {type(token_ids).__name__}")
        if token_ids.dim() != 2:
            raise ValueError(
                f"token_ids must have shape [B, T] (rank 2), got rank {token_ids.dim()} with shape "
                f"{list(token_ids.shape)}; add a batch dimension with token_ids.unsqueeze(0)"
            )
        if token_ids.dtype.is_floating_point or token_ids.dtype.is_complex or token_ids.dtype == torch.bool:
            raise ValueError(f"token_ids must be an integer tensor, got dtype {token_ids.dtype}")
        if token_ids.shape[1] == 0:
            raise ValueError("token_ids is empty along T; give at least one token")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if token_ids.device.type == "cpu" and not torch.compiler.is_compiling():
            self._check_range(token_ids)

    def _check_range(self, token_ids: Tensor) -> None:
        low, high = torch.aminmax(token_ids)
        low, high = int(low), int(high)
        if low < 0 or high >= self.config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size}); "
                f"encode text with the run's own tokenizer"
            )


def _init_weights(module: nn.Module) -> None:
    # N(0, 0.02) for every matrix and table, as GPT-2 and the issue ask.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def sample_next(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None = None) -> Tensor:
    """Pick one token per row of ``logits`` [B, V]; returns int64 [B, 1].

    ``temperature`` 0 is greedy (argmax). Any positive temperature samples from
    softmax(logits / temperature), however small: the row's maximum is taken
    off before dividing, so every scaled logit is <= 0 and the largest is 0,
    where dividing raw logits by 1e-38 overflows float32 to inf and softmax to
    NaN; and the division is in float64, where every positive Python float is
    still positive (5e-324 is 0 in float32). As the temperature goes to 0 the
    draw becomes the argmax.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Next-token loss in nats: logits [B, T, V], targets [B, T] -> scalar (or [B, T])."""
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction=reduction)
    return loss if reduction != "none" else loss.view(targets.shape)


__all__ = ["Decoder", "DecoderConfig", "DecoderFieldError", "KVCache", "LayerCache", "cross_entropy", "sample_next"]

