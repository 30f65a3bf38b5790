"""Forward-mode duals in arb balls, and with them the certified engine of every non-polynomial
network: the paper's softmax model, and softmax heads, value/output projections, residuals,
relu/gelu/tanh/square MLPs, layernorm/rmsnorm (docs/certified_softmax.md). The proof loop is
`ball.certify_rank`.

- Lower bound. At a rational point (dyadic named blocks and inputs), an r x r block of the
  Jacobian of W -> (phi_W(X_n))_n picked from the float64 Jacobian is evaluated again in ball
  arithmetic: `block_forward` run in arb balls (`BallDual`), forward mode (a value and one tangent per
  chosen parameter direction) with the explicit derivatives of softmax, the norms (sqrt and
  division; eps = 1e-5 as a ball containing the exact decimal), gelu (erf form), tanh, x^2 and
  relu. A relu whose input ball contains 0 has no derivative there: the evaluation stops
  (`ball.UndecidedBall`) and nothing is proved at that precision. A non-zero determinant ball
  proves rank >= r at the point, so dim >= r.
- Upper bound. n_params minus the rank over F_p of the registry's group at a random integer
  point: for the paper's model its own families (`ball.softmax_upper_bound`), for every other
  network the symmetry catalogue's tangents (`symmetries.catalogue`). Every family used is a symmetry of the
  non-polynomial network too (NOTE: [Catalogue families beyond polynomials] in
  `symmetries.catalogue`) and every tangent entry is an integer polynomial in the weights, or a
  rational function whose denominator is non-zero mod p at the point (inverses of weight
  matrices, kernels checked by rank), so rank_p <= rank over Q <= generic rank, as for the exact
  path.

The map is `core.blocks.block_forward` itself, run in the `BallDual` arithmetic;
tests/dimension/test_ball_dual.py checks that the balls contain the float64 values and autodiff
Jacobian columns.
"""

from __future__ import annotations

import time
from fractions import Fraction

import flint
import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.checks import check_choice
from ..core.formulas import ambient_bound, block_formula, effective_width, expected_dim
from ..core.blocks import (NORM_EPS, Dual, block_forward, block_layout, blocks_of, causal_mask,
                           check_block_weights, flatten_blocks, layer_weights_of,
                           random_block_weights)
from ..symmetries.catalogue import FLOAT_OPS
from ..symmetries.registry import tangent_rows
from ..core.parameters import score_factor
from ..core.positions import rotary_fractions
from ..core.seeds import seeded_generator
from ..core.tokens import input_stream
from ..errors import ComputationError
from .ball import (DEFAULT_PRECISION, PROGRESS_SECONDS, UndecidedBall, arb_array, certify_rank,
                   left_multiply, softmax_upper_bound, to_dyadic, to_residues, upper_bound_at)
from .jacobians import jacobian
from .fp import DEFAULT_PRIME, check_prime
from .modular import check_word_prime
from .fp_dual import family_ranks_mod_p, fp_ops, random_blocks_mod_p
from .result import DimensionResult, Progress
# Catalogue tangents must map to (almost) 0 under the float Jacobian at the rational point: a
# guard against a catalogue bug, checked before the bound is used (the proof is the catalogue's).
from .verdict import MAX_KERNEL_IMAGE_CERTIFIED as _MAX_LEAK

_MAP = {name: np.frompyfunc(lambda x, n=name: getattr(x, n)(), 1, 1)
        for name in ("exp", "sqrt", "erf", "tanh")}


def _plus(a, b):
    return b if a is None else a if b is None else a + b


def _mm(A: Dual, B: Dual) -> Dual:
    """(A B, dA B + A dB); tangents broadcast over the leading direction axis."""
    return Dual(A.x @ B.x, _plus(None if A.dx is None else A.dx @ B.x,
                                 None if B.dx is None else A.x @ B.dx))


def _t(A: Dual) -> Dual:
    return Dual(A.x.T, None if A.dx is None else A.dx.transpose(0, 2, 1))


_ZERO, _ONE = flint.arb(0), flint.arb(1)


def _zeros(shape: tuple[int, ...]) -> np.ndarray:
    """Tangent entries as balls from the start: a Python integer tangent divided by an integer
    later would become a rounded float, outside every ball (a norm's 1/d did)."""
    return np.full(shape, _ZERO, dtype=object)


def _pointwise(A: Dual, value: np.ndarray, slope: np.ndarray) -> Dual:
    return Dual(value, None if A.dx is None else slope * A.dx)


def _normalised(Z: Dual, kind: str, eps) -> Dual:
    """(Z - mean) / sqrt(var + eps) (layernorm) or Z / sqrt(mean Z^2 + eps) per token, no gain."""
    # 1/d as a ball: a tangent entry may still be a Python integer (the unit directions of a
    # shift or an embedding), and an integer divided by d would be a rounded float.
    inv_d = 1 / flint.arb(Z.x.shape[0])
    c, dc = Z.x, Z.dx
    if kind == "layernorm":
        c = c - c.sum(axis=0, keepdims=True) * inv_d
        dc = None if dc is None else dc - dc.sum(axis=1, keepdims=True) * inv_d
    v = (c * c).sum(axis=0, keepdims=True) * inv_d + eps
    s = 1 / _MAP["sqrt"](v)
    if dc is None:
        return Dual(c * s, None)
    ds = -(s / (2 * v)) * (2 * (c * dc).sum(axis=1, keepdims=True) * inv_d)
    return Dual(c * s, dc * s + c * ds)


def _base_rotation(a: int, pairs: int, i: int, base: float) -> np.ndarray:
    """R^i in balls for the angles theta_f = base^(-(f - 1) / pairs) (the float path's
    `core.positions.base_angles(2 pairs, base)`): cos, sin of i theta_f enclosed."""
    R = np.array([[flint.arb(int(r == c)) for c in range(a)] for r in range(a)], dtype=object)
    for f in range(pairs):
        angle = i * flint.arb(base) ** (flint.arb(-f) / pairs)
        c, s = angle.cos(), angle.sin()
        R[2 * f, 2 * f], R[2 * f, 2 * f + 1], R[2 * f + 1, 2 * f], R[2 * f + 1, 2 * f + 1] = c, -s, s, c
    return R


class Param:
    """A parameter block in balls, with the chosen directions it owns: (j, row, column) for each
    direction j that is the entry (row, column) of this block."""

    __slots__ = ("x", "seeds", "mat")

    def __init__(self, x: np.ndarray, seeds: list[tuple[int, int, int]]):
        self.x, self.seeds = x, seeds
        self.mat = flint.arb_mat(x.tolist())  # for products with every tangent at once


class BallDual:
    """The block map's primitives in arb balls in forward mode (`core.blocks.ArrayArithmetic`
    lists them), for one sample (Z is d x t): a value and one tangent per chosen parameter
    direction, with the explicit derivatives of softmax (causal: over j <= i), the norms (sqrt and
    division; eps as a ball containing the exact decimal), gelu (erf form), tanh, silu, x^2 and
    relu, the causal 0/1 mask, bias columns and the gated MLP's entrywise product. Parameters are
    `Param`s; their seeded directions enter where the block is used."""

    def __init__(self, k: int, temperature: float):
        self.k = k
        eps = Fraction(repr(NORM_EPS))
        self.eps = flint.arb(eps.numerator) / eps.denominator
        self.inv_tau = 1 / flint.arb(float(temperature))

    def linear(self, M: Param, Z: Dual) -> Dual:
        """M Z, with dM = the unit directions M owns."""
        dx = (_zeros((self.k, M.x.shape[0], Z.x.shape[1])) if Z.dx is None
              else left_multiply(M.mat, Z.dx))
        for j, r, s in M.seeds:
            dx[j, r] += Z.x[s]
        return Dual(M.x @ Z.x, dx)

    def scores(self, q: Dual, k: Dual) -> Dual:
        return _mm(_t(q), k)

    def softmax(self, L: Dual, temperature: float, causal: bool = False) -> Dual:  # noqa: ARG002 (self.inv_tau)
        """Column softmax over the aggregated index j (axis -2): d S = S (dL - sum_j S dL); with
        `causal` over j <= i only (exactly 0 elsewhere)."""
        E = _MAP["exp"](L.x * self.inv_tau)
        if causal:
            E = np.where(causal_mask(E.shape[-1]).astype(bool), E, flint.arb(0))
        S = E / E.sum(axis=0, keepdims=True)
        if L.dx is None:
            return Dual(S, None)
        dL = L.dx * self.inv_tau
        return Dual(S, S * (dL - (S * dL).sum(axis=1, keepdims=True)))

    def mix(self, values: Dual, scores: Dual) -> Dual:
        return _mm(values, scores)

    def add(self, A: Dual, B: Dual) -> Dual:
        return Dual(A.x + B.x, _plus(A.dx, B.dx))

    def mask(self, A: Dual) -> Dual:
        """Causal lightning scores: A_ji times [j <= i]."""
        m = causal_mask(A.x.shape[-1])
        return Dual(A.x * m, None if A.dx is None else A.dx * m)

    def shift(self, A: Dual, b: Param) -> Dual:
        """A + b for a parameter block b: a bias column (d x 1, every token) or learned positions
        (d x t), with db = the unit directions b owns."""
        dx = (_zeros((self.k,) + A.x.shape) if A.dx is None else A.dx.copy())
        column = b.x.shape[1] == 1
        for j, r, c in b.seeds:
            if column:
                dx[j, r] += _ONE
            else:
                dx[j, r, c] += _ONE
        return Dual(A.x + b.x, dx)

    def scale(self, A: Dual, c: float) -> Dual:
        """c A for a float constant c, read as the exact rational it stores."""
        r = flint.arb(c)
        return Dual(A.x * r, None if A.dx is None else A.dx * r)

    def mul(self, A: Dual, B: Dual) -> Dual:
        """Entrywise (a b, da b + a db) (a gated MLP)."""
        return Dual(A.x * B.x, _plus(None if A.dx is None else A.dx * B.x,
                                     None if B.dx is None else A.x * B.dx))

    def embed(self, E: Param, X: Dual) -> Dual:
        """E^T X (one-hot token columns to embeddings), with dE = the unit directions E owns."""
        dx = _zeros((self.k, E.x.shape[1], X.x.shape[1]))
        for j, r, c in E.seeds:
            dx[j, c] += X.x[r]
        return Dual(E.x.T @ X.x, dx)

    def rotate(self, x: Dual, pairs: int, base: float | None = None) -> Dual:
        """Token i's column times R^i, the rational rotations as exact balls (with a `base`,
        balls around cos and sin of i theta_f, theta_f = base^(-(f - 1) / pairs))."""
        a, t = x.x.shape
        if base is None:
            R = [np.array([[flint.arb(Fraction(v).numerator) / Fraction(v).denominator
                            for v in row] for row in M], dtype=object)
                 for M in rotary_fractions(a, pairs, t)]
        else:
            R = [_base_rotation(a, pairs, i, base) for i in range(t)]
        value = np.stack([R[i] @ x.x[:, i] for i in range(t)], axis=-1)
        if x.dx is None:
            return Dual(value, None)
        return Dual(value, np.stack([x.dx[:, :, i] @ R[i].T for i in range(t)], axis=-1))

    def norm(self, Z: Dual, gain: Param, kind: str, eps: float = NORM_EPS) -> Dual:
        """g * N(Z), with dg = the unit directions g owns (eps as a ball containing its decimal)."""
        if eps != NORM_EPS:
            e = Fraction(repr(eps))
            hat = _normalised(Z, kind, flint.arb(e.numerator) / e.denominator)
        else:
            hat = _normalised(Z, kind, self.eps)
        g = gain.x
        dx = _zeros((self.k,) + hat.x.shape) if hat.dx is None else g * hat.dx
        for j, r, _ in gain.seeds:
            dx[j, r] += hat.x[r]
        return Dual(g * hat.x, dx)

    def activate(self, A: Dual, kind: str) -> Dual:
        """s(A) entrywise with s' (square, relu, gelu in erf form, tanh)."""
        x = A.x
        if kind == "square":
            return _pointwise(A, x * x, 2 * x)
        if kind == "relu":
            if any(not (e > 0 or e < 0) for e in x.flat):
                raise UndecidedBall("a relu input ball contains 0 (no derivative decided)")
            on = np.frompyfunc(lambda e: 1 if e > 0 else 0, 1, 1)(x)
            return _pointwise(A, x * on, on)
        if kind == "gelu":
            root2 = flint.arb(2).sqrt()
            cdf = (1 + _MAP["erf"](x / root2)) / 2
            density = _MAP["exp"](-(x * x) / 2) / (2 * flint.arb.pi()).sqrt()
            return _pointwise(A, x * cdf, cdf + x * density)
        if kind == "silu":
            sig = 1 / (1 + _MAP["exp"](-x))
            return _pointwise(A, x * sig, sig + x * sig * (1 - sig))
        if kind == "gelu_tanh":      # x (1 + tanh(c (x + k x^3))) / 2, c = sqrt(2 / pi)
            c, k3 = (2 / flint.arb.pi()).sqrt(), flint.arb(44715) / 10 ** 6
            th = _MAP["tanh"](c * (x + k3 * x * x * x))
            return _pointwise(A, x * (1 + th) / 2,
                              (1 + th) / 2 + x * (1 - th * th) * c * (1 + 3 * k3 * x * x) / 2)
        th = _MAP["tanh"](x)
        return _pointwise(A, th, 1 - th * th)


def ball_block_forward(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                       cols: list[int], progress: Progress | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """phi_W(X_n) and its derivatives along parameters `cols`, in arb at the current precision:
    `core.blocks.block_forward` run in the `BallDual` arithmetic, one sample at a time.

    `blocks` and X (N, d_0, t) are float64, read as the exact rationals they store. Returns
    object arrays of shape (N, d_l, t) and (N, len(cols), d_l, t). A line to `progress` before
    a sample when `PROGRESS_SECONDS` have passed since the last one (deep networks take minutes).
    """
    k = len(cols)
    params = {}
    for name, shape, offset in block_layout(arch):
        seeds = [(j, *divmod(c - offset, shape[1])) for j, c in enumerate(cols)
                 if offset <= c < offset + shape[0] * shape[1]]
        params[name] = Param(arb_array(blocks[name].numpy()), seeds)
    ops = BallDual(k, arch.temperature)
    values, tangents = [], []
    t0 = last = time.perf_counter()
    for done, sample in enumerate(X):
        now = time.perf_counter()
        if progress is not None and done and now - last >= PROGRESS_SECONDS:
            last = now
            progress(f"ball Jacobian block: sample {done}/{len(X)} ({now - t0:.1f} s)")
        Z = block_forward(arch, params, Dual(arb_array(sample.numpy()), None), arithmetic=ops)
        values.append(Z.x)
        tangents.append(Z.dx if Z.dx is not None else _zeros((k,) + Z.x.shape))
    values, tangents = np.stack(values), np.stack(tangents)
    _check_exact_entries(arch, values, tangents)
    return values, tangents


def _check_exact_entries(arch: Architecture, *arrays: np.ndarray) -> None:
    """Raise unless every entry is a ball or an exact integer: a float (an integer divided by an
    integer somewhere in the map) is a rounded value outside any ball, and a determinant built on
    it proves nothing."""
    for array in arrays:
        if any(isinstance(e, float) for e in array.flat):
            raise ComputationError(
                f"the ball forward pass of {arch} produced a float entry (a rounded value, not a "
                "ball): no certificate is drawn from it. This is a bug; please report it with "
                "the command (--debug shows the traceback).")


def ball_block_jacobian(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                        rows: list[int], cols: list[int],
                        progress: Progress | None = None) -> np.ndarray:
    """J[rows, cols] of W -> (phi_W(X_n))_n (rows ordered (n, d_l, t) as `block_jacobian`), in arb;
    only the samples that own a chosen row are evaluated."""
    per_sample = arch.output_width * arch.tokens
    samples = sorted({row // per_sample for row in rows})
    where = {n: m for m, n in enumerate(samples)}
    _, tangents = ball_block_forward(arch, blocks, X[samples], cols, progress)
    flat = tangents.reshape(len(samples), len(cols), per_sample)
    return np.array([flat[where[row // per_sample], :, row % per_sample] for row in rows],
                    dtype=object)


def rational_point(arch: Architecture, seed: int, n_samples: int
                         ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Seeded named blocks and inputs rounded to multiples of 2^-DYADIC_BITS (exact rationals);
    Q and K blocks are rounded before their `score_factor` c is applied (exactly: c is a power of
    two), so that a small temperature's small Q, K are not rounded to zero. The paper's model
    draws the same numbers as `core.parameters.random_weights`, in the same order."""
    c = score_factor(arch)
    blocks = {name: to_dyadic(t / c) * c if name[0] in "QK" else to_dyadic(t)
              for name, t in random_block_weights(arch, seed).items()}
    gen = seeded_generator(seed, "certified-inputs")
    X = to_dyadic(input_stream(arch, gen)(n_samples))  # one-hot token ids are exact already
    return blocks, X


def block_upper_bound(arch: Architecture, seed: int = 0, prime: int = DEFAULT_PRIME
                      ) -> tuple[int, dict[str, int]]:
    """n_params - rank_p(catalogue tangents) at a random integer point, and each family's
    incremental rank: a proven upper bound on the dimension (module docstring)."""
    p = check_word_prime(check_prime("prime", prime))
    point = random_blocks_mod_p(arch, p, seeded_generator(seed, "certified-upper"))
    return catalogue_bound(arch, point, p)


def catalogue_bound(arch: Architecture, residues: dict[str, torch.Tensor], p: int
                     ) -> tuple[int, dict[str, int]]:
    """n_params - rank_p of the catalogue's tangents at residue blocks, and the family ranks."""
    tangents, counts = tangent_rows(arch, residues, fp_ops(p))
    families = family_ranks_mod_p(tangents.remainder(p), counts, p)
    return arch.n_params - sum(families.values()), families


def point_bounds(arch: Architecture, weights, p: int = DEFAULT_PRIME, engine: str = "verified"):
    """At given weights (`LayerWeights` of the paper's model, or named blocks): (named float64
    blocks, upper bound, notes, X -> float64 Jacobian, X -> ball evaluator).

    The upper bound is n_params - rank_p(kernel directions at the point), the registry's group
    for the network (the paper's: `ball.upper_bound_at`; the catalogue's otherwise): each
    float64 entry is the dyadic rational it stores, reduced mod p exactly (`ball.to_residues`).
    Every tangent lies in the Jacobian's kernel at every point where it is defined, and a
    rational one is defined here because its denominator is non-zero mod p; a singular inverse
    or kernel mod p at these weights leaves only the trivial bound n_params, said in the notes.
    """
    if not arch.is_block and not isinstance(weights, dict):
        weights = blocks_of(arch, weights)
    check_block_weights(arch, weights, "weights")
    blocks = {k: torch.as_tensor(np.asarray(v), dtype=torch.float64).detach().cpu()
              for k, v in weights.items()}
    p = check_word_prime(check_prime("prime", p))
    notes = []
    if not arch.is_block:
        upper, notes = upper_bound_at(arch, layer_weights_of(arch, blocks), p)
    else:
        try:
            upper, _ = catalogue_bound(arch, {k: to_residues(v, p) for k, v in blocks.items()}, p)
        except ComputationError as exc:
            upper = arch.n_params
            notes.append(f"catalogue tangents not available at these weights ({exc}); upper bound "
                         "n_params")
    params = flatten_blocks(arch, blocks)
    return (blocks, upper, notes, lambda X: jacobian(arch, params, X),
            lambda X: block_evaluator(arch, blocks, X, engine=engine))


# The engines of the certified path's lower bound: `verified` (the verified float64 certificate
# of `verified.py` first, the balls where floats cannot separate) or `ball` (arb balls only: the
# engine the verified one was checked against, for a user's cross-check).
ENGINES = ("verified", "ball")


def check_engine(engine: str) -> str:
    """`engine` validated against ENGINES."""
    return check_choice("engine", engine, ENGINES)


def block_evaluator(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                    progress: Progress | None = None, engine: str = "verified"):
    """rows, cols -> J[rows, cols] in arb balls (`ball_block_jacobian`), carrying (engine
    `verified`) as `.verified` the same block enclosed in verified float64
    (`verified.verified_block_jacobian`) and as `.projected` the enclosure of W J V for float
    matrices W, V (`verified.verified_projected_block`), with `.nonsingular` the certificate
    (`verified.verified_nonsingular`), which `ball.prove_rank` tries first. Engine `ball`: the
    balls alone."""
    from .verified import (verified_block_jacobian, verified_nonsingular,  # noqa: PLC0415
                           verified_projected_block)

    def evaluate(rows, cols):
        return ball_block_jacobian(arch, blocks, X, rows, cols, progress)

    if check_engine(engine) == "ball":
        return evaluate
    evaluate.verified = lambda rows, cols: verified_block_jacobian(arch, blocks, X, rows, cols)
    evaluate.projected = lambda W, V: verified_projected_block(arch, blocks, X, W, V)
    evaluate.nonsingular = verified_nonsingular
    return evaluate


def certified_dim(arch: Architecture, *, seed: int = 0, samples: int | None = None,
                  precision: int = DEFAULT_PRECISION, prime: int = DEFAULT_PRIME,
                  progress: Progress | None = None, engine: str = "verified") -> DimensionResult:
    """Certified dimension of a non-polynomial network (module docstring): `certified` when the
    ball lower bound meets the F_p upper bound of the registry's group (the paper's for its model,
    the catalogue's otherwise), else `lower-bound` with both. `engine` (ENGINES): `verified` tries
    the verified float64 certificate first, `ball` proves in arb balls only."""
    engine = check_engine(engine)
    if arch.is_block:
        def upper_bound(seed: int):
            upper, families = block_upper_bound(arch, seed, prime)
            notes = ["upper bound families (incremental rank over F_p): " + ", ".join(
                f"{k}: {v}" for k, v in families.items() if v)]
            if arch.vocab is not None and ambient_bound(arch) < upper:
                # token ids: the map lies in R^{V^t V t} (`formulas.ambient_bound`), proven
                upper = ambient_bound(arch)
                notes.append(f"ambient bound V^t V t = {upper} (a finite input set)")
            return upper, notes, {"symmetries": families}
        formula = block_formula(arch)
        fields = {"formula": formula, "conjecture": formula}
    else:
        def upper_bound(seed: int):
            upper, notes = softmax_upper_bound(arch, seed, prime)
            return upper, notes, {}
        fields = {"formula": expected_dim(arch), "conjecture": effective_width(arch)}

    checked = []

    def point(seed: int, n: int):
        blocks, X = rational_point(arch, seed, n)
        J = jacobian(arch, flatten_blocks(arch, blocks), X, progress)
        if not checked:
            _check_kernel(arch, blocks, J)
            checked.append(True)
        return J, block_evaluator(arch, blocks, X, progress, engine)

    gauged = None
    if engine == "verified" and not arch.is_block:
        def gauged(seed: int, n: int, target: int):
            return gauged_proof(arch, *rational_point(arch, seed, n), target, progress)

    result = certify_rank(arch, upper_bound, point, seed=seed, samples=samples,
                          precision=precision, prime=prime, progress=progress, gauged=gauged,
                          **fields)
    if engine == "ball":
        result.notes.append("engine ball (--engine ball): the lower bound in arb balls only, "
                            "the verified float64 certificate not tried")
    return result


def gauged_proof(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                 target: int, progress: Progress | None = None):
    """The paper's softmax model: rank >= target proved on the free columns of the gauge at the
    rational point (`gauge.gauge_split`: one pivot column per GL tangent dropped) by
    `ball.prove_rank_on_columns`, without the float Jacobian or its SVD; None where the gauge
    does not apply or leaves other than `target` columns.

    Why these columns: with the GL tangents in ker J (checked here by covectors g^T J, as the
    numerical engine checks them, `GaugeSplit.leak`), J[:, free] determines J, so rank J =
    rank J[:, free]; when that is the upper bound, the minor sought lies in these columns. The
    proof itself (a minor proved nonsingular) holds whatever columns are chosen. The kernel check
    is the defence `certify_rank`'s float-rank check gives the float path: a tangent outside the
    kernel (a bug) would let rank J exceed the upper bound, which is refused."""
    from .gauge import gauge_split  # noqa: PLC0415
    from .verified import verified_block_jacobian, verified_nonsingular  # noqa: PLC0415
    from .ball import prove_rank_on_columns  # noqa: PLC0415

    split = gauge_split(arch, layer_weights_of(arch, blocks))
    if split is None or split.free.numel() != target:
        return None
    leak = split.leak(arch, flatten_blocks(arch, blocks), X[:2])
    if leak > _MAX_LEAK:
        raise ComputationError(f"a symmetry tangent is not in the kernel of the float Jacobian "
                               f"(leak {leak:.1e}): the upper bound would be unsound (a bug; "
                               "please report it); rerun with --debug")
    rows = list(range(X.shape[0] * arch.output_width * arch.tokens))
    return prove_rank_on_columns(lambda cols: verified_block_jacobian(arch, blocks, X, rows, cols),
                                 split.free.tolist(), verified_nonsingular, progress,
                                 "gauge-free ")


def _check_kernel(arch: Architecture, blocks: dict[str, torch.Tensor], J: torch.Tensor) -> None:
    """Every catalogue tangent at the float point lies in the float Jacobian's kernel."""
    tangents, _ = tangent_rows(arch, blocks, FLOAT_OPS)
    if not tangents.shape[0]:
        return
    image = J @ tangents.T
    scale = float(J.abs().max()) * max(1.0, float(tangents.abs().max()))
    if float(image.abs().max()) > _MAX_LEAK * scale:
        raise ComputationError("a symmetry tangent is not in the kernel of the float Jacobian: "
                               "the upper bound would be unsound (a bug; please report it); "
                               "rerun with --debug")
