"""The architecture of a deep self-attention network (docs/math/notation.md)."""

from __future__ import annotations

import functools
import numbers
import warnings
from dataclasses import dataclass

from .checks import (ATTENTION_KINDS, bad_type, bad_value, check_bool, check_choice, check_int,
                     check_int_tuple, check_positive_float)
from .limits import check_block_sizes, check_sizes

ACTIVATIONS = ("square", "relu", "gelu", "tanh", "silu", "gelu_tanh")
MLP_KINDS = ("plain", "gated")
NORMS = ("none", "layernorm", "rmsnorm")
POSITIONS = ("none", "learned", "rope")


# The decoder options and their defaults, in field order (listed by to_dict / repr when not default).
_DECODER_DEFAULTS = (("causal", False), ("kv_heads", None), ("bias", False), ("mlp_bias", False),
                     ("mlp_kind", "plain"))


# The converter's options (issue 22) and their defaults, in field order.
_REAL_DEFAULTS = (("norm_bias", False), ("norm_eps", 1e-5), ("rope_base", None), ("out_bias", True),
                  ("gqa", False), ("embed_scale", 1.0))


# BERT's options (post-norm blocks, an embedding norm, token types, the last hidden state as
# the output of a network with a vocabulary) and their defaults, in field order.
_BERT_DEFAULTS = (("post_norm", False), ("embed_norm", False), ("token_types", None),
                  ("hidden_output", False))
# The converted families' options (Falcon's one norm per parallel block, Qwen3's QK-norm gains
# shared by the heads) and their defaults, in field order.
_FAMILY_DEFAULTS = (("shared_norm", False), ("qk_norm_shared", False))


def _broadcast(value: object, n_layers: int) -> object:
    """One integer for every layer -> a tuple of `n_layers` copies; anything else unchanged."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),) * n_layers
    return value


@dataclass(frozen=True)
class Architecture:
    """A stack of l self-attention layers acting on t tokens.

    Math: layer i maps Z in R^{d_{i-1} x t} to V_i Z S(Z^T Q_i^T K_i Z) in R^{d_i x t}, where
    Q_i, K_i in R^{a_i x d_{i-1}}, V_i in R^{d_i x d_{i-1}} and S is the identity (lightning,
    Eq. 1) or exp(./temperature) normalised over the aggregated token j (softmax, Eq. 15).

    Notation (paper -> here): d = (d_0, ..., d_l) -> `widths`, a = (a_1, ..., a_l) -> `keys`,
    t -> `tokens`.

    The per-layer options `keys`, `heads`, `values` and `mlp` take one entry per layer, or one
    integer for every layer: `keys=2` is `keys=(2, 2)` for a two-layer network (the number of
    layers is len(widths) - 1). Choices (`attention`, `activation`, `norm`) ignore case.

    Decoder features (docs/decoder_features.md): `positions` ('none', 'learned': a d_0 x t
    table T added to the input, 'rope': rational rotary positions on the first `rope_pairs`
    coordinate pairs of each head's queries and keys, default all a_i // 2); `vocab` V: token-id
    inputs embedded by E (V x d_0) and V logits per token, by L (V x d_l) or, `tied`, by E;
    `qk_norm` (a norm on each head's queries and keys) and `final_norm` (a norm before the
    logits), both of the `norm` kind; `parallel` blocks Z + att(Z) + mlp(Z).

    Example:
        >>> arch = Architecture(widths=(3, 3, 3), keys=(2, 2), tokens=3)
        >>> arch.n_params == 2 * (2 * 2 * 3 + 3 * 3)
        True
        >>> Architecture((3, 3, 3), 2, 3) == arch
        True
    """

    widths: tuple[int, ...]
    # None only as the signal of a missing argument (refused in __post_init__ with the fix).
    keys: tuple[int, ...] | int = None  # type: ignore[assignment]
    tokens: int = None  # type: ignore[assignment]
    attention: str = "lightning"
    temperature: float = 1.0
    # Transformer-block options (docs/blocks.md); the defaults give the paper's model exactly.
    heads: tuple[int, ...] | None = None
    values: tuple[int, ...] | None = None
    residual: bool = False
    mlp: tuple[int, ...] | None = None
    activation: str = "square"
    norm: str = "none"
    # Decoder features (docs/decoder_features.md); the defaults leave every network above unchanged.
    causal: bool = False
    positions: str = "none"
    rope_pairs: tuple[int, ...] | None = None
    kv_heads: tuple[int, ...] | None = None
    bias: bool = False
    mlp_bias: bool = False
    mlp_kind: str = "plain"
    vocab: int | None = None
    tied: bool = False
    qk_norm: bool = False
    final_norm: bool = False
    parallel: bool = False
    # Real-model features (docs/models.md#the-converter-transformers-models-as-native-networks); the defaults change nothing above.
    norm_bias: bool = False
    norm_eps: float = 1e-5
    rope_base: float | None = None
    out_bias: bool = True
    gqa: bool = False  # deprecated, normalised to False: kv_heads alone is transformers' grouping
    embed_scale: float = 1.0
    # BERT (docs/decoder_features.md#post-norm-blocks-bert): Z -> N(Z + att(Z)), Y -> N(Y + mlp(Y));
    # a norm (ge, ce) on the summed embedding; token types (a table Ty added to the embedding, the
    # inputs (token id, type id) sequences); the last hidden state as the output (no logits).
    post_norm: bool = False
    embed_norm: bool = False
    token_types: int | None = None
    hidden_output: bool = False
    # Converted families (docs/models.md#the-converter-transformers-models-as-native-networks):
    # a parallel block's MLP reads the attention's normalised input (Falcon: one norm, no n_i);
    # one QK-norm gain per layer shared by its heads (Qwen3: qn_i, kn_i).
    shared_norm: bool = False
    qk_norm_shared: bool = False

    def __post_init__(self) -> None:
        widths = check_int_tuple("widths", self.widths, min_length=2, example="5,3,3,5")
        for name in ("keys", "tokens"):
            if getattr(self, name) is None:
                raise bad_type(name, "given (Architecture(widths, keys, tokens))", None,
                               f"Pass e.g. Architecture({tuple(widths)}, keys=2, tokens=3).")
        keys = check_int_tuple("keys", _broadcast(self.keys, len(widths) - 1), min_length=1,
                               example="2,2,2")
        if len(keys) != len(widths) - 1:
            raise bad_value(
                "keys", f"one key width per layer ({len(widths) - 1} for widths {list(widths)})",
                list(keys), f"Pass {len(widths) - 1} comma-separated key widths, e.g. "
                f"{','.join(['2'] * (len(widths) - 1))}, or one width for every layer.")
        tokens = check_int("tokens", self.tokens, minimum=1, fix="Pass t >= 1, e.g. 3.")
        check_sizes(widths, keys, tokens)
        attention = check_choice("attention", self.attention, ATTENTION_KINDS)
        temperature = check_positive_float("temperature", self.temperature)
        if attention == "lightning" and temperature != 1.0:
            raise bad_value("temperature", "1 for lightning attention (it scales softmax logits only)",
                            temperature, "Drop the temperature, or use attention 'softmax'.")
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "attention", attention)
        object.__setattr__(self, "temperature", temperature)
        self._check_block_options()

    def _check_block_options(self) -> None:
        """Validate and normalise heads, values, residual, mlp, activation and norm."""
        l = len(self.keys)

        def per_layer(name: str, values, minimum: int, example: str):
            if values is None:
                return None
            out = check_int_tuple(name, _broadcast(values, l), minimum=minimum, example=example)
            if len(out) != l:
                raise bad_value(name, f"one entry per layer ({l} for widths {list(self.widths)})",
                                list(out), f"Pass {l} comma-separated integers, e.g. "
                                f"{','.join([example.split(',')[0]] * l)}, or one for every layer.")
            return out

        heads = per_layer("heads", self.heads, 1, "2,2")
        if heads is not None and all(h == 1 for h in heads):
            heads = None  # one head per layer is the paper's model: one spelling of it
        values = per_layer("values", self.values, 1, "2,2")
        mlp = per_layer("mlp", self.mlp, 0, "3,3")
        if mlp is not None and all(m == 0 for m in mlp):
            mlp = None
        check_block_sizes(heads, values, mlp)
        if not isinstance(self.residual, bool):
            raise bad_value("residual", "True or False", self.residual, "Pass residual=True or False.")
        if self.residual and len(set(self.widths)) != 1:
            raise bad_value("residual", "used only when every layer keeps its width (Z + att(Z))",
                            f"residual with widths {list(self.widths)}",
                            "Use equal widths, e.g. 4,4,4, or drop --residual.")
        activation = check_choice("activation", self.activation, ACTIVATIONS)
        norm = check_choice("norm", self.norm, NORMS)
        object.__setattr__(self, "heads", heads)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "mlp", mlp)
        object.__setattr__(self, "activation", activation)
        object.__setattr__(self, "norm", norm)
        self._check_positions(per_layer)
        self._check_decoder_options()
        self._check_real_options()
        self._check_bert_options()
        self._check_family_options()

    def _check_bert_options(self) -> None:
        """Validate post_norm, embed_norm, token_types and hidden_output (BERT's options)."""
        for name in ("post_norm", "embed_norm", "hidden_output"):
            check_bool(name, getattr(self, name), fix=f"Pass {name}=True or False.")
        if self.post_norm and (self.norm == "none" or not self.residual):
            raise bad_value("post_norm", "used with residual paths and a norm (Z -> N(Z + att(Z)))",
                            f"post_norm with residual={self.residual}, norm {self.norm!r}",
                            "Add --residual and --norm layernorm, or drop --post-norm.")
        if self.post_norm and (self.parallel or self.qk_norm or self.final_norm):
            raise bad_value("post_norm", "not combined with parallel, qk_norm or final_norm (BERT "
                            "has none of them; its last block norm gives the output)",
                            "post_norm with parallel, qk_norm or final_norm",
                            "Drop --parallel, --qk-norm and --final-norm, or drop --post-norm.")
        if self.embed_norm and (self.vocab is None or self.norm == "none"):
            raise bad_value("embed_norm", "used with a vocabulary and a norm (a norm on the summed "
                            "embedding)", f"embed_norm with vocab={self.vocab}, norm {self.norm!r}",
                            "Add --vocab V and --norm layernorm, or drop --embed-norm.")
        if self.token_types is not None:
            types = check_int("token_types", self.token_types, minimum=2,
                              fix="Pass --token-types 2 or more (BERT: 2), or drop it.")
            if self.vocab is None:
                raise bad_value("token_types", "used with a vocabulary (a table added to the "
                                "embedding)", types, "Add --vocab V, or drop --token-types.")
            object.__setattr__(self, "token_types", types)
        if self.hidden_output and (self.vocab is None or self.tied):
            raise bad_value("hidden_output", "used with an untied vocabulary (token inputs, the "
                            "last hidden state instead of logits)",
                            f"hidden_output with vocab={self.vocab}, tied={self.tied}",
                            "Add --vocab V (without --tied), or drop --hidden-output.")

    def _check_family_options(self) -> None:
        """Validate shared_norm and qk_norm_shared (the converted families' options)."""
        for name in ("shared_norm", "qk_norm_shared"):
            check_bool(name, getattr(self, name), fix=f"Pass {name}=True or False.")
        if self.shared_norm and not (self.parallel and self.norm != "none"):
            raise bad_value("shared_norm", "used with parallel blocks and a norm (the MLP reads the "
                            "attention's normalised input)", "shared_norm without --parallel or "
                            "--norm", "Add --parallel and --norm, or drop --shared-norm.")
        if self.qk_norm_shared and not self.qk_norm:
            raise bad_value("qk_norm_shared", "used with qk_norm (one QK-norm gain per layer)",
                            "qk_norm_shared without qk_norm", "Add --qk-norm, or drop --qk-norm-shared.")

    def _check_real_options(self) -> None:
        """Validate norm_bias, norm_eps, rope_base, out_bias and gqa (the converter's features;
        gqa is deprecated: kv_heads alone is transformers' grouping)."""
        for name in ("norm_bias", "out_bias", "gqa"):
            check_bool(name, getattr(self, name), fix=f"Pass {name}=True or False.")
        eps = self.norm_eps
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
            raise bad_value("norm_eps", "a number in (0, 1), the norms' epsilon", eps,
                            "Pass e.g. 1e-5 (the model config's layer_norm_eps / rms_norm_eps).")
        object.__setattr__(self, "norm_eps", float(eps))
        if self.norm_eps != 1e-5 and self.norm == "none":
            raise bad_value("norm_eps", "given only with a norm (--norm layernorm or rmsnorm)", eps,
                            "Add --norm, or drop --norm-eps.")
        if self.norm_bias and self.norm != "layernorm":
            raise bad_value("norm_bias", "used with norm 'layernorm' (its bias beta)",
                            f"norm_bias with norm {self.norm!r}", "Add --norm layernorm, or drop --norm-bias.")
        if self.norm_bias and self.qk_norm:
            raise bad_value("norm_bias", "not combined with qk_norm (QK-norms have gains only)",
                            "norm_bias with qk_norm", "Drop --norm-bias or --qk-norm.")
        if self.rope_base is not None:
            base = self.rope_base
            if isinstance(base, bool) or not isinstance(base, numbers.Real) or not 1 < base < 1e12:
                raise bad_value("rope_base", "a number > 1 (the model's rotary base, e.g. 10000)",
                                base, "Pass --rope-base 10000, or drop it for the rational angles.")
            if self.positions != "rope":
                raise bad_value("rope_base", "given only with positions 'rope'", base,
                                "Add --positions rope, or drop --rope-base.")
            object.__setattr__(self, "rope_base", float(base))
        if not self.out_bias and not self.bias:
            raise bad_value("out_bias", "False only with bias (q/k/v biases without b_o)",
                            "out_bias=False without bias", "Add --bias, or drop --no-out-bias.")
        scale = self.embed_scale
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < 1e6:
            raise bad_value("embed_scale", "a positive number (the embedding's scale)", scale,
                            "Pass e.g. the model's sqrt(d), or drop it.")
        object.__setattr__(self, "embed_scale", float(scale))
        if self.embed_scale != 1.0 and self.vocab is None:
            raise bad_value("embed_scale", "used with a vocabulary (it scales E^T X)",
                            self.embed_scale, "Add --vocab V, or drop --embed-scale.")
        if self.gqa:  # deprecated: kv_heads alone is transformers' grouping
            warnings.warn("gqa is deprecated and means nothing: kv_heads alone is transformers' "
                          "grouping (the groups share Q and the value map, each head keeps K and "
                          "O); drop gqa=True", DeprecationWarning, stacklevel=5)
            object.__setattr__(self, "gqa", False)

    def _check_decoder_options(self) -> None:
        """Validate and normalise causal, kv_heads, bias, mlp_bias and mlp_kind."""
        for name in ("causal", "bias", "mlp_bias"):
            check_bool(name, getattr(self, name), fix=f"Pass {name}=True or False.")
        l = self.n_layers
        kv = self.kv_heads
        if kv is not None:
            kv = check_int_tuple("kv_heads", _broadcast(kv, l), minimum=1, example="1,1")
            if len(kv) != l:
                raise bad_value("kv_heads", f"one key/value head count per layer ({l})", list(kv),
                                f"Pass {l} comma-separated counts, e.g. {','.join(['1'] * l)}.")
            for i, (g, h) in enumerate(zip(kv, self.head_counts), start=1):
                if h % g:
                    raise bad_value("kv_heads", f"a divisor of the heads of layer {i} ({h})", g,
                                    f"Pass --kv-heads dividing --heads, e.g. 1 (multi-query) or {h}.")
        mlp_kind = check_choice("mlp_kind", self.mlp_kind, MLP_KINDS)
        if self.mlp is None and (self.mlp_bias or mlp_kind != "plain"):
            what = "mlp_bias" if self.mlp_bias else "mlp_kind"
            raise bad_value(what, "used with an MLP (mlp widths > 0)",
                            True if self.mlp_bias else mlp_kind, "Pass --mlp M, or drop it.")
        object.__setattr__(self, "kv_heads", kv)
        object.__setattr__(self, "mlp_kind", mlp_kind)

    def _check_positions(self, per_layer) -> None:
        """Validate `positions` and `rope_pairs` (pairs rotated per layer, default a_i // 2)."""
        positions = check_choice("positions", self.positions, POSITIONS)
        pairs = None
        if self.rope_pairs is not None:
            if positions != "rope":
                raise bad_value("rope_pairs", "given only with positions 'rope'", self.rope_pairs,
                                "Add --positions rope, or drop --rope-pairs.")
            pairs = per_layer("rope_pairs", self.rope_pairs, 0, "1,1")
            for i, (r, a) in enumerate(zip(pairs, self.keys), start=1):
                if r > a // 2:
                    raise bad_value("rope_pairs", f"at most a_i // 2 = {a // 2} pairs in layer {i} "
                                    f"(key width {a})", list(pairs),
                                    f"Pass --rope-pairs <= {a // 2} there, or a wider --keys.")
            if all(r == a // 2 for r, a in zip(pairs, self.keys)):
                pairs = None  # every pair: the default, one spelling of it
        object.__setattr__(self, "positions", positions)
        object.__setattr__(self, "rope_pairs", pairs)
        if self.vocab is not None:
            vocab = check_int("vocab", self.vocab, minimum=2,
                              fix="Pass --vocab 2 or more (one token id says nothing).")
            object.__setattr__(self, "vocab", vocab)
        if not isinstance(self.tied, bool):
            raise bad_value("tied", "True or False", self.tied, "Pass tied=True or False.")
        if self.tied and self.vocab is None:
            raise bad_value("tied", "used with a vocabulary (the logits reuse the embedding)",
                            "tied without vocab", "Add --vocab V, or drop --tied.")
        if self.tied and self.widths[0] != self.widths[-1]:
            raise bad_value("tied", "used only when d_l = d_0 (the logits are E Z)",
                            f"tied with widths {list(self.widths)}",
                            "Use equal first and last widths, or drop --tied.")

        for name in ("qk_norm", "final_norm", "parallel"):
            if not isinstance(getattr(self, name), bool):
                raise bad_value(name, "True or False", getattr(self, name),
                                f"Pass {name}=True or False.")
        for name in ("qk_norm", "final_norm"):
            if getattr(self, name) and self.norm == "none":
                raise bad_value(name, "used with a norm kind (--norm layernorm or rmsnorm), which "
                                "it applies", f"{name} with norm 'none'",
                                "Add --norm rmsnorm (or layernorm).")
        if self.parallel and not (self.residual and self.mlp is not None):
            raise bad_value("parallel", "used with residual paths and an MLP (Z + att(Z) + mlp(Z))",
                            f"parallel with residual={self.residual}, mlp={self.mlp}",
                            "Add --residual and --mlp m, or drop --parallel.")

    @property
    def input_width(self) -> int:
        """The rows of one input sequence: V (one-hot token ids) with a vocabulary (V + T_types:
        the token's and its type's one-hot columns stacked, with token types), else d_0."""
        if self.vocab is None:
            return self.widths[0]
        return self.vocab + (self.token_types or 0)

    @property
    def output_width(self) -> int:
        """The rows of one output: V (logits) with a vocabulary (d_l with hidden_output), else d_l."""
        return self.vocab if self.vocab is not None and not self.hidden_output else self.widths[-1]

    @property
    def n_sequences(self) -> int | None:
        """V^t, the number of distinct inputs with a vocabulary ((V T_types)^t with token types;
        None: a continuum)."""
        return None if self.vocab is None else self.input_symbols ** self.tokens

    @property
    def input_symbols(self) -> int | None:
        """The distinct inputs of one token: V, or V T_types pairs (token id, type id) with token
        types (None without a vocabulary)."""
        return None if self.vocab is None else self.vocab * (self.token_types or 1)

    @property
    def rotated_pairs(self) -> tuple[int, ...]:
        """R_i, the coordinate pairs of each head's queries and keys rotated in layer i (0
        everywhere without rotary positions)."""
        if self.positions != "rope":
            return (0,) * self.n_layers
        return self.rope_pairs if self.rope_pairs is not None else tuple(a // 2 for a in self.keys)

    @property
    def is_block(self) -> bool:
        """True when any transformer-block option departs from the paper's single-head model."""
        return (self.heads is not None or self.values is not None or self.residual
                or self.mlp is not None or self.norm != "none" or self.causal
                or self.kv_heads is not None or self.bias or self.mlp_bias
                or self.mlp_kind != "plain" or self.positions != "none" or self.vocab is not None
                or self.qk_norm or self.final_norm or self.parallel or self.norm_bias
                or self.rope_base is not None or not self.out_bias
                or self.embed_scale != 1.0 or self.shared_norm or self.qk_norm_shared
                or any(getattr(self, name) != default for name, default in _BERT_DEFAULTS))

    @property
    def has_decoder_options(self) -> bool:
        """True when a decoder option (causal, kv_heads, bias, mlp_bias, gated MLP) is given."""
        return any(getattr(self, name) != default for name, default in _DECODER_DEFAULTS)

    @property
    def kv_counts(self) -> tuple[int, ...]:
        """G_i, the key/value groups of each layer (H_i, one per head, without kv_heads)."""
        return self.kv_heads if self.kv_heads is not None else self.head_counts

    def group_of(self, layer: int, head: int) -> int:
        """The key/value group (1-based) of head `head` of layer `layer`: ceil(h G / H), so
        consecutive heads share a group (Llama's repeat_kv); the head itself without kv_heads."""
        H, G = self.head_counts[layer - 1], self.kv_counts[layer - 1]
        return -(-head * G // H)

    @property
    def head_counts(self) -> tuple[int, ...]:
        """H_i, the heads of each layer (1 everywhere for the paper's model)."""
        return self.heads if self.heads is not None else (1,) * self.n_layers

    @property
    def mlp_widths(self) -> tuple[int, ...]:
        """m_i, the MLP width after each attention layer (0: no MLP)."""
        return self.mlp if self.mlp is not None else (0,) * self.n_layers

    @property
    def n_layers(self) -> int:
        """l, the number of attention layers."""
        return len(self.keys)

    @property
    def n_params(self) -> int:
        """Math: sum_i (2 a_i d_{i-1} + d_i d_{i-1}); block networks sum their blocks (docs/math/notation.md, docs/blocks.md)."""
        if self.is_block:
            return sum(shape[0] * shape[1] for _, shape, _ in self.param_layout())
        return sum(2 * a * d_in + d_out * d_in
                   for a, d_in, d_out in zip(self.keys, self.widths[:-1], self.widths[1:]))

    @property
    def is_polynomial(self) -> bool:
        """True for polynomial maps with integer coefficients: lightning attention, square
        activation (or no MLP), no normalisation, the rational rotary angles and no embedding
        scale (a `rope_base` or an `embed_scale` such as sqrt(d) is not rational: no exact rank
        over F_p)."""
        return (self.attention == "lightning" and self.norm == "none" and self.rope_base is None
                and self.embed_scale == 1.0
                and (self.mlp is None or self.activation == "square"))

    def polynomial_degrees(self) -> tuple[int, int]:
        """(deg_W, deg_X): total degrees of an output entry of a polynomial network in its weights
        and in its inputs.

        Math: a lightning layer maps degrees (w, x) to (3w + 2 + v, 3x), v = 1 for an unfactored
        value matrix and 2 for O W; a square MLP maps them to (2w + 3, 2x), a gated square MLP
        U ((G y)^2 * (P y)) to (3w + 4, 3x); a residual path keeps the larger of the two. Biases
        (degree 1 in W, 0 in X) and the causal mask (0/1 constants) raise neither bound. The paper's model: (sum_i 3^(i-1) 3, 3^l) = ((3^(l+1) - 3)/2, 3^l).
        Defined for polynomial networks only (`is_polynomial`).
        """
        if not self.is_polynomial:
            raise bad_value("architecture", "polynomial (lightning, square or no MLP, no norm) for "
                            "its degrees", str(self), "Use lightning attention without norms.")
        # an embedding E^T X or learned positions X + T: the input has degree 1 in W too
        deg_w, deg_x = (1 if self.vocab is not None or self.positions == "learned" else 0), 1
        for i in range(self.n_layers):
            value_degree = 1 if self.values is None else 2
            att = (3 * deg_w + 2 + value_degree, 3 * deg_x)
            deg_w, deg_x = ((max(deg_w, att[0]), max(deg_x, att[1])) if self.residual else att)
            if self.mlp_widths[i] > 0:
                mlp = ((3 * deg_w + 4, 3 * deg_x) if self.mlp_kind == "gated"
                       else (2 * deg_w + 3, 2 * deg_x))
                deg_w, deg_x = ((max(deg_w, mlp[0]), max(deg_x, mlp[1])) if self.residual else mlp)
        logits = self.vocab is not None and not self.hidden_output
        return (deg_w + 1 if logits else deg_w), deg_x   # logits: one more

    def layer_shapes(self) -> list[dict[str, tuple[int, int]]]:
        """Shapes of (Q_i, K_i, V_i) for each layer i = 1..l."""
        return [{"Q": (a, d_in), "K": (a, d_in), "V": (d_out, d_in)}
                for a, d_in, d_out in zip(self.keys, self.widths[:-1], self.widths[1:])]

    def param_layout(self) -> list[tuple[str, tuple[int, int], int]]:
        """(name, shape, offset) of every block of the flat parameter vector, in order.

        The order is Q_1, K_1, V_1, Q_2, K_2, V_2, ...; each block is flattened row-major.
        Block networks use `block_layout` (below).
        """
        if self.is_block:
            return block_layout(self)
        layout, offset = [], 0
        for i, shapes in enumerate(self.layer_shapes(), start=1):
            for name in ("Q", "K", "V"):
                shape = shapes[name]
                layout.append((f"{name}_{i}", shape, offset))
                offset += shape[0] * shape[1]
        return layout

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        out = {"widths": list(self.widths), "keys": list(self.keys), "tokens": self.tokens,
               "attention": self.attention}
        if self.attention == "softmax":
            out["temperature"] = self.temperature
        if self.is_block:
            out.update(heads=list(self.head_counts),
                       values=None if self.values is None else list(self.values),
                       residual=self.residual, mlp=list(self.mlp_widths),
                       activation=self.activation, norm=self.norm)
            for name, default in _DECODER_DEFAULTS:
                value = getattr(self, name)
                if value != default:
                    out[name] = list(value) if isinstance(value, tuple) else value
        if self.positions != "none":
            out["positions"] = self.positions
        if self.rope_pairs is not None:
            out["rope_pairs"] = list(self.rope_pairs)
        if self.vocab is not None:
            out["vocab"] = self.vocab
        if self.tied:
            out["tied"] = True
        for name in ("qk_norm", "final_norm", "parallel"):
            if getattr(self, name):
                out[name] = True
        for name, default in _REAL_DEFAULTS:
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        for name, default in (*_BERT_DEFAULTS, *_FAMILY_DEFAULTS):
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        return out

    def __repr__(self) -> str:
        """Architecture(widths=..., keys=..., tokens=...) with only the options that differ from
        their defaults (it evaluates back to an equal architecture)."""
        fields = [f"widths={self.widths!r}", f"keys={self.keys!r}", f"tokens={self.tokens!r}"]
        for name, default in (("attention", "lightning"), ("temperature", 1.0), ("heads", None),
                              ("values", None), ("residual", False), ("mlp", None),
                              ("activation", "square"), ("norm", "none"), *_DECODER_DEFAULTS,
                              ("positions", "none"), ("rope_pairs", None), ("vocab", None),
                              ("tied", False), ("qk_norm", False), ("final_norm", False),
                              ("parallel", False), *_REAL_DEFAULTS, *_BERT_DEFAULTS,
                              *_FAMILY_DEFAULTS):
            value = getattr(self, name)
            if value != default:
                fields.append(f"{name}={value!r}")
        return f"Architecture({', '.join(fields)})"

    def _repr_html_(self) -> str:
        from .display import html_table  # noqa: PLC0415

        lines = [(k, ",".join(map(str, v)) if isinstance(v, list) else str(v))
                 for k, v in self.to_dict().items()]
        return html_table(f"Architecture: {self.n_layers} layer{'s' * (self.n_layers > 1)}, "
                          f"{self.n_params} parameters", lines)

    def __str__(self) -> str:
        text = (f"{self.attention} widths={','.join(map(str, self.widths))} "
                f"keys={','.join(map(str, self.keys))} tokens={self.tokens}")
        if self.attention == "softmax" and self.temperature != 1.0:
            text += f" temperature={self.temperature:g}"
        if self.heads is not None:
            text += f" heads={','.join(map(str, self.heads))}"
        if self.values is not None:
            text += f" values={','.join(map(str, self.values))}"
        if self.residual:
            text += " residual"
        if self.mlp is not None:
            text += f" mlp={','.join(map(str, self.mlp))} activation={self.activation}"
        if self.norm != "none":
            text += f" norm={self.norm}"
        if self.causal:
            text += " causal"
        if self.kv_heads is not None:
            text += f" kv_heads={','.join(map(str, self.kv_heads))}"
        if self.bias:
            text += " bias"
        if self.mlp_bias:
            text += " mlp_bias"
        if self.mlp_kind != "plain":
            text += f" mlp_kind={self.mlp_kind}"
        if self.positions != "none":
            text += f" positions={self.positions}"
        if self.rope_pairs is not None:
            text += f" rope_pairs={','.join(map(str, self.rope_pairs))}"
        if self.vocab is not None:
            text += f" vocab={self.vocab}" + (" tied" if self.tied else "")
        for name in ("qk_norm", "final_norm", "parallel"):
            if getattr(self, name):
                text += f" {name}"
        for name, default in _REAL_DEFAULTS:
            value = getattr(self, name)
            if value != default:
                text += f" {name}" if value is True else f" {name}={value:g}" if isinstance(
                    value, float) else f" {name}={value}"
        for name, default in _BERT_DEFAULTS:
            value = getattr(self, name)
            if value != default:
                text += f" {name}" if value is True else f" {name}={value}"
        for name, default in _FAMILY_DEFAULTS:
            if getattr(self, name) != default:
                text += f" {name}"
        return text


def block_layout(arch: Architecture) -> list[tuple[str, tuple[int, int], int]]:
    """(name, shape, offset) of every parameter block of a block network, in order (worked out
    once per network and process: `_block_layout`; a fresh list each call).
    """
    return list(_block_layout(arch))


@functools.lru_cache(maxsize=256)
def _block_layout(arch: Architecture) -> tuple[tuple[str, tuple[int, int], int], ...]:
    """`block_layout`, kept per network (an Architecture is frozen and hashable): n_params and
    the layout are read dozens of times in one call on a block network.


    Per layer i: g_i (d_{i-1} x 1, attention norm gain; only with a norm); for each head h:
    Q_i_h, K_i_h (a_i x d_{i-1}), then V_i_h (d_i x d_{i-1}) or, with value widths, W_i_h
    (v_i x d_{i-1}) and O_i_h (d_i x v_i); with an MLP of width m_i > 0: n_i (d_i x 1, MLP norm
    gain; only with a norm), P_i (m_i x d_i), U_i (d_i x m_i). Each block is flattened row-major.
    Decoder options (docs/decoder_features.md): with kv_heads (transformers' grouping), per
    layer K_i_h (bk_i_h, kn_i_h) for every head, then for each group Q_i_g (bq_i_g, qn_i_g) and
    V_i_g or W_i_g (bv_i_g), then O_i_h per head with value widths; with bias, bq_i_h (a_i x 1)
    after Q_i_h, bk_i_h after K_i_h, bv_i_h (d_i x 1, or v_i x 1) after V_i_h / W_i_h and bo_i
    (d_i x 1) after the heads; a gated MLP has G_i (m_i x d_i) before P_i; with mlp_bias, bg_i, bp_i (m_i x 1) and
    bu_i (d_i x 1) after G_i, P_i and U_i.
    With a vocabulary, E (V x d_0, the token embedding) comes first of all, then with learned
    positions T (d_0 x t, added to the input); untied logits end with L (V x d_l).
    Converter features (docs/models.md#the-converter-transformers-models-as-native-networks): norm_bias puts a layernorm bias after
    each gain, c_i after g_i, cn_i after n_i, cf after f; out_bias=False drops bo_i.
    (T_types x d_0) after T, embed_norm the embedding norm's gain ge (d_0 x 1) and, with
    norm_bias, its bias ce after that; post_norm keeps every block's place (g_i, c_i then
    normalise Z + att(Z), n_i, cn_i the MLP's Y + mlp(Y)); hidden_output drops L.
    Converted families: qk_norm_shared puts qn_i, kn_i (a_i x 1, one QK-norm gain per layer,
    shared by its heads) after the heads instead of qn_i_g, kn_i_h; shared_norm drops n_i (and
    cn_i): the parallel block's MLP reads g_i's normalised input.
    The paper's model (one head, unfactored values, no residual, MLP or norm) has the same
    blocks in the same order, named Q_i, K_i, V_i (`Architecture.param_layout`).
    """
    layout, offset = [], 0

    def add(name: str, shape: tuple[int, int]) -> None:
        nonlocal offset
        layout.append((name, shape, offset))
        offset += shape[0] * shape[1]

    if arch.vocab is not None:
        add("E", (arch.vocab, arch.widths[0]))
    if arch.positions == "learned":
        add("T", (arch.widths[0], arch.tokens))
    if arch.token_types is not None:        # BERT: the token-type table, then the embedding norm
        add("Ty", (arch.token_types, arch.widths[0]))
    if arch.embed_norm:
        add("ge", (arch.widths[0], 1))
        if arch.norm_bias:
            add("ce", (arch.widths[0], 1))
    for i, (a, d_in, d_out) in enumerate(zip(arch.keys, arch.widths[:-1], arch.widths[1:]), start=1):
        if arch.norm != "none":
            add(f"g_{i}", (d_in, 1))
            if arch.norm_bias:
                add(f"c_{i}", (d_in, 1))
        value_width = d_out if arch.values is None else arch.values[i - 1]

        def add_score_map(kind: str, j: int) -> None:
            """Q_i_j or K_i_j, then its bias (bq, bk) and QK-norm gain (qn, kn)."""
            add(f"{kind}_{i}_{j}", (a, d_in))  # noqa: B023 (called in this iteration)
            if arch.bias:
                add(f"b{kind.lower()}_{i}_{j}", (a, 1))  # noqa: B023 (called in this iteration)
            if arch.qk_norm and not arch.qk_norm_shared:
                add(f"{kind.lower()}n_{i}_{j}", (a, 1))  # noqa: B023 (called in this iteration)

        def add_value(g: int) -> None:
            add(f"V_{i}_{g}" if arch.values is None else f"W_{i}_{g}", (value_width, d_in))  # noqa: B023 (called in this iteration)
            if arch.bias:
                add(f"bv_{i}_{g}", (value_width, 1))  # noqa: B023 (called in this iteration)

        heads = range(1, arch.head_counts[i - 1] + 1)
        if arch.kv_heads is None:
            for h in heads:
                add_score_map("Q", h)
                add_score_map("K", h)
                add_value(h)
                if arch.values is not None:
                    add(f"O_{i}_{h}", (d_out, value_width))
        else:  # transformers' grouping: K_i_h per head, Q_i_g and V_i_g / W_i_g per group, O_i_h
            for h in heads:
                add_score_map("K", h)
            for g in range(1, arch.kv_heads[i - 1] + 1):
                add_score_map("Q", g)
                add_value(g)
            for h in heads if arch.values is not None else ():
                add(f"O_{i}_{h}", (d_out, value_width))
        if arch.qk_norm_shared:           # one gain per layer for every head's queries, keys
            add(f"qn_{i}", (a, 1))
            add(f"kn_{i}", (a, 1))
        if arch.bias and arch.out_bias:
            add(f"bo_{i}", (d_out, 1))
        m = arch.mlp_widths[i - 1]
        if m > 0:
            if arch.norm != "none" and not arch.shared_norm:
                add(f"n_{i}", (d_out, 1))
                if arch.norm_bias:
                    add(f"cn_{i}", (d_out, 1))
            for name, shape, bias in (("G", (m, d_out), "bg"), ("P", (m, d_out), "bp"),
                                      ("U", (d_out, m), "bu")):
                if name == "G" and arch.mlp_kind != "gated":
                    continue
                add(f"{name}_{i}", shape)
                if arch.mlp_bias:
                    add(f"{bias}_{i}", (shape[0], 1))
    if arch.final_norm:
        add("f", (arch.widths[-1], 1))
        if arch.norm_bias:
            add("cf", (arch.widths[-1], 1))
    if arch.vocab is not None and not arch.tied and not arch.hidden_output:
        add("L", (arch.vocab, arch.widths[-1]))
    return tuple(layout)


def check_architecture(arch: object) -> None:
    """Raise the template error unless `arch` is an Architecture."""
    if not isinstance(arch, Architecture):
        raise bad_type("arch", "an Architecture", type(arch).__name__,
                       "Build one with Architecture(widths=..., keys=..., tokens=...).")
