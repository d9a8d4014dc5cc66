"""What the token rows a run's training split never selects cost it on the validation text; prints JSON.

    .venv/bin/python bench/unseen_targets.py --run RUN [--threads 1]

A tokenizer brought from elsewhere (``--tokenizer``: GPT-2's 50,257 tokens) holds rows a small corpus never
selects in training; some of those tokens still occur in the validation split. This reads the run's model and its
validation split as ``octlm train``'s final evaluation does (every block of T targets, each window T + 1 tokens),
and reports the mean probability the model gives the never-selected tokens together, the share of the validation
targets that are such tokens, and the share of the bits (of text targets: ``<|endoftext|>`` stands for no bytes)
those targets take, with the mean bits each. Its total bits over the targets' bytes is the run's validation bits
per byte, recomputed here independently of octlm's evaluator.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch


def unseen_costs(run: str, batch: int = 16) -> dict:
    """The figures of the module's docstring for run folder ``run`` (float32 on CPU)."""
    from octlm.inspect.embeddings import token_counts
    from octlm.run.folder import RunFolder
    from octlm.run.load import load_run

    model, tokenizer = load_run(run, "cpu")
    model.eval()
    unseen = torch.from_numpy(token_counts(run, model.config.vocab_size) == 0)
    stream = torch.from_numpy(np.asarray(RunFolder(run).tokens("val")).astype(np.int64))
    length = model.config.context_length
    blocks = (len(stream) - 1) // length
    windows = stream[: blocks * length + 1].unfold(0, length + 1, length)  # [blocks, T + 1], one token shared
    nbytes = torch.tensor([len(tokenizer.token_bytes(i)) for i in range(model.config.vocab_size)])
    mass = bits = bits_unseen = 0.0
    with torch.no_grad():
        for start in range(0, blocks, batch):
            window = windows[start : start + batch]
            log_probs = model(window[:, :-1]).float().log_softmax(-1)
            mass += float(log_probs.exp()[..., unseen].sum())
            targets = window[:, 1:]
            target_bits = -log_probs.gather(-1, targets[..., None])[..., 0] / math.log(2)
            text = nbytes[targets] > 0
            bits += float(target_bits[text].sum())
            bits_unseen += float(target_bits[text & unseen[targets]].sum())
    targets = windows[:, 1:]
    unseen_targets = int(unseen[targets].sum())
    return {
        "run": run,
        "vocab_size": model.config.vocab_size,
        "rows_never_selected": int(unseen.sum()),
        "validation_targets": int(targets.numel()),
        "unseen_targets": unseen_targets,
        "mean_probability_on_unseen_rows": mass / targets.numel(),
        "share_of_bits_on_unseen_targets": bits_unseen / bits if bits else None,
        "mean_bits_per_unseen_target": bits_unseen / unseen_targets if unseen_targets else None,
        "bits_per_byte": bits / int(nbytes[targets].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run folder made by octlm train")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(unseen_costs(args.run)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
