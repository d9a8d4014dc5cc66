"""What a token's row passes through before the position scheme: an optional norm, then an optional scale.

Both are per token, so they change nothing about cached decoding. Sources: BLOOM normalises the token rows with a
LayerNorm before its first block (``word_embeddings_layernorm``; Le Scao et al. 2022, "What Language Model to Train if
You Have One Million GPU Hours?", §3: embedding norm); nGPT keeps every embedding on the unit sphere (Loshchilov et
al. 2024, arXiv 2410.01131); Gemma multiplies the token rows by ``sqrt(d_model)`` (Gemma Team 2024, §2, the
"normalizer" of its reference code).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.block_recipes import BLOCKS, norm

#: Either option's "nothing done", a word here, not the NoPE scheme.
PLAIN = "none"
#: ``--embedding-norm`` choices.
EMBEDDING_NORMS = (PLAIN, "norm", "l2")
#: ``--embedding-scale`` choices.
EMBEDDING_SCALES = (PLAIN, "sqrt-d")
NORM_HELP = (
    "what each token's row passes through before the position scheme: none; norm (the block's own norm with a "
    "learned gain, as BLOOM's embedding LayerNorm); l2 (each row to unit length, as nGPT)"
)
SCALE_HELP = "multiply each token's row, after --embedding-norm, by: none (1) or sqrt-d (sqrt(d_model), as Gemma)"
SMEAR_HELP = (
    "add each token's predecessor to its row through a learned gate, before the position scheme (modded-nanogpt's "
    "and nanochat's smear; exact under the key/value cache)"
)
SKIPS_HELP = (
    "add the embedding layer's output back before every block, each layer mixing its input and the embedding with "
    "two learned scalars (1 and 0 at the start; the speed runs' x0 skips)"
)


class TokenVectors(nn.Module):
    """Token rows [B, T, C] -> [B, T, C]: ``embedding_norm`` (``norm``: the block's own norm, LayerNorm for ``gpt2``,
    RMSNorm for ``llama``, with a learned gain; ``l2``: each row divided by its L2 norm, no parameters), then
    ``embedding_scale`` (``sqrt-d``: times ``sqrt(d_model)``). Both ``none``: the rows as they are, no parameters."""

    def __init__(self, config) -> None:
        super().__init__()
        self.kind = config.embedding_norm
        self.norm = norm(BLOCKS[config.block].norm, config.d_model) if self.kind == "norm" else None
        self.scale = math.sqrt(config.d_model) if config.embedding_scale == "sqrt-d" else None

    def forward(self, x: Tensor) -> Tensor:
        if self.norm is not None:
            x = self.norm(x)
        elif self.kind == "l2":
            x = F.normalize(x, dim=-1)
        return x if self.scale is None else x * self.scale


class EmbeddingSkips(nn.Module):
    """The first layer's output added back before every block (``--x0-skips``): block ``i`` reads
    ``lambdas[i] * x + mus[i] * x0`` [B, T, C], ``x0`` the embedding layer's output, ``x`` the stream so far.

    Two learned scalars per layer, starting at 1 and 0 (the plain decoder), one-dimensional so AdamW leaves them
    undecayed. The value-residual and U-net skips of the small-scale speed runs (modded-nanogpt's "x0" lambdas,
    nanochat's ``x0`` mixing) are of this kind; per token, so cached decoding stays exact.
    """

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.lambdas = nn.Parameter(torch.ones(n_layers))
        self.mus = nn.Parameter(torch.zeros(n_layers))

    def forward(self, x: Tensor, x0: Tensor, layer: int) -> Tensor:
        return self.lambdas[layer] * x + self.mus[layer] * x0


#: The smear gate reads this many of the current row's first channels (at most ``d_model``).
SMEAR_WIDTH = 24


class SmearGate(nn.Module):
    """The previous token's row added to each row through a learned gate (``--smear-gate``), [B, T, C] -> [B, T, C]:
    ``x_t + strength * sigmoid(w . x_t[:k] + b) * x_{t-1}``, ``k`` = min(:data:`SMEAR_WIDTH`, C).

    Word order without a position scheme: a row now carries a gated copy of its predecessor. ``strength`` starts at
    0 (the plain decoder). From modded-nanogpt's smear module (2025-09-18 record) and nanochat's ``smear``; the
    gate reads the current row only, so the previous row is all a pass needs of the past: the first row of a cached
    pass takes the cache's last row (``KVCache.last_token_row``), the first of a pass from nothing takes zeros.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.width = min(SMEAR_WIDTH, d_model)
        self.gate = nn.Linear(self.width, 1)
        self.strength = nn.Parameter(torch.zeros(1))
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)

    def forward(self, x: Tensor, before: Tensor | None) -> Tensor:
        before = x.new_zeros(x.shape[0], 1, x.shape[2]) if before is None else before
        previous = torch.cat((before, x[:, :-1]), dim=1)
        return x + self.strength * torch.sigmoid(self.gate(x[..., : self.width])) * previous


def token_vectors_problem(config, scheme) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for a choice outside the menu (Python callers; the command line's argparse checks
    its own), or a token scale the config's ``scheme`` (its class) already applies (the sinusoidal table's
    sqrt(d_model), Vaswani et al. 2017 §3.4); ``None`` when the config's token rows can be made."""
    for name, menu in (("embedding_norm", EMBEDDING_NORMS), ("embedding_scale", EMBEDDING_SCALES)):
        if getattr(config, name) not in menu:
            return name, f"={getattr(config, name)!r}: choose one of {', '.join(menu)}"
    if config.smear_gate and config.document_mask:
        return "smear_gate", (
            "=True with document_mask: the first token of each packed document would take in the last token of the "
            "one before it; drop --smear-gate or --document-mask"
        )
    if config.embedding_scale != PLAIN and scheme.scales_token_rows:
        return "embedding_scale", (
            f"={config.embedding_scale!r} with position={config.position!r}, which already multiplies the token "
            "rows by sqrt(d_model) before adding its table; drop --embedding-scale"
        )
    return None


__all__ = [
    "EMBEDDING_NORMS",
    "EMBEDDING_SCALES",
    "EmbeddingSkips",
    "SMEAR_HELP",
    "SmearGate",
    "NORM_HELP",
    "PLAIN",
    "SCALE_HELP",
    "TokenVectors",
    "token_vectors_problem",
]
