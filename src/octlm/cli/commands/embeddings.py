"""``octlm embeddings``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common, add_dataclass_options, options_from
from octlm.inspect.embeddings import EmbeddingsOptions
from octlm.report import Reporter


def add_parser(sub) -> None:
    p = sub.add_parser(
        "embeddings",
        help="nearest tokens, a position similarity heatmap and a token PCA scatter of a trained run",
        formatter_class=Formatter,
        description="Print the nearest tokens (cosine similarity) to each --token and write two PNG figures:\n"
        "positions.png (cosine similarity of the run's position vectors, and similarity against distance next to\n"
        "the sinusoidal formula) and tokens-pca.png (the token table on its first two principal components).",
        epilog="examples:\n  octlm embeddings --run runs/shakespeare --token ' king' --token ' the' --out figures\n"
        "  octlm embeddings --run runs/shakespeare --token 42 ROMEO",
    )
    add_dataclass_options(p, EmbeddingsOptions)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from octlm.inspect.embeddings import embeddings
    from octlm.train.device import torch_settings

    opts = options_from(args, EmbeddingsOptions)
    with torch_settings(opts.threads, False):
        embeddings(opts, report)
    return 0
