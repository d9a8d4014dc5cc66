"""The base class of position schemes: the hooks a scheme overrides, its math alone.

The modules beside this one hold the schemes themselves, one class each,
registered in :mod:`octlm.model.positions.registry` by its ``register``; this
module names none of them. What other parts of octlm read of a scheme (its
label, whether a study or a paper's preset trains it, its transformers form,
what the page shows, whether its cache can evict) is not here but in the
record registered beside the class (:mod:`octlm.model.positions.facts`); the
memory its score bias costs and which RoPE scalings it takes are methods here,
since the scheme's arithmetic decides them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.model.positions.distances import query_key_positions
from octlm.model.scheme_catalog import random_position_schemes

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.kvcache import LayerCache


#: Bytes per score entry [head, query, key] that a score bias costs inside
#: attention: the float32 bias, the masked scores and the weights beside them.
SCORE_BIAS_BYTES = 3 * 4


class PositionScheme(nn.Module):
    """Base class: no position signal anywhere.

    Subclasses override ``embed``, ``rotate`` or ``score_bias``, and the
    class attributes below where the default does not fit. ``max_length`` is
    the number of positions the scheme can address, or ``None`` when any
    length works.
    """

    name = "base"
    has_table_limit = False
    #: the options meaningful for this scheme alone: a frozen dataclass of ``octlm.declare.option`` fields (RoPE's
    #: ``RopeOptions``), or None. Each is a flag of octlm train and octlm length, a TOML and a config.json key, held
    #: in ``DecoderConfig.scheme_options``; a scheme that extends another reads that one's options too
    options: type | None = None
    #: the names of the options it reads, its own and those of the schemes it extends (set by :func:`register`)
    reads: tuple[str, ...] = ()
    #: the scheme a DecoderConfig gets when none is named (one scheme sets it)
    is_default = False
    #: reads its positions through :meth:`position_ids`, so ``randomize_positions`` > 1 can train it
    takes_random_positions = False
    #: under ``document_mask`` its signal restarts at each document: it reads per-row positions [B, T] through
    #: :meth:`position_ids` (:meth:`place_documents`), or depends on distances within a document alone, or on nothing;
    #: off unless a scheme says so, so a scheme that reads an absolute position some other way is refused by name
    takes_document_positions = False
    #: multiplies the token rows itself before adding its signal (so ``--embedding-scale`` would scale them twice)
    scales_token_rows = False
    #: forms attention's weights itself (:meth:`attend`) instead of the softmax of SDPA; the block asks this first, so
    #: a scheme that leaves it False pays nothing for the hook
    attends = False

    @classmethod
    def passed_channels(cls, config: DecoderConfig) -> int:
        """Trailing channels of each head that the scheme passes through unturned while it turns the others (GPT-NeoX's
        partial rotary); 0 when it turns every channel or none (``--key-offset`` shifts these channels of the keys)."""
        return 0

    def channel_pairs(self) -> tuple[Tensor, Tensor, Tensor] | None:
        """For a scheme that turns channel pairs of each head (RoPE and its kin): each pair's two channels and its
        angle per token (:meth:`octlm.model.positions.rotary.RotaryPositions.channel_pairs`); ``None`` here."""
        return None

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        #: with ``randomize_positions`` F > 1, positions are drawn from ``0 .. random_range - 1`` (Ruoss et al. 2023)
        self.randomized = config.randomize_positions > 1
        self.random_range = config.context_length * config.randomize_positions
        self.drawn: Tensor | None = None
        self._test_draw: Tensor | None = None
        #: whether the pass under way continues a :class:`~octlm.model.kvcache.KVCache` (see :meth:`start_pass`)
        self.cached_pass = False

    def start_pass(self, length: int, offset: int, cached: bool) -> None:
        """Called by the decoder before each forward pass of ``length`` new tokens from token ``offset``;
        :meth:`end_pass` after it.

        ``cached`` says that the pass continues a key/value cache, whose keys
        start at position 0 and were made by earlier passes; a scheme whose
        keys must agree with those (xPos's decay reference) reads it from
        ``cached_pass``. Then places the pass's tokens (:meth:`draw_positions`).
        """
        self.cached_pass = cached
        self.draw_positions(length, offset)

    def end_pass(self) -> None:
        """Forget the pass's positions: a scheme asked outside a pass (the explorer) places tokens at ``0, 1, 2,
        ...``."""
        self.cached_pass, self.drawn = False, None

    def draw_positions(self, length: int, offset: int = 0) -> None:
        """Place the ``length`` tokens of a pass from token ``offset``: randomized positions (Ruoss et al. 2023, §3).

        In training each sequence sits at a sorted random subset of
        ``0 .. random_range - 1`` instead of ``0 .. length - 1``, so a model
        trained on ``T`` tokens has seen the positions of sequences up to
        ``random_range`` long; the draw comes from torch's global generator (a
        seeded run draws the same positions). Outside training the tokens sit
        at :meth:`test_positions`. Every layer of the pass reads the same
        positions (:meth:`position_ids`). Without randomization, and for a
        sequence of ``random_range`` tokens or more, nothing is drawn: ``0, 1, 2, ...``.
        """
        if not self.training:
            self.drawn = None if (test := self.test_positions(offset + length)) is None else test[offset:]
        elif self.randomized and self.random_range > length and offset == 0:
            self.drawn = torch.randperm(self.random_range)[:length].sort().values
        else:
            self.drawn = None

    def test_positions(self, length: int) -> Tensor | None:
        """Positions of a ``length``-token sequence outside training, int64 [length], or ``None`` for ``0 .. length -
        1``.

        A randomized model meets at test time what it met in training, as
        Ruoss et al. 2023 do (their evaluation draws the positions too): a
        sorted random subset of ``0 .. random_range - 1``. The draw comes from
        a generator seeded with ``length``, so evaluation is repeatable, does
        not touch torch's global generator, and a sequence gets the same
        positions with or without a key/value cache. A sequence of
        ``random_range`` tokens or more, and any sequence of a model trained
        without randomization, sits at ``0 .. length - 1``.
        """
        if not self.randomized or length >= self.random_range:
            return None
        if self._test_draw is None or len(self._test_draw) != length:
            generator = torch.Generator().manual_seed(length)
            self._test_draw = torch.randperm(self.random_range, generator=generator)[:length].sort().values
        return self._test_draw

    def place_documents(self, positions: Tensor) -> None:
        """Place the pass's tokens at their positions within their documents, int64 [B, T] (``document_mask``).

        Called by the decoder after :meth:`start_pass`; :meth:`position_ids` then gives these rows until
        :meth:`end_pass`.
        """
        self.drawn = positions

    def position_ids(self, length: int, offset: int, device: torch.device) -> Tensor:
        """Positions of ``length`` tokens starting at token ``offset``, int64 [length] (or [B, length] under
        :meth:`place_documents`).

        The pass's (:meth:`draw_positions`, :meth:`place_documents`) or ``offset ..``.
        """
        if self.drawn is not None and self.drawn.shape[-1] == length:
            return self.drawn.to(device)
        return torch.arange(offset, offset + length, device=device)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        """Raise ``ValueError`` naming the field when ``config`` cannot use this scheme."""
        if config.randomize_positions > 1 and not cls.takes_random_positions:
            takers = ", ".join(random_position_schemes())
            raise ValueError(
                f"randomize_positions={config.randomize_positions} needs a scheme that reads positions ({takers}), "
                f"not position={cls.name!r}"
            )

    @classmethod
    def scalings(cls) -> tuple[str, ...]:
        """Names in :data:`ROPE_SCALINGS` this scheme takes at run time; none here.

        A scheme that names any also defines ``set_rope_scaling(scaling: RopeScaling | None)``.
        """
        return ()

    @property
    def max_length(self) -> int | None:
        return None

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Return token vectors ``x`` [B, T, C] with position added (here: unchanged)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Return queries [B, H, Tq, D] and keys [B, H, Tk, D] with position applied (here: unchanged).

        Queries sit at positions ``offset .. offset + Tq - 1``; keys end where
        the queries end, at ``offset + Tq - Tk .. offset + Tq - 1`` (a cached
        step has ``Tk >= Tq``).
        """
        return q, k

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor | None:
        """Additive bias for attention scores [H, q_len, k_len], or ``None``."""
        return None

    def attention_bias(
        self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0, *, seen: object = None
    ) -> Tensor | None:
        """What attention layer ``layer`` adds to its scores: [H, Tq, Tk], [B, H, Tq, Tk] or ``None``.

        ``q`` [B, H, Tq, D] and ``k`` [B, H, Tk, D] are what SDPA gets (after
        :meth:`rotate`, with a cache's keys), placed as in :meth:`rotate`.
        Here: :meth:`score_bias`, the same for every layer and input. A scheme
        whose bias reads the queries and keys (CoPE) or differs by layer
        (KERPLE) overrides this instead; one whose bias reads the layer's input
        (FoX) gets what its :meth:`read_input` returned as ``seen`` (the
        attention layer passes ``seen`` only when that is not ``None``).
        """
        return self.score_bias(q.shape[-2], k.shape[-2], offset)

    def read_input(self, x: Tensor, layer: int = 0, cache: LayerCache | None = None) -> object:
        """What the scheme reads of attention layer ``layer``'s input before it attends, or ``None``: ``x`` [B, T, C],
        after the block's norm (what the query, key and value projections read), the pass's ``T`` new tokens.

        Called by every attention layer before :meth:`rotate`, once per
        pass. A scheme whose signal is computed from the tokens (FoX's forget
        gates, a data-dependent rotation such as PaTH's) computes it here and
        returns it; the attention layer holds it for the pass and hands it
        back to the same layer's :meth:`attention_bias` or :meth:`attend` as
        ``seen``, so the scheme keeps nothing between the calls. What a later
        cached pass needs of earlier tokens (per-key sums, products) it keeps
        in ``cache.scheme_state`` (a dict, one per layer, emptied with the
        cache), so a cached step, which sees only its new tokens here, computes
        what the full pass computes. ``cache`` is ``None`` without a key/value
        cache. Here: nothing.
        """
        return None

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        visible: Tensor,
        layer: int = 0,
        dropout: float = 0.0,
        *,
        seen: object = None,
    ) -> tuple[Tensor, Tensor]:
        """Attention layer ``layer``'s output and weights, for a scheme whose weights are not a softmax (``attends``).

        ``q`` [B, H, T, D] after :meth:`rotate` (and any query scale), ``k``
        and ``v`` [B, H, S, D] with a cache's keys and values (keys end where
        the queries end, as in :meth:`rotate`); ``visible`` bool [T, S] or
        [B, 1, T, S], True where query ``i`` may see key ``j`` (causal, and
        the layer's window and document masks when it has them; the query's
        own key is always visible). ``dropout``: the probability of dropping
        a weight (0 outside training); ``seen``: what :meth:`read_input`
        returned for this layer's input, when not ``None``. Returns the output [B, H, T, D] and the
        weights float32 [B, H, T, S] it is the weighted sum of ``v`` with
        (0 where not visible), which :func:`~octlm.model.attention_maps.record_attention`
        records as the layer's probabilities. Called only when ``attends`` is
        True; no score bias is added (:meth:`attention_bias` is the softmax's).

        Raises:
            NotImplementedError: here, where the softmax of SDPA attends.
        """
        raise NotImplementedError(f"{type(self).__name__} sets attends = True but does not define attend")

    def pass_positions(self, q_len: int, k_len: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Positions of the queries [q_len] and keys [k_len] of an attention call, int64; keys end where the queries
        end.

        ``offset ..`` (:func:`~octlm.model.positions.distances.query_key_positions`)
        unless the pass sits at randomized positions (:meth:`draw_positions`):
        then the drawn ones, where a cached pass's keys reach back into the
        sequence's test-time draw (:meth:`test_positions`).
        """
        if self.drawn is None or self.drawn.dim() == 2:  # [B, T]: within documents, whose distances are the plain ones
            return query_key_positions(q_len, k_len, offset, device)
        every = self.drawn if k_len == len(self.drawn) else self.test_positions(offset + q_len)
        every = every.to(device)
        return every[len(every) - q_len :], every[len(every) - k_len :]

    def length_state(self, seq_len: int) -> object:
        """What the position signal of a ``seq_len``-token sequence depends on besides the token's index, or ``None``.

        Keys and values cached under one state are stale under another: a
        position's signal feeds every later layer, so the cache must be
        refilled (``Decoder.next_token_logits`` does that). Here: the length
        itself while :meth:`test_positions` draws the positions (a longer
        sequence places every token anew); RoPE adds its frequencies under
        dynamic NTK, which change with the length.
        """
        return seq_len if self.test_positions(seq_len) is not None else None

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """Bytes the score bias of a ``length``-token sequence takes in attention, 0 without one.

        A bias goes to attention as a float mask [n_heads, T, T] with the
        weights beside it, so it grows with T squared (sample checks it
        against the device's memory).
        """
        if (
            type(self).score_bias is PositionScheme.score_bias
            and type(self).attention_bias is PositionScheme.attention_bias
        ):
            return 0
        return SCORE_BIAS_BYTES * n_heads * length**2


__all__ = ["SCORE_BIAS_BYTES", "PositionScheme"]
