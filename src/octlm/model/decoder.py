"""The decoder: token table, position scheme, pre-LayerNorm blocks, a head tied to the table (or untied).

Its shape is a :class:`~octlm.model.config.DecoderConfig`, its blocks are in
:mod:`octlm.model.blocks`. The first layer (``_embed``) is the part octlm
exists to study; position schemes live in :mod:`octlm.model.positions`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model import positions
from octlm.model.attention_recipes import ATTENTION_SCALES, PassPlan, plan_pass
from octlm.model.block_recipes import BLOCKS, norm
from octlm.model.blocks import Block, LayerPass
from octlm.model.config import DecoderConfig
from octlm.model.kvcache import KVCache, LayerCache
from octlm.model.layered_positions import build_positions
from octlm.model.sampling import sample_next
from octlm.model.streaming import stream_logits
from octlm.model.token_vectors import EmbeddingSkips, SmearGate, TokenVectors
from octlm.model.value_embeddings import BigramHash, ValueEmbedding, value_layers


class Decoder(nn.Module):
    """A GPT-style decoder whose output head is tied to its token table (unless ``config.untied_head``).

    Attributes:
        token_embedding: ``nn.Embedding(vocab_size, d_model)``; token id ``i``
            becomes row ``E[i]``.
        positions: the position scheme (:mod:`octlm.model.positions`).
        position_embedding: the scheme's ``nn.Embedding`` when positions are
            a learned table, else ``None``.
        lm_head: ``nn.Linear(d_model, vocab_size, bias=False)`` whose weight
            *is* ``token_embedding.weight`` (one Parameter, stored once), or,
            with ``config.untied_head``, a Parameter of its own (Press & Wolf
            2017 tie them; transformers' ``tie_word_embeddings``).

    ``model(token_ids)`` maps int64 ids [B, T] to logits [B, T, vocab_size].
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.token_vectors = TokenVectors(config)
        self.x0_skips = EmbeddingSkips(config.n_layers) if config.x0_skips else None
        self.smear = SmearGate(config.d_model) if config.smear_gate else None
        self.bigram = BigramHash(config.bigram_rows, config.d_model) if config.bigram_rows else None
        self.value_embeddings = (
            nn.ModuleDict(
                {
                    str(i): ValueEmbedding(config.vocab_size, config.d_model, config.n_heads)
                    for i in value_layers(config.n_layers)
                }
            )
            if config.value_embeddings
            else None
        )
        self.positions = build_positions(config)
        self.dropout = nn.Dropout(config.dropout)
        specs = config.layers or (None,) * config.n_layers
        self.blocks = nn.ModuleList(Block(config, spec) for spec in specs)
        self.ln_final = norm(BLOCKS[config.block].norm, config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(_init_weights)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the output head use the token table's Parameter (again, after loading); an untied head keeps its
        own."""
        if not self.config.untied_head:
            self.lm_head.weight = self.token_embedding.weight

    @property
    def position_embedding(self) -> nn.Embedding | None:
        table = getattr(self.positions, "table", None)
        return table if isinstance(table, nn.Embedding) else None

    @property
    def max_length(self) -> int | None:
        """Longest sequence (tokens) the position scheme can address, or ``None``."""
        return self.positions.max_length

    def extra_tables(self) -> list[nn.Parameter]:
        """The token tables beyond the first: the value tables and the hashed bigram table (none by default)."""
        tables = [] if self.bigram is None else [self.bigram.table]
        return tables + ([] if self.value_embeddings is None else [ve.table for ve in self.value_embeddings.values()])

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters (a tied head counted once, an untied one with the rest); optionally without the token
        and position tables."""
        params = {id(p): p for p in self.parameters()}
        total = sum(p.numel() for p in params.values())
        if exclude_embeddings:
            total -= self.token_embedding.weight.numel()
            total -= sum(table.numel() for table in self.extra_tables())
            if self.position_embedding is not None:
                total -= self.position_embedding.weight.numel()
        return total

    def _embed(self, token_ids: Tensor, offset: int = 0, cache: KVCache | None = None) -> Tensor:
        """The first layer: token rows (through ``--embedding-norm``, ``--embedding-scale`` and ``--smear-gate``,
        which takes the cache's last row) plus the scheme's position signal, [B, T] -> [B, T, C]."""
        rows = self.token_vectors(self.token_embedding(token_ids))
        if self.bigram is not None:
            rows = rows + self.bigram(token_ids, None if cache is None else cache.last_token_id)
            if cache is not None:
                cache.last_token_id = token_ids[:, -1:]
        if self.smear is not None:
            rows, plain = self.smear(rows, None if cache is None else cache.last_token_row), rows
            if cache is not None:
                cache.last_token_row = plain[:, -1:].detach()
        return self.positions.embed(rows, offset)

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
        scaling = (
            None
            if method is None
            else positions.RopeScaling(method, factor, original_length or self.config.context_length)
        )
        if method is not None and method not in self.positions.scalings():
            takers = " or ".join(map(repr, positions.schemes_taking(method)))
            raise ValueError(
                f"RoPE scaling ({method}) needs position={takers}; this model uses position={self.config.position!r}"
            )
        if self.positions.scalings():
            self.positions.set_rope_scaling(scaling)

    def set_attention_scale(self, name: str) -> None:
        """Scale the query-key logits with the length (``"log"``) or not (``"none"``) from now on:
        ``config.attention_scale``.

        Within ``context_length`` the two are the same model, so a model
        trained either way can be scored either way past it (the length study's ``+logn`` rows).

        Raises:
            ValueError: for a name not in :data:`~octlm.model.attention_recipes.ATTENTION_SCALES`.
        """
        if name not in ATTENTION_SCALES:
            raise ValueError(f"attention_scale must be one of {', '.join(ATTENTION_SCALES)}, got {name!r}")
        self.config = dataclasses.replace(self.config, attention_scale=name)

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
                short for ``offset + T``; for a first pass on a
                :class:`~octlm.model.streaming.StreamingCache` the model cannot
                stream with (:func:`~octlm.model.streaming.check_streaming`).

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
            raise ValueError(
                f"offset={offset} but the cache holds positions 0..{cache.length - 1}; pass offset=cache.length"
            )
        if cache is not None and cache.repositions and cache.length == 0:  # a stream starts: can this model stream?
            from octlm.model.streaming import check_streaming

            check_streaming(self, cache.sinks, cache.window)
        self.positions.start_pass(token_ids.shape[1], offset, cached=cache is not None)
        try:
            # attention_scale, document_mask: None when both are off
            plan = plan_pass(self.config, token_ids, offset, cache)
            if plan is not None and plan.positions is not None:
                self.positions.place_documents(plan.positions)
            x0 = x = self.dropout(self._embed(token_ids, offset, cache))
            for i, block in enumerate(self.blocks):
                if self.x0_skips is not None:
                    x = self.x0_skips(x, x0, i)
                step = self._layer_pass(i, offset, None if cache is None else cache.layers[i], plan)
                if self.value_embeddings is not None and str(i) in self.value_embeddings:
                    step = dataclasses.replace(
                        step, values=functools.partial(self.value_embeddings[str(i)], token_ids=token_ids)
                    )
                x = block(x, step)
        finally:
            self.positions.end_pass()
        return x

    def _layer_pass(self, i: int, offset: int, cache: LayerCache | None, plan: PassPlan | None) -> LayerPass:
        """What block ``i`` reads of the pass: its layer's position scheme, and whether the pass's query scale applies
        to it (``attention_scale`` for every layer, a layout's ``logn`` for its own)."""
        specs = self.config.layers
        if not specs:
            return LayerPass(self.positions, i, offset, cache, plan)
        scaled = self.config.attention_scale == "log" or specs[i].log_scale
        return LayerPass(self.positions.for_layer(i), i, offset, cache, plan, scaled)

    @torch.no_grad()
    def next_token_logits(self, token_ids: Tensor, cache: KVCache | None = None) -> Tensor:
        """float32 logits [B, vocab_size] for the token after ``token_ids`` [B, N].

        Without ``cache`` this is a full forward pass over the sequence (or,
        for a learned position table, over its last ``context_length`` tokens).
        With a cache that holds the first ``cache.length < N`` tokens, only
        the new ones are computed and added to it. Three cases empty the cache
        and prefill again, because every cached entry would change: a
        learned-position sequence longer than its table (the cropped window
        moves every position), RoPE under dynamic NTK past the training
        length (the frequencies change with the length), and a model trained
        at randomized positions, shorter than their range (each length has
        its own draw); the scheme's ``length_state`` tells. They stay exact
        but are no faster than recomputing. A :class:`~octlm.model.streaming.StreamingCache`
        is never refilled: it keeps its sinks and window (StreamingLLM).

        Raises:
            ValueError: when the cache holds as many tokens as ``token_ids``
                or more, besides the checks of ``forward``.
        """
        limit, n = self.max_length, token_ids.shape[1]
        if cache is not None and cache.repositions:  # a stream's cache: positions within it, nothing to refill
            if cache.length >= n:
                raise ValueError(
                    f"the cache already holds {cache.length} tokens; give the sequence with its new token(s)"
                )
            *_, logits = stream_logits(self, token_ids[:, cache.length :], cache, cache.window)
            return logits[:, -1, :].float()
        if cache is None:
            window = token_ids if limit is None else token_ids[:, -limit:]
            return self(window)[:, -1, :].float()
        cropped = limit is not None and n > limit
        window = token_ids[:, -limit:] if cropped else token_ids
        state = self.positions.length_state(window.shape[1])
        if cropped or state != cache.state:
            cache.reset()
        elif cache.length >= n:
            raise ValueError(
                f"the cache already holds {cache.length} tokens; give the sequence with its new token(s) ({n} given)"
            )
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
        cache: KVCache | None = None,
    ) -> Tensor:
        """Continue ``prompt_ids`` [B, T0] by ``max_new_tokens`` tokens; returns [B, T0 + max_new_tokens].

        ``temperature`` 0 picks the most likely token (greedy); otherwise
        logits are divided by it and sampled (with ``generator``), keeping
        only the ``top_k`` most likely tokens when given (exactly ``top_k``:
        ties at the k-th go to the lowest ids, :func:`~octlm.model.sampling.top_k_mask`).

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

        ``cache``, when given, is the (empty) cache to decode with instead of
        a new :class:`KVCache`: a :class:`~octlm.model.streaming.StreamingCache`
        keeps only its sinks and recent window (Xiao et al. 2023).

        Raises:
            ValueError: for a negative ``max_new_tokens`` or ``temperature``,
                or ``top_k`` < 1, besides the input checks of ``forward``.
            TypeError: when ``use_cache`` is not a bool (a generator passed
                by position: pass ``generator=`` by keyword).
        """
        if not isinstance(use_cache, bool):
            raise TypeError(
                f"use_cache must be a bool, got {type(use_cache).__name__}; pass a generator as generator=..."
            )
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
        if cache is None and use_cache:
            cache = KVCache(len(self.blocks), capacity if self.max_length is None else min(capacity, self.max_length))
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


def cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Next-token loss in nats: logits [B, T, V], targets [B, T] -> scalar (or [B, T])."""
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction=reduction)
    return loss if reduction != "none" else loss.view(targets.shape)


__all__ = ["Decoder", "cross_entropy"]
