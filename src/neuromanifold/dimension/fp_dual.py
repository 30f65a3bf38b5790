"""Forward-mode duals over F_p: the network map's Jacobian mod p for every polynomial network.

Polynomial networks: lightning attention, square activation (or no MLP), no norm. The map is
`core.blocks.block_forward` itself, run in the `FpDual` arithmetic: every value carries its
derivative in every chosen parameter direction (the product rule after every product, every
product reduced mod p), so one pass gives those columns of the Jacobian J of
W -> (phi_W(X_1), ..., phi_W(X_N)) mod p; no floating point is used. tests/core/test_blocks.py checks
the result against the float64 map on integer weights. The exact engine (`exact.exact_dim`)
reads its rank for networks beyond the paper's model, with the registry's tangents mod p
(`fp_ops`) for the upper bound.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import torch

from ..core.architecture import Architecture
from ..core.checks import bad_value
from ..core.blocks import Dual, block_forward, block_layout, causal_mask
from ..core.positions import rotary_fractions
from ..symmetries.catalogue import TangentOps
from ..errors import ComputationError
from .fp import (inverse_mod_p, nullspace_mod_p, rank_mod_p)
from .jacobians import family_ranks
from .memory import FP_DUAL_CHUNK_ENTRIES
from .modular import matmul_mod, random_residues


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


@lru_cache(maxsize=64)
def rotary_residues(a: int, pairs: int, tokens: int, p: int) -> torch.Tensor:
    """R^0..R^{t-1} (t, a, a) mod p: each rational entry n/m as n m^{-1} mod p (m a power of a
    Pythagorean hypotenuse, never 0 mod a word prime p > 2^30)."""
    out = torch.zeros((tokens, a, a), dtype=torch.int64)
    for i, M in enumerate(rotary_fractions(a, pairs, tokens)):
        for r, row in enumerate(M):
            for c, v in enumerate(row):
                v = Fraction(v)
                if v.denominator % p == 0:
                    raise ComputationError(f"a rotary denominator {v.denominator} is 0 mod {p}; "
                                           "use a larger --prime.")
                out[i, r, c] = v.numerator % p * pow(v.denominator, -1, p) % p
    return out


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

    def mask(self, A: Dual) -> Dual:
        """Causal lightning scores: A_ji times [j <= i] (the tangents too)."""
        m = torch.from_numpy(causal_mask(A.x.shape[-1]))
        return Dual(A.x * m, None if A.dx is None else A.dx * m)

    def shift(self, A: Dual, b: Dual) -> Dual:
        """A + b mod p for a parameter block b: a bias column (d x 1, added to every token) or
        learned positions (d x t); b's tangents (k, 1, d, c) are spread over the samples (and the
        tokens for a column)."""
        x = (A.x + b.x).remainder(self.p)
        if b.dx is None:
            return Dual(x, A.dx)
        db = b.dx.expand(b.dx.shape[:1] + x.shape)
        dx = db.clone() if A.dx is None else (A.dx + db).remainder(self.p)
        return Dual(x, dx)

    def mul(self, A: Dual, B: Dual) -> Dual:
        """Entrywise (a b, da b + a db) mod p (a gated MLP)."""
        p = self.p
        parts = [None if A.dx is None else (A.dx * B.x).remainder(p),
                 None if B.dx is None else (A.x * B.dx).remainder(p)]
        parts = [t for t in parts if t is not None]
        dx = None if not parts else (parts[0] if len(parts) == 1 else (parts[0] + parts[1]).remainder(p))
        return Dual((A.x * B.x).remainder(p), dx)

    def embed(self, E: Dual, X: Dual) -> Dual:
        """E^T X mod p: one-hot token columns to their embeddings."""
        return _mm(_t(E), X, self.p)

    def scale(self, A: Dual, c: float) -> Dual:  # noqa: ARG002 (refused)
        """An embedding scale is refused (sqrt(d) has no residue of a rational)."""
        raise bad_value("embed_scale", "absent over F_p", c,
                        "Use --method numerical or certified, or drop --embed-scale.")

    def rotate(self, x: Dual, pairs: int, base: float | None = None) -> Dual:
        """Token i's column times R^i mod p (rational rotary entries reduced exactly); a model's
        `base` is refused (its cosines are not rational)."""
        if base is not None:
            raise bad_value("rope_base", "absent over F_p (the base's cosines are not rational)",
                            base, "Use --method numerical or certified, or drop --rope-base.")
        a, t = x.x.shape[-2], x.x.shape[-1]
        R = rotary_residues(a, pairs, t, self.p)

        def apply(v):
            cols = v.transpose(-1, -2).unsqueeze(-1).contiguous()      # (..., t, a, 1)
            return matmul_mod(R, cols, self.p).squeeze(-1).transpose(-1, -2)

        return Dual(apply(x.x), None if x.dx is None else apply(x.dx))

    def activate(self, A: Dual, kind: str) -> Dual:  # noqa: ARG002 (x^2 is the only one)
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
    widest = max(arch.widths + tuple(arch.mlp_widths) + (arch.input_width, arch.output_width))
    per_direction = X.shape[0] * arch.tokens * (widest + arch.tokens) * 4 * sum(arch.head_counts)
    chunk = max(1, FP_DUAL_CHUNK_ENTRIES // max(per_direction, 1))
    cols = []
    for start in range(0, arch.n_params, chunk):
        stop = min(arch.n_params, start + chunk)
        dual = forward_dual_mod_p(arch, blocks, X, p, (start, stop))
        dx = dual.dx if dual.dx is not None else torch.zeros((stop - start,) + dual.x.shape,
                                                             dtype=torch.int64)
        cols.append(dx.reshape(stop - start, -1))
    return torch.cat(cols).T.contiguous()


def degree_bound(arch: Architecture) -> int:
    """Total degree in (W, X) of one entry of J: deg_W(phi) - 1 + deg_X(phi) (Schwartz-Zippel),
    from `Architecture.polynomial_degrees`."""
    deg_w, deg_x = arch.polynomial_degrees()
    return deg_w - 1 + deg_x


def family_ranks_mod_p(tangents: torch.Tensor, counts, p: int) -> dict[str, int]:
    """Incremental exact rank of each catalogue family, in catalogue order."""
    return family_ranks(tangents, counts, lambda M: rank_mod_p(M.numpy(), p))
