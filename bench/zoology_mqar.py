"""Zoology's multi-query associative recall point on octlm's decoder, then other position schemes and longer inputs;
prints JSON.

    .venv/bin/python bench/zoology_mqar.py [--position learned] [--d-model 64] [--vocab-size 256] [--pairs 4]
        [--length 64] [--eval-lengths 64 128 256] [--epochs 64] [--threads 1]

The data are Zoology's (Arora et al. 2023, §3; :mod:`octlm.studies.tasks.zoology`): ``--train`` instances (10,000)
and ``--test`` held-out ones (1,000, another seed) of ``--length`` tokens with ``--pairs`` key-value pairs over a
``--vocab-size`` vocabulary. The recipe is their repository's defaults: two layers, one head (their basic example),
learned positions of ``--length`` rows, batch 32, AdamW at 1e-3 (weight decay 0.1, a cosine decay after 1 epoch
of warm-up here), at most ``--epochs`` passes, stopping at 99% test accuracy; the loss and the accuracy count only
the value after each asked key. octlm's block is GPT-2's (LayerNorm, GELU MLP of 4C), theirs a similar pre-norm
block. After training, the test instances are drawn again at each ``--eval-lengths`` (the same pairs, the questions
spread over the longer tail) and scored where the scheme reaches (a learned table: up to its rows). One JSON line per
epoch on stderr; the result on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from octlm.model import Decoder, DecoderConfig
from octlm.studies.tasks.zoology import IGNORE, mqar

#: Zoology stops training once the test accuracy reaches this.
STOP_AT = 0.99
TEST_SEED = 10_000


def accuracy(model: Decoder, inputs: torch.Tensor, targets: torch.Tensor, batch: int = 250) -> float:
    """Share of the scored targets (the values after the asked keys) the model's argmax gets right."""
    right = total = 0
    with torch.no_grad():
        for i in range(0, len(inputs), batch):
            logits = model(inputs[i : i + batch])
            scored = targets[i : i + batch] != IGNORE
            right += int((logits.argmax(-1)[scored] == targets[i : i + batch][scored]).sum())
            total += int(scored.sum())
    return right / total


def train(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    x, y = mqar(args.train, args.length, args.pairs, args.vocab_size, args.seed)
    tx, ty = mqar(args.test, args.length, args.pairs, args.vocab_size, TEST_SEED + args.seed)
    shape = {"d_model": args.d_model, "n_heads": args.n_heads, "n_layers": args.n_layers, "dropout": 0.0}
    config = DecoderConfig(vocab_size=args.vocab_size, context_length=args.length, position=args.position, **shape)
    model = Decoder(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.1)
    per_epoch = math.ceil(args.train / args.batch_size)
    total = per_epoch * args.epochs

    def rate(step: int) -> float:  # warm-up over one epoch, then a cosine decay to 0
        if step < per_epoch:
            return (step + 1) / per_epoch
        return 0.5 * (1 + math.cos(math.pi * (step - per_epoch) / max(1, total - per_epoch)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    start, epochs, test = time.perf_counter(), 0, 0.0
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(args.train)
        for i in range(0, args.train, args.batch_size):
            pick = order[i : i + args.batch_size]
            loss = F.cross_entropy(model(x[pick]).flatten(0, 1), y[pick].flatten(), ignore_index=IGNORE)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        epochs, test = epoch + 1, accuracy(model, tx, ty)
        said = {"epoch": epochs, "loss": round(float(loss.detach()), 4), "test_accuracy": test}
        print(json.dumps(said), file=sys.stderr)
        if test >= STOP_AT:
            break
    seconds = time.perf_counter() - start
    reached = {}
    for length in args.eval_lengths:
        if model.max_length is not None and length > model.max_length:
            reached[length] = None  # a learned table has no rows there
            continue
        lx, ly = mqar(args.test, length, args.pairs, args.vocab_size, TEST_SEED + args.seed)
        reached[length] = accuracy(model, lx, ly)
    return {"bench": "zoology_mqar", **vars(args), "epochs_run": epochs, "train_seconds": round(seconds, 1),
            "accuracy": reached}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--position", default="learned")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=1)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--eval-lengths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--train", type=int, default=10_000)
    parser.add_argument("--test", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(train(args)), flush=True)


if __name__ == "__main__":
    main()
