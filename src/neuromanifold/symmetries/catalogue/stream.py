"""Symmetry families of the stream between layers and at its ends: between-layer GL(d), unseen
directions, one-token basis changes, the stream's basis, rotations and shifts with embeddings,
and layernorm shifts and norm rotations at the ends (families 5, 7, 13, 10', 12').
"""

from __future__ import annotations

import torch

from ...core.architecture import Architecture
from .base import (
    TangentOps,
    bias_of,
    consumers_of,
    head_writers,
    layer_stages,
    layer_writers,
    mlp_readers,
    reader_bias,
    stage_gain,
    value_names,
)


def between_layer_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """5. between-layer GL(d) (no residual, no norm)."""
    _between_layers(arch, blocks, i, ops, put)


def unseen_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """7. unseen directions (no residual)."""
    _unseen(arch, blocks, i, ops, put)


def basis_change_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict, put) -> None:
    """13. one-token basis changes (softmax, t = 1, residual, no norm): the whole network."""
    _basis_changes(arch, blocks, ops, put)


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
        w_name, o_name = value_names(blocks, j, h)
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


def stream_blocks(arch: Architecture, blocks: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """A residual stream's writers (T and every layer's writers, through their rows) and its
    readers with the norm gain in front of each ((name, gain): the heads' query, key and value
    inputs behind g_i, the MLP's gate and values behind n_i), biases and groups included; a
    reader's bias is added after it reads, so no basis change of the stream moves it."""
    writers, readers = (["T"] if "T" in blocks else []), []
    for i in range(1, arch.n_layers + 1):
        readers += [(name, f"g_{i}") for name in consumers_of(arch, blocks, i)]
        if arch.mlp_widths[i - 1] > 0:
            readers += [(name, _mlp_gain(arch, i)) for name in mlp_readers(arch, i)]
        writers += layer_writers(arch, blocks, i)
    return writers, readers


def _mlp_gain(arch: Architecture, i: int) -> str:
    """The norm gain in front of MLP i's readers: n_i, or g_i with one shared norm."""
    return f"g_{i}" if arch.shared_norm else f"n_{i}"


def _between_layers(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """GL(d_i) after attention i (before the MLP or the next layer) and after MLP i."""
    for makers, readers in layer_stages(arch, blocks, i):
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
    for makers, readers in layer_stages(arch, blocks, i):
        stacked = torch.cat([blocks[name] for name in readers])
        side = torch.cat([blocks[name] for name in makers], dim=1)
        if arch.norm == "none":
            pairs = ((makers, stacked, True), (readers, side.T.contiguous(), False))
        else:
            g = stage_gain(blocks, readers, i)
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
    first_readers = consumers_of(arch, blocks, 1)
    last_writers = ([f"U_{l}"] + bias_of(blocks, f"bu_{l}") if arch.mlp_widths[l - 1] > 0
                    else head_writers(arch, blocks, l))    # no residual: the last stage's
    inputs = ["T"] if "T" in blocks else []
    d0, dl = arch.widths[0], arch.widths[-1]
    if arch.tied and not arch.residual:
        for r in range(d0):
            for s in range(d0):
                put(_tied_change(blocks, zero, first_readers, last_writers, r, s, ops))
        return
    if arch.residual:
        writers, readers = stream_blocks(arch, blocks)
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
    writers, readers = stream_blocks(arch, blocks)
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
    writers, _ = stream_blocks(arch, blocks)
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
    return ([f"U_{l}"] + bias_of(blocks, f"bu_{l}") if arch.mlp_widths[l - 1] > 0
            else head_writers(arch, blocks, l))


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
        for name in consumers_of(arch, blocks, 1):
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


def biased_unseen_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """7'. unseen directions with the readers' biases (no residual, no norm): at a boundary the
    stream is M h + c for every token, c the constant bias written to every token (bo_i before
    an MLP, bu_i after it) and M the other producers side by side (value outputs, value biases:
    mixed by the scores, not constant). A reader R z + b_R with R -> R + x n^T, n^T M = 0, reads
    R z + x (n^T c): its bias b_R -> b_R - x (n^T c) takes the constant back. So n ranges over
    the left kernel of M alone (family 7 takes that of [M c]): one tangent per reader row and
    kernel vector, where every reader has a bias (used only when M has full rank, as in 7)."""
    for makers, readers in layer_stages(arch, blocks, i):
        constants = [name for name in makers if name in (f"bo_{i}", f"bu_{i}")]
        others = [name for name in makers if name not in constants]
        biases = [reader_bias(blocks, name) for name in readers]
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
