"""The key/value cache of cached decoding: what each attention layer has seen so far.

:class:`octlm.model.decoder.Decoder` appends to it in ``forward(..., cache=...)``, and
``Decoder.generate`` uses it so each step computes one token instead of the
whole sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    """Keys and values one attention layer has seen, for cached decoding.

    Holds ``keys`` and ``values`` [B, H, capacity, head_dim] of which the
    first ``length`` rows along the third axis are filled; the buffers grow
    by doubling when a step needs more than ``capacity``. A sliding-window
    layer's cache holds only its last ``window - 1`` keys (``length`` still
    counts every position seen). Keys are stored
    after the scheme's rotation (RoPE), so a cached key is never rotated
    again. ``scheme_state`` holds what the position scheme keeps of earlier
    tokens beside the keys (FoX's log forget gates, one per key: ``per_key``),
    by a name of the scheme's (``PositionScheme.read_input``).
    """

    #: keys are cached after the scheme's rotation, at their positions in the text (a
    #: :class:`~octlm.model.streaming.SinkWindowCache` places them anew at each pass)
    repositions = False

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0
        self.scheme_state: dict[str, Tensor] = {}
        #: Names in ``scheme_state`` that hold one entry per cached key on their last axis, trimmed with the keys.
        self.per_key: set[str] = set()
        #: Per Canon point of the layer (``A`` .. ``D``), its last inputs [B, K - 1, width] (:mod:`octlm.model.canon`).
        self.canon_state: dict[str, Tensor] = {}
        #: the last key's channels that ``key_offset`` moves to the next position [B, H, 1, passed], or ``None``
        self.last_key: Tensor | None = None

    def keep_per_key(self, name: str, state: Tensor) -> None:
        """Keep ``state`` [..., keys of this pass] in ``scheme_state[name]``, one entry per key the pass attends to
        (the kept keys, then its own): :meth:`append` keeps only the entries of the keys it keeps."""
        self.scheme_state[name] = state
        self.per_key.add(name)

    def append(self, k: Tensor, v: Tensor, window: int | None = None) -> tuple[Tensor, Tensor]:
        """Add ``k``, ``v`` [B, H, T, D]; return all keys and values so far, [B, H, length, D] each.

        With ``window`` (a sliding-window layer, tokens) the pass gets the
        kept keys and its own, and only the last ``window - 1`` are kept for
        the next pass: the most the next token can see besides itself. So the
        layer never holds more than ``window - 1 + T`` keys, however long the
        sequence grows (Beltagy et al. 2020; Mistral's rolling buffer cache).
        """
        if window is not None:
            return self._append_window(k, v, window)
        end = self.length + k.shape[-2]
        if self.keys is None or end > self.keys.shape[-2]:
            size = max(end, self.capacity, 2 * (0 if self.keys is None else self.keys.shape[-2]))
            keys, values = k.new_empty(*k.shape[:-2], size, k.shape[-1]), v.new_empty(*v.shape[:-2], size, v.shape[-1])
            if self.keys is not None:
                keys[..., : self.length, :] = self.keys[..., : self.length, :]
                values[..., : self.length, :] = self.values[..., : self.length, :]
            self.keys, self.values = keys, values
        self.keys[..., self.length : end, :] = k
        self.values[..., self.length : end, :] = v
        self.length = end
        return self.keys[..., :end, :], self.values[..., :end, :]

    def _append_window(self, k: Tensor, v: Tensor, window: int) -> tuple[Tensor, Tensor]:
        keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        kept = min(window - 1, keys.shape[-2])
        # Copies, so the longer tensors of this pass are freed once it ends.
        self.keys = keys[..., keys.shape[-2] - kept :, :].clone()
        self.values = values[..., values.shape[-2] - kept :, :].clone()
        for name in self.per_key & self.scheme_state.keys():
            state = self.scheme_state[name]
            self.scheme_state[name] = state[..., state.shape[-1] - kept :].clone()
        self.length += k.shape[-2]
        return keys, values

    @property
    def held(self) -> int:
        """Keys held between passes (tokens): ``length``, or at most ``window - 1`` for a window layer."""
        return 0 if self.keys is None else min(self.length, self.keys.shape[-2])


class KVCache:
    """One :class:`LayerCache` per block: what a decoder has seen of the sequence so far.

    The cached tokens are always positions ``0 .. length - 1``; the next call
    of ``Decoder.forward(ids, offset=cache.length, cache=cache)`` continues
    them. ``capacity`` (tokens) pre-allocates the buffers when the final
    length is known.
    """

    #: see :attr:`LayerCache.repositions`
    repositions = False

    def __init__(self, n_layers: int, capacity: int = 0) -> None:
        self.capacity = capacity
        self.layers = [LayerCache(capacity) for _ in range(n_layers)]
        #: the position scheme's ``length_state`` the cached entries were computed under
        self.state: object = None
        #: with ``document_mask``: where each row's open document began (int64 [B], tokens), else ``None``
        self.document_start = None
        #: the last token row the first layer saw [B, 1, C] (the smear gate's predecessor for the next pass), or None
        self.last_token_row = None
        #: the last token id the decoder saw [B, 1] (the bigram table's previous token for the next pass), or None
        self.last_token_id = None

    @property
    def length(self) -> int:
        """Tokens (positions) cached."""
        return self.layers[0].length

    def reset(self) -> None:
        """Forget everything (to prefill a cropped window or new frequencies again)."""
        self.layers = [LayerCache(self.capacity) for _ in self.layers]
        self.state = None
        self.document_start = None
        self.last_token_row = None
        self.last_token_id = None


__all__ = ["KVCache", "LayerCache"]
