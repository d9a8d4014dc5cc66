"""Token streams on disk and the packed blocks cut from them.

A stream is ``doc0 <eot> doc1 <eot> ...`` (:func:`encode_stream`), stored as
raw little-endian ids read back as a numpy memmap (:func:`write_tokens`,
:func:`open_tokens`). Training reads it as blocks of ``context_length + 1``
tokens (inputs and shifted targets): evaluation in order
(:func:`block_starts`), training in a seeded order that depends on the step
alone (:class:`BlockSampler`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from octlm.errors import DataError
from octlm.fileio import atomic_write, umask


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in 16 bits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def encode_stream(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Encode documents into one stream ``doc0 <eot> doc1 <eot> ...``, ids [N] in the token dtype."""
    dtype = token_dtype(tokenizer.vocab_size)
    pieces = []
    eot = np.array([tokenizer.eot_id], dtype=dtype)
    # In pieces, so one huge document (or line) needs no more memory than a piece.
    for ids in tokenizer.encode_arrays([t for t in texts if t], dtype):
        pieces.append(ids)
        pieces.append(eot)
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)


def write_tokens(path: Path, ids: np.ndarray) -> dict:
    """Store a token stream as raw little-endian ids (a numpy memmap file), atomically.

    Returns the manifest entry: file name, dtype, count and sha256.
    """
    data = np.ascontiguousarray(ids, dtype=ids.dtype.newbyteorder("<")).tobytes()
    atomic_write(path, data)
    return {
        "file": path.name,
        "dtype": ids.dtype.name,
        "count": int(ids.size),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


class TokenWriter:
    """A token stream written piece by piece, as :func:`write_tokens` writes it whole: the same bytes and manifest
    entry.

    The pieces go to a hidden temporary file beside ``path`` that :meth:`close`
    renames into place, so an interrupted write never leaves a partial token
    file under the real name; :meth:`abort` removes it. Memory stays that of one piece.
    """

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype = Path(path), np.dtype(dtype)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self.handle = os.fdopen(fd, "wb")
        self.digest, self.count = hashlib.sha256(), 0

    def write(self, ids: np.ndarray) -> None:
        """Append ids [n] (any integer dtype; stored in the stream's dtype, little-endian)."""
        data = np.ascontiguousarray(ids, dtype=self.dtype.newbyteorder("<")).tobytes()
        self.handle.write(data)
        self.digest.update(data)
        self.count += int(ids.size)

    def close(self) -> dict:
        """Flush, sync and rename into place; returns the manifest entry (file name, dtype, count, sha256)."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.chmod(self.tmp, 0o666 & ~umask())  # mkstemp makes it private; give it the mode open() would
        os.replace(self.tmp, self.path)
        return {
            "file": self.path.name,
            "dtype": self.dtype.name,
            "count": self.count,
            "sha256": self.digest.hexdigest(),
        }

    def abort(self) -> None:
        """Close and remove the temporary file (after an error or Ctrl-C)."""
        self.handle.close()
        Path(self.tmp).unlink(missing_ok=True)


def encode_into(tokenizer, texts: Iterable[str], writer: TokenWriter, group_chars: int = 1 << 22) -> None:
    """:func:`encode_stream` of ``texts`` written through ``writer`` group by group: the same ids, memory of one group.

    Documents are gathered into groups of about ``group_chars`` characters and
    each group encoded in parallel (:meth:`~octlm.data.tokenizer.Tokenizer.encode_arrays`).
    """
    eot = np.array([tokenizer.eot_id], dtype=writer.dtype)
    group: list[str] = []
    size = 0

    def flush() -> None:
        pieces = [part for ids in tokenizer.encode_arrays(group, writer.dtype) for part in (ids, eot)]
        writer.write(np.concatenate(pieces))
        group.clear()

    for text in texts:
        if not text:
            continue
        group.append(text)
        size += len(text)
        if size >= group_chars:
            flush()
            size = 0
    if group:
        flush()


def open_tokens(path: Path, dtype: str, count: int | None = None) -> np.ndarray:
    """Open a token file written by :func:`write_tokens` as a read-only memmap [N].

    Args:
        count: the number of tokens the manifest recorded, when known.

    Raises:
        DataError: naming the file when its size is not a whole number of
            tokens, or it holds a different number of tokens than ``count``
            (truncated or replaced).
    """
    dtype = np.dtype(dtype).newbyteorder("<")
    size = Path(path).stat().st_size
    if size % dtype.itemsize:
        raise DataError(
            f"{path}: {size} bytes is not a whole number of {dtype.itemsize}-byte tokens; "
            "the file is damaged (train again)"
        )
    if count is not None and size // dtype.itemsize != count:
        raise DataError(
            f"{path}: holds {size // dtype.itemsize} tokens, manifest.json says {count}; the file is truncated or "
            "replaced (train again)"
        )
    if size == 0:
        return np.zeros(0, dtype=dtype)  # mmap cannot map an empty file
    return np.memmap(path, dtype=dtype, mode="r")


def count_blocks(n_tokens: int, context_length: int, offset: int = 0) -> int:
    """Full blocks of ``context_length + 1`` tokens, stride ``context_length``, starting at ``offset``."""
    return max(0, (n_tokens - 1 - offset) // context_length)


def block_starts(n_tokens: int, context_length: int) -> np.ndarray:
    """Starts of the non-overlapping validation blocks: 0, T, 2T, ... (int64 [n_blocks]).

    Each block holds ``T + 1`` tokens; consecutive blocks share one token, so
    every token after the first is a target exactly once, up to a tail of
    fewer than ``T`` tokens that fills no block.
    """
    return np.arange(count_blocks(n_tokens, context_length), dtype=np.int64) * context_length


def gather_blocks(tokens: np.ndarray, starts: np.ndarray, context_length: int) -> np.ndarray:
    """Blocks [len(starts), T + 1] as int64."""
    index = starts[:, None] + np.arange(context_length + 1)[None, :]
    return np.asarray(tokens[index], dtype=np.int64)


class BlockSampler:
    """Training batches of packed blocks, a pure function of ``(seed, step)``.

    Each epoch picks a random phase in ``[0, T)``, cuts the stream into the
    full blocks that fit after it (stride ``T``, ``T + 1`` tokens each) and
    visits them in a random order; epochs follow each other. Step ``s`` takes
    items ``s*G .. (s+1)*G - 1`` of that endless sequence, ``G`` being the
    global batch (``batch_size * world_size``), and rank ``r`` keeps its
    ``batch_size`` share. Because the batch depends on the step alone, a
    resumed run sees exactly the blocks an uninterrupted one would.

    Raises:
        DataError: when the stream holds fewer than ``T + 1`` tokens.
    """

    def __init__(
        self, n_tokens: int, context_length: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1
    ):
        if n_tokens < 2 * context_length:
            # The phase can reach T - 1, and a full block must still fit after it.
            raise DataError(
                f"training text holds {n_tokens} tokens but blocks of context_length={context_length} need at "
                f"least {2 * context_length}; give more text or a smaller --context-length"
            )
        self.n_tokens, self.T, self.batch_size = n_tokens, context_length, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._epoch_end: list[int] = []  # cumulative item counts
        self._cache: dict[int, np.ndarray] = {}

    def _epoch(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            rng = np.random.default_rng([self.seed, epoch])
            phase = int(rng.integers(self.T))
            order = rng.permutation(count_blocks(self.n_tokens, self.T, phase))
            if len(self._cache) > 2:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = phase + order * self.T
        return self._cache[epoch]

    def _locate(self, item: int) -> tuple[int, int]:
        while not self._epoch_end or self._epoch_end[-1] <= item:
            epoch = len(self._epoch_end)
            rng = np.random.default_rng([self.seed, epoch])
            size = count_blocks(self.n_tokens, self.T, int(rng.integers(self.T)))
            self._epoch_end.append((self._epoch_end[-1] if self._epoch_end else 0) + size)
        epoch = int(np.searchsorted(self._epoch_end, item, side="right"))
        first = self._epoch_end[epoch - 1] if epoch else 0
        return epoch, item - first

    def starts(self, step: int) -> np.ndarray:
        """Start offsets (tokens) of this rank's blocks at ``step``, int64 [batch_size]."""
        first = (step * self.world_size + self.rank) * self.batch_size
        out = np.empty(self.batch_size, dtype=np.int64)
        for i in range(self.batch_size):
            epoch, index = self._locate(first + i)
            out[i] = self._epoch(epoch)[index]
        return out

    def epoch_of(self, step: int) -> float:
        """Fractional epochs completed before ``step``."""
        item = step * self.world_size * self.batch_size
        epoch, index = self._locate(item)
        size = self._epoch_end[epoch] - (self._epoch_end[epoch - 1] if epoch else 0)
        return epoch + index / size


__all__ = [
    "BlockSampler",
    "TokenWriter",
    "block_starts",
    "encode_into",
    "count_blocks",
    "encode_stream",
    "gather_blocks",
    "open_tokens",
    "token_dtype",
    "write_tokens",
]
