"""Faults found by trying other projects' public bug reports on layouts, streaming, FoX and Parquet (issue 52).

Each test failed before its fix; docs/reliability.md has a row for each.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from octlm.model.layout import LayoutError, read_entries
from octlm.model.scheme_catalog import SCHEMES

ROOT = Path(__file__).resolve().parent.parent
#: A layout entry as written: scheme or key, then /keys, then *repeat.
ENTRY = re.compile(r"[a-z][a-z0-9_]*(?:/[a-z0-9.+-]+)*(?:\*[0-9]+)?")
KEY_START = re.compile(r"w[0-9]|global$|theta|logn$|qknorm$|noqknorm$")


def _looks_like_a_layout(text: str) -> bool:
    """Every word an entry that begins with a scheme or a key (so file paths and prose in code spans are left out)."""
    words = text.split()
    heads = [w.split("/")[0].split("*")[0] for w in words]
    return (
        bool(words)
        and all(ENTRY.fullmatch(w) for w in words)
        and all(h in SCHEMES or KEY_START.match(h) for h in heads)
    )


def layouts_the_docs_show() -> list[tuple[str, str]]:
    """``(file, layout)`` for every layout README.md and docs/*.md show: the values of ``--layers`` and ``--layouts``
    (after ``NAME=``) in commands, and every code span that reads as a layout (``w1e2``, ``rope/w64*3 none``)."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in path.read_text(encoding="utf-8").splitlines():
            for match in re.finditer(r"--layers[= ]+(\"[^\"]*\"|'[^']*'|\S+)", line):
                value = match.group(1)
                if value[0] in "\"'" or _looks_like_a_layout(value):
                    found.add((path.name, shlex.split(value)[0] if value[0] in "\"'" else value))
            for match in re.finditer(r"--layouts((?:\s+(?:\"[^\"]*\"|'[^']*'))+)", line):
                found |= {(path.name, arg.split("=", 1)[-1]) for arg in shlex.split(match.group(1))}
            found |= {(path.name, span) for span in re.findall(r"`([^`]+)`", line) if _looks_like_a_layout(span)}
    return sorted(found)


def test_every_layout_the_docs_show_is_read():
    shown = layouts_the_docs_show()
    assert ("layouts.md", "w1e2") in shown and ("README.md", "w32*3 none") in shown  # the walk finds them
    refused = []
    for where, layout in shown:
        try:
            read_entries(layout)
        except LayoutError as err:  # the docs show a form octlm refuses
            refused.append(f"{where}: {layout!r}:{err}")
    assert not refused, refused
    window = next(e.keys["window"] for e in read_entries("rope/w1e1 rope") if e.keys)
    assert window == 10 and read_entries("w1e2")[0].keys == {"window": 100}


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_text_column_named_twice_is_one_line_naming_file_and_column(tmp_path, capsys, kind):
    from octlm.cli import main

    path = tmp_path / f"two.{kind}"
    if kind == "parquet":  # mloda #1360: KeyError 'Column text does not exist in schema'
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        texts = pa.array(["to be or not to be"] * 50)
        pq.write_table(pa.Table.from_arrays([texts, pa.array([1] * 50), texts], names=["text", "n", "text"]), path)
    else:  # the csv module would take the first in silence
        path.write_text("text,n,text\n" + "to be,1,or not\n" * 50, encoding="utf-8")
    assert main(["train", "--text", str(path), "--out", str(tmp_path / "run"), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: 2 columns are named 'text' (columns 1, 3)" in err and "--text-field" in err
    assert not (tmp_path / "run").exists()


def test_a_fox_window_layer_keeps_the_gates_of_its_window_alone():
    import torch

    from octlm.model import KVCache
    from tests.test_recency_schemes import tiny

    model = tiny("fox", "fox/w4 fox")  # context 16: 24 tokens are past it, as a long generation goes
    ids = torch.randint(0, 50, (1, 24), generator=torch.Generator().manual_seed(3))
    cache = KVCache(2)
    with torch.no_grad():
        steps = [model(ids[:, t : t + 1], offset=t, cache=cache) for t in range(24)]
        window, full = cache.layers[0], cache.layers[1]
        assert window.held == 3 and window.scheme_state["fox"].shape[-1] == 3  # was 24 running sums
        assert full.held == 24 and full.scheme_state["fox"].shape[-1] == 24  # a global layer keeps every key's
        chunked = KVCache(2)
        pieces = [model(ids[:, :10], cache=chunked), model(ids[:, 10:24], offset=10, cache=chunked)]
    torch.testing.assert_close(torch.cat(pieces, 1), torch.cat(steps, 1), rtol=0, atol=1e-5)  # the same model


def test_the_fox_bias_keeps_its_digits_at_16x_the_trained_length():
    """Against a float64 reference: the error stays within float32's resolution of the bias and of one block's sum,
    whatever the length, where a difference of two running sums lost ``|c| * 1e-7`` (9e-5 at 2,048 tokens)."""
    import torch

    from octlm.model.positions.recency import FOX_BLOCK, forget_bias

    length = 16 * 128  # 16 x a trained length of 128, as the length study scores
    g = torch.Generator().manual_seed(0)
    # gates near 1/2, as a model starts (log f about -0.7), so the running sum reaches about -1,400
    log_forget = torch.nn.functional.logsigmoid(torch.randn(1, 2, length, generator=g, dtype=torch.float64) * 0.5)
    log_forget = log_forget.float().double()  # the float32 inputs the model hands over, exactly
    c = log_forget.cumsum(-1)
    exact = c[..., :, None] - c[..., None, :]  # float64: about 1e-13 off at these sums
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    for q_len in (length, 1, 37):  # a whole pass, one cached step, a chunk
        got = forget_bias(log_forget.float(), q_len, length).double()
        ref = exact[..., -q_len:, :]
        block = FOX_BLOCK * log_forget.abs().max()
        bound = 8 * torch.finfo(torch.float32).eps * (ref.abs() + block)
        assert ((got - ref).abs() <= bound)[..., causal[-q_len:]].all()
    near = (got - ref).abs()[..., -FOX_BLOCK:].max()  # the last query and its nearest keys: the weights that count
    assert near < 16 * torch.finfo(torch.float32).eps * block


def _layout_model(layers: str):
    import torch

    from octlm import Decoder, DecoderConfig

    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=40, context_length=16, d_model=16, n_heads=2, n_layers=2, layers=layers)
    return Decoder(config).eval()


@pytest.mark.parametrize("method", ["yarn", "linear", "ntk", "llama3", "dynamic-ntk"])
def test_a_rope_scaling_leaves_window_layers_within_t_alone(method):
    """docs/length-study.md: RoPE scalings act on global layers only (mlx-vlm PR 1709, as Gemma 3's local layers)."""
    import torch

    ids = torch.randint(0, 40, (1, 64), generator=torch.Generator().manual_seed(0))  # 4 x T
    mixed = _layout_model("rope/w4 rope")
    with torch.no_grad():
        plain = mixed(ids)
        mixed.set_rope_scaling(method, 4.0)
        scaled = mixed(ids)
    assert mixed.positions.for_layer(0).scaling is None  # the window layer keeps its trained rotation
    assert mixed.positions.for_layer(1).scaling.method == method and not torch.allclose(scaled, plain)
    windows_only = _layout_model("rope/w4 none")  # the scaling would act on no layer: said, not done in silence
    with pytest.raises(ValueError, match=f"every layer that takes {method} has a window within the 16 tokens"):
        windows_only.set_rope_scaling(method, 4.0)


def test_export_refuses_a_scaling_transformers_would_give_window_layers_too():
    from octlm.export.hf_common import InteropError
    from octlm.export.hf_llama import family_mapper
    from octlm.model import DecoderConfig
    from octlm.model.positions.rope_scaling import RopeScaling

    config = DecoderConfig(vocab_size=40, context_length=16, d_model=16, n_heads=2, n_layers=2, block="llama")
    config = DecoderConfig.from_dict({**config.to_dict(), "layers": "rope/w4 rope"})
    with pytest.raises(InteropError, match=r"leaves the window layers \(1\) unscaled.*export without --rope-scaling"):
        family_mapper(config).check(config, RopeScaling("yarn", 4.0, 16))
    family_mapper(config).check(config, None)  # unscaled, it exports as before
