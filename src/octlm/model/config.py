"""The shape of a decoder and its position scheme, declared once: :class:`DecoderConfig`.

Each field is an option (default, help, bounds) that ``octlm train``, the
studies and ``config.json`` read from here. The options of the position
schemes are declared by each scheme as its own frozen dataclass and held in
one field, ``scheme_options`` (:class:`~octlm.model.scheme_catalog.SchemeOptions`);
the layer layout is data, ``layers``. This module imports no scheme: it reads
the catalog the schemes register in (:mod:`octlm.model.scheme_catalog`), so a
config is checked once, when it is made, and the rest of octlm trusts it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass

from octlm.declare import Bound, at_least, group, option, option_default, option_fields
from octlm.model.block_recipes import BLOCKS
from octlm.model.canon import CANON_HELP
from octlm.model.extras import extras_problem
from octlm.model.field_error import DecoderFieldError
from octlm.model.key_offset import KEY_OFFSET_HELP
from octlm.model.layout import LayerSpec, LayoutError, layer_data, layers_given, layout_text
from octlm.model.scheme_catalog import SCHEME_NAMES, SCHEMES, SchemeOptions, check_scheme_rules, default_scheme
from octlm.model.token_vectors import (
    EMBEDDING_NORMS,
    EMBEDDING_SCALES,
    NORM_HELP,
    PLAIN,
    SCALE_HELP,
    SKIPS_HELP,
    SMEAR_HELP,
)
from octlm.model.value_embeddings import BIGRAM_HELP, VALUE_HELP

#: MLP nonlinearities by name: the ``approximate`` argument of ``F.gelu``.
ACTIVATIONS = {"gelu": "none", "gelu_tanh": "tanh"}
#: The ``--attention-scale`` of plain softmax attention (the word is also NoPE's scheme name, hence one constant).
NO_SCALE = "none"
#: ``--attention-scale`` values (:mod:`octlm.model.attention_recipes`): :data:`NO_SCALE` and ``log``.
ATTENTION_SCALES = (NO_SCALE, "log")


def _taking_flat_scheme_options(cls):
    """Let ``cls(rope_theta=...)`` (and ``dataclasses.replace``) set a scheme's option by its flat name, as the
    command line and ``config.json`` do, into ``scheme_options``."""
    made = cls.__init__

    @functools.wraps(made)
    def __init__(self, *args, **kwargs):
        flat = {name: kwargs.pop(name) for name in list(kwargs) if name not in cls.__dataclass_fields__}
        if flat:
            kwargs["scheme_options"] = (kwargs.get("scheme_options") or SchemeOptions()).with_values(flat)
        made(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_taking_flat_scheme_options
@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a decoder. Defaults are octlm's Day-1 baseline.

    Attributes:
        vocab_size: rows of the token table (tokens). Day 1: 1,024.
        context_length: tokens per training block; also the number of rows of
            a learned position table. Day 1: 128.
        d_model: model width C (columns of every table). Day 1: 128.
        n_heads: attention heads; ``head_dim = d_model // n_heads``.
        n_layers: transformer blocks.
        dropout: dropout probability on attention weights and residual
            branches (0 disables it).
        activation: the MLP's GELU: ``gelu`` (exact, with erf) or
            ``gelu_tanh`` (its tanh approximation, GPT-2's ``gelu_new``;
            Hendrycks & Gimpel 2016), kept so imported GPT-2 weights compute
            what they were trained to.
        position: a name in :data:`octlm.model.positions.SCHEMES` (default:
            the scheme marked ``is_default``, the learned table).
        randomize_positions: F >= 1; with F > 1, the positions of a sequence
            are a sorted random subset of ``0 .. F * context_length - 1`` (Ruoss
            et al. 2023), drawn anew for each training step and, outside
            training, once per sequence length from a generator seeded with it;
            for every scheme that reads a token's index (not NoPE or CoPE).
        attention_scale: ``none``, or ``log``: the query-key logits of the
            query at 1-based position ``n > context_length`` multiplied by
            ``log(n) / log(context_length)`` (:mod:`octlm.model.attention_recipes`).
        document_mask: attention does not cross the end-of-text token
            ``eot_id`` and positions restart at each document
            (:mod:`octlm.model.attention_recipes`), for the schemes that
            take it (``PositionScheme.takes_document_positions``).
        block: ``gpt2`` (the Day-1 block) or ``llama`` (RMSNorm, SwiGLU, no
            biases): :data:`~octlm.model.block_recipes.BLOCKS`.
        qk_norm: RMSNorm over ``head_dim`` on the queries and keys of every
            layer (a layout may say otherwise per layer).
        attention_sinks: one learned logit per head and layer that joins
            the softmax's denominator, a key no query writes and whose value
            is zero (GPT-OSS; :class:`~octlm.model.blocks.CausalSelfAttention`).
        output_gate: a sigmoid gate, one per channel of each head, computed
            from the layer's input and multiplied into the attention output
            before the output projection (Qiu et al. 2025, "Gated Attention
            for Large Language Models", arXiv 2505.06708).
        canon: the points of each block that get a Canon layer, some of ``ABCD`` (``""``: none): a causal
            depthwise convolution over each token and its 3 predecessors, with a residual (Allen-Zhu 2025;
            :mod:`octlm.model.canon`).
        key_offset: the channels of each head that the scheme leaves unturned carry, in each key, the previous
            position's key (modded-nanogpt; :mod:`octlm.model.key_offset`).
        value_embeddings, bigram_rows: token tables added to every other layer's values, and a hashed bigram table
            of that many rows added to the token rows (:mod:`octlm.model.value_embeddings`).
        layers: the layer layout (:mod:`octlm.model.layout`), one
            :class:`~octlm.model.layout.LayerSpec` per layer: a scheme, an
            attention window, a RoPE base, log-scaled queries and QK-norm;
            ``()`` is ``position`` in every layer, global. Given as a layout
            string (``"rope/w64*3 none"``; entries without a scheme take
            ``position``) or as LayerSpecs or their ``config.json`` objects;
            held as the tuple.
        eot_id: the tokenizer's ``<|endoftext|>`` id, which ``document_mask``
            reads (0 in every tokenizer octlm trains; ``octlm train`` writes
            the run's own).
        scheme_options: each position scheme's options, declared by the
            scheme (``PositionScheme.options``, a frozen dataclass):
            ``config.scheme_options["rope"]`` is a ``RopeOptions``. Every
            scheme's are kept, whatever ``position`` and ``layers`` name.

    In Python the options of the schemes keep their flat names too, as the
    flags and ``config.json`` spell them: ``DecoderConfig(rope_theta=5e5)``
    sets ``scheme_options["rope"].rope_theta`` and ``config.rope_theta``
    reads it. The built-in ones:

        rope_theta: RoPE wavelength base (Su et al. 2021), used by ``rope``.
        rope_layout: which channels RoPE pairs: ``interleaved`` (2i, 2i+1) or
            ``half`` (i, i + d/2, GPT-NeoX/LLaMA).
        partial_rotary_factor: fraction of each head RoPE rotates (1: all).
        sinusoidal_layout: ``interleaved`` (sin, cos, sin, ...) or
            ``concatenated`` ([sin | cos]).
        t5_num_buckets, t5_max_distance: T5 bias buckets and the distance
            (tokens) where the last one starts (Raffel et al. 2020: 32, 128).
        rope_fraction: p-RoPE's fraction of RoPE's channel pairs that turn
            (Barbero et al. 2024: 0.75), used by ``prope``.
        cope_npos_max: CoPE's learned position embeddings per layer
            (Golovneva et al. 2024's ``npos_max``), used by ``cope``.

    Every field but ``vocab_size`` and ``eot_id`` (which the tokenizer
    decides) is declared as an option (:func:`octlm.declare.option`, and
    :func:`octlm.declare.group` for the schemes'): ``octlm train`` nests this
    class in its options, so the flags, the TOML keys, ``config.json``'s
    ``model`` section and the range checks all come from here.

    Raises:
        ValueError: on construction, naming the field and value, when a size
            is not positive, ``d_model`` is not divisible by ``n_heads``,
            dropout is outside [0, 1), a value is outside its declared bounds,
            the position name is unknown, or the scheme cannot use the shape
            (odd ``head_dim`` with RoPE). It is a :class:`DecoderFieldError`
            naming the field wherever one field is at fault.
    """

    # Not an option: the run's tokenizer decides it (octlm train's --vocab-size asks the tokenizer for a size).
    vocab_size: int = 1024
    context_length: int = option(128, "tokens per training block (rows of a learned position table)")
    d_model: int = option(128, "model width C")
    n_heads: int = option(4, "attention heads")
    n_layers: int = option(2, "transformer blocks")
    dropout: float = option(0.0, "dropout probability")
    activation: str = option(
        "gelu", "MLP nonlinearity: exact gelu, or gelu_tanh (GPT-2's gelu_new)", choices=list(ACTIVATIONS)
    )
    position: str = option(default_scheme, "position scheme", choices=SCHEME_NAMES)
    randomize_positions: int = option(
        1,
        "train at positions drawn from FACTOR x context length (Ruoss et al. 2023; every scheme that reads a "
        "token's index); 1: off. Evaluation and sampling draw them the same way, seeded by the sequence "
        "length",
        bounds=at_least(1),
        metavar="FACTOR",
    )
    attention_scale: str = option(
        NO_SCALE,
        "query-key logits at 1-based position n > context length times log(n) / log(context length) "
        "(Chiang & Cholak 2022; Qwen's logn attention): log, or none",
        choices=list(ATTENTION_SCALES),
    )
    document_mask: bool = option(
        False, "in packed blocks attention does not cross <|endoftext|>, and positions restart at each document"
    )
    block: str = option(
        "gpt2",
        "the block: gpt2 (LayerNorm, GELU MLP of 4C, biases) or llama (RMSNorm, SwiGLU MLP of 8C/3, no biases)",
        choices=list(BLOCKS),
    )
    qk_norm: bool = option(False, "RMSNorm on each head's queries and keys before the position scheme turns them")
    embedding_norm: str = option(PLAIN, NORM_HELP, choices=list(EMBEDDING_NORMS))
    embedding_scale: str = option(PLAIN, SCALE_HELP, choices=list(EMBEDDING_SCALES))
    smear_gate: bool = option(False, SMEAR_HELP)
    x0_skips: bool = option(False, SKIPS_HELP)
    canon: str = option("", CANON_HELP, metavar="POINTS")
    key_offset: bool = option(False, KEY_OFFSET_HELP)
    value_embeddings: bool = option(False, VALUE_HELP)
    bigram_rows: int = option(0, BIGRAM_HELP, bounds=Bound(0, says="0 (none) or 2 rows or more"), metavar="N")
    untied_head: bool = option(
        False,
        "the output head gets a weight matrix of its own instead of the token table's (transformers' "
        "tie_word_embeddings false; vocab_size x d_model more parameters)",
    )
    attention_sinks: bool = option(
        False,
        "a learned logit per head in every layer joins the softmax's denominator and takes attention mass without "
        "adding a value (GPT-OSS's sinks; docs/sinks-and-gates.md)",
    )
    output_gate: bool = option(
        False,
        "multiply each head's attention output by a sigmoid gate computed from the layer's input, before the output "
        "projection (Qiu et al. 2025; docs/sinks-and-gates.md)",
    )
    layers: tuple[LayerSpec, ...] = option(
        "",
        "a scheme, window, RoPE base and query scale per layer, one entry per layer: e.g. 'rope/w64*3 none' "
        "(3 RoPE layers with 64-token windows, then a global NoPE layer); keys wN, global, thetaX, logn, qknorm, "
        "noqknorm; an entry without a scheme takes --position (docs/layouts.md)",
        metavar="LAYOUT",
        as_text=layout_text,
    )
    # Not an option: the run's tokenizer decides it (its <|endoftext|>), as vocab_size.
    eot_id: int = 0
    scheme_options: SchemeOptions = group(SchemeOptions)

    def __post_init__(self) -> None:
        if not isinstance(self.scheme_options, SchemeOptions):  # {scheme: its options object}, from Python
            object.__setattr__(self, "scheme_options", SchemeOptions(self.scheme_options))
        self._check_numbers()
        if self.position not in SCHEMES:
            raise DecoderFieldError(
                "position", f"={self.position!r} is not a known scheme; choose one of: {', '.join(SCHEME_NAMES)}"
            )
        try:
            layers = layers_given(
                self.layers,
                n_layers=self.n_layers,
                position=self.position,
                context_length=self.context_length,
                randomize_positions=self.randomize_positions,
            )
        except LayoutError as err:
            raise DecoderFieldError("layers", str(err)) from None
        object.__setattr__(self, "layers", layers)  # parsed once, here; every reader after trusts the tuple
        self._check_vocabulary()
        for spec in dict.fromkeys(self.layers) or [None]:
            check_scheme_rules(self if spec is None else self.layer_config(spec))
        if problem := extras_problem(self):
            raise DecoderFieldError(*problem)
        own = sorted({s.position for s in self.layers} or {self.position})
        own = [name for name in own if SCHEMES[name].attends]
        if self.attention_sinks and own:
            raise DecoderFieldError(
                "attention_sinks",
                f"=True with {own[0]}, which forms its attention weights itself (PositionScheme.attend), where no "
                "sink joins them; drop attention_sinks or pick another scheme",
            )

    def _check_numbers(self) -> None:
        """Types, declared bounds and the shape's own rules of every option but the layout, the schemes' among them."""
        values = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("layers", "scheme_options")
        }
        values |= self.scheme_options.flat()
        defaults = {f.name: option_default(f) for f in option_fields(type(self))} | {"vocab_size": 1, "eot_id": 0}
        integers = [n for n in values if isinstance(defaults.get(n), int) and not isinstance(defaults.get(n), bool)]
        for name in integers:
            if isinstance(values[name], bool) or not isinstance(values[name], int):
                raise DecoderFieldError(name, f" must be a positive integer, got {values[name]!r}")
        # A declared bound says more than "positive" (--t5-num-buckets must be >= 2), in the words of every other
        # option.
        for f in option_fields(type(self)):
            bounds = f.metadata["bounds"]
            if bounds is not None and f.name in values and not bounds.admits(values[f.name]):
                raise DecoderFieldError(f.name, f" must be {bounds.phrase()}, got {values[f.name]}")
        for name in integers:
            if values[name] <= 0 and name not in ("eot_id", "bigram_rows"):  # an id and a count that may be 0
                raise DecoderFieldError(name, f" must be a positive integer, got {values[name]!r}")
        if self.d_model % self.n_heads:
            divisors = ", ".join(str(k) for k in range(1, self.d_model + 1) if self.d_model % k == 0)
            raise DecoderFieldError(
                "d_model",
                f"={self.d_model} is not divisible by {{field:n_heads}}={self.n_heads}; pick {{field:n_heads}} among "
                f"the divisors of {{field:d_model}}: {divisors}",
            )
        if not 0.0 <= self.dropout < 1.0:
            raise DecoderFieldError("dropout", f" must be in [0, 1), got {self.dropout!r}")
        for name, known in (("activation", ACTIVATIONS), ("attention_scale", ATTENTION_SCALES), ("block", BLOCKS)):
            if getattr(self, name) not in known:
                raise DecoderFieldError(name, f" must be one of {', '.join(known)}, got {getattr(self, name)!r}")
        if self.attention_scale == "log" and self.context_length < 2:
            raise DecoderFieldError(
                "context_length",
                f"={self.context_length}: attention_scale='log' divides by log(context_length); give >= 2",
            )

    def _check_vocabulary(self) -> None:
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size <= 0:
            raise DecoderFieldError("vocab_size", f" must be a positive integer, got {self.vocab_size!r}")
        if isinstance(self.eot_id, bool) or not isinstance(self.eot_id, int) or not 0 <= self.eot_id < self.vocab_size:
            raise DecoderFieldError("eot_id", f"={self.eot_id!r} is outside the vocabulary [0, {self.vocab_size})")

    def with_vocabulary(self, vocab_size: int, eot_id: int = 0) -> DecoderConfig:
        """This config with the tokenizer's vocabulary size and ``<|endoftext|>`` id, the two fields no option sets.

        Only they are checked: the rest was checked when this config was made,
        and ``dataclasses.replace`` would check all of it again (every
        scheme's rules, the layout) each time a run asks for its model.

        Raises:
            DecoderFieldError: ``vocab_size`` not a positive integer, or ``eot_id`` outside ``[0, vocab_size)``.
        """
        made = self._derived(vocab_size=vocab_size, eot_id=eot_id)
        made._check_vocabulary()
        return made

    def _derived(self, **fields) -> DecoderConfig:
        """A copy with ``fields`` set and nothing checked again: for values the caller has checked."""
        made = copy.copy(self)
        for name, value in fields.items():
            object.__setattr__(made, name, value)
        return made

    def __getattr__(self, name: str):
        # Only names that are no field get here: a scheme's option read by its flat name (config.rope_theta).
        options = self.__dict__.get("scheme_options")
        if options is not None and not name.startswith("__"):
            for held in options.values():
                if name in getattr(held, "__dataclass_fields__", ()):
                    return getattr(held, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def head_dim(self) -> int:
        """Channels per attention head: ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    def options_of(self, scheme: str) -> object | None:
        """The options object scheme ``scheme`` declares (``RopeOptions`` for ``"rope"``), or ``None`` without one."""
        return self.scheme_options.of(scheme)

    def layer_config(self, spec: LayerSpec) -> DecoderConfig:
        """The one-scheme config a layer's scheme is built from: this one with the layer's scheme and RoPE base.

        Not checked again: this config checked its layers (``layout.check_spec``: the scheme, its base) and each
        layer's scheme's rules against the config made here when it was made."""
        changes: dict[str, object] = {"position": spec.position, "layers": ()}
        if spec.rope_theta is not None:
            changes["scheme_options"] = self.scheme_options.with_values({"rope_theta": spec.rope_theta})
        return self._derived(**changes)

    def to_dict(self) -> dict:
        """The ``model`` section of ``config.json``: one key per option (the schemes' by their flat names), the
        layout as a list of objects (:func:`~octlm.model.layout.layer_data`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "scheme_options"}
        return {**out, "layers": layer_data(self.layers), **self.scheme_options.flat()}

    @classmethod
    def from_dict(cls, data: dict) -> DecoderConfig:
        """Build from :meth:`to_dict`'s keys (or an older ``config.json``'s, whose ``layers`` is a layout string),
        rejecting unknown keys with a ``ValueError`` naming them."""
        known = {f.name for f in dataclasses.fields(cls) if f.name != "scheme_options"}
        known |= {f.name for f in SchemeOptions.option_fields()}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown DecoderConfig field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def stored_layout_text(model: dict) -> object:
    """The layout of a ``config.json`` ``model`` section as ``--layers`` writes it (so it equals the flag given
    again), from the list of layers it keeps or the string an older one kept; as stored when the section cannot make
    a config (the check after names what is wrong)."""
    try:
        return layout_text(DecoderConfig.from_dict(model).layers)
    except (ValueError, TypeError):
        return model.get("layers", "")


__all__ = ["ACTIVATIONS", "ATTENTION_SCALES", "NO_SCALE", "DecoderConfig", "DecoderFieldError", "stored_layout_text"]
