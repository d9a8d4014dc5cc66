"""Which of RoPE's frequencies a trained model uses: the queries' and keys' norms per turned channel pair.

Barbero et al. 2024 ("Round and Round We Go! What makes Rotary Positional Encodings useful?", arXiv 2410.06205,
§4-5) read a model's use of each RoPE frequency from the mean norm of the queries' and keys' 2-D chunks at that
frequency: Gemma 7B puts most of its query and key norm in the slowest pairs, which change little over the context
and so carry content more than position, and a few heads in the fastest, which draw positional patterns such as
attending to the previous token. A rotation keeps each pair's length, so the norms are the same before and after
RoPE turns them. :func:`frequency_usage` gives, per layer whose scheme turns channel pairs and per head, the mean
norm of each pair of the queries and of the keys over the tokens read, and the share of the product
``|q_i| |k_i|`` (what pair ``i`` can add to a logit at most) that the slowest and the fastest quarter of the pairs
hold. A pair that does not turn (p-RoPE's, frequency 0) counts among the slowest.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from octlm.model.attention_maps import AttentionMaps

FREQUENCY_FIGURE = "frequencies.png"


def pair_norms(x: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """Mean length of each channel pair over the batch and the tokens: [B, H, T, D] -> [H, P]."""
    return (x[..., first].square() + x[..., second].square()).sqrt().mean(dim=(0, 2))


def _scheme(model, layer: int):
    positions = model.positions
    return positions.for_layer(layer) if hasattr(positions, "for_layer") else positions


def frequency_usage(maps: AttentionMaps, model) -> list[dict]:
    """Per layer whose scheme turns channel pairs: ``layer``, ``frequency`` [P] (radians per token), the mean
    ``query_norm`` and ``key_norm`` per head and pair [H][P], and per head the ``slowest_quarter`` and
    ``fastest_quarter`` shares of ``sum_i |q_i| |k_i|``. Layers of other schemes are left out (an empty list for a
    model without RoPE)."""
    usage = []
    for layer, (q, k) in enumerate(zip(maps.queries, maps.keys, strict=True)):
        pairs = _scheme(model, layer).channel_pairs()
        if pairs is None:
            continue
        first, second, frequency = pairs
        query, key = pair_norms(q, first, second), pair_norms(k, first, second)
        product = (query * key).double()
        order = np.argsort(frequency.numpy(), kind="stable")
        quarter = max(1, len(order) // 4)
        total = product.sum(dim=-1)
        usage.append(
            {
                "layer": layer,
                "frequency": frequency.tolist(),
                "query_norm": query.tolist(),
                "key_norm": key.tolist(),
                "slowest_quarter": (product[:, order[:quarter]].sum(dim=-1) / total).tolist(),
                "fastest_quarter": (product[:, order[-quarter:]].sum(dim=-1) / total).tolist(),
            }
        )
    return usage


def usage_lines(usage: list[dict]) -> list[str]:
    """One line per layer: the shares of ``|q_i| |k_i|`` in the slowest and the fastest quarter of the pairs."""
    lines = []
    for entry in usage:
        slow = ", ".join(f"{v:.0%}" for v in entry["slowest_quarter"])
        fast = ", ".join(f"{v:.0%}" for v in entry["fastest_quarter"])
        lines.append(
            f"  layer {entry['layer']} RoPE pairs: slowest quarter {slow}, fastest quarter {fast} of |q||k| (per head)"
        )
    return lines


def frequency_figure(usage: list[dict], title: str) -> Figure:
    """Per layer, each head's ``|q_i| |k_i|`` against pair ``i``'s frequency (log scale); pairs that do not turn
    (p-RoPE's) as crosses at half the slowest turning frequency, apart from the line."""
    figure = Figure(figsize=(5.5 * len(usage), 4.2), layout="constrained")
    for panel, entry in enumerate(usage):
        axes = figure.add_subplot(1, len(usage), panel + 1)
        frequency = np.array(entry["frequency"])
        turning = frequency > 0
        still = frequency[turning].min() / 2 if turning.any() else 1e-6  # where the pairs that do not turn are drawn
        order = np.argsort(frequency)
        for head, (q, k) in enumerate(zip(entry["query_norm"], entry["key_norm"], strict=True)):
            product = np.array(q) * np.array(k)
            line = axes.plot(frequency[order][turning[order]], product[order][turning[order]], marker=".")[0]
            line.set_label(f"head {head}")
            if not turning.all():
                axes.plot(np.full((~turning).sum(), still), product[~turning], "x", color=line.get_color())
        if not turning.all():
            axes.annotate("pairs that do\nnot turn (x)", (still, 0), xycoords=("data", "axes fraction"), fontsize=7)
        axes.set_xscale("log")
        axes.set_xlabel("rotation frequency (radians per token)")
        axes.set_ylabel("mean |q_i| x mean |k_i|")
        axes.set_title(f"layer {entry['layer']}")
        axes.legend(fontsize=7)
    figure.suptitle(f"{title}: which RoPE frequencies the queries and keys use (Barbero et al. 2024)", fontsize=9)
    return figure


__all__ = ["FREQUENCY_FIGURE", "frequency_figure", "frequency_usage", "pair_norms", "usage_lines"]
