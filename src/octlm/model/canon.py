"""Canon layers: a short causal depthwise convolution, with a residual, at four points of each block.

Allen-Zhu 2025 ("Physics of Language Models: Part 4.1, Architecture Design and the Magic of Canon Layers", arXiv
2512.17351) adds to a hidden sequence ``h`` [B, T, W] the weighted sum of each channel's last ``K`` values::

    h'_t = h_t + sum_{j=0}^{K-1} w_j * h_{t-j}        (per channel; K = 4; h_{t-j} = 0 before the sequence)

and places it at up to four points of a block (``DecoderConfig.canon``, any of the letters):

* ``A``: on the attention's input, after its norm (width C);
* ``B``: on the queries, keys and values, after their projection and before the position scheme (width 3C);
* ``C``: on the MLP's input, after its norm (width C);
* ``D``: inside the MLP, on its first projection before the nonlinearity (GPT-2's 4C; SwiGLU's gate and up
  projections side by side, 2 x 8C/3).

Each token then reads its three predecessors before attention does, so a model without any position scheme gets
the order of its neighbours from the convolution; the paper reports that Canon layers lift NoPE to about RoPE's
level. No bias, no activation, the residual kept (the paper's recommended setting); the kernel starts as PyTorch
starts a depthwise ``nn.Conv1d`` (uniform in ``±1/sqrt(K)``).

Exact under the key/value cache: a layer's cache keeps, per point, the last ``K - 1`` inputs it saw
(``LayerCache.canon_state``), so a decoding step convolves over the same values the full sequence would.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: The points of a block where a Canon layer can sit.
CANON_POINTS = "ABCD"
#: Tokens each Canon layer reads: the current one and ``CANON_KERNEL - 1`` before it.
CANON_KERNEL = 4
CANON_HELP = (
    "Canon layers (Allen-Zhu 2025): a causal depthwise convolution over each token and its 3 predecessors, with a "
    "residual, at any of the points A (attention input), B (queries, keys, values), C (MLP input), D (inside the "
    "MLP): e.g. A or ABCD; exact under the key/value cache"
)


class CanonConv(nn.Module):
    """``h + causal_depthwise_conv(h)`` over [B, T, width] -> [B, T, width], kernel :data:`CANON_KERNEL`.

    ``weight`` [width, 1, K]: ``weight[c, 0, K - 1 - j]`` multiplies channel ``c`` of the token ``j`` places back.
    ``point`` names the Canon layer's entry in a layer cache's ``canon_state``.
    """

    def __init__(self, width: int, point: str, kernel: int = CANON_KERNEL) -> None:
        super().__init__()
        self.point = point
        self.weight = nn.Parameter(torch.empty(width, 1, kernel))
        bound = 1.0 / math.sqrt(kernel)  # a depthwise Conv1d's fan-in is its kernel
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, h: Tensor, state: dict[str, Tensor] | None = None) -> Tensor:
        """[B, T, W] -> [B, T, W]. With ``state`` (a layer cache's ``canon_state``) the pass continues the inputs kept
        there and leaves its own last ``K - 1`` for the next; without, the sequence starts here (zeros before)."""
        B, _, W = h.shape
        held = self.weight.shape[-1] - 1
        before = None if state is None else state.get(self.point)
        if before is None:
            before = h.new_zeros(B, held, W)
        full = torch.cat((before.to(h.dtype), h), dim=1)  # [B, K - 1 + T, W]
        if state is not None:
            state[self.point] = full[:, full.shape[1] - held :].detach()
        # [B, K - 1 + T, W] read as [B, W, 1, K - 1 + T] is already a channels-last image, so a 2-D depthwise
        # convolution takes it as it lies: conv1d wanted [B, W, T] contiguous, and the copies there and back with
        # conv1d's backward took 2.4 times as long on CPU; a Canon-ABCD training step runs 1.3 times as fast
        # (bench/forward_ab.py --base-canon).
        image = full.unsqueeze(1).permute(0, 3, 1, 2)
        return h + F.conv2d(image, self.weight.unsqueeze(2).to(h.dtype), groups=W).permute(0, 2, 3, 1).squeeze(1)


def canon_at(config, point: str, width: int) -> CanonConv | None:
    """A Canon layer of ``width`` channels at ``point`` when ``config.canon`` names it, else ``None``."""
    return CanonConv(width, point) if point in config.canon else None


def canon_problem(config) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for a ``canon`` that names no points of :data:`CANON_POINTS` or one twice, or that
    would cross documents under ``document_mask``; ``None`` when it can be built."""
    points = config.canon
    if not isinstance(points, str) or any(p not in CANON_POINTS for p in points) or len(set(points)) != len(points):
        return "canon", f"={points!r}: give some of the letters {CANON_POINTS}, each once (e.g. A or ABCD), or none"
    if points and config.document_mask:
        return "canon", (
            f"={points!r} with document_mask: each document's first tokens would read the last tokens of the one "
            "before it; drop --canon or --document-mask"
        )
    return None


__all__ = ["CANON_HELP", "CANON_KERNEL", "CANON_POINTS", "CanonConv", "canon_at", "canon_problem"]
