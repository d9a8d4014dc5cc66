"""Corpus files that hold records: JSON Lines, JSON arrays, Parquet and CSV, plain or compressed.

A record is one document, for the train/validation split and for the
``<|endoftext|>`` marker, exactly as a plain text file is one document. The
format is read from the file name: ``.jsonl``/``.ndjson``, ``.json`` (an array
of objects), ``.parquet``, ``.csv``; anything else is plain text, as before.
A compression suffix outside it (``.gz``, ``.xz``, ``.bz2``, ``.zst``) is
undone while reading, so ``train.jsonl.zst`` and ``book.txt.gz`` both work.

Each format is read by the library made for it: :mod:`json` here, :mod:`csv`
(:mod:`octlm.data.csv_records`), ``pyarrow`` for Parquet (the ``parquet``
extra, :mod:`octlm.data.parquet_records`), and :mod:`gzip`, :mod:`lzma`,
:mod:`bz2` and ``zstandard`` for compression (:mod:`octlm.data.compression`).
JSON Lines, CSV and Parquet stream record by record (Parquet in row batches);
a ``.json`` array is parsed whole, so large corpora belong in JSON Lines.

A record that cannot give text (a line that is not JSON, a missing field, a
field that is not a string or holds a lone surrogate, Parquet bytes that are
not UTF-8) is an error naming the file, the line or row and the fix, or, with
``--skip-bad-records``, counted (:class:`BadRecords`) in ``manifest.json`` and
the report; never dropped silently. A file that is not records of the field at
all (:class:`NotRecords`: no such column, JSON that is no array) is an error
when named, and skipped and listed in ``manifest.json`` when met in a folder.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from octlm.data.bad_records import BadRecords, NotRecords
from octlm.data.compression import COMPRESSIONS, compression_error, damaged, decompress, open_decompressed
from octlm.data.csv_records import csv_records
from octlm.data.parquet_records import parquet_records
from octlm.errors import DataError

#: Record formats by the suffix under any compression suffix; every other file is plain text.
RECORD_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def file_format(path: str | Path) -> tuple[str, str | None]:
    """``(format, compression)`` of a corpus file by its name, e.g. ``("jsonl", "zstd")`` for ``a.jsonl.zst``.

    ``format`` is ``"text"`` for every name without a record suffix.
    """
    suffixes = [s.lower() for s in Path(path).suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression is not None:
        suffixes = suffixes[:-1]
    return (RECORD_FORMATS.get(suffixes[-1], "text") if suffixes else "text"), compression


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
            return _unicode_text(value, field_name, where, bad)
        bad.bad(
            f"{where}: field '{field_name}' is {_type_name(value)}, not a string; fix the record or name another field "
            "with --text-field NAME"
        )
        return None
    bad.bad(
        f"{where}: the record is {_type_name(value)}, not an object with a '{field_name}' field; "
        "give one JSON object per record"
    )
    return None


def _unicode_text(value: str, field_name: str, where: str, bad: BadRecords) -> str | None:
    """``value``, or ``None`` after counting it as bad when it holds a lone surrogate, which JSON can escape
    (``"\\ud800"``) but no Unicode text holds."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        bad.bad(
            f"{where}: field '{field_name}' holds a lone surrogate (\\u{ord(value[err.start]):04x}, character "
            f"{err.start + 1}), which is no Unicode text; write the character whole (a surrogate pair) or remove it"
        )
        return None
    return value


def _first_decides(record, field_name: str, shown: str, at: str) -> None:
    """Inside a folder the first record tells whether a file is records with the field at all.

    Raises:
        NotRecords: when the first record is no object, or lacks the field.
    """
    if not isinstance(record, dict):
        raise NotRecords(
            shown,
            f"{at} is {_type_name(record)}, not an object with a '{field_name}' field",
            "give one JSON object per record",
        )
    if field_name not in record:
        fields = ", ".join(list(record)[:8]) or "no fields at all"
        raise NotRecords(
            shown,
            f"{at} has no field '{field_name}' (its fields: {fields})",
            "name the text field with --text-field NAME",
        )


def _codec(encoding: str) -> str:
    # A byte-order mark before UTF-8 JSON or CSV is dropped, as it is before plain text.
    return "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding


def _json_error(err: json.JSONDecodeError, line: str = "") -> str:
    """Python's words for ``err`` and its place (``line`` is ``"line N, "`` for a whole-file document)."""
    # Some messages end in "at" ("Unterminated string starting at"), the place following them.
    return f"{err.msg.removesuffix(' at')} at {line}column {err.colno}"


def _cut_short(err: json.JSONDecodeError) -> str:
    """``"; ...looks cut short"`` when ``err`` is at the end of its document (a string that never closes runs to the
    end), else ``""``."""
    at_end = err.pos >= len(err.doc.rstrip()) or err.msg.startswith("Unterminated string")
    return "; the file ends mid-record, so it looks cut short (a copy or download that stopped?)" if at_end else ""


def _jsonl_records(
    stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords, in_folder: bool
) -> Iterator[str]:
    text = io.TextIOWrapper(stream, encoding=_codec(encoding))
    line_no, first = 0, in_folder
    try:
        for line_no, line in enumerate(text, 1):
            if not line.strip():
                continue  # a blank line holds no record (a trailing newline, a separator)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                # A last line without its newline, broken at its end, is where a copy or download stopped.
                cut = _cut_short(err) if not line.endswith("\n") else ""
                bad.bad(f"{shown}: line {line_no} is not JSON ({_json_error(err)}){cut}; fix or remove that line")
                continue
            if first:
                _first_decides(record, field_name, shown, f"line {line_no}")
                first = False
            if (value := _field_text(record, field_name, f"{shown}: line {line_no}", bad)) is not None:
                yield value
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: line {line_no + 1} is not valid {encoding} ({err.reason}); "
            f"JSON Lines are UTF-8, or give the file's --encoding"
        ) from None


def _json_records(
    stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords, in_folder: bool
) -> Iterator[str]:
    try:
        records = json.loads(stream.read().decode(_codec(encoding)))
    except json.JSONDecodeError as err:
        raise NotRecords(
            shown,
            f"not JSON ({_json_error(err, f'line {err.lineno}, ')}){_cut_short(err)}",
            "fix the file, or give one JSON object per line in a .jsonl file",
        ) from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: not valid {encoding} at byte offset {err.start}; JSON is UTF-8, or give the file's --encoding"
        ) from None
    if not isinstance(records, list):
        raise NotRecords(
            shown,
            f"the JSON is {_type_name(records)}, not an array of records",
            f"give an array of objects with a '{field_name}' field (or JSON Lines in a .jsonl file), or leave the "
            "file out of --text",
        )
    if in_folder and records:
        _first_decides(records[0], field_name, shown, "element 0")
    for index, record in enumerate(records):
        if (value := _field_text(record, field_name, f"{shown}: element {index}", bad)) is not None:
            yield value


def iter_records(
    path: Path,
    shown: str,
    fmt: str,
    compression: str | None,
    field_name: str,
    encoding: str,
    bad: BadRecords,
    in_folder: bool = False,
) -> Iterator[str]:
    """The text of each record of one file, in file order; bad records counted in ``bad`` (or raised).

    Args:
        fmt: ``"jsonl"``, ``"json"``, ``"csv"`` or ``"parquet"`` (:func:`file_format`).
        field_name: the field (JSON) or column (CSV, Parquet) that holds the text, ``--text-field``.
        encoding: the text encoding of JSON and CSV files (``--encoding``); Parquet strings are UTF-8.
        in_folder: the file was met while walking a folder, so a first JSON record that is no object with the field
            says the file is not records of it at all (:class:`NotRecords`), rather than one bad record.

    Raises:
        NotRecords: for a file that is not records of the field as a whole (no
            such column, JSON that is not JSON or not an array, and with
            ``in_folder`` a first record without the field), before any record.
        DataError: for a compressed Parquet file, pyarrow missing, damaged or
            cut-short data, or a bad record while ``bad.skip`` is off; each
            names the file, the line, row, row group or element, and the fix.
    """
    if fmt == "parquet":
        if compression is not None:
            raise DataError(
                f"{shown}: Parquet compresses inside the file; "
                f"give the .parquet file without the outer {compression} compression"
            )
        yield from parquet_records(path, shown, field_name, bad)
        return
    try:
        with open_decompressed(path, compression) as stream:
            if fmt == "csv":
                yield from csv_records(stream, shown, field_name, encoding, bad)
            else:
                reader = _jsonl_records if fmt == "jsonl" else _json_records
                yield from reader(stream, shown, field_name, encoding, bad, in_folder)
    except Exception as err:
        if compression is None or not compression_error(err):
            raise
        raise damaged(shown, compression, err) from None


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
    "NotRecords",
    "COMPRESSIONS",
    "RECORD_FORMATS",
    "file_format",
    "iter_records",
    "decompress",
    "open_decompressed",
    "record_file_entry",
]
