"""Sampling text from a model, for the commands and the end-of-training report."""

from __future__ import annotations

import torch

from octlm.model import Decoder
from octlm.tokenizer import Tokenizer


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


__all__ = ["sample_from"]
