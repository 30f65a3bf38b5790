"""Transformer blocks: multi-head attention with output projections, residual paths, MLPs, norms.

Math (docs/blocks.md), Z in R^{d_{i-1} x t} with tokens as columns, layer i = 1..l:
  attention  att_i(Z) = sum_h V_{i,h} N(Z) S(N(Z)^T Q_{i,h}^T K_{i,h} N(Z)),
             V_{i,h} = O_{i,h} W_{i,h} when per-head value widths are given, else one matrix;
  residual   Z -> Z + att_i(Z) (and Y -> Y + mlp_i(Y)), else Z -> att_i(Z);
  MLP        mlp_i(Y) = U_i s(P_i N(Y)), s in {x^2, relu, gelu, tanh, silu} entrywise, or gated:
             U_i (s(G_i N(Y)) * (P_i N(Y))) (docs/decoder_features.md);
  decoder    causal: S_ji = 0 for j > i (lightning: times the 0/1 mask; softmax: normalised over
             j <= i); kv_heads: the heads of a group share Q and the value map V (or W), each
             keeps K (and O), as transformers group keys and values; bias / mlp_bias: a column
             added after each map (Q z + b_q, ..., and b_o after the heads are summed);
  norm       N(Z) = g * (Z - mean) / sqrt(var + eps) (layernorm) or g * Z / sqrt(mean Z^2 + eps)
             (rmsnorm) per token, learnable gain g, no bias; N = identity for norm 'none'.

Parameters are named blocks (the npz keys of block weight files), in this order per layer i:
  g_i (d_{i-1} x 1, attention norm gain; only with a norm),
  for each head h: Q_i_h, K_i_h (a_i x d_{i-1}), then V_i_h (d_i x d_{i-1}) or, with value
  widths, W_i_h (v_i x d_{i-1}) and O_i_h (d_i x v_i),
  with an MLP of width m_i > 0: n_i (d_i x 1, MLP norm gain; only with a norm), P_i (m_i x d_i),
  U_i (d_i x m_i).
Decoder features (docs/decoder_features.md): with a vocabulary the input X (..., V, t) holds
one-hot token columns, embedded as E^T X (E: V x d_0, first of all blocks), and the output is
the logits L Z (L: V x d_l, the last block) or E Z when tied; learned positions add T (d_0 x t, first of all
blocks) to the input; rotary positions rotate the first R_i coordinate pairs of each head's
queries and keys, token i by R^i (`core.positions`), before the scores; QK-norm normalises each
head's queries and keys (gains qn_i_h, kn_i_h) before that; a final norm (gain f) acts after
the last layer, before the logits; parallel blocks feed the MLP the layer's input:
Z + att(Z) + mlp(Z) (`shared_norm`: the MLP reads the attention's g_i N(Z), no n_i);
`qk_norm_shared`: one QK-norm gain per layer (qn_i, kn_i) for every head.
BERT's options (docs/decoder_features.md#post-norm-blocks-bert): post_norm normalises after each
residual sum, N(Z + att(Z)) by g_i (c_i) and N(Y + mlp(Y)) by n_i (cn_i); embed_norm normalises
the summed embedding (ge, ce); token_types adds Ty^T X_type, the input being the token's one-hot
rows stacked on its type's (V + T_types rows); hidden_output returns the last hidden state.
Each block is flattened row-major. The forward pass is written out with einsum and matmul,
never with fused kernels, so forward- and reverse-mode autodiff both apply.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from torch.func import jacrev, vmap

from .architecture import Architecture, block_layout, check_architecture
from .checks import bad_value, check_seed
from .parameters import LayerWeights, score_factor
from .positions import base_angles, rotary_floats, rotary_fractions
from .seeds import seeded_generator

NORM_EPS = 1e-5
# sqrt(2 / pi), the tanh-approximated GELU's constant (as transformers' NewGELUActivation).
GELU_TANH_C = math.sqrt(2.0 / math.pi)


def check_block_weights(arch: Architecture, blocks: object, name: str) -> dict[str, np.ndarray]:
    """Raise the template error unless `blocks` holds every block of `arch` with its shape."""
    if not isinstance(blocks, dict):
        raise bad_value(name, "a dict of named blocks (Q_1_1, K_1_1, ...)", type(blocks).__name__,
                        "Read them with read_block_weights(path).")
    for block, shape, _ in block_layout(arch):
        if block not in blocks:
            raise bad_value(name, f"a block {block} of shape {shape}", sorted(blocks),
                            f"Add {block} (docs/blocks.md names every block).")
        if tuple(np.shape(blocks[block])) != shape:
            raise bad_value(f"{name}:{block}", f"of shape {shape}", tuple(np.shape(blocks[block])),
                            f"Give {block} the shape {shape}.")
    extra = sorted(set(blocks) - {b for b, _, _ in block_layout(arch)})
    if extra:
        raise bad_value(name, f"only the blocks of {arch}", extra, f"Remove {extra[0]}.")
    return blocks


def blocks_of(arch: Architecture, weights: LayerWeights) -> dict:
    """The paper's weights as the named blocks of its one-head instance (Q_i -> Q_i_1, ...)."""
    return {f"{name}_{i}_1": getattr(weights, name)[i - 1]
            for i in range(1, arch.n_layers + 1) for name in "QKV"}


def layer_weights_of(arch: Architecture, blocks: dict) -> LayerWeights:
    """The paper's weights from the named blocks of its one-head instance (`blocks_of`)."""
    return LayerWeights(*(tuple(blocks[f"{name}_{i}_1"] for i in range(1, arch.n_layers + 1))
                          for name in "QKV"))


def unflatten_blocks(arch: Architecture, vector: torch.Tensor) -> dict[str, torch.Tensor]:
    """Named blocks from a flat parameter vector (differentiable; works under torch.func)."""
    if vector.shape[-1] != arch.n_params:
        raise bad_value("vector", f"of length n_params = {arch.n_params} for {arch}",
                        f"length {vector.shape[-1]}", "Flatten weights of the same architecture.")
    return {name: vector[offset: offset + shape[0] * shape[1]].reshape(shape)
            for name, shape, offset in block_layout(arch)}


def flatten_blocks(arch: Architecture, blocks: dict[str, torch.Tensor]) -> torch.Tensor:
    """The flat parameter vector of named blocks, in `block_layout` order."""
    return torch.cat([blocks[name].reshape(-1) for name, _, _ in block_layout(arch)])


def _scale(name: str, shape: tuple[int, int], arch: Architecture, layer: int) -> float:
    """Standard deviation of a random block: O(1) inputs give O(1) outputs (as `weight_scales`)."""
    kind = name.split("_")[0]
    if kind in ("T", "E", "Ty"):
        return 1.0  # positions, embeddings and token types of the size of N(0, 1) inputs
    if kind == "L":
        return 1.0 / math.sqrt(shape[1])
    d_in = arch.widths[layer - 1]
    lightning = arch.tokens if arch.attention == "lightning" else 1
    heads = arch.head_counts[layer - 1]
    if kind in ("Q", "K"):
        return score_factor(arch) / math.sqrt(d_in * math.sqrt(arch.keys[layer - 1]))
    if kind == "V":
        return 1.0 / math.sqrt(d_in * lightning * heads)
    if kind == "W":
        return 1.0 / math.sqrt(d_in)
    if kind == "O":
        return 1.0 / math.sqrt(shape[1] * lightning * heads)
    if kind in ("P", "U", "G"):
        return 1.0 / math.sqrt(shape[1])
    return 0.25  # gains: 1 + 0.25 N(0, 1); biases (names starting with b): 0.25 N(0, 1)


def random_block_weights(arch: Architecture, seed: int = 0, *, dtype: torch.dtype = torch.float64,
                         device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Seeded Gaussian named blocks (generic with probability one), drawn in layout order."""
    check_architecture(arch)
    gen = seeded_generator(check_seed(seed), "weights")
    out = {}
    for name, shape, _ in block_layout(arch):
        layer = int(name.split("_")[1]) if "_" in name else 0
        sample = torch.randn(shape, generator=gen, dtype=torch.float64) * _scale(name, shape, arch, layer)
        if name[0] in "gn" or name.startswith(("qn_", "kn_")) or name == "f":
            sample = sample + 1.0
        out[name] = sample.to(dtype=dtype, device=device)
    return out


def _normalise(Z: torch.Tensor, gain: torch.Tensor, kind: str, eps: float = NORM_EPS) -> torch.Tensor:
    """layernorm or rmsnorm over the feature axis (dim -2) of each token, times the gain."""
    if kind == "layernorm":
        centred = Z - Z.mean(dim=-2, keepdim=True)
        return gain * centred / torch.sqrt((centred * centred).mean(dim=-2, keepdim=True) + eps)
    return gain * Z / torch.sqrt((Z * Z).mean(dim=-2, keepdim=True) + eps)


def activate(x: torch.Tensor, kind: str) -> torch.Tensor:
    """s(x) entrywise: x^2, relu, gelu (exact erf form), tanh, silu (x sigmoid(x)) or gelu_tanh
    (GPT-2's gelu_new: x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2)."""
    if kind == "square":
        return x * x
    if kind == "relu":
        return torch.relu(x)
    if kind == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if kind == "silu":
        return x * torch.sigmoid(x)
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(GELU_TANH_C * (x + 0.044715 * x * x * x)))
    return torch.tanh(x)


def causal_mask(t: int) -> np.ndarray:
    """The t x t 0/1 matrix M_ji = [j <= i]: output token i aggregates tokens j <= i."""
    return np.triu(np.ones((t, t), dtype=np.int64))


def _einsum(spec: str, *operands):
    """torch.einsum on tensors; numpy's einsum on object arrays (python-flint polynomials)."""
    if isinstance(operands[0], np.ndarray):
        return np.einsum(spec, *operands)
    return torch.einsum(spec, *operands)


class Dual:
    """A value x with its tangents dx (one per parameter direction, on a leading axis), or None
    where x depends on no chosen direction: the forward-mode pair of the exact (`fp_dual`,
    residues mod p) and certified (`ball_dual`, arb balls) arithmetics."""

    __slots__ = ("x", "dx")

    def __init__(self, x, dx):
        self.x, self.dx = x, dx


def _rotary_constant(like, a: int, pairs: int, tokens: int, angles=None):
    """R^0..R^{t-1} stacked (t, a, a) in the number system of `like`: float64 on its device for
    tensors, Fractions in an object array for object arrays."""
    if isinstance(like, np.ndarray):
        out = np.empty((tokens, a, a), dtype=object)
        for i, M in enumerate(rotary_fractions(a, pairs, tokens)):
            for r, row in enumerate(M):
                for c, v in enumerate(row):
                    out[i, r, c] = Fraction(v)
        return out
    return torch.tensor(rotary_floats(a, pairs, tokens, angles), dtype=like.dtype,
                        device=like.device)


class ArrayArithmetic:
    """The block map's primitives on arrays: float64 tensors (autodiff applies) and numpy object
    arrays of python-flint polynomials, residues or Fractions (the degree engine, exact fiber
    tests). Z is (..., d, t) with tokens as columns; a parameter block M is (d_out, d_in).

    An arithmetic is any object with these methods (`fp_dual.FpDual`,
    `ball_dual.BallDual` are the others); `block_forward` is written against them once.
    `angles` (pair f -> radians) replaces the rational rotary angles in float (only the docs'
    frequency comparison uses it; `core.positions.base_angles`).
    """

    def __init__(self, angles=None):
        self.angles = angles

    def linear(self, M, Z):
        """M Z."""
        return _einsum("od,...dt->...ot", M, Z)

    def scores(self, q, k):
        """scores_ji = q_j^T k_i (q = Q z, k = K z)."""
        return _einsum("...aj,...ai->...ji", q, k)

    def softmax(self, scores, temperature: float, causal: bool = False):
        """Column softmax of scores / temperature over the aggregated token j (j <= i only when
        `causal`: the later tokens get weight exactly 0)."""
        if causal:
            keep = torch.from_numpy(causal_mask(scores.shape[-1])).to(device=scores.device).bool()
            scores = scores.masked_fill(~keep, float("-inf"))
        return torch.softmax(scores / temperature, dim=-2)

    def mask(self, scores):
        """scores_ji times [j <= i] (causal lightning attention)."""
        mask = causal_mask(scores.shape[-1])
        if isinstance(scores, np.ndarray):
            return scores * mask
        return scores * torch.from_numpy(mask).to(dtype=scores.dtype, device=scores.device)

    def shift(self, Z, b):
        """Z + b for a parameter block b: a bias column (d x 1, added to every token, Z + b 1^T)
        or learned positions (d x t, added to every sample's columns)."""
        return Z + b

    def mul(self, a, b):
        """The entrywise product a * b (a gated MLP's gate times its values)."""
        return a * b

    def scale(self, Z, c: float):
        """c Z for a constant c (an embedding scale)."""
        return Z * c

    def mix(self, values, scores):
        """sum_j values_j scores_ji: each output token aggregates the value columns."""
        return _einsum("...ej,...ji->...ei", values, scores)

    def add(self, a, b):
        return a + b

    def embed(self, E, X):
        """E^T X: one-hot token columns X (..., V, t) to their embeddings (..., d, t)."""
        return _einsum("vd,...vt->...dt", E, X)

    def rotate(self, x, pairs: int, base: float | None = None):
        """Token i's column of x (..., a, t) times R^i: its first `pairs` coordinate pairs
        rotated by i times their angles (`core.positions`; with a `base`, the model's own
        theta_f = base^(-(f - 1) / pairs), float tensors only)."""
        a, t = x.shape[-2], x.shape[-1]
        angles = self.angles
        if base is not None:
            if isinstance(x, np.ndarray):
                raise bad_value("rope_base", "absent in exact arithmetic (its cosines are not "
                                "rational)", base, "Use the numerical or certified method.")
            angles = base_angles(2 * pairs, base)
        R = _rotary_constant(x, a, pairs, t, angles)
        return _einsum("iab,...bi->...ai", R, x)

    def norm(self, Z, gain, kind: str, eps: float = NORM_EPS):
        """gain * N(Z) per token (layernorm or rmsnorm), epsilon `eps`."""
        return _normalise(Z, gain, kind, eps)

    def activate(self, x, kind: str):
        return activate(x, kind)


ARRAYS = ArrayArithmetic()


class FiniteArithmetic(ArrayArithmetic):
    """Float tensors, with every intermediate value checked finite (one forward pass before a
    rank is read at given weights).

    A norm hides an overflow: weights near 1e300 give a variance of inf, the normalised
    stream 0 and a finite Jacobian of zeros, whose rank 0 would be read as a result. Each
    primitive here raises `OverflowError` naming itself when its result (or a norm's second
    moment) is not finite; the caller turns it into the input refusal (`core.finite`)."""

    @staticmethod
    def _check(value, what: str):
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
            raise OverflowError(what)
        return value

    def linear(self, M, Z):
        return self._check(super().linear(M, Z), "a linear map")

    def scores(self, q, k):
        return self._check(super().scores(q, k), "attention scores")

    def softmax(self, scores, temperature: float, causal: bool = False):
        return self._check(super().softmax(scores, temperature, causal), "a softmax")

    def mix(self, values, scores):
        return self._check(super().mix(values, scores), "an attention mix")

    def add(self, a, b):
        return self._check(super().add(a, b), "a residual sum")

    def shift(self, Z, b):
        return self._check(super().shift(Z, b), "a bias")

    def mul(self, a, b):
        return self._check(super().mul(a, b), "a gate product")

    def scale(self, Z, c: float):
        return self._check(super().scale(Z, c), "a scale")

    def embed(self, E, X):
        return self._check(super().embed(E, X), "the embedding")

    def norm(self, Z, gain, kind: str, eps: float = NORM_EPS):
        centred = Z - Z.mean(dim=-2, keepdim=True) if kind == "layernorm" else Z
        self._check((centred * centred).mean(dim=-2, keepdim=True), f"a {kind}'s second moment")
        return self._check(super().norm(Z, gain, kind, eps), f"a {kind}")

    def activate(self, x, kind: str):
        return self._check(super().activate(x, kind), f"the activation {kind}")


FINITE = FiniteArithmetic()


def block_forward(arch: Architecture, blocks: dict, X, *, record: list | None = None,
                  arithmetic=ARRAYS):
    """phi_W(X) of a network; X is (N, d_0, t) or (d_0, t) (see the module docstring).

    The one definition of the network map: every arithmetic runs this code, supplying only
    its primitives (`ArrayArithmetic` documents them): float64 tensors (the default; autodiff
    applies), numpy object arrays of polynomials or residues (`degrees.polymap`), and the
    forward-mode duals over F_p (`fp_dual.FpDual`) and in arb balls
    (`ball_dual.BallDual`), whose `blocks` hold the parameters lifted to that arithmetic.
    `record`, when given, receives each head's softmax weight matrix (`dimension.saturation`).
    """
    ops = arithmetic

    def affine(M: str, Z, b: str | None):
        """M Z, plus the bias column b where the network has it."""
        out = ops.linear(blocks[M], Z)
        return ops.shift(out, blocks[b]) if b is not None and b in blocks else out

    def normed(Z, gain: str, bias: str):
        """gain * N(Z) (+ the layernorm bias `bias` with norm_bias), the network's epsilon."""
        out = ops.norm(Z, blocks[gain], arch.norm, arch.norm_eps)
        return ops.shift(out, blocks[bias]) if arch.norm_bias else out

    if arch.token_types is None:
        Z = X if arch.vocab is None else ops.embed(blocks["E"], X)
    else:                           # BERT: E^T X_token + Ty^T X_type, the one-hot rows stacked
        V = arch.vocab
        Z = ops.add(ops.embed(blocks["E"], _input_rows(X, 0, V)),
                    ops.embed(blocks["Ty"], _input_rows(X, V, V + arch.token_types)))
    if arch.embed_scale != 1.0:                             # Gemma: sqrt(d) E^T X
        Z = ops.scale(Z, arch.embed_scale)
    if arch.positions == "learned":
        Z = ops.shift(Z, blocks["T"])
    if arch.embed_norm:                                     # BERT: a norm on the embedding sum
        Z = normed(Z, "ge", "ce")
    pre = arch.norm != "none" and not arch.post_norm        # the norms read by the sub-layers
    rotated = arch.rotated_pairs if arch.tokens > 1 else (0,) * arch.n_layers
    for i in range(1, arch.n_layers + 1):
        Zn = normed(Z, f"g_{i}", f"c_{i}") if pre else Z
        out, values = None, {}
        for h in range(1, arch.head_counts[i - 1] + 1):
            g = arch.group_of(i, h)      # h itself without kv_heads
            # kv_heads (transformers' grouping): the group shares Q (transformers' key map) and
            # the value map, each head keeps K (transformers' query map) and O
            q = affine(f"Q_{i}_{g}", Zn, f"bq_{i}_{g}")
            k = affine(f"K_{i}_{h}", Zn, f"bk_{i}_{h}")
            if arch.qk_norm:                                # QK-norm, before the rotations
                qn, kn = ((f"qn_{i}", f"kn_{i}") if arch.qk_norm_shared   # one gain per layer
                          else (f"qn_{i}_{g}", f"kn_{i}_{h}"))
                q = ops.norm(q, blocks[qn], arch.norm, arch.norm_eps)
                k = ops.norm(k, blocks[kn], arch.norm, arch.norm_eps)
            if rotated[i - 1]:                              # rotary positions
                r = rotated[i - 1]
                q, k = ((ops.rotate(q, r), ops.rotate(k, r)) if arch.rope_base is None else
                        (ops.rotate(q, r, arch.rope_base), ops.rotate(k, r, arch.rope_base)))
            scores = ops.scores(q, k)                       # scores_ji = q_j^T k_i
            if arch.attention == "softmax":
                scores = ops.softmax(scores, arch.temperature, arch.causal) if arch.causal else \
                    ops.softmax(scores, arch.temperature)
                if record is not None:
                    # causal: the first token aggregates itself only (a one-token column)
                    record.append(scores[..., 1:] if arch.causal else scores)
            elif arch.causal:
                scores = ops.mask(scores)
            if g not in values:
                if f"V_{i}_{g}" in blocks:
                    values[g] = affine(f"V_{i}_{g}", Zn, f"bv_{i}_{g}")
                elif arch.kv_heads is not None:             # O_i_h after the mix, per head
                    values[g] = affine(f"W_{i}_{g}", Zn, f"bv_{i}_{g}")
                else:
                    values[g] = ops.linear(blocks[f"O_{i}_{g}"], affine(f"W_{i}_{g}", Zn, f"bv_{i}_{g}"))
            head = ops.mix(values[g], scores)
            if arch.kv_heads is not None and arch.values is not None:
                head = ops.linear(blocks[f"O_{i}_{h}"], head)
            out = head if out is None else ops.add(out, head)
        if f"bo_{i}" in blocks:
            out = ops.shift(out, blocks[f"bo_{i}"])
        Z_in, Z = Z, (ops.add(Z, out) if arch.residual else out)
        if arch.post_norm:                                  # BERT: N(Z + att(Z))
            Z = normed(Z, f"g_{i}", f"c_{i}")
        if arch.mlp_widths[i - 1] > 0:
            Y = Z_in if arch.parallel else Z               # parallel: the MLP reads the input too
            if arch.shared_norm:                           # Falcon: the attention's normed input
                Yn = Zn
            else:
                Yn = normed(Y, f"n_{i}", f"cn_{i}") if pre else Y
            if arch.mlp_kind == "gated":
                hidden = ops.mul(ops.activate(affine(f"G_{i}", Yn, f"bg_{i}"), arch.activation),
                                 affine(f"P_{i}", Yn, f"bp_{i}"))
            else:
                hidden = ops.activate(affine(f"P_{i}", Yn, f"bp_{i}"), arch.activation)
            out = affine(f"U_{i}", hidden, f"bu_{i}")
            Z = ops.add(Z, out) if arch.residual else out
            if arch.post_norm:                              # BERT: N(Y + mlp(Y))
                Z = normed(Z, f"n_{i}", f"cn_{i}")
    if arch.final_norm:
        Z = normed(Z, "f", "cf")
    if arch.vocab is not None and not arch.hidden_output:   # logits L Z, or E Z when tied
        Z = ops.linear(blocks["E" if arch.tied else "L"], Z)
    return Z


def _input_rows(X, start: int, stop: int):
    """Rows start..stop-1 of an input (..., rows, t): a tensor, an object array or an input
    `Dual` of any arithmetic (inputs carry no tangents; a Dual's are cut alike)."""
    if isinstance(X, Dual):
        return Dual(X.x[..., start:stop, :], None if X.dx is None else X.dx[..., start:stop, :])
    return X[..., start:stop, :]


def block_forward_flat(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """`block_forward` from a flat parameter vector (for Jacobians)."""
    return block_forward(arch, unflatten_blocks(arch, params), X)


def block_reverse_jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor, *,
                           per_sample: bool = False) -> torch.Tensor:
    """d vec(block_forward(W, X)) / dW by reverse mode, shape (rows, n_params), columns in
    `block_layout` order: the Jacobian of `block_forward_flat`, without its cost.

    Reverse mode through `unflatten_blocks` pays, per block, a zero-filled full-width gradient
    per output row and its sum (slice backward: two passes over rows x n_params per block, 43
    blocks in a 2-layer decoder, most of the time); differentiating in the blocks themselves and
    concatenating once gives the same numbers (each entry is one block's own gradient) in one
    pass. `per_sample`: one vjp per row of one sample, vmapped over the samples (X's first axis;
    rows ordered (n, output)), faster when samples are many and small.
    """
    layout = block_layout(arch)
    names = [name for name, _, _ in layout]
    views = unflatten_blocks(arch, params)

    def f(blocks: tuple, x: torch.Tensor) -> torch.Tensor:
        return block_forward(arch, dict(zip(names, blocks, strict=True)), x).reshape(-1)

    parts = tuple(views[name] for name in names)
    if per_sample:
        pieces = vmap(jacrev(f), in_dims=(None, 0))(parts, X)
        pieces = [j.reshape(j.shape[0] * j.shape[1], -1) for j in pieces]
    else:
        pieces = [j.reshape(j.shape[0], -1) for j in jacrev(f)(parts, X)]
    return torch.cat(pieces, dim=1)
