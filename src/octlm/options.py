"""Training options: one dataclass is the CLI flags, the TOML keys and config.json.

Each field's metadata carries its help text, so ``octlm train --help``, a
``--config FILE.toml`` and the ``train`` section of a run's ``config.json``
cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from octlm.model import ACTIVATIONS, DecoderConfig
from octlm.positions import DEFAULT_BASE, ROPE_LAYOUTS, SCHEMES, SINUSOIDAL_LAYOUTS

#: Steps of the main job when neither --max-steps nor --time-budget is given;
#: about four minutes on two CPU cores with the Day-1 model.
DEFAULT_MAX_STEPS = 1200


def _opt(default, help: str, **meta):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainOptions:
    """Everything ``octlm train`` takes. Units are in each help text."""

    # data
    text: list[str] = _opt([], "UTF-8 text files or folders to train on (default: the Python standard library's .py files)", nargs="*", metavar="PATH")
    encoding: str = _opt("utf-8", "text encoding of the input files, e.g. cp1252")
    val_fraction: float = _opt(0.1, "fraction of each file (its end) held out for validation")
    vocab_size: int = _opt(1024, "BPE vocabulary size in tokens, including <|endoftext|>")
    # model
    context_length: int = _opt(128, "tokens per training block (rows of a learned position table)")
    d_model: int = _opt(128, "model width C")
    n_heads: int = _opt(4, "attention heads")
    n_layers: int = _opt(2, "transformer blocks")
    dropout: float = _opt(0.0, "dropout probability")
    activation: str = _opt("gelu", "MLP nonlinearity: exact gelu, or gelu_tanh (GPT-2's gelu_new)", choices=list(ACTIVATIONS))
    position: str = _opt("learned", "position scheme", choices=sorted(SCHEMES))
    rope_theta: float = _opt(DEFAULT_BASE, "RoPE wavelength base")
    rope_layout: str = _opt("interleaved", "RoPE channel pairs: interleaved (2i, 2i+1) or half (i, i+d/2, GPT-NeoX/LLaMA)", choices=list(ROPE_LAYOUTS))
    partial_rotary_factor: float = _opt(1.0, "fraction of each head that RoPE rotates")
    sinusoidal_layout: str = _opt("interleaved", "sinusoidal columns: interleaved (sin, cos, ...) or concatenated ([sin | cos])", choices=list(SINUSOIDAL_LAYOUTS))
    # optimisation
    batch_size: int = _opt(32, "blocks per step (per process)")
    learning_rate: float = _opt(5e-3, "peak AdamW learning rate")
    min_lr_ratio: float = _opt(0.1, "final learning rate as a fraction of the peak (cosine decay)")
    warmup_steps: int = _opt(50, "steps of linear warmup")
    weight_decay: float = _opt(1.0, "AdamW weight decay on matrices (not on norms, biases)")
    beta1: float = _opt(0.9, "AdamW beta1")
    beta2: float = _opt(0.99, "AdamW beta2")
    grad_clip: float = _opt(1.0, "clip the global gradient norm to this (0 disables)")
    # length of the run
    max_steps: int | None = _opt(None, f"optimizer steps (default: {DEFAULT_MAX_STEPS} unless --time-budget is given; with --resume: the run's total)")
    time_budget: float | None = _opt(None, "stop cleanly after this many seconds of training and save (with --resume: the run's total)")
    save_every: int = _opt(200, "save a checkpoint (checkpoint.safetensors, model.safetensors) every this many steps; 0: only at the end")
    # evaluation and logging
    eval_interval: int = _opt(200, "evaluate every this many steps")
    eval_blocks: int = _opt(64, "validation blocks per periodic evaluation (the final one uses all)")
    final_eval_blocks: int | None = _opt(None, "cap on validation blocks of the final evaluation (default: all)")
    log_interval: int = _opt(20, "write a training line to metrics.jsonl every this many steps")
    sample_tokens: int = _opt(160, "tokens of the sample printed at the end (0: none)")
    # machine
    seed: int = _opt(1337, "random seed (weights, data order, dropout)")
    device: str = _opt("auto", "auto (GPU when there is one), cpu, cuda, cuda:N or mps")
    dtype: str = _opt("auto", "compute dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32 or bfloat16", choices=["auto", "float32", "bfloat16"])
    threads: int | None = _opt(None, "CPU threads for torch (default: torch's choice)")
    # output
    out: str | None = _opt(None, "run folder to create (default: runs/<date>-<time>)")
    overwrite: bool = _opt(False, "replace an existing run folder at --out")

    def model_config(self, vocab_size: int) -> DecoderConfig:
        """The decoder shape these options ask for, with the tokenizer's actual vocabulary size."""
        names = {f.name for f in dataclasses.fields(DecoderConfig)} - {"vocab_size"}
        return DecoderConfig(vocab_size=vocab_size, **{n: getattr(self, n) for n in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


__all__ = ["DEFAULT_MAX_STEPS", "TrainOptions"]
