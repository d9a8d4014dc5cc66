"""Which size of octlm's recall task does the task study's training learn at 1x? One model per call; prints JSON.

Variants of ``recall`` (:mod:`octlm.studies.tasks.generators`) built here, not registered: the values drawn from
``--values`` tokens (with ``--distinct``, without repetition within an instance, as Zoology draws them), a quarter,
half or every key asked, trained by :func:`octlm.studies.tasks.study.train_task_model` at ``--task-length`` L with the
task study's options (``--d-model``, ``--n-heads``, ``--n-layers``, ``--optimizer``, ``--max-steps``) and scored as
the study scores (exact match of every asked value, 256 fresh instances at 1x..4x L), plus the share of single
values right at 1x, which shows a model on its way before whole instances are.

    .venv/bin/python bench/recall_sizing.py --task-length 4 --values 64 --asked all --n-layers 2 --n-heads 1 \\
        --optimizer adamw --max-steps 16000 --position learned
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared argument types
from bench_args import at_least, number  # noqa: E402

from octlm.model.positions import SCHEMES
from octlm.studies.tasks.generators import Task
from octlm.studies.tasks.options import TaskOptions
from octlm.studies.tasks.scoring import exact_match
from octlm.studies.tasks.study import train_task_model

ASKED = {"quarter": lambda n: max(1, n // 4), "half": lambda n: max(1, n // 2), "all": lambda n: n}


def recall_variant(values: int, asked: str, distinct: bool) -> Task:
    """Recall with ``values`` value tokens (0 .. values - 1), keys after them (as many as the longest size), SEP last;
    ``k_1 v_1 .. k_n v_n SEP`` then the asked keys, each followed by its value (only the values scored)."""
    questions = ASKED[asked]

    def make(size: int, count: int, max_size: int, g: torch.Generator) -> torch.Tensor:
        keys = torch.rand(count, max_size, generator=g).argsort(dim=1)[:, :size] + values
        if distinct:
            drawn = torch.rand(count, values, generator=g).argsort(dim=1)[:, :size]
        else:
            drawn = torch.randint(0, values, (count, size), generator=g)
        pairs = torch.stack((keys, drawn), dim=2).reshape(count, 2 * size)
        order = torch.rand(count, size, generator=g).argsort(dim=1)[:, : questions(size)]
        answer = torch.stack((keys.gather(1, order), drawn.gather(1, order)), dim=2).reshape(count, -1)
        sep = torch.full((count, 1), values + max_size, dtype=torch.long)
        return torch.cat((pairs, sep, answer), dim=1)

    return Task(
        "recall",
        f"recall, {values} values, {asked} asked",
        lambda m: values + m + 1,
        lambda n: 2 * n + 1 + 2 * questions(n),
        lambda n: 2 * questions(n),
        make,
        scored=lambda n: [False, True] * questions(n),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--values", type=at_least(2), default=64, help="value tokens")
    parser.add_argument("--asked", choices=list(ASKED), default="all", help="keys asked after the pairs")
    parser.add_argument("--distinct", action="store_true", help="no value twice in an instance")
    parser.add_argument("--position", choices=list(SCHEMES), default="rope", help="position scheme")
    parser.add_argument("--seed", type=int, default=1337, help="training seed")
    parser.add_argument("--task-length", type=at_least(1), default=16, help="L: pairs of the longest training size")
    parser.add_argument("--max-steps", type=at_least(1), default=2000, help="training steps")
    parser.add_argument("--d-model", type=at_least(2), default=64, help="width")
    parser.add_argument("--n-heads", type=at_least(1), default=4, help="heads (dividing --d-model)")
    parser.add_argument("--n-layers", type=at_least(1), default=3, help="layers")
    parser.add_argument("--optimizer", choices=["muon", "adamw"], default="muon", help="as octlm length's")
    parser.add_argument(
        "--learning-rate",
        type=number,
        default=TaskOptions.learning_rate,
        help="AdamW's rate (the embeddings' with Muon)",
    )
    args = parser.parse_args()
    if args.d_model % args.n_heads:
        parser.error(f"--n-heads {args.n_heads} does not divide --d-model {args.d_model}; pick a divisor")
    torch.set_num_threads(1)
    task = recall_variant(args.values, args.asked, args.distinct)
    opts = TaskOptions(
        task="recall",
        task_length=args.task_length,
        max_steps=args.max_steps,
        d_model=args.d_model,
        n_heads=args.n_heads,
        n_layers=args.n_layers,
        optimizer=args.optimizer,
        learning_rate=args.learning_rate,
    ).resolved()
    t0 = time.perf_counter()
    try:
        model, record = train_task_model(task, args.position, args.seed, opts, torch.device("cpu"))
    except ValueError as err:  # a model the scheme cannot build (an odd rotated part, say): its own words
        parser.error(str(err))
    longest = max(opts.multipliers) * args.task_length
    out = {"bench": "recall_sizing", **vars(args), "final_loss": record["final_loss"]}
    out["train_seconds"] = round(time.perf_counter() - t0, 1)
    for m in opts.multipliers:
        out[f"exact_match_{m}x"] = exact_match(
            model, task, m * args.task_length, longest, args.seed, torch.device("cpu")
        )
    tokens = task.batch(args.task_length, 256, longest, torch.Generator().manual_seed(args.seed + 99))
    answer, scored = task.answer_length(args.task_length), task.answer_mask(args.task_length)
    with torch.no_grad():
        guess = model(tokens[:, :-1])[:, -answer:][:, scored].argmax(-1)
    out["value_accuracy_1x"] = float((guess == tokens[:, -answer:][:, scored]).float().mean())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
