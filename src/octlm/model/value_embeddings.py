"""Value embeddings and the hashed bigram table: token tables beyond the first layer's one.

**Value embeddings** (``--value-embeddings``): every other layer, the last included, gets a token table of its own
whose row for each token is added to that layer's values, per head through a learned gate::

    v_t,h <- v_t,h + g_t,h * E[x_t]_h,      g_t,h = 2 sigmoid(w_h . h_t[:k])

(``h_t`` the layer's input, ``k`` = min(32, C); ``w`` starts at 0, so every gate starts at 1). modded-nanogpt's
value-embedding record (2024-12-04) and nanochat's ``value_embeds`` add such tables; Zhou et al. 2024 ("Value Residual
Learning", arXiv 2410.17897) feed the first layer's values to later ones, of which this is the token-table form. Each
table holds ``vocab_size x d_model`` parameters. Per token, so cached decoding is exact.

**The hashed bigram table** (``--bigram-rows N``): a second table, indexed by a hash of the previous and the current
token, added to each token's row before the position scheme; it starts at zero (the plain decoder). The first token
of a sequence takes the table's last row. After modded-nanogpt's bigram embedding (2026) and Huang et al. 2025
("Over-Tokenized Transformer", arXiv 2501.16975: input tables of n-grams hashed into a fixed number of rows). A
cached pass needs the previous token only, which the cache keeps (``KVCache.last_token_id``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: The value gate reads this many of the layer input's first channels (at most ``d_model``).
GATE_WIDTH = 32
#: The multiplier of the previous token in the bigram hash (a prime well above any vocabulary).
BIGRAM_PRIME = 1_000_003
VALUE_HELP = (
    "every other layer (the last included) adds a token table of its own to its values through a learned gate per "
    "head (modded-nanogpt's and nanochat's value embeddings; vocab_size x d_model parameters per table)"
)
BIGRAM_HELP = (
    "rows of a hashed bigram table added to each token's row (previous and current token hashed into N rows; zero at "
    "the start; Huang et al. 2025, modded-nanogpt), 0 for none; e.g. 5 x --vocab-size"
)


def value_layers(n_layers: int) -> list[int]:
    """The layers (0-based) that get a value table: every other one, counted back from the last."""
    return sorted(range(n_layers - 1, -1, -2))


class ValueEmbedding(nn.Module):
    """A layer's value table: values [B, H, T, D], the layer's input [B, T, C] and the token ids [B, T] -> values
    [B, H, T, D] with each head's gated row of the table added."""

    def __init__(self, vocab_size: int, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab_size, d_model) * 0.02)  # the token table's N(0, 0.02)
        self.width = min(GATE_WIDTH, d_model)
        self.gate = nn.Parameter(torch.zeros(n_heads, self.width))

    def forward(self, v: Tensor, x: Tensor, token_ids: Tensor) -> Tensor:
        B, H, T, D = v.shape
        rows = F.embedding(token_ids, self.table).view(B, T, H, D).transpose(1, 2)
        gate = 2 * torch.sigmoid(x[..., : self.width] @ self.gate.T)  # [B, T, H]
        return v + gate.transpose(1, 2).unsqueeze(-1) * rows.to(v.dtype)


def bigram_index(token_ids: Tensor, before: Tensor | None, rows: int) -> Tensor:
    """The bigram table's row of each token, [B, T] int64: ``(previous * BIGRAM_PRIME + current) mod (rows - 1)``,
    and ``rows - 1`` for a token with no previous one (``before`` [B, 1], the cache's last token, else the sequence
    starts here)."""
    ids = token_ids.long()
    first = torch.full_like(ids[:, :1], -1) if before is None else before.long()
    previous = torch.cat((first, ids[:, :-1]), dim=1)
    hashed = (previous * BIGRAM_PRIME + ids) % (rows - 1)
    return torch.where(previous < 0, torch.full_like(ids, rows - 1), hashed)


class BigramHash(nn.Module):
    """The hashed bigram table: token ids [B, T] (and the cache's last id [B, 1], or ``None``) -> rows [B, T, C],
    zero at the start."""

    def __init__(self, rows: int, d_model: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(rows, d_model))

    def forward(self, token_ids: Tensor, before: Tensor | None) -> Tensor:
        return F.embedding(bigram_index(token_ids, before, self.table.shape[0]), self.table)


__all__ = [
    "BIGRAM_HELP",
    "BIGRAM_PRIME",
    "VALUE_HELP",
    "BigramHash",
    "ValueEmbedding",
    "bigram_index",
    "value_layers",
]
