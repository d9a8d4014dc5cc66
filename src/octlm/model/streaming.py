"""Streaming attention with sinks: a key/value cache that keeps the first ``S`` tokens and the last ``W``.

StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with
Attention Sinks", §3) decodes a stream of any length with a cache of fixed
size: each new token attends to the first ``S`` tokens of the stream (the
attention sinks, where a trained model parks the attention it does not need)
and to the last ``W`` tokens, itself included. Without sinks (``S = 0``) this
is window attention, which they find breaks once the first tokens are
evicted. Positions are given within the cache, not in the text (their §3.2):
a cache holding tokens ``[0, 1, 2, 3, 6, 7, 8]`` and decoding token 9 places
them at ``0 .. 7``. So the cache holds keys before any rotation, and each
pass rotates (RoPE) or biases (ALiBi) them at their positions within it;
only a scheme that acts inside attention alone can do that
(``evicts_cache`` in its :class:`~octlm.model.positions.facts.SchemeFacts`).

The decoder goes this way when its cache is a :class:`StreamingCache`
(``CausalSelfAttention.forward`` hands the pass to :func:`streamed_attention`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.kvcache import KVCache

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.positions import PositionScheme


class SinkWindowCache:
    """One layer's keys and values of a stream: the first ``sinks`` tokens and the last ``window - 1``.

    ``keys`` and ``values`` [B, H, held, D] are stored as attention made them
    before the scheme's rotation; ``held`` never exceeds ``sinks + window - 1``
    between passes (a pass adds its own tokens, so the next token sees
    ``sinks + window`` keys at most). ``length`` counts every token seen.
    """

    repositions = True

    def __init__(self, sinks: int, window: int) -> None:
        self.sinks, self.window = sinks, window
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0
        #: the Canon layers' last inputs, as :attr:`octlm.model.kvcache.LayerCache.canon_state` (a stream keeps them)
        self.canon_state: dict[str, Tensor] = {}
        #: the last key's channels ``key_offset`` moves on, as :attr:`octlm.model.kvcache.LayerCache.last_key`
        self.last_key: Tensor | None = None

    @property
    def held(self) -> int:
        """Keys kept between passes (tokens), at most ``sinks + window - 1``."""
        return 0 if self.keys is None else self.keys.shape[-2]

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k``, ``v`` [B, H, T, D] (unrotated); return the kept keys and values followed by these, [B, H, held +
        T, D].

        Afterwards the cache keeps the first ``sinks`` and the last
        ``window - 1`` of them: the sinks stay at the front, since nothing is
        evicted before the cache holds ``sinks + window - 1`` keys.
        """
        keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        limit = self.sinks + self.window - 1
        if keys.shape[-2] <= limit:
            self.keys, self.values = keys, values
        else:
            recent = keys.shape[-2] - (self.window - 1)
            # Copies, so the longer tensors of this pass are freed once it ends.
            self.keys = torch.cat((keys[..., : self.sinks, :], keys[..., recent:, :]), dim=-2).clone()
            self.values = torch.cat((values[..., : self.sinks, :], values[..., recent:, :]), dim=-2).clone()
        self.length += k.shape[-2]
        return keys, values


class StreamingCache(KVCache):
    """A :class:`~octlm.model.kvcache.KVCache` of :class:`SinkWindowCache` layers: StreamingLLM's cache.

    ``Decoder.forward(ids, offset=cache.length, cache=cache)`` continues the
    stream; a pass of more than one token must fit :meth:`pieces` (what
    :func:`stream_logits` feeds), so that every query sees exactly the
    sinks and its own last ``window`` tokens. The decoder's first pass on
    it checks that the model can stream with it (:func:`check_streaming`).

    Raises:
        ValueError: for a ``window`` that is no integer >= 1 or ``sinks`` no integer >= 0.
    """

    repositions = True

    def __init__(self, n_layers: int, sinks: int, window: int) -> None:
        for name, value, least in (("window", window, 1), ("sinks", sinks, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"StreamingCache {name}={value!r}: give an integer >= {least} (tokens)")
        super().__init__(n_layers)
        self.sinks, self.window = sinks, window
        self.layers = [SinkWindowCache(sinks, window) for _ in range(n_layers)]

    def reset(self) -> None:
        """Forget the stream."""
        super().reset()
        self.layers = [SinkWindowCache(self.sinks, self.window) for _ in self.layers]

    def pieces(self, n: int, chunk: int) -> list[int]:
        """Lengths (tokens) to feed ``n`` new tokens in: first what fills the cache, then at most ``chunk`` at a time.

        A pass either fits the cache whole (every query sees every earlier
        key) or starts on a full cache (:func:`streamed_attention`).
        """
        held = self.layers[0].held
        first = min(n, self.sinks + self.window - held) if held < self.sinks + self.window - 1 else 0
        rest = n - first
        return ([first] if first else []) + [min(chunk, rest - i) for i in range(0, rest, chunk)]


def streamed_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme,
    cache: SinkWindowCache,
    layer: int,
    handed: dict[str, object] | None = None,
) -> Tensor:
    """Attention of ``T`` new queries over the sinks and their own last ``window`` keys: [B, H, T, D] each -> [B, H, T,
    D].

    ``q``, ``k``, ``v`` come unrotated. When the kept keys and the new ones
    fit in ``sinks + window``, the pass is ordinary causal attention over
    them, placed at ``0 .. held + T - 1``. On a full cache, each query gets
    its own view, the sinks and its last ``window`` keys at ``0 .. sinks +
    window - 1`` with itself last, exactly what a one-token step on that
    cache sees; the views go through attention as a batch of ``B * T``.

    Raises:
        ValueError: for a pass that neither fits nor starts on a full cache (feed :meth:`StreamingCache.pieces`).
    """
    held, (B, H, T, D) = cache.held, q.shape
    sinks, window = cache.sinks, cache.window
    keys, values = cache.extend(k, v)
    if held + T <= sinks + window:
        return _attend(q, keys, values, scheme, layer, handed or {})
    if held != sinks + window - 1:
        raise ValueError(
            f"a pass of {T} tokens on a cache holding {held} of {sinks + window - 1}: feed StreamingCache.pieces"
        )

    def views(x: Tensor) -> Tensor:  # [B, H, held + T, D] -> [B * T, H, sinks + window, D]
        recent = x[..., sinks:, :].unfold(-2, window, 1).permute(0, 2, 1, 4, 3)  # [B, T, H, window, D]
        first = x[..., :sinks, :].unsqueeze(1).expand(B, T, H, sinks, D)
        return torch.cat((first, recent), dim=-2).reshape(B * T, H, sinks + window, D)

    y = _attend(q.transpose(1, 2).reshape(B * T, H, 1, D), views(keys), views(values), scheme, layer, handed or {})
    return y.reshape(B, T, H, D).transpose(1, 2)


def _attend(q: Tensor, k: Tensor, v: Tensor, scheme: PositionScheme, layer: int, handed: dict[str, object]) -> Tensor:
    """Causal attention of queries [B, H, T, D] on keys and values [B, H, K, D], the keys at ``0 .. K - 1`` and the
    queries the last ``T`` of them; the scheme rotates or biases them there."""
    T, K = q.shape[-2], k.shape[-2]
    q, k = scheme.rotate(q, k, K - T)
    if scheme.attends:  # the scheme forms the weights itself (stick-breaking): over the kept keys, nearest first
        return scheme.attend(q, k, v, _causal(T, K, q.device), layer, **handed)[0]
    bias = scheme.attention_bias(q, k, K - T, layer, **handed)
    causal = None if T == 1 else _causal(T, K, q.device)
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    mask = bias.to(q.dtype)
    if causal is not None:
        mask = mask.masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask if mask.dim() == 4 else mask.unsqueeze(0))


def _causal(T: int, K: int, device: torch.device) -> Tensor:
    """bool [T, K]: query ``i`` (at ``K - T + i``) sees keys ``0 .. K - T + i``."""
    return torch.ones(T, K, dtype=torch.bool, device=device).tril(K - T)


def stream_logits(model: nn.Module, ids: Tensor, cache: StreamingCache, chunk: int) -> Iterator[Tensor]:
    """Feed the stream ``ids`` [B, N] to ``model`` after what ``cache`` holds; yield each piece's logits [B, n, vocab].

    ``model`` is a :class:`~octlm.model.decoder.Decoder`; it is typed as a
    module because the decoder imports this one.

    ``chunk`` (tokens, >= 1) bounds a piece once the cache is full; any
    ``chunk`` gives the logits of feeding one token at a time (to float
    rounding): each query sees the same keys at the same positions.
    """
    start = 0
    for n in cache.pieces(ids.shape[1], chunk):
        yield model(ids[:, start : start + n], offset=cache.length, cache=cache)
        start += n


def streaming_refusal(model: nn.Module) -> str | None:
    """Why ``model`` cannot decode with a streaming cache at all, whatever its size, or ``None`` when it can.

    A scheme whose cache cannot evict (``evicts_cache`` of its facts, :func:`~octlm.model.positions.facts.facts_of`:
    its ``eviction_refusal``), or a model whose positions come
    from elsewhere than the cache (randomized positions, a document mask, the log attention scale, a layout's window
    layers), or whose learned sinks join a softmax the streaming pass does not form.
    """
    from octlm.model.attention_recipes import NO_SCALE
    from octlm.model.positions.facts import facts_of

    config, facts = model.config, facts_of(model.positions)
    if not facts.evicts_cache:
        return f"{facts.label}'s cache cannot evict: {facts.eviction_refusal}"
    layers = config.layers
    return (
        "it was trained at randomized positions" * (config.randomize_positions > 1)
        or "its document mask places tokens in their documents" * bool(config.document_mask)
        or "its log attention scale reads text positions" * (config.attention_scale != NO_SCALE)
        or "its layout scales queries by text position" * any(spec.log_scale for spec in layers)
        or "its layout's window layers keep their own cache" * any(spec.window for spec in layers)
        or "its learned sinks (--attention-sinks) join a softmax the streaming pass does not form"
        * bool(config.attention_sinks)
        or None
    )


def check_streaming(model: nn.Module, sinks: int, window: int) -> None:
    """Refuse a streaming cache the model cannot decode with, in one line naming the fix.

    Raises:
        ValueError: for a model that cannot stream (:func:`streaming_refusal`, said first: no size would do), a
            ``window`` that is no integer >= 1, ``sinks`` that are no integer >= 0, or ``sinks + window`` more than
            the context trained on (the cache's positions run to ``sinks + window - 1``).
    """
    from octlm.model.positions import evicting_schemes

    config = model.config
    if refusal := streaming_refusal(model):
        raise ValueError(
            f"this run cannot stream with a cache window: {refusal}; decode it with the ordinary cache (no cache "
            f"window), or stream a run of {', '.join(evicting_schemes())}"
        )
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"the cache window is {window!r} tokens; give an integer from 1 to {config.context_length}")
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"the cache sinks are {sinks!r}; give an integer number of tokens, 0 or more")
    if sinks + window > config.context_length:
        # The cache places its tokens at 0 .. sinks + window - 1: past T they sit at positions never trained on.
        raise ValueError(
            f"the cache holds {sinks} sinks + a window of {window} = {sinks + window} tokens at positions within it, "
            f"past the {config.context_length} this model was trained on; give sinks + window <= "
            f"{config.context_length}, e.g. a window of {max(1, config.context_length - sinks)}"
        )


__all__ = [
    "SinkWindowCache",
    "StreamingCache",
    "check_streaming",
    "stream_logits",
    "streamed_attention",
    "streaming_refusal",
]
