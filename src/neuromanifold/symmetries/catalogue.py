"""The tangent constructions of the symmetry families of networks with heads, value widths,
residuals, MLPs and norms (the paper's model is their one-head instance), one function per family.
Which family applies where, its proof and its count are in `symmetries.registry`, which stacks
the tangents in the order listed below.

Every family gives directions along which the network function does not change (so they lie in
the kernel of the Jacobian), in a fixed order (docs/blocks.md); families overlap, so results
report each family's *incremental* rank (what it adds to the families before it):

  1. per-head GL(a) on (Q, K):   Q -> G Q, K -> G^{-T} K                      (every attention)
  2. per-head GL(v) on (W, O):   W -> G W, O -> O G^{-1}                      (value widths given)
  3. per-head rescaling:         Q -> c Q, value -> value / c                 (lightning)
  4. head mixing:                V_h -> V_h + e V_g, A_g -> A_g - e A_h       (lightning, a_i >= d_{i-1},
                                                                               v_i >= min(d_{i-1}, d_i))
  5. between-layer GL(d):        producer -> G producer, consumers -> . G^{-1} (no residual, no norm)
  6. MLP neuron rescaling:       row j of P times c, column j of U times c^-2 (square; c^-1 relu)
  7. unseen directions:          a producer's output along the readers' kernel, or a reader's
                                 columns along what no producer reaches     (no residual; with a
                                 norm only the readers' half, through the norm)
  8. norm gain rescaling:        g_k -> c g_k, column k of every consumer / c  (with a norm)
  9. layernorm mean directions:  a reader R of g * N(Z) -> R + x (1/g)^T, as 1^T N(Z)/g = 0 (layernorm)
 10. layernorm shifts:           a producer M -> M + 1 x^T, as layernorm ignores 1 (layernorm,
                                 no residual: every reader of M's output is behind a norm)
 11. one-token softmax:         every Q, K entry when the softmax has one token (t = 1); then
                                 also V_1 -> V_1 + E, V_h -> V_h - E (unfactored values), or
                                 GL(H v) on the heads' W stacked and O side by side (value widths)
 12. norm rotations:             producer -> G producer, readers R -> R D G^-1 D^-1 (D = diag(g))
                                 for orthogonal G (fixing 1 for layernorm)    (norm, no residual)
 13. one-token basis changes:    V_i -> B (I + V_i) - I, MLP i -> conjugated by B (P B^-1, B U),
                                 V_{i+1} -> (I + V_{i+1}) B^-1 - I for B in GL(d) (softmax,
                                 t = 1, residual, no norm; with value widths H v < d only the
                                 B the heads can follow; NOTE: [One-token basis changes])

The decoder options add families with their own constructions below (docs/decoder_features.md):
the rotary commutant (1', per key/value group), grouped key sums (14), the softmax query bias
(15), the value bias beside the output bias (16), output biases into the readers' biases (17,
sequential and parallel blocks), the input stream's shift into layer 1's biases (17'), an untied
embedding's shift into the positions (17''), the stream's basis, rotations and shifts with
embeddings, QK-norm and final-norm gains, layernorm shifts and norm rotations at the ends of
a stream without a residual (10', 12'), and with layernorm biases the mean directions taken back
by the readers' biases (9') and each norm's bias shifted into them (17''''), a norm's bias
beside bias-free readers (9''), the final gain with its bias (8'') and a parallel block's two
output biases traded (17''''').

The tangents are computed with an `ops` object (float torch, or residues mod p), so the same
code serves the numerical split and the exact upper bound.

NOTE: [Catalogue families beyond polynomials] Every family is a symmetry of the network for
every attention, activation and norm it is used with, so the certified upper bound of
non-polynomial blocks (`dimension.ball_dual`) uses them all:
  1, 2 the scores read Q, K only through Q^T K, the values W, O only through O W;
  3, 4 lightning only (scores linear in Q); the norm only changes the input the heads read;
  5, 7 no residual, no norm: the stream is written by rows and read by columns of linear maps
       (the activation acts after P, softmax after Q and K), so G and G^-1 (or a kernel) cancel;
       with a norm, 7's readers see D C M h / s (see `_unseen`), and the kernel is taken there;
  6    square (c^-2) and relu (c^-1: relu is positively homogeneous, and the tangent is taken
       at c = 1); gelu and tanh have no such scaling, so the family is left out for them;
  8    g * N(Z) is read only as R diag(g) N(Z) by linear readers R;
  9    layernorm's N(Z) has zero mean over features, so R diag(g) N(Z) is unchanged when
       R diag(g) gains x 1^T. The tangent x (1/g)^T is rational; times prod_j g_j it is the
       integer polynomial column k = x prod_{j != k} g_j, spanning the same line where no
       gain is 0 (rmsnorm has no such direction);
  10   layernorm(Y + 1 y^T) = layernorm(Y); without a residual the stream after a producer is
       read only through the next norm (the network's output is never normed, and `_stages`
       lists only boundaries with readers);
  11   a softmax over one token is the constant 1, so the layer is sum_h V_h N(z) (with value
       widths sum_h O_h W_h = [O_1 ... O_H] [W_1; ...; W_H], a product GL(H v) acts on);
  12   for orthogonal G, rmsnorm(G Y) = G rmsnorm(Y), and layernorm too when G 1 = 1; without a
       residual every reader R sees the stream as R D N(Y), so G D^-1 ... cancels. The tangent
       (E M, -R D E D^-1) for antisymmetric E (E 1 = 0 for layernorm) times prod_j g_j is an
       integer polynomial, as in 9;
  13   softmax only (t = 1 makes it constant; lightning's one-token layer is cubic in z), no
       norm (N(B z) != B N(z)), any activation (B acts outside the MLP's P and U); the
       tangents are rational (one-sided inverses) and, with narrow value widths, taken in the
       kernel of a matrix checked to have full rank, as in 7.
  10', 12' as 10 and 12, at the input stream (read only through layer 1's norm without a
       residual) and at the last one (read only by a final norm, or by untied logits alone);
  17', 17'' identities of the map for every attention and activation (17': no norm, every
       reader of the shifted stream adds its bias after reading).
The relu rescaling and every other tangent lie in the Jacobian's kernel wherever the map is
differentiable, which is all the bound needs (docs/certified_softmax.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..core.architecture import Architecture

@dataclass(frozen=True)
class TangentOps:
    """Arithmetic for tangents: float torch, or residues mod p."""

    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    add: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    neg: Callable[[torch.Tensor], torch.Tensor]
    inv: Callable[[torch.Tensor], torch.Tensor]
    times: Callable[[int, torch.Tensor], torch.Tensor]
    # A basis of the right kernel {n : M n = 0} as columns, or None when M is not of full rank
    # min(rows, cols) at this point (then the family is not used: its count would not be generic).
    kernel: Callable[[torch.Tensor], torch.Tensor | None]


def _float_kernel(M: torch.Tensor) -> torch.Tensor | None:
    from ..core.rank import numerical_rank  # noqa: PLC0415

    _, sv, vh = torch.linalg.svd(M, full_matrices=True)
    nr = numerical_rank(sv, *M.shape)
    if nr.rank != min(M.shape) or nr.is_ambiguous():
        return None
    return vh[nr.rank:].T


FLOAT_OPS = TangentOps(mm=lambda A, B: A @ B, add=lambda A, B: A + B, neg=lambda x: -x,
                       inv=torch.linalg.inv, times=lambda c, x: c * x, kernel=_float_kernel)


def _value_names(blocks: dict, i: int, h: int) -> tuple[str, str]:
    """(input-side value block, output-side value block): (V, V) or (W, O)."""
    if f"V_{i}_{h}" in blocks:
        return f"V_{i}_{h}", f"V_{i}_{h}"
    return f"W_{i}_{h}", f"O_{i}_{h}"


def _groups(arch: Architecture, i: int) -> list[tuple[int, list[int]]]:
    """(g, the heads of group g) for layer i: the key/value groups (kv_heads), or one group per
    head (g = h) without them."""
    groups: dict[int, list[int]] = {}
    for h in range(1, arch.head_counts[i - 1] + 1):
        groups.setdefault(arch.group_of(i, h), []).append(h)
    return list(groups.items())


def _bias(blocks: dict, name: str) -> list[str]:
    """[name] when the network has that bias block, else []."""
    return [name] if name in blocks else []


def _score_maps(arch: Architecture, blocks: dict, i: int, g: int, heads: list[int]
                ) -> tuple[list[str], list[str]]:
    """(the Q side, the K side) of group g's scores in layer i, each map with its bias: the
    group's Q_g and its heads' K_h (kv_heads, transformers' grouping); one head's Q_h and K_h
    without kv_heads."""
    def named(kind: str, js: list[int]) -> list[str]:
        return [name for j in js for name in [f"{kind}_{i}_{j}"] + _bias(blocks, f"b{kind.lower()}_{i}_{j}")]
    return named("Q", [g]), named("K", heads)


def _consumers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """Blocks reading the input of attention layer i through their columns."""
    if arch.kv_heads is not None:  # transformers' grouping: K_i_h per head, Q_i_g, V/W_i_g per group
        return ([f"K_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
                + [name for g, _ in _groups(arch, i)
                   for name in (f"Q_{i}_{g}", _value_names(blocks, i, g)[0])])
    names = []
    for h in range(1, arch.head_counts[i - 1] + 1):
        names += [f"Q_{i}_{h}", f"K_{i}_{h}", _value_names(blocks, i, h)[0]]
    return names


# One construction per family, for layer i (1-based) or for the whole network, each appending
# its tangents ({block name: direction}) through `put`, in the order of the rows it adds. The
# registry (`symmetries.registry`) says when each applies and collects them in its order.

def key_gl_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """1. per-head GL(a) on (Q, K): Q -> G Q, K -> G^{-T} K; with kv_heads one G per group, on
    the group's Q_g and every head's K_h (docs/decoder_features.md); biases follow their maps
    (bq -> G bq, bk -> G^{-T} bk: the scores are [z; 1]^T [Q bq]^T [K bk] [z; 1])."""
    for g, heads in _groups(arch, i):
        queries, keys = _score_maps(arch, blocks, i, g, heads)
        a = arch.keys[i - 1]
        for r in range(a):
            for s in range(a):
                parts = {}
                for name in queries:
                    parts[name] = zero[name].clone()
                    parts[name][r] = blocks[name][s]
                for name in keys:
                    parts[name] = zero[name].clone()
                    parts[name][s] = ops.neg(blocks[name][r])
                put(parts)


def rotary_commutant_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                              put) -> None:
    """1'. rotary commutant (rotary positions, t >= 2): Q -> G Q, K -> G^{-T} K for G commuting
    with the rotations, so q_j^T R^{i-j} k_i is unchanged: per rotated pair f, G = c I + s J on
    the pair (J the quarter turn; distinct angles leave no block between pairs), and GL on the
    a - 2 R unrotated coordinates. Tangent dQ = X Q, dK = -X^T K (X^T commutes too). With
    kv_heads one G per group, on the group's Q_g and every head's K_h; biases follow
    their maps (bq -> G bq, bk -> G^{-T} bk: the rotation acts on q = Q z + bq, and
    R^j G q = G R^j q)."""
    pairs = arch.rotated_pairs[i - 1]
    a = arch.keys[i - 1]
    for g, heads in _groups(arch, i):
        queries, keys = _score_maps(arch, blocks, i, g, heads)
        units = []                              # X as a list of (row, column, entry)
        for f in range(pairs):
            p = 2 * f
            units.append([(p, p, 1), (p + 1, p + 1, 1)])           # X = identity on the pair
            units.append([(p, p + 1, -1), (p + 1, p, 1)])          # X = J = [[0, -1], [1, 0]]
        units += [[(r, s, 1)] for r in range(2 * pairs, a) for s in range(2 * pairs, a)]
        for unit in units:
            parts = {}
            for name in queries:                # dQ = X Q: row r gains x_rs row s
                parts[name] = zero[name].clone()
                for r, s, x in unit:
                    parts[name][r] = ops.add(parts[name][r], blocks[name][s] if x > 0
                                             else ops.neg(blocks[name][s]))
            for name in keys:                   # dK = -X^T K: row s gains -x_rs row r
                parts[name] = zero[name].clone()
                for r, s, x in unit:
                    parts[name][s] = ops.add(parts[name][s], ops.neg(blocks[name][r]) if x > 0
                                             else blocks[name][r])
            put(parts)


def value_gl_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """2. per-head GL(v) on (W, O): W -> G W, O -> O G^{-1} (value widths given; the value bias
    follows W: bv -> G bv). With kv_heads the group's W_g against every head's O_h: head h
    outputs O_h (W_g Z + bv_g 1^T) S_h."""
    for h, heads in _groups(arch, i):
        w_name, o_name = _value_names(blocks, i, h)
        outs = [f"O_{i}_{k}" for k in heads]
        if w_name != o_name:
            W = blocks[w_name]
            for r in range(W.shape[0]):
                for s in range(W.shape[0]):
                    dW = zero[w_name].clone()
                    dW[r] = W[s]
                    parts = {w_name: dW}
                    for name in outs:
                        parts[name] = zero[name].clone()
                        parts[name][:, s] = ops.neg(blocks[name][:, r])
                    for name in _bias(blocks, f"bv_{i}_{h}"):
                        parts[name] = zero[name].clone()
                        parts[name][r] = blocks[name][s]
                    put(parts)


def head_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """3. per-head rescaling: Q -> c Q, value -> value / c (lightning; biases follow their maps).
    With kv_heads and value widths per head: K_h -> c K_h (and bk_h), O_h -> O_h / c, head h
    being O_h W_g Z S_h with S_h linear in K_h; without value widths per group: every K_h of
    the group (and bk_h) against the group's V_g (and bv_g)."""
    if arch.kv_heads is not None and arch.values is not None:
        for h in range(1, arch.head_counts[i - 1] + 1):
            parts = {name: blocks[name].clone() for name in [f"K_{i}_{h}"] + _bias(blocks, f"bk_{i}_{h}")}
            parts[f"O_{i}_{h}"] = ops.neg(blocks[f"O_{i}_{h}"])
            put(parts)
        return
    for g, heads in _groups(arch, i):
        w_name, _ = _value_names(blocks, i, g)
        parts = {}
        for name in (_score_maps(arch, blocks, i, g, heads)[1] if arch.kv_heads is not None
                     else [f"Q_{i}_{g}"] + _bias(blocks, f"bq_{i}_{g}")):
            parts[name] = blocks[name].clone()
        for name in [w_name] + _bias(blocks, f"bv_{i}_{g}"):
            parts[name] = ops.neg(blocks[name])
        put(parts)


def _sum(terms: list[torch.Tensor], ops: TangentOps) -> torch.Tensor:
    """terms[0] + terms[1] + ... in the arithmetic of `ops`."""
    total = terms[0]
    for term in terms[1:]:
        total = ops.add(total, term)
    return total


def gqa_head_mixing_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """3'. gqa head mixing (lightning, kv_heads, value widths): a group's heads sum to sum_h O_h X K_h with
    X = W_g Z (Q_g Z)^T (scores linear in k = K_h z + bk_h), so for heads h != k of one group
    O_h -> O_h + e O_k, K_k -> K_k - e K_h (and bk_k - e bk_h) leaves it unchanged: the
    off-diagonal of GL(n_g) on the pairs (O_h, K_h), whose diagonal is the per-head rescaling."""
    for _, heads in _groups(arch, i):
        for h in heads:
            for k in heads:
                if h != k:
                    parts = {f"O_{i}_{h}": blocks[f"O_{i}_{k}"].clone()}
                    for kind in ("K", "bk"):
                        if f"{kind}_{i}_{k}" in blocks:
                            parts[f"{kind}_{i}_{k}"] = ops.neg(blocks[f"{kind}_{i}_{h}"])
                    put(parts)


def key_sum_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                     put) -> None:
    """14. grouped key sums (lightning, kv_heads, unfactored values): the heads of a group share
    Q_g and V_g, and lightning scores are linear in k_h = K_h z + bk_h, so the group is
    sum_h V_g Z (q_g^T k_h) = V_g Z (q_g^T sum_h k_h): K_h -> K_h + D, K_first -> K_first - D
    (and the key biases)."""
    for _, heads in _groups(arch, i):
        first = heads[0]
        for h in heads[1:]:
            for kind in ("K", "bk"):
                mine, theirs = f"{kind}_{i}_{h}", f"{kind}_{i}_{first}"
                if mine not in blocks:
                    continue
                for r in range(blocks[mine].shape[0]):
                    for c in range(blocks[mine].shape[1]):
                        d_mine, d_first = zero[mine].clone(), zero[theirs].clone()
                        d_mine[r, c] = 1
                        d_first[r, c] = ops.neg(torch.ones_like(d_first[r, c]))
                        put({mine: d_mine, theirs: d_first})


def query_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """15. softmax query bias: scores_ji = (Q z_j + bq)^T k_i and the softmax normalises over
    the aggregated token j; bq^T k_i does not depend on j, so every bq entry is a symmetry
    direction (causal too: the constant is over j <= i). With kv_heads the groups' bq_g
    (transformers' key bias)."""
    for h in range(1, arch.kv_counts[i - 1] + 1):
        name = f"bq_{i}_{h}"
        for r in range(blocks[name].shape[0]):
            d = zero[name].clone()
            d[r] = 1
            put({name: d})


def value_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """16. softmax value bias beside the output bias: softmax columns sum to 1, so a head adds
    its value bias (O_g bv_g with value widths) to every output token, as bo_i does:
    bv_g -> bv_g + x, bo_i -> bo_i - n_g x (unfactored values: n_g the heads of group g), or
    bo_i -> bo_i - sum_h O_h x over the heads of the group (value widths)."""
    for g, heads in _groups(arch, i):
        w_name, o_name = _value_names(blocks, i, g)
        name = f"bv_{i}_{g}"
        for r in range(blocks[name].shape[0]):
            d = zero[name].clone()
            d[r] = 1
            column = ops.times(len(heads), torch.eye(blocks[name].shape[0], dtype=d.dtype)[r]) \
                if w_name == o_name else _sum([blocks[f"O_{i}_{h}"][:, r] for h in heads], ops)
            out = zero[f"bo_{i}"].clone()
            out[:, 0] = ops.neg(column)
            put({name: d, f"bo_{i}": out})


def bias_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """17. output biases into the readers' biases (no norm): the stream after a producer's bias b
    is read by linear readers R z + b_R, so b -> b + x, b_R -> b_R - R x. Without a residual
    nothing else reads it; with one the shift rides on the stream past the readers, and the
    next bias written to the stream (bu_i after the MLP, bo_{i+1} after the next layer's heads)
    takes it back: b' -> b' - x. Only at boundaries where every reader has a bias (and, with a
    residual, a next bias exists). Parallel blocks (z -> z + att(z) + mlp(z)): bo_i and bu_i
    are added to the same output (bo_i + x, bu_i - x), and layer i + 1's heads and MLP read
    the stream after both (the last of them shifts, the first of layer i + 1's takes it back)."""
    if arch.parallel:
        routes = []
        if f"bo_{i}" in blocks and f"bu_{i}" in blocks:
            routes.append((f"bo_{i}", [], f"bu_{i}"))
        written = _bias(blocks, f"bo_{i}") + _bias(blocks, f"bu_{i}")
        later = _bias(blocks, f"bo_{i + 1}") + _bias(blocks, f"bu_{i + 1}")
        if i < arch.n_layers and written and later:
            routes.append((written[-1], _layer_readers(arch, blocks, i + 1), later[0]))
    else:
        routes = []
        for makers, readers in _stages(arch, blocks, i):
            biases = [name for name in makers if name.startswith("b")]
            after = f"bu_{i}" if f"P_{i}" in readers else f"bo_{i + 1}"
            routes.append((biases[-1] if biases else None, readers,
                           after if arch.residual else ""))
    for source, readers, back in routes:
        _shift_route(blocks, zero, ops, source, readers, back, put)


def _shift_route(blocks: dict, zero: dict, ops: TangentOps, source: str | None,
                 readers: list[str], back: str | None, put) -> None:
    """For each stream coordinate r, the tangent that writes e_r to every token through `source`
    (a bias b: entry r; the position table T: row r; the embedding E: column r, since E^T X
    gains e_r 1^T for one-hot X), moves each reader's bias by -R e_r, and takes e_r back through
    `back` (a later block written to every token: entry or row r by -1; "" where nothing takes
    it back, as without a residual). Nothing where the source, a reader's bias or a needed
    `back` (None) is missing."""
    reader_biases = [_reader_bias(blocks, name) for name in readers]
    if source is None or back is None or any(b is None for b in reader_biases):
        return
    if back and back not in blocks:
        return
    for r in range(blocks[source].shape[1] if source == "E" else blocks[source].shape[0]):
        parts = {source: zero[source].clone()}
        if source == "E":
            parts[source][:, r] = 1
        else:
            parts[source][r] = 1
        if back:
            parts[back] = zero[back].clone()
            parts[back][r] = ops.neg(torch.ones_like(parts[back][r]))
        for name, rb in zip(readers, reader_biases):
            parts[rb] = ops.neg(blocks[name][:, r:r + 1].clone())
        put(parts)


def input_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                         put) -> None:
    """17'. the input stream's shift into layer 1's readers' biases (no norm): the position table
    (T -> T + x 1^T) or, without one, an untied embedding (E -> E + 1 x^T: one-hot tokens
    embed as E^T X + x 1^T) writes x to every token; layer 1's readers (its MLP's too in a
    parallel block) take it off their biases, and with a residual the first bias written to the
    stream after them (bo_1; in a parallel block bo_1 or bu_1) takes it back."""
    source = "T" if "T" in blocks else ("E" if "E" in blocks and not arch.tied else None)
    back = ""
    if arch.residual:
        later = _bias(blocks, "bo_1") + (_bias(blocks, "bu_1") if arch.parallel else [])
        back = later[0] if later else None
    _shift_route(blocks, zero, ops, source, _layer_readers(arch, blocks, 1), back, put)


def embedding_position_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                                put) -> None:
    """17''. an untied embedding beside learned positions: one-hot tokens embed as E^T X + T, and
    1^T X = 1^T, so E -> E + 1 x^T, T -> T - x 1^T leaves every input stream unchanged."""
    _shift_route(blocks, zero, ops, "E", [], "T", put)


def _layer_readers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """The blocks reading the stream into layer i: its heads' query, key and value inputs and,
    in a parallel block (its MLP reads the same stream), the MLP's gate and values."""
    mlp = _mlp_readers(arch, i) if arch.parallel and arch.mlp_widths[i - 1] > 0 else []
    return _consumers(arch, blocks, i) + mlp


def _reader_bias(blocks: dict, name: str) -> str | None:
    """The bias added after reader `name` (Q_i_h -> bq_i_h, P_i -> bp_i, ...), None if absent."""
    kind, rest = name.split("_", 1)
    bias = {"Q": "bq", "K": "bk", "V": "bv", "W": "bv", "G": "bg", "P": "bp"}[kind] + "_" + rest
    return bias if bias in blocks else None


def head_mixing_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                         put) -> None:
    """4. head mixing (lightning, several heads, a_i >= d_{i-1})."""
    _head_mixing(arch, blocks, i, ops, put)


def between_layer_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """5. between-layer GL(d) (no residual, no norm)."""
    _between_layers(arch, blocks, i, ops, put)


def neuron_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                              put) -> None:
    """6. MLP neuron rescaling: row j of P times c, column j of U times c^-2 (square) or c^-1 (relu);
    the row's bias with it. Gated (U (s(G y) * (P y))): row j of P times c, column j of U times
    c^-1 for every activation (the product is linear in P y), and row j of G times c with U's
    column times c^-2 (square) or c^-1 (relu)."""
    U = blocks[f"U_{i}"]
    rows = [("P", -1)] if arch.mlp_kind == "gated" else []
    if arch.activation in ("square", "relu"):
        rows.append(("G" if arch.mlp_kind == "gated" else "P", -2 if arch.activation == "square" else -1))
    for kind, c in rows:
        for j in range(arch.mlp_widths[i - 1]):
            parts = {}
            for name in [f"{kind}_{i}"] + _bias(blocks, f"b{kind.lower()}_{i}"):
                parts[name] = zero[name].clone()
                parts[name][j] = blocks[name][j]
            dU = zero[f"U_{i}"].clone()
            dU[:, j] = ops.times(c, U[:, j])
            parts[f"U_{i}"] = dU
            put(parts)


def unseen_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """7. unseen directions (no residual)."""
    _unseen(arch, blocks, i, ops, put)


def _gains(arch: Architecture, blocks: dict, i: int) -> list[tuple[str, list[str]]]:
    """The norm gains of layer i and the blocks that read each."""
    gains = [(f"g_{i}", _consumers(arch, blocks, i))]
    if arch.mlp_widths[i - 1] > 0:
        gains.append((f"n_{i}", _mlp_readers(arch, i)))
    if arch.shared_norm:     # one norm: g_i * N(Z) read by the heads and the MLP alike
        return [(f"g_{i}", [name for _, readers in gains for name in readers])]
    return gains


def gain_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """8. norm gain rescaling: g_k -> c g_k, column k of every reader / c (with a norm)."""
    for gain, readers in _gains(arch, blocks, i):
        for k in range(blocks[gain].shape[0]):
            parts = {gain: zero[gain].clone()}
            parts[gain][k] = blocks[gain][k]
            for name in readers:
                parts[name] = zero[name].clone()
                parts[name][:, k] = ops.neg(blocks[name][:, k])
            put(parts)


def mean_direction_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """9. layernorm mean directions."""
    for gain, readers in _gains(arch, blocks, i):
        _mean_directions(blocks, gain, readers, ops, put)


def layernorm_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """10. layernorm shifts: a producer M -> M + 1 x^T (layernorm, no residual)."""
    for makers, _ in _stages(arch, blocks, i):
        for name in makers:
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def one_token_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                       put) -> None:
    """11. one-token softmax: every Q, K entry; V_1 + E, V_h - E, or GL(H v) on stacked values
    (with kv_heads unfactored values only: the groups' V_g, each read by n_g = H_i / G_i heads)."""
    H = len(_groups(arch, i))
    names = ([f"K_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
             + [f"Q_{i}_{g}" for g in range(1, H + 1)])
    if arch.kv_heads is None:
        names = [name for h in range(1, H + 1) for name in (f"Q_{i}_{h}", f"K_{i}_{h}")]
    for name in names:
        for r in range(blocks[name].shape[0]):
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[r, c] = 1
                put({name: d})
    if f"V_{i}_1" in blocks:
        for h in range(2, H + 1):
            for r in range(blocks[f"V_{i}_1"].shape[0]):
                for c in range(blocks[f"V_{i}_1"].shape[1]):
                    first, other = zero[f"V_{i}_1"].clone(), zero[f"V_{i}_{h}"].clone()
                    first[r, c] = 1
                    other[r, c] = ops.neg(torch.ones_like(other[r, c]))
                    put({f"V_{i}_1": first, f"V_{i}_{h}": other})
    else:
        _stacked_values(arch, blocks, i, ops, put)


def norm_rotation_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """12. norm rotations (norm, no residual)."""
    _norm_rotations(arch, blocks, i, ops, put)


def basis_change_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict, put) -> None:
    """13. one-token basis changes (softmax, t = 1, residual, no norm): the whole network."""
    _basis_changes(arch, blocks, ops, put)


def _products_but_one(g: torch.Tensor, ops: TangentOps) -> torch.Tensor:
    """(prod_{j != k} g_j)_k."""
    column = []
    for k in range(g.shape[0]):
        acc = torch.ones_like(g[k])
        for j in range(g.shape[0]):
            if j != k:
                acc = ops.times(g[j], acc)
        column.append(acc)
    return torch.stack(column)


def _mean_directions(blocks: dict, gain: str, readers: list[str], ops: TangentOps, put) -> None:
    """Row r of a reader R gains (1/g)^T times prod_j g_j: column k is prod_{j != k} g_j."""
    row = _products_but_one(blocks[gain][:, 0], ops)
    for name in readers:
        for r in range(blocks[name].shape[0]):
            d = torch.zeros_like(blocks[name])
            d[r] = row
            put({name: d})


def _head_mixing(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """V_h += e V_g, A_g -= e A_h (g != h), lifted to the factors through one-sided inverses.

    dA_g = dQ_g^T K_g is solved by dQ_g^T = dA_g K_g^+ with K_g^+ = (K_g^T K_g)^{-1} K_g^T (a left
    inverse of K_g; needs a_i >= d_{i-1}). With value widths, dV_h = O_h dW_h... is solved with a
    left inverse of W_h (v >= d_{i-1}) or a right inverse of O_h (v >= d_i); with v below both,
    V_h + e V_g leaves the rank-v set and this family is left out.
    """
    def T(x):
        return x.T.contiguous()

    def left_inverse(M):     # (M^T M)^{-1} M^T for M of full column rank
        return ops.mm(ops.inv(ops.mm(T(M), M)), T(M))

    def right_inverse(M):    # M^T (M M^T)^{-1} for M of full row rank
        return ops.mm(T(M), ops.inv(ops.mm(M, T(M))))

    factored = f"W_{i}_1" in blocks
    if factored and arch.values[i - 1] < min(arch.widths[i - 1], arch.widths[i]):
        return
    # With kv_heads (unfactored values) the units are the groups: group g reads
    # A_g = Q_g^T (sum_{h in g} K_h) (family 14), and dA_g = Q_g^T dK is lifted to the group's
    # first key by the left inverse of Q_g (dK = (Q_g^+)^T dA_g, a_i >= d_{i-1} too).
    groups = dict(_groups(arch, i))
    H, grouped = len(groups), arch.kv_heads is not None
    plus = {g: left_inverse(blocks[f"{'Q' if grouped else 'K'}_{i}_{g}"]) for g in range(1, H + 1)}
    for g in range(1, H + 1):
        for h in range(1, H + 1):
            if g == h:
                continue
            if grouped:
                A_h = ops.mm(T(blocks[f"Q_{i}_{h}"]), _sum([blocks[f"K_{i}_{k}"] for k in groups[h]], ops))
                parts = {f"K_{i}_{groups[g][0]}": ops.neg(ops.mm(T(plus[g]), A_h))}
            else:
                A_h = ops.mm(T(blocks[f"Q_{i}_{h}"]), blocks[f"K_{i}_{h}"])
                parts = {f"Q_{i}_{g}": ops.neg(T(ops.mm(A_h, plus[g])))}
            if not factored:
                parts[f"V_{i}_{h}"] = blocks[f"V_{i}_{g}"].clone()
            else:
                W_h, O_h = blocks[f"W_{i}_{h}"], blocks[f"O_{i}_{h}"]
                V_g = ops.mm(blocks[f"O_{i}_{g}"], blocks[f"W_{i}_{g}"])
                if W_h.shape[0] >= W_h.shape[1]:      # v >= d_{i-1}: dO_h = V_g W_h^+
                    parts[f"O_{i}_{h}"] = ops.mm(V_g, left_inverse(W_h))
                else:                                 # v >= d_i: dW_h = O_h^+ V_g
                    parts[f"W_{i}_{h}"] = ops.mm(right_inverse(O_h), V_g)
            put(parts)


def _norm_rotations(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """so(d) (layernorm: the part fixing 1) at each boundary after layer i, through the norm.

    Producers M -> M + s E M, readers R -> R - s R D E D^-1 with s = prod_j g_j (so the reader
    part D E D^-1 s, entry (a, b) = g_a E_ab prod_{j != b} g_j, is an integer polynomial).
    """
    for makers, readers in _stages(arch, blocks, i):
        g = _stage_gain(blocks, readers, i)
        d = g.shape[0]
        others = _products_but_one(g, ops)
        s = ops.times(g[0], others[0])
        if arch.norm == "layernorm":   # a basis of the complement of 1: e_r - e_{d-1}
            basis = [torch.eye(d, dtype=torch.int64)[r] - torch.eye(d, dtype=torch.int64)[d - 1]
                     for r in range(d - 1)]
        else:
            basis = list(torch.eye(d, dtype=torch.int64))
        for a in range(len(basis)):
            for b in range(a + 1, len(basis)):
                E = torch.outer(basis[a], basis[b]) - torch.outer(basis[b], basis[a])
                E = (E > 0).to(g.dtype) + ops.neg((E < 0).to(g.dtype))
                parts = {name: ops.times(s, ops.mm(E, blocks[name])) for name in makers}
                inner = ops.mm(ops.mm(torch.diag(g), E), torch.diag(others))
                for name in readers:
                    parts[name] = ops.neg(ops.mm(blocks[name], inner))
                put(parts)


def _stacked_values(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """One token, value widths: the layer reads its heads only through sum_h O_h W_h = O W with
    O = [O_1 ... O_H] (d_i x H v) and W = [W_1; ...; W_H] (H v x d_{i-1}), so GL(H v) acts:
    W -> G W, O -> O G^-1. The blocks of G inside one head are family 2; the ones across heads
    g != h (row r of head g, column s of head h): dW_g[r] = W_h[s], dO_h[:, s] = -O_g[:, r]."""
    H, v = len(_groups(arch, i)), arch.values[i - 1]   # the groups, with kv_heads (equal sizes)
    for g in range(1, H + 1):
        for h in range(1, H + 1):
            if g == h:
                continue
            for r in range(v):
                for s in range(v):
                    dW = torch.zeros_like(blocks[f"W_{i}_{g}"])
                    dO = torch.zeros_like(blocks[f"O_{i}_{h}"])
                    dW[r] = blocks[f"W_{i}_{h}"][s]
                    dO[:, s] = ops.neg(blocks[f"O_{i}_{g}"][:, r])
                    parts = {f"W_{i}_{g}": dW, f"O_{i}_{h}": dO}
                    if f"bv_{i}_{g}" in blocks:   # the bias is a column of [W bv]
                        parts[f"bv_{i}_{g}"] = torch.zeros_like(blocks[f"bv_{i}_{g}"])
                        parts[f"bv_{i}_{g}"][r] = blocks[f"bv_{i}_{h}"][s]
                    put(parts)


# NOTE: [One-token basis changes]
# With softmax attention and one token (t = 1) the softmax of the single score is 1, so without a
# norm attention layer j is the linear map z -> z + V_j z, V_j = sum_h V_{j,h} (Q, K unused: family
# 11), and with a residual the network is the composition (input z_0 in R^d, all widths d)
#     z -> (I + V_1) -> mlp'_1 -> (I + V_2) -> mlp'_2 -> ... -> (I + V_l) -> mlp'_l,
# mlp'_j(y) = y + U_j s(P_j y) (the identity when m_j = 0); there are no biases and the output is
# the stream after mlp'_l. Inserting B^-1 B (B in GL(d)) between (I + V_i) and (I + V_{i+1}):
#     B (I + V_i)               = I + V_i',      V_i'     = B (I + V_i) - I,
#     B mlp'_i B^-1 (y)         = y + (B U_i) s((P_i B^-1) y),
#     (I + V_{i+1}) B^-1        = I + V_{i+1}', V_{i+1}' = (I + V_{i+1}) B^-1 - I,
# so the function is unchanged for every activation s. At B = I + e X_i the tangent is
#     dV_i = X_i (I + V_i),  dP_i = -P_i X_i,  dU_i = X_i U_i,  dV_{i+1} = -(I + V_{i+1}) X_i,
# d^2 directions (X_i = E_rs) per consecutive pair i, i + 1 (i < l: the input and the output fix
# the basis at both ends). It needs a residual (without one, family 5 acts instead, between
# every writer and reader) and no norm (N(B z) != B N(z) for a general B).
# A tangent must be realised in the parameters: layer j's dV_j = X_j (I + V_j) - (I + V_j) X_{j-1}
# (X_0 = X_l = 0) must be a derivative of sum_h V_{j,h}.
#   Unfactored values: every dV_j is, on head 1 (the sum sees it whole).
#   Value widths, H v_j >= d: with O = [O_{j,1} ... O_{j,H}] (d x H v) and W = [W_{j,1}; ...;
#     W_{j,H}] (H v x d), V_j = O W; W has full column rank at a generic point, its left inverse
#     W^+ = (W^T W)^-1 W^T gives W^+ W = I, and dO = dV_j W^+ realises every dV_j.
#   Value widths, r = H v_j < d: V_j = O W has rank r, and the derivatives dO W + O dW are
#     exactly the M with U^T M K = 0, U (d x (d - r)) spanning {u : u^T O = 0} and K spanning
#     the kernel of W ((d - r)^2 conditions). Such an M is realised by dO = M W^+,
#     dW = O^+ M (1 - W^+ W) with the one-sided inverses W^+ = W^T (W W^T)^-1 and
#     O^+ = (O^T O)^-1 O^T: dO W + O dW = M W^+ W + O O^+ M (1 - W^+ W) = M, because the columns
#     of M (1 - W^+ W) lie in M K's column space, inside the column space of O (U^T M K = 0), on
#     which O O^+ is the identity. So only the X = (X_1, ..., X_{l-1}) with U_j^T dV_j K_j = 0
#     at every such layer give tangents: the kernel of a matrix linear in X (taken, as in family
#     7, only when that matrix has full rank at this point, so the count is the generic one).
# Inverses make the tangents rational in the weights; the inverse (mod p) and the kernel's rank
# check show the denominators are non-zero at the point, as for head mixing.


def _basis_changes(arch: Architecture, blocks: dict, ops: TangentOps, put) -> None:
    """GL(d) of the stream between consecutive linear one-token layers (NOTE: [One-token basis
    changes]): V_i -> B (I + V_i) - I, P_i -> P_i B^-1, U_i -> B U_i,
    V_{i+1} -> (I + V_{i+1}) B^-1 - I, restricted to the X whose dV every layer's heads realise."""
    d, layers = arch.widths[0], range(1, arch.n_layers + 1)
    eye = torch.eye(d, dtype=next(iter(blocks.values())).dtype)
    value_sets = {j: _value_set(arch, blocks, j, ops) for j in layers}
    if any(value_set is None for value_set in value_sets.values()):
        return
    units = []                         # each X_i = E_rs: {slot: direction}, linear in X
    for i in layers[:-1]:
        before, after = (ops.add(eye, _layer_value(arch, blocks, j, ops)) for j in (i, i + 1))
        for r in range(d):
            for s in range(d):
                unit = {("V", i): torch.zeros_like(before), ("V", i + 1): torch.zeros_like(after)}
                unit[("V", i)][r] = before[s]                   # E_rs (I + V_i): row r is row s
                unit[("V", i + 1)][:, s] = ops.neg(after[:, r])  # -(I + V_{i+1}) E_rs
                if arch.mlp_widths[i - 1] > 0:
                    P, U = blocks[f"P_{i}"], blocks[f"U_{i}"]
                    unit[f"P_{i}"], unit[f"U_{i}"] = torch.zeros_like(P), torch.zeros_like(U)
                    unit[f"P_{i}"][:, s] = ops.neg(P[:, r])      # -P E_rs
                    unit[f"U_{i}"][r] = U[s]                     # E_rs U
                units.append(unit)
    if not units:                      # one layer: no pair of consecutive layers to change between
        return
    if any(condition is not None for _, condition in value_sets.values()):
        conditions = torch.stack([torch.cat([condition(unit.get(("V", j), None))
                                             for j, (_, condition) in value_sets.items()
                                             if condition is not None]) for unit in units], dim=1)
        if conditions.shape[0] >= conditions.shape[1]:
            return
        basis = ops.kernel(conditions)
        if basis is None:
            return
        units = _combine(units, basis, ops)
    for unit in units:
        parts = {}
        for slot, direction in unit.items():
            if isinstance(slot, tuple):
                parts.update(value_sets[slot[1]][0](direction))
            else:
                parts[slot] = direction
        put(parts)


def _combine(units: list[dict], basis: torch.Tensor, ops: TangentOps) -> list[dict]:
    """The combinations sum_u basis[u, k] units[u], one per column k of basis."""
    slots = {slot: direction for unit in units for slot, direction in unit.items()}
    combined = [{} for _ in range(basis.shape[1])]
    for slot, sample in slots.items():
        shape = sample.shape
        stack = torch.stack([unit[slot].reshape(-1) if slot in unit
                             else torch.zeros_like(sample).reshape(-1) for unit in units])
        mixed = ops.mm(basis.T.contiguous(), stack)
        for k, unit in enumerate(combined):
            unit[slot] = mixed[k].reshape(shape)
    return combined


def _layer_value(arch: Architecture, blocks: dict, j: int, ops: TangentOps) -> torch.Tensor:
    """V_j = sum_h V_{j,h} (O_{j,h} W_{j,h} with value widths)."""
    total = None
    for h in range(1, arch.head_counts[j - 1] + 1):
        w_name, o_name = _value_names(blocks, j, h)
        value = blocks[w_name] if w_name == o_name else ops.mm(blocks[o_name], blocks[w_name])
        total = value if total is None else ops.add(total, value)
    return total


def _value_set(arch: Architecture, blocks: dict, j: int, ops: TangentOps):
    """(lift, condition) for layer j's sum of heads V_j (NOTE: [One-token basis changes]): lift
    maps a realisable dV_j to parameter directions; condition(dV_j) = vec(U^T dV_j K), zero exactly
    for the realisable dV_j, is None when every dV_j is. None where a one-sided inverse or a
    kernel is not of full rank at this point."""
    if f"V_{j}_1" in blocks:
        return (lambda dV: {f"V_{j}_1": dV}), None
    H, v = arch.head_counts[j - 1], arch.values[j - 1]
    heads = range(1, H + 1)
    W = torch.cat([blocks[f"W_{j}_{h}"] for h in heads])
    O = torch.cat([blocks[f"O_{j}_{h}"] for h in heads], dim=1)
    Wt, Ot = W.T.contiguous(), O.T.contiguous()
    if W.shape[0] >= W.shape[1]:
        left = ops.mm(ops.inv(ops.mm(Wt, W)), Wt)
        return (lambda dV: {f"O_{j}_{h}": ops.mm(dV, left[:, (h - 1) * v: h * v].contiguous())
                            for h in heads}), None
    U, K = ops.kernel(Ot), ops.kernel(W)
    if U is None or K is None:
        return None
    W_plus = ops.mm(Wt, ops.inv(ops.mm(W, Wt)))
    O_plus = ops.mm(ops.inv(ops.mm(Ot, O)), Ot)
    eye = torch.eye(W.shape[1], dtype=W.dtype)
    off_rows = ops.add(eye, ops.neg(ops.mm(W_plus, W)))        # 1 - W^+ W
    Ut = U.T.contiguous()

    def lift(dV):
        dO, dW = ops.mm(dV, W_plus), ops.mm(O_plus, ops.mm(dV, off_rows))
        out = {}
        for h in heads:
            out[f"O_{j}_{h}"] = dO[:, (h - 1) * v: h * v].contiguous()
            out[f"W_{j}_{h}"] = dW[(h - 1) * v: h * v].contiguous()
        return out

    def condition(dV):
        if dV is None:
            return torch.zeros(U.shape[1] * K.shape[1], dtype=W.dtype)
        return ops.mm(ops.mm(Ut, dV), K).reshape(-1)

    return lift, condition


def _mlp_readers(arch: Architecture, i: int) -> list[str]:
    """The blocks reading the MLP's input: P_i, and G_i before it when gated."""
    return [f"G_{i}", f"P_{i}"] if arch.mlp_kind == "gated" else [f"P_{i}"]


def _head_writers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """The blocks attention i writes the stream with through their rows: each group's value
    output (V_g or O_g), the unfactored value biases bv_g (d_i x 1, mixed by the scores like
    V_g z) and the output bias bo_i; with kv_heads and value widths every head's O_h (bv_g is
    read through them)."""
    writers = ([f"O_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
               if arch.kv_heads is not None and arch.values is not None
               else [_value_names(blocks, i, g)[1] for g, _ in _groups(arch, i)])
    if f"V_{i}_1" in blocks:
        writers += [name for g, _ in _groups(arch, i) for name in _bias(blocks, f"bv_{i}_{g}")]
    return writers + _bias(blocks, f"bo_{i}")


def _layer_writers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """Every block layer i writes its output with through its rows: the heads' writers and,
    with an MLP, U_i and bu_i."""
    mlp = [f"U_{i}"] + _bias(blocks, f"bu_{i}") if arch.mlp_widths[i - 1] > 0 else []
    return _head_writers(arch, blocks, i) + mlp


def _stream_blocks(arch: Architecture, blocks: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """A residual stream's writers (T and every layer's writers, through their rows) and its
    readers with the norm gain in front of each ((name, gain): the heads' query, key and value
    inputs behind g_i, the MLP's gate and values behind n_i), biases and groups included; a
    reader's bias is added after it reads, so no basis change of the stream moves it."""
    writers, readers = (["T"] if "T" in blocks else []), []
    for i in range(1, arch.n_layers + 1):
        readers += [(name, f"g_{i}") for name in _consumers(arch, blocks, i)]
        if arch.mlp_widths[i - 1] > 0:
            readers += [(name, _mlp_gain(arch, i)) for name in _mlp_readers(arch, i)]
        writers += _layer_writers(arch, blocks, i)
    return writers, readers


def _mlp_gain(arch: Architecture, i: int) -> str:
    """The norm gain in front of MLP i's readers: n_i, or g_i with one shared norm."""
    return f"g_{i}" if arch.shared_norm else f"n_{i}"


def _stages(arch: Architecture, blocks: dict, i: int) -> list[tuple[list[str], list[str]]]:
    """(producers, readers) at each boundary after attention i: producers write the stream
    through their rows (their bias columns too: unfactored value biases, bo_i, bu_i), readers
    read it through their columns."""
    producers = _head_writers(arch, blocks, i)
    stages = []
    if arch.mlp_widths[i - 1] > 0:
        stages.append((producers, _mlp_readers(arch, i)))
        producers = [f"U_{i}"] + _bias(blocks, f"bu_{i}")
    if i < arch.n_layers:
        stages.append((producers, _consumers(arch, blocks, i + 1)))
    return stages


def _between_layers(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """GL(d_i) after attention i (before the MLP or the next layer) and after MLP i."""
    for makers, readers in _stages(arch, blocks, i):
        d = blocks[makers[0]].shape[0]
        for r in range(d):
            for s in range(d):
                parts = {}
                for name in makers:        # d(G X) = E X: row r of E X is row s of X
                    parts[name] = torch.zeros_like(blocks[name])
                    parts[name][r] = blocks[name][s]
                for name in readers:       # d(X G^{-1}) = -X E: column s is -column r of X
                    parts[name] = torch.zeros_like(blocks[name])
                    parts[name][:, s] = ops.neg(blocks[name][:, r])
                put(parts)


def _unseen(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """Directions of the stream that producers write but no reader sees, and the converse.

    Readers stacked R (their rows), producers side by side M (their columns): a producer row
    change n x^T with R n = 0 is invisible; a reader column change x n^T with n^T M = 0 reads
    nothing. Used only when R (resp. M) has full rank at this point (generic count).
    With a norm (no residual) only the readers' half applies, through the norm: a reader sees
    R D C M h / s (D = diag(g), C the centring d I - 1 1^T for layernorm, I for rmsnorm, s > 0
    a scalar per token), so x n^T with n^T D C M = 0 reads nothing.
    """
    for makers, readers in _stages(arch, blocks, i):
        stacked = torch.cat([blocks[name] for name in readers])
        side = torch.cat([blocks[name] for name in makers], dim=1)
        if arch.norm == "none":
            pairs = ((makers, stacked, True), (readers, side.T.contiguous(), False))
        else:
            g = _stage_gain(blocks, readers, i)
            if arch.norm == "layernorm":
                d = g.shape[0]
                centre = d * torch.eye(d, dtype=g.dtype) + ops.neg(torch.ones((d, d), dtype=g.dtype))
                side = ops.mm(centre, side)
            side = ops.mm(torch.diag(g), side)
            pairs = ((readers, side.T.contiguous(), False),)
        for names, matrix, as_rows in pairs:
            if matrix.shape[0] >= matrix.shape[1]:
                continue
            basis = ops.kernel(matrix)
            if basis is None:
                continue
            for name in names:
                shape = blocks[name].shape
                for k in range(basis.shape[1]):
                    for j in range(shape[1] if as_rows else shape[0]):
                        d = torch.zeros_like(blocks[name])
                        if as_rows:
                            d[:, j] = basis[:, k]
                        else:
                            d[j, :] = basis[:, k]
                        put({name: d})


def _stage_gain(blocks: dict, readers: list[str], i: int) -> torch.Tensor:
    """The norm gain in front of a boundary's readers: n_i before the MLP, else g_{i+1}."""
    return blocks[f"n_{i}" if f"P_{i}" in readers else f"g_{i + 1}"][:, 0]


# NOTE: [Stream basis changes with embeddings]
# With a vocabulary and no norm, the stream the embedding writes (Z_0 = E^T X (+ T)) and the
# one the logits read (L Z_l, or E Z_l tied) are read and written only by linear maps, so a
# basis change of the stream there is invisible:
#   untied, no residual: Z_0 -> G Z_0 (E -> E G^T, T -> G T, layer 1's readers R -> R G^-1),
#     and Z_l -> H Z_l (layer l's last writers W -> H W, L -> L H^-1): GL(d_0) x GL(d_l);
#   tied, no residual (d_0 = d_l): E -> E M, T -> M^T T, layer 1's readers R -> R M^-T, layer l's last
#     writers W -> M^-1 W: E M (M^-1 Z_l) = E Z_l, R M^-T (M^T E^T X) = R E^T X: GL(d);
#   residual, untied: the whole stream Z -> G Z: every writer (E -> E G^T, T, the heads' value
#     outputs, U) times G, every reader (Q, K, the value inputs, P, L) times G^-1 (Z + f(Z) ->
#     G Z + G f(Z) as f reads through R G^-1 and writes through G): GL(d);
#   residual, tied: the same with L = E, so E G^T G Z_l = E Z_l needs G orthogonal: O(d).
# The tangents at G = I + e Y (Y = E_rs, or E_rs - E_sr for O(d)) are linear in the weights.

def stream_basis_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                          put) -> None:
    """Basis changes of the stream at the embedding and the logits (NOTE: [Stream basis changes
    with embeddings]): GL(d_0) x GL(d_l), GL(d) or O(d)."""
    l = arch.n_layers
    first_readers = _consumers(arch, blocks, 1)
    last_writers = ([f"U_{l}"] + _bias(blocks, f"bu_{l}") if arch.mlp_widths[l - 1] > 0
                    else _head_writers(arch, blocks, l))    # no residual: the last stage's
    inputs = ["T"] if "T" in blocks else []
    d0, dl = arch.widths[0], arch.widths[-1]
    if arch.tied and not arch.residual:
        for r in range(d0):
            for s in range(d0):
                put(_tied_change(blocks, zero, first_readers, last_writers, r, s, ops))
        return
    if arch.residual:
        writers, readers = _stream_blocks(arch, blocks)
        readers = [name for name, _ in readers] + ([] if arch.tied else ["L"])
        groups = [(d0, (writers, readers, ["E"]))]
    else:
        groups = [(d0, (inputs, first_readers, ["E"])), (dl, (last_writers, ["L"], []))]
    for size, group in groups:
        for r in range(size):
            for s in range(size):
                if not arch.tied:
                    put(_unit_change(blocks, zero, group, r, s, ops))
                elif r < s:   # tied with a residual: O(d), Y = E_rs - E_sr
                    one = _unit_change(blocks, zero, group, r, s, ops)
                    other = _unit_change(blocks, zero, group, s, r, ops)
                    put({k: ops.add(one[k], ops.neg(other[k])) for k in one})


def _accumulator(parts: dict, ops: TangentOps):
    """put(name, d): add direction d to parts[name] (a block both read and written sums both)."""
    def plus(name: str, d: torch.Tensor) -> None:
        parts[name] = d if name not in parts else ops.add(parts[name], d)
    return plus


def _unit_change(blocks: dict, zero: dict, group, r: int, s: int, ops: TangentOps) -> dict:
    """G = I + e E_rs on a stream: writers dW = E_rs W (row r is row s), readers
    dR = -R E_rs (column s is -column r), embeddings (written through E^T) dE = E E_sr."""
    writers, readers, embeddings = group
    parts: dict = {}
    plus = _accumulator(parts, ops)
    for name in writers:
        d = zero[name].clone()
        d[r] = blocks[name][s]
        plus(name, d)
    for name in readers:
        d = zero[name].clone()
        d[:, s] = ops.neg(blocks[name][:, r])
        plus(name, d)
    for name in embeddings:
        d = zero[name].clone()
        d[:, r] = blocks[name][:, s]
        plus(name, d)
    return parts


def _tied_change(blocks: dict, zero: dict, readers: list[str],
                 writers: list[str], r: int, s: int, ops: TangentOps) -> dict:
    """Tied, no residual: M = I + e E_rs: dE = E E_rs (column s is column r), positions
    dT = E_sr T, layer 1's readers dR = -R E_sr (column r is -column s), layer l's last
    writers dW = -E_rs W."""
    parts: dict = {}
    plus = _accumulator(parts, ops)
    d = zero["E"].clone()
    d[:, s] = blocks["E"][:, r]
    plus("E", d)
    if "T" in blocks:             # Z_0 = E^T X + T -> M^T Z_0: dT = E_sr T (row s is row r)
        d = zero["T"].clone()
        d[s] = blocks["T"][r]
        plus("T", d)
    for name in readers:
        d = zero[name].clone()
        d[:, r] = ops.neg(blocks[name][:, s])
        plus(name, d)
    for name in writers:
        d = zero[name].clone()
        d[r] = ops.neg(blocks[name][s])
        plus(name, d)
    return parts


def qk_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                     put) -> None:
    """QK-norm gain balance: qn -> c qn, kn -> kn / c on one unrotated coordinate, or on both
    coordinates of a rotated pair (a scalar on a pair commutes with its rotations): the score
    (qn * N(q))^T R^m (kn * N(k)) is unchanged, whatever the attention. With kv_heads the group's
    qn_g against every head's kn_h."""
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    a = arch.keys[i - 1]
    coords = [(2 * f, 2 * f + 1) for f in range(pairs)] + [(c,) for c in range(2 * pairs, a)]
    for g, heads in _groups(arch, i):
        shared, own = ("qn", "kn") if arch.kv_heads is not None else ("kn", "qn")
        kn = f"{shared}_{i}_{g}"
        for coord in coords:
            parts = {kn: zero[kn].clone()}
            for c in coord:
                parts[kn][c] = ops.neg(blocks[kn][c])
            for h in heads:
                qn = f"{own}_{i}_{h}"
                parts[qn] = zero[qn].clone()
                for c in coord:
                    parts[qn][c] = blocks[qn][c]
            put(parts)


def shared_qk_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """Shared QK-norm gain balance (qk_norm_shared: one gain qn_i, kn_i per layer for every
    head): qn_i -> c qn_i, kn_i -> kn_i / c on one unrotated coordinate, or on both coordinates
    of a rotated pair; every head's score (qn_i * N(q_h))^T R^m (kn_i * N(k_h)) is unchanged."""
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    coords = [(2 * f, 2 * f + 1) for f in range(pairs)] + [(c,) for c in range(2 * pairs, arch.keys[i - 1])]
    qn, kn = f"qn_{i}", f"kn_{i}"
    for coord in coords:
        parts = {qn: zero[qn].clone(), kn: zero[kn].clone()}
        for c in coord:
            parts[qn][c] = blocks[qn][c]
            parts[kn][c] = ops.neg(blocks[kn][c])
        put(parts)


def final_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict, put) -> None:
    """Final norm gain (untied logits): f_k -> c f_k, column k of L / c, as L reads f * N(Z)
    only; with layernorm also L + x (1/f)^T (N(Z) has zero mean), as family 9."""
    for k in range(blocks["f"].shape[0]):
        df, dL = zero["f"].clone(), zero["L"].clone()
        df[k] = blocks["f"][k]
        dL[:, k] = ops.neg(blocks["L"][:, k])
        put({"f": df, "L": dL})
    if arch.norm == "layernorm":
        _mean_directions(blocks, "f", ["L"], ops, put)


def stream_rotation_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                             put) -> None:
    """Orthogonal changes G of a residual stream behind norms, with embeddings: rmsnorm(G Z) =
    G rmsnorm(Z) (layernorm too when G 1 = 1), so a reader R of D N(Z) (D = diag(gain)) becomes
    R D G^-1 D^-1, every writer (E -> E G^T, T, the heads' value outputs, U) G times itself, and
    the logits L -> L G^-1 (L F G^-1 F^-1 behind a final norm; tied: E G^T G = E, needing no
    final norm). Tangents at G = I + e X, X antisymmetric (X 1 = 0 for layernorm). With norm
    biases (norm_bias) each norm's bias c -> D G D^-1 c too: R D G^-1 D^-1 then reads
    D G N(Z) + D G D^-1 c as R read D N(Z) + c (family *stream rotations with norm biases*)."""
    d = arch.widths[0]
    writers, readers = _stream_blocks(arch, blocks)
    if not arch.tied:
        readers.append(("L", "f" if arch.final_norm else None))
    sample = blocks["E"]
    if arch.norm == "layernorm":   # a basis of the complement of 1: e_r - e_{d-1}
        eye = torch.eye(d, dtype=torch.int64)
        basis = [eye[r] - eye[d - 1] for r in range(d - 1)]
    else:
        basis = list(torch.eye(d, dtype=torch.int64))
    conjugators = {}
    for _, gain in readers:
        if gain is not None and gain not in conjugators:
            g = torch.diag(blocks[gain][:, 0])
            conjugators[gain] = (g, ops.inv(g))
    for a in range(len(basis)):
        for b in range(a + 1, len(basis)):
            E = torch.outer(basis[a], basis[b]) - torch.outer(basis[b], basis[a])
            X = (E > 0).to(sample.dtype) + ops.neg((E < 0).to(sample.dtype))
            parts: dict = {}
            plus = _accumulator(parts, ops)
            for name in writers:
                plus(name, ops.mm(X, blocks[name]))
            plus("E", ops.neg(ops.mm(blocks["E"], X)))          # E X^T = -E X
            for name, gain in readers:
                inner = X if gain is None else ops.mm(ops.mm(conjugators[gain][0], X),
                                                      conjugators[gain][1])
                plus(name, ops.neg(ops.mm(blocks[name], inner)))
            if arch.norm_bias:
                for gain, (D, D_inv) in conjugators.items():
                    kind, sep, layer = gain.partition("_")
                    bias = _NORM_BIASES[kind] + sep + layer
                    plus(bias, ops.mm(ops.mm(ops.mm(D, X), D_inv), blocks[bias]))
            put(parts)


_NORM_BIASES = {"g": "c", "n": "cn", "f": "cf"}     # the bias added after each norm gain


def stream_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                          put) -> None:
    """A residual stream read only through layernorms (a final norm included): layernorm(Z + 1 y^T)
    = layernorm(Z), so every writer M -> M + 1 x^T (the heads' value outputs, U, T; the
    embedding E^T + 1 x^T, i.e. E + x 1^T, when untied) leaves the map unchanged."""
    writers, _ = _stream_blocks(arch, blocks)
    for name in writers:
        for c in range(blocks[name].shape[1]):
            d = zero[name].clone()
            d[:, c] = 1
            put({name: d})
    if "E" in blocks and not arch.tied:   # tied, E also reads: E (f * N) is not shift-free
        for v in range(blocks["E"].shape[0]):
            d = zero["E"].clone()
            d[v] = 1
            put({"E": d})


def _last_writers(arch: Architecture, blocks: dict) -> list[str]:
    """Without a residual, the blocks writing the network's last stream through their rows: the
    last MLP's U_l and bu_l, or the last heads' writers."""
    l = arch.n_layers
    return ([f"U_{l}"] + _bias(blocks, f"bu_{l}") if arch.mlp_widths[l - 1] > 0
            else _head_writers(arch, blocks, l))


def end_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                       put) -> None:
    """10'. layernorm shifts at the ends (layernorm, no residual): the input stream is read only
    through layer 1's norm, so T -> T + 1 y^T and an untied embedding E -> E + x 1^T (one-hot
    tokens: E^T X gains 1 (x^T X)) leave the map unchanged; behind a final norm the last stream
    is read only through it, so every last writer M -> M + 1 x^T does too. (Tied, E also reads
    the logits: E Z + x 1^T Z is not the same map.)"""
    if "T" in blocks:
        for c in range(blocks["T"].shape[1]):
            d = zero["T"].clone()
            d[:, c] = 1
            put({"T": d})
    if "E" in blocks and not arch.tied:
        for v in range(blocks["E"].shape[0]):
            d = zero["E"].clone()
            d[v] = 1
            put({"E": d})
    if arch.final_norm:
        for name in _last_writers(arch, blocks):
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def end_rotation_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                          put) -> None:
    """12'. the stream's basis at the ends behind norms (norm, no residual, untied embedding and
    logits): the input stream E^T X (+ T) is read only through layer 1's norm, so an orthogonal
    G (fixing 1 for layernorm) acts as family 12 does between layers: E -> E G^T, T -> G T,
    layer 1's readers R -> R D G^-1 D^-1 (D = diag(g_1)); the last stream is read only by the
    logits: behind a final norm (gain F) the last writers W -> G W, L -> L F G^-1 F^-1 with G
    orthogonal (fixing 1 for layernorm), without one any H in GL(d_l): W -> H W, L -> L H^-1.
    Tangents at G = I + e X (X antisymmetric, X 1 = 0 for layernorm; any X = E_rs for GL)."""
    d0, dl = arch.widths[0], arch.widths[-1]
    dtype = blocks["E"].dtype

    def units(d: int) -> list[torch.Tensor]:
        if arch.norm == "layernorm":   # a basis of the complement of 1: e_r - e_{d-1}
            eye = torch.eye(d, dtype=torch.int64)
            basis = [eye[r] - eye[d - 1] for r in range(d - 1)]
        else:
            basis = list(torch.eye(d, dtype=torch.int64))
        out = []
        for a in range(len(basis)):
            for b in range(a + 1, len(basis)):
                E = torch.outer(basis[a], basis[b]) - torch.outer(basis[b], basis[a])
                out.append((E > 0).to(dtype) + ops.neg((E < 0).to(dtype)))
        return out

    def conjugate(gain: str, X: torch.Tensor) -> torch.Tensor:   # D X D^-1
        D = torch.diag(blocks[gain][:, 0])
        return ops.mm(ops.mm(D, X), ops.inv(D))

    for X in units(d0):
        parts: dict = {}
        plus = _accumulator(parts, ops)
        plus("E", ops.neg(ops.mm(blocks["E"], X)))             # E X^T = -E X
        if "T" in blocks:
            plus("T", ops.mm(X, blocks["T"]))
        inner = conjugate("g_1", X)
        for name in _consumers(arch, blocks, 1):
            plus(name, ops.neg(ops.mm(blocks[name], inner)))
        put(parts)
    if arch.final_norm:
        for X in units(dl):
            parts = {}
            plus = _accumulator(parts, ops)
            for name in _last_writers(arch, blocks):
                plus(name, ops.mm(X, blocks[name]))
            plus("L", ops.neg(ops.mm(blocks["L"], conjugate("f", X))))
            put(parts)
        return
    for r in range(dl):
        for s in range(dl):
            put(_unit_change(blocks, zero, (_last_writers(arch, blocks), ["L"], []), r, s, ops))


# Post-norm blocks (BERT: Z -> N(Z + att(Z)), Y -> N(Y + mlp(Y)), an embedding norm): every
# norm's output y = g * n + b (n of mean 0 under layernorm) is read by linear maps with biases
# and added to the next sub-layer's output before the next norm (docs/decoder_features.md,
# "Post-norm blocks (BERT)").

def _post_norm_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str | None, list[str], str | None]]:
    """(gain, bias, readers, back) of every norm of a post-norm network, in order: the blocks
    that read its output through their columns, and the output bias of the sub-layer whose
    result is added to it (None for the last norm, whose output is the network's, or where that
    bias is absent); the embedding norm (ge, ce) first."""
    sites, l = [], arch.n_layers

    def site(gain: str, bias: str, readers: list[str], back: str | None) -> None:
        sites.append((gain, bias if bias in blocks else None, readers,
                      back if back is not None and back in blocks else None))

    if arch.embed_norm:
        site("ge", "ce", _consumers(arch, blocks, 1), "bo_1")
    for i in range(1, l + 1):
        after = (_consumers(arch, blocks, i + 1), f"bo_{i + 1}") if i < l else ([], None)
        if arch.mlp_widths[i - 1] > 0:
            site(f"g_{i}", f"c_{i}", _mlp_readers(arch, i), f"bu_{i}")
            site(f"n_{i}", f"cn_{i}", *after)
        else:
            site(f"g_{i}", f"c_{i}", *after)
    return sites


def post_norm_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """18. post-norm layernorm bias shifts (docs/models.md rule 10): b -> b + e_r moves every
    reader's output by R e_r, which its bias takes off, and the stream added to the next
    sub-layer's output by e_r, which that sub-layer's output bias takes back; d per norm with
    readers and a next sub-layer (every reader with a bias)."""
    for _, bias, readers, back in _post_norm_sites(arch, blocks):
        if bias is not None and back is not None and readers:
            _shift_route(blocks, zero, ops, bias, readers, back, put)


def post_norm_reader_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                              put) -> None:
    """19. post-norm layernorm readers (docs/models.md rule 5): R y + c with y = g * n + b and
    1^T n = 0: row r of R gains (1/g)^T (times prod g, a polynomial), and c_r loses (1/g)^T b
    (times prod g); one per reader row (a reader without a bias only where the norm has none)."""
    for gain, bias, readers, _ in _post_norm_sites(arch, blocks):
        _reader_means(blocks, zero, ops, gain, bias, readers, put)


def _reader_means(blocks: dict, zero: dict, ops: TangentOps, gain: str, bias: str | None,
                  readers: list[str], put) -> None:
    """The mean directions of readers R of a layernorm's output g * n + c (1^T n = 0): row r of
    R gains (1/g)^T and, with the bias c, the reader's bias entry r loses (1/g)^T c (both times
    prod_j g_j, integer polynomials); with c a reader without a bias gets none."""
    row = _products_but_one(blocks[gain][:, 0], ops)
    shift = None if bias is None else ops.neg(ops.mm(row.reshape(1, -1), blocks[bias]))
    for name in readers:
        rb = _reader_bias(blocks, name)
        if shift is not None and rb is None:
            continue
        for r in range(blocks[name].shape[0]):
            parts = {name: zero[name].clone()}
            parts[name][r] = row
            if shift is not None:
                parts[rb] = zero[rb].clone()
                parts[rb][r] = shift[0]
            put(parts)


def post_norm_write_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                             put) -> None:
    """20. post-norm write means (docs/models.md rule 6): what attention i (its value outputs
    and biases, bo_i) and MLP i (U_i, bu_i) add to the stream reaches only the layernorm after
    them, which drops the all-ones component: each column of a writer gains 1."""
    for i in range(1, arch.n_layers + 1):
        writers = _layer_writers(arch, blocks, i)
        for name in writers:
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def embedding_norm_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """21. the embedding norm's means (docs/models.md rule 7): a row of E or Ty, or a column of
    T, gains c 1; the layernorm on their sum drops it."""
    for name, by_rows in (("E", True), ("T", False), ("Ty", True)):
        if name not in blocks:
            continue
        for k in range(blocks[name].shape[0 if by_rows else 1]):
            d = zero[name].clone()
            if by_rows:
                d[k] = 1
            else:
                d[:, k] = 1
            put({name: d})


def token_type_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                        put) -> None:
    """22. token types beside the embedding: every token has one type, so E -> E + 1 x^T,
    Ty -> Ty - 1 x^T leaves every embedded input E^T X + Ty^T Y unchanged; one per coordinate."""
    for r in range(blocks["E"].shape[1]):
        dE, dY = zero["E"].clone(), zero["Ty"].clone()
        dE[:, r] = 1
        dY[:, r] = ops.neg(torch.ones_like(dY[:, r]))
        put({"E": dE, "Ty": dY})


# Families closing loose brackets found by the independent checks (docs/decoder_features.md,
# "Combined features"): the softmax query bias on the coordinates rotary positions leave alone,
# and the lightning per-head rescaling carried by a QK-norm's query gain.

def unrotated_query_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                  zero: dict, put) -> None:
    """15'. softmax query bias on the unrotated coordinates (rotary positions): the score is
    q_j^T R^{i-j} k_i with q_j = Q z_j + bq, and R^m is the identity on the a - 2 R coordinates
    past the rotated pairs, so bq_u k_{i,u} (u unrotated) does not depend on the aggregated
    token j: the softmax ignores it. Family 15's tangents (one per bias entry of each group's
    bq_g; a group is one head without kv_heads) restricted to those coordinates (all of them with one token: R^0 = I)."""
    first = 2 * (arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0)

    def unrotated(parts: dict) -> None:
        (d,) = parts.values()
        if not d[:first].any():
            put(parts)

    query_bias_tangents(arch, blocks, ops, i, zero, unrotated)


def qk_norm_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                               zero: dict, put) -> None:
    """3''. per-head rescaling through a QK-norm (lightning): the scores (qn * N(q_j))^T R^m
    (kn * N(k_i)) are linear in the gain qn (a scalar commutes with the rotations), and
    lightning heads are linear in their scores, so qn -> c qn for every head of a group, and
    the group's value input (V_g or W_g, with bv_g) -> value / c, leaves every head unchanged.
    With key/value groups and value widths per head: kn_h -> c kn_h, O_h -> O_h / c (head h is
    O_h (W_g Z + bv_g) S_h); with groups and unfactored values per group: the group's qn_g (its
    Q_g's gain) -> c qn_g, V_g (bv_g) -> / c; without groups g is the head itself."""
    if arch.kv_heads is not None and arch.values is not None:
        for h in range(1, arch.head_counts[i - 1] + 1):
            put({f"kn_{i}_{h}": blocks[f"kn_{i}_{h}"].clone(),
                 f"O_{i}_{h}": ops.neg(blocks[f"O_{i}_{h}"])})
        return
    for g, heads in _groups(arch, i):
        w_name, _ = _value_names(blocks, i, g)
        parts = {f"qn_{i}_{g}": blocks[f"qn_{i}_{g}"].clone()}
        for name in [w_name] + _bias(blocks, f"bv_{i}_{g}"):
            parts[name] = ops.neg(blocks[name])
        put(parts)


def gain_bias_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                 zero: dict, put) -> None:
    """8'. norm gain rescaling with norm biases (norm_bias): a reader R sees g * N(Z) + c, that
    is sum_k R[:, k] (g_k N_k(Z) + c_k), so g_k -> a g_k, c_k -> a c_k and column k of every
    reader / a leaves it unchanged (c_i after g_i, cn_i after n_i)."""
    for gain, readers in _gains(arch, blocks, i):
        bias = f"c_{i}" if gain == f"g_{i}" else f"cn_{i}"
        for k in range(blocks[gain].shape[0]):
            parts = {gain: zero[gain].clone(), bias: zero[bias].clone()}
            parts[gain][k] = blocks[gain][k]
            parts[bias][k] = blocks[bias][k]
            for name in readers:
                parts[name] = zero[name].clone()
                parts[name][:, k] = ops.neg(blocks[name][:, k])
            put(parts)


def qk_layernorm_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                zero: dict, put) -> None:
    """10''. shifts into a layernorm QK-norm: layernorm(q + t 1) = layernorm(q) exactly (the mean
    is taken off, the variance is unchanged), and the QK-norm reads q = Q z + bq whole, so
    Q -> Q + 1 x^T (column c of Q all ones) and bq -> bq + t 1 leave every score unchanged; the
    same for every key map. Every query and key map of the layer (per group as they are
    stored), one tangent per column and per bias."""
    for g, heads in _groups(arch, i):
        queries, keys = _score_maps(arch, blocks, i, g, heads)
        for name in dict.fromkeys(queries + keys):
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def biased_unseen_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """7'. unseen directions with the readers' biases (no residual, no norm): at a boundary the
    stream is M h + c for every token, c the constant bias written to every token (bo_i before
    an MLP, bu_i after it) and M the other producers side by side (value outputs, value biases:
    mixed by the scores, not constant). A reader R z + b_R with R -> R + x n^T, n^T M = 0, reads
    R z + x (n^T c): its bias b_R -> b_R - x (n^T c) takes the constant back. So n ranges over
    the left kernel of M alone (family 7 takes that of [M c]): one tangent per reader row and
    kernel vector, where every reader has a bias (used only when M has full rank, as in 7)."""
    for makers, readers in _stages(arch, blocks, i):
        constants = [name for name in makers if name in (f"bo_{i}", f"bu_{i}")]
        others = [name for name in makers if name not in constants]
        biases = [_reader_bias(blocks, name) for name in readers]
        if len(constants) != 1 or not others or any(b is None for b in biases):
            continue
        side = torch.cat([blocks[name] for name in others], dim=1)
        if side.shape[1] >= side.shape[0]:
            continue
        basis = ops.kernel(side.T.contiguous())
        if basis is None:
            continue
        shift = ops.mm(basis.T.contiguous(), blocks[constants[0]])   # n^T c per kernel vector
        for name, bias in zip(readers, biases):
            for k in range(basis.shape[1]):
                for j in range(blocks[name].shape[0]):
                    d, db = zero[name].clone(), zero[bias].clone()
                    d[j, :] = basis[:, k]
                    db[j] = ops.neg(shift[k])
                    put({name: d, bias: db})


def input_kernel_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                                put) -> None:
    """17'''. the input stream's shift in the kernel of layer 1's bias-free readers (no norm,
    parallel blocks): the position table (T -> T + x 1^T) or an untied embedding
    (E -> E + 1 x^T) writes x to every token; a reader with a bias takes -R x on it, a reader
    without one (a parallel MLP's P without MLP biases) reads nothing when R x = 0; with a
    residual the first bias written to the stream after them (bo_1, or bu_1) takes x back.
    x ranges over the kernel of the bias-free readers stacked (used where they have full rank)."""
    source = "T" if "T" in blocks else ("E" if "E" in blocks and not arch.tied else None)
    readers = _layer_readers(arch, blocks, 1)
    bare = [name for name in readers if _reader_bias(blocks, name) is None]
    later = _bias(blocks, "bo_1") + _bias(blocks, "bu_1")
    if source is None or not bare or (arch.residual and not later):
        return
    stacked = torch.cat([blocks[name] for name in bare])
    if stacked.shape[0] >= stacked.shape[1]:
        return
    basis = ops.kernel(stacked)
    if basis is None:
        return
    for k in range(basis.shape[1]):
        x = basis[:, k]
        parts = {source: zero[source].clone()}
        if source == "E":
            parts[source][:] = x
        else:
            parts[source][:] = x[:, None]
        if arch.residual:
            parts[later[0]] = zero[later[0]].clone()
            parts[later[0]][:, 0] = ops.neg(x)
        for name in readers:
            bias = _reader_bias(blocks, name)
            if bias is not None:
                parts[bias] = ops.neg(ops.mm(blocks[name], x[:, None].contiguous()))
        put(parts)


# Pre-norm layernorms with biases (norm_bias: c_i after g_i, cn_i after n_i; GPT-2): each norm's
# output g * n + c is read only by linear readers R y + b_R (the heads' query, key and value
# inputs, the MLP's gate and values), whatever else the block does with the stream
# (docs/decoder_features.md#mean-directions-and-bias-shifts-with-norm-biases).

def _biased_gains(arch: Architecture, blocks: dict, i: int) -> list[tuple[str, str, list[str]]]:
    """(gain, its bias, readers) of layer i's norms (`_gains`): c_i after g_i, cn_i after n_i."""
    return [(gain, ("c" if gain.startswith("g") else "cn") + gain[gain.index("_"):], readers)
            for gain, readers in _gains(arch, blocks, i)]


def norm_bias_mean_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """9'. layernorm mean directions with norm biases: a reader sees R (g * n + c) + b_R with
    1^T n = 0, so R -> R + x (1/g)^T adds the constant x (1/g)^T c to every token, which
    b_R -> b_R - x (1/g)^T c takes back: one tangent per row of every reader with a bias."""
    for gain, bias, readers in _biased_gains(arch, blocks, i):
        _reader_means(blocks, zero, ops, gain, bias, readers, put)


def norm_bias_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """17''''. a layernorm's bias into its readers' biases: c -> c + e_r moves every reader's
    output by R e_r, which b_R -> b_R - R e_r takes back; nothing else reads the norm's output
    (a pre-norm block adds the un-normed stream to its result). One tangent per entry of c,
    at norms whose readers all have a bias."""
    for _, bias, readers in _biased_gains(arch, blocks, i):
        _shift_route(blocks, zero, ops, bias, readers, "", put)


# Parallel blocks and the final norm with layernorm biases (Falcon, GPT-NeoX): a norm whose
# readers lack biases, the final norm's gain with its bias, the parallel block's two output
# biases, the stream's rotations moving every norm's bias
# (docs/decoder_features.md#parallel-blocks-and-the-final-norm-with-norm-biases).

def _bias_free_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str, list[str]]]:
    """(gain, its bias, readers) of every pre-norm with some reader without a bias (Falcon's
    heads and MLP without biases), and of the final norm read by untied logits L (no bias)."""
    sites = [(gain, bias, readers) for i in range(1, arch.n_layers + 1)
             for gain, bias, readers in _biased_gains(arch, blocks, i)
             if readers and any(_reader_bias(blocks, name) is None for name in readers)]
    if _final_norm_read_by_logits(arch):
        sites.append(("f", "cf", ["L"]))
    return sites


def _final_norm_read_by_logits(arch: Architecture) -> bool:
    """A final norm read by untied logits L and by nothing else."""
    return (arch.final_norm and arch.vocab is not None and not arch.tied
            and not arch.hidden_output)


def bias_free_mean_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """9''. a layernorm's bias beside readers without biases: readers see R (g * n + c) with
    1^T n = 0, so c -> c + s e_k with s = (1/g)^T c and every reader R -> R - R e_k (1/g)^T
    change R y by -R e_k (1/g)^T c + s R e_k = 0 (first order). Times prod_j g_j the tangent is
    an integer polynomial (c: s prod g in entry k; R: column j of -R e_k prod_{l != j} g_l):
    one per entry of c."""
    for gain, bias, readers in _bias_free_sites(arch, blocks):
        row = _products_but_one(blocks[gain][:, 0], ops)               # prod g / g_j
        s = ops.mm(row.reshape(1, -1), blocks[bias])                    # prod g (1/g)^T c
        for k in range(blocks[bias].shape[0]):
            parts = {bias: zero[bias].clone()}
            parts[bias][k] = s[0]
            for name in readers:
                parts[name] = ops.neg(ops.mm(blocks[name][:, k:k + 1].contiguous(),
                                             row.reshape(1, -1)))
            put(parts)


def final_gain_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                             put) -> None:
    """8''. the final norm's gain with its bias (untied logits): L reads f * N(Z) + cf, that is
    sum_k L[:, k] (f_k N_k + cf_k), so f_k -> a f_k, cf_k -> a cf_k, column k of L / a."""
    for k in range(blocks["f"].shape[0]):
        parts = {"f": zero["f"].clone(), "cf": zero["cf"].clone(), "L": zero["L"].clone()}
        parts["f"][k] = blocks["f"][k]
        parts["cf"][k] = blocks["cf"][k]
        parts["L"][:, k] = ops.neg(blocks["L"][:, k])
        put(parts)


def parallel_output_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                  zero: dict, put) -> None:
    """17'''''. a parallel block's two output biases: Z -> Z + att_i(Z) + mlp_i(Z) adds bo_i and
    bu_i to the same sum, so bo_i + x, bu_i - x leave it unchanged. x = e_r, one per entry; with
    layernorm x = e_r - e_{d-1} (r < d - 1) only: x = 1 is the difference of two shifts along 1,
    which every layernorm ignores (left to the stream's shifts, where they apply)."""
    if f"bo_{i}" not in blocks or f"bu_{i}" not in blocks:
        return
    d = blocks[f"bo_{i}"].shape[0]
    layernorm = arch.norm == "layernorm"
    for r in range(d - 1 if layernorm else d):
        bo, bu = zero[f"bo_{i}"].clone(), zero[f"bu_{i}"].clone()
        bo[r] = 1
        bu[r] = ops.neg(torch.ones_like(bu[r]))
        if layernorm:
            bo[d - 1] = ops.neg(torch.ones_like(bo[d - 1]))
            bu[d - 1] = 1
        put({f"bo_{i}": bo, f"bu_{i}": bu})
