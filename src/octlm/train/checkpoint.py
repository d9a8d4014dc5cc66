"""Checkpoints: everything a training run needs to continue exactly where it stopped.

A run folder's ``checkpoint.safetensors`` is one safetensors file holding

* ``model.<name>``             -- the weights (the tied head stored once, as the token table);
* ``optimizer.<name>.<key>``   -- AdamW's state of each parameter (``step``, ``exp_avg``, ``exp_avg_sq``);
* ``rng.<rank>.<generator>``   -- every random generator of every process: torch's CPU
  generator, each CUDA device's, numpy's global one (Python's ``random`` goes to the metadata);

and, as JSON in the safetensors metadata, the step, the training seconds spent, the
position in ``metrics.jsonl``, the global batch, and the sha256 of the config, the
tokenizer and the token files it was trained with. The data position needs no state of
its own: the batch of step *s* is a pure function of the seed and *s*
(:class:`octlm.data.text.BlockSampler`).

Nothing here unpickles anything: tensors come back through safetensors and everything
else through JSON, so a checkpoint from elsewhere cannot run code. A file whose tensors
do not hash to the digest in its own metadata is reported as corrupted, naming it.
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save

from octlm.errors import RunError
from octlm.fileio import atomic_write, read_safetensors, sha256_file
from octlm.model.weights import weights_state
from octlm.run.folder import CHECKPOINT, TOKENIZER
from octlm.train.resume import changeable_on_resume

FORMAT = "octlm-checkpoint/1"


class CheckpointError(RunError):
    """A checkpoint is missing, damaged, or does not belong to the files beside it."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``tensors`` by name (CPU) and ``state``, the JSON metadata."""

    path: Path
    tensors: dict[str, torch.Tensor]
    state: dict

    @property
    def step(self) -> int:
        return int(self.state["step"])


def tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """Hex sha256 over names, dtypes, shapes and raw bytes of ``tensors`` in sorted order.

    Stored in a safetensors file's own metadata, it catches flipped bits in the
    tensor data that the format itself would load without complaint.
    """
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def config_digest(config: dict) -> str:
    """sha256 of what a resumed run must keep from ``config.json``.

    That is the ``model`` section and every training option a resume may
    not change (all but :func:`octlm.train.resume.changeable_on_resume`), as canonical JSON,
    so a resume may rewrite ``max_steps`` in the file without invalidating
    its checkpoint, and any other edit is caught. Keys this version does not
    know are kept too.
    """
    may_change = changeable_on_resume()
    kept = {
        "model": config.get("model"),
        "train": {k: v for k, v in sorted(config.get("train", {}).items()) if k not in may_change},
    }
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def run_digests(run_dir: Path, config: dict, token_files: dict[str, str] | None = None) -> dict[str, str]:
    """The digests a checkpoint records: config, ``tokenizer.json``, ``train.bin``, ``val.bin``.

    ``token_files`` may give the token files' digests already known (from the
    manifest written with them) to save hashing them again.
    """
    digests = {"config.json": config_digest(config), TOKENIZER: sha256_file(run_dir / TOKENIZER)}
    for name in ("train.bin", "val.bin"):
        digests[name] = (token_files or {}).get(name) or sha256_file(run_dir / name)
    return digests


def check_digests(path: Path, recorded: dict[str, str], now: dict[str, str]) -> None:
    """Refuse to resume when a file differs from the one the checkpoint was trained with.

    Raises:
        CheckpointError: naming the first file whose digest differs.
    """
    for name, then in recorded.items():
        current = now.get(name)
        if current != then:
            what = (
                "its model section or the training options a resume must keep" if name == "config.json" else "its bytes"
            )
            raise CheckpointError(
                f"{path.parent / name}: differs from the one {path.name} was trained with ({what} changed: sha256 "
                f"{then[:12]}... then, {str(current)[:12]}... now); put the original file back (or, if {path.name} was "
                "copied from another run, that run's), or start a new run with --out"
            )


# -- random generators -------------------------------------------------------


def capture_rng() -> tuple[dict[str, torch.Tensor], dict]:
    """This process's generator states: tensors (torch CPU, CUDA, numpy) and JSON (Python's ``random``)."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{index}"] = state
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    tensors["numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    version, internal, gauss = random.getstate()
    meta = {"numpy": [kind, int(pos), int(has_gauss), float(cached)], "python": [version, list(internal), gauss]}
    return tensors, meta


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Put back what :func:`capture_rng` took (CUDA states only on as many devices as exist)."""
    torch.set_rng_state(tensors["torch"])
    cuda = sorted((k for k in tensors if k.startswith("cuda")), key=lambda k: int(k[4:]))
    if cuda and torch.cuda.is_available():
        for key in cuda[: torch.cuda.device_count()]:
            torch.cuda.set_rng_state(tensors[key], int(key[4:]))
    kind, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((kind, tensors["numpy"].numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))


# -- optimizer state by parameter name ----------------------------------------


def _parameter_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[int, str]:
    """Map the optimizer's integer parameter ids (``state_dict`` numbering) to parameter names."""
    names = {id(p): n for n, p in model.named_parameters()}
    index, out = 0, {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            out[index] = names[id(p)]
            index += 1
    return out


def optimizer_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's per-parameter state as ``optimizer.<param>.<key>`` tensors (CPU)."""
    names = _parameter_names(model, optimizer)
    out = {}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            if not torch.is_tensor(value):
                raise TypeError(f"optimizer state {key!r} is not a tensor; octlm stores tensors only")
            out[f"optimizer.{names[index]}.{key}"] = value.detach().cpu().contiguous()
    return out


def load_optimizer_tensors(
    path: Path, tensors: dict[str, torch.Tensor], model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Put ``optimizer.*`` tensors back into ``optimizer`` (hyper-parameters stay those it was built with).

    Raises:
        CheckpointError: when the state names parameters the model lacks.
    """
    by_name = {name: index for index, name in _parameter_names(model, optimizer).items()}
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if not key.startswith("optimizer."):
            continue
        name, field = key[len("optimizer.") :].rsplit(".", 1)
        if name not in by_name:
            raise CheckpointError(f"{path}: optimizer state for {name!r}, a parameter this model does not have")
        state.setdefault(by_name[name], {})[field] = value
    current = optimizer.state_dict()
    optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})


# -- the file ------------------------------------------------------------------


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict,
    rng: list[tuple[dict[str, torch.Tensor], dict]],
) -> None:
    """Write a checkpoint atomically (temporary file, fsync, rename).

    Args:
        path: the checkpoint file.
        model: the bare decoder (not a DistributedDataParallel wrapper).
        optimizer: its AdamW.
        state: JSON-able run state; must hold ``step``.
        rng: one ``capture_rng()`` result per process, in rank order.

    Raises:
        OSError: when the file cannot be written (a full disk, say); the
            previous checkpoint at ``path`` is then untouched.
    """
    tensors = {f"model.{k}": v for k, v in weights_state(model).items()}
    tensors.update(optimizer_tensors(model, optimizer))
    for rank, (generators, _) in enumerate(rng):
        tensors.update({f"rng.{rank}.{k}": v.detach().cpu().contiguous() for k, v in generators.items()})
    meta = {**state, "format": FORMAT, "rng": [m for _, m in rng], "tensors_sha256": tensors_sha256(tensors)}
    atomic_write(path, save(tensors, metadata={"octlm": json.dumps(meta)}))


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint file (safetensors and JSON only; nothing is unpickled).

    Raises:
        CheckpointError: naming the file when it is missing, truncated, not a
            safetensors file, not an octlm checkpoint, or its tensors do not
            match the digest it recorded (corrupted bytes).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"{path}: no checkpoint; the run stopped before its first one (see --save-every) or is not an octlm "
            f"training run. Start it again with the same --out and --overwrite (which replaces the folder)"
        )
    try:
        tensors, meta = read_safetensors(path)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read checkpoint ({err}); the file is truncated or corrupted") from None
    try:
        state = json.loads(meta["octlm"])
    except (KeyError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: a safetensors file but not an octlm checkpoint (no 'octlm' metadata)") from None
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {state.get('format')!r}; this octlm reads {FORMAT!r}")
    if tensors_sha256(tensors) != state.get("tensors_sha256"):
        raise CheckpointError(
            f"{path}: tensor bytes do not match the digest the checkpoint recorded; the file is corrupted"
        )
    return Checkpoint(path, tensors, state)


def describe_checkpoint(path: Path) -> str:
    """The checkpoint at ``path`` for a message: its step, or that there is none yet or it is unreadable."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            step = json.loads(handle.metadata()["octlm"])["step"]
        return f"step {step}, {path}"
    except Exception:
        return f"none yet: {path} does not exist" if not path.exists() else f"{path}, unreadable"


def resume_hint(run_dir: Path) -> str:
    """The sentence that tells how to go on with the run in ``run_dir``: from its checkpoint, or from step 0 when it has
    none."""
    run = shlex.quote(str(run_dir))
    if (run_dir / CHECKPOINT).exists():
        return f"Continue exactly where it stopped with: octlm train --resume {run}"
    # Resuming a run without a checkpoint trains it from step 0 on its prepared corpus, bit for bit as a fresh run
    # would.
    return f"Resume trains it from step 0, on the corpus already prepared: octlm train --resume {run}"


def model_tensors(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """The checkpoint's weights by parameter name (no ``model.`` prefix)."""
    return {k[len("model.") :]: v for k, v in checkpoint.tensors.items() if k.startswith("model.")}


def rng_of(checkpoint: Checkpoint, rank: int) -> tuple[dict[str, torch.Tensor], dict] | None:
    """The generator states process ``rank`` saved, or ``None`` when it did not exist then."""
    prefix = f"rng.{rank}."
    generators = {k[len(prefix) :]: v for k, v in checkpoint.tensors.items() if k.startswith(prefix)}
    if not generators or rank >= len(checkpoint.state.get("rng", [])):
        return None
    return generators, checkpoint.state["rng"][rank]


def generators_note(checkpoint: Checkpoint, world_size: int) -> str | None:
    """What resuming with ``world_size`` processes does to the dropout generators each process saved; ``None`` when
    nothing.

    A rank that did not exist then starts a fresh one (seeded from ``--seed``
    and its rank); those of ranks gone are dropped. Rank 0 says it for all.
    """
    then = len(checkpoint.state.get("rng", []))
    ranks = ", ".join(str(rank) for rank in range(min(then, world_size), max(then, world_size)))
    if then == world_size:
        return None
    what = (
        f"rank(s) {ranks} start fresh dropout generators"
        if world_size > then
        else f"the dropout generators of rank(s) {ranks} are dropped"
    )
    return (
        f"the run had {then} process(es) and resumes with {world_size}: "
        f"{what}, so the dropout masks differ from an uninterrupted run's"
    )


__all__ = [
    "CHECKPOINT",
    "Checkpoint",
    "CheckpointError",
    "describe_checkpoint",
    "generators_note",
    "capture_rng",
    "check_digests",
    "config_digest",
    "load_checkpoint",
    "resume_hint",
    "model_tensors",
    "restore_rng",
    "rng_of",
    "run_digests",
    "save_checkpoint",
    "tensors_sha256",
]
