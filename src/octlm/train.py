"""Training: corpus to run folder.

One function, :func:`train`, does the whole job: read and split the text,
train the tokenizer on the training split, pack both splits into token files,
build the decoder, optimise it with AdamW (linear warmup, cosine decay,
gradient clipping) until a step or time limit, evaluate periodically, and
write the run folder described in :mod:`octlm.run`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from octlm import data as corpus
from octlm.diagnostics import nearest_positions, nearest_tokens
from octlm.errors import OctlmError
from octlm.evaluate import EvalResult, evaluate
from octlm.fileio import atomic_write_json
from octlm.model import Decoder, cross_entropy
from octlm.options import DEFAULT_MAX_STEPS, TrainOptions
from octlm.report import Reporter
from octlm.run import CONFIG, MANIFEST, METRICS, TOKENIZER, WEIGHTS, save_weights, write_config
from octlm.tokenizer import Tokenizer


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


def prepare_run_dir(out: str | None, overwrite: bool) -> Path:
    """Create the run folder, refusing to clobber an existing one unless ``overwrite``."""
    if out is None:
        out = f"runs/{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(out)
    if run_dir.exists() and not run_dir.is_dir():
        raise OctlmError(f"--out {run_dir}: exists and is not a folder")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            what = "an octlm run" if (run_dir / CONFIG).exists() else "files"
            raise OctlmError(f"--out {run_dir}: already holds {what}; choose another --out or pass --overwrite to replace it")
        if not (run_dir / CONFIG).exists() and not (run_dir / MANIFEST).exists():
            raise OctlmError(f"--out {run_dir}: holds files that are not an octlm run; refusing to overwrite them")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def prepare_corpus(opts: TrainOptions, run_dir: Path, report: Reporter) -> Corpus:
    """Read, split, tokenize and store the corpus; write ``tokenizer.json`` and ``manifest.json``."""
    t0 = time.perf_counter()
    docs, info = corpus.read_documents(opts.text or None, opts.encoding)
    train_texts, val_texts = corpus.split_documents(docs, opts.val_fraction)
    n_bytes = sum(d.n_bytes for d in docs)
    source = "the Python standard library" if info["source"]["kind"] == "python-stdlib" else f"{len(docs)} file(s)"
    report.event("corpus", f"corpus: {source}, {len(docs)} documents, {n_bytes / 1e6:.2f} MB", documents=len(docs), bytes=n_bytes, skipped=len(info["skipped"]))
    if info["skipped"]:
        report.warn(f"skipped {len(info['skipped'])} empty or binary file(s); see manifest.json")
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


def check_options(opts: TrainOptions) -> None:
    """Reject option values that cannot work, naming the flag."""
    positive = ["batch_size", "eval_interval", "eval_blocks", "log_interval"]
    for name in positive:
        if getattr(opts, name) < 1:
            raise OctlmError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(opts, name)}")
    for name in ("warmup_steps", "sample_tokens"):
        if getattr(opts, name) < 0:
            raise OctlmError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(opts, name)}")
    if opts.max_steps is not None and opts.max_steps < 1:
        raise OctlmError(f"--max-steps must be >= 1, got {opts.max_steps}")
    if opts.time_budget is not None and not opts.time_budget > 0:
        raise OctlmError(f"--time-budget must be a positive number of seconds, got {opts.time_budget}")
    if not opts.learning_rate > 0:
        raise OctlmError(f"--learning-rate must be > 0, got {opts.learning_rate}")
    if not 0 <= opts.min_lr_ratio <= 1:
        raise OctlmError(f"--min-lr-ratio must be in [0, 1], got {opts.min_lr_ratio}")
    if opts.threads is not None and opts.threads < 1:
        raise OctlmError(f"--threads must be >= 1, got {opts.threads}")
    if opts.final_eval_blocks is not None and opts.final_eval_blocks < 1:
        raise OctlmError(f"--final-eval-blocks must be >= 1, got {opts.final_eval_blocks}")
    try:
        opts.model_config(vocab_size=opts.vocab_size)
    except ValueError as err:
        message = re.sub(r"DecoderConfig\.(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), str(err))
        raise OctlmError(message) from None


def train(opts: TrainOptions, report: Reporter | None = None) -> dict:
    """Run ``octlm train``: returns the result dict (also the last ``--json`` line).

    The result holds at least ``val_bpb`` (bits per byte), ``val_loss`` (nats
    per token), ``val_perplexity``, ``tokens_per_second``, ``steps``,
    ``train_seconds`` and ``run_dir``.

    Raises:
        OctlmError: for bad options or input (nothing is written for bad
            options); TrainingError when the loss stops being finite.
    """
    report = report or Reporter()
    check_options(opts)
    device = resolve_device(opts.device)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    max_steps = opts.max_steps if opts.max_steps is not None else (None if opts.time_budget else DEFAULT_MAX_STEPS)
    run_dir = prepare_run_dir(opts.out, opts.overwrite)
    report.event("run", f"run folder: {run_dir}", run_dir=str(run_dir))
    data = prepare_corpus(opts, run_dir, report)

    torch.manual_seed(opts.seed)
    config = opts.model_config(data.tokenizer.vocab_size)
    model = Decoder(config).to(device)
    write_config(run_dir, config, {**opts.to_dict(), "max_steps": max_steps, "out": str(run_dir)})
    autocast, dtype_name = autocast_for(device, opts.dtype)
    report.event(
        "model",
        f"model: {model.num_parameters():,} parameters ({model.num_parameters(exclude_embeddings=True):,} without "
        f"embeddings), position={config.position}, device={device}, dtype={dtype_name}, threads={torch.get_num_threads()}",
        parameters=model.num_parameters(),
        device=str(device),
        dtype=dtype_name,
    )
    optimizer = make_optimizer(model, opts, device)
    sampler = corpus.BlockSampler(len(data.train), config.context_length, opts.batch_size, opts.seed)
    bytes_per_token = data.tokenizer.bytes_per_token
    metrics = (run_dir / METRICS).open("a", encoding="utf-8")

    def log(record: dict) -> None:
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()

    def run_eval(step: int, max_blocks: int | None) -> EvalResult:
        with autocast:
            result = evaluate(model, data.val, bytes_per_token, config.context_length, opts.batch_size, max_blocks, device)
        log({"step": step, "kind": "eval", **result.as_dict()})
        return result

    tokens_per_step = opts.batch_size * config.context_length
    budget_text = " and ".join(filter(None, [f"{max_steps} steps" if max_steps else None, f"{opts.time_budget:g}s" if opts.time_budget else None]))
    report.event("train", f"training for {budget_text}, {tokens_per_step} tokens per step", max_steps=max_steps, time_budget=opts.time_budget)
    bar = report.progress(max_steps if max_steps else opts.time_budget, "train", "step" if max_steps else "s")
    step, train_seconds, last_val, interrupted = 0, 0.0, None, False
    window_tokens, window_seconds, window_loss = 0, 0.0, 0.0
    start = time.perf_counter()
    model.train()
    try:
        while True:
            elapsed = time.perf_counter() - start
            done_steps = max_steps is not None and step >= max_steps
            done_time = opts.time_budget is not None and elapsed >= opts.time_budget
            if done_steps or done_time:
                break
            if step > 0 and step % opts.eval_interval == 0:
                last_val = run_eval(step, opts.eval_blocks)
                report.event("eval", f"step {step}: val loss {last_val.loss:.4f}, val bpb {last_val.bpb:.4f}", step=step, **last_val.as_dict())
            progress = max(
                (step - opts.warmup_steps) / max(max_steps - opts.warmup_steps, 1) if max_steps else 0.0,
                elapsed / opts.time_budget if opts.time_budget else 0.0,
            )
            lr = lr_at(step, progress, opts)
            for group in optimizer.param_groups:
                group["lr"] = lr
            t0 = time.perf_counter()
            blocks = torch.from_numpy(corpus.gather_blocks(data.train, sampler.starts(step), config.context_length)).to(device)
            with autocast:
                loss = cross_entropy(model(blocks[:, :-1]), blocks[:, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if opts.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), opts.grad_clip)
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise TrainingError(
                    f"the training loss became {loss_value} at step {step}; the weights of this step were not saved. "
                    f"Lower --learning-rate (now {opts.learning_rate:g}) or keep --grad-clip on"
                )
            optimizer.step()
            dt = time.perf_counter() - t0
            step += 1
            train_seconds += dt
            window_tokens += tokens_per_step
            window_seconds += dt
            window_loss += loss_value
            if step % opts.log_interval == 0 or step == max_steps:
                n = opts.log_interval if step % opts.log_interval == 0 else step % opts.log_interval
                record = {"step": step, "kind": "train", "loss": window_loss / n, "lr": lr, "tokens_per_second": window_tokens / window_seconds, "elapsed_s": time.perf_counter() - start}
                log(record)
                bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_second']:.0f}", refresh=False)
                window_tokens, window_seconds, window_loss = 0, 0.0, 0.0
            bar.update(1 if max_steps else min(time.perf_counter() - start, opts.time_budget) - bar.n)
    except KeyboardInterrupt:
        interrupted = True
        report.warn(f"interrupted at step {step}; saving the weights reached so far")
    finally:
        bar.close()
    wall = time.perf_counter() - start
    save_weights(run_dir / WEIGHTS, model, {"step": str(step)})

    final = run_eval(step, opts.final_eval_blocks)
    tokens_per_second = step * tokens_per_step / train_seconds if train_seconds else 0.0
    metrics.close()
    result = {
        "run_dir": str(run_dir),
        "steps": step,
        "train_seconds": wall,
        "tokens_per_second": tokens_per_second,
        "train_tokens_seen": step * tokens_per_step,
        "epochs": sampler.epoch_of(step),
        "interrupted": interrupted,
        **final.as_dict(),
    }
    sample_text = ""
    if opts.sample_tokens and not interrupted:
        sample_text = sample_from(model, data.tokenizer, "", opts.sample_tokens, 0.8, 40, opts.seed, device)
        result["sample"] = sample_text
    diagnostic = embedding_diagnostic(model, data.tokenizer, frequent_tokens(data.train, data.tokenizer, 2))
    result["nearest"] = diagnostic
    report.result(result, final_report(result, sample_text, diagnostic))
    return result


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
        near = ", ".join(f"{n['label']!r} {n['score']:+.2f}" for n in entry["neighbours"])
        lines.append(f"  {entry['text']!r:>18} (#{entry['token']}): {near}")
    if diagnostic["positions"] is None:
        lines.append(f"nearest positions: n/a ({position_scheme} adds no position vectors to the embedding)")
    else:
        near = ", ".join(f"{n['index']} {n['score']:+.2f}" for n in diagnostic["positions"])
        lines.append(f"nearest positions to position 0: {near}")
    return "\n".join(lines)


def final_report(result: dict, sample_text: str, diagnostic: dict) -> str:
    from octlm.run import load_config

    scheme = load_config(result["run_dir"])["model"]["position"]
    lines = [
        "",
        f"done: {result['steps']} steps in {result['train_seconds']:.0f}s, {result['tokens_per_second']:,.0f} tokens/s, "
        f"{result['epochs']:.2f} epochs" + (" (interrupted)" if result["interrupted"] else ""),
        f"validation: loss {result['val_loss']:.4f} nats/token, perplexity {result['val_perplexity']:.2f}, "
        f"{result['val_bpb']:.4f} bits per byte ({result['val_tokens']:,} tokens)",
    ]
    if sample_text:
        lines += ["", "sample:", "-" * 60, sample_text, "-" * 60]
    lines += ["", format_diagnostic(diagnostic, scheme), "", f"saved to {result['run_dir']}/; try: octlm sample --run {result['run_dir']} --prompt \"...\""]
    return "\n".join(lines)


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


__all__ = ["Corpus", "TrainingError", "embedding_diagnostic", "lr_at", "prepare_corpus", "resolve_device", "sample_from", "train"]
