"""Records that give no text, and files that are not records of the asked field at all.

Shared by the readers of each format (:mod:`octlm.data.records`, :mod:`octlm.data.csv_records`,
:mod:`octlm.data.parquet_records`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from octlm.errors import DataError

#: Messages of the first bad records kept for the manifest and the report (the count is exact).
BAD_EXAMPLES = 5


class NotRecords(DataError):
    """A whole file that is not records holding the asked field: a CSV or Parquet file without the column, a Parquet
    column of no strings, a ``.json`` file that is not an array, or (inside a folder) a first record without the field.

    Named on the command line it is an error like any other; met while walking a folder it is skipped, and
    ``manifest.json`` lists it with :attr:`reason` (a folder of code holds ``package.json`` and ``results.csv``).
    """

    def __init__(self, shown: str, reason: str, fix: str) -> None:
        super().__init__(f"{shown}: {reason}; {fix}")
        self.reason = reason


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


def check_one_column(shown: str, names: list[str], field_name: str) -> None:
    """Refuse a file whose columns (``names``, in order) name ``field_name`` more than once: which one holds the text
    is not said (pyarrow raises ``KeyError`` for it, Python's csv module would take the first in silence).

    Raises:
        DataError: naming the file, the column and where it stands.
    """
    at = [str(i + 1) for i, name in enumerate(names) if name == field_name]
    if len(at) > 1:
        raise DataError(
            f"{shown}: {len(at)} columns are named '{field_name}' (columns {', '.join(at)}), so which holds the "
            f"text is unclear; rename all but one of them, or name another column with --text-field NAME"
        )


__all__ = ["BAD_EXAMPLES", "BadRecords", "NotRecords", "check_one_column"]
