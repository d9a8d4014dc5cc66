"""The records of a Parquet file, read with ``pyarrow`` one row group and one batch at a time.

A text column may be stored plain or dictionary-encoded (what pandas writes
for a categorical column): both hold strings. Parquet does not check that a
string column's bytes are UTF-8, so each value is decoded here and one that
is not is a bad record naming its row. A row group that does not decode
(damaged pages; snappy, gzip and zstd pages each fail with their own error
type) is an error naming the file and the row group.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from octlm.data.bad_records import BadRecords, NotRecords, check_one_column
from octlm.errors import DataError

#: Rows per Parquet batch: bounded memory whatever the file's row groups hold.
PARQUET_BATCH_ROWS = 4096


def _holds_strings(pa, kind) -> bool:
    """Whether a column of Arrow type ``kind`` holds strings, plain or dictionary-encoded."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _open(path: Path, shown: str, field_name: str):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{shown}: reading Parquet needs pyarrow; pip install 'octlm[parquet]'") from None
    try:
        # A writer that stored page checksums has them checked; damage elsewhere shows as a decoding error.
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise DataError(
            f"{shown}: not a Parquet file ({err}); fetch it again, or rename it if it is not Parquet"
        ) from None
    schema = parquet.schema_arrow
    if field_name not in schema.names:
        raise NotRecords(
            shown,
            f"no column '{field_name}' (its columns: {', '.join(schema.names[:12])})",
            "name the text column with --text-field NAME",
        )
    check_one_column(shown, list(schema.names), field_name)
    kind = schema.field(field_name).type
    if not _holds_strings(pa, kind):
        raise NotRecords(
            shown, f"column '{field_name}' holds {kind}, not strings", "name the text column with --text-field NAME"
        )
    return pa, parquet


def _batches(pa, parquet, shown: str, field_name: str) -> Iterator[tuple[int, object]]:
    """``(first row, column)`` of each batch, counted from 0.

    Raises:
        DataError: naming the row group (and its rows) that does not decode.
    """
    first, groups = 0, parquet.num_row_groups
    for group in range(groups):
        rows = parquet.metadata.row_group(group).num_rows
        batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group], columns=[field_name])
        at = first
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as err:
                raise DataError(
                    f"{shown}: row group {group + 1} of {groups} (rows {first + 1}-{first + rows}) is damaged "
                    f"({err}); fetch or write the file again, or leave it out of --text"
                ) from None
            if batch is None:
                break
            yield at, batch.column(0)
            at += batch.num_rows
        first += rows


def _values(column) -> list:
    """A batch's values as Python strings (None for null); a value that is not UTF-8 becomes its
    :class:`UnicodeDecodeError`."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        pass  # rare: find which values, one by one
    values = []
    for index in range(len(column)):
        try:
            values.append(column[index].as_py())
        except UnicodeDecodeError as err:
            values.append(err)
    return values


def parquet_records(path: Path, shown: str, field_name: str, bad: BadRecords) -> Iterator[str]:
    """The text of each row of a Parquet file's column ``field_name``, in row order.

    Raises:
        NotRecords: when the file has no such column, or it holds no strings.
        DataError: when pyarrow is missing, the file is not Parquet, a row group
            is damaged, or a row is null or not UTF-8 while ``bad.skip`` is off
            (rows counted from 1, as lines are).
    """
    pa, parquet = _open(path, shown, field_name)
    for first, column in _batches(pa, parquet, shown, field_name):
        for row, value in enumerate(_values(column), first + 1):
            if value is None:
                bad.bad(f"{shown}: row {row} has a null '{field_name}'; fill it or drop that row")
            elif isinstance(value, UnicodeDecodeError):
                byte = value.object[value.start]
                bad.bad(
                    f"{shown}: row {row}: '{field_name}' holds bytes that are not UTF-8 (byte 0x{byte:02x} at offset "
                    f"{value.start}); write the column as UTF-8 text, or drop that row"
                )
            else:
                yield value


__all__ = ["PARQUET_BATCH_ROWS", "parquet_records"]
