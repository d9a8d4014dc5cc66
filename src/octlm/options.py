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


def option(default, help: str, **meta):
    """A dataclass field that is also a CLI flag: ``help`` and argparse keywords (``choices``, ``nargs``) in its metadata."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainOptions:
    """Everything ``octlm train`` takes. Units are in each help text."""

    # data
    text: list[str] = option([], "UTF-8 text files or folders to train on (default: the Python standard library's .py files)", nargs="+", metavar="PATH")
    encoding: str = option("utf-8", "text encoding of the input files, e.g. cp1252")
    val_fraction: float = option(0.1, "fraction of each file (its end) held out for validation")
    vocab_size: int = option(1024, "BPE vocabulary size in tokens, including <|endoftext|>")
    # model
    context_length: int = option(128, "tokens per training block (rows of a learned position table)")
    d_model: int = option(128, "model width C")
    n_heads: int = option(4, "attention heads")
    n_layers: int = option(2, "transformer blocks")
    dropout: float = option(0.0, "dropout probability")
    activation: str = option("gelu", "MLP nonlinearity: exact gelu, or gelu_tanh (GPT-2's gelu_new)", choices=list(ACTIVATIONS))
    position: str = option("learned", "position scheme", choices=sorted(SCHEMES))
    rope_theta: float = option(DEFAULT_BASE, "RoPE wavelength base")
    rope_layout: str = option("interleaved", "RoPE channel pairs: interleaved (2i, 2i+1) or half (i, i+d/2, GPT-NeoX/LLaMA)", choices=list(ROPE_LAYOUTS))
    partial_rotary_factor: float = option(1.0, "fraction of each head that RoPE rotates")
    sinusoidal_layout: str = option("interleaved", "sinusoidal columns: interleaved (sin, cos, ...) or concatenated ([sin | cos])", choices=list(SINUSOIDAL_LAYOUTS))
    # optimisation
    batch_size: int = option(32, "blocks per step (per process)")
    learning_rate: float = option(5e-3, "peak AdamW learning rate")
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak (cosine decay)")
    warmup_steps: int = option(50, "steps of linear warmup")
    weight_decay: float = option(1.0, "AdamW weight decay on matrices (not on norms, biases)")
    beta1: float = option(0.9, "AdamW beta1")
    beta2: float = option(0.99, "AdamW beta2")
    grad_clip: float = option(1.0, "clip the global gradient norm to this (0 disables)")
    # length of the run
    max_steps: int | None = option(None, f"optimizer steps (default: {DEFAULT_MAX_STEPS} unless --time-budget is given; with --resume: the run's total)")
    time_budget: float | None = option(None, "stop cleanly after this many seconds of training and save (with --resume: the run's total)")
    save_every: int = option(200, "save a checkpoint (checkpoint.safetensors, model.safetensors) every this many steps; 0: only at the end")
    # evaluation and logging
    eval_interval: int = option(200, "evaluate every this many steps")
    eval_blocks: int = option(64, "validation blocks per periodic evaluation (the final one uses all)")
    final_eval_blocks: int | None = option(None, "cap on validation blocks of the final evaluation (default: all)")
    log_interval: int = option(20, "write a training line to metrics.jsonl every this many steps")
    sample_tokens: int = option(160, "tokens of the sample printed at the end (0: none)")
    # machine
    seed: int = option(1337, "random seed (weights, data order, dropout)")
    device: str = option("auto", "auto (GPU when there is one), cpu, cuda, cuda:N or mps")
    dtype: str = option("auto", "compute dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32 or bfloat16", choices=["auto", "float32", "bfloat16"])
    threads: int | None = option(None, "CPU threads for torch (default: torch's choice)")
    # output
    out: str | None = option(None, "run folder to create (default: runs/<date>-<time>)")
    overwrite: bool = option(False, "replace an existing run folder at --out")

    def model_config(self, vocab_size: int) -> DecoderConfig:
        """The decoder shape these options ask for, with the tokenizer's actual vocabulary size."""
        names = {f.name for f in dataclasses.fields(DecoderConfig)} - {"vocab_size"}
        return DecoderConfig(vocab_size=vocab_size, **{n: getattr(self, n) for n in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


__all__ = ["DEFAULT_MAX_STEPS", "TrainOptions", "option"]
