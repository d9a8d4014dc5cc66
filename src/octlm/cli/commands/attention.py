"""``octlm attention``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.inspect.attention import AttentionOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "attention",
        help="heatmaps of every layer's attention heads on a piece of text, and their entropy, "
        "distance and sink statistics",
        formatter_class=Formatter,
        description="Run a trained model on --prompt, the start of --text, or (by default) "
        "the start of the run's validation\n"
        "text, record every layer's attention probabilities and write layer-N.png (each head's map, "
        "tokens on the axes\n"
        "when they fit), statistics.png and statistics.json: per layer and head the attention entropy by "
        "query position\n"
        "(nats), the mean attention distance (tokens), the probability on the first token and the largest logit;\n"
        "for RoPE and its kin also frequencies.png: each head's query and key norm per turned channel pair against\n"
        "its frequency, which frequencies the model uses (Barbero et al. 2024).",
        epilog="examples:\n  octlm attention --run runs/shakespeare --prompt 'ROMEO: But soft, what light'\n"
        "  octlm attention --run runs/rope --text tinyshakespeare --length 512 --out figures/rope-512 --json",
    )
    add_dataclass_options(p, AttentionOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.inspect.attention import attention
    from octlm.train.device import torch_settings

    opts = options_from(args, AttentionOptions)
    with torch_settings(opts.threads, False):
        attention(opts, report)
    return 0
