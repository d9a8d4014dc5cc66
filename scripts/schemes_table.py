"""docs/schemes.md's table of the position schemes, generated from the schemes' registry.

    .venv/bin/python scripts/schemes_table.py [--write docs/schemes.md]

One row per registered scheme, in registration order. The columns that are facts of the code come from
the code: the name ``--position`` takes, what people call it and its one-line idea (the scheme's
``SchemeFacts``: ``label``, ``description``), what it acts on (the ``PositionScheme`` hooks its class
overrides), and the transformers class ``octlm export-hf`` writes it as (``hf_model_type``). "Exact under
a key/value cache" is yes for every row because tests/test_generate.py checks cached against full logits
for every registered scheme (tests/test_schemes_table.py checks that it still does). The paper and its
arXiv identifier, which the code does not hold, come from :data:`PAPERS` below. Without ``--write`` it
prints the table; with it, it replaces what lies between the ``<!-- schemes:start -->`` and
``<!-- schemes:end -->`` lines of that file.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

START, END = "<!-- schemes:start -->", "<!-- schemes:end -->"

#: Each built-in scheme's paper: (authors and year, as its SchemeFacts description cites it; arXiv identifier).
#: GPT-2 (Radford et al. 2019), which the learned table's description names, is not on arXiv: NOTES says so.
PAPERS = {
    "learned": ("Gehring et al. 2017", "1705.03122"),
    "sinusoidal": ("Vaswani et al. 2017", "1706.03762"),
    "rope": ("Su et al. 2021", "2104.09864"),
    "alibi": ("Press et al. 2022", "2108.12409"),
    "t5": ("Raffel et al. 2020", "1910.10683"),
    "fire": ("Li et al. 2023", "2310.04418"),
    "kerple": ("Chi et al. 2022", "2205.09921"),
    "xpos": ("Sun et al. 2023", "2212.10554"),
    "prope": ("Barbero et al. 2024", "2410.06205"),
    "cope": ("Golovneva et al. 2024", "2405.18719"),
    "none": ("Kazemnejad et al. 2023", "2305.19466"),
    "fox": ("Lin et al. 2025", "2503.02130"),
    "stickbreaking": ("Tan et al. 2025", "2410.17980"),
    "pathattn": ("Yang et al. 2025", "2505.16381"),
}

#: What follows a scheme's paper in its cell.
NOTES = {"learned": "; GPT-2's table (Radford et al. 2019, not on arXiv)"}

#: What a scheme acts on, by the PositionScheme hook its class overrides (docs/architecture.md, adding a scheme).
HOOKS = {
    "embed": "embedding (rows added to the token vectors)",
    "rotate": "rotation (of queries and keys)",
    "score_bias": "bias (on the attention scores)",
    "attention_bias": "bias (on the attention scores)",
    "read_input": "gates (read from the layer's input)",
    "attend": "weights (attention formed its own way)",
}

#: The class transformers loads for each ``hf_model_type`` a scheme names (with octlm's default, GPT-2 block).
ARCHITECTURES = {"gpt2": "`GPT2LMHeadModel`", "gpt_neox": "`GPTNeoXForCausalLM`"}

#: With Llama's block (``--block llama``) RoPE and NoPE layers go to other classes (octlm.export.hf_hybrid).
LLAMA_BLOCK = {
    "rope": "`LlamaForCausalLM`, `SmolLM3ForCausalLM`, `Qwen3ForCausalLM`, `GptOssForCausalLM`",
    "none": "`SmolLM3ForCausalLM` (NoPE layers beside RoPE ones)",
}


def acts_on(cls: type) -> str:
    """The places ``cls`` acts, from the hooks it overrides; the causal mask alone when it overrides none."""
    from octlm.model.positions.base import PositionScheme

    places = dict.fromkeys(
        text for hook, text in HOOKS.items() if getattr(cls, hook) is not getattr(PositionScheme, hook)
    )
    return "; ".join(places) or "nothing (the causal mask alone)"


def idea(description: str) -> str:
    """The description without its closing citation, which the paper column gives."""
    return re.sub(r"\s*\([^()]*\)$", "", description)


def exports(name: str, model_type: str | None) -> str:
    """The transformers classes ``export-hf`` writes the scheme as: GPT-2's block, then Llama's."""
    found = [ARCHITECTURES[model_type]] if model_type else []
    if name in LLAMA_BLOCK:
        found.append(f"with `--block llama`: {LLAMA_BLOCK[name]}")
    return "; ".join(found) or "none (refused, naming why)"


def rows() -> list[list[str]]:
    """One row per registered scheme: the cells of :func:`table`."""
    from octlm.model.positions import SCHEMES, facts_of

    out = []
    for name, cls in SCHEMES.items():
        facts = facts_of(cls)
        authors, arxiv = PAPERS.get(name, ("?", "?"))
        paper = f"{authors}, [arXiv {arxiv}](https://arxiv.org/abs/{arxiv}){NOTES.get(name, '')}"
        model_type = facts.hf_model_type
        out.append(
            [f"`{name}`", facts.label, idea(facts.description), acts_on(cls), paper, "yes", exports(name, model_type)]
        )
    return out


HEADER = ["`--position`", "name", "idea", "acts on", "paper", "exact under a cache", "transformers class (`export-hf`)"]


def table() -> str:
    """The Markdown table, header first."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows()])


def write(path: Path, text: str) -> None:
    """Replace what lies between the markers of ``path`` with ``text``; ValueError when a marker is missing."""
    page = path.read_text(encoding="utf-8")
    if START not in page or END not in page:
        raise ValueError(f"{path}: no {START} ... {END} lines to replace; add them where the table goes")
    head, rest = page.split(START, 1)
    path.write_text(f"{head}{START}\n{text}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="the Markdown file whose table to replace (docs/schemes.md)")
    args = parser.parse_args(argv)
    if args.write:
        write(args.write, table())
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
