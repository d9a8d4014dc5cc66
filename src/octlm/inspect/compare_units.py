"""Which final figures of ``octlm compare`` can be set against each other: the same validation text, the same tokenizer.

Bits per byte count the validation text's bytes, so they compare between
runs that validate on the same text, whatever their tokenizers. Loss and
perplexity are per token, so they compare only between runs that also share
the tokenizer: a larger vocabulary makes fewer, harder tokens of the same
text. The validation text is known from ``manifest.json`` (the hash, format
and records of each file read, ``--val-fraction``, ``--encoding``, and
``--text-field`` and ``--skip-bad-records`` where records were read), the
tokenizer from the bytes of ``tokenizer.json``. A run without them (an older
or hand-made folder) is left out of the check rather than guessed at.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

#: The figures per token, and the one per byte, as the result and compare.json name them.
PER_TOKEN = ["val_loss", "val_perplexity", "train_loss"]
PER_BYTE = ["val_bpb"]


def validation_text_key(folder: Path, options: dict) -> str | None:
    """What fixes a run's validation text, as one string (equal strings: the same text); ``None`` when
    ``manifest.json`` is missing, damaged or lacks a file's hash."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        files = [(f["sha256"], f.get("format"), f.get("records"), f.get("compression")) for f in manifest["files"]]
        key = {"files": files, "val_fraction": manifest["val_fraction"], "encoding": manifest.get("encoding")}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(fmt != "text" for _, fmt, _, _ in files):
        key |= {name: options.get(name) for name in ("text_field", "skip_bad_records")}
        key["bad_records"] = (manifest.get("bad_records") or {}).get("count")
    return json.dumps(key, sort_keys=True)


def tokenizer_key(folder: Path) -> str | None:
    """The sha256 of a run's ``tokenizer.json`` (equal: the same tokenizer); ``None`` when it cannot be read."""
    try:
        return hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _groups(labels: list[str], keys: list[str | None]) -> list[list[str]]:
    """The labels of runs sharing a known key, one list per key in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for label, key in zip(labels, keys, strict=True):
        if key is not None:
            groups.setdefault(key, []).append(label)
    return list(groups.values())


def not_comparable(labels: list[str], texts: list[str | None], tokenizers: list[str | None]) -> list[dict]:
    """Each reason some final figures of these runs do not compare: ``{"figures", "groups", "message"}``.

    ``labels``, ``texts`` and ``tokenizers`` hold one entry per run (the keys of
    :func:`validation_text_key` and :func:`tokenizer_key`). Runs on different
    validation texts compare in no figure; runs on one text with different
    tokenizers still compare in bits per byte. ``[]`` when every figure compares.
    """
    found = []
    by_text = _groups(labels, texts)
    if len(by_text) > 1:
        found.append(
            {
                "figures": PER_TOKEN + PER_BYTE,
                "groups": by_text,
                "message": f"no final figure compares between {_shown(by_text)}: their validation text differs "
                "(other files, --val-fraction or --encoding); bits per byte compare only on the same text, loss and "
                "perplexity only with the same tokenizer and text",
            }
        )
    for text in dict.fromkeys(texts):  # runs on one text (or whose text is unknown): do their tokenizers differ?
        members = [i for i, key in enumerate(texts) if key == text]
        by_tokenizer = _groups([labels[i] for i in members], [tokenizers[i] for i in members])
        if len(by_tokenizer) > 1:
            same_text = "; bits per byte do compare (the same validation text)" if text is not None else ""
            found.append(
                {
                    "figures": PER_TOKEN,
                    "groups": by_tokenizer,
                    "message": f"loss and perplexity do not compare between {_shown(by_tokenizer)}: their "
                    f"tokenizers differ (tokenizer.json), so a token is not the same unit of text{same_text}",
                }
            )
    return found


def _shown(groups: list[list[str]]) -> str:
    return " vs ".join(", ".join(group) for group in groups)


__all__ = ["PER_BYTE", "PER_TOKEN", "not_comparable", "tokenizer_key", "validation_text_key"]
