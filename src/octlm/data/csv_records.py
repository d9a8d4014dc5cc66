"""The records of a CSV file: a header row, then one record per row, read with :mod:`csv` as the file streams.

Quotes are read strictly. A quoted field may hold commas and line breaks, so a
quote that opens and never closes takes every line after it into one field;
read leniently, as the csv module does by default, a 200-row file whose row 7
opened a quote gave 7 records and no word. Here that is an error naming the
line where the quote opened, as is a quote closed in the middle of a field
(``"a"b``), where the lenient reading also joins the lines in between.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import BinaryIO

from octlm.data.bad_records import BadRecords, NotRecords, check_one_column
from octlm.errors import DataError

#: The largest CSV field, in characters: the csv module's default (131,072) is below one long document.
CSV_FIELD_LIMIT = 2**31 - 1


def _quote_error(shown: str, err: csv.Error, start: int, line: int) -> DataError:
    """The error for a row that began on line ``start`` and failed on line ``line``."""
    if "unexpected end of data" in str(err):
        return DataError(
            f"{shown}: line {start}: a quoted field opens in this row and never closes (the file ends inside it, "
            f"{line - start} line(s) on, so every row after it would be one field); close the quote, or write a quote "
            'inside a quoted field as two ("")'
        )
    if line > start:
        return DataError(
            f"{shown}: line {line} is not valid CSV ({err}) in the row that began on line {start}: "
            "a quote opened there ran on to this line; close it where the field ends, "
            'or write a quote inside a quoted field as two ("")'
        )
    return DataError(f"{shown}: line {line} is not valid CSV ({err}); fix that line")


def csv_records(stream: BinaryIO, shown: str, field_name: str, encoding: str, bad: BadRecords) -> Iterator[str]:
    """The text in column ``field_name`` of each row, in file order (blank lines hold no record).

    Raises:
        NotRecords: when the header row has no column ``field_name``.
        DataError: for a quote that never closes or closes inside a field (the line where its row began named), a
            file that does not decode, or a short row while ``bad.skip`` is off.
    """
    # A document easily passes the csv module's default field limit; the limit is process-wide, so it only grows.
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    text = io.TextIOWrapper(
        stream,
        encoding="utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding,
        newline="",
    )
    reader = csv.reader(text, strict=True)
    start = 1
    try:
        header = next(reader, None)
        if header is None or field_name not in header:
            columns = ", ".join(header or []) or "an empty header"
            raise NotRecords(
                shown,
                f"no column '{field_name}' in the header row (its columns: {columns})",
                "name the text column with --text-field NAME",
            )
        check_one_column(shown, header, field_name)
        column = header.index(field_name)
        while True:
            start = reader.line_num + 1
            if (row := next(reader, None)) is None:
                return
            if not row:
                continue  # a blank line holds no record
            if column >= len(row):
                bad.bad(
                    f"{shown}: line {reader.line_num} has {len(row)} fields, "
                    f"no '{field_name}' (column {column + 1}); fix that row"
                )
                continue
            yield row[column]
    except csv.Error as err:
        raise _quote_error(shown, err, start, reader.line_num) from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{shown}: after line {reader.line_num}, not valid {encoding} ({err.reason}); give the file's --encoding"
        ) from None


__all__ = ["CSV_FIELD_LIMIT", "csv_records"]
