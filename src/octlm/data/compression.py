"""Undoing a corpus file's compression (``.gz``, ``.xz``, ``.bz2``, ``.zst``) while it is read, as the codec's own tool
does.

gzip and bz2 come from the standard library, which reads every member of a
file and refuses one cut short. xz and zstd are read here, frame by frame
(:class:`_Frames`), because the libraries' own readers each miss something
``xz -dc`` and ``zstd -dc`` do: :mod:`lzma` refuses the zero bytes of stream
padding the xz format allows after a stream, and ``zstandard``'s readers stop
after the first frame and, at a file cut short, return the blocks that were
complete as if the file ended there (the first 60% of a download trained
silently on 131,072 of its 250,000 bytes).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from octlm.errors import DataError

#: Compression suffixes and the codec that undoes each.
COMPRESSIONS = {".gz": "gzip", ".xz": "xz", ".bz2": "bz2", ".zst": "zstd"}
#: Compressed bytes fed to a decoder at a time. A decoder returns all the output of its input, and zstd turns 4 bytes
#: into up to 128 KiB (an RLE block), so this bounds one read's output (32 MiB at worst, about 4 KiB for text).
FEED_BYTES = 1024
#: xz stream padding is zero bytes in multiples of four (the .xz format, section 2.2).
XZ_PADDING_UNIT = 4


class CutShort(EOFError):
    """The file ends inside a compressed frame or stream: it is cut short (a download stopped early)."""


class _Frames(io.RawIOBase):
    """The decompressed bytes of a file of frames (zstd) or streams (xz) one after another, each undone by a fresh
    decoder, as ``zstd -dc`` and ``xz -dc`` read them.

    Raises (while reading):
        CutShort: when the file ends inside a frame, or inside stream padding that is not whole.
        lzma.LZMAError, zstandard.ZstdError: for data that is not valid for the codec.
    """

    def __init__(self, raw: BinaryIO, new_decoder: Callable[[], object], padding: bool) -> None:
        super().__init__()
        self._raw, self._new_decoder, self._padding = raw, new_decoder, padding
        self._decoder = None  # the decoder of the frame being read; None between frames
        self._unfed = b""  # compressed bytes read past the end of the last frame
        self._zeros = 0  # stream padding met since the last stream ended
        self._ended_one = False  # padding may follow a stream, never open the file
        self._out, self._at = memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at >= len(self._out):
            if not self._decode_more():
                return 0
        size = min(len(buffer), len(self._out) - self._at)
        buffer[:size] = self._out[self._at : self._at + size]
        self._at += size
        return size

    def _decode_more(self) -> bool:
        """Feed the next compressed bytes to a decoder; False at the end of the file."""
        data, self._unfed = self._unfed or self._raw.read(FEED_BYTES), b""
        if not data:
            if self._decoder is not None:
                raise CutShort("the file ends inside a compressed frame, so it is cut short")
            if self._zeros % XZ_PADDING_UNIT:
                raise CutShort(f"the file ends in {self._zeros} zero bytes of stream padding, not a multiple of 4")
            return False
        if self._decoder is None:
            if self._padding and self._ended_one:
                data = self._skip_padding(data)
                if not data:
                    return True
            self._decoder = self._new_decoder()
        self._out, self._at = memoryview(self._decoder.decompress(data)), 0
        if self._decoder.eof:
            self._unfed, self._decoder, self._ended_one = self._decoder.unused_data, None, True
        return True

    def _skip_padding(self, data: bytes) -> bytes:
        rest = data.lstrip(b"\0")
        self._zeros += len(data) - len(rest)
        if rest and self._zeros % XZ_PADDING_UNIT:
            raise lzma.LZMAError(f"{self._zeros} zero bytes of stream padding, not a multiple of 4")
        if rest:
            self._zeros = 0
        return rest


def _zstd_decoder() -> Callable[[], object] | None:
    try:
        import zstandard
    except ImportError:
        return None
    return lambda: zstandard.ZstdDecompressor().decompressobj()


@contextmanager
def open_decompressed(source: Path | BinaryIO, compression: str | None) -> Iterator[BinaryIO]:
    """The bytes of a file (a path, or a binary stream) as a binary stream, decompressed as it is read (memory bounded
    by :data:`FEED_BYTES`'s output, whatever the file's size).

    Raises:
        DataError: when ``zstandard`` is missing for a ``.zst`` file.
        CutShort, OSError, EOFError, lzma.LZMAError, zstandard.ZstdError: while reading, for damaged data
            (:func:`compression_error` tells them).
    """
    raw = source.open("rb") if isinstance(source, Path) else source
    if compression is None:
        opened = raw
    elif compression == "gzip":
        opened = gzip.GzipFile(fileobj=raw, mode="rb")
    elif compression == "bz2":
        opened = bz2.BZ2File(raw, "rb")
    elif compression == "xz":
        opened = io.BufferedReader(_Frames(raw, lzma.LZMADecompressor, padding=True))
    else:
        if (decoder := _zstd_decoder()) is None:
            raw.close()
            raise DataError(f"{source}: reading .zst files needs the zstandard package; pip install zstandard")
        opened = io.BufferedReader(_Frames(raw, decoder, padding=False))
    with raw, opened as stream:
        yield stream


def decompress(data: bytes, compression: str, shown: str) -> bytes:
    """A compressed file's bytes, decompressed (a plain text file is one document, read whole as before).

    Raises:
        DataError: naming the file when the data is not valid for its compression suffix, or is cut short.
    """
    try:
        with open_decompressed(io.BytesIO(data), compression) as stream:
            return stream.read()
    except Exception as err:
        if not compression_error(err):
            raise
        raise damaged(shown, compression, err) from None


def damaged(shown: str, compression: str, err: Exception) -> DataError:
    """The one-line error for a file whose compressed data is damaged or cut short."""
    return DataError(
        f"{shown}: not valid {compression} data ({err}); rename the file if it is not compressed, or fetch it again"
    )


def compression_error(err: Exception) -> bool:
    """Whether ``err``, raised while reading through :func:`open_decompressed`, says the compressed data is damaged."""
    # gzip, bz2 and zstandard report damaged data as OSError subclasses or their own types, lzma as LZMAError.
    return isinstance(err, (OSError, EOFError, lzma.LZMAError)) or type(err).__name__ == "ZstdError"


__all__ = ["COMPRESSIONS", "CutShort", "compression_error", "damaged", "decompress", "open_decompressed"]
