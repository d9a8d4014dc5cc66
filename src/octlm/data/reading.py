"""Reading a corpus document by document: :class:`CorpusReader`, and :func:`read_documents`, the whole corpus.

A plain text file is one document, read whole (as octlm always has); a record
file (:mod:`octlm.data.records`) gives one document per record, read as it
streams, so a corpus of records never has to fit in memory. Each file's
manifest entry, the repeats and the bad records are known once the documents
have all been read (:meth:`CorpusReader.info`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from octlm.data.corpora import BuiltinCorpus
from octlm.data.records import BadRecords, NotRecords, decompress, file_format, iter_records, record_file_entry
from octlm.data.text import (
    DataError,
    Document,
    FolderRule,
    _decode_candidate,
    _read_candidate,
    _unusable,
    corpus_candidates,
    default_corpus_root,
)


class CorpusReader:
    """The documents of ``--text`` (or of the default corpus), in corpus order; :meth:`documents` may be called again to
    read them anew.

    Args: as :func:`read_documents`.

    Raises:
        DataError: on construction, for paths that name nothing readable; while
            reading, as :func:`read_documents`.
    """

    def __init__(
        self,
        paths: Sequence[str | Path] | None,
        encoding: str = "utf-8",
        skip_folder: FolderRule | None = None,
        text_field: str = "text",
        skip_bad_records: bool = False,
    ) -> None:
        self.paths, self.encoding, self.text_field, self.skip_bad_records = (
            paths,
            encoding,
            text_field,
            skip_bad_records,
        )
        self.source, self.candidates, self.walk_skipped = corpus_candidates(paths, skip_folder)
        self._reset()

    def _reset(self) -> None:
        self.bad = BadRecords(self.skip_bad_records)
        self.skipped: list[dict] = list(self.walk_skipped)
        self.files: list[dict] = []
        self.duplicates: list[dict] = []
        self.seen: dict[str, str] = {}

    def documents(self) -> Iterator[Document]:
        """Every document, file by file; the manifest's view of them fills in as they are read."""
        self._reset()
        for item, shown, from_folder in self.candidates:
            if from_folder and not item.is_file():
                # a FIFO, socket or device inside a folder: reading it could block forever
                self.skipped.append({"path": shown, "reason": "not a regular file"})
                continue
            fmt, _ = ("text", None) if isinstance(item, BuiltinCorpus) else file_format(item)
            yield from (
                self._text_file(item, shown, from_folder)
                if fmt == "text"
                else self._record_file(item, shown, fmt, from_folder)
            )

    def check_found(self, docs: Sequence[Document]) -> None:
        """Raise :class:`DataError` when reading found no document at all."""
        if not docs:
            paths = self.paths
            where = ", ".join(str(p) for p in paths) if paths else str(default_corpus_root())
            records = sum(1 for entry in self.skipped if "format" in entry)
            if not records:
                raise DataError(
                    f"no text files found in {where} ({len(self.skipped)} skipped as empty or binary); "
                    f"give --text a folder that holds text files, or the files themselves"
                )
            raise DataError(
                f"no text files found in {where} ({len(self.skipped)} skipped: {records} record file(s) without the "
                f"field '{self.text_field}', the rest empty or binary); name the field that holds the text with "
                "--text-field NAME, or give --text the files themselves to see why each is refused"
            )

    def info(self) -> dict:
        """For the manifest: the source, each file read, what was skipped, the repeats and the bad records skipped."""
        info = {"source": self.source, "skipped": self.skipped, "duplicates": self.duplicates, "files": self.files}
        if self.bad.count:
            info["bad_records"] = {"count": self.bad.count, "first": self.bad.examples}
        return info

    def _text_file(self, item: Path | BuiltinCorpus, shown: str, from_folder: bool) -> Iterator[Document]:
        compression = None if isinstance(item, BuiltinCorpus) else file_format(item)[1]
        if compression is None:
            stored = raw = _read_candidate(item, shown, self.encoding)
        else:
            stored = item.read_bytes()
            raw = decompress(stored, compression, shown)
        text, reason = _decode_candidate(raw, shown, self.encoding)
        if reason is not None:
            if from_folder:
                self.skipped.append({"path": shown, "reason": reason})
                return
            raise DataError(f"{shown}: file is {_unusable(raw, reason, self.encoding)}")
        digest = hashlib.sha256(stored).hexdigest()
        entry = {"path": shown, "bytes": len(stored), "sha256": digest, "format": "text", "records": 1}
        if compression is not None:
            entry["compression"] = compression
        self._keep(entry)
        yield Document(shown, text, len(raw), digest)

    def _record_file(self, item: Path, shown: str, fmt: str, from_folder: bool) -> Iterator[Document]:
        before, examples, count = self.bad.count, len(self.bad.examples), 0
        records = iter_records(
            item, shown, fmt, file_format(item)[1], self.text_field, self.encoding, self.bad, in_folder=from_folder
        )
        try:
            for text in records:
                count += 1
                yield Document(shown, text, len(text.encode("utf-8")), "")
        except NotRecords as err:
            if not from_folder or count:
                raise
            # A file the person did not name, which is not records of the field (package.json, results.csv):
            # listed, never a reason to stop the folder's run; its bad lines read so far are not the corpus's.
            self.bad.count = before
            del self.bad.examples[examples:]
            self.skipped.append({"path": shown, "reason": f"{fmt} without the field: {err.reason}", "format": fmt})
            return
        if not count and from_folder:
            self.skipped.append({"path": shown, "reason": "no records"})
            return
        if not count and self.bad.count > before:
            raise DataError(
                f"{shown}: all {self.bad.count - before} of its {fmt} records were bad and skipped "
                "(--skip-bad-records); fix them, name the field that holds the text with --text-field, "
                "or leave the file out of --text"
            )
        if not count:
            raise DataError(
                f"{shown}: holds no {fmt} records; give a file with at least one record, or leave it out of --text"
            )
        self._keep(record_file_entry(item, shown, count, self.bad.count - before))

    def _keep(self, entry: dict) -> None:
        if entry["sha256"] in self.seen:
            self.duplicates.append({"path": entry["path"], "same_as": self.seen[entry["sha256"]]})
        self.seen.setdefault(entry["sha256"], entry["path"])
        self.files.append(entry)


def read_documents(
    paths: Sequence[str | Path] | None,
    encoding: str = "utf-8",
    skip_folder: FolderRule | None = None,
    text_field: str = "text",
    skip_bad_records: bool = False,
) -> tuple[list[Document], dict]:
    """Read the corpus: each plain text file is one document, each record of a record file one more.

    Args:
        paths: files, folders or names of built-in corpora
            (:mod:`octlm.data.corpora`, e.g. ``tinyshakespeare``; a path that
            exists wins over a built-in name). Folders are walked recursively
            in sorted order, following symbolic links to folders, skipping
            hidden entries, ``__pycache__``, ``node_modules``, folders
            ``skip_folder`` rules out, a folder reached a second time (a
            link loop, or two ways to one folder), files that are not
            regular files (FIFOs, sockets), empty files, binary files (a NUL
            byte in the first 8 KiB, or in the text for UTF-16/32) and
            record files that are not records of ``text_field``
            (:class:`octlm.data.records.NotRecords`). ``None`` or empty: the
            default corpus, :func:`default_corpus_files`, as is ``["stdlib"]``
            (:data:`~octlm.data.corpora.STDLIB`) when nothing called ``stdlib``
            exists; named beside other paths it adds those files.
        encoding: codec of every file (UTF-8 by default).
        skip_folder: called on each folder met while walking; a reason
            (recorded in ``info["skipped"]``) leaves it and all below it out.
        text_field: the field or column of JSON Lines, JSON, CSV and Parquet
            records that holds the text (:mod:`octlm.data.records`).
        skip_bad_records: count records that give no text instead of stopping at the first.

    Returns:
        ``(documents, info)`` where ``info`` names the source (with each
        built-in corpus used, by name and sha256) and lists each file read
        (path, bytes on disk, sha256, format, records, compression), what was
        skipped, which files repeat an earlier one byte for byte and the bad
        records skipped (a count and the first messages), for the manifest.

    Raises:
        DataError: for a missing path that names no built-in corpus, a symbolic
            link loop or a link to nothing (the link named), a named
            file that is empty or binary, a folder with no text files, text
            that does not decode (file and byte offset named), a built-in
            corpus whose shipped file is damaged, or a bad record (file and
            line or row named) while ``skip_bad_records`` is off.
    """
    reader = CorpusReader(paths, encoding, skip_folder, text_field, skip_bad_records)
    docs = list(reader.documents())
    reader.check_found(docs)
    return docs, reader.info()


__all__ = ["CorpusReader", "read_documents"]
