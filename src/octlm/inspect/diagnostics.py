"""The nearest-neighbour diagnostic of the seed.

Cosine similarity between rows of the token table (and of the position
vectors) says which tokens the model treats alike. On an untrained model the
neighbours are random, which proves only that the code path works; after
training, tokens used in similar contexts move together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from octlm.data.token_display import visible_token
from octlm.data.tokenizer import Tokenizer
from octlm.model import Decoder


@dataclass
class Neighbour:
    """One neighbour: its row index, cosine similarity in [-1, 1] and a label."""

    index: int
    score: float
    label: str


def cosine_neighbours(
    table: Tensor, index: int, k: int = 5, allowed: np.ndarray | None = None
) -> list[tuple[int, float]]:
    """The ``k`` rows of ``table`` [N, C] most cosine-similar to row ``index``, itself excluded.

    ``allowed`` (bool [N]) limits the candidates, e.g. to tokens seen in
    training. Returns ``(row, similarity)`` pairs, most similar first.

    Raises:
        ValueError: when ``index`` is outside ``[0, N)``.
    """
    n = table.shape[0]
    if not 0 <= index < n:
        raise ValueError(f"row {index} is outside the table's {n} rows [0, {n})")
    sims = F.cosine_similarity(table[index].unsqueeze(0).float(), table.float(), dim=-1)
    candidates = n
    if allowed is not None:
        mask = torch.from_numpy(np.asarray(allowed, dtype=bool)).to(sims.device)
        sims[~mask] = float("-inf")
        candidates = int(mask.sum()) + (0 if bool(mask[index]) else 1)
    sims[index] = float("-inf")
    k = min(k, candidates - 1)
    values, rows = sims.topk(k)
    return [(int(r), float(v)) for r, v in zip(rows, values, strict=True)]


def cosine_similarity_matrix(vectors: Tensor) -> Tensor:
    """Cosine similarity of every pair of rows of ``vectors`` [N, C] -> [N, N] float32."""
    v = vectors.float()
    return F.cosine_similarity(v.unsqueeze(1), v.unsqueeze(0), dim=-1)


def position_vectors(model: Decoder, length: int | None = None) -> Tensor | None:
    """The vectors a scheme adds for positions 0..length-1, [length, d_model], or ``None``.

    Learned tables give their rows; sinusoidal gives the formula's rows; RoPE
    and other schemes that add nothing to the embedding give ``None``.
    """
    length = length or model.config.context_length
    if model.position_embedding is not None:
        return model.position_embedding.weight[:length].detach()
    zeros = torch.zeros(1, length, model.config.d_model, device=model.token_embedding.weight.device)
    added = model.positions.embed(zeros, 0)[0]
    return None if torch.count_nonzero(added) == 0 else added.detach()


def nearest_tokens(
    model: Decoder, token_id: int, k: int = 5, token_str=None, seen: np.ndarray | None = None
) -> list[Neighbour]:
    """Nearest tokens to ``token_id`` in the token table, labelled by ``token_str(id)`` when given.

    ``seen`` (bool [vocab]) keeps only tokens that occurred in training: the
    rows of the others never received a gradient from the loss of their
    own occurrence and sit near one another by weight decay alone.
    """
    table = model.token_embedding.weight.detach()
    label = token_str or (lambda i: f"#{i}")
    return [Neighbour(i, s, label(i)) for i, s in cosine_neighbours(table, token_id, k, seen)]


def nearest_positions(model: Decoder, position: int = 0, k: int = 5) -> list[Neighbour] | None:
    """Nearest positions to ``position`` among the model's position vectors, or ``None`` if it has none."""
    vectors = position_vectors(model)
    if vectors is None:
        return None
    return [Neighbour(i, s, f"pos {i}") for i, s in cosine_neighbours(vectors, position, k)]


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """How often each id occurs in a token stream [N], as int64 [vocab_size] (read in pieces: a memmap may be large)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), 1 << 24):
        counts += np.bincount(np.asarray(tokens[start : start + (1 << 24)]), minlength=vocab_size)[:vocab_size]
    return counts


def frequent_tokens(counts: np.ndarray, tokenizer: Tokenizer, k: int) -> list[int]:
    """The ``k`` most frequent word-like tokens (three or more letters, a leading space allowed) of ``counts`` [vocab].

    Words are what a person can judge neighbours of; when the text has too
    few, the most frequent ordinary tokens fill up (never ``<|endoftext|>``).
    """
    order = [int(i) for i in np.argsort(-counts, kind="stable") if counts[i] > 0 and i != tokenizer.eot_id]
    words = [i for i in order if _word_like(tokenizer.token_str(i))]
    return (words + [i for i in order if i not in set(words)])[:k]


def _word_like(text: str) -> bool:
    word = text[1:] if text.startswith(" ") else text
    return len(word) >= 3 and word.isalpha()


def embedding_diagnostic(
    model: Decoder,
    tokenizer: Tokenizer | None,
    extra_tokens: list[int] = (),
    k: int = 5,
    *,
    queries: list[int] | None = None,
    seen: np.ndarray | None = None,
) -> dict:
    """Nearest tokens to ``queries`` (default: token 0 and ``extra_tokens``), and nearest positions to position 0.

    ``seen`` (bool [vocab]) keeps neighbours to tokens that occurred in training.
    Returns ``{"tokens": [{"token", "text", "neighbours": [...]}], "positions": [...] or None}``
    with cosine similarities; ``positions`` is ``None`` for schemes that add
    no position vectors (RoPE).
    """
    label = tokenizer.token_str if tokenizer is not None else (lambda i: f"#{i}")
    tokens = []
    for token_id in queries if queries is not None else [0, *[t for t in extra_tokens if t != 0]]:
        neighbours = nearest_tokens(model, token_id, k, label, seen)
        tokens.append({"token": token_id, "text": label(token_id), "neighbours": [n.__dict__ for n in neighbours]})
    positions = nearest_positions(model, 0, k)
    return {"tokens": tokens, "positions": None if positions is None else [n.__dict__ for n in positions]}


def format_diagnostic(diagnostic: dict, position_scheme: str) -> str:
    """:func:`embedding_diagnostic`'s result as lines for people; ``position_scheme`` explains a missing position
    row."""
    lines = ["nearest tokens by cosine similarity:"]
    for entry in diagnostic["tokens"]:
        near = ", ".join(f"{visible_token(n['label'])} {n['score']:+.2f}" for n in entry["neighbours"])
        lines.append(f"  {visible_token(entry['text']):>15} (#{entry['token']}): {near}")
    if diagnostic["positions"] is None:
        lines.append(f"nearest positions: n/a ({position_scheme} adds no position vectors to the embedding)")
    elif not diagnostic["positions"]:
        lines.append("nearest positions: n/a (the model has one position)")
    else:
        near = ", ".join(f"{n['index']} {n['score']:+.2f}" for n in diagnostic["positions"])
        lines.append(f"nearest positions to position 0: {near}")
    return "\n".join(lines)


__all__ = [
    "Neighbour",
    "cosine_neighbours",
    "cosine_similarity_matrix",
    "embedding_diagnostic",
    "format_diagnostic",
    "frequent_tokens",
    "nearest_positions",
    "nearest_tokens",
    "position_vectors",
    "token_counts",
]
