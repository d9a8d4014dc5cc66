"""What ``--document-mask`` costs in tokens per second, and which SDPA kernel it takes; prints JSON.

    .venv/bin/python bench/document_mask.py [--schemes rope alibi learned] [--threads 2] [--rounds 5] [--repeats 5]

For each scheme, two untrained Day-1 decoders (vocab 1,024, d_model 128, 4
heads, 2 layers, T 128, batch 32) with the same weights, one with
``document_mask`` and one without, take training steps and evaluation passes
(bench/throughput.py's: forward, cross entropy, backward, clipping, AdamW;
and a forward under ``no_grad``) on the same random token ids, with an
end-of-text marker every ``--doc-length`` tokens on average (where the
markers fall changes what the mask hides, not what it costs: the mask is a
dense [B, 1, T, T] tensor either way). The two alternate, ``--rounds`` times
``--repeats`` timed steps each, so a burst of other work on the machine slows
both alike; tokens per second is B x T over the median step, and ``ratio``
is masked over plain, measured in the same run. The SDPA operators each step
calls are read with ``torch.profiler`` (bench/throughput.py's
``sdpa_kernels``): without a mask the CPU flash kernel, with one the math
kernel or the flash kernel taking the mask.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_timing import median_seconds  # noqa: E402
from timed_steps import autocast_for, make_optimizer, sdpa_kernels, step_functions  # noqa: E402

from octlm.model import Decoder, DecoderConfig  # noqa: E402

EOT = 0


def packed_ids(batch: int, length: int, doc_length: int, seed: int) -> torch.Tensor:
    """Random ids [batch, length + 1] in 1 .. 1,023, with the marker ``EOT`` at each token with probability 1 /
    ``doc_length``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 1024, (batch, length + 1), generator=g)
    ids[torch.rand(batch, length + 1, generator=g) < 1.0 / doc_length] = EOT
    return ids


def measure(position: str, args) -> dict:
    device = torch.device("cpu")
    autocast, _ = autocast_for(device)
    ids = packed_ids(args.batch_size, args.context_length, args.doc_length, args.seed)
    steps, kernels = {}, {}
    for masked in (False, True):
        torch.manual_seed(args.seed)
        model = Decoder(
            DecoderConfig(position=position, context_length=args.context_length, document_mask=masked, eot_id=EOT)
        )
        params = [p for p in model.parameters() if p.requires_grad]
        train_step, eval_step = step_functions(model, params, make_optimizer(model, device), ids, autocast)
        steps[masked] = {"train": train_step, "eval": eval_step}
        kernels[masked] = sdpa_kernels(model, ids, train_step, eval_step, autocast)
    times = {(masked, phase): [] for masked in (False, True) for phase in ("train", "eval")}
    for _ in range(args.rounds):
        for masked in (False, True):
            for phase in ("train", "eval"):
                times[(masked, phase)].append(median_seconds(steps[masked][phase], 1, args.repeats, device))
    tokens = args.batch_size * args.context_length
    out = {"position": position}
    for phase in ("train", "eval"):
        plain, masked = (
            tokens / statistics.median(times[(False, phase)]),
            tokens / statistics.median(times[(True, phase)]),
        )
        out[phase] = {
            "plain_tokens_per_second": round(plain),
            "masked_tokens_per_second": round(masked),
            "ratio": round(masked / plain, 3),
        }
    out["plain_kernels"], out["masked_kernels"] = kernels[False], kernels[True]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemes", nargs="+", default=["rope", "alibi", "learned"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--doc-length", type=int, default=64, help="mean tokens between markers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "torch": torch.__version__,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "context_length": args.context_length,
        "doc_length": args.doc_length,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "schemes": [measure(position, args) for position in args.schemes],
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
