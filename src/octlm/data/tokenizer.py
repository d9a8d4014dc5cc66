"""Byte-level BPE through Hugging Face ``tokenizers``.

Byte level means every string, in any script, maps to tokens and back with no
loss: the base alphabet is the 256 byte values, there is no normaliser and no
lowercasing, and decoding re-assembles the exact bytes. One special token,
``<|endoftext|>``, separates documents in the token stream.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

END_OF_TEXT = "<|endoftext|>"
#: The end-of-text markers a tokenizer may carry, octlm's (and GPT-2's, Qwen's, SmolLM's) first, then Llama 3's.
END_OF_TEXT_MARKERS = (END_OF_TEXT, "<|end_of_text|>")
MIN_VOCAB_SIZE = 257  # the 256 byte values plus <|endoftext|>

#: Characters per piece when long texts are cut for training and encoding.
CHUNK_CHARS = 1 << 18

#: The longest run of one character class that BPE training counts as one word.
#: The trainer's cost grows with the square of the longest pre-token (a 200,000-
#: character word took 12 s, a 2 MB base64 blob over 10 minutes); runs this long
#: do not occur in prose or code (none in tinyshakespeare or the standard library),
#: so cutting them changes no tokenizer trained on ordinary text.
MAX_TRAINING_WORD = 256


@functools.lru_cache(maxsize=4)
def _long_runs(length: int) -> re.Pattern:
    # Runs that GPT-2's pre-tokenizer keeps whole: letters, digits, other
    # symbols, underscores (\w but neither letter nor digit) and whitespace.
    k = f"{{{length},}}"
    return re.compile(rf"[^\W\d_]{k}|\d{k}|[^\s\w]{k}|_{k}|\s{k}")


# Places where GPT-2's pre-tokenizer regex always splits, whatever comes
# before or after: before an ASCII space or newline that follows a
# non-whitespace character (no pre-token holds a non-space followed by
# whitespace), and before ASCII punctuation that follows an ASCII letter or
# digit (letter, digit and punctuation runs are separate pre-tokens). The
# regex has no lookbehind, so matching restarts identically after such a cut.
_CUT = re.compile(r"(?<=\S)[ \n]|(?<=[A-Za-z0-9])[!-/:-@\[-`{-~]")


def pretoken_chunks(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    """Cut ``text`` into pieces of about ``size`` characters at pre-token boundaries.

    Byte-level BPE never merges across a pre-token boundary, so encoding the
    pieces one by one and concatenating the ids gives exactly the ids of the
    whole text, and training on the pieces counts exactly the same words. One
    long line (a 20 MB file without a newline) then costs memory in
    proportion to a piece, not to the line. A stretch of ``size`` characters
    with no boundary at all (one 20 MB word) stays whole.
    """
    start = 0
    while len(text) - start > size:
        cut = _CUT.search(text, start + size)
        if cut is None:
            break
        yield text[start : cut.start()]
        start = cut.start()
    yield text[start:]


def training_pieces(text: str, max_word: int = MAX_TRAINING_WORD) -> Iterator[str]:
    """``text`` in pieces for BPE training: :func:`pretoken_chunks`, with every
    run longer than ``max_word`` characters that has no pre-token boundary cut
    every ``max_word`` characters.

    Only training sees these cuts; encoding uses the whole text, so the ids of
    a text do not depend on them. They keep training time linear in the input
    whatever it holds (a DNA sequence, a base64 blob), at the price of merges
    that never span a cut inside such a run.
    """
    for chunk in pretoken_chunks(text):
        start = 0
        for run in _long_runs(max_word).finditer(chunk):
            for cut in range(run.start() + max_word, run.end(), max_word):
                yield chunk[start:cut]
                start = cut
        yield chunk[start:]


#: Workers left running by an interrupted :func:`interruptible` call.
_abandoned: list[threading.Thread] = []


def left_running() -> bool:
    """Whether an interrupted :func:`interruptible` call left tokenizers work behind.

    That work (the worker, or the Rust threads it started) cannot be stopped,
    and when it meets an interpreter that is shutting down the process aborts
    (SIGABRT, "exception not rethrown"); a program that sees ``True`` should
    end with ``os._exit`` once its clean-up is done and its output flushed.
    """
    return bool(_abandoned)


def interruptible(work):
    """``work()`` run so that Ctrl-C and SIGTERM stop the caller within a fraction of a second.

    Hugging Face tokenizers train and encode in Rust without the GIL, where
    Python's signal handlers cannot run until the call returns (minutes, on a
    large corpus). Running the call in a worker thread while the main thread
    waits in short joins lets the handlers run: the KeyboardInterrupt reaches
    the caller (whose clean-up removes half-prepared files) and the abandoned
    daemon worker ends with the process (see :func:`left_running`). Off the
    main thread ``work`` simply runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return work()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as err:  # handed to the caller below
            outcome["error"] = err

    worker = threading.Thread(target=run, name="octlm-tokenizers", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except BaseException:
        _abandoned.append(worker)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _marker_as_vocabulary(hf: HFTokenizer) -> HFTokenizer:
    """``hf`` with ``<|endoftext|>`` kept as a vocabulary entry but no longer an added token.

    An added token is matched in raw text by every reader of ``tokenizer.json``
    (plain ``tokenizers``, transformers), so they would read the literal string
    ``"<|endoftext|>"`` inside a text as the boundary, where octlm reads it as
    text: ``encode_special_tokens`` is a runtime flag that the file does not
    keep. As an entry of the BPE vocabulary the marker keeps its id and its
    decoding, and no merge can produce it from text, so every reader agrees.
    Tokenizers whose BPE vocabulary lacks the marker are returned as they are.
    """
    state = json.loads(hf.to_str())
    if END_OF_TEXT not in state.get("model", {}).get("vocab", {}):
        return hf
    added = [t for t in state.get("added_tokens", []) if t.get("content") != END_OF_TEXT]
    if len(added) == len(state.get("added_tokens", [])):
        return hf
    state["added_tokens"] = added
    return HFTokenizer.from_str(json.dumps(state, ensure_ascii=False))


def byte_alphabet() -> dict[str, int]:
    """Map each printable stand-in character of byte-level BPE back to its byte.

    Byte-level BPE (Radford et al. 2019, GPT-2) writes each byte as a visible
    character so that merges never see whitespace or control bytes: bytes that
    are printable Latin-1 stand for themselves, the other 68 are shifted to
    code points 256 and up, in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


class Tokenizer:
    """A trained byte-level BPE tokenizer.

    ``encode(text)`` returns token ids (list[int]); ``decode(ids)`` returns
    the exact text; ``decode(encode(s)) == s`` for every Unicode string ``s``
    (strings with lone surrogates cannot be UTF-8 and are rejected by Python
    before they get here).
    """

    def __init__(self, hf: HFTokenizer) -> None:
        eot = next((i for i in map(hf.token_to_id, END_OF_TEXT_MARKERS) if i is not None), None)
        if eot is None:
            raise ValueError(f"tokenizer has no end-of-text token ({' or '.join(END_OF_TEXT_MARKERS)})")
        # The literal string "<|endoftext|>" inside a text is text, not a
        # document boundary: boundaries are inserted by id, never parsed. The
        # flag covers a marker that must stay an added token (and files of
        # earlier octlm versions, until they are saved again).
        self.hf = _marker_as_vocabulary(hf)
        self.hf.encode_special_tokens = True
        self.eot_id: int = eot

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1024) -> Tokenizer:
        """Learn ``vocab_size - 257`` merges from ``texts`` (tokens).

        Raises:
            ValueError: when ``vocab_size`` < 257 (256 bytes plus the
                end-of-text token) or above 2**32.
        """
        if vocab_size < MIN_VOCAB_SIZE or vocab_size > 2**32:
            raise ValueError(
                f"vocab_size must be between {MIN_VOCAB_SIZE} (256 bytes + {END_OF_TEXT}) and 2**32, got {vocab_size}"
            )
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=[END_OF_TEXT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        interruptible(
            lambda: hf.train_from_iterator(
                (piece for text in texts for piece in training_pieces(text)), trainer=trainer
            )
        )
        return cls(hf)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls(HFTokenizer.from_file(str(path)))

    @classmethod
    def brought(cls, path: str | Path, flag: str = "--tokenizer") -> Tokenizer:
        """A ``tokenizer.json`` a person brings (GPT-2's, Llama 3's, Qwen's, SmolLM's: byte-level BPE with an
        end-of-text token), checked so that octlm can count each token's bytes.

        Raises:
            DataError: naming ``flag`` and the file, for a file that is missing, not a tokenizers JSON, not BPE, not
                byte-level (SentencePiece-style files, Llama 2's and Mistral's, write spaces as "▁" and fall back to
                byte tokens, which octlm does not count), or without an end-of-text token.
        """
        from octlm.errors import DataError

        where, give = (
            f"{flag} {path}",
            "give a tokenizer.json as Hugging Face tokenizers writes it (GPT-2's, Llama 3's)",
        )
        try:
            text = Path(path).read_text(encoding="utf-8")
            state = json.loads(text)
        except FileNotFoundError:
            raise DataError(f"{where}: no such file; {give}") from None
        except IsADirectoryError:
            raise DataError(f"{where}: a folder; {give}, the file itself (often FOLDER/tokenizer.json)") from None
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise DataError(f"{where}: not a JSON file ({str(err).splitlines()[0][:100]}); {give}") from None
        missing = [
            key for key in ("model", "pre_tokenizer", "decoder") if not isinstance(state, dict) or key not in state
        ]
        if missing:
            # tokenizers' own parse error on such a file reads as if the JSON were broken
            raise DataError(f"{where}: JSON, but not a tokenizer: no {', '.join(map(repr, missing))} key; {give}")
        try:
            hf = HFTokenizer.from_str(text)
        except Exception as err:  # tokenizers raises a bare Exception
            raise DataError(f"{where}: JSON, but not a tokenizer ({str(err).splitlines()[0][:100]}); {give}") from None
        model = (state.get("model") or {}).get("type")
        decoder = (state.get("decoder") or {}).get("type")
        if model != "BPE" or decoder != "ByteLevel":
            raise DataError(
                f"{where}: a {model} model with a {decoder} decoder; octlm reads byte-level BPE tokenizers (GPT-2, "
                "Llama 3, Qwen, SmolLM), whose every token is a run of bytes it can count for bits per byte "
                "(SentencePiece-style files, as Llama 2's and Mistral's, are not)"
            )
        try:
            return cls(hf)
        except ValueError as err:
            raise DataError(f"{where}: {err}; octlm ends each document with it") from None

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` atomically (the bytes tokenizers' own ``save`` writes).

        Raises:
            OSError: naming ``path`` when it cannot be written (a full disk: ENOSPC), where
                tokenizers' ``save`` raises a bare ``Exception``.
        """
        from octlm.fileio import atomic_write

        atomic_write(path, self.hf.to_str(pretty=True))

    def to_str(self) -> str:
        """The tokenizer as the JSON text ``tokenizer.json`` holds."""
        return self.hf.to_str()

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many texts at once (in parallel, in Rust)."""
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def encode_arrays(self, texts: Sequence[str], dtype=np.uint32, group_chars: int = 1 << 22) -> list[np.ndarray]:
        """Ids of each text as a numpy array ([N_i] each), encoded in pieces.

        The same ids as :meth:`encode` of each text. Texts are cut with
        :func:`pretoken_chunks` and the pieces encoded in parallel groups of
        about ``group_chars`` characters, so one huge text (a 20 MB line) needs
        memory in proportion to a group, not to the text, and many small texts
        still encode in parallel.
        """
        out: list[list[np.ndarray]] = [[] for _ in texts]
        group: list[tuple[int, str]] = []
        size = 0

        def flush() -> None:
            pieces = [piece for _, piece in group]
            encodings = interruptible(lambda: self.hf.encode_batch(pieces, add_special_tokens=False))
            for (owner, _), encoding in zip(group, encodings, strict=True):
                out[owner].append(np.asarray(encoding.ids, dtype=dtype))
            group.clear()

        for owner, text in enumerate(texts):
            for piece in pretoken_chunks(text):
                group.append((owner, piece))
                size += len(piece)
                if size >= group_chars:
                    flush()
                    size = 0
        if group:
            flush()
        return [np.concatenate(parts) if parts else np.zeros(0, dtype=dtype) for parts in out]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def token_str(self, token_id: int) -> str:
        """Readable text of one token, e.g. ``' the'``; bytes that are part of a
        longer UTF-8 character show as escapes, e.g. ``'\\xe4'``."""
        if token_id == self.eot_id:
            return self.hf.id_to_token(token_id)
        return self.token_bytes(token_id).decode("utf-8", errors="backslashreplace")

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token stands for (empty for ``<|endoftext|>``)."""
        if token_id == self.eot_id:
            return b""
        piece = self.hf.id_to_token(token_id)
        if piece is None:
            raise ValueError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
        alphabet = _ALPHABET
        return bytes(alphabet[ch] for ch in piece)

    @cached_property
    def bytes_per_token(self) -> np.ndarray:
        """UTF-8 bytes each token id stands for, int64 [vocab_size]; 0 for ``<|endoftext|>``.

        Summed over the targets of a block, this gives the bytes the model
        predicted, the denominator of bits per byte.
        """
        return np.array([len(self.token_bytes(i)) for i in range(self.vocab_size)], dtype=np.int64)


_ALPHABET = byte_alphabet()

__all__ = [
    "CHUNK_CHARS",
    "END_OF_TEXT",
    "END_OF_TEXT_MARKERS",
    "MAX_TRAINING_WORD",
    "MIN_VOCAB_SIZE",
    "Tokenizer",
    "byte_alphabet",
    "interruptible",
    "left_running",
    "pretoken_chunks",
    "training_pieces",
]
