"""The explorer's numbers (PCA, counts, position vectors, loss curve) and octlm embeddings."""

from __future__ import annotations

import json
import math
import struct
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.errors import RunError
from octlm.inspect.diagnostics import cosine_similarity_matrix
from octlm.inspect.embeddings import loss_curve, pca_2d, run_position_vectors, token_counts
from tests.test_cli import TINY, json_lines


def test_pca_matches_the_covariance_eigenvectors():
    """Against numpy's eigendecomposition of the covariance matrix, an independent route to PCA."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(200, 12)) @ np.diag([5, 3, 1, 1, 0.5, 0.5, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1])
    coords, explained = pca_2d(torch.tensor(table, dtype=torch.float32))
    centred = table - table.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(centred, rowvar=False))
    order = np.argsort(values)[::-1][:2]
    expected = centred @ vectors[:, order]
    for k in range(2):  # each component is defined up to its sign
        sign = np.sign(np.dot(expected[:, k], coords[:, k]))
        np.testing.assert_allclose(coords[:, k], sign * expected[:, k], atol=1e-4)
    np.testing.assert_allclose(explained, values[order] / values.sum(), rtol=1e-5)


def _pca_by_the_sign_rule(table: np.ndarray) -> np.ndarray:
    """PCA coordinates by numpy's eigh of the covariance, each component's largest loading made positive by hand."""
    centred = table - table.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(centred, rowvar=False))
    components = vectors[:, np.argsort(values)[::-1][:2]]
    for k in range(2):
        components[:, k] *= np.sign(components[np.argmax(np.abs(components[:, k])), k])
    return centred @ components


def test_pca_sign_rule_on_a_hand_made_line():
    """Rows along (1, -2) plus a little (2, 1): the first component is (-1, 2)/sqrt(5), its largest loading positive."""
    t = np.linspace(-3.0, 3.0, 13)
    # Alternating signs over a symmetric t: sum(t * wobble) = 0, so the two directions are exactly uncorrelated.
    wobble = 0.1 * (-1.0) ** np.arange(13)
    table = np.outer(t, [1.0, -2.0]) + np.outer(wobble, [2.0, 1.0])
    coords, _ = pca_2d(torch.tensor(table))
    centred = table - table.mean(axis=0)
    # float64 SVD of a 13 x 2 table: agreement to ~1e-12; 1e-9 leaves room for any LAPACK.
    np.testing.assert_allclose(coords[:, 0], centred @ (np.array([-1.0, 2.0]) / math.sqrt(5)), atol=1e-9)
    np.testing.assert_allclose(coords[:, 1], centred @ (np.array([2.0, 1.0]) / math.sqrt(5)), atol=1e-9)


@given(seed=st.integers(0, 2**31 - 1), flip=st.lists(st.sampled_from([-1.0, 1.0]), min_size=6, max_size=6))
@settings(max_examples=40, deadline=None)
def test_pca_signs_follow_the_largest_loading_rule(seed, flip):
    """Signed coordinates equal numpy's eigenvectors with the rule applied by hand, for any column signs."""
    # Distinct spreads keep the top two eigenvalues apart, so each component is unique up to the sign the rule fixes.
    table = np.random.default_rng(seed).normal(size=(40, 6)) * np.array([6.0, 3.0, 1.0, 0.5, 0.3, 0.1]) * flip
    coords, _ = pca_2d(torch.tensor(table))
    # float64 on both sides, eigenvalue gaps >= 2x: the two routes agree to ~1e-10 of the coordinates' size.
    np.testing.assert_allclose(coords, _pca_by_the_sign_rule(table), atol=1e-7)


def test_pca_sign_is_fixed_and_bad_shapes_refused():
    """Negating every row negates every coordinate (the rule fixes the components), and bad shapes are refused."""
    table = torch.randn(50, 6, generator=torch.Generator().manual_seed(1))
    a, _ = pca_2d(table)
    b, _ = pca_2d(-table)
    np.testing.assert_allclose(b, -a, atol=1e-5)
    with pytest.raises(ValueError, match=r"\[N >= 2, C >= 2\]"):
        pca_2d(torch.zeros(1, 5))


def test_token_counts_match_a_plain_count(trained_run):
    manifest = json.loads((trained_run / "manifest.json").read_text())
    entry = manifest["tokens"]["train"]
    raw = (trained_run / entry["file"]).read_bytes()
    ids = (
        struct.unpack(f"<{len(raw) // 2}H", raw)
        if entry["dtype"] == "uint16"
        else struct.unpack(f"<{len(raw) // 4}I", raw)
    )
    counts = token_counts(trained_run, 300)
    assert dict(Counter(ids)) == {i: int(c) for i, c in enumerate(counts) if c}


def test_token_counts_absent_without_train_bin(trained_run, tmp_path):
    assert token_counts(tmp_path, 300) is None


def test_loss_curve_reads_metrics_and_names_a_bad_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 10, "kind": "train", "loss": 5.0}\n'
        '{"step": 10, "kind": "eval", "val_loss": 4.5, "val_bpb": 2.0}\n'
        '{"step": 20, "kind": "train", "loss": NaN}\n'
        "\n"
        '{"step": 20, "kind": "eval", "val_loss": 4.0}\n'
    )
    assert loss_curve(tmp_path) == {"train": [[10, 5.0]], "eval": [[10, 4.5, 2.0], [20, 4.0, None]]}
    (tmp_path / "metrics.jsonl").write_text('{"step": 10, "kind": "train", "loss": 5.0}\n{"step": 2\n')
    with pytest.raises(RunError, match=r"metrics.jsonl:2: not a JSON line"):
        loss_curve(tmp_path)
    assert loss_curve(tmp_path / "missing") == {"train": [], "eval": []}


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_position_vectors_per_scheme(scheme):
    config = DecoderConfig(vocab_size=300, context_length=24, d_model=16, n_heads=2, position=scheme)
    model = Decoder(config)
    found = run_position_vectors(model)
    if scheme in ("alibi", "none"):
        assert found is None
        return
    assert found.vectors.shape[0] == 24
    similarity = cosine_similarity_matrix(found.vectors).numpy()
    if scheme == "learned":
        assert found.source == "learned" and torch.equal(found.vectors, model.position_embedding.weight.detach())
    else:
        # Sinusoidal and RoPE: similarity = mean over pairs of cos(w_i (t - s)), written out here.
        dim = 16 if scheme == "sinusoidal" else config.head_dim
        w = [10000 ** (-2 * i / dim) for i in range(dim // 2)]
        expected = np.array([[np.mean([math.cos(wi * (t - s)) for wi in w]) for s in range(24)] for t in range(24)])
        np.testing.assert_allclose(similarity, expected, atol=1e-5)
        assert found.source == "computed"


def test_embeddings_command_neighbours_and_figures(trained_run, tmp_path, capsys):
    from octlm.run.load import load_run

    model, tokenizer = load_run(trained_run)
    text_token = next(
        tokenizer.token_str(i) for i in range(257, 300) if len(tokenizer.encode(tokenizer.token_str(i))) == 1
    )
    out = tmp_path / "figs"
    assert (
        main(
            [
                "embeddings",
                "--run",
                str(trained_run),
                "--token",
                text_token,
                "7",
                "--k",
                "4",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    result = json_lines(capsys.readouterr().out)[-1]
    assert [e["token"] for e in result["tokens"]] == [tokenizer.encode(text_token)[0], 7]
    table = model.token_embedding.weight.detach().numpy().astype(np.float64)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    for entry in result["tokens"]:
        scores = unit @ unit[entry["token"]]
        scores[entry["token"]] = -np.inf
        best = np.argsort(-scores)[:4]
        assert [n["index"] for n in entry["neighbours"]] == best.tolist()
        np.testing.assert_allclose([n["score"] for n in entry["neighbours"]], scores[best], atol=1e-5)
        assert [n["label"] for n in entry["neighbours"]] == [tokenizer.token_str(int(i)) for i in best]
    for key, name in (("positions", "positions.png"), ("pca", "tokens-pca.png")):
        path = out / name
        assert result["figures"][key] == str(path)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert width >= 800 and height >= 500


def test_embeddings_defaults_and_a_scheme_without_vectors(small_corpus, tmp_path, capsys):
    run = tmp_path / "alibi"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(run),
                "--max-steps",
                "3",
                "--position",
                "alibi",
                "--quiet",
                *TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["embeddings", "--run", str(run), "--json"]) == 0
    result = json_lines(capsys.readouterr().out)[-1]
    assert len(result["tokens"]) == 5 and result["figures"]["positions"] is None
    assert (run / "embeddings" / "tokens-pca.png").is_file() and not (run / "embeddings" / "positions.png").exists()


@pytest.mark.parametrize(
    "args,match",
    [
        (["--token", "a b c d e"], "tokens"),
        (["--token", ""], "--token '' is no token; give a token's text"),  # not "0 tokens ...; give one of them"
        (["--token", "99999"], "outside the vocabulary"),
        (["--k", "0"], "--k must be >= 1"),
    ],
)
def test_embeddings_bad_input_is_one_line(trained_run, tmp_path, capsys, args, match):
    assert main(["embeddings", "--run", str(trained_run), "--out", str(tmp_path / "o"), *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_every_token_stand_in_has_a_glyph_in_the_figure_font(tmp_path):
    # A stand-in the font lacks prints a raw "Glyph ... missing" warning and draws a box in the PNG.
    import warnings

    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    from octlm.data.token_display import _VISIBLE
    from octlm.inspect.figures import pca_figure, save_png

    font = font_manager.findfont(font_manager.FontProperties(), fallback_to_default=False)
    charmap = FT2Font(font).get_charmap()
    lacking = [c for c in _VISIBLE.values() if ord(c) not in charmap]
    assert not lacking, f"{font} has no glyph for {lacking}"

    labels = ["".join(_VISIBLE), "x", "y"]  # token texts: the figure shows them with the stand-ins
    coords = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = pca_figure(coords, np.array([0.6, 0.4]), labels, None, "stand-ins", marked=[0])
        save_png(figure, tmp_path / "labels.png")
    assert not [str(w.message) for w in caught if "missing" in str(w.message)]


def test_tokens_no_font_can_draw_are_labelled_by_code_point_without_warnings(tmp_path):
    """CJK and emoji tokens: drawn with a font that has them, else as \\uXXXX, never as boxes."""
    import warnings

    from octlm.inspect.figures import font_coverage, pca_figure, save_png, shown_label

    labels = ["世界", "\U0001f600!", " é", "a$b"]
    for label in labels:
        text, families = shown_label(label)
        for c in label.replace(" ", "␣"):
            drawable = any(ord(c) in points for _, points in font_coverage())
            if drawable:
                family = next(name for name, points in font_coverage() if ord(c) in points)
                assert c in text and family in families
            else:
                code = f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                assert c not in text and code in text
    assert shown_label("a$b")[0] == r"a\$b"
    coords = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = pca_figure(coords, np.array([0.6, 0.4]), labels, None, "cjk and emoji", marked=[0, 1, 2, 3])
        save_png(figure, tmp_path / "labels.png")
    assert not [str(w.message) for w in caught if "missing" in str(w.message).lower()]


def test_a_font_that_has_the_glyph_is_asked_for(monkeypatch):
    from octlm.inspect import figures

    monkeypatch.setattr(
        figures,
        "font_coverage",
        lambda: (("DejaVu Sans", frozenset(map(ord, "ab"))), ("Noto Sans CJK JP", frozenset([ord("世")]))),
    )
    assert figures.shown_label("a世\U0001f600") == ("a世\\U0001f600", ["DejaVu Sans", "Noto Sans CJK JP"])
