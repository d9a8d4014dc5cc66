"""PaTH against the paper's definition written out here with explicit matrices, exact under cached decoding, and seen
by record_attention.

The references follow Yang et al. 2025 (arXiv 2505.16381) §3: ``H_t = I - beta_t w_t w_t^T`` built as a D x D
matrix, the logit of query ``i`` and key ``j`` is ``k_j^T (H_(j+1) H_(j+2) ... H_i) q_i / sqrt(D)`` multiplied out
matrix by matrix, softmax over the keys up to the query; ``w_t`` and ``beta_t`` as the authors' layer reads them (a
low-rank projection, a causal convolution of 3 taps, SiLU, L2 norm per head; ``beta = 2 sigmoid``), one tap at a
time here. None of it calls octlm's PaTH code.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.model import KVCache
from octlm.model.attention_maps import record_attention
from octlm.model.positions import SCHEMES, PaTHAttention, facts_of
from octlm.model.positions.path import path_logits

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def householder_matrix(w: torch.Tensor, beta: float) -> torch.Tensor:
    """``I - beta w w^T``, float64 [D, D], for one token and head."""
    w = w.double()
    return torch.eye(len(w), dtype=torch.float64) - beta * torch.outer(w, w)


def logits_by_hand(q, k, w, beta):
    """One head's logits [L][L] (``None`` above the diagonal): q, k, w [L, D], beta [L], by explicit products."""
    length, d = q.shape
    out = [[None] * length for _ in range(length)]
    for i in range(length):
        for j in range(i + 1):
            between = torch.eye(d, dtype=torch.float64)
            for t in range(j + 1, i + 1):  # H_(j+1) H_(j+2) ... H_i, left to right as the paper writes it
                between = between @ householder_matrix(w[t], float(beta[t]))
            out[i][j] = float(k[j].double() @ between @ q[i].double()) / math.sqrt(d)
    return out


def directions_by_hand(scheme: PaTHAttention, x: torch.Tensor, layer: int, lengths: list | None = None):
    """``w`` [B, H, T, D] and ``beta`` [B, H, T] from ``x`` [B, T, C], a tap and a token at a time; ``lengths``, when
    given, receives each direction's length before it was made a unit ([B, H, T])."""
    B, T, C = x.shape
    heads, d = scheme.n_heads, C // scheme.n_heads
    down, up = (m.weight.double() for m in scheme.directions[layer])
    taps = scheme.convolutions[layer].weight.double()[:, 0, :]  # [C, 3], tap 2 reads the token itself
    projected = x.double() @ down.T @ up.T
    w = torch.zeros(B, heads, T, d, dtype=torch.float64)
    norms = torch.zeros(B, heads, T, dtype=torch.float64)
    for t in range(T):
        mixed = sum(taps[:, 2 - back] * projected[:, t - back] for back in range(3) if t - back >= 0)
        mixed = mixed * torch.sigmoid(mixed)  # SiLU
        for h in range(heads):
            part = mixed[:, h * d : (h + 1) * d]
            norms[:, h, t] = part.norm(dim=-1)
            w[:, h, t] = part / part.norm(dim=-1, keepdim=True)
    if lengths is not None:
        lengths.append(norms)
    strengths = scheme.strengths[layer]
    beta = 2 * torch.sigmoid(x.double() @ strengths.weight.double().T + strengths.bias.double())
    return w, beta.transpose(1, 2)


def tiny(position: str = "pathattn", layers: str = "") -> Decoder:
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(
            position=position, vocab_size=50, context_length=16, d_model=32, n_heads=4, n_layers=2, layers=layers
        )
    ).eval()
    for p in model.parameters():  # larger weights than N(0, 0.02), so beta spreads over (0, 2) and scores are not 0
        p.data.mul_(10 if p.dim() >= 2 else 1).add_(0 if p.dim() >= 2 else 0.3 * torch.randn_like(p))
    return model


# ---- the formula -----------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(earlier=st.integers(0, 4), length=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_logits_are_the_papers_householder_products(earlier, length, seed):
    """One pass over ``earlier + length`` tokens, and ``earlier`` tokens then ``length`` carried over, both give the
    explicit products."""
    g = torch.Generator().manual_seed(seed)
    total = earlier + length
    q, k = (torch.randn(1, 2, total, 4, generator=g) for _ in range(2))
    w = torch.nn.functional.normalize(torch.randn(1, 2, total, 4, generator=g), dim=-1)
    beta = 2 * torch.rand(1, 2, total, generator=g)
    whole, _ = path_logits(q, k, w, beta)
    if earlier:
        _, carried = path_logits(q[:, :, :earlier], k[:, :, :earlier], w[:, :, :earlier], beta[:, :, :earlier])
    pieces, _ = path_logits(
        q[:, :, earlier:], k[:, :, earlier:], w[:, :, earlier:], beta[:, :, earlier:], carried if earlier else None
    )
    assert pieces.shape == (1, 2, length, total)
    for h in range(2):
        want = logits_by_hand(q[0, h], k[0, h], w[0, h], beta[0, h])
        for i in range(total):
            for j in range(i + 1):
                assert whole[0, h, i, j].item() == pytest.approx(want[i][j], rel=1e-5, abs=1e-5), (h, i, j)
                if i >= earlier:
                    assert pieces[0, h, i - earlier, j].item() == pytest.approx(want[i][j], rel=1e-5, abs=1e-5)


@settings(max_examples=10, deadline=None)
@given(length=st.integers(1, 6), layer=st.integers(0, 1), seed=st.integers(0, 10**6))
def test_directions_and_strengths_are_read_as_the_authors_layer_reads_them(length, layer, seed):
    g = torch.Generator().manual_seed(seed)
    scheme = PaTHAttention(DecoderConfig(position="pathattn", d_model=8, n_heads=2, n_layers=2))
    for p in scheme.parameters():
        p.data = torch.randn(p.shape, generator=g)
    x = torch.randn(2, length, 8, generator=g)
    w, beta, _ = scheme.householder(x, layer)
    lengths = []
    want_w, want_beta = directions_by_hand(scheme, x, layer, lengths)
    # A unit vector made from a near-zero one is ill-conditioned (float32 against float64, and F.normalize's eps), and
    # weights drawn from randn leave float32 errors of up to 3e-5 in well-made ones (6,000 draws measured): directions
    # longer than 0.01 are held to 1e-4, which a wrong tap or head (errors of order 1) still fails by far
    kept = lengths[0] > 0.01
    torch.testing.assert_close(w.double()[kept], want_w[kept], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(beta.double(), want_beta, rtol=1e-5, atol=1e-6)
    assert ((beta > 0) & (beta < 2)).all()


# ---- exact under cached decoding -------------------------------------------------------------


@pytest.mark.parametrize("layers", ["", "pathattn/w3 rope", "rope/w4 pathattn"])
@settings(max_examples=8, deadline=None)
@given(prompt=st.integers(1, 9), step=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_cached_passes_equal_the_full_recompute(layers, prompt, step, seed):
    """Any prompt, then chunks of ``step`` tokens over a cache, give the logits of one pass over the whole sequence
    (PaTH alone, and as a windowed or global layer of a layout)."""
    model = tiny("pathattn", layers)
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(seed))
    cache = KVCache(2)
    with torch.no_grad():
        full = model(ids)
        pieces = [model(ids[:, :prompt], cache=cache)]
        while cache.length < 16:
            end = min(cache.length + step, 16)
            pieces.append(model(ids[:, cache.length : end], offset=cache.length, cache=cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


def test_generate_with_and_without_a_cache_agree():
    model = tiny()
    prompt = torch.tensor([[3, 4, 5]])
    assert torch.equal(model.generate(prompt, 12), model.generate(prompt, 12, use_cache=False))


# ---- record_attention ------------------------------------------------------------------------


def test_record_attention_gives_the_softmax_of_the_householder_logits():
    model = tiny()
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad(), record_attention(model) as maps:
        out = model(ids)
    torch.testing.assert_close(out, model(ids).detach())  # recording changes nothing
    with torch.no_grad():
        x = model.blocks[0].ln_attn(model.token_embedding(ids))
        q, k, _ = (x @ model.blocks[0].attn.qkv.weight.T + model.blocks[0].attn.qkv.bias).view(1, 6, 3, 4, 8).unbind(2)
        w, beta = directions_by_hand(model.positions, x, 0)
    probabilities = maps.probabilities[0]
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(1, 4, 6))
    for h in range(4):
        logits = logits_by_hand(q[0, :, h], k[0, :, h], w[0, h], beta[0, h])
        for i in range(6):
            top = max(logits[i][: i + 1])
            want = [math.exp(s - top) for s in logits[i][: i + 1]]
            want = [p / sum(want) for p in want] + [0.0] * (5 - i)
            assert probabilities[0, h, i].tolist() == pytest.approx(want, rel=1e-4, abs=1e-6), (h, i)


# ---- what the rest of octlm asks -------------------------------------------------------------


def test_path_is_opt_in_and_forms_its_own_weights():
    assert SCHEMES["pathattn"].attends and facts_of("pathattn").label == "PaTH"
    assert not facts_of("pathattn").in_length_study and not facts_of("pathattn").in_task_study


def test_path_learns_its_directions_and_strengths():
    model = tiny()
    model.train()
    model(torch.randint(0, 50, (2, 8))).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.positions.parameters())


def test_path_without_its_input_read_says_so():
    scheme = PaTHAttention(DecoderConfig(position="pathattn", d_model=8, n_heads=2))
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(TypeError, match=r"layer 1 reads the layer's input: pass seen=read_input\(x, 1, cache\)"):
        scheme.attend(q, q, q, torch.ones(3, 3, dtype=torch.bool), 1)


def test_export_hf_randomized_and_document_positions_refuse_it_by_name():
    from octlm.export.hf import mapper_for
    from octlm.export.hf_common import InteropError

    with pytest.raises(InteropError, match="position='pathattn' has no transformers form: .*PaTH"):
        mapper_for(DecoderConfig(position="pathattn"))
    with pytest.raises(ValueError, match="not position='pathattn'"):
        DecoderConfig(position="pathattn", randomize_positions=2)
    with pytest.raises(ValueError, match="not position='pathattn'"):
        DecoderConfig(position="pathattn", document_mask=True)
