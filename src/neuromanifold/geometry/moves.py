"""Named moves of networks beyond the paper's model: do two weight sets define the same function,
and which moves relate them? (The paper's model has its group in `fibers`.)

`same_block_function` compares the outputs of two such networks at random inputs (float64,
relative tolerance) and, when they agree, searches a witness: a list of named moves that maps
the first weights onto the second (docs/blocks.md, "Fibers"). The moves, and the group action
each is applied with, are the registry's (`symmetries.actions`, `symmetries.registry.action`).

The search runs layer by layer in float64; the moves' numbers are then rounded to nearby
fractions and, when both weight sets have rational entries and the rounded witness maps the
first onto the second entry by entry in exact rational arithmetic, the witness is reported as
applied back exactly (a proof that the two networks define the same function). Between-layer
GL(d) of networks without a residual is not searched.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from ..core.architecture import Architecture, check_architecture
from ..core.blocks import block_forward, check_block_weights
from ..core.checks import bad_value, check_choice, check_int, check_positive_float
from ..core.finite import largest_entry, require_finite
from ..core.parameters import integral_tensors
from ..core.seeds import seeded_generator
from ..core.tokens import symbol_inputs
from ..symmetries.actions import commutes_with_rotations, group_heads
from ..symmetries.actions import head_value as _value
from ..symmetries.registry import action, families_for
from .fibers import FiberResult, exact_identity

_DENOMINATOR = 10 ** 6
# The keys of a move that hold its group element's numbers (rounded to fractions to apply exactly).
_NUMBERS = ("c", "cg", "G", "M", "e", "D", "Db")


def _as_numbers(x, exact: bool):
    """Witness numbers for JSON: exact fractions as 'p/q' strings, else floats."""
    if isinstance(x, np.ndarray) and x.ndim > 0:
        return [_as_numbers(v, exact) for v in x]
    if exact:
        return str(Fraction(float(x)).limit_denominator(_DENOMINATOR))
    return float(x)


# ------------------------------------------------------------------ applying moves

def apply_block_witness(arch: Architecture, blocks: dict[str, np.ndarray], witness: list
                        ) -> dict[str, np.ndarray]:
    """Apply the moves of `witness` to named blocks (numpy float, or object arrays of Fractions
    for exact arithmetic), in order, each by the action the registry holds for it
    (`symmetries.registry.action`); returns new blocks."""
    out = {k: v.copy() for k, v in blocks.items()}
    for move in witness:
        try:
            act = action(move["move"])
        except KeyError:
            raise bad_value("witness", "moves named as in docs/blocks.md", move["move"],
                            "Use a witness returned by same_block_function.") from None
        out = act(arch, out, move)
    return out


# ------------------------------------------------------------------ finding a witness

def _rel(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-300)
    return float(np.abs(a - b).max(initial=0.0) / scale)


def _with_bias(B: dict, block: str, bias: str) -> np.ndarray:
    """The block with its bias as one more column ([Q | bq]), or the block alone without one:
    the moves act on both alike (`symmetries.actions`)."""
    return np.concatenate([B[block], B[bias]], axis=1) if bias in B else B[block]


def _value_steps(arch: Architecture, i: int, g: int, W2: dict, tol: float, shifts: bool, now,
                 step) -> None:
    """GL(v) of key/value group g of layer i (head g without groups), then its value bias shift
    (softmax with biases); `now()` the current blocks, `step(move)` applies a move."""
    which = "head" if arch.kv_heads is None else "group"
    if f"W_{i}_{g}" in now():
        bias = None if shifts else f"bv_{i}_{g}"
        G = _with_bias(W2, f"W_{i}_{g}", bias) @ np.linalg.pinv(_with_bias(now(), f"W_{i}_{g}", bias))
        if _rel(G, np.eye(G.shape[0])) > tol:
            step({"layer": i, which: g, "move": "per-head GL(v)", "G": G})
    if shifts:
        e = (W2[f"bv_{i}_{g}"] - now()[f"bv_{i}_{g}"]).ravel()
        if np.abs(e).max() > tol * max(1.0, np.abs(W2[f"bv_{i}_{g}"]).max()):
            step({"layer": i, "group": g, "move": "value bias shift", "e": e})


def _grouped_layer_witness(arch: Architecture, i: int, W1: dict, W2: dict, tol: float,
                           shifts: bool, query_shifts: bool) -> list | None:
    """Moves mapping layer i of W1 onto W2 with key/value groups (transformers' grouping: Q_g and
    V_g or W_g per group, K_h and O_h per head), group by group: the rescaling (lightning,
    unfactored: from V_g), GL(a) (or the rotary commutant) fixed by the group's Q_g and its query
    bias shift (softmax), GL(v) fixed by W_g and the value bias shift (softmax); then the heads:
    the gqa head mixing of the pairs (O_h, K_h) (lightning, value widths; reported as per-head
    rescalings where it is diagonal), the grouped key sums (lightning,
    unfactored), or a permutation of the heads within the group (softmax). None where these do
    not map it (no groups are permuted)."""
    if arch.qk_norm:
        return None
    lightning, factored = arch.attention == "lightning", arch.values is not None
    rotated = arch.rotated_pairs[i - 1] > 0 and arch.tokens > 1
    moves: list[dict] = []
    current = W1

    def step(move: dict) -> None:
        nonlocal current
        moves.append(move)
        current = apply_block_witness(arch, current, [move])

    def key(B, h):
        return _with_bias(B, f"K_{i}_{h}", f"bk_{i}_{h}")

    def query(B, g):
        return B[f"Q_{i}_{g}"] if query_shifts else _with_bias(B, f"Q_{i}_{g}", f"bq_{i}_{g}")

    for g in range(1, arch.kv_counts[i - 1] + 1):
        heads = group_heads(arch, i, g)
        if lightning and not factored:       # only the rescaling moves V_g (with bv_g)
            V1, V2 = (_with_bias(B, f"V_{i}_{g}", f"bv_{i}_{g}") for B in (current, W2))
            c = float(np.sum(V1 * V1) / np.sum(V1 * V2))
            if abs(c - 1.0) > tol:
                step({"layer": i, "group": g, "move": "per-head rescaling", "c": c})
        G = query(W2, g) @ np.linalg.pinv(query(current, g))
        if _rel(G, np.eye(G.shape[0])) > tol:
            if rotated and not commutes_with_rotations(arch, i, G):
                return None
            step({"layer": i, "group": g, "G": G,
                  "move": "rotary commutant" if rotated else "per-head GL(a)"})
        if query_shifts:
            e = (W2[f"bq_{i}_{g}"] - current[f"bq_{i}_{g}"]).ravel()
            if np.abs(e).max() > tol * max(1.0, np.abs(W2[f"bq_{i}_{g}"]).max()):
                step({"layer": i, "group": g, "move": "query bias shift", "e": e})
        _value_steps(arch, i, g, W2, tol, shifts, lambda: current, step)
        if lightning and factored:
            found = _head_mix(i, g, heads, current, W2, tol)
            if found is None:
                return None
            for move in found:
                step(move)
        elif lightning:
            D = [W2[f"K_{i}_{h}"] - current[f"K_{i}_{h}"] for h in heads[1:]]
            Db = [W2[f"bk_{i}_{h}"] - current[f"bk_{i}_{h}"] for h in heads[1:]] \
                if arch.bias else []
            if any(_rel(current[f"K_{i}_{h}"] + d, current[f"K_{i}_{h}"]) > tol
                   for h, d in zip(heads[1:], D)) or any(np.abs(d).max() > tol for d in Db):
                move = {"layer": i, "group": g, "move": "grouped key sums", "D": np.array(D)}
                if arch.bias:
                    move["Db"] = np.array(Db)
                step(move)
        else:
            perm, old = [], dict(current)

            def unit(B, h):
                return np.concatenate([key(B, h).ravel()]
                                      + ([B[f"O_{i}_{h}"].ravel()] if factored else []))
            for h in heads:
                match = [p for p in heads if p not in perm and _rel(unit(old, p), unit(W2, h)) < tol]
                if not match:
                    return None
                perm.append(match[0])
            if perm != heads:
                full = list(range(1, arch.head_counts[i - 1] + 1))
                for h, p in zip(heads, perm):
                    full[h - 1] = p
                step({"layer": i, "move": "head permutation", "perm": full})
    mlp = _mlp_moves(arch, i, current, W2, tol)
    return None if mlp is None else moves + mlp


def _head_mix(i: int, g: int, heads: list[int], W1: dict, W2: dict, tol: float) -> list | None:
    """The moves of GL(n_g) on the pairs (O_h, K_h) of group g (lightning, value widths) mapping
    W1's O_h onto W2's: O2 = O1 M on the heads' O_h side by side; per-head rescalings where M is
    diagonal, else the gqa head mixing; None where no invertible M maps them."""
    O1 = np.stack([W1[f"O_{i}_{h}"].ravel() for h in heads], axis=1)
    O2 = np.stack([W2[f"O_{i}_{h}"].ravel() for h in heads], axis=1)
    M = np.linalg.lstsq(O1, O2, rcond=None)[0]
    if _rel(O1 @ M, O2) > tol or abs(np.linalg.det(M)) < 1e-12:
        return None
    if _rel(M, np.eye(len(heads))) <= tol:
        return []
    if _rel(M, np.diag(np.diag(M))) <= tol:
        return [{"layer": i, "head": h, "move": "per-head rescaling", "c": 1.0 / M[k, k]}
                for k, h in enumerate(heads) if abs(M[k, k] - 1.0) > tol]
    return [{"layer": i, "group": g, "move": "gqa head mixing", "M": M}]


def _gain_balance(arch: Architecture, i: int, h: int, W1: dict, W2: dict, tol: float
                  ) -> np.ndarray | None:
    """The factors c with qn2 = c qn1 and kn2 = kn1 / c for head h of layer i (one per rotated
    pair), or None where there are none."""
    qn1, qn2 = W1[f"qn_{i}_{h}"].ravel(), W2[f"qn_{i}_{h}"].ravel()
    kn1, kn2 = W1[f"kn_{i}_{h}"].ravel(), W2[f"kn_{i}_{h}"].ravel()
    if np.any(qn1 == 0) or np.any(kn2 == 0):
        return None
    c = qn2 / qn1
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    if _rel(kn1 / c, kn2) > tol or any(abs(c[2 * f] - c[2 * f + 1]) > tol * abs(c[2 * f])
                                       for f in range(pairs)):
        return None
    for f in range(pairs):  # one factor per pair, exactly
        c[2 * f + 1] = c[2 * f]
    return c


def _layer_witness(arch: Architecture, i: int, W1: dict, W2: dict, tol: float) -> list | None:
    """Moves mapping layer i of W1 onto W2 (float search), or None."""
    H = arch.head_counts[i - 1]
    lightning = arch.attention == "lightning"
    rotated = arch.rotated_pairs[i - 1] > 0 and arch.tokens > 1
    moves: list[dict] = []

    def query(B, h):
        return _with_bias(B, f"Q_{i}_{h}", f"bq_{i}_{h}")

    def value(B, h):
        V = _value(B, i, h)
        if f"bv_{i}_{h}" in B:  # the bias through the output projection, as the head adds it
            bias = B[f"bv_{i}_{h}"] if f"O_{i}_{h}" not in B else B[f"O_{i}_{h}"] @ B[f"bv_{i}_{h}"]
            V = np.concatenate([V, bias], axis=1)
        return V

    # softmax with biases: a head's value bias may move into the output bias (`value bias
    # shift`), and its query bias by any vector where nothing acts on q after it (`query bias
    # shift`), so heads are matched without them
    shifts = arch.attention == "softmax" and arch.bias
    query_shifts = shifts and arch.positions != "rope" and not arch.qk_norm
    if arch.kv_heads is not None:
        return _grouped_layer_witness(arch, i, W1, W2, tol, shifts, query_shifts)

    def invariant(B, h):
        if arch.qk_norm:  # only the gains' products qn * kn are invariant (`QK-norm gain balance`)
            A = np.concatenate([query(B, h).ravel(), _with_bias(B, f"K_{i}_{h}", f"bk_{i}_{h}").ravel(),
                                (B[f"qn_{i}_{h}"] * B[f"kn_{i}_{h}"]).ravel()])[None, :]
        else:
            A = (B[f"Q_{i}_{h}"] if query_shifts else query(B, h)).T @ _with_bias(
                B, f"K_{i}_{h}", f"bk_{i}_{h}")
        V = _value(B, i, h) if shifts else value(B, h)
        return np.kron(V, A) if lightning else np.concatenate([A.ravel(), V.ravel()])

    T1 = [invariant(W1, h) for h in range(1, H + 1)]
    T2 = [invariant(W2, h) for h in range(1, H + 1)]
    perm = []
    for h in range(H):
        match = [g for g in range(H) if g not in perm and _rel(T1[g], T2[h]) < tol]
        if not match:
            perm = None
            break
        perm.append(match[0])
    if perm is not None:
        if perm != list(range(H)):
            moves.append({"layer": i, "move": "head permutation", "perm": [g + 1 for g in perm]})
    elif lightning and H > 1 and arch.keys[i - 1] >= arch.widths[i - 1] and not arch.bias \
            and not rotated and not arch.qk_norm:
        V1 = np.stack([_value(W1, i, h).ravel() for h in range(1, H + 1)], axis=1)
        V2 = np.stack([_value(W2, i, h).ravel() for h in range(1, H + 1)], axis=1)
        M = np.linalg.lstsq(V1, V2, rcond=None)[0]
        if _rel(V1 @ M, V2) > tol or abs(np.linalg.det(M)) < 1e-12:
            return None
        moves.append({"layer": i, "move": "head mixing", "M": M})
    else:
        return None
    current = apply_block_witness(arch, W1, moves)

    def step(move: dict) -> None:
        nonlocal current
        moves.append(move)
        current = apply_block_witness(arch, current, [move])

    for h in range(1, H + 1):
        if arch.qk_norm:
            found = _gain_balance(arch, i, h, current, W2, tol)
            if found is None:
                return None
            if _rel(found, np.ones_like(found)) > tol:
                step({"layer": i, "head": h, "move": "QK-norm gain balance", "c": found})
        else:
            Q1, Q2 = query(current, h), query(W2, h)
            A1 = Q1.T @ _with_bias(current, f"K_{i}_{h}", f"bk_{i}_{h}")
            A2 = Q2.T @ _with_bias(W2, f"K_{i}_{h}", f"bk_{i}_{h}")
            c = float(np.sum(A1 * A2) / np.sum(A1 * A1))
            if lightning and abs(c - 1.0) > tol:
                step({"layer": i, "head": h, "move": "per-head rescaling", "c": c})
                Q1 = query(current, h)
            if query_shifts:  # the query bias is free: G from the queries alone
                Q1, Q2 = current[f"Q_{i}_{h}"], W2[f"Q_{i}_{h}"]
            G = Q2 @ np.linalg.pinv(Q1)
            if _rel(G, np.eye(G.shape[0])) > tol:
                # with rotary positions only the commutant of the rotations is a symmetry
                if rotated and not commutes_with_rotations(arch, i, G):
                    return None
                step({"layer": i, "head": h, "G": G,
                      "move": "rotary commutant" if rotated else "per-head GL(a)"})
            if query_shifts:
                e = (W2[f"bq_{i}_{h}"] - current[f"bq_{i}_{h}"]).ravel()
                if _rel(current[f"bq_{i}_{h}"].ravel() + e, current[f"bq_{i}_{h}"].ravel()) > tol:
                    step({"layer": i, "head": h, "move": "query bias shift", "e": e})
        _value_steps(arch, i, h, W2, tol, shifts, lambda: current, step)
    mlp = _mlp_moves(arch, i, current, W2, tol)
    return None if mlp is None else moves + mlp


def _mlp_moves(arch: Architecture, i: int, current: dict, W2: dict, tol: float) -> list | None:
    """The MLP neuron permutation and rescaling mapping the MLP after layer i of `current` onto
    W2 (none without an MLP, or with an activation that has no rescaling and no gate), or None.
    A gated neuron's P row takes any factor; its gate row one only with a square or relu
    activation (`cg`), and must match as it is otherwise."""
    gated = arch.mlp_kind == "gated"
    if not (arch.mlp_widths[i - 1] > 0 and (gated or arch.activation in ("square", "relu"))):
        return []
    moves: list[dict] = []

    def units(M):
        return M / np.linalg.norm(M, axis=1, keepdims=True)

    P1, P2 = _with_bias(current, f"P_{i}", f"bp_{i}"), _with_bias(W2, f"P_{i}", f"bp_{i}")
    G1, G2 = ((_with_bias(current, f"G_{i}", f"bg_{i}"), _with_bias(W2, f"G_{i}", f"bg_{i}"))
              if gated else (None, None))
    rescaled = arch.activation in ("square", "relu")   # s(c x) = c^k s(x)
    signs = (1.0, -1.0) if arch.activation == "square" else (1.0,)
    p_signs = (1.0, -1.0) if gated else signs
    neuron_perm, scales, gate_scales = [], [], []
    for j in range(P2.shape[0]):
        found = [(k, s, sg) for k in range(P1.shape[0]) if k not in neuron_perm
                 for s in p_signs if _rel(s * units(P1)[k], units(P2)[j]) < tol
                 for sg in ((signs if rescaled else (1.0,)) if gated else (1.0,))
                 if not gated or (_rel(sg * units(G1)[k], units(G2)[j]) < tol if rescaled
                                  else _rel(G1[k], G2[j]) < tol)]
        if not found:
            return None
        k, s, sg = found[0]
        neuron_perm.append(k)
        scales.append(s * np.linalg.norm(P2[j]) / np.linalg.norm(P1[k]))
        if gated:
            gate_scales.append(sg * np.linalg.norm(G2[j]) / np.linalg.norm(G1[k]))
    if neuron_perm != list(range(P2.shape[0])):
        moves.append({"layer": i, "move": "MLP neuron permutation",
                      "perm": [k + 1 for k in neuron_perm]})
    move = {"layer": i, "move": "MLP neuron rescaling", "c": np.array(scales)}
    if any(abs(s - 1.0) > tol for s in gate_scales):
        move["cg"] = np.array(gate_scales)
    if len(move) > 3 or any(abs(s - 1.0) > tol for s in scales):
        moves.append(move)
    return moves


def unsearched_options(arch: Architecture) -> list[str]:
    """The options of `arch` whose moves the witness search does not model (grouped key/value
    heads behind a QK-norm, QK-norm gains shared by the heads): for them `find_block_witness`
    searches nothing and says so."""
    return [name for name, on in (("grouped key/value heads with QK-norm",
                                   arch.kv_counts != arch.head_counts and arch.qk_norm),
                                  ("QK-norm gains shared by the heads", arch.qk_norm_shared)) if on]


def unsearched_families(arch: Architecture) -> list[str]:
    """The registry's families acting on `arch` that the search has no move for (the stream's
    basis at the embedding and logits, bias shifts, between-layer GL, ...): a witness of other
    moves may not exist even where the networks are one orbit of the whole group."""
    return [f.name for f in families_for(arch) if f.move is None]


def find_block_witness(arch: Architecture, W1: dict[str, np.ndarray], W2: dict[str, np.ndarray], *,
                       tolerance: float = 1e-7) -> tuple[list | None, float | None]:
    """(witness, blockwise relative residual of applying it in float64), or (None, None), also
    where the search does not model the network (`unsearched_options`)."""
    if unsearched_options(arch):
        return None, None
    W1 = {k: np.asarray(v, dtype=float) for k, v in W1.items()}
    W2 = {k: np.asarray(v, dtype=float) for k, v in W2.items()}
    moves = []
    for i in range(1, arch.n_layers + 1):
        layer = _layer_witness(arch, i, W1, W2, tolerance)
        if layer is None:
            return None, None
        moves += layer
    if arch.final_norm and arch.vocab is not None and not arch.tied:
        f1, f2 = W1["f"].ravel(), W2["f"].ravel()
        if np.any(f1 == 0):
            return None, None
        if _rel(f2 / f1, np.ones_like(f1)) > tolerance:
            moves.append({"move": "final norm gain", "c": f2 / f1})
    floats = [{k: (_as_numbers(np.asarray(v, dtype=float), False) if k in _NUMBERS else v)
               for k, v in m.items()} for m in moves]
    mapped = apply_block_witness(arch, W1, floats)
    residual = max((_rel(mapped[k], W2[k]) for k in W2), default=0.0)
    if residual > 100 * tolerance:
        return None, None
    return floats, residual


def _exact_blocks(blocks: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Blocks as Fraction object arrays (floats are read as the exact binary fractions they are)."""
    return {k: np.array([[x if isinstance(x, Fraction) else Fraction(float(x)) for x in row]
                         for row in np.asarray(v)], dtype=object) for k, v in blocks.items()}


def exact_witness(arch: Architecture, W1: dict, W2: dict, witness: list) -> list | None:
    """The witness with numbers rounded to fractions, if it maps W1 onto W2 exactly; else None."""
    exact = [{k: (_as_numbers(np.asarray(v, dtype=float), True) if k in _NUMBERS else v)
              for k, v in m.items()} for m in witness]
    E1, E2 = _exact_blocks(W1), _exact_blocks(W2)
    try:
        mapped = apply_block_witness(arch, E1, exact)
    except ZeroDivisionError:
        return None
    if all(np.array_equal(mapped[k], E2[k]) for k in E2):
        return exact
    return None


def same_block_function(arch: Architecture, weights: dict[str, np.ndarray],
                        other: dict[str, np.ndarray], *, method: str = "auto", n_points: int = 8,
                        tolerance: float = 1e-8, seed: int = 0) -> FiberResult:
    """Decide whether two block networks define the same function; if so, find a witness of
    named moves and apply it back exactly in rational arithmetic (float entries are exact binary
    fractions; object arrays of `fractions.Fraction` are taken as they are).

    method: `exact` (polynomial networks: lightning, square or no MLP, no norm; the outputs are
    compared in exact rational arithmetic at random integer inputs, `fibers.exact_identity`,
    with a Schwartz-Zippel bound on a wrong `True`), `numerical` (float64 outputs, relative
    `tolerance`), or `auto` (exact for a polynomial network whose entries are all whole numbers
    of size <= 2^24, as `fibers.same_function` decides; numerical otherwise).
    """
    check_architecture(arch)
    if arch.vocab is not None and arch.n_sequences > MAX_SEQUENCES:
        raise bad_value("arch", f"a vocabulary with at most {MAX_SEQUENCES} token sequences V^t "
                        "(fiber compares the networks at every one)",
                        f"V^t = {arch.vocab}^{arch.tokens} = {arch.n_sequences}",
                        "Pass a smaller --vocab or fewer --tokens.")
    for name, blocks in (("weights", weights), ("other", other)):
        check_block_weights(arch, blocks, name)
    method = check_choice("method", method, ("auto", "exact", "numerical"))
    n_points = check_int("n_points", n_points, minimum=1, fix="Pass e.g. 8.")
    tolerance = check_positive_float("tolerance", tolerance)
    if method == "exact" and not arch.is_polynomial:
        raise bad_value("method", "'numerical' or 'auto' for block networks that are not polynomial "
                        "(softmax, relu/gelu/tanh MLPs, norms)", method,
                        "Use method 'numerical' (float64 outputs), or a lightning network with a "
                        "square MLP and no norm.")
    if method == "auto":
        method = "exact" if arch.is_polynomial and all(
            _integral(b) for b in (weights, other)) else "numerical"
    sequences = None if arch.vocab is None else _all_sequences(arch)
    if method == "exact":
        E1, E2 = _exact_blocks(weights), _exact_blocks(other)

        def evaluate(X):
            return block_forward(arch, E1, X), block_forward(arch, E2, X)
        if sequences is None:
            same, failure, is_zero = exact_identity(arch, evaluate, n_points, seed)
            notes = ["identity tested in exact rational arithmetic at random integer inputs"]
        else:  # a finite input set: compared at every one of its points, a proof
            same, is_zero = True, True
            for X in sequences.numpy().astype(int).astype(object):
                a, b = evaluate(X)
                same, is_zero = bool(np.all(a == b)), is_zero and bool(np.all(a == 0))
                if not same:
                    break
            failure, is_zero = 0.0, same and is_zero
            n_points = len(sequences)
            notes = [f"identity tested in exact rational arithmetic at every one of the "
                     f"V^t = {arch.n_sequences} token sequences (the whole input set)"]
        result = FiberResult(same, "exact", None, failure, None, n_points)
        if is_zero:
            result.kind, result.witness = "zero", [
                {"move": "zero fiber", "note": "phi = 0 for both: every such pair is in the fiber"}]
            result.notes = notes
            return result
    else:
        gen = seeded_generator(seed, "identity-test")
        X = torch.randn((n_points, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64) \
            if sequences is None else sequences
        n_points = X.shape[0]
        outputs = []
        for name, blocks in (("weights", weights), ("other", other)):
            tensors = {k: torch.from_numpy(np.asarray(v, float)) for k, v in blocks.items()}
            with np.errstate(over="ignore", invalid="ignore"):
                out = block_forward(arch, tensors, X)
            # overflowing outputs compare as nan ("not the same function"): refused, as fibers.py does
            require_finite(out, "outputs", input_name=name, largest=largest_entry(tensors.values()))
            outputs.append(out)
        out1, out2 = outputs
        diff = _rel(out1.numpy(), out2.numpy())
        same = diff <= tolerance
        result = FiberResult(same, "numerical", tolerance, None, diff, n_points)
        notes = [f"float64 outputs compared with relative tolerance {tolerance:g}"
                 + ("" if sequences is None else
                    f" at every one of the V^t = {arch.n_sequences} token sequences")]
    if same:
        witness, residual = find_block_witness(arch, weights, other, tolerance=max(tolerance, 1e-7))
        unsearched = unsearched_options(arch)
        if witness is None and unsearched:
            result.kind = "unexplained"
            notes.append("same function; no witness searched: the moves of "
                         + ", ".join(unsearched) + " are not modelled by the search yet")
        elif witness is None:
            result.kind = "unexplained"
            others = unsearched_families(arch)
            notes.append("same function but no witness found among head permutation, head mixing, "
                         "per-head rescaling and GL (the rotary commutant with rotary positions), "
                         "MLP neuron moves, QK-norm gain balance, query and value bias shifts, "
                         "gqa head mixing, grouped key sums and the final norm gain (between-layer "
                         "GL(d) is not searched)"
                         + (f"; the moves of {', '.join(others)} are not searched" if others
                            else ""))
        else:
            result.kind, result.witness, result.witness_residual = "generic", witness, residual
            exact = exact_witness(arch, weights, other, witness)
            if exact is not None:
                result.witness = exact
                notes.append("witness applied back exactly in rational arithmetic: it maps the "
                             "first weights onto the second entry by entry (a proof)")
    result.notes = notes
    return result


# fiber compares networks with a vocabulary at every token sequence: at most this many.
MAX_SEQUENCES = 4096


def _all_sequences(arch: Architecture) -> torch.Tensor:
    """Every one of the V^t token sequences of `arch`, one-hot (V^t, V, t), in lexicographic order."""
    ids = torch.cartesian_prod(*[torch.arange(arch.input_symbols)] * arch.tokens).reshape(
        -1, arch.tokens)
    return symbol_inputs(arch, ids)


def _integral(blocks: dict[str, np.ndarray]) -> bool:
    """True when every entry is a whole number of size <= 2^24 (`parameters.integral_tensors`)."""
    return integral_tensors(*(torch.as_tensor(np.asarray(v, dtype=float)) for v in blocks.values()))
