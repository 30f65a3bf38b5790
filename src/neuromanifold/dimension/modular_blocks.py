"""Exact (F_p) and certified dimensions of polynomial block networks (docs/blocks.md).

Polynomial blocks: lightning attention, square activation (or no MLP), no norm. The forward
pass is evaluated over F_p together with its derivative in every parameter direction at once
(forward mode: value and tangent pairs, product rule after every product), so one pass gives
the whole Jacobian J of W -> (phi_W(X_1), ..., phi_W(X_N)) mod p; no floating point is used.
Its exact rank is a proven lower bound on the dimension; the catalogue's tangents, taken mod p
at the same point, give the upper bound n_params - rank_p(tangents), and for one layer the
ambient bound of `catalogue.ambient_bound` gives a second one.

The map is `core.blocks.block_forward` itself, run in the `FpDual` arithmetic (its primitives
reduce every product mod p); tests/test_blocks.py checks the result against the float64 map on
integer weights.
"""

from __future__ import annotations

import math
import time

import torch

from ..core.architecture import Architecture
from ..core.formulas import block_formula
from ..core.blocks import Dual, block_forward, block_layout
from ..core.catalogue import FAMILIES, TangentOps, ambient_bound, tangent_rows
from ..core.checks import bad_value, check_int, check_seed
from ..core.seeds import seeded_generator
from ..errors import ComputationError
from .growth import grow_samples
from .fp import (DEFAULT_PRIME, check_prime, inverse_mod_p, nullspace_mod_p, pivot_columns_mod_p,
                 rank_mod_p)
from .modular import check_word_prime, matmul_mod, random_residues
from .result import DimensionResult, Progress

# int64 entries of the tangent intermediates allowed at once (about 8 bytes each).
_CHUNK_ENTRIES = 16 * 2 ** 20
# Measurements of the exact block rank before it stops (status `stopped`): each round adds half
# of N, and a generic rank is met within two or three.
_MAX_ROUNDS = 6


def fp_ops(p: int) -> TangentOps:
    """The catalogue's arithmetic over F_p."""
    def inv(M: torch.Tensor) -> torch.Tensor:
        out = inverse_mod_p(M.numpy(), p)
        if out is None:
            raise ComputationError("a weight matrix is singular mod p at this random point "
                                   "(probability about 1/p); rerun with another --seed.")
        return torch.from_numpy(out)

    def kernel(M: torch.Tensor) -> torch.Tensor | None:
        if rank_mod_p(M.numpy(), p) != min(M.shape):
            return None
        return torch.from_numpy(nullspace_mod_p(M.numpy(), p))

    return TangentOps(mm=lambda A, B: matmul_mod(A, B, p), add=lambda A, B: (A + B).remainder(p),
                      neg=lambda x: (-x).remainder(p), inv=inv,
                      times=lambda c, x: (c * x).remainder(p), kernel=kernel)


def random_blocks_mod_p(arch: Architecture, p: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Uniformly random named blocks over F_p, in layout order."""
    return {name: random_residues(shape, p, gen) for name, shape, _ in block_layout(arch)}


def _mm(A: Dual, B: Dual, p: int) -> Dual:
    """(A B, dA B + A dB) mod p; tangents broadcast over the leading direction axis."""
    x = matmul_mod(A.x, B.x, p)
    parts = [matmul_mod(A.dx, B.x, p) if A.dx is not None else None,
             matmul_mod(A.x, B.dx, p) if B.dx is not None else None]
    parts = [t for t in parts if t is not None]
    dx = None if not parts else (parts[0] if len(parts) == 1 else (parts[0] + parts[1]).remainder_(p))
    return Dual(x, dx)


def _t(A: Dual) -> Dual:
    return Dual(A.x.transpose(-1, -2), None if A.dx is None else A.dx.transpose(-1, -2))


class FpDual:
    """The block map's primitives over F_p in forward mode (`core.blocks.ArrayArithmetic` lists
    them): int64 residue tensors with their tangents, the product rule after every product.
    Polynomial networks only (lightning, square MLPs, no norm): softmax and norms are not
    polynomial and are never asked of it."""

    def __init__(self, p: int):
        self.p = p

    def linear(self, M: Dual, Z: Dual) -> Dual:
        return _mm(M, Z, self.p)

    def scores(self, q: Dual, k: Dual) -> Dual:
        return _mm(_t(q), k, self.p)

    def mix(self, values: Dual, scores: Dual) -> Dual:
        return _mm(values, scores, self.p)

    def add(self, A: Dual, B: Dual) -> Dual:
        dx = B.dx if A.dx is None else A.dx if B.dx is None else (A.dx + B.dx).remainder(self.p)
        return Dual((A.x + B.x).remainder(self.p), dx)

    def activate(self, A: Dual, kind: str) -> Dual:
        """Entrywise (x^2, 2 x dx) mod p (residues < 2^31: products fit int64)."""
        p = self.p
        dx = None if A.dx is None else ((A.x * A.dx).remainder(p) * 2).remainder(p)
        return Dual((A.x * A.x).remainder(p), dx)


def forward_dual_mod_p(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor, p: int,
                       directions: tuple[int, int] | None = None) -> Dual:
    """phi_W(X) mod p and, if `directions` = (start, stop), its derivative along parameters
    start..stop-1 (shape (stop - start, N, d_l, t)): `core.blocks.block_forward` run in the
    `FpDual` arithmetic. X: (N, d_0, t) residues."""
    duals = {}
    for name, shape, offset in block_layout(arch):
        dx = None
        if directions is not None:
            start, stop = directions
            size = shape[0] * shape[1]
            lo, hi = max(start, offset), min(stop, offset + size)
            if lo < hi:
                dx = torch.zeros((stop - start, 1) + shape, dtype=torch.int64)
                idx = torch.arange(lo, hi)
                dx.view(stop - start, size)[idx - start, idx - offset] = 1
        duals[name] = Dual(blocks[name], dx)
    return block_forward(arch, duals, Dual(X, None), arithmetic=FpDual(p))


def jacobian_mod_p(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor, p: int
                   ) -> torch.Tensor:
    """J mod p, shape (N d_l t, n_params), rows ordered (n, d_l, t)."""
    per_direction = X.shape[0] * arch.tokens * (max(arch.widths + tuple(arch.mlp_widths)) + arch.tokens) \
        * 4 * sum(arch.head_counts)
    chunk = max(1, _CHUNK_ENTRIES // max(per_direction, 1))
    cols = []
    for start in range(0, arch.n_params, chunk):
        stop = min(arch.n_params, start + chunk)
        dual = forward_dual_mod_p(arch, blocks, X, p, (start, stop))
        dx = dual.dx if dual.dx is not None else torch.zeros((stop - start,) + dual.x.shape,
                                                             dtype=torch.int64)
        cols.append(dx.reshape(stop - start, -1))
    return torch.cat(cols).T.contiguous()


def degree_bound(arch: Architecture) -> int:
    """Total degree in (W, X) of one entry of J: deg_W(phi) - 1 + deg_X(phi) (Schwartz-Zippel)."""
    deg_w, deg_x = 0, 1
    for i in range(arch.n_layers):
        value_degree = 1 if arch.values is None else 2
        att_w, att_x = 3 * deg_w + 2 + value_degree, 3 * deg_x
        deg_w, deg_x = (max(deg_w, att_w), max(deg_x, att_x)) if arch.residual else (att_w, att_x)
        if arch.mlp_widths[i] > 0:
            mlp_w, mlp_x = 2 * deg_w + 3, 2 * deg_x
            deg_w, deg_x = (max(deg_w, mlp_w), max(deg_x, mlp_x)) if arch.residual else (mlp_w, mlp_x)
    return deg_w - 1 + deg_x


def family_ranks_mod_p(tangents: torch.Tensor, counts, p: int) -> dict[str, int]:
    """Incremental exact rank of each catalogue family, in catalogue order."""
    ranks, start, previous = {}, 0, 0
    for family, n in counts:
        stop = start + n
        total = rank_mod_p(tangents[:stop].numpy(), p) if stop else 0
        ranks[family] = total - previous
        previous, start = total, stop
    return ranks


def block_exact_dim(arch: Architecture, *, certify: bool = True, samples: int | None = None,
                    seed: int = 0, progress: Progress | None = None,
                    prime: int = DEFAULT_PRIME) -> DimensionResult:
    """Exact rank over F_p of the block network's Jacobian at a random point; with `certify`,
    the symmetry and ambient upper bounds, `certified` when one of them meets it.

    N grows by half (`growth.grow_samples`) until the rank meets the upper bound (`certified`)
    or a batch adds no rank (`lower-bound`, with a Schwartz-Zippel probability); N fixed by
    `samples`, or `_MAX_ROUNDS` measurements, end it as `stopped` (a lower bound, no probability).
    """
    if not arch.is_polynomial:
        raise bad_value("method", "'numerical' for networks that are not polynomial", "exact",
                        "Use lightning attention, square activation and no norm, or --method numerical.")
    seed = check_seed(seed)
    p = check_word_prime(check_prime("prime", prime))
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix="Pass --samples 1 or more.")
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    gen = seeded_generator(seed, "exact")
    blocks = random_blocks_mod_p(arch, p, gen)
    notes: list[str] = []
    upper = symmetry_upper = families = None
    free = None
    t_sym = 0.0
    if certify:
        t0 = time.perf_counter()
        tangents, counts = tangent_rows(arch, blocks, fp_ops(p))
        tangents = tangents.remainder(p)
        families = family_ranks_mod_p(tangents, counts, p)
        pivots = pivot_columns_mod_p(tangents.numpy(), p) if tangents.shape[0] else []
        symmetry_upper = arch.n_params - len(pivots)
        keep = torch.ones(arch.n_params, dtype=torch.bool)
        keep[pivots] = False
        free = keep.nonzero().flatten()
        t_sym = time.perf_counter() - t0
        say(f"upper bound n_params - rank_p(tangents) = {symmetry_upper} ({t_sym:.1f} s)")
    ambient = ambient_bound(arch)
    bounds = [b for b in (symmetry_upper, ambient if certify else None) if b is not None]
    upper = min(bounds) if bounds else None
    target = arch.n_params if upper is None else upper
    rows_per_sample = arch.widths[-1] * arch.tokens
    n_target = samples or max(1, math.ceil((target + max(8, 0.05 * target)) / rows_per_sample))
    matrices: list[torch.Tensor] = []
    clock = {"jacobian": 0.0, "rank": 0.0, "n": 0}

    def add(n_done: int, n_target: int) -> None:
        t0 = time.perf_counter()
        X = random_residues((n_target - n_done, arch.widths[0], arch.tokens), p, gen)
        J = jacobian_mod_p(arch, blocks, X, p)
        if certify and not matrices and tangents.shape[0]:
            # Every tangent must lie in ker J before its columns are dropped (NOTE in exact.py).
            if bool(matmul_mod(J[:64], tangents.T.contiguous(), p).any()):
                raise ComputationError("a symmetry tangent is not in the kernel of the exact Jacobian: "
                                       "the upper bound would be unsound (a bug; please report it).")
        matrices.append(J if free is None else J[:, free])
        clock["jacobian"] += time.perf_counter() - t0
        clock["n"] = n_target

    def measure() -> int:
        t1 = time.perf_counter()
        matrix = torch.cat(matrices)
        rank = rank_mod_p(matrix.numpy(), p)
        clock["rank"] += time.perf_counter() - t1
        say(f"N = {clock['n']}: exact rank over F_p {rank} ({matrix.shape[0]} x {matrix.shape[1]})")
        return rank

    grown = grow_samples(n_target, add, measure, upper=upper, fixed=samples is not None,
                         next_target=lambda n_done, _rank: n_done + max(2, math.ceil(0.5 * n_done)),
                         max_rounds=_MAX_ROUNDS, say=say)
    rank, n_done, history = grown.rank, grown.n_done, grown.history
    t_jac, t_rank = clock["jacobian"], clock["rank"]
    certified = upper is not None and rank == upper
    saturated = grown.reason == "saturated"
    prob = 0.0 if certified else (min(1.0, target * degree_bound(arch) / p) if saturated else None)
    if certify:
        notes.append(f"upper bounds: symmetries {symmetry_upper}"
                     + (f", ambient {ambient}" if ambient is not None else ", ambient: none known"))
    if certified:
        notes.append(f"certified: exact rank over F_p {rank} meets the upper bound: a proof")
    elif upper is not None:
        notes.append(f"bounds do not meet: {rank} <= dim M <= {upper}")
    if not certified:
        notes.append(f"stopped before saturation ({grown.detail}): the rank is a lower bound "
                     "and more samples may raise it; no probability is claimed" if prob is None else
                     f"lower bound: P(dim M > {rank}) <= {prob:.1e} (Schwartz-Zippel, degree "
                     f"{degree_bound(arch)} per entry), provided the rank stopped growing")
    # As `exact.exact_dim`: a proof, a saturated lower bound, or stopped (N fixed or the round cap).
    status = "certified" if certified else ("lower-bound" if saturated else "stopped")
    formula = block_formula(arch)
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=rank,
        method="certified" if certified else "exact", status=status, formula=formula,
        conjecture=formula,
        lower_bound=rank, upper_bound=upper, n_samples=n_done, seed=seed, prime=p,
        failure_probability=prob, seconds={"symmetries": t_sym, "jacobian": t_jac, "rank": t_rank,
                                           "total": time.perf_counter() - t_start},
        rank_history=history, notes=notes, symmetries=families)
