"""Loading a run folder back: the model under its saved scaling, and its tokenizer."""

from __future__ import annotations

import shlex
from pathlib import Path

import torch

from octlm.data.tokenizer import Tokenizer
from octlm.errors import RunError
from octlm.model import Decoder, DecoderConfig
from octlm.model.weights import load_weights
from octlm.run.folder import CHECKPOINT, CONFIG, TOKENIZER, WEIGHTS, RunFolder, file_not_folder
from octlm.run.scaling import apply_scaling


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[Decoder, Tokenizer]:
    """Load a trained model and its tokenizer from a run folder.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode on ``device``, its
        head is tied to its token table again, and it runs under the RoPE
        scaling the run saved (``train.rope_scaling``), if any.

    Raises:
        RunError: when the folder or one of its files is missing or corrupted
            (the message names the file), or its scheme comes from a plug-in
            not imported (naming the ``--plugin`` to give).
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise RunError(f"{run_dir}: {file_not_folder(run_dir)}")
    if not run_dir.is_dir():
        raise RunError(f"{run_dir}: no such run folder; train one with `octlm train --out {run_dir}`")
    config = RunFolder(run_dir).read_config()
    check_scheme_found(RunFolder(run_dir), config)
    try:
        model_config = DecoderConfig.from_dict(config["model"])
    except (TypeError, ValueError) as err:
        raise RunError(f"{run_dir / CONFIG}: invalid model config: {err}") from None
    model = Decoder(model_config)
    folder = RunFolder(run_dir)
    if not folder.weights_path.is_file() and folder.trained_now():
        raise RunError(f"{run_dir}: another octlm process is training it; {WEIGHTS} comes when it ends, wait for it")
    if not folder.weights_path.is_file() and (
        folder.stopped_before_first_checkpoint() or (run_dir / CHECKPOINT).is_file()
    ):
        # Stopped (Ctrl-C, a kill) before training finished: the weights come with the end of training.
        raise RunError(
            f"{run_dir}: its training stopped before it wrote {WEIGHTS}; "
            f"finish it with `octlm train --resume {shlex.quote(str(run_dir))}`"
        )
    load_weights(run_dir / WEIGHTS, model)
    stored_scaling = (config.get("train") or {}).get("rope_scaling")
    apply_scaling(model, stored_scaling if isinstance(stored_scaling, dict) else None)
    tokenizer = RunFolder(run_dir).read_tokenizer()
    tokenizer_path = run_dir / TOKENIZER
    if tokenizer.vocab_size != model_config.vocab_size:
        raise RunError(
            f"{tokenizer_path}: has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{model_config.vocab_size}"
        )
    return model.to(device).eval(), tokenizer


def check_scheme_found(folder: RunFolder, config: dict) -> None:
    """Refuse, naming the plug-in, a run (``config``, its ``config.json``) whose scheme comes from a plug-in this
    process has not imported.

    The plug-in is not imported from the run's record: a run folder may come
    from anyone, and opening one must not run its code.

    Raises:
        RunError: ``--plugin`` and the recorded module or file to give.
    """
    from octlm.model.positions import SCHEMES

    position, plugin = (config.get("model") or {}).get("position"), config.get("plugin")
    if isinstance(plugin, str) and isinstance(position, str) and position not in SCHEMES:
        raise RunError(
            f"{folder.path}: its position scheme {position!r} comes from the plug-in {plugin}, which is not "
            f"imported; give --plugin {shlex.quote(plugin)} (or install the package whose octlm.positions entry "
            "point provides it)"
        )


def load_config(run_dir: str | Path) -> dict:
    """:meth:`RunFolder.read_config` of ``run_dir``."""
    return RunFolder(run_dir).read_config()


__all__ = ["check_scheme_found", "load_config", "load_run"]
