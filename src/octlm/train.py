"""Training: corpus to run folder.

One function, :func:`train`, does the whole job: read and split the text,
train the tokenizer on the training split, pack both splits into token files,
build the decoder, optimise it with AdamW (linear warmup, cosine decay,
gradient clipping) until a step or time limit, evaluate periodically, and
write the run folder described in :mod:`octlm.run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from octlm import data as corpus
from octlm import distributed
from octlm.checkpoint import (
    CHECKPOINT,
    CheckpointError,
    capture_rng,
    check_digests,
    config_digest,
    load_checkpoint,
    load_optimizer_tensors,
    model_tensors,
    restore_rng,
    rng_of,
    run_digests,
    save_checkpoint,
)
from octlm.diagnostics import nearest_positions, nearest_tokens
from octlm.errors import OctlmError, RunError
from octlm.evaluate import EvalResult, evaluate
from octlm.fileio import atomic_write_json, check_out_folder, make_folder, make_staging
from octlm.fileio import umask as fileio_umask
from octlm.model import Decoder, DecoderConfig, cross_entropy
from octlm.options import DEFAULT_MAX_STEPS, TrainOptions, check_options, given_options, resume_options
from octlm.report import Reporter
from octlm.run import CONFIG, MANIFEST, METRICS, TOKENIZER, WEIGHTS, is_octlm_run, load_config, save_weights, write_config
from octlm.tokenizer import Tokenizer, printable_text, visible_token


class TrainingError(OctlmError):
    """Training cannot go on (a non-finite loss, say); the message names the step."""


@dataclass
class Corpus:
    """A prepared corpus: tokenizer and the two token streams [N] (memmaps)."""

    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    manifest: dict


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA, then Apple MPS, then the CPU; other names are checked.

    Raises:
        OctlmError: for a device that does not exist on this machine.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise OctlmError(f"--device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OctlmError(f"--device {name}: this machine has no CUDA GPU (or this torch build has no CUDA); use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise OctlmError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise OctlmError(f"--device {name}: MPS is not available here; use --device cpu")
    return device


def autocast_for(device: torch.device, dtype: str):
    """The autocast context for ``--dtype`` (bfloat16 on CUDA by default)."""
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if dtype == "float32":
        return contextlib.nullcontext(), "float32"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16), "bfloat16"


def check_run_dir(out: str | None, overwrite: bool, flag: str = "--out") -> Path:
    """The run folder ``out`` names (default ``runs/<date>-<time>``), checked but not touched.

    Raises:
        OctlmError: naming ``flag``: when the path cannot be a folder
            (:func:`octlm.fileio.check_out_folder`), holds files and
            ``overwrite`` is not set, or holds files that are not an octlm run.
    """
    if out is None:
        out = f"runs/{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(out)
    check_out_folder(run_dir, flag)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not is_octlm_run(run_dir):
            raise OctlmError(f"{flag} {run_dir}: holds files that are not an octlm run, which octlm never replaces; choose a new or empty folder")
        if not overwrite:
            raise OctlmError(f"{flag} {run_dir}: already holds an octlm run; choose another {flag} or pass --overwrite to replace it")
        if (run_dir / ".lock").exists():
            lock = lock_run(run_dir)  # raises while another process trains it: --overwrite must not pull it away
            if lock is not None:
                lock.close()
    return run_dir


def prepare_run_dir(out: str | None, overwrite: bool, flag: str = "--out") -> Path:
    """Create the run folder, refusing to clobber an existing one unless ``overwrite``."""
    run_dir = check_run_dir(out, overwrite, flag)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        shutil.rmtree(run_dir)
    make_folder(run_dir, flag)
    return run_dir


@contextlib.contextmanager
def staged_run_dir(run_dir: Path):
    """A hidden folder beside ``run_dir`` to prepare a run in; it becomes ``run_dir`` only on success.

    So bad input never leaves a half-made run folder behind, and
    ``--overwrite`` with bad input keeps the run it would have replaced.
    """
    staging = make_staging(run_dir)
    staging.chmod(0o777 & ~fileio_umask())
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if run_dir.exists():
        shutil.rmtree(run_dir)  # checked by check_run_dir: empty, or an octlm run with --overwrite
    os.replace(staging, run_dir)


def prepare_corpus(opts: TrainOptions, run_dir: Path, report: Reporter) -> Corpus:
    """Read, split, tokenize and store the corpus; write ``tokenizer.json`` and ``manifest.json``."""
    t0 = time.perf_counter()
    docs, info = corpus.read_documents(opts.text or None, opts.encoding)
    train_texts, val_texts = corpus.split_documents(docs, opts.val_fraction)
    n_bytes = sum(d.n_bytes for d in docs)
    source = "the Python standard library" if info["source"]["kind"] == "python-stdlib" else f"{len(docs)} file(s)"
    report.event("corpus", f"corpus: {source}, {len(docs)} documents, {n_bytes / 1e6:.2f} MB", documents=len(docs), bytes=n_bytes, skipped=len(info["skipped"]))
    if info["skipped"]:
        report.warn(f"skipped {len(info['skipped'])} entries that are not text: empty, binary or special files, or octlm runs (manifest.json lists them)")
    # The standard library repeats a few files on purpose; only the person's own repeats are worth a warning.
    repeats = info["duplicates"] if info["source"]["kind"] != "python-stdlib" else []
    for dup in repeats[:3]:
        report.warn(f"{dup['path']} repeats {dup['same_as']} byte for byte; it is trained on twice")
    if len(repeats) > 3:
        report.warn(f"... and {len(repeats) - 3} more repeated file(s) (manifest.json lists them)")
    tokenizer = Tokenizer.train(train_texts, opts.vocab_size)
    if tokenizer.vocab_size < opts.vocab_size:
        report.warn(f"the training text supports only {tokenizer.vocab_size} tokens; using that instead of --vocab-size {opts.vocab_size}")
    tokenizer.save(run_dir / TOKENIZER)
    streams = {}
    for split, texts in (("train", train_texts), ("val", val_texts)):
        ids = corpus.encode_stream(tokenizer, texts)
        streams[split] = corpus.write_tokens(run_dir / f"{split}.bin", ids)
    manifest = {
        **info,
        "files": [{"path": d.path, "bytes": d.n_bytes, "sha256": d.sha256} for d in docs],
        "total_bytes": n_bytes,
        "val_fraction": opts.val_fraction,
        "encoding": opts.encoding,
        "tokens": streams,
    }
    atomic_write_json(run_dir / MANIFEST, manifest)
    train = corpus.open_tokens(run_dir / "train.bin", streams["train"]["dtype"])
    val = corpus.open_tokens(run_dir / "val.bin", streams["val"]["dtype"])
    need = opts.context_length + 1
    if len(val) < need:
        raise corpus.DataError(
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


def lr_at(step: int, progress: float, opts: TrainOptions) -> float:
    """Learning rate: linear warmup over ``warmup_steps``, then cosine decay to ``min_lr_ratio * peak``.

    ``progress`` in [0, 1] is how far the run is towards its limit (steps or
    seconds, whichever is nearer), so a time-budgeted run decays fully too.
    """
    peak = opts.learning_rate
    if step < opts.warmup_steps:
        return peak * (step + 1) / opts.warmup_steps
    floor = peak * opts.min_lr_ratio
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


def make_optimizer(model: Decoder, opts: TrainOptions, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and tables only (not biases or norm gains)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=opts.learning_rate, betas=(opts.beta1, opts.beta2), fused=device.type == "cuda")


def open_corpus(run_dir: Path) -> Corpus:
    """The prepared corpus of an existing run folder: its tokenizer and token files.

    Raises:
        RunError: naming the file when one is missing or unreadable.
    """
    from octlm.run import read_json

    manifest = read_json(run_dir / MANIFEST)
    tokenizer_path = run_dir / TOKENIZER
    try:
        tokenizer = Tokenizer.load(tokenizer_path)
    except Exception as err:  # tokenizers raises plain Exception on a bad file
        raise RunError(f"{tokenizer_path}: cannot read tokenizer ({err})") from None
    streams = []
    for split in ("train", "val"):
        entry = manifest.get("tokens", {}).get(split)
        if entry is None or not (run_dir / entry["file"]).is_file():
            raise RunError(f"{run_dir / f'{split}.bin'}: token file missing; the run folder is incomplete")
        streams.append(corpus.open_tokens(run_dir / entry["file"], entry["dtype"], entry["count"]))
    return Corpus(tokenizer, streams[0], streams[1], manifest)


class StopSignals:
    """Turn Ctrl-C (SIGINT) and SIGTERM into a request to stop after the current step.

    The step in flight finishes, so the model and optimizer are never saved
    half-updated. In one process a second Ctrl-C stops at once (the last
    checkpoint on disk stays as it was); under torchrun, which forwards
    signals to every process, repeats only confirm the request. Handlers are
    installed only from the main thread and put back on exit.
    """

    def __init__(self, force_on_repeat: bool) -> None:
        self.requested = False
        self.force_on_repeat = force_on_repeat
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.requested and self.force_on_repeat and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def train(
    opts: TrainOptions,
    report: Reporter | None = None,
    *,
    resume: str | Path | None = None,
    given: set[str] | None = None,
    step_hook: Callable[[int], None] | None = None,
) -> dict:
    """Run ``octlm train``: returns the result dict (also the last ``--json`` line).

    The result holds at least ``val_bpb`` (bits per byte), ``val_loss`` (nats
    per token), ``val_perplexity``, ``tokens_per_second``, ``steps``,
    ``train_seconds``, ``interrupted`` and ``run_dir``.

    Args:
        opts: the options; with ``resume``, only those in ``given`` count.
        report: where progress goes.
        resume: a run folder to continue from its ``checkpoint.safetensors``.
            On CPU a step-limited run then ends with weights bitwise equal
            to an uninterrupted run's.
        given: the option names the person gave (flags or TOML keys); by
            default those that differ from their defaults.
        step_hook: called with the step number before each optimizer step
            (tests use it to send a signal or break the weights).

    Under torchrun (``WORLD_SIZE`` > 1) every process calls this; rank 0
    prepares the data and writes every file, and the processes train one
    model with DistributedDataParallel, each on its share of every batch.

    Raises:
        OctlmError: for bad options or input (nothing is written for bad
            options); CheckpointError when a checkpoint cannot be read, does
            not match the run's files or cannot be written (the previous one
            is kept); TrainingError when the loss stops being finite.
    """
    report = report or Reporter()
    run_dir = Path(resume) if resume is not None else None
    changes: list[str] = []
    if run_dir is not None:
        if run_dir.is_file():
            raise OctlmError(f"--resume {run_dir}: is a file; give the run folder that holds it ({run_dir.parent})")
        if not run_dir.is_dir():
            raise OctlmError(f"--resume {run_dir}: no such run folder")
        stored_train = load_config(run_dir).get("train") if (run_dir / CONFIG).is_file() else None
        if isinstance(stored_train, dict) and "imported_from" in stored_train:
            raise OctlmError(
                f"--resume {run_dir}: this run was made by octlm import-hf and holds no training state to continue; "
                f"sample from it, or train a new run with --out"
            )
        opts, changes = resume_options(run_dir, opts, given_options(opts) if given is None else set(given))
        try:
            check_options(opts)
        except OctlmError as err:
            raise OctlmError(f"{err} (from the flags given now or the run's {run_dir / CONFIG})") from None
    else:
        check_options(opts)
    group, device_name = distributed.setup(opts.device)
    try:
        if not group.is_main:
            report = distributed.SilentReporter()
        return _train(opts, report, group, device_name, run_dir, changes, step_hook)
    finally:
        group.close()


def step_memory_bytes(opts: TrainOptions) -> int:
    """A rough upper estimate of one training step's activation memory (bytes, float32).

    Per token: the logits with their softmax and gradient (3 x vocab_size
    floats) and, per layer, about 24 x d_model floats of saved activations
    plus two rows of attention weights per head when the fused kernel is
    not used. Weights and optimizer state are small beside it at octlm's sizes.
    """
    tokens = opts.batch_size * opts.context_length
    per_token = 3 * opts.vocab_size + opts.n_layers * (24 * opts.d_model + 2 * opts.n_heads * opts.context_length)
    return 4 * tokens * per_token


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` in bytes (GPU memory, or the machine's RAM); ``None`` when the system will not say."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(opts: TrainOptions, device: torch.device) -> None:
    """Refuse a batch whose activations alone would not fit the device's memory (instead of being OOM-killed)."""
    total = device_memory_bytes(device)
    if total is None:
        return
    need = step_memory_bytes(opts)
    if need > total:
        logits = 3 * opts.vocab_size
        layers = opts.n_layers * (24 * opts.d_model + 2 * opts.n_heads * opts.context_length)
        fix = "--batch-size, or " + ("--vocab-size" if logits >= layers else "--n-layers or --d-model")
        raise OctlmError(
            f"this model and batch need about {need / 2**30:,.0f} GiB of activations per step, more than this {device.type} "
            f"has ({total / 2**30:.0f} GiB): --batch-size {opts.batch_size} x --context-length {opts.context_length} tokens, "
            f"each holding about 3 x --vocab-size {opts.vocab_size} logits and --n-layers {opts.n_layers} x "
            f"(24 x --d-model {opts.d_model} + 2 x --n-heads {opts.n_heads} x --context-length) activations; lower {fix}"
        )


def lock_run(run_dir: Path):
    """Hold an exclusive lock on ``run_dir`` for this process's lifetime (released even by kill -9).

    Raises:
        OctlmError: when another octlm process is training the same run.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; resume stays the user's responsibility
        return None
    handle = (run_dir / ".lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise OctlmError(f"{run_dir}: another octlm process ({holder}) is training this run; wait for it or stop it first") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def _train(opts, report, group, device_name, resume_dir, changes, step_hook) -> dict:
    device = resolve_device(device_name)
    check_memory(opts, device)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    max_steps = opts.max_steps if opts.max_steps is not None else (None if opts.time_budget else DEFAULT_MAX_STEPS)

    # The run folder and the data: made once, by rank 0; read by everyone.
    ckpt = None
    if resume_dir is None:

        def prepare() -> Path:
            target = check_run_dir(opts.out, opts.overwrite)
            report.event("run", f"run folder: {target}", run_dir=str(target))
            with staged_run_dir(target) as staging:
                prepare_corpus(opts, staging, report)
            return target

        run_dir = group.run_on_main(prepare)
        run_dir = Path(group.gather(str(run_dir) if group.is_main else None)[0])
        lock = lock_run(run_dir) if group.is_main else None
    else:
        run_dir = resume_dir
        lock = lock_run(run_dir) if group.is_main else None
        ckpt = load_checkpoint(run_dir / CHECKPOINT)
    data = open_corpus(run_dir)
    global_blocks = corpus.count_blocks(len(data.train), opts.context_length)
    if opts.batch_size * group.world_size > global_blocks:
        report.warn(
            f"a step takes {opts.batch_size * group.world_size} blocks but the training text holds only {global_blocks}; "
            f"every step repeats blocks (lower --batch-size or give more text)"
        )

    if ckpt is None:
        config = opts.model_config(data.tokenizer.vocab_size)
        group.run_on_main(lambda: write_config(run_dir, config, {**opts.to_dict(), "max_steps": max_steps, "out": str(run_dir)}))
        stored = load_config(run_dir)
        known = {e["file"]: e["sha256"] for e in data.manifest["tokens"].values()}
        digests = group.run_on_main(lambda: run_digests(run_dir, stored, known))
        digests = group.gather(digests)[0]
    else:
        stored = load_config(run_dir)
        digests = ckpt.state["digests"]
        # Each process checks the files it is about to read.
        check_digests(ckpt.path, digests, run_digests(run_dir, stored))
        try:
            config = DecoderConfig.from_dict(stored["model"])
        except (TypeError, ValueError) as err:
            raise RunError(f"{run_dir / CONFIG}: invalid model config: {err}") from None
        global_batch = opts.batch_size * group.world_size
        if global_batch != ckpt.state["global_batch"]:
            then = ckpt.state["global_batch"]
            raise OctlmError(
                f"--batch-size {opts.batch_size} x {group.world_size} process(es) = {global_batch} blocks per step, but the run "
                f"trained on {then} ({ckpt.state['world_size']} x {then // ckpt.state['world_size']}); "
                f"keep the global batch: --batch-size {then // group.world_size if then % group.world_size == 0 else '?'}"
            )
        done_steps = max_steps is not None and ckpt.step >= max_steps
        done_time = opts.time_budget is not None and ckpt.state["elapsed_s"] >= opts.time_budget
        if done_steps or done_time:
            limit = f"--max-steps {max_steps}" if done_steps else f"--time-budget {opts.time_budget:g}s"
            raise OctlmError(
                f"--resume {run_dir}: the run is at step {ckpt.step}, already at or past {limit}; to train further give a larger "
                f"--max-steps or --time-budget (the total for the run, not an addition)"
            )
        if (max_steps, opts.time_budget) != (ckpt.state["max_steps"], ckpt.state["time_budget"]):
            changes.append(
                f"the run's limit is now {max_steps} steps" + (f" / {opts.time_budget:g}s" if opts.time_budget else "")
                + f" (was {ckpt.state['max_steps']} steps" + (f" / {ckpt.state['time_budget']:g}s" if ckpt.state["time_budget"] else "")
                + "): the learning-rate schedule stretches to the new end"
            )
        group.run_on_main(lambda: write_config(run_dir, config, {**opts.to_dict(), "max_steps": max_steps, "out": str(run_dir)}))
        # The rewrite may add options this octlm knows and the run's did not (at their
        # defaults); later checkpoints record the config as it now is.
        digests = {**digests, "config.json": config_digest(load_config(run_dir))}
        report.event("resume", f"resuming {run_dir} at step {ckpt.step}", run_dir=str(run_dir), step=ckpt.step)
        for change in changes:
            report.warn(f"{change}; the result will differ from an uninterrupted run")

    torch.manual_seed(opts.seed)
    model = Decoder(config).to(device)
    if group.active:
        # Same initial weights everywhere (DDP also broadcasts them), different dropout masks per rank.
        torch.manual_seed(opts.seed + 1_000_003 * group.rank)
    autocast, dtype_name = autocast_for(device, opts.dtype)
    report.event(
        "model",
        f"model: {model.num_parameters():,} parameters ({model.num_parameters(exclude_embeddings=True):,} without "
        f"embeddings), position={config.position}, device={device}, dtype={dtype_name}, threads={torch.get_num_threads()}"
        + (f", {group.world_size} processes ({group.backend})" if group.active else ""),
        parameters=model.num_parameters(),
        device=str(device),
        dtype=dtype_name,
        world_size=group.world_size,
    )
    optimizer = make_optimizer(model, opts, device)
    sampler = corpus.BlockSampler(len(data.train), config.context_length, opts.batch_size, opts.seed, group.rank, group.world_size)
    bytes_per_token = data.tokenizer.bytes_per_token

    # Where the run stands: fresh, or as the checkpoint left it.
    step, elapsed_before, step_seconds = 0, 0.0, 0.0
    window = {"tokens": 0, "seconds": 0.0, "loss": 0.0, "steps": 0}
    metrics_path = run_dir / METRICS
    if ckpt is not None:
        state = ckpt.state
        step, elapsed_before, step_seconds, window = state["step"], state["elapsed_s"], state["step_seconds"], dict(state["window"])
        model.load_state_dict(model_tensors(ckpt), strict=False)
        model.tie_weights()
        load_optimizer_tensors(ckpt.path, ckpt.tensors, model, optimizer)
        if group.is_main:
            _rewind_metrics(metrics_path, state["metrics_bytes"], report)
            _remove_stale_temporaries(run_dir, report)
    trainer = model
    if group.active:
        from torch.nn.parallel import DistributedDataParallel

        trainer = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    metrics = metrics_path.open("a", encoding="utf-8") if group.is_main else None
    if ckpt is not None:
        # Last, so nothing above draws from the generators after they are put back.
        saved = rng_of(ckpt, group.rank)
        if saved is not None:
            restore_rng(*saved)
        else:
            report.warn(f"the run had {ckpt.state['world_size']} process(es); rank {group.rank} starts a fresh dropout generator")

    def log(record: dict) -> None:
        if metrics is not None:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()

    def run_eval(at_step: int, max_blocks: int | None) -> EvalResult:
        # Every rank scores the same blocks (no communication); rank 0 logs.
        with autocast:
            result = evaluate(model, data.val, bytes_per_token, config.context_length, opts.batch_size, max_blocks, device)
        log({"step": at_step, "kind": "eval", **result.as_dict()})
        return result

    last_saved = step if ckpt is not None else -1

    def save(at_step: int, elapsed: float) -> None:
        nonlocal last_saved
        if at_step == last_saved:
            return
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            raise TrainingError(f"the weights stopped being finite by step {at_step}; nothing was saved. {_recovery_hint(run_dir, opts)}")
        rng = group.gather(capture_rng())
        if group.is_main:
            if metrics is not None:
                metrics.flush()
            state = {
                "step": at_step, "elapsed_s": elapsed, "step_seconds": step_seconds, "window": dict(window),
                "metrics_bytes": metrics_path.stat().st_size, "world_size": group.world_size,
                "global_batch": opts.batch_size * group.world_size, "max_steps": max_steps,
                "time_budget": opts.time_budget, "digests": digests, "torch": torch.__version__,
            }
            try:
                save_checkpoint(run_dir / CHECKPOINT, model, optimizer, state, rng)
                save_weights(run_dir / WEIGHTS, model, {"step": str(at_step)})
            except OSError as err:
                raise CheckpointError(
                    f"{run_dir / CHECKPOINT}: could not save the checkpoint of step {at_step}: {err.strerror or err}; "
                    f"the previous one ({_last_checkpoint_text(run_dir)}) is kept. "
                    f"Free some disk space and resume with: octlm train --resume {shlex.quote(str(run_dir))}"
                ) from None
        last_saved = at_step

    tokens_per_step = opts.batch_size * group.world_size * config.context_length
    budget_text = " and ".join(filter(None, [f"{max_steps} steps" if max_steps else None, f"{opts.time_budget:g}s" if opts.time_budget else None]))
    report.event(
        "train",
        f"training for {budget_text}, {tokens_per_step} tokens per step, a checkpoint every {opts.save_every} steps"
        if opts.save_every else f"training for {budget_text}, {tokens_per_step} tokens per step",
        max_steps=max_steps, time_budget=opts.time_budget, start_step=step,
    )
    bar = report.progress(max_steps if max_steps else opts.time_budget, "train", "step" if max_steps else "s")
    bar.update(step if max_steps else min(elapsed_before, opts.time_budget))
    elapsed, stop_requested = elapsed_before, False
    session_start = time.perf_counter()
    model.train()
    with StopSignals(force_on_repeat=not group.active) as signals:
        try:
            while True:
                if (max_steps is not None and step >= max_steps) or (opts.time_budget is not None and elapsed >= opts.time_budget):
                    break
                if stop_requested:
                    break
                if step > 0 and step % opts.eval_interval == 0:
                    last_val = run_eval(step, opts.eval_blocks)
                    report.event("eval", f"step {step}: val loss {last_val.loss:.4f}, val bpb {last_val.bpb:.4f}", step=step, **last_val.as_dict())
                if step_hook is not None:
                    step_hook(step)
                progress = max(
                    (step - opts.warmup_steps) / max(max_steps - opts.warmup_steps, 1) if max_steps else 0.0,
                    elapsed / opts.time_budget if opts.time_budget else 0.0,
                )
                lr = lr_at(step, progress, opts)
                for group_ in optimizer.param_groups:
                    group_["lr"] = lr
                t0 = time.perf_counter()
                blocks = torch.from_numpy(corpus.gather_blocks(data.train, sampler.starts(step), config.context_length)).to(device)
                with autocast:
                    loss = cross_entropy(trainer(blocks[:, :-1]), blocks[:, 1:])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), opts.grad_clip)) if opts.grad_clip > 0 else 0.0
                # One exchange per step keeps the ranks in agreement: the mean loss, whether
                # anyone was asked to stop, and rank 0's clock (which drives the schedule).
                now = elapsed_before + time.perf_counter() - session_start
                loss_sum, norm_sum, stops, clock = group.all_sum(
                    [float(loss.detach()), grad_norm, float(signals.requested), now if group.is_main else 0.0], device
                )
                loss_value = loss_sum / group.world_size
                if not (math.isfinite(loss_value) and math.isfinite(norm_sum)):
                    what = f"the training loss became {loss_value}"
                    if math.isfinite(loss_value):
                        what = f"the gradient norm became {norm_sum}"
                    raise TrainingError(f"{what} at step {step}; stopped without saving this step. {_recovery_hint(run_dir, opts)}")
                optimizer.step()
                dt = time.perf_counter() - t0
                step += 1
                step_seconds += dt
                elapsed, stop_requested = clock, stops > 0
                window["tokens"] += tokens_per_step
                window["seconds"] += dt
                window["loss"] += loss_value
                window["steps"] += 1
                if step % opts.log_interval == 0 or step == max_steps:
                    record = {
                        "step": step, "kind": "train", "loss": window["loss"] / window["steps"], "lr": lr,
                        "tokens_per_second": window["tokens"] / max(window["seconds"], 1e-9), "elapsed_s": elapsed,
                    }
                    log(record)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_second']:.0f}", refresh=False)
                    window = {"tokens": 0, "seconds": 0.0, "loss": 0.0, "steps": 0}
                bar.update(1 if max_steps else min(elapsed, opts.time_budget) - bar.n)
                if opts.save_every and step % opts.save_every == 0 and not stop_requested:
                    save(step, elapsed)
            interrupted = stop_requested
            if interrupted:
                report.warn(f"interrupted at step {step}; saving a checkpoint")
            save(step, elapsed)
        except KeyboardInterrupt:
            last = _last_checkpoint_text(run_dir)
            raise TrainingError(f"interrupted twice: stopped at once; the last checkpoint ({last}) is kept") from None
        finally:
            bar.close()

    # An interrupted run is scored on the periodic blocks only: the person wants out.
    final_blocks = opts.eval_blocks if interrupted else opts.final_eval_blocks
    n_val_blocks = corpus.count_blocks(len(data.val), config.context_length)
    report.event("final_eval", f"final evaluation on {min(n_val_blocks, final_blocks or n_val_blocks):,} validation blocks...")
    final = run_eval(step, final_blocks)
    del lock  # the run may be resumed by another process from here on
    if metrics is not None:
        metrics.close()
    tokens_per_second = step * tokens_per_step / step_seconds if step_seconds else 0.0
    result = {
        "run_dir": str(run_dir),
        "steps": step,
        "train_seconds": elapsed,
        "tokens_per_second": tokens_per_second,
        "train_tokens_seen": step * tokens_per_step,
        "epochs": sampler.epoch_of(step),
        "interrupted": interrupted,
        "resumed_from": ckpt.step if ckpt is not None else None,
        "world_size": group.world_size,
        **final.as_dict(),
    }
    sample_text = ""
    if opts.sample_tokens and not interrupted and group.is_main:
        sample_text = sample_from(model, data.tokenizer, "", opts.sample_tokens, 0.8, 40, opts.seed, device)
        result["sample"] = sample_text
    diagnostic = embedding_diagnostic(model, data.tokenizer, frequent_tokens(data.train, data.tokenizer, 2))
    result["nearest"] = diagnostic
    report.result(result, final_report(result, sample_text, diagnostic, brief=report.quiet))
    return result


def _last_checkpoint_text(run_dir: Path) -> str:
    path = run_dir / CHECKPOINT
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            step = json.loads(handle.metadata()["octlm"])["step"]
        return f"step {step}, {path}"
    except Exception:
        return f"none yet: {path} does not exist" if not path.exists() else f"{path}, unreadable"


def _recovery_hint(run_dir: Path, opts: TrainOptions) -> str:
    if (run_dir / CHECKPOINT).exists():
        return (
            f"The last good checkpoint ({_last_checkpoint_text(run_dir)}) is kept: lower --learning-rate (now {opts.learning_rate:g}) "
            f"and resume with `octlm train --resume {shlex.quote(str(run_dir))} --learning-rate ...`, or start again"
        )
    return (
        f"No checkpoint had been saved yet (--save-every {opts.save_every}): start again with a lower --learning-rate "
        f"(now {opts.learning_rate:g}){'' if opts.grad_clip > 0 else ' and --grad-clip on'}, adding --overwrite"
    )


def _rewind_metrics(path: Path, size: int, report: Reporter) -> None:
    """Cut ``metrics.jsonl`` back to what it held at the checkpoint, so no step is logged twice."""
    if not path.exists():
        return
    if path.stat().st_size < size:
        report.warn(f"{path} is shorter than when the checkpoint was saved; keeping it as it is")
        return
    with path.open("r+b") as handle:
        handle.truncate(size)


def _remove_stale_temporaries(run_dir: Path, report: Reporter) -> None:
    # A process killed while writing leaves its temporary file behind; the real file is intact.
    stale = list(run_dir.glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        report.warn(f"removed {len(stale)} temporary file(s) left by an interrupted write")


def frequent_tokens(tokens: np.ndarray, tokenizer: Tokenizer, k: int) -> list[int]:
    """The ``k`` most frequent ordinary tokens of a stream (not ``<|endoftext|>``)."""
    counts = np.bincount(np.asarray(tokens[: 2_000_000]), minlength=tokenizer.vocab_size)
    counts[tokenizer.eot_id] = 0
    return [int(i) for i in np.argsort(-counts, kind="stable")[:k]]


def embedding_diagnostic(model: Decoder, tokenizer: Tokenizer | None, extra_tokens: list[int] = (), k: int = 5) -> dict:
    """Nearest tokens to token 0 and to ``extra_tokens``, and nearest positions to position 0.

    Returns ``{"tokens": [{"token", "text", "neighbours": [...]}], "positions": [...] or None}``
    with cosine similarities; ``positions`` is ``None`` for schemes that add
    no position vectors (RoPE).
    """
    label = tokenizer.token_str if tokenizer is not None else (lambda i: f"#{i}")
    tokens = []
    for token_id in [0, *[t for t in extra_tokens if t != 0]]:
        neighbours = nearest_tokens(model, token_id, k, label)
        tokens.append({"token": token_id, "text": label(token_id), "neighbours": [n.__dict__ for n in neighbours]})
    positions = nearest_positions(model, 0, k)
    return {"tokens": tokens, "positions": None if positions is None else [n.__dict__ for n in positions]}


def format_diagnostic(diagnostic: dict, position_scheme: str) -> str:
    lines = ["nearest tokens by cosine similarity:"]
    for entry in diagnostic["tokens"]:
        near = ", ".join(f"{visible_token(n['label'])} {n['score']:+.2f}" for n in entry["neighbours"])
        lines.append(f"  {visible_token(entry['text']):>15} (#{entry['token']}): {near}")
    if diagnostic["positions"] is None:
        lines.append(f"nearest positions: n/a ({position_scheme} adds no position vectors to the embedding)")
    else:
        near = ", ".join(f"{n['index']} {n['score']:+.2f}" for n in diagnostic["positions"])
        lines.append(f"nearest positions to position 0: {near}")
    return "\n".join(lines)


def final_report(result: dict, sample_text: str, diagnostic: dict, brief: bool = False) -> str:
    """The end-of-training report for people; ``brief`` (``--quiet``) keeps the figures and the path only."""
    from octlm.run import load_config

    scheme = load_config(result["run_dir"])["model"]["position"]
    saved = f"saved to {result['run_dir']}/; try: octlm sample --run {shlex.quote(result['run_dir'])} --prompt \"...\""
    lines = [
        "",
        f"done: {result['steps']} steps in {result['train_seconds']:.0f}s, {result['tokens_per_second']:,.0f} tokens/s, "
        f"{result['epochs']:.2f} epochs" + (" (interrupted)" if result["interrupted"] else ""),
        f"validation: loss {result['val_loss']:.4f} nats/token, perplexity {result['val_perplexity']:.2f}, "
        f"{result['val_bpb']:.4f} bits per byte ({result['val_tokens']:,} tokens)",
    ]
    resume = []
    if result["interrupted"]:
        resume = [f"interrupted at step {result['steps']}; continue exactly where it stopped with: octlm train --resume {shlex.quote(result['run_dir'])}"]
    if brief:
        return "\n".join(lines[1:] + [saved] + resume)
    if sample_text:
        lines += ["", "sample:", "-" * 60, printable_text(sample_text), "-" * 60]
    lines += ["", format_diagnostic(diagnostic, scheme), "", saved]
    return "\n".join(lines + resume)


def sample_from(model: Decoder, tokenizer: Tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int | None, seed: int, device: torch.device) -> str:
    """Generate ``max_new_tokens`` after ``prompt`` (after ``<|endoftext|>`` when empty); returns only the new text."""
    ids = tokenizer.encode(prompt) if prompt else [tokenizer.eot_id]
    generator = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        out = model.generate(torch.tensor([ids], device=device), max_new_tokens, temperature, top_k, generator=generator)
    finally:
        model.train(was_training)
    return tokenizer.decode(out[0, len(ids) :].tolist())


__all__ = ["Corpus", "StopSignals", "TrainingError", "embedding_diagnostic", "lr_at", "open_corpus", "prepare_corpus", "resolve_device", "resume_options", "sample_from", "train"]
