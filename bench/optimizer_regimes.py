"""AdamW against Muon where the data repeats (tinyshakespeare) and where it does not (the standard library): final
figures and curves at several run lengths; prints JSON, one line per run.

    .venv/bin/python bench/optimizer_regimes.py [--corpora tinyshakespeare stdlib] [--steps 300 679 1200 2150]
        [--only adamw base wd-0.5] [--jobs 2] [--curve-points 10] [--seed N] [--out build/optimizer-regimes]
        [--skip FILE.jsonl]

Every (corpus, steps, variant) is one ``octlm train`` with a whole schedule of
that many steps, ``--threads 1``, ``--jobs`` at a time in separate processes
(the variants are ``bench/muon_tuning.py``'s; bits per byte do not depend on
how busy the machine is, seconds do). Each line holds:

* ``val_bpb``, ``val_loss``: the final evaluation, every validation block
  (bits per byte; nats per token);
* ``epochs``: passes over the training tokens;
* ``train_loss``: the mean training loss (nats per token) of the logged steps
  in the run's last tenth, and ``gap`` = ``val_loss - train_loss``: how far the
  model fits its training text better than unseen text (over-fitting, when it
  grows while ``val_loss`` rises);
* ``curve``: ``[step, val_bpb, train_loss]`` at ``--curve-points`` evaluations
  (each on the periodic ``--eval-blocks`` blocks, the same ones every time;
  the last on every block), the training loss being the mean of the logged
  steps since the evaluation before.

``--skip`` names an earlier output whose runs are not trained again (their lines
are printed again as they were), so a grid can grow a row at a time.
``--figure PNG --from FILE.jsonl ...`` trains nothing: it draws each corpus's
curves from earlier output, validation solid and training dashed (in bits per
byte at the validation text's bytes per token), each run length's final figure
a dot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from muon_tuning import VARIANTS, train  # noqa: E402  (the benchmark beside this one)

#: corpus name -> ``octlm train --text`` (empty: the main job's default, the standard library).
CORPORA = {"tinyshakespeare": ["tinyshakespeare"], "stdlib": []}
#: How the figure names a variant (others by their name).
LABELS = {
    "adamw": "AdamW",
    "base": "Muon, no weight decay",
    "wd-0.25": "Muon, weight decay 0.25",
    "wd-0.5": "Muon, weight decay 0.5",
}


def curve(records: list[dict]) -> list[list[float]]:
    """``[step, val_bpb, mean training loss since the evaluation before]`` for each evaluation in ``records`` (the
    loss is null when no training line was logged in between)."""
    points, losses = [], []
    for record in records:
        if record["kind"] == "train":
            losses.append(record["loss"])
        elif record["kind"] == "eval":
            train_loss = round(sum(losses) / len(losses), 4) if losses else None  # no training line logged since
            points.append([record["step"], round(record["val_bpb"], 4), train_loss])
            losses = []
    return points


def measure(corpus: str, steps: int, variant: str, out: Path, curve_points: int, seed: int | None = None) -> dict:
    """One run of the grid, as a line of this benchmark's output (``seed``: ``--seed``, default octlm's)."""
    folder = out / corpus / str(steps) / ("" if seed is None else f"seed{seed}")
    done = train(variant, steps, folder, CORPORA[corpus], eval_interval=max(steps // curve_points, 1), seed=seed)
    row = {"corpus": corpus, "steps": steps, "variant": variant, "flags": " ".join(VARIANTS[variant][0])}
    row = row if seed is None else {**row, "seed": seed}
    if "error" in done:
        return {**row, **done}
    records = done["records"]
    final = [r for r in records if r["kind"] == "eval"][-1]
    last_tenth = [r["loss"] for r in records if r["kind"] == "train" and r["step"] > steps - max(steps // 10, 1)]
    train_loss = sum(last_tenth) / len(last_tenth)
    return {
        **row,
        "val_bpb": round(final["val_bpb"], 4),
        "val_loss": round(final["val_loss"], 4),
        "epochs": round(done["result"]["epochs"], 2),
        "train_loss": round(train_loss, 4),
        "gap": round(final["val_loss"] - train_loss, 4),
        "curve": curve(records),
        "wall_s": done["wall_s"],
        "tokens_per_second": round(done["result"]["tokens_per_second"], 1),
    }


def figure(rows: list[dict], path: Path) -> None:
    """Each corpus's panel: the longest run's curves per variant, and every run's final bits per byte as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = sorted({row["corpus"] for row in rows}, key=list(CORPORA).index)
    fig, axes = plt.subplots(1, len(corpora), figsize=(6 * len(corpora), 4.2), squeeze=False)
    for ax, corpus in zip(axes[0], corpora, strict=True):
        mine = [row for row in rows if row["corpus"] == corpus]
        for index, variant in enumerate(dict.fromkeys(row["variant"] for row in mine)):
            runs = sorted((row for row in mine if row["variant"] == variant), key=lambda row: row["steps"])
            color, longest = f"C{index}", runs[-1]
            to_bpb = longest["val_bpb"] / longest["val_loss"]  # the validation text's bits per byte per nat per token
            steps = [point[0] for point in longest["curve"]]
            ax.plot(
                steps,
                [point[1] for point in longest["curve"]],
                color=color,
                label=f"{LABELS.get(variant, variant)}: validation",
            )
            trained = [(point[0], point[2] * to_bpb) for point in longest["curve"] if point[2] is not None]
            ax.plot(*zip(*trained, strict=True), color=color, linestyle="--", alpha=0.7, label="training")
            ax.scatter([row["steps"] for row in runs], [row["val_bpb"] for row in runs], color=color, zorder=3)
        passes = max(mine, key=lambda row: row["steps"])
        title = f"{corpus}: {passes['epochs']:.0f} passes over the text in {passes['steps']:,} steps"
        ax.set(title=title, xlabel="step (each dot: a whole run of that many steps)", ylabel="bits per byte")
        low = min(row["train_loss"] * row["val_bpb"] / row["val_loss"] for row in mine)
        ax.set_ylim(low - 0.1, max(row["val_bpb"] for row in mine) + 0.4)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def read_outputs(sources: list[Path]) -> list[dict]:
    """The JSON lines of earlier outputs of this benchmark; SystemExit naming the file for one it cannot read."""
    rows = []
    for source in sources:
        try:
            rows += [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SystemExit(f"--from {source}: not an output of this benchmark ({err})") from None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", nargs="+", choices=list(CORPORA), default=list(CORPORA))
    parser.add_argument("--steps", nargs="+", type=int, default=[300, 679, 1200, 2150])
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), default=["adamw", "base"])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--curve-points", type=int, default=10, help="evaluations per run")
    parser.add_argument("--seed", type=int, help="--seed of every run (default: octlm's, 1337)")
    parser.add_argument("--out", type=Path, default=Path("build/optimizer-regimes"))
    parser.add_argument("--skip", type=Path, help="an earlier output: its runs are printed again, not trained")
    parser.add_argument("--figure", type=Path, help="draw the curves of --from's runs into this PNG; train nothing")
    parser.add_argument("--from", dest="sources", nargs="+", type=Path, default=[], help="outputs to draw")
    args = parser.parse_args()
    if args.figure:
        rows = [row for row in read_outputs(args.sources) if "curve" in row and "seed" not in row]  # seed 1337
        if not rows:
            raise SystemExit(f"--from {' '.join(map(str, args.sources)) or '(nothing)'}: no runs to draw")
        if not args.figure.parent.is_dir():
            raise SystemExit(f"--figure {args.figure}: no folder {args.figure.parent} to write it in")
        figure(rows, args.figure)
        print(f"wrote {args.figure}")
        return
    done = {}
    if args.skip and args.skip.exists():
        for line in args.skip.read_text().splitlines():
            row = json.loads(line)
            if "corpus" in row and "error" not in row:
                if row.get("seed") == args.seed:
                    done[row["corpus"], row["steps"], row["variant"]] = row
    # Longest runs first, so that the last job to start is a short one and the two processes end together.
    grid = sorted(((c, s, v) for c in args.corpora for s in args.steps for v in args.only), key=lambda key: -key[1])
    print(json.dumps({"load_average": os.getloadavg(), "jobs": args.jobs, "grid": len(grid)}), flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = pool.map(lambda key: done.get(key) or measure(*key, args.out, args.curve_points, args.seed), grid)
        for row in rows:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
