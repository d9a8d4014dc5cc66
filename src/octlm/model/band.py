"""How large a window layer's attention scores are: the whole matrix, or blocks of queries against their band.

A window layer (a layout's ``/wN``) lets each query see its last ``window``
keys. Past :data:`BAND_CELLS` query-key cells it attends a block of
:func:`band_block` queries at a time against only the keys those queries'
windows reach (``CausalSelfAttention._band_attention`` in
:mod:`octlm.model.blocks`), so its scores grow with ``T * window``, not
``T**2``; :func:`window_score_cells` is what the memory check counts for it.
"""

from __future__ import annotations

#: Score cells (queries x keys) above which a window layer attends block by block: its whole score matrix (a float per
#: cell and head) would pass 4 MB per head, about 1,000 tokens, far past any window that fits it.
BAND_CELLS = 1024 * 1024


def band_block(window: int) -> int:
    """Queries per block of a window layer's blocked attention: at least 256, so a small window does not become
    thousands of small attention calls, and at least the window (tokens)."""
    return max(256, window)


def banded(q_len: int, k_len: int, window: int) -> bool:
    """Whether a window layer's pass of ``q_len`` queries over ``k_len`` keys (tokens) attends block by block."""
    return q_len * k_len > BAND_CELLS and k_len > window


def window_score_cells(length: int, window: int) -> int:
    """Query-key cells of a window layer's largest score matrix in one pass over ``length`` tokens: one block against
    its keys (``block * (block + window - 1)``) when the pass is blocked, else ``length**2``."""
    if not banded(length, length, window):
        return length**2
    block = min(length, band_block(window))
    return block * (block + window - 1)


__all__ = ["BAND_CELLS", "band_block", "banded", "window_score_cells"]
