"""Fibers of the parametrisation: random fiber points, function identity with a witness, canonical forms.

Math (docs/math/single-layer.md, deep.md, softmax.md):
  fiber of W = {W' : phi_W' = phi_W}.
  Known group acting on fibers: per-layer rescaling (lightning), GL(a_i) on (Q_i, K_i)
  (Lemma 3.1), inter-layer GL(d_i) (Eq. 9). Generic lightning fibers are exactly these orbits
  (Theorem 3.7, via virtual weights and Eq. 13); one lightning layer also has the rank-one swap
  (alpha beta^T, nu gamma^T) ~ (gamma beta^T, nu alpha^T) and the zero fiber (Theorem 3.2);
  one softmax layer with V != 0 has a point fiber in (A, V) (Theorem 3.9).

How `same_function` decides (the result says which method was used):
  exact      lightning weights whose entries are all integers (or `method="exact"`, which reads
             every float as the exact dyadic rational it stores): phi_W1 and phi_W2 are evaluated
             in exact rational arithmetic at `n_points` random integer inputs X with entries in
             [-2^20, 2^20]. Two different polynomial maps of degree 3^l agree at one such point with
             probability <= 3^l / (2^21 + 1) (Schwartz-Zippel), so the reported
             `failure_probability` is that bound to the power `n_points`. Equality is then certain
             up to that probability, with no rounding.
  numerical  float64 outputs at `n_points` random Gaussian inputs; same iff
             max |phi_1 - phi_2| <= tolerance * max(|phi_1|, |phi_2|) (relative, default 1e-8).
The witness (a list of group moves) is solved in float64 in both cases and checked by applying
it to W1: `witness_residual` is the largest relative difference to W2's blocks it leaves.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np
import torch

from ..core.rank import numerical_rank
from ..errors import InputError, InputTypeError
from ..core.architecture import Architecture, check_architecture
from ..core.checks import bad_value, check_choice, check_int, check_positive_float, check_seed
from ..core.display import Tabulated, short_json
from ..core.finite import largest_entry, require_finite
from ..core.maps import forward
from ..core.parameters import AttentionWeights, LayerWeights, integral_tensors, value_products
from ..core.seeds import seeded_generator, seeded_rng
from ..symmetries.paper import act_between_layers, act_keys, act_rescale
from ..symmetries.registry import action, family_of_move

DEFAULT_TOLERANCE = 1e-8
# Relative residual below which a linear system for a witness counts as solved (float64).
_CONSISTENCY = 1e-7
# Relative blockwise agreement of two weights on what a layer sees (float64).
_AGREEMENT = 1e-9


class _MoveChangesFunction(InputError):
    """A witness move that would change what a layer sees (bad witness, or no witness found)."""

    def __init__(self, error: InputError) -> None:
        super().__init__(str(error))
_EXACT_RANGE = 2 ** 20


def _check_weights(arch: Architecture, weights: object, name: str) -> LayerWeights:
    """Validate that `weights` are LayerWeights of `arch` (float64 torch tensors)."""
    if not isinstance(weights, LayerWeights):
        raise InputTypeError(f"`{name}` must be LayerWeights; got {type(weights).__name__}. "
                        "Build them with random_weights(arch) or read_weights(path).")
    if weights.n_layers != arch.n_layers:
        raise bad_value(name, f"weights of {arch.n_layers} layers", weights.n_layers,
                        "Pass weights of the same architecture.")
    for i, shapes in enumerate(arch.layer_shapes(), start=1):
        for block, tensors in (("Q", weights.Q), ("K", weights.K), ("V", weights.V)):
            shape = tuple(tensors[i - 1].shape)
            if shape != shapes[block]:
                raise bad_value(f"{name}.{block}_{i}", f"of shape {shapes[block]} for {arch}", shape,
                                "Pass weights of the same architecture.")
    return weights.map(lambda x: torch.as_tensor(x).to(torch.float64))


# ---------------------------------------------------------------- random points of a fiber

def _random_gl(n: int, gen: torch.Generator) -> torch.Tensor:
    """A well-conditioned random element of GL(n): orthogonal times diag(+-[0.5, 2])."""
    q, _ = torch.linalg.qr(torch.randn((n, n), generator=gen, dtype=torch.float64))
    scales = 0.5 + 1.5 * torch.rand(n, generator=gen, dtype=torch.float64)
    signs = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return q * (scales * signs)


def random_fiber_point(arch: Architecture, weights: LayerWeights, seed: int = 0) -> LayerWeights:
    """A random point of the fiber through W: a random element of the known group applied to W.

    Math: W -> rescale(s_i) . GL(a_i)(G_i) . GL(d_i)(C_i) W with G_i, C_i well conditioned
    (orthogonal times diagonal entries of modulus in [0.5, 2]) and s_i = +-[0.5, 2]; the
    rescalings only for lightning networks (they are not symmetries of softmax, Theorem 3.9).
    phi is unchanged up to float64 round-off.
    """
    weights = _check_weights(arch, weights, "weights")
    seed = check_seed(seed)
    gen = seeded_generator(seed, "fiber-point")
    out = weights
    for i in range(1, arch.n_layers):
        out = act_between_layers(out, i, _random_gl(arch.widths[i], gen))
    for i, a in enumerate(arch.keys, start=1):
        out = act_keys(out, i, _random_gl(a, gen))
    if arch.attention == "lightning":
        for i in range(1, arch.n_layers + 1):
            s = float(_random_gl(1, gen)[0, 0])
            out = act_rescale(out, i, s)
    return out


# ---------------------------------------------------------------- function identity

def is_integral(weights: LayerWeights) -> bool:
    """True when every entry is a whole number of size <= 2^24 (so exact arithmetic applies:
    larger float64 "integers" may already have been rounded when the weights were stored)."""
    return integral_tensors(*weights.Q, *weights.K, *weights.V)


def _to_rational(tensor: torch.Tensor) -> np.ndarray:
    """A float tensor as an object array of exact Fractions (each float is a dyadic rational)."""
    values = [Fraction(float(x)) for x in tensor.reshape(-1).tolist()]
    return np.array(values, dtype=object).reshape(tuple(tensor.shape))


def rational_weights(weights: LayerWeights) -> LayerWeights:
    """The same weights as object arrays of exact Fractions (for exact evaluation by `forward`)."""
    return LayerWeights(tuple(map(_to_rational, weights.Q)), tuple(map(_to_rational, weights.K)),
                        tuple(map(_to_rational, weights.V)))


def _random_integer_inputs(arch: Architecture, n_points: int, seed: int) -> list[np.ndarray]:
    rng = seeded_rng(seed, "exact-identity-inputs")
    return [np.array(rng.integers(-_EXACT_RANGE, _EXACT_RANGE + 1,
                                  size=(arch.widths[0], arch.tokens)).tolist(), dtype=object)
            for _ in range(n_points)]


def exact_identity(arch: Architecture, evaluate, n_points: int, seed: int
                   ) -> tuple[bool, float, bool]:
    """(same, failure probability, both zero): phi_1 = phi_2 tested in exact rational arithmetic.

    `evaluate(X)` returns the pair (phi_1(X), phi_2(X)) of object arrays of Fractions at an
    integer input X (d_0 x t). Math: phi_1 - phi_2 is a polynomial of degree deg_X (the
    architecture's `polynomial_degrees`) in X; a non-zero one vanishes at a uniform point of
    [-R, R]^(d_0 t) with probability <= deg_X / (2R + 1) (Schwartz-Zippel), so agreeing at
    `n_points` independent points bounds a wrong `True` by that number to the power n_points.
    """
    same, zero = True, True
    for X in _random_integer_inputs(arch, n_points, seed):
        a, b = evaluate(X)
        same = same and bool(np.all(a == b))
        zero = zero and bool(np.all(a == 0))
        if not same:
            break
    degree = arch.polynomial_degrees()[1]
    failure = min(1.0, degree / (2 * _EXACT_RANGE + 1)) ** n_points
    return same, (failure if same else 0.0), same and zero


@dataclass
class FiberResult(Tabulated):
    """Whether two weight sets define the same function, and the group element relating them.

    `method` is `exact` (rational identity test, `failure_probability` bounds a wrong `True`) or
    `numerical` (float64, relative `tolerance`). `kind` names the fiber: `generic` (known group
    orbit, Theorem 3.7 / Lemma 3.1 / Eq. 9), `unseen` (that group plus changes of weights where a
    layer never looks, see below), `refactored` (the group plus another factorisation
    Q_i^T K_i of the same A_i, needed when rank A_i < a_i), `swap` (Theorem 3.2 case 1), `zero` (phi = 0,
    Theorem 3.2 case 2), or `unexplained` (same function, no witness found: non-generic weights).
    `witness` is a JSON-serialisable list of moves, applied to W1 in order by `apply_witness`:
    rescale (layer, scale), GL(a_i) (layer, matrix), GL(d_i) (layer, matrix), swap (alpha, beta,
    nu, gamma), and `refactor keys` (layer, Q, K): another factorisation of the same A_i, needed
    when rank A_i < a_i (then Lemma 3.1 fails and factorisations are not one GL(a_i) orbit), and
    `unseen directions` (layer, Q, K, V): blocks changed only outside col(P_{i-1}), where layer i
    never looks (possible when some d_i > d_{i-1}; a symmetry beyond the paper's group).
    """

    same_function: bool
    method: str
    tolerance: float | None
    failure_probability: float | None
    max_difference: float | None
    n_points: int
    kind: str | None = None
    witness: list | None = None
    witness_residual: float | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**asdict(self), "families": self.families}

    @property
    def families(self) -> list[str]:
        """The symmetry families (`symmetries.registry` names) the witness's moves apply, in
        order of first use; discrete moves (a permutation, the swap) are named by their move."""
        out: list[str] = []
        for move in self.witness or []:
            name = family_of_move(move.get("move", "")) or move.get("move")
            if name and name not in out:
                out.append(name)
        return out

    summary_column = 14  # values in column 16, as the `architecture` and `seed` lines above

    def summary_lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs of `summary`; witness floats to 6 significant digits (all 17
        are in `witness` and `to_dict`)."""
        if self.method == "exact":
            how = (f"exact (rational identity test, P(wrong) <= {self.failure_probability:.1e})"
                   if self.same_function else "exact (outputs differ at an input: certain)")
        else:
            how = (f"numerical (float64, relative tolerance {self.tolerance:g}, max difference "
                   f"{self.max_difference:.2e})")
        lines = [("same function", f"{self.same_function}  [{how}, {self.n_points} inputs]")]
        if self.same_function:
            lines.append(("fiber", str(self.kind)))
            lines += [("  witness move", short_json(move)) for move in self.witness or []]
            if self.witness:
                lines.append(("families", ", ".join(self.families)))
            if self.witness_residual is not None:
                lines.append(("witness residual", f"{self.witness_residual:.1e} (float64, "
                              "relative, blockwise)"))
        return lines + [("note", note) for note in self.notes]

    def __repr__(self) -> str:
        verdict = f"same function, {self.kind} fiber" if self.same_function else "different functions"
        moves = f", {len(self.witness)} witness moves" if self.witness else ""
        return f"<FiberResult {verdict} [{self.method}]{moves}>"

    def _title(self) -> str:
        return "same function" if self.same_function else "different functions"


def _relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = max(float(a.abs().max()), float(b.abs().max()))
    if scale == 0.0:
        return 0.0
    return float((a - b).abs().max()) / scale


def _numerical_outputs(arch: Architecture, weights: LayerWeights, n_points: int, seed: int,
                       name: str) -> torch.Tensor:
    """phi_W at `n_points` seeded inputs; refused (naming input `name`) when they overflow."""
    gen = seeded_generator(seed, "identity-test")
    X = torch.randn((n_points, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64)
    out = forward(arch, weights, X)
    require_finite(out, "outputs", input_name=name,
                   largest=largest_entry(weights.Q + weights.K + weights.V))
    return out


def same_function(arch: Architecture, weights: LayerWeights, other: LayerWeights, *,
                  method: str = "auto", n_points: int = 8, tolerance: float = DEFAULT_TOLERANCE,
                  seed: int = 0) -> FiberResult:
    """Decide whether phi_W1 = phi_W2, and if so return the group element mapping W1 to W2.

    Math: phi_W1 = phi_W2 tested at random inputs (module docstring: exact over Q with a
    Schwartz-Zippel bound, or float64 with a relative tolerance). The witness follows
    Theorems 3.2, 3.7, 3.9: rescalings (Eq. 13), GL(a_i) (Lemma 3.1), GL(d_i) (Eq. 9), or the
    single-layer swap; `zero` when both functions vanish.
    method: `auto` (exact for lightning with integer entries, else numerical), `exact`
    (lightning only; floats read as exact dyadic rationals) or `numerical`.
    """
    check_architecture(arch)
    W1 = _check_weights(arch, weights, "weights")
    W2 = _check_weights(arch, other, "other")
    method = check_choice("method", method, ("auto", "exact", "numerical"))
    n_points = check_int("n_points", n_points, minimum=1, fix="Pass e.g. 8.")
    tolerance = check_positive_float("tolerance", tolerance)
    if method == "exact" and arch.attention != "lightning":
        raise bad_value("method", "'numerical' or 'auto' for softmax networks", method,
                        "Softmax networks are not polynomial; use method='numerical'.")
    if method == "auto":
        exact = arch.attention == "lightning" and is_integral(W1) and is_integral(W2)
        method = "exact" if exact else "numerical"
    notes = []
    if method == "exact":
        R1, R2 = rational_weights(W1), rational_weights(W2)
        same, failure, is_zero = exact_identity(
            arch, lambda X: (forward(arch, R1, X), forward(arch, R2, X)), n_points, seed)
        result = FiberResult(same, "exact", None, failure, None, n_points)
        notes.append("identity tested in exact rational arithmetic at random integer inputs")
    else:
        out1 = _numerical_outputs(arch, W1, n_points, seed, "weights")
        out2 = _numerical_outputs(arch, W2, n_points, seed, "other")
        diff = _relative_difference(out1, out2)
        same = diff <= tolerance
        result = FiberResult(same, "numerical", tolerance, None, diff, n_points)
        is_zero = same and float(out1.abs().max()) == 0.0
        notes.append(f"float64 outputs compared with relative tolerance {tolerance:g}")
    if same:
        if is_zero:
            result.kind = "zero"
            result.witness = [{"move": "zero fiber", "note": "phi = 0 for both (Theorem 3.2 case 2 for "
                               "one layer: A = 0 or V = 0); every such pair is in the fiber"}]
            result.witness_residual = None
        else:
            kind, witness, residual = find_witness(arch, W1, W2, tolerance=max(tolerance, 1e-7), seed=seed)
            result.kind, result.witness, result.witness_residual = kind, witness, residual
            if witness is None:
                notes.append("same function but no element of the known group was found mapping W1 "
                             "to W2: non-generic weights or outside Theorem 3.7's hypotheses (e.g. "
                             "d_i > d_{i-1}: layer i's outputs span only col(V_i), so the next "
                             "layer's weights on its complement are free, a symmetry beyond the group)")
    result.notes = notes
    return result


# ---------------------------------------------------------------- witnesses

def _solve_invertible(blocks: list[tuple[np.ndarray, np.ndarray]], n: int, rng) -> np.ndarray | None:
    """An invertible n x n G with sum-of-linear constraints M vec_r(G) = b, or None.

    `blocks` holds (M, b) pairs; the least-squares solution plus a random element of the kernel
    (so that rank-deficient constraints still give an invertible G).
    """
    M = np.vstack([m for m, _ in blocks])
    b = np.concatenate([v for _, v in blocks])
    sol, *_ = np.linalg.lstsq(M, b, rcond=None)
    if np.linalg.norm(M @ sol - b) > _CONSISTENCY * max(1.0, np.linalg.norm(b)):
        return None
    _, s, vh = np.linalg.svd(M)
    kernel = vh[numerical_rank(s, *M.shape).rank:]
    G = sol.reshape(n, n)
    if kernel.shape[0]:
        G = G + (rng.standard_normal(kernel.shape[0]) @ kernel).reshape(n, n)
    rank_G = numerical_rank(np.linalg.svd(G, compute_uv=False), n, n)
    if rank_G.rank < n or not rank_G.is_settled():
        return None
    return G


def _key_matrix(Q1, K1, Q2, K2, rng) -> np.ndarray | None:
    """G in GL(a) with G Q1 = Q2 and G^T K2 = K1 (so K2 = G^{-T} K1; Lemma 3.1)."""
    a = Q1.shape[0]
    eye = np.eye(a)
    # vec_r(G Q1) = (I kron Q1^T) vec_r(G); vec_r(K2^T G) = (K2^T kron I) vec_r(G).
    return _solve_invertible([(np.kron(eye, Q1.T), Q2.reshape(-1)),
                              (np.kron(K2.T, eye), K1.T.reshape(-1))], a, rng)


def _matrix_list(G: np.ndarray) -> list:
    return [[float(x) for x in row] for row in G]


def apply_witness(arch: Architecture, weights: LayerWeights, witness: list) -> LayerWeights:
    """Apply the moves of a witness (as returned in `FiberResult.witness`) to W, in order."""
    out = _check_weights(arch, weights, "weights")
    for move in witness:
        kind, layer = move["move"], move.get("layer")
        if kind in ("rescale", "GL(a_i)", "GL(d_i)"):  # group elements: the registry's actions
            out = action(kind)(arch, out, move)
        elif kind in ("refactor keys", "unseen directions"):
            out = _replace_blocks(out, layer, {k: torch.tensor(move[k], dtype=torch.float64)
                                               for k in ("Q", "K", "V") if k in move})
        elif kind == "swap":
            out = _swap(out, move)
        elif kind == "zero fiber":
            raise bad_value("witness", "a list of group moves", kind,
                            "A zero fiber has no group element; any A = 0 or V = 0 is in it.")
        else:
            raise bad_value("witness", "moves named rescale, GL(a_i), GL(d_i), refactor keys, unseen "
                            "directions or swap", kind,
                            "Pass the witness returned by same_function.")
    return out


def _seen_projector(weights: LayerWeights, layer: int) -> torch.Tensor:
    """Orthogonal projector onto col(P_{i-1}), P_{i-1} = V_{i-1} ... V_1: where layer i's inputs lie.

    Math: by Lemma 3.6 the input of layer i is P_{i-1} Z for some Z, so layer i only sees its
    weights restricted to col(P_{i-1}) (all of R^{d_{i-1}} when d_0 >= ... >= d_{i-1}, generically).
    """
    P = value_products(weights.V[: layer - 1] or weights.V[:1])[layer - 1]
    U, sv, _ = torch.linalg.svd(P, full_matrices=False)
    rank = numerical_rank(sv, *P.shape).rank
    return U[:, :rank] @ U[:, :rank].T


def _agree_on(a: torch.Tensor, b: torch.Tensor, proj: torch.Tensor) -> bool:
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-300)
    return float(((a - b) @ proj).abs().max()) <= _AGREEMENT * scale


def _replace_blocks(weights: LayerWeights, layer: int, new: dict[str, torch.Tensor]) -> LayerWeights:
    """Replace blocks of layer i by ones equal on what the layer sees (phi unchanged).

    Math: keys `Q`, `K` need (Q^T K) restricted to col(P_{i-1}) unchanged (another factorisation of
    A_i, beyond GL(a_i) when rank A_i < a_i, Lemma 3.1); `V` and the pair (`Q`, `K`) with
    `unseen` need M P = M' P for the projector P onto col(P_{i-1}).
    """
    proj = _seen_projector(weights, layer)
    Q, K, V = weights.Q[layer - 1], weights.K[layer - 1], weights.V[layer - 1]
    ok = True
    if "Q" in new:
        ok &= _agree_on(proj @ Q.T @ K, proj @ new["Q"].T @ new["K"], proj)
    if "V" in new:
        ok &= _agree_on(V, new["V"], proj)
    if not ok:
        raise _MoveChangesFunction(bad_value("witness", f"moves that keep what layer {layer} sees", "a move changing it",
                        "Pass the witness returned by same_function for these weights."))
    Qs, Ks, Vs = list(weights.Q), list(weights.K), list(weights.V)
    if "Q" in new:
        Qs[layer - 1], Ks[layer - 1] = new["Q"], new["K"]
    if "V" in new:
        Vs[layer - 1] = new["V"]
    return LayerWeights(tuple(Qs), tuple(Ks), tuple(Vs))


def _swap(weights: LayerWeights, move: dict) -> LayerWeights:
    """(alpha beta^T, nu gamma^T) -> (gamma beta^T, nu alpha^T) on a single layer (Theorem 3.2)."""
    alpha, beta = (torch.tensor(move[k], dtype=torch.float64) for k in ("alpha", "beta"))
    gamma, nu = (torch.tensor(move[k], dtype=torch.float64) for k in ("gamma", "nu"))
    a, d = weights.Q[0].shape
    Q = torch.zeros((a, d), dtype=torch.float64)
    K = torch.zeros((a, d), dtype=torch.float64)
    Q[0], K[0] = gamma, beta
    return LayerWeights((Q,), (K,), (torch.outer(nu, alpha),))


def _blocks_residual(W: LayerWeights, target: LayerWeights) -> float:
    worst = 0.0
    for a, b in zip((*W.Q, *W.K, *W.V), (*target.Q, *target.K, *target.V)):
        scale = max(float(b.abs().max()), 1e-300)
        worst = max(worst, float((a - b).abs().max()) / scale)
    return worst


def _align(arch: Architecture, W1: LayerWeights, W2: LayerWeights, rng) -> tuple[list, LayerWeights]:
    """Layer by layer: rescale A_i onto A_i(W2), GL(a_i) onto (Q_i, K_i), GL(d_i) onto V_i.

    Every comparison is restricted to col(P_{i-1}), what layer i sees (`_seen_projector`); blocks
    that still differ only where the layer is blind, or factorisations of A_i not related by
    GL(a_i), are then replaced by W2's (moves `refactor keys` and `unseen directions`).
    """
    moves: list[dict] = []
    cur = W1
    for i in range(1, arch.n_layers + 1):
        proj = _seen_projector(cur, i).numpy()
        A1 = proj @ (cur.Q[i - 1].T @ cur.K[i - 1]).numpy() @ proj
        A2 = proj @ (W2.Q[i - 1].T @ W2.K[i - 1]).numpy() @ proj
        if arch.attention == "lightning":
            denom = float((A1 * A1).sum())
            if denom > 0:
                s = float((A1 * A2).sum()) / denom
                if s != 0.0 and abs(s - 1.0) > 1e-15:
                    cur = act_rescale(cur, i, s)
                    moves.append({"move": "rescale", "layer": i, "scale": s})
        Q1, K1 = cur.Q[i - 1].numpy(), cur.K[i - 1].numpy()
        Q2, K2 = W2.Q[i - 1].numpy(), W2.K[i - 1].numpy()
        G = _key_matrix(Q1 @ proj, K1 @ proj, Q2 @ proj, K2 @ proj, rng)
        if G is not None:
            cur = act_keys(cur, i, torch.from_numpy(G))
            moves.append({"move": "GL(a_i)", "layer": i, "matrix": _matrix_list(G)})
        d = cur.V[i - 1].shape[0]
        V1, V2 = cur.V[i - 1].numpy(), W2.V[i - 1].numpy()
        if i < arch.n_layers:
            C = _solve_invertible([(np.kron(np.eye(d), (V1 @ proj).T), (V2 @ proj).reshape(-1))], d, rng)
            if C is None:
                return moves, cur
            cur = act_between_layers(cur, i, torch.from_numpy(C))
            moves.append({"move": "GL(d_i)", "layer": i, "matrix": _matrix_list(C)})
        new = {}
        if _blocks_residual(LayerWeights((cur.Q[i - 1],), (cur.K[i - 1],), ()),
                            LayerWeights((W2.Q[i - 1],), (W2.K[i - 1],), ())) > 1e-9:
            new.update(Q=W2.Q[i - 1], K=W2.K[i - 1])
        if _blocks_residual(LayerWeights((), (), (cur.V[i - 1],)), LayerWeights((), (), (W2.V[i - 1],))) > 1e-9:
            new["V"] = W2.V[i - 1]
        if new:
            try:
                cur = _replace_blocks(cur, i, new)
            except _MoveChangesFunction:
                return moves, cur
            moves.append({"move": "refactor keys" if "V" not in new else "unseen directions", "layer": i,
                          **{k: _matrix_list(v.numpy()) for k, v in new.items()}})
    return moves, cur


def _rank_one(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(u, v) with M = u v^T if M has numerical rank one by the gap rule, else None."""
    U, s, Vh = torch.linalg.svd(M)
    nr = numerical_rank(s, *M.shape)
    if nr.rank != 1 or not nr.is_settled():
        return None
    return U[:, 0] * s[0], Vh[0]


def find_witness(arch: Architecture, W1: LayerWeights, W2: LayerWeights, *,
                 tolerance: float = 1e-7, seed: int = 0) -> tuple[str, list | None, float | None]:
    """(kind, moves, residual): a group element mapping W1 onto W2 blockwise, solved in float64.

    Tries the known group (generic fibers, Theorem 3.7); for one lightning layer also the
    Theorem 3.2 swap first applied to W1. `residual` is the relative blockwise mismatch left.
    """
    rng = seeded_rng(seed, "fiber-witness")
    moves, cur = _align(arch, W1, W2, rng)
    residual = _blocks_residual(cur, W2)
    if residual <= tolerance:
        # "refactor keys" (another Q, K with the same A when rank A_i < a_i) and "unseen
        # directions" are not elements of the paper's group: say so in the kind.
        if any(m["move"] == "unseen directions" for m in moves):
            return "unseen", moves, residual
        if any(m["move"] == "refactor keys" for m in moves):
            return "refactored", moves, residual
        return "generic", moves, residual
    if arch.n_layers == 1 and arch.attention == "lightning":
        A = W1.Q[0].T @ W1.K[0]
        left, right = _rank_one(A), _rank_one(W1.V[0])
        if left is not None and right is not None:
            alpha, beta = left
            nu, gamma = right
            swap = {"move": "swap", "layer": 1, "alpha": alpha.tolist(), "beta": beta.tolist(),
                    "nu": nu.tolist(), "gamma": gamma.tolist()}
            swapped = _swap(W1, swap)
            more, cur = _align(arch, swapped, W2, rng)
            residual = _blocks_residual(cur, W2)
            if residual <= tolerance:
                return "swap", [swap] + more, residual
    return "unexplained", None, residual


# ---------------------------------------------------------------- canonical form

def _sign_fix(M: torch.Tensor) -> float:
    """+1 or -1 making the entry of largest modulus of M positive."""
    flat = M.reshape(-1)
    return 1.0 if float(flat[int(flat.abs().argmax())]) >= 0 else -1.0


def canonical_form(arch: Architecture, weights: LayerWeights) -> LayerWeights:
    """One representative per generic fiber (numerical, float64).

    Math: with virtual weights (A'_i, V') and P_i = V_i ... V_1 (Eq. 8):
      Eq. 13 rescaling fixed by ||A'_i||_F = 1 and the largest-modulus entry of A'_i positive
      (lightning), V' -> V' prod_i lambda_i^{3^{l-i}} (so mu prod lambda_i^{3^{l-i}} = 1);
      GL(d_i) (Eq. 9) fixed by P_i = [I | M_i] (reduced row echelon form of the row space);
      then A_i = top-left d_{i-1} x d_{i-1} block of A'_i, V_i = first d_{i-1} columns of P_i
      (V' for i = l), and GL(a_i) fixed by the balanced SVD factorisation A_i = Q_i^T K_i with
      the largest-modulus entry of each row of Q_i positive.
    Weights on one generic fiber give equal canonical weights up to round-off; needs
    d_0 >= d_1 >= ... >= d_{l-1} (so that every P_i has full row rank) and generic weights.
    """
    W = _check_weights(arch, weights, "weights")
    widths = arch.widths
    if any(widths[i] > widths[i - 1] for i in range(1, arch.n_layers)):
        raise bad_value("arch.widths", "non-increasing up to d_{l-1} for a canonical form",
                        list(widths), "Use widths with d_0 >= d_1 >= ... >= d_{l-1}.")
    attention = W.to_attention()
    virtual = attention.to_virtual()
    l = arch.n_layers
    A_virtual, V_virtual = list(virtual.A), virtual.V
    if arch.attention == "lightning":
        factor = 1.0
        for i, A in enumerate(A_virtual, start=1):
            norm = float(torch.linalg.norm(A))
            if norm == 0.0:
                raise bad_value(f"A_{i}", "non-zero for a canonical form", "a zero matrix",
                                "Zero attention gives a degenerate fiber (Theorem 3.2 case 2).")
            lam = _sign_fix(A) / norm
            A_virtual[i - 1] = A * lam
            factor *= lam ** (3 ** (l - i))
        V_virtual = V_virtual / factor
    canon_P = [P if i == 0 else torch.linalg.solve(P[:, : widths[i]], P)
               for i, P in enumerate(value_products(W.V[: l - 1] or W.V[:1])[:l])]
    As, Vs = [], []
    for i in range(1, l + 1):
        d_in = widths[i - 1]
        As.append(A_virtual[i - 1][:d_in, :d_in])
        nxt = canon_P[i] if i < l else V_virtual
        Vs.append(nxt[:, :d_in])
    balanced = AttentionWeights(tuple(As), tuple(Vs)).to_layer_weights(arch)
    Qs, Ks = [], []
    for Q, K in zip(balanced.Q, balanced.K):
        signs = torch.tensor([_sign_fix(row) if float(row.abs().max()) > 0 else 1.0 for row in Q],
                             dtype=torch.float64)[:, None]
        Qs.append(Q * signs)
        Ks.append(K * signs)
    return LayerWeights(tuple(Qs), tuple(Ks), tuple(Vs))


def canonical_distance(a: LayerWeights, b: LayerWeights) -> float:
    """Largest relative blockwise difference between two weight sets (0 for equal weights)."""
    return _blocks_residual(a, b)


__all__ = ["FiberResult", "apply_witness", "canonical_distance", "canonical_form", "find_witness",
           "random_fiber_point", "same_function", "is_integral"]
