"""``octlm attention``: every layer's attention on a piece of text, as heatmaps and statistics.

The text is ``--prompt``, the first ``--length`` tokens of ``--text`` (read as
``octlm train`` reads it), or of the run's validation split. One forward pass
under :func:`octlm.model.attention_maps.record_attention` gives each layer's
probabilities; :mod:`octlm.inspect.attention_statistics` turns them into
entropy, distance, sink mass and the largest logit per layer and head. The
figures are drawn by :mod:`octlm.inspect.attention_figures`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from octlm.declare import REQUIRED, at_least, check_fields, option, same_as
from octlm.errors import OctlmError
from octlm.inspect.attention_statistics import (
    AttentionStatistics,
    attention_distance,
    attention_entropy,
    attention_statistics,
    sink_mass,
    uniform_attention,
)
from octlm.inspect.sample import SampleOptions
from octlm.model import Decoder
from octlm.model.attention_maps import AttentionMaps, record_attention
from octlm.model.positions import facts_of, unbounded_schemes
from octlm.report import Reporter, memory_size
from octlm.run.folder import ATTENTION, ATTENTION_FILES, RunFolder
from octlm.train.options import TrainOptions

#: What ``octlm attention`` writes besides one ``layer-N.png`` per layer (names the run folder's rule admits).
STATISTICS_JSON, STATISTICS_FIGURE = "statistics.json", "statistics.png"
#: Bytes per attention entry [layer, head, query, key] the recorded pass holds: probabilities and logits, float32.
MAP_BYTES = 2 * 4


def layer_figure(layer: int) -> str:
    """The file name of layer ``layer``'s heatmaps (0-based, as ``AttentionMaps.probabilities``)."""
    return f"layer-{layer}.png"


@dataclass
class AttentionOptions:
    """Everything ``octlm attention`` takes."""

    run: str = option(REQUIRED, "run folder made by octlm train", metavar="RUN_DIR")
    prompt: str | None = same_as(
        SampleOptions,
        "prompt",
        default=None,
        help="text whose attention to show (default: the start of the run's validation text)",
    )
    text: str | None = option(
        None,
        "a text file to read instead of --prompt, as octlm train reads --text (a built-in corpus "
        "name works too); its first --length tokens are shown",
        metavar="FILE",
    )
    encoding: str = same_as(TrainOptions, "encoding")
    length: int | None = option(
        None,
        "tokens to show: the first L of --text or of the validation text; a --prompt may "
        "have up to L (default: the run's context_length)",
        bounds=at_least(1),
        metavar="L",
    )
    out: str | None = option(
        None,
        "folder for the figures and statistics (default: RUN_DIR/attention); earlier output there "
        "is replaced, a folder holding anything else is refused",
        metavar="DIR",
    )
    overwrite: bool = option(
        False,
        "accepted for scripts written for other commands; earlier output is always replaced and other files never are",
    )
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")


def _check_choice(opts: AttentionOptions) -> None:
    """One source of text at most, and a prompt with something in it."""
    if opts.prompt is not None and opts.text is not None:
        raise OctlmError(
            "--prompt and --text are both given; give one of them (or neither, for the run's validation text)"
        )
    if opts.prompt == "":  # spaces and newlines are tokens too (a code model's indentation), so only nothing is empty
        raise OctlmError("--prompt is empty; give some text, or leave --prompt out to read the run's validation text")


def checked_length(opts: AttentionOptions, model: Decoder) -> int:
    """``--length``, or the run's context_length; refused past a learned table's last row.

    Raises:
        OctlmError: naming the table's size and the fix.
    """
    length = opts.length or model.config.context_length
    limit = model.max_length
    label = facts_of(model.positions).label
    if limit is not None and length > limit:
        raise OctlmError(
            f"--length {length}: {label} has {limit} rows (positions 0..{limit - 1}), "
            f"none for position {limit} on; give --length {limit} or less, "
            f"or look at a run of a scheme without a table limit ({', '.join(unbounded_schemes())})"
        )
    return length


#: How each source of tokens reads in a heading.
SOURCE_NAMES = {"prompt": "the prompt", "text": "--text", "validation": "the run's validation text"}


def token_ids(opts: AttentionOptions, run: RunFolder, tokenizer, length: int, model: Decoder) -> tuple[list[int], str]:
    """The ids to look at and where they come from (``"prompt"``, ``"text"``, ``"validation"``).

    Raises:
        OctlmError: for a prompt longer than ``length`` tokens, a ``--text``
            octlm cannot read (:func:`octlm.data.reading.read_documents`), or a
            run without a validation split when neither is given.
    """
    if opts.prompt is not None:
        ids = tokenizer.encode(opts.prompt)
        if len(ids) > length:
            limit = model.max_length
            fix = (
                f"shorten it to {limit} tokens ({facts_of(model.positions).label} has {limit} rows)"
                if limit is not None and len(ids) > limit
                else f"shorten it or give --length {len(ids)}"
            )
            raise OctlmError(f"--prompt is {len(ids)} tokens, more than --length {length}; {fix}")
        return ids, "prompt"
    if opts.text is not None:
        return _text_ids(opts, tokenizer, length), "text"
    folder_manifest = run.read_manifest() if run.manifest_path.is_file() else {}
    if "val" not in folder_manifest.get("tokens", {}):
        raise OctlmError(f"{run}: has no validation text (val.bin) to show; give --prompt TEXT or --text FILE")
    return [int(i) for i in run.tokens("val", folder_manifest)[:length]], "validation"


def _text_ids(opts: AttentionOptions, tokenizer, length: int) -> list[int]:
    """The first ``length`` ids of ``--text``'s documents, ``<|endoftext|>`` after each, as octlm train streams them."""
    from octlm.data.reading import read_documents

    docs, _ = read_documents([opts.text], opts.encoding)
    ids: list[int] = []
    for doc in docs:  # documents one at a time: a large --text stops being read once it has enough
        ids += tokenizer.encode(doc.text) + [tokenizer.eot_id]
        if len(ids) >= length:
            break
    return ids[:length]


def check_map_memory(model: Decoder, length: int, device: torch.device, asked: int | None = None) -> None:
    """Refuse a length whose recorded maps (:data:`MAP_BYTES` per entry) would not fit half the memory this process
    may take: the device's, or less under a process limit (:func:`octlm.train.memory_limit.memory_limit`).

    Raises:
        OctlmError: naming the length, the memory limit and the longest that fits.
    """
    from octlm.train.memory_limit import memory_limit

    config = model.config
    need = MAP_BYTES * config.n_layers * config.n_heads * length**2
    limit = memory_limit(device)
    if limit is not None and need > limit.n_bytes / 2:
        longest = int((limit.n_bytes / 2 / (MAP_BYTES * config.n_layers * config.n_heads)) ** 0.5)
        raise OctlmError(
            f"--length {asked or length}: the attention maps of {length:,} tokens, {config.n_layers} layers x "
            f"{config.n_heads} heads, need about "
            f"{memory_size(need, 1)}, more than half {limit.describe(0)}; give --length {longest} or less"
        )


def record(model: Decoder, ids: list[int], device: torch.device) -> AttentionMaps:
    """One forward pass of ``ids`` (batch 1) under :func:`record_attention`; the maps, moved to the CPU."""
    with torch.no_grad(), record_attention(model) as maps:
        model(torch.tensor([ids], device=device))
    maps.probabilities[:] = [p.cpu() for p in maps.probabilities]
    maps.logits[:] = [s.cpu() for s in maps.logits]
    return maps


def _check_out(folder: RunFolder) -> None:
    """The one overwrite policy (:meth:`RunFolder.check_target`): earlier output is replaced, a folder holding anything
    else never is."""

    def refuse(found: RunFolder) -> str | None:
        if all(ATTENTION_FILES.fullmatch(p.name) for p in found.path.iterdir()):
            return None
        what = "an octlm run" if found.is_octlm_run() else "files that octlm attention did not write"
        return (
            f"--out {found}: holds {what}, which octlm attention never replaces; "
            f"choose a new or empty folder (default: RUN_DIR/{ATTENTION})"
        )

    folder.check_target(True, refuse, "")


def summary_lines(stats: AttentionStatistics) -> list[str]:
    """One line per layer and head: mean entropy, mean distance, sink mass and max logit; then uniform attention's, to
    compare."""
    T = stats.entropy.shape[-1]
    uniform = uniform_attention(T, T)
    lines = []
    for layer in range(stats.mean_entropy.shape[0]):
        for head in range(stats.mean_entropy.shape[1]):
            lines.append(
                f"  layer {layer} head {head}: entropy {stats.mean_entropy[layer, head]:.3f} nats, distance "
                f"{stats.mean_distance[layer, head]:.2f} tokens, first-token mass {stats.sink_mass[layer, head]:.3f}, "
                f"max logit {stats.max_logit[layer, head]:.2f}"
            )
    lines.append(
        f"  uniform attention over these {T} token{'' if T == 1 else 's'}: entropy "
        f"{attention_entropy(uniform).mean():.3f} nats, distance "
        f"{attention_distance(uniform).mean():.2f} tokens, first-token mass {sink_mass(uniform).mean():.3f}"
    )
    return lines


def attention(opts: AttentionOptions, report: Reporter) -> dict:
    """Run ``octlm attention``: heatmaps of every layer's heads and their statistics for one piece of text.

    Writes ``layer-N.png`` for each layer, ``statistics.png`` and
    ``statistics.json`` into ``--out`` (default ``RUN_DIR/attention``), built
    in a hidden folder that replaces it only when complete
    (:meth:`RunFolder.staged`). Returns the result dict: run, source, tokens,
    figures, statistics (:meth:`AttentionStatistics.to_dict`).

    Raises:
        OctlmError: for a missing run or one stopped before its weights, both
            ``--prompt`` and ``--text``, an empty prompt, a prompt longer than
            ``--length``, ``--length`` past a learned table or below 1, maps
            too large for memory, or an ``--out`` holding other files.
    """
    from octlm.fileio import atomic_write_json
    from octlm.inspect.attention_figures import layer_heatmaps, statistics_figure
    from octlm.inspect.figures import save_png
    from octlm.inspect.frequencies import FREQUENCY_FIGURE, frequency_figure, frequency_usage, usage_lines
    from octlm.run.load import load_run
    from octlm.train.device import resolve_device

    check_fields(opts)
    _check_choice(opts)
    device = resolve_device(opts.device)
    model, tokenizer = load_run(opts.run, device)
    run = RunFolder(opts.run, "--run")
    length = checked_length(opts, model)
    ids, source = token_ids(opts, run, tokenizer, length, model)
    check_map_memory(model, len(ids), device, asked=opts.length)
    out = RunFolder(Path(opts.out) if opts.out else Path(opts.run) / ATTENTION)
    _check_out(out)

    maps = record(model, ids, device)
    stats = attention_statistics(maps.probabilities, maps.logits)
    usage = frequency_usage(maps, model)
    labels = [tokenizer.token_str(i) for i in ids]
    shown = f"{len(ids)} token{'' if len(ids) == 1 else 's'} of {SOURCE_NAMES[source]}"
    title = f"octlm run {Path(opts.run).resolve().name}: {facts_of(model.positions).label}, {shown}"
    statistics = stats.to_dict()
    figures = [str(out.path / layer_figure(layer)) for layer in range(len(maps.probabilities))]
    with out.staged() as staging:
        for layer, p in enumerate(maps.probabilities):
            save_png(layer_heatmaps(p[0], stats, layer, labels, title), staging / layer_figure(layer))
        save_png(statistics_figure(stats, title, model.config.context_length), staging / STATISTICS_FIGURE)
        if usage:
            save_png(frequency_figure(usage, title), staging / FREQUENCY_FIGURE)
        atomic_write_json(
            staging / STATISTICS_JSON,
            {"run": str(opts.run), "source": source, "tokens": ids, "statistics": statistics, "frequencies": usage},
        )
    figures.append(str(out.path / STATISTICS_FIGURE))
    figures += [str(out.path / FREQUENCY_FIGURE)] if usage else []
    result = {
        "run": str(opts.run),
        "source": source,
        "tokens": len(ids),
        "position": model.config.position,
        "figures": figures,
        "statistics_file": str(out.path / STATISTICS_JSON),
        "statistics": statistics,
        "frequencies": usage,
    }
    lines = [f"attention on {shown} (mean over queries):", *summary_lines(stats), *usage_lines(usage)]
    report.result(result, "\n".join([*lines, *(f"wrote {path}" for path in [*figures, result["statistics_file"]])]))
    return result


__all__ = [
    "MAP_BYTES",
    "STATISTICS_FIGURE",
    "STATISTICS_JSON",
    "AttentionOptions",
    "attention",
    "check_map_memory",
    "checked_length",
    "layer_figure",
    "record",
    "summary_lines",
    "token_ids",
]
