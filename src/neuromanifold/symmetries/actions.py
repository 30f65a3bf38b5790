"""The group actions of the symmetry families: how one group element moves named weight blocks.

Each action takes an architecture, named blocks (numpy float arrays, or object arrays of
Fractions for exact arithmetic) and a move (a dict: `layer`, `move`, and the group element,
as `geometry.moves` reports it in a witness), and returns the moved blocks. The registry
(`registry.action`) hands them out by move name; `fiber` applies a witness with them, so the
moves it names and the moves it applies come from one place.

  head permutation        head h of the result is head perm[h] of the input
  head mixing             V_h -> sum_g M[g, h] V_g, A_h -> sum_g M^{-1}[h, g] A_g (lightning),
                          refactored keeping K_h (and W_h, or O_h) fixed
  per-head rescaling      Q_h -> c Q_h, value input (V_h or W_h) -> value / c (lightning)
  per-head GL(a)          Q_h -> G Q_h, K_h -> G^{-T} K_h
  per-head GL(v)          W_h -> G W_h, O_h -> O_h G^{-1}
  MLP neuron permutation  neuron j of the result is neuron perm[j] of the input
  MLP neuron rescaling    row j of P times c_j, column j of U times c_j^-2 (square) or c_j^-1 (relu);
                          with a gated MLP, row j of P times c_j and column j of U over c_j (any
                          activation), and with `cg` (square or relu) row j of the gate G times
                          cg_j and column j of U over cg_j^2 (square) or cg_j (relu)
  QK-norm gain balance    qn_h -> c qn_h, kn_h -> kn_h / c per coordinate (one c per rotated pair)
  value bias shift        bv_g -> bv_g + e, bo -> bo - O_g e (softmax)
  query bias shift        bq_h -> bq_h + e (softmax, no rotary positions, no QK-norm)
With key/value groups (kv_heads, transformers' grouping: group g shares Q_g, bq_g, qn_g and V_g
or W_g, bv_g; head h keeps K_h, bk_h, kn_h and O_h) the moves act per `group` g: GL(a) on Q_g
and every K_h of the group, GL(v) on W_g and every O_h, the QK-norm balance on qn_g and every
kn_h, the query bias shift on bq_g, the value bias shift bo -> bo - sum_h O_h e (or n_g e
without value widths); the rescaling per `head` (K_h -> c K_h, O_h -> O_h / c) with value
widths, per group (every K_h times c, V_g over c) without; a head permutation moves K_h (and
O_h) within their groups; and
  gqa head mixing         O_h -> sum_k M[k, h] O_k, K_h -> sum_k M^{-1}[h, k] K_k within a group
                          (lightning, value widths)
  grouped key sums        K_h -> K_h + D_h, K_first -> K_first - sum D_h within a group
                          (lightning, unfactored values)
  final norm gain         f -> c f, column k of L over c_k (untied logits)
  rotary commutant        per-head GL(a) with G commuting with the rotations (rotary positions):
                          2 x 2 blocks [[x, -y], [y, x]] on each rotated pair, any invertible
                          block on the unrotated coordinates, nothing across; refused otherwise

Decoder blocks (docs/decoder_features.md) move with the blocks they belong to: a head's biases
bq, bk, bv and QK-norm gains qn, kn with its head (bq -> G bq, bk -> G^{-T} bk under GL(a);
bq -> c bq and bv -> bv / c under the rescaling; bv -> G bv under GL(v)), and an MLP neuron's
gate row G_i and biases bg, bp with the neuron (bp -> c bp under the rescaling).

The paper's model (`LayerWeights`, moves as `geometry.fibers` reports them):

  GL(a_i)                 Q_i -> C Q_i, K_i -> C^{-T} K_i
  GL(d_i)                 V_i -> C V_i, and C^{-1} on the inputs of layer i + 1 (Eq. 9)
  rescale                 (A_i, V_i) -> (s A_i, V_i / s) (lightning)
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.checks import bad_value
from .paper import act_between_layers, act_keys, act_rescale

# ------------------------------------------------------------------ exact-or-float linear algebra


def inverse(M: np.ndarray) -> np.ndarray:
    """Inverse of a square float or Fraction matrix (Gauss-Jordan; exact for Fractions)."""
    if M.dtype != object:
        return np.linalg.inv(M)
    n = M.shape[0]
    aug = np.concatenate([M.copy(), np.array([[Fraction(int(i == j)) for j in range(n)]
                                              for i in range(n)], dtype=object)], axis=1)
    for c in range(n):
        pivot = next((r for r in range(c, n) if aug[r, c] != 0), None)
        if pivot is None:
            raise ZeroDivisionError("singular matrix")
        aug[[c, pivot]] = aug[[pivot, c]]
        aug[c] = aug[c] / aug[c, c]
        for r in range(n):
            if r != c and aug[r, c] != 0:
                aug[r] = aug[r] - aug[r, c] * aug[c]
    return aug[:, n:]


def _left_inverse(M: np.ndarray) -> np.ndarray:
    """(M^T M)^{-1} M^T for M of full column rank."""
    return inverse(M.T.dot(M)).dot(M.T)


def _right_inverse(M: np.ndarray) -> np.ndarray:
    """M^T (M M^T)^{-1} for M of full row rank."""
    return M.T.dot(inverse(M.dot(M.T)))


def head_value(blocks: dict, i: int, h: int) -> np.ndarray:
    """V_{i,h}: the unfactored value matrix, or O_{i,h} W_{i,h}."""
    if f"V_{i}_{h}" in blocks:
        return blocks[f"V_{i}_{h}"]
    return blocks[f"O_{i}_{h}"].dot(blocks[f"W_{i}_{h}"])


def _parse(x):
    """A witness number: 'p/q' strings are exact Fractions, floats stay floats."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == object else x.astype(float)
    if isinstance(x, list):
        return np.array([_parse(v) for v in x], dtype=object if _is_exact(x) else float)
    return Fraction(x) if isinstance(x, (str, Fraction)) else float(x)


def _is_exact(x) -> bool:
    return all(_is_exact(v) for v in x) if isinstance(x, list) else isinstance(x, str)


# ------------------------------------------------------------------ one action per move


def group_heads(arch: Architecture, i: int, g: int) -> list[int]:
    """The query heads of key/value group g of layer i (head g itself without kv_heads)."""
    return [h for h in range(1, arch.head_counts[i - 1] + 1) if arch.group_of(i, h) == g]


def _group(arch: Architecture, move: dict) -> tuple[list[int], int]:
    """(heads, key/value group) a per-head move acts on: `head` h of a network without
    kv_heads (its own group), or every head of `group` g with them."""
    i = move["layer"]
    if arch.kv_heads is None:
        h = move.get("head", move.get("group"))
        return [h], h
    return group_heads(arch, i, move["group"]), move["group"]


def permute_heads(arch: Architecture, out: dict, move: dict) -> dict:
    i, perm, old = move["layer"], move["perm"], dict(out)
    names = ("Q", "K", "V", "W", "O", "bq", "bk", "bv", "qn", "kn")
    if arch.kv_heads is not None:  # the per-head blocks only, each within its key/value group
        names = ("K", "O", "bk", "kn")
        if any(arch.group_of(i, h) != arch.group_of(i, p) for h, p in enumerate(perm, start=1)):
            raise bad_value("witness", f"a head permutation within the key/value groups of layer "
                            f"{i}", perm, "Use a witness returned by same_block_function.")
    for h in range(1, arch.head_counts[i - 1] + 1):
        for name in names:
            if f"{name}_{i}_{h}" in old:
                out[f"{name}_{i}_{h}"] = old[f"{name}_{i}_{perm[h - 1]}"].copy()
    return out


def mix_heads(arch: Architecture, out: dict, move: dict) -> dict:
    i, H = move["layer"], arch.head_counts[move["layer"] - 1]
    M = _parse(move["M"])
    Minv = inverse(M)
    A = [out[f"Q_{i}_{g}"].T.dot(out[f"K_{i}_{g}"]) for g in range(1, H + 1)]
    V = [head_value(out, i, g) for g in range(1, H + 1)]
    for h in range(1, H + 1):
        new_A = sum(Minv[h - 1, g] * A[g] for g in range(H))
        new_V = sum(M[g, h - 1] * V[g] for g in range(H))
        out[f"Q_{i}_{h}"] = new_A.dot(_left_inverse(out[f"K_{i}_{h}"])).T
        if f"V_{i}_{h}" in out:
            out[f"V_{i}_{h}"] = new_V
        elif out[f"W_{i}_{h}"].shape[0] >= out[f"W_{i}_{h}"].shape[1]:
            out[f"O_{i}_{h}"] = new_V.dot(_left_inverse(out[f"W_{i}_{h}"]))
        else:
            out[f"W_{i}_{h}"] = _right_inverse(out[f"O_{i}_{h}"]).dot(new_V)
    return out


def _scale(out: dict, name: str, factor) -> None:
    """Multiply block `name` by `factor` where the network has it (a bias, a gain)."""
    if name in out:
        out[name] = out[name] * factor


def rescale_head(arch: Architecture, out: dict, move: dict) -> dict:
    i, c = move["layer"], _parse(move["c"])
    if arch.kv_heads is not None and arch.values is not None:  # K_h times c, O_h over c
        h = move["head"]
        out[f"K_{i}_{h}"] = out[f"K_{i}_{h}"] * c
        _scale(out, f"bk_{i}_{h}", c)
        out[f"O_{i}_{h}"] = out[f"O_{i}_{h}"] / c
        return out
    heads, g = _group(arch, move)
    scaled = [(f"K_{i}_{h}", f"bk_{i}_{h}") for h in heads] if arch.kv_heads is not None \
        else [(f"Q_{i}_{g}", f"bq_{i}_{g}")]
    value_in = f"V_{i}_{g}" if f"V_{i}_{g}" in out else f"W_{i}_{g}"
    for name, bias in scaled:
        out[name] = out[name] * c
        _scale(out, bias, c)
    out[value_in] = out[value_in] / c
    _scale(out, f"bv_{i}_{g}", 1 / c)
    return out


def key_gl(arch: Architecture, out: dict, move: dict) -> dict:
    (i, G), (heads, g) = (move["layer"], _parse(move["G"])), _group(arch, move)
    G_inv_T = inverse(G).T
    out[f"Q_{i}_{g}"] = G.dot(out[f"Q_{i}_{g}"])
    if f"bq_{i}_{g}" in out:
        out[f"bq_{i}_{g}"] = G.dot(out[f"bq_{i}_{g}"])
    for h in heads:
        out[f"K_{i}_{h}"] = G_inv_T.dot(out[f"K_{i}_{h}"])
        if f"bk_{i}_{h}" in out:
            out[f"bk_{i}_{h}"] = G_inv_T.dot(out[f"bk_{i}_{h}"])
    return out


def mix_group_heads(arch: Architecture, out: dict, move: dict) -> dict:
    """gqa head mixing (lightning, kv_heads, value widths): within group g the heads sum to
    sum_h O_h X K_h (X from Q_g, W_g, Z), so O_h -> sum_k M[k, h] O_k and K_h (with bk_h) ->
    sum_k M^{-1}[h, k] K_k for an invertible M."""
    i, heads = move["layer"], group_heads(arch, move["layer"], move["group"])
    M = _parse(move["M"])
    Minv, old = inverse(M), dict(out)
    for a, h in enumerate(heads):
        out[f"O_{i}_{h}"] = sum(M[b, a] * old[f"O_{i}_{k}"] for b, k in enumerate(heads))
        for kind in ("K", "bk"):
            if f"{kind}_{i}_{h}" in old:
                out[f"{kind}_{i}_{h}"] = sum(Minv[a, b] * old[f"{kind}_{i}_{k}"]
                                             for b, k in enumerate(heads))
    return out


def shift_key_sums(arch: Architecture, out: dict, move: dict) -> dict:
    """Grouped key sums (lightning, kv_heads, unfactored values): K_h -> K_h + D_h for the heads
    of group g after its first, K_first -> K_first - sum D_h (the key biases with them, `Db`):
    only the group's sum of keys enters its linear scores beside its one value map V_g."""
    i, heads = move["layer"], group_heads(arch, move["layer"], move["group"])
    for kind, key in (("K", "D"), ("bk", "Db")):
        if key not in move:
            continue
        deltas = [_parse(d) for d in move[key]]
        if len(deltas) != len(heads) - 1:
            raise bad_value("witness", f"one {key} per head of group {move['group']} after its "
                            f"first ({len(heads) - 1})", len(deltas),
                            "Use a witness returned by same_block_function.")
        for h, d in zip(heads[1:], deltas):
            out[f"{kind}_{i}_{h}"] = out[f"{kind}_{i}_{h}"] + d.reshape(out[f"{kind}_{i}_{h}"].shape)
            out[f"{kind}_{i}_{heads[0]}"] = out[f"{kind}_{i}_{heads[0]}"] - d.reshape(
                out[f"{kind}_{i}_{heads[0]}"].shape)
    return out


def shift_query_bias(arch: Architecture, out: dict, move: dict) -> dict:
    """Softmax query bias: bq_h -> bq_h + e (bq^T k_i does not depend on the aggregated token,
    which the softmax normalises over); bq_g of `group` g with kv_heads."""
    i, h, e = move["layer"], _group(arch, move)[1], _parse(move["e"])
    out[f"bq_{i}_{h}"] = out[f"bq_{i}_{h}"] + e.reshape(-1, 1)
    return out


def commutes_with_rotations(arch: Architecture, i: int, G: np.ndarray) -> bool:
    """True when G commutes with the rotations of layer i's rotated pairs (`rotary commutant`):
    a 2 x 2 block [[x, -y], [y, x]] on each pair, nothing between a pair and another coordinate
    (exact for Fractions, to 1e-9 relative for floats)."""
    R = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    tol = 0 if G.dtype == object else 1e-9 * max(1.0, float(np.abs(G).max()))
    off = np.ones(G.shape, dtype=bool)
    for f in range(R):
        off[2 * f: 2 * f + 2, 2 * f: 2 * f + 2] = False
        x, y = G[2 * f, 2 * f], G[2 * f + 1, 2 * f]
        if abs(G[2 * f + 1, 2 * f + 1] - x) > tol or abs(G[2 * f, 2 * f + 1] + y) > tol:
            return False
    off[2 * R:, 2 * R:] = False
    return all(abs(v) <= tol for v in G[off])


def rotary_commutant(arch: Architecture, out: dict, move: dict) -> dict:
    i, G = move["layer"], _parse(move["G"])
    if not commutes_with_rotations(arch, i, G):
        raise bad_value("witness", f"a rotary commutant move whose G commutes with the rotations "
                        f"of layer {i}'s rotated pairs", "another G",
                        "Use a witness returned by same_block_function.")
    return key_gl(arch, out, move)


def value_gl(arch: Architecture, out: dict, move: dict) -> dict:
    (i, G), (heads, h) = (move["layer"], _parse(move["G"])), _group(arch, move)
    out[f"W_{i}_{h}"] = G.dot(out[f"W_{i}_{h}"])
    G_inv = inverse(G)
    for k in heads:            # O_h of every head of the group with kv_heads
        out[f"O_{i}_{k}"] = out[f"O_{i}_{k}"].dot(G_inv)
    if f"bv_{i}_{h}" in out:
        out[f"bv_{i}_{h}"] = G.dot(out[f"bv_{i}_{h}"])
    return out


def permute_neurons(arch: Architecture, out: dict, move: dict) -> dict:
    i, perm = move["layer"], [j - 1 for j in move["perm"]]
    for name in ("P", "G", "bg", "bp"):
        if f"{name}_{i}" in out:
            out[f"{name}_{i}"] = out[f"{name}_{i}"][perm]
    out[f"U_{i}"] = out[f"U_{i}"][:, perm]
    return out


def rescale_neurons(arch: Architecture, out: dict, move: dict) -> dict:
    i, c = move["layer"], _parse(move["c"])
    # s(c x) = c^k s(x) for square (k = 2) and relu (k = 1, c > 0); a gated neuron
    # s(g) (c p) is linear in p
    power = 1 if arch.mlp_kind == "gated" else 2 if arch.activation == "square" else 1
    out[f"P_{i}"] = out[f"P_{i}"] * c[:, None]
    _scale(out, f"bp_{i}", c[:, None])
    out[f"U_{i}"] = out[f"U_{i}"] / (c[None, :] ** power)
    if "cg" in move:  # a gated neuron's gate row: s(c x) = c^k s(x), square (k = 2) or relu (1)
        if arch.mlp_kind != "gated" or arch.activation not in ("square", "relu"):
            raise bad_value("witness", "a gate rescaling (cg) only in gated square or relu MLPs",
                            f"mlp_kind {arch.mlp_kind}, activation {arch.activation}",
                            "Use a witness returned by same_block_function.")
        cg = _parse(move["cg"])
        out[f"G_{i}"] = out[f"G_{i}"] * cg[:, None]
        _scale(out, f"bg_{i}", cg[:, None])
        out[f"U_{i}"] = out[f"U_{i}"] / (cg[None, :] ** (2 if arch.activation == "square" else 1))
    return out


def paper_keys(arch: Architecture, weights, move: dict):
    return act_keys(weights, move["layer"], torch.tensor(move["matrix"], dtype=torch.float64))


def paper_between_layers(arch: Architecture, weights, move: dict):
    return act_between_layers(weights, move["layer"],
                              torch.tensor(move["matrix"], dtype=torch.float64))


def paper_rescale(arch: Architecture, weights, move: dict):
    return act_rescale(weights, move["layer"], move["scale"])


def balance_qk_gains(arch: Architecture, out: dict, move: dict) -> dict:
    """QK-norm gain balance: qn_h -> c qn_h, kn_h -> kn_h / c per coordinate (one c on both
    coordinates of a rotated pair, which the rotation mixes); refused otherwise. With kv_heads
    qn_g of `group` g and kn_h of every head of the group."""
    (i, c), (heads, h) = (move["layer"], _parse(move["c"])), _group(arch, move)
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    if any(c[2 * f] != c[2 * f + 1] for f in range(pairs)):
        raise bad_value("witness", f"a QK-norm gain balance with one factor per rotated pair of "
                        f"layer {i}", list(c), "Use a witness returned by same_block_function.")
    out[f"qn_{i}_{h}"] = out[f"qn_{i}_{h}"] * c[:, None]
    for k in heads:
        out[f"kn_{i}_{k}"] = out[f"kn_{i}_{k}"] / c[:, None]
    return out


def shift_value_bias(arch: Architecture, out: dict, move: dict) -> dict:
    """Value bias beside the output bias (softmax): bv_g -> bv_g + e and bo -> bo - sum_h O_h e
    over the heads h reading group g (n_g e without value widths): each softmax column sums to
    one, so a head passes its value bias on unchanged."""
    (i, e), (heads, g) = (move["layer"], _parse(move["e"])[:, None]), _group(arch, move)
    out[f"bv_{i}_{g}"] = out[f"bv_{i}_{g}"] + e
    through = sum(out[f"O_{i}_{h}"].dot(e) for h in heads) if f"O_{i}_{g}" in out else len(heads) * e
    out[f"bo_{i}"] = out[f"bo_{i}"] - through
    return out


def scale_final_gain(arch: Architecture, out: dict, move: dict) -> dict:
    """Final norm gain: f -> c f per coordinate, and column k of the untied logits L over c_k."""
    c = _parse(move["c"])
    out["f"] = out["f"] * c[:, None]
    out["L"] = out["L"] / c[None, :]
    return out
