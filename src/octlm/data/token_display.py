"""Tokens and text as people see them and give them: token labels, printable model output, text streamed as it
decodes, text from the command line.

Byte-level BPE tokens hold whitespace, control bytes and parts of UTF-8
characters; :func:`visible_token` labels them for the terminal, the figures
and the page, :func:`printable_text` keeps a barely trained model's control
bytes from reaching the terminal, and :class:`TextStream` gives out the text
of tokens sampled one at a time once no later token can change it.
:func:`argv_text` reads a ``--prompt`` or ``--token`` as the UTF-8 its bytes spell.
"""

from __future__ import annotations

import os
import unicodedata
from typing import TYPE_CHECKING

from octlm.errors import OctlmError

if TYPE_CHECKING:  # pragma: no cover
    from octlm.data.tokenizer import Tokenizer

#: Stand-ins that make whitespace visible in token labels, as the page shows them.
#: Every stand-in must have a glyph in DejaVu Sans, matplotlib's default font
#: (the figures use it): '␍' (U+240D) does not, so a carriage return shows as
#: '⇤', "back to the left margin", a mirror of the tab's '⇥'.
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "⇤"}


def visible_token(text: str) -> str:
    """A token's text with whitespace and control characters made visible.

    ``' the'`` becomes ``'␣the'``, a newline ``'↵'``, a tab ``'⇥'``, a carriage
    return ``'⇤'``, every other control character (Unicode category Cc: C0,
    DEL and C1) ``'\\xNN'``; bytes that are only part of a UTF-8 character
    already read ``'\\xe4'`` in
    :meth:`~octlm.data.tokenizer.Tokenizer.token_str`. The terminal, the
    figures and the page (``showToken`` in ``web/src/run/data.ts``, held to
    the same output by the parity fixtures) label tokens this way.
    """
    return "".join(_VISIBLE.get(c, _escape_control(c)) for c in text)


def _escape_control(c: str) -> str:
    # Cc characters all lie below U+00A0, so two hex digits always suffice.
    return f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" else c


def printable_text(text: str) -> str:
    """``text`` with control characters other than newline, tab and carriage return shown as ``\\xNN``.

    For printing model output to a terminal: a barely trained model emits
    control bytes that would otherwise move the cursor or ring the bell.
    """
    return "".join(c if c in "\n\t\r" else _escape_control(c) for c in text)


class TextStream:
    """The text of token ids that arrive one at a time, given out as soon as it is final.

    Byte-level BPE can split one UTF-8 character over several tokens, and
    :meth:`~octlm.data.tokenizer.Tokenizer.decode` shows a character that
    is not complete yet as U+FFFD. So :meth:`push` decodes the ids since the text was last complete
    and gives out only the new text before a trailing run of U+FFFD: that
    part no later token can change. A U+FFFD that stays (bytes that are not
    UTF-8) comes out with the next other character or from :meth:`finish`.
    The pieces joined equal ``tokenizer.decode(ids)``; each push decodes only
    the ids since the last complete character, so a long stream costs linear
    time.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._pending: list[int] = []  # ids since the text was last complete
        self._given = 0  # characters of their text already given out

    def push(self, token_id: int) -> str:
        """Add one token; returns the text it made final ('' while a character is incomplete)."""
        self._pending.append(token_id)
        text = self.tokenizer.decode(self._pending)
        final = text.rstrip("\ufffd")
        piece = final[self._given :]
        self._given = max(self._given, len(final))
        if len(final) == len(text):
            # complete: bytes still to come start a new character, so decoding can start afresh
            self._pending, self._given = [], 0
        return piece

    def finish(self) -> str:
        """The text still held back (U+FFFD for a character the ids leave incomplete)."""
        piece = self.tokenizer.decode(self._pending)[self._given :]
        self._pending, self._given = [], 0
        return piece


def argv_text(value: str, option: str) -> str:
    """``value``, a text option from the command line (``--prompt``, ``--token``), as the text its bytes spell in
    UTF-8.

    Python decodes argv with the locale's encoding and turns each byte it
    cannot decode into a lone surrogate (PEP 383): a byte that is no UTF-8
    (``$'\\xff'``), and under the C locale every byte of a UTF-8 ``é``. The
    bytes are taken back and read as UTF-8, so ``é`` is ``é`` in any locale.
    A value without such surrogates is returned as it is.

    Raises:
        OctlmError: naming ``option``, the value (its bytes that are not UTF-8
            as ``\\xNN``) and the first such byte.
    """
    if not any("\udc80" <= c <= "\udcff" for c in value):
        return value
    try:
        raw = os.fsencode(value)  # the argument's own bytes
    except UnicodeEncodeError:  # not from argv (a str built in Python): its surrogates stand for bytes all the same
        raw = value.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        shown = raw.decode("utf-8", "backslashreplace")
        raise OctlmError(
            f"{option} '{shown}' is not valid UTF-8 (byte 0x{raw[err.start]:02x}, byte {err.start + 1} of the "
            "argument); give the text in UTF-8"
        ) from None


__all__ = ["TextStream", "argv_text", "printable_text", "visible_token"]
