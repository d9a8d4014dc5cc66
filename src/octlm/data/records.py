"""Corpus files that hold records: JSON Lines, JSON arrays, Parquet and CSV, plain or compressed.

A record is one document, for the train/validation split and for the
``<|endoftext|>`` marker, exactly as a plain text file is one document. The
format is read from the file name: ``.jsonl``/``.ndjson``, ``.json`` (an array
of objects), ``.parquet``, ``.csv``; anything else is plain text, as before.
A compression suffix outside it (``.gz``, ``.xz``, ``.bz2``, ``.zst``) is
undone while reading, so ``train.jsonl.zst`` and ``book.txt.gz`` both work.

Each format is read by the library made for it: :mod:`json` and :mod:`csv`
from the standard library, ``pyarrow`` for Parquet (the ``parquet`` extra),
:mod:`gzip`, :mod:`lzma`, :mod:`bz2` and ``zstandard`` for compression. JSON
Lines, CSV and Parquet stream record by record (Parquet in row batches); a
``.json`` array is parsed whole, so large corpora belong in JSON Lines.

A record that cannot give text (a line that is not JSON, a missing field, a
field that is not a string, a file without the column) is an error naming the
file, the line or row and the fix, or, with ``--skip-bad-records``, counted
(:class:`BadRecords`) in ``manifest.json`` and the report; never dropped silently.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from octlm.errors import DataError

#: Record formats by the suffix under any compression suffix; every other file is plain text.
RECORD_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
#: Compression suffixes and the codec that undoes each.
COMPRESSIONS = {".gz": "gzip", ".xz": "xz", ".bz2": "bz2", ".zst": "zstd"}
#: Rows per Parquet batch: bounded memory whatever the file's row groups hold.
PARQUET_BATCH_ROWS = 4096
#: Messages of the first bad records kept for the manifest and the report (the count is exact).
BAD_EXAMPLES = 5
#: The largest CSV field, in characters: the csv module's default (131,072) is below one long document.
CSV_FIELD_LIMIT = 2**31 - 1


def file_format(path: str | Path) -> tuple[str, str | None]:
    """``(format, compression)`` of a corpus file by its name, e.g. ``("jsonl", "zstd")`` for ``a.jsonl.zst``.

    ``format`` is ``"text"`` for every name without a record suffix.
    """
    suffixes = [s.lower() for s in Path(path).suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression is not None:
        suffixes = suffixes[:-1]
    return (RECORD_FORMATS.get(suffixes[-1], "text") if suffixes else "text"), compression


@contextmanager
def open_decompressed(source: Path | BinaryIO, compression: str | None) -> Iterator[BinaryIO]:
    """The bytes of a file (a path, or a binary stream) as a binary stream, decompressed as it is read (constant
    memory).

    Raises:
        DataError: when ``zstandard`` is missing for a ``.zst`` file.
    """
    raw = source.open("rb") if isinstance(source, Path) else source
    if compression is None:
        opened = raw
    elif compression == "gzip":
        opened = gzip.GzipFile(fileobj=raw, mode="rb")
    elif compression == "xz":
        opened = lzma.LZMAFile(raw, "rb")
    elif compression == "bz2":
        opened = bz2.BZ2File(raw, "rb")
    else:
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise DataError(
                f"{source}: reading .zst files needs the zstandard package; pip install zstandard"
            ) from None
        opened = zstandard.ZstdDecompressor().stream_reader(raw)
    with raw, opened as stream:
        yield stream


def decompress(data: bytes, compression: str, shown: str) -> bytes:
    """A compressed file's bytes, decompressed (a plain text file is one document, read whole as before).

    Raises:
        DataError: naming the file when the data is not valid for its compression suffix.
    """
    try:
        with open_decompressed(io.BytesIO(data), compression) as stream:
            return stream.read()
    except Exception as err:
        if not _compression_error(err):
            raise
        raise DataError(
            f"{shown}: not valid {compression} data ({err}); rename the file if it is not compressed, or fetch it again"
        ) from None


@dataclass
class BadRecords:
    """Records that gave no text, when ``--skip-bad-records`` lets reading go on: a count and the first messages."""

    skip: bool = False
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def bad(self, message: str) -> None:
        """Count one bad record, or raise when skipping is off.

        Raises:
            DataError: ``message`` plus the ``--skip-bad-records`` alternative, when skipping is off.
        """
        if not self.skip:
            raise DataError(f"{message}, or pass --skip-bad-records to skip such records (manifest.json counts them)")
        self.count += 1
        if len(self.examples) < BAD_EXAMPLES:
            self.examples.append(message)


def _type_name(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _field_text(value, field_name: str, where: str, bad: BadRecords) -> str | None:
    """The text of one record's field, or ``None`` after counting it as bad."""
    if isinstance(value, dict):
        if field_name not in value:
            fields = ", ".join(list(value)[:8]) or "no fields at all"
            bad.bad(
                f"{where}: no field '{field_name}' (its fields: {fields}); name the text field with --text-field NAME"
            )
            return None
        value = value[field_name]
        if isinstance(value, str):
            return value
        bad.bad(
            f"{where}: field '{field_name}' is {_type_name(value)}, not a string; fix the record or name another field "
            "with --text-field NAME"
        )
        return None
    bad.bad(
        f"{where}: the record is {_type_name(value)}, not an object with a '{field_name}' field; give one JSON object "
        "per record"
    )
    return None


def _jsonl_records(stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords) -> Iterator[str]:
    text = io.TextIOWrapper(
        stream, encoding="utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    )
    line_no = 0
    try:
        for line_no, line in enumerate(text, 1):
            if not line.strip():
                continue  # a blank line holds no record (a trailing newline, a separator)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                bad.bad(
                    f"{shown}: line {line_no} is not JSON ({err.msg} at column {err.colno}); fix or remove that line"
                )
                continue
            if (value := _field_text(record, field_name, f"{shown}: line {line_no}", bad)) is not None:
                yield value
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: line {line_no + 1} is not valid {encoding} ({err.reason}); "
            f"JSON Lines are UTF-8, or give the file's --encoding"
        ) from None


def _json_records(stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords) -> Iterator[str]:
    try:
        records = json.loads(
            stream.read().decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
        )
    except json.JSONDecodeError as err:
        raise DataError(
            f"{shown}: not JSON ({err.msg} at line {err.lineno}, column {err.colno}); fix the file, "
            f"or give one JSON object per line in a .jsonl file"
        ) from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: not valid {encoding} at byte offset {err.start}; JSON is UTF-8, or give the file's --encoding"
        ) from None
    if not isinstance(records, list):
        raise DataError(
            f"{shown}: the JSON is {_type_name(records)}, not an array of records; give an array of objects with "
            f"a '{field_name}' field (or JSON Lines in a .jsonl file), or leave the file out of --text"
        )
    for index, record in enumerate(records):
        if (value := _field_text(record, field_name, f"{shown}: element {index}", bad)) is not None:
            yield value


def _csv_records(stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords) -> Iterator[str]:
    # A document easily passes the csv module's default field limit; the limit is process-wide, so it only grows.
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    text = io.TextIOWrapper(
        stream,
        encoding="utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding,
        newline="",
    )
    reader = csv.reader(text)
    try:
        header = next(reader, None)
        if header is None or field_name not in header:
            columns = ", ".join(header or []) or "an empty header"
            raise DataError(
                f"{shown}: no column '{field_name}' in the header row (its columns: {columns}); "
                f"name the text column with --text-field NAME"
            )
        column = header.index(field_name)
        for row in reader:
            if not row:
                continue  # a blank line holds no record
            if column >= len(row):
                bad.bad(
                    f"{shown}: line {reader.line_num} has {len(row)} fields, no '{field_name}' (column {column + 1}); "
                    "fix that row"
                )
                continue
            yield row[column]
    except csv.Error as err:
        raise DataError(f"{shown}: line {reader.line_num} is not valid CSV ({err}); fix that line") from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: after line {reader.line_num}, not valid {encoding} ({err.reason}); give the file's --encoding"
        ) from None


def _parquet_records(path: Path, shown: str, field_name: str, bad: BadRecords) -> Iterator[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{shown}: reading Parquet needs pyarrow; pip install 'octlm[parquet]'") from None
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"{shown}: not a Parquet file ({err}); fetch it again, or rename it if it is not Parquet"
        ) from None
    schema = parquet.schema_arrow
    if field_name not in schema.names:
        raise DataError(
            f"{shown}: no column '{field_name}' (its columns: {', '.join(schema.names[:12])}); "
            f"name the text column with --text-field NAME"
        )
    kind = schema.field(field_name).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise DataError(
            f"{shown}: column '{field_name}' holds {kind}, not strings; name the text column with --text-field NAME"
        )
    row = 0
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[field_name]):
        for value in batch.column(0).to_pylist():
            if value is None:
                bad.bad(
                    f"{shown}: row {row + 1} has a null '{field_name}'; fill it or drop that row"
                )  # counted from 1, as lines are
            else:
                yield value
            row += 1


def iter_records(
    path: Path, shown: str, fmt: str, compression: str | None, field_name: str, encoding: str, bad: BadRecords
) -> Iterator[str]:
    """The text of each record of one file, in file order; bad records counted in ``bad`` (or raised).

    Args:
        fmt: ``"jsonl"``, ``"json"``, ``"csv"`` or ``"parquet"`` (:func:`file_format`).
        field_name: the field (JSON) or column (CSV, Parquet) that holds the text, ``--text-field``.
        encoding: the text encoding of JSON and CSV files (``--encoding``); Parquet strings are UTF-8.

    Raises:
        DataError: for a file whose shape is wrong as a whole (no such column,
            JSON that is not an array, a compressed Parquet file, pyarrow missing),
            or a bad record while ``bad.skip`` is off; each names the file, the
            line, row or element, and the fix.
    """
    if fmt == "parquet":
        if compression is not None:
            raise DataError(
                f"{shown}: Parquet compresses inside the file; give the .parquet file without the outer {compression} "
                "compression"
            )
        yield from _parquet_records(path, shown, field_name, bad)
        return
    readers = {"jsonl": _jsonl_records, "json": _json_records, "csv": _csv_records}
    try:
        with open_decompressed(path, compression) as stream:
            yield from readers[fmt](stream, shown, field_name, encoding, bad)
    except Exception as err:
        if compression is None or not _compression_error(err):
            raise
        raise DataError(
            f"{shown}: not valid {compression} data ({err}); rename the file if it is not compressed, or fetch it again"
        ) from None


def _compression_error(err: Exception) -> bool:
    # gzip, bz2 and zstandard report damaged data as OSError subclasses or their own types, lzma as LZMAError.
    return isinstance(err, (OSError, EOFError, lzma.LZMAError)) or type(err).__name__ == "ZstdError"


def record_file_entry(path: Path, shown: str, records: int, bad_records: int) -> dict:
    """The manifest entry of a record file once read: path, bytes on disk, sha256 (of those bytes), format, compression,
    records, bad records."""
    import hashlib

    fmt, compression = file_format(path)
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    entry = {"path": shown, "bytes": path.stat().st_size, "sha256": digest, "format": fmt, "records": records}
    if compression is not None:
        entry["compression"] = compression
    if bad_records:
        entry["bad_records"] = bad_records
    return entry


__all__ = [
    "BadRecords",
    "COMPRESSIONS",
    "RECORD_FORMATS",
    "file_format",
    "iter_records",
    "decompress",
    "open_decompressed",
    "record_file_entry",
]
