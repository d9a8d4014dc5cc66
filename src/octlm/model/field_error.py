"""The error of a :class:`~octlm.model.DecoderConfig` value that cannot work, said in its reader's words."""

from __future__ import annotations

import re


class DecoderFieldError(ValueError):
    """A :class:`DecoderConfig` value that cannot work.

    ``field`` names it and ``rest`` says the rest, so the command line can
    name its own flag (``--d-model=30 is not ...``) where Python reads
    ``DecoderConfig.d_model=30 is not ...``. Another option the rest names is
    written ``{field:n_heads}`` in it, so each reader gets it in its own words
    (``--n-heads``, ``DecoderConfig.n_heads``): :meth:`said`.
    """

    def __init__(self, field: str, rest: str) -> None:
        self.field, self.rest = field, rest
        super().__init__(self.said(lambda name: f"DecoderConfig.{name}"))

    def said(self, name_of) -> str:
        """The message with every option written by ``name_of`` (a field name -> its name for this reader)."""
        return name_of(self.field) + _OTHER_FIELD.sub(lambda m: name_of(m.group(1)), self.rest)


#: How a :class:`DecoderFieldError`'s rest names another option.
_OTHER_FIELD = re.compile(r"\{field:(\w+)\}")


__all__ = ["DecoderFieldError"]
