"""The window of a training line: what the next ``train`` record of ``metrics.jsonl`` averages over.

It holds the steps since the previous line: their tokens, seconds, summed
losses and gradient norms (before clipping; ``--grad-clip 0`` computes none).
A checkpoint stores it (``state["window"]``), so the first line a resumed run
writes averages the same steps an uninterrupted run's would.
"""

from __future__ import annotations


def empty_window() -> dict:
    """A window of no steps: ``tokens``, ``seconds``, ``loss``, ``grad_norm`` and ``steps``, all zero."""
    return {"tokens": 0, "seconds": 0.0, "loss": 0.0, "grad_norm": 0.0, "steps": 0}


def add_step(window: dict, tokens: int, seconds: float, loss: float, grad_norm: float) -> None:
    """Count one more step into ``window``: its tokens, seconds, loss and gradient norm."""
    for key, value in (
        ("tokens", tokens),
        ("seconds", seconds),
        ("loss", loss),
        ("grad_norm", grad_norm),
        ("steps", 1),
    ):
        window[key] += value


def window_record(window: dict, step: int, lr: float, elapsed: float, grad_norm: bool) -> dict:
    """The ``train`` record of ``metrics.jsonl`` at ``step``: the window's mean loss and tokens per second.

    Args:
        window: at least one step.
        lr: the learning rate of the last step.
        elapsed: seconds of training of the run so far.
        grad_norm: whether to record the mean gradient norm (``--grad-clip`` above 0).
    """
    return {
        "step": step,
        "kind": "train",
        "loss": window["loss"] / window["steps"],
        "lr": lr,
        "tokens_per_second": window["tokens"] / max(window["seconds"], 1e-9),
        "elapsed_s": elapsed,
        **({"grad_norm": window["grad_norm"] / window["steps"]} if grad_norm else {}),
    }


__all__ = ["add_step", "empty_window", "window_record"]
