"""``octlm embeddings``."""

from __future__ import annotations

import argparse

from octlm.cli import Formatter, add_common
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
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="run folder made by octlm train")
    p.add_argument("--token", nargs="+", action="extend", default=[], metavar="TEXT",
                   help="tokens whose neighbours to show, as text that is one token or as an id (default: the 5 most frequent)")
    p.add_argument("--k", type=int, default=8, help="neighbours per token")
    p.add_argument("--out", metavar="DIR", help="folder for the figures (default: RUN_DIR/embeddings)")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from pathlib import Path

    from octlm.bench import parse_token
    from octlm.diagnostics import nearest_tokens
    from octlm.errors import OctlmError
    from octlm.explore import pca_2d, position_note, run_position_vectors, token_counts, token_labels
    from octlm.figures import pca_figure, position_figure, save_png
    from octlm.run import RunFolder, load_run
    from octlm.tokenizer import visible_token

    if args.k < 1:
        raise OctlmError(f"--k must be >= 1, got {args.k}")
    model, tokenizer = load_run(args.run, "cpu")
    vocab_size = model.config.vocab_size
    counts = token_counts(args.run, vocab_size)
    if args.token:
        ids = [parse_token(spec, tokenizer, vocab_size) for spec in args.token]
    elif counts is not None:
        ordered = [int(i) for i in (-counts).argsort(kind="stable") if int(i) != tokenizer.eot_id]
        ids = ordered[:5]
    else:
        ids = list(range(1, min(6, vocab_size)))
    out = Path(args.out) if args.out else Path(args.run) / "embeddings"
    RunFolder(out).create()

    entries, lines = [], ["nearest tokens by cosine similarity:"]
    for token_id in ids:
        near = nearest_tokens(model, token_id, args.k, tokenizer.token_str)
        entries.append({"token": token_id, "text": tokenizer.token_str(token_id), "neighbours": [n.__dict__ for n in near]})
        shown = ", ".join(f"{visible_token(n.label)} {n.score:+.3f}" for n in near)
        lines.append(f"  {visible_token(tokenizer.token_str(token_id)):>12} (#{token_id}): {shown}")

    config = model.config
    title = f"octlm run {Path(args.run).resolve().name}: {config.position} positions, vocab_size {vocab_size}, d_model {config.d_model}"
    figures = {}
    positions = run_position_vectors(model)
    if positions is None:
        figures["positions"] = None
        lines.append(f"no position heatmap: {position_note(model.config.position)}")
    else:
        figures["positions"] = str(save_png(position_figure(positions, title), out / "positions.png"))
    coords, explained = pca_2d(model.token_embedding.weight)
    neighbours = {e["token"]: [n["index"] for n in e["neighbours"]] for e in entries}
    scatter = pca_figure(coords, explained, token_labels(tokenizer), counts, title, ids, neighbours)
    figures["pca"] = str(save_png(scatter, out / "tokens-pca.png"))
    lines += [f"wrote {path}" for path in figures.values() if path]
    result = {"run": str(args.run), "tokens": entries, "figures": figures, "pca_explained": [float(v) for v in explained]}
    report.result(result, "\n".join(lines))
    return 0
