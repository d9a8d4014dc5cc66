"""The prepared corpus of a run: text read, split and tokenized into the run folder's token files.

:func:`prepare_corpus` does it once, when a run starts; :func:`open_corpus`
reads it back, for a resumed run and for every process of a distributed one.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from octlm.data import text as data
from octlm.data import tokens
from octlm.data.reading import CorpusReader, read_documents
from octlm.data.tokenizer import Tokenizer
from octlm.errors import OctlmError
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.train.options import TrainOptions

#: Text (bytes, UTF-8, as read: decompressed) above which preparation streams and the tokenizer trains on a sample:
#: the training split of the corpus's first documents up to this size. Below it (the built-in corpora, the standard
#: library's 12 MB) everything is as it always was: the whole text in memory, the tokenizer trained on all of it.
TOKENIZER_SAMPLE_BYTES = 128 * 2**20
#: Text gathered before each encoding step of a streamed corpus (bytes): memory of one group, and enough for parallel
#: encoding.
STREAM_GROUP_BYTES = 16 * 2**20


@dataclass
class Corpus:
    """A prepared corpus: tokenizer and the two token streams [N] (memmaps)."""

    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    manifest: dict


@dataclass
class SplitText:
    """Text read and split into training and validation documents, and the tokenizer trained on the first."""

    docs: list[data.Document]
    info: dict
    train_texts: list[str]
    val_texts: list[str]
    tokenizer: Tokenizer


def _earlier_run(folder: Path) -> str | None:
    # An earlier run's JSON and token files are octlm's output, not the person's text.
    return "an octlm run folder" if RunFolder(folder).is_octlm_run() else None


def _reader(opts: TrainOptions) -> CorpusReader:
    return CorpusReader(opts.text or None, opts.encoding, _earlier_run, opts.text_field, opts.skip_bad_records)


def _tokenizer(opts: TrainOptions, train_texts: list[str]) -> Tokenizer:
    # A run started from another keeps that run's tokenizer: its token rows mean those ids.
    if opts.init_from:
        return RunFolder(opts.init_from, "--init-from").read_tokenizer()
    return Tokenizer.brought(opts.tokenizer) if opts.tokenizer else Tokenizer.train(train_texts, opts.vocab_size)


def split_and_tokenize(opts: TrainOptions) -> SplitText:
    """Read ``opts.text``, split it by ``opts.val_fraction`` and train the tokenizer on the training split.

    With ``opts.init_from`` the source run's tokenizer is used instead.

    Deterministic, so a length study can count the validation tokens of the
    runs it is about to train. The whole text is held in memory
    (:func:`prepare_corpus` streams a corpus above :data:`TOKENIZER_SAMPLE_BYTES`).

    Raises:
        DataError: for unreadable input or a split that leaves one side empty.
    """
    docs, info = read_documents(
        opts.text or None,
        opts.encoding,
        skip_folder=_earlier_run,
        text_field=opts.text_field,
        skip_bad_records=opts.skip_bad_records,
    )
    train_texts, val_texts = data.split_documents(docs, opts.val_fraction)
    return SplitText(docs, info, train_texts, val_texts, _tokenizer(opts, train_texts))


def read_sample(reader: CorpusReader, limit: int) -> tuple[list[data.Document], bool]:
    """The corpus's first documents, up to the one that takes their text past ``limit`` bytes; and whether that was all
    of it.

    Raises:
        DataError: as :func:`octlm.data.reading.read_documents`, and when the corpus holds no document.
    """
    held, size = [], 0
    for doc in reader.documents():
        held.append(doc)
        size += doc.n_bytes
        if size > limit:
            return held, False
    reader.check_found(held)
    return held, True


def prepare_corpus(opts: TrainOptions, folder: RunFolder, report: Reporter) -> Corpus:
    """Read, split, tokenize and store the corpus in ``folder``: token files, ``tokenizer.json`` and ``manifest.json``.

    A corpus of up to :data:`TOKENIZER_SAMPLE_BYTES` of text is read into
    memory and the tokenizer trains on all of its training split. A larger one
    streams: the tokenizer trains on the training split of the documents in
    its first :data:`TOKENIZER_SAMPLE_BYTES`, then the corpus is read again
    and each group of documents is split, encoded and appended to the token
    files (:class:`~octlm.data.tokens.TokenWriter`), so memory stays bounded
    whatever the corpus's size, and time grows linearly with it.

    Raises:
        DataError: for unreadable input, or a validation split shorter than
            one block of ``context_length + 1`` tokens (naming the options to change).
        OctlmError: when the disk or quota fills while the files are written,
            naming the folder and the room the run needs there.
    """
    t0 = time.perf_counter()
    reader = _reader(opts)
    held, complete = read_sample(reader, TOKENIZER_SAMPLE_BYTES)
    if complete:
        train_texts, val_texts = data.split_documents(held, opts.val_fraction)
        text = SplitText(held, reader.info(), train_texts, val_texts, _tokenizer(opts, train_texts))
        tokenizer, docs, info = text.tokenizer, text.docs, text.info
        _report_sources(docs, info, sum(d.n_bytes for d in docs), report)
        _check_vocab(tokenizer, opts, report)
        encoded = {
            split: tokens.encode_stream(tokenizer, texts)
            for split, texts in (("train", text.train_texts), ("val", text.val_texts))
        }
        n_bytes = sum(d.n_bytes for d in docs)
        streams, manifest = _store(
            folder,
            tokenizer,
            info,
            n_bytes,
            opts,
            lambda: {split: folder.write_tokens(split, ids) for split, ids in encoded.items()},
            {split: ids.nbytes for split, ids in encoded.items()},
        )
    else:
        n_bytes, manifest = _prepare_streaming(opts, folder, report, reader, held)
        tokenizer = folder.read_tokenizer()
    train, val = folder.tokens("train", manifest), folder.tokens("val", manifest)
    need = opts.model.context_length + 1
    if len(val) < need:
        raise data.DataError(
            f"the validation split holds {len(val)} tokens, fewer than one block of context_length + 1 = {need}; "
            f"give more text, raise --val-fraction (now {opts.val_fraction}) or lower --context-length"
        )
    used = _ids_used(train, tokenizer.vocab_size) if opts.tokenizer else None
    report.event(
        "tokens",
        f"tokenizer: {tokenizer.vocab_size} tokens"
        + (f" from {opts.tokenizer}, {used:,} of them in the training split" if used is not None else "")
        + f"; train {len(train):,} tokens, val {len(val):,} tokens "
        f"({n_bytes / max(len(train) + len(val), 1):.2f} bytes/token) in {time.perf_counter() - t0:.1f}s",
        vocab_size=tokenizer.vocab_size,
        train_tokens=len(train),
        val_tokens=len(val),
        **({} if used is None else {"ids_in_training": used}),
    )
    return Corpus(tokenizer, train, val, manifest)


def _ids_used(train: np.ndarray, vocab_size: int) -> int:
    """How many ids of the vocabulary occur in the training stream (its rows the training text ever selects)."""
    seen = np.zeros(vocab_size, dtype=bool)
    for start in range(0, len(train), 1 << 24):  # a memmap read in pieces, not loaded whole
        seen[np.asarray(train[start : start + (1 << 24)])] = True
    return int(seen.sum())


def _check_vocab(tokenizer: Tokenizer, opts: TrainOptions, report: Reporter) -> None:
    if tokenizer.vocab_size < opts.vocab_size and not opts.tokenizer:
        report.warn(
            f"the training text supports only {tokenizer.vocab_size} tokens; "
            f"using that instead of --vocab-size {opts.vocab_size}"
        )


def _store(
    folder: RunFolder,
    tokenizer: Tokenizer,
    info: dict,
    n_bytes: int,
    opts: TrainOptions,
    write_streams,
    sizes: dict[str, int],
) -> tuple[dict, dict]:
    """Write ``tokenizer.json``, the token files (``write_streams()``, their manifest entries) and ``manifest.json``.

    Raises:
        OctlmError: when the disk or quota fills (:func:`_no_room`, with ``sizes``: bytes of each token file, at least).
    """
    try:
        tokenizer.save(folder.tokenizer_path)
        streams = write_streams()
        manifest = {
            **info,
            "total_bytes": n_bytes,
            "val_fraction": opts.val_fraction,
            "encoding": opts.encoding,
            "tokens": streams,
        }
        folder.write_manifest(manifest)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _no_room(err, folder, tokenizer, sizes) from None
        raise
    return streams, manifest


def _no_room(err: OSError, folder: RunFolder, tokenizer: Tokenizer, sizes: dict[str, int]) -> OctlmError:
    """The error for a disk (or quota) that filled while the prepared corpus was written: where, what, and how much.

    ``folder`` is the hidden staging folder beside ``--out``, which the
    caller removes; the room is needed in the folder that holds it.
    ``sizes`` are the token files' bytes (for a streamed corpus, what was
    written before the disk filled: the least the run needs).
    """
    where = folder.path.parent

    def size(n: int) -> str:
        return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.0f} kB"

    files = ", ".join(f"{folder.token_path(split).name} {size(n)}" for split, n in sizes.items())
    total = sum(sizes.values()) + len(tokenizer.to_str().encode())
    return OctlmError(
        f"{where}: {err.strerror} while writing the prepared corpus ({files}, tokenizer.json and manifest.json): "
        f"the run needs at least {size(total)} there before training, and its checkpoints more; nothing was written. "
        "Free that much space, or give --out a folder on another disk"
    )


def _prepare_streaming(
    opts: TrainOptions, folder: RunFolder, report: Reporter, reader: CorpusReader, held: list[data.Document]
) -> tuple[int, dict]:
    """The corpus above :data:`TOKENIZER_SAMPLE_BYTES`: the tokenizer from the first documents (``held``), then every
    document
    read again, split, encoded and appended to the token files group by group. Returns the text's bytes and the
    manifest."""
    sample = data.split_documents(held, opts.val_fraction)[0]
    sample_bytes = sum(d.n_bytes for d in held)
    report.event(
        "sample",
        f"corpus larger than {TOKENIZER_SAMPLE_BYTES / 2**20:.0f} MiB: the tokenizer trains on its first {len(held):,} "
        f"documents ({sample_bytes / 1e6:,.1f} MB); every document is encoded",
        documents=len(held),
        bytes=sample_bytes,
    )
    tokenizer = _tokenizer(opts, sample)
    del held, sample  # memory: from here on only a group of documents at a time
    _check_vocab(tokenizer, opts, report)
    dtype = tokens.token_dtype(tokenizer.vocab_size)
    writers = {split: tokens.TokenWriter(folder.token_path(split), dtype) for split in ("train", "val")}
    counted = {"documents": 0, "bytes": 0, "first": None}
    try:
        n_bytes, manifest = _stream_into(reader, tokenizer, writers, counted, opts, folder, report)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    return n_bytes, manifest


def _stream_into(
    reader: CorpusReader,
    tokenizer: Tokenizer,
    writers: dict,
    counted: dict,
    opts: TrainOptions,
    folder: RunFolder,
    report: Reporter,
) -> tuple[int, dict]:
    on_disk = sum(item.stat().st_size for item, _, _ in reader.candidates if isinstance(item, Path) and item.is_file())
    bar = report.progress(on_disk, "read and encode", "B")
    bar.unit_scale = True
    group: list[data.Document] = []
    size = 0

    def flush() -> None:
        train_texts, val_texts = data.split_documents(group, opts.val_fraction)
        tokens.encode_into(tokenizer, train_texts, writers["train"])
        tokens.encode_into(tokenizer, val_texts, writers["val"])
        group.clear()

    with bar:
        for doc in reader.documents():
            counted["documents"] += 1
            counted["bytes"] += doc.n_bytes
            counted["first"] = counted["first"] or doc
            group.append(doc)
            size += doc.n_bytes
            bar.update(min(doc.n_bytes, max(on_disk - bar.n, 0)))  # text bytes against file bytes: never past the end
            if size >= STREAM_GROUP_BYTES:
                flush()
                size = 0
        if group:
            flush()
        bar.update(max(on_disk - bar.n, 0))
    info, n_bytes = reader.info(), counted["bytes"]
    _report_sources([counted["first"]], info, n_bytes, report, documents=counted["documents"])
    sizes = {split: w.count * w.dtype.itemsize for split, w in writers.items()}
    return n_bytes, _store(
        folder, tokenizer, info, n_bytes, opts, lambda: {split: w.close() for split, w in writers.items()}, sizes
    )[1]


def _report_sources(
    docs: list[data.Document], info: dict, n_bytes: int, report: Reporter, documents: int | None = None
) -> None:
    documents = len(docs) if documents is None else documents
    source = (
        "the Python standard library" if info["source"]["kind"] == "python-stdlib" else f"{len(info['files'])} file(s)"
    )
    # The first line as decoded: a wrong --encoding shows at a glance.
    first = data.first_line(docs[0].text)
    report.event(
        "corpus",
        f'corpus: {source}, {documents} documents, {n_bytes / 1e6:.2f} MB; first line: "{first}"',
        documents=documents,
        bytes=n_bytes,
        skipped=len(info["skipped"]),
        first_line=first,
    )
    # The standard library has empty files and repeats a few on purpose (the default corpus, same every time);
    # only what was skipped or repeated in the person's own text is worth a warning. manifest.json lists both.
    own = info["source"]["kind"] != "python-stdlib"
    records = [entry["path"] for entry in info["skipped"] if "format" in entry]
    other = [f"{entry['path']} ({entry['reason']})" for entry in info["skipped"] if "format" not in entry]
    if other and own:
        # Named here: a run that then fails (a text too short to split) writes no manifest.json to look in.
        shown = "; ".join(other[:3]) + (
            f"; and {len(other) - 3} more (manifest.json lists them)" if len(other) > 3 else ""
        )
        said = "1 entry that is" if len(other) == 1 else f"{len(other)} entries that are"
        report.warn(f"skipped {said} not text: {shown}")
    if records:
        shown = ", ".join(records[:3]) + (f" and {len(records) - 3} more" if len(records) > 3 else "")
        report.warn(
            f"skipped {len(records)} record file(s) in folders that are not records of the text field: {shown} "
            "(manifest.json says why; --text-field NAME names another field)"
        )
    if (bad := info.get("bad_records")) is not None:
        report.warn(
            f"skipped {bad['count']:,} bad record(s) (--skip-bad-records), the first: {bad['first'][0]}; manifest.json "
            "counts them per file"
        )
    repeats = info["duplicates"] if own else []
    for dup in repeats[:3]:
        report.warn(f"{dup['path']} repeats {dup['same_as']} byte for byte; it is trained on twice")
    if len(repeats) > 3:
        report.warn(f"... and {len(repeats) - 3} more repeated file(s) (manifest.json lists them)")


def open_corpus(folder: RunFolder) -> Corpus:
    """The prepared corpus of an existing run folder: its tokenizer and token files.

    Raises:
        RunError: naming the file when one is missing or unreadable.
        DataError: naming a token file that is damaged.
    """
    manifest = folder.read_manifest()
    tokenizer = folder.read_tokenizer()
    return Corpus(tokenizer, folder.tokens("train", manifest), folder.tokens("val", manifest), manifest)


__all__ = ["Corpus", "SplitText", "open_corpus", "prepare_corpus", "split_and_tokenize"]
