"""The two blocks octlm builds: GPT-2's (the Day-1 default) and the one today's open models share.

:data:`BLOCKS` says what each is made of, as data (``DecoderConfig.block``):

* ``gpt2``: LayerNorm, an MLP ``C -> 4C -> GELU -> C``, biases on every
  linear layer (Radford et al. 2019).
* ``llama``: RMSNorm (Zhang & Sennrich 2019), a SwiGLU MLP (Shazeer 2020,
  ``down(silu(gate(x)) * up(x))`` with ``8C/3`` hidden units rounded up to a
  multiple of 8, so it has about the parameters of GPT-2's), and no biases,
  as in Llama (Touvron et al. 2023), SmolLM3, Qwen3 and Gemma 3.

QK-norm (``DecoderConfig.qk_norm``, or per layer in a layout) is an RMSNorm
over each head's ``head_dim`` channels of the queries and keys, with a
learned gain, before the position scheme rotates them (Qwen3, OLMo 2, Gemma
3; Dehghani et al. 2023 for ViT-22B): it bounds the logits RoPE turns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.canon import CanonConv

#: RMSNorm's epsilon: SmolLM3's and Qwen3's ``rms_norm_eps``.
RMS_EPS = 1e-6


@dataclass(frozen=True)
class BlockRecipe:
    """What a block is made of: ``norm`` (``layernorm`` or ``rmsnorm``), ``mlp`` (``gelu`` or ``swiglu``), ``bias``."""

    norm: str
    mlp: str
    bias: bool
    description: str


#: ``DecoderConfig.block`` values.
BLOCKS = {
    "gpt2": BlockRecipe("layernorm", "gelu", True, "GPT-2's: LayerNorm, a GELU MLP of 4C, biases"),
    "llama": BlockRecipe("rmsnorm", "swiglu", False, "Llama's: RMSNorm, a SwiGLU MLP of 8C/3, no biases"),
}


def norm(kind: str, width: int) -> nn.Module:
    """A LayerNorm or an RMSNorm (learned gain, no bias) over the last ``width`` channels of [..., width]."""
    return nn.LayerNorm(width) if kind == "layernorm" else nn.RMSNorm(width, eps=RMS_EPS)


def swiglu_hidden(d_model: int) -> int:
    """Hidden units of the SwiGLU MLP: ``8 * d_model / 3`` rounded up to a multiple of 8."""
    return -(-d_model // 3) * 8  # ceil(8C/3 / 8) * 8 = ceil(C/3) * 8


class SwiGLU(nn.Module):
    """SwiGLU MLP on [B, T, C]: ``down(silu(gate(x)) * up(x))``, C -> hidden -> C (Shazeer 2020, "GLU Variants")."""

    def __init__(self, d_model: int, dropout: float, bias: bool, canon: str = "") -> None:
        super().__init__()
        hidden = swiglu_hidden(d_model)
        self.gate = nn.Linear(d_model, hidden, bias=bias)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.down = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        # Canon-D reads the gate's and the up projection's outputs side by side (Allen-Zhu 2025)
        self.canon_d = CanonConv(2 * hidden, "D") if "D" in canon else None

    def forward(self, x: Tensor, canon_state: dict[str, Tensor] | None = None) -> Tensor:
        """[B, T, C] -> [B, T, C]; ``canon_state``: the layer cache's Canon inputs (Canon-D), or ``None``."""
        gate, up = self.gate(x), self.up(x)
        if self.canon_d is not None:
            gate, up = self.canon_d(torch.cat((gate, up), dim=-1), canon_state).chunk(2, dim=-1)
        return self.dropout(self.down(F.silu(gate) * up))


__all__ = ["BLOCKS", "RMS_EPS", "BlockRecipe", "SwiGLU", "norm", "swiglu_hidden"]
