"""What the embedding explorer shows about a trained run.

One place computes it for both views: the page (:mod:`octlm.export.web`, through
:func:`run_view`) and the terminal's figures (:mod:`octlm.inspect.figures`):

* the token table and each token's text;
* how often each token occurs in the training split (``train.bin``);
* a 2-D PCA of the token table;
* the run's position vectors: the learned table, the sinusoidal rows, or for
  RoPE the cos/sin of its rotation angles (whose cosine similarity is the
  score RoPE gives a query and a key with equal unit pairs); ALiBi and NoPE
  have none;
* the loss curve from ``metrics.jsonl``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from octlm.data.tokenizer import Tokenizer
from octlm.declare import REQUIRED, at_least, check_fields, option, same_as
from octlm.errors import RunError
from octlm.inspect.bench import TOKEN_RULE
from octlm.inspect.diagnostics import position_vectors
from octlm.inspect.unseen_rows import seen_and_unseen, unseen_line
from octlm.model import Decoder
from octlm.model.layout import layout_text
from octlm.model.positions import PositionVectors, facts_of
from octlm.report import Reporter
from octlm.run.folder import EMBEDDINGS, EMBEDDINGS_FIGURES, METRICS, RunFolder
from octlm.train.options import TrainOptions

#: Version of the data layout the page reads (web/src/run/data.ts).
VIEW_FORMAT = 1
#: The page draws at most this many positions in its similarity map.
MAX_POSITIONS = 256


def run_position_vectors(model: Decoder, length: int | None = None) -> PositionVectors | None:
    """The run's position vectors for positions ``0 .. length - 1``, or ``None``; the scheme decides.

    ``length`` defaults to ``min(context_length, MAX_POSITIONS)``. Schemes
    that add rows to the embedding give those rows
    (:func:`octlm.inspect.diagnostics.position_vectors`); others may compute vectors
    of their own (RoPE: the cos/sin of its angles) or give ``None``
    (``explorer_vectors`` of its :class:`~octlm.model.positions.SchemeFacts`).
    """
    length = length or min(model.config.context_length, MAX_POSITIONS)
    return facts_of(model.positions).explorer_vectors(model.positions, position_vectors(model, length), length)


def position_note(scheme: str) -> str:
    """Why a scheme has no position vectors to compare, for schemes where :func:`run_position_vectors` gives
    ``None``."""
    return facts_of(scheme).explorer_note


def pca_2d(table: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Project the rows of ``table`` [N, C] on their first two principal components.

    Centres the rows and takes the SVD in float64. The sign of each component
    is fixed so its largest loading is positive, so the picture does not flip
    between runs of the same numbers.

    Returns:
        ``(coords [N, 2], explained [2])``: the projected rows and the fraction
        of the total variance each component explains.

    Raises:
        ValueError: when the table has fewer than 2 rows or 2 columns.
    """
    x = table.detach().to(torch.float64).cpu()
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"pca_2d needs a [N >= 2, C >= 2] table, got {list(x.shape)}")
    x = x - x.mean(dim=0, keepdim=True)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    components = vh[:2]
    signs = torch.sign(components[torch.arange(2), components.abs().argmax(dim=1)])
    components = components * signs[:, None]
    coords = x @ components.T
    variance = s**2
    explained = (variance[:2] / variance.sum()).numpy() if variance.sum() > 0 else np.zeros(2)
    return coords.numpy(), explained


def token_counts(run_dir: str | Path, vocab_size: int) -> np.ndarray | None:
    """How often each token id occurs in the run's training split, int64 [vocab_size], or ``None``.

    ``None`` when ``manifest.json`` or ``train.bin`` is absent (a run folder
    copied without its token files still loads).

    Raises:
        RunError: when ``train.bin`` exists but holds ids outside the vocabulary.
    """
    folder = RunFolder(run_dir)
    if not folder.manifest_path.is_file():
        return None
    manifest = folder.read_manifest()
    entry = manifest.get("tokens", {}).get("train")
    if not entry or not (folder.path / entry["file"]).is_file():
        return None
    tokens = folder.tokens("train", manifest)
    counts = np.bincount(np.asarray(tokens), minlength=vocab_size)
    if counts.shape[0] > vocab_size:
        raise RunError(
            f"{folder.path / entry['file']}: holds token ids up to {counts.shape[0] - 1}, "
            f"outside the vocabulary of {vocab_size}"
        )
    return counts.astype(np.int64)


def loss_curve(run_dir: str | Path) -> dict:
    """The run's training and validation loss from ``metrics.jsonl``.

    Returns:
        ``{"train": [[step, loss], ...], "eval": [[step, val_loss, val_bpb], ...]}``,
        losses in nats per token, bits per byte for ``val_bpb`` (``None`` when
        not recorded). A missing file gives empty lists.

    Raises:
        RunError: naming the file and line when a line is not a JSON object.
    """
    path = Path(run_dir) / METRICS
    train, evals = [], []
    if not path.is_file():
        return {"train": train, "eval": evals}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise RunError(f"{path}:{number}: not a JSON line ({err}); the metrics file is corrupted") from None
        if not isinstance(record, dict):
            raise RunError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        kind = record.get("kind")
        if kind == "train" and _finite(record.get("loss")):
            train.append([int(record["step"]), float(record["loss"])])
        elif kind == "eval" and _finite(record.get("val_loss")):
            bpb = record.get("val_bpb")
            evals.append([int(record["step"]), float(record["val_loss"]), float(bpb) if _finite(bpb) else None])
    return {"train": train, "eval": evals}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def token_labels(tokenizer: Tokenizer) -> list[str]:
    """Every token's readable text (:meth:`Tokenizer.token_str`), by id."""
    return [tokenizer.token_str(i) for i in range(tokenizer.vocab_size)]


def _pack(matrix: Tensor) -> dict:
    """A [rows, cols] matrix as little-endian float32 bytes in base64 (a third of JSON's size)."""
    array = np.ascontiguousarray(matrix.detach().cpu().float().numpy(), dtype="<f4")
    return {
        "rows": int(array.shape[0]),
        "cols": int(array.shape[1]),
        "float32_base64": base64.b64encode(array.tobytes()).decode("ascii"),
    }


def run_view(run_dir: str | Path, model: Decoder, tokenizer: Tokenizer) -> dict:
    """Everything the page shows about a run, as a JSON-ready dict (read by ``web/src/run/data.ts``).

    Keys: ``format``, ``name``, ``model`` (the config), ``summary`` (the step,
    ``val_loss`` in nats per token and ``val_bpb`` of the last evaluation), ``tokens``
    (texts), ``counts`` (training-split counts or ``None``), ``embedding``
    (the token table [vocab_size, d_model], packed), ``pca`` (``x``, ``y``,
    ``explained``), ``positions`` (packed vectors with ``source`` and
    ``description``, or ``None``), ``positions_note``, ``loss`` and
    ``attention`` (:func:`octlm.inspect.attention_view.run_attention` on the
    validation text, or ``None`` for a run folder without it).
    """
    from octlm.inspect.attention_view import run_attention

    run_dir = Path(run_dir)
    config = model.config
    table = model.token_embedding.weight.detach().float().cpu()
    coords, explained = pca_2d(table)
    counts = token_counts(run_dir, config.vocab_size)
    positions = run_position_vectors(model)
    loss = loss_curve(run_dir)
    final = loss["eval"][-1] if loss["eval"] else None
    val = _validation_tokens(run_dir)
    return {
        "format": VIEW_FORMAT,
        "name": run_dir.resolve().name,
        "model": {**config.to_dict(), "layers": layout_text(config.layers)},  # the page shows the layout as written
        "summary": {
            "steps": final[0] if final else None,
            "val_loss": final[1] if final else None,
            "val_bpb": final[2] if final else None,
        },
        "tokens": token_labels(tokenizer),
        "counts": None if counts is None else counts.tolist(),
        "embedding": _pack(table),
        "pca": {
            "x": [round(float(v), 5) for v in coords[:, 0]],
            "y": [round(float(v), 5) for v in coords[:, 1]],
            "explained": [float(v) for v in explained],
        },
        "positions": None
        if positions is None
        else {**_pack(positions.vectors), "source": positions.source, "description": positions.description},
        "positions_note": "" if positions is not None else facts_of(model.positions).explorer_note,
        "loss": loss,
        "attention": None if val is None else run_attention(model, val, tokenizer),
    }


def _validation_tokens(run_dir: Path) -> np.ndarray | None:
    """The run's validation token stream, or ``None`` when the folder lacks it (a run copied without its token files
    still loads)."""
    folder = RunFolder(run_dir)
    if not folder.manifest_path.is_file() or "val" not in folder.read_manifest().get("tokens", {}):
        return None
    try:
        return folder.tokens("val")
    except RunError:
        return None


#: The files ``octlm embeddings`` writes: a folder holding only these is its earlier output.
FIGURES = dict(zip(("positions", "pca"), EMBEDDINGS_FIGURES, strict=True))


@dataclass
class EmbeddingsOptions:
    """Everything ``octlm embeddings`` takes."""

    run: str = option(REQUIRED, "run folder made by octlm train", metavar="RUN_DIR")
    token: list[str] = option(
        [],
        f"tokens whose neighbours to show (default: the 5 most frequent): {TOKEN_RULE}",
        nargs="+",
        action="extend",
        metavar="TEXT",
    )
    k: int = option(8, "neighbours per token", bounds=at_least(1))
    out: str | None = option(
        None,
        "folder for the figures (default: RUN_DIR/embeddings); earlier figures there are "
        "replaced, a folder holding anything else is refused",
        metavar="DIR",
    )
    overwrite: bool = option(
        False,
        "accepted for scripts written for other commands; earlier figures are always replaced and "
        "other files never are",
    )
    threads: int | None = same_as(TrainOptions, "threads")


def _chosen_tokens(
    opts: EmbeddingsOptions, tokenizer: Tokenizer, counts: np.ndarray | None, vocab_size: int
) -> list[int]:
    """The ids of ``--token``, else the 5 most frequent tokens (``<|endoftext|>`` aside), else ids 1-5."""
    from octlm.inspect.bench import parse_token

    if opts.token:
        return [parse_token(spec, tokenizer, vocab_size) for spec in opts.token]
    if counts is not None:
        return [int(i) for i in (-counts).argsort(kind="stable") if int(i) != tokenizer.eot_id][:5]
    return list(range(1, min(6, vocab_size)))


def _check_out(folder: RunFolder) -> None:
    """The one overwrite policy (:meth:`RunFolder.check_target`): earlier figures are replaced, a folder holding
    anything else never is.

    Even with ``--overwrite``: ``--out`` naming the run itself, or a folder of a person's files, must never be emptied.
    """

    def refuse(found: RunFolder) -> str | None:
        if {p.name for p in found.path.iterdir()} <= set(FIGURES.values()):
            return None
        what = "an octlm run" if found.is_octlm_run() else "files that are not octlm embeddings figures"
        return (
            f"--out {found}: holds {what}, which octlm embeddings never replaces; "
            "choose a new or empty folder (default: RUN_DIR/embeddings)"
        )

    folder.check_target(True, refuse, "")


def embeddings(opts: EmbeddingsOptions, report: Reporter) -> dict:
    """Run ``octlm embeddings``: nearest tokens to each chosen token, ``positions.png`` and ``tokens-pca.png``.

    The figures are written into a hidden folder beside ``--out`` that
    replaces it only when complete (:meth:`RunFolder.staged`).
    Returns the result dict (run, tokens with their neighbours, figures, pca_explained, and, when the run folder
    keeps its token files, ``rows``: the table's rows its training split selects and those it never does,
    :func:`octlm.inspect.unseen_rows.seen_and_unseen`).

    Raises:
        OctlmError: for ``--k`` below 1, a missing or damaged run, a
            ``--token`` that is no token, or an ``--out`` holding other files
            without ``--overwrite``.
    """
    from octlm.data.token_display import visible_token
    from octlm.inspect.diagnostics import nearest_tokens
    from octlm.inspect.figures import pca_figure, position_figure, save_png
    from octlm.run.load import load_run

    check_fields(opts)
    model, tokenizer = load_run(opts.run, "cpu")
    config = model.config
    counts = token_counts(opts.run, config.vocab_size)
    ids = _chosen_tokens(opts, tokenizer, counts, config.vocab_size)
    out = RunFolder(Path(opts.out) if opts.out else Path(opts.run) / EMBEDDINGS)
    _check_out(out)

    entries, lines = [], ["nearest tokens by cosine similarity:"]
    for token_id in ids:
        near = nearest_tokens(model, token_id, opts.k, tokenizer.token_str)
        entries.append(
            {"token": token_id, "text": tokenizer.token_str(token_id), "neighbours": [n.__dict__ for n in near]}
        )
        shown = ", ".join(f"{visible_token(n.label)} {n.score:+.3f}" for n in near)
        lines.append(f"  {visible_token(tokenizer.token_str(token_id)):>12} (#{token_id}): {shown}")

    title = (
        f"octlm run {Path(opts.run).resolve().name}: {config.position} positions, vocab_size {config.vocab_size}, "
        f"d_model {config.d_model}"
    )
    positions = run_position_vectors(model)
    coords, explained = pca_2d(model.token_embedding.weight)
    neighbours = {e["token"]: [n["index"] for n in e["neighbours"]] for e in entries}
    with out.staged() as staging:
        if positions is not None:
            save_png(position_figure(positions, title), staging / FIGURES["positions"])
        scatter = pca_figure(coords, explained, token_labels(tokenizer), counts, title, ids, neighbours)
        save_png(scatter, staging / FIGURES["pca"])
    figures = {key: str(out.path / name) for key, name in FIGURES.items()}
    if positions is None:
        figures["positions"] = None
        lines.append(f"no position heatmap: {facts_of(model.positions).explorer_note}")
    lines += [f"wrote {path}" for path in figures.values() if path]
    result = {
        "run": str(opts.run),
        "tokens": entries,
        "figures": figures,
        "pca_explained": [float(v) for v in explained],
    }
    if counts is not None:
        seen, unseen = seen_and_unseen(model.token_embedding.weight, counts)
        result["rows"] = {"seen": dataclasses.asdict(seen), "unseen": dataclasses.asdict(unseen)}
        lines += [line for line in [unseen_line(seen, unseen)] if line]
    report.result(result, "\n".join(lines))
    return result


__all__ = [
    "FIGURES",
    "MAX_POSITIONS",
    "EmbeddingsOptions",
    "embeddings",
    "PositionVectors",
    "loss_curve",
    "pca_2d",
    "position_note",
    "run_position_vectors",
    "run_view",
    "token_counts",
    "token_labels",
]
