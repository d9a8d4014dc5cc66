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
from octlm.errors import OctlmError
from octlm.train.options import TrainOptions
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.data.tokenizer import Tokenizer


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


def split_and_tokenize(opts: TrainOptions) -> SplitText:
    """Read ``opts.text``, split it by ``opts.val_fraction`` and train the tokenizer on the training split.

    With ``opts.init_from`` the source run's tokenizer is used instead.

    Deterministic, so a length study can count the validation tokens of the
    runs it is about to train.

    Raises:
        DataError: for unreadable input or a split that leaves one side empty.
    """
    docs, info = data.read_documents(opts.text or None, opts.encoding, skip_folder=_earlier_run,
                                     text_field=opts.text_field, skip_bad_records=opts.skip_bad_records)
    train_texts, val_texts = data.split_documents(docs, opts.val_fraction)
    # A run started from another keeps that run's tokenizer: its token rows mean those ids.
    tokenizer = RunFolder(opts.init_from, "--init-from").read_tokenizer() if opts.init_from else Tokenizer.train(train_texts, opts.vocab_size)
    return SplitText(docs, info, train_texts, val_texts, tokenizer)


def prepare_corpus(opts: TrainOptions, folder: RunFolder, report: Reporter) -> Corpus:
    """Read, split, tokenize and store the corpus in ``folder``: token files, ``tokenizer.json`` and ``manifest.json``.

    Raises:
        DataError: for unreadable input, or a validation split shorter than
            one block of ``context_length + 1`` tokens (naming the options to change).
        OctlmError: when the disk or quota fills while the files are written,
            naming the folder and the room the run needs there.
    """
    t0 = time.perf_counter()
    text = split_and_tokenize(opts)
    docs, info, tokenizer = text.docs, text.info, text.tokenizer
    n_bytes = sum(d.n_bytes for d in docs)
    _report_sources(docs, info, n_bytes, report)
    if tokenizer.vocab_size < opts.vocab_size:
        report.warn(f"the training text supports only {tokenizer.vocab_size} tokens; using that instead of --vocab-size {opts.vocab_size}")
    encoded = {split: tokens.encode_stream(tokenizer, texts) for split, texts in (("train", text.train_texts), ("val", text.val_texts))}
    try:
        tokenizer.save(folder.tokenizer_path)
        streams = {split: folder.write_tokens(split, ids) for split, ids in encoded.items()}
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
            raise _no_room(err, folder, tokenizer, encoded) from None
        raise
    train, val = folder.tokens("train", manifest), folder.tokens("val", manifest)
    need = opts.model.context_length + 1
    if len(val) < need:
        raise data.DataError(
            f"the validation split holds {len(val)} tokens, fewer than one block of context_length + 1 = {need}; "
            f"give more text, raise --val-fraction (now {opts.val_fraction}) or lower --context-length"
        )
    report.event(
        "tokens",
        f"tokenizer: {tokenizer.vocab_size} tokens; train {len(train):,} tokens, val {len(val):,} tokens "
        f"({n_bytes / max(len(train) + len(val), 1):.2f} bytes/token) in {time.perf_counter() - t0:.1f}s",
        vocab_size=tokenizer.vocab_size,
        train_tokens=len(train),
        val_tokens=len(val),
    )
    return Corpus(tokenizer, train, val, manifest)


def _no_room(err: OSError, folder: RunFolder, tokenizer: Tokenizer, encoded: dict[str, np.ndarray]) -> OctlmError:
    """The error for a disk (or quota) that filled while the prepared corpus was written: where, what, and how much.

    ``folder`` is the hidden staging folder beside ``--out``, which the
    caller removes; the room is needed in the folder that holds it.
    """
    where = folder.path.parent
    def size(n: int) -> str:
        return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.0f} kB"

    files = ", ".join(f"{folder.token_path(split).name} {size(ids.nbytes)}" for split, ids in encoded.items())
    total = sum(ids.nbytes for ids in encoded.values()) + len(tokenizer.to_str().encode())
    return OctlmError(
        f"{where}: {err.strerror} while writing the prepared corpus ({files}, tokenizer.json and manifest.json): the run "
        f"needs at least {size(total)} there before training, and its checkpoints more; nothing was written. "
        f"Free that much space, or give --out a folder on another disk"
    )


def _report_sources(docs: list[data.Document], info: dict, n_bytes: int, report: Reporter) -> None:
    source = "the Python standard library" if info["source"]["kind"] == "python-stdlib" else f"{len(info['files'])} file(s)"
    # The first line as decoded: a wrong --encoding shows at a glance.
    first = data.first_line(docs[0].text)
    report.event("corpus", f"corpus: {source}, {len(docs)} documents, {n_bytes / 1e6:.2f} MB; first line: \"{first}\"",
                 documents=len(docs), bytes=n_bytes, skipped=len(info["skipped"]), first_line=first)
    # The standard library has empty files and repeats a few on purpose (the default corpus, same every time);
    # only what was skipped or repeated in the person's own text is worth a warning. manifest.json lists both.
    own = info["source"]["kind"] != "python-stdlib"
    if info["skipped"] and own:
        report.warn(f"skipped {len(info['skipped'])} entries that are not text: empty, binary or special files, or octlm runs (manifest.json lists them)")
    if (bad := info.get("bad_records")) is not None:
        report.warn(f"skipped {bad['count']:,} bad record(s) (--skip-bad-records), the first: {bad['first'][0]}; manifest.json counts them per file")
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
