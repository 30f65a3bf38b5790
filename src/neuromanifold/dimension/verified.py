"""Verified float64 arithmetic for the one map, and a rank certificate proved in floating point
(docs/verified.md).

The certified engine's ball path (`ball_dual.BallDual`) runs `core.blocks.block_forward` over
numpy object arrays of arb balls, one Python call per entry. This module runs the same map in
*mid-rad* float64 tensors (`Interval`: a midpoint tensor and a radius tensor, the exact value
within radius of the midpoint, entrywise), vectorised over the samples and the tangent
directions, in forward mode (`VerifiedDual`, a value and its tangents, as `BallDual`), and proves
an r x r minor of the Jacobian nonsingular from one approximate inverse (`verified_nonsingular`).

Error model (every bound is applied where it is used, below):

- IEEE 754 binary64 with round-to-nearest: fl(a op b) = (a op b)(1 + d), |d| <= u = 2^-53, for
  + - * / and sqrt (correctly rounded), unless the result underflows. An underflowing or
  flushed-to-zero result is within ETA = 2^-1022 of the exact one: ETA is added to every radius
  (it also covers a flush-to-zero mode; `check_float_model` refuses a machine that reads
  subnormal inputs as zero, which no additive term covers).
- A product of matrices with inner length n, in any summation order, blocked or with fused
  multiply-adds (BLAS, cuBLAS): |fl(A B) - A B| <= gamma_n |A| |B| + n ETA, gamma_n =
  n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.5
  and section 3.5 for the matrix form; the underflow term from section 2.1). A sum of n terms is
  a product with a vector of ones.
- Radii are nonnegative sums and products, each rounded *upward* by `up` (torch.nextafter towards
  +inf of the round-to-nearest result: the exact value is within half an ulp of it, below the
  next float). A nonnegative product computed by BLAS is at least (1 - gamma_n) times its exact
  value, less n ETA: every such bound is divided by (1 - gamma_n) (the factor `_k(n)`).
- exp, erf, tanh and the rotary angles' cos and sin are not taken from torch or the CUDA math
  library: they are evaluated in arb (python-flint) on the ball of each entry, which is rigorous,
  and the result's endpoints are rounded outward to float64. Their cost is one arb call per entry
  of the *value* (the tangents only multiply by the derivative's enclosure).
- The point and inputs are float64 numbers, read as the exact rationals they store; constants
  of the map (the temperature, 1/d, a norm's epsilon as the decimal it is written as, a float
  embedding scale) are intervals that contain them.

What is proved: every exact value and tangent of the map at the rational point lies in its
interval; a minor M whose interval matrix [mid +- rad] satisfies ||I - X M'||_inf < 1 for every M'
in it (bounded above from the computed product, its rounding bound and |X| rad) is nonsingular
for all of them (a Neumann series), so the exact Jacobian has rank >= r. Where an enclosure cannot
be given (a relu whose input interval contains 0, a division or square root by an interval
reaching 0), `UndecidedBall` is raised and the ball path decides instead.
"""

from __future__ import annotations

import math
from fractions import Fraction

import flint
import torch

from ..core.architecture import Architecture, block_layout
from ..core.blocks import NORM_EPS, Dual, block_forward, causal_mask
from ..core.positions import rotary_fractions
from ..errors import ComputationError
from .ball import UndecidedBall

U = 2.0 ** -53          # unit round-off of binary64, round-to-nearest
ETA = 2.0 ** -1022      # an underflow's (or a flush-to-zero's) absolute error: the smallest normal
_INF = math.inf


def gamma(n: int) -> float:
    """An upper bound (float) on gamma_n = n u / (1 - n u); n u must stay below 1/100."""
    if n * U >= 0.01:
        raise ComputationError(f"an inner length of {n} is too long for the verified float "
                               "arithmetic's a priori bound (n u >= 1/100)")
    return (n * U / (1 - n * U)) * (1 + 1e-6)   # the computed quotient errs by a few u at most


def _k(n: int) -> float:
    """An upper bound on 1 / (1 - gamma_n): a nonnegative float product times it bounds the
    exact product from above."""
    return (1 / (1 - gamma(n))) * (1 + 1e-6)


_UP = 1.0 + 2.0 ** -52


def up(x: torch.Tensor) -> torch.Tensor:
    """For x >= 0 (radii and other nonnegative bounds): a float above the exact result of the
    one round-to-nearest operation that produced x. That result is within half an ulp of x and
    ulp(x) <= 2u x for a normal x, so x (1 + 2u) >= x + ulp(x), a float, and its rounding stays
    at or above it (rounding is monotone); ETA covers x subnormal or 0. Two vector operations,
    where `torch.nextafter` costs several times more."""
    return x * _UP + ETA


def up_any(x: torch.Tensor) -> torch.Tensor:
    """The next float above each entry (either sign)."""
    return torch.nextafter(x, torch.full_like(x, _INF))


def down(x: torch.Tensor) -> torch.Tensor:
    """The next float below each entry (either sign)."""
    return torch.nextafter(x, torch.full_like(x, -_INF))


def check_float_model(device: torch.device | str = "cpu") -> None:
    """Refuse (ComputationError) a device whose float64 products read subnormal inputs as zero
    (denormals-are-zero): the error model's underflow term assumes they are honoured."""
    tiny = torch.tensor([[2.0 ** -1070]], dtype=torch.float64, device=device)
    one = torch.ones((1, 1), dtype=torch.float64, device=device)
    # a product large enough to go through BLAS and its threads, of subnormal inputs
    wide = torch.full((96, 96), 2.0 ** -1070, dtype=torch.float64, device=device)
    ones = torch.ones((96, 96), dtype=torch.float64, device=device)
    if float((tiny * one)[0, 0]) == 0.0 or float((tiny @ one)[0, 0]) == 0.0 \
            or float((wide @ ones).min()) == 0.0:
        raise ComputationError("this device's float64 arithmetic reads subnormal numbers as zero; "
                               "the verified arithmetic's error model does not hold here (use "
                               "the ball engine: --method certified on the CPU)")


class Interval:
    """An enclosure in mid-rad form: the exact values lie in [m - r, m + r] entrywise (r >= 0)."""

    __slots__ = ("m", "r")

    def __init__(self, m: torch.Tensor, r: torch.Tensor | None = None):
        self.m = m
        self.r = torch.zeros_like(m) if r is None else r

    @property
    def shape(self):
        return self.m.shape

    def __getitem__(self, index):
        return Interval(self.m[index], self.r[index])

    def lo(self) -> torch.Tensor:
        return down(self.m - self.r)

    def hi(self) -> torch.Tensor:
        return up_any(self.m + self.r)

    def contains(self, values: torch.Tensor) -> bool:
        """True when every entry of `values` (floats) lies in the enclosure."""
        return bool(((values >= self.lo()) & (values <= self.hi())).all())


def exact(m: torch.Tensor) -> Interval:
    """Floats that are the exact values (radius 0)."""
    return Interval(m, torch.zeros_like(m))


def from_bounds(lo: torch.Tensor, hi: torch.Tensor) -> Interval:
    """The mid-rad enclosure of [lo, hi] (lo <= hi, floats)."""
    m = 0.5 * lo + 0.5 * hi              # no overflow; each half exact unless it underflows
    r = up(torch.maximum(up(hi - m), up(m - lo))) + ETA
    return Interval(m, r)


def _rounding(m: torch.Tensor) -> torch.Tensor:
    """An upper bound on the rounding error of one operation that returned m: u |m| + ETA."""
    return up(U * m.abs()) + ETA


def _inflate(c: torch.Tensor, k: int) -> torch.Tensor:
    """An upper bound on the exact value of a nonnegative expression that `c` computed with at
    most k roundings (each relative u, or absolute ETA on underflow), in place on c (a fresh
    temporary): c >= exact (1 - u)^k - k ETA, so exact <= (c + k ETA)(1 + 2 k u) for k u <= 1/10;
    the factor 1 + (2k + 6) u and (k + 2) ETA also cover the two roundings of this step.
    Precondition (true at every call here): no rounded result that may have underflowed is later
    multiplied by a factor above about 1 (the multipliers after a rounding are gamma_n, K_n or
    sums of nonnegative terms; additions never underflow)."""
    return c.mul_(1.0 + (2 * k + 6) * U).add_((k + 2) * ETA)


def add(a: Interval, b: Interval) -> Interval:
    """a + b: the radii's sum and the rounding u |m| of the midpoint (3 roundings)."""
    m = a.m + b.m
    r = a.r + b.r
    return Interval(m, _inflate(r.add_(m.abs().mul_(U)), 3))


def neg(a: Interval) -> Interval:
    return Interval(-a.m, a.r)


def sub(a: Interval, b: Interval) -> Interval:
    return add(a, neg(b))


def mul(a: Interval, b: Interval) -> Interval:
    """Entrywise a b (broadcasting): |a b - ma mb| <= |ma| rb + ra (|mb| + rb), plus the rounding
    u |m| of the midpoint (6 roundings)."""
    m = a.m * b.m
    r = a.m.abs() * b.r
    r = r.add_(a.r * (b.m.abs() + b.r)).add_(m.abs().mul_(U)) if r.shape == m.shape else \
        (r + a.r * (b.m.abs() + b.r)).add_(m.abs().mul_(U))
    return Interval(m, _inflate(r, 6))


def scale_exact(a: Interval, c) -> Interval:
    """a times an exact float constant or tensor c (a mask of 0 and 1, a power of two, ...)."""
    c = torch.as_tensor(c, dtype=a.m.dtype, device=a.m.device)
    m = a.m * c
    r = a.r * c.abs()
    r = r.add_(m.abs().mul_(U)) if r.shape == m.shape else r + m.abs().mul_(U)
    return Interval(m, _inflate(r, 3))


def _labels(term: str, shape: tuple[int, ...]) -> dict[str, int]:
    """Label -> size for one einsum operand (an ellipsis stands for the dimensions between its
    named prefix and suffix)."""
    prefix, _, suffix = term.partition("...")
    if "..." not in term:
        prefix, suffix = term, ""
    sizes = dict(zip(prefix, shape[:len(prefix)]))
    sizes.update(zip(suffix, shape[len(shape) - len(suffix):]))
    return sizes


def _contracted_length(spec: str, shape: tuple[int, ...], other: tuple[int, ...]) -> int:
    """The number of terms each output entry of `spec` sums: the product over the summed labels
    of their size, the larger of the two operands' (torch broadcasts a size 1 against it)."""
    inputs, out = spec.split("->")
    left, right = inputs.split(",")
    a, b = _labels(left, shape), _labels(right, other)
    contracted = [c for c in a if c in b and c not in out]
    return max(1, math.prod(max(a[c], b[c]) for c in contracted))


def einsum(spec: str, a: Interval, b: Interval) -> Interval:
    """An enclosure of einsum(spec, A, B) for every A in a and B in b (one contracted set of
    indices of total length n): the midpoint product, gamma_n |ma| |mb| + n ETA for its rounding,
    and |ma| rb + ra (|mb| + rb) for the radii; every nonnegative product divided by 1 - gamma_n."""
    n = _contracted_length(spec, a.m.shape, b.m.shape)
    m = torch.einsum(spec, a.m, b.m)
    am, bm = a.m.abs(), b.m.abs()
    # each nonnegative product below is >= (1 - gamma_n) times its exact value, less n ETA:
    # the exact radius is <= K_n (gamma_n S3 + S1 + S2) + 4 n ETA (K_n = 1 / (1 - gamma_n)),
    # computed with 6 more roundings (the sum |mb| + rb inside S2 included)
    r = torch.einsum(spec, am, bm).mul_(gamma(n))
    if bool(b.r.any()):
        r = r.add_(torch.einsum(spec, am, b.r))
    if bool(a.r.any()):
        r = r.add_(torch.einsum(spec, a.r, bm + b.r))
    return Interval(m, _inflate(r.mul_(_k(n)).add_(5 * n * ETA), 6))


def total(a: Interval, dim: int, keepdim: bool = True) -> Interval:
    """The sum over one axis: a product with ones (gamma_n |a| + n ETA)."""
    n = a.m.shape[dim]
    m = a.m.sum(dim=dim, keepdim=keepdim)
    r = a.m.abs().sum(dim=dim, keepdim=keepdim).mul_(gamma(n)).add_(a.r.sum(dim=dim, keepdim=keepdim))
    return Interval(m, _inflate(r.mul_(_k(n)).add_(5 * n * ETA), 4))


def reciprocal(a: Interval) -> Interval:
    """1 / a for an interval that excludes 0 (else UndecidedBall): the endpoints' reciprocals
    rounded outward (IEEE division is correctly rounded)."""
    lo, hi = a.lo(), a.hi()
    positive, negative = lo > 0, hi < 0
    if not bool((positive | negative).all()):
        raise UndecidedBall("a divisor's interval contains 0")
    one = torch.ones_like(lo)
    # 1/hi <= 1/a <= 1/lo on either side of 0 (lo <= hi < 0 too)
    return from_bounds(down(one / hi), up_any(one / lo))


def sqrt(a: Interval) -> Interval:
    """sqrt of a positive interval (else UndecidedBall); IEEE sqrt is correctly rounded."""
    lo = a.lo()
    if not bool((lo > 0).all()):
        raise UndecidedBall("a square root's interval reaches 0")
    return from_bounds(down(torch.sqrt(lo)), up_any(torch.sqrt(a.hi())))


def constant(value) -> Interval:
    """An enclosure of a real constant given as a Fraction, int, decimal string or float (a
    float is the rational it stores)."""
    if isinstance(value, str):
        value = Fraction(value)
    if isinstance(value, float):
        return exact(torch.tensor(value, dtype=torch.float64))
    value = Fraction(value)
    f = torch.tensor(float(value), dtype=torch.float64)
    if Fraction(float(value)) == value:
        return exact(f)
    return from_bounds(down(f), up_any(f))   # float() rounds to nearest: the value is within


def _to_device(a: Interval, like: torch.Tensor) -> Interval:
    return Interval(a.m.to(like.device), a.r.to(like.device))


def arb_map(a: Interval, fn) -> tuple[Interval, ...]:
    """Enclosures of fn's outputs (arb balls -> tuple of arb balls) on every entry's ball:
    rigorous by arb, the endpoints rounded outward to float64. One arb call per entry."""
    mids = a.m.detach().cpu().numpy().ravel()
    rads = a.r.detach().cpu().numpy().ravel()
    results = [fn(flint.arb(float(m), float(r))) for m, r in zip(mids, rads)]
    count = len(results[0]) if results else 1
    outs = []
    for j in range(count):
        lo = torch.tensor([float(res[j].lower()) for res in results], dtype=torch.float64)
        hi = torch.tensor([float(res[j].upper()) for res in results], dtype=torch.float64)
        if not (bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all())):
            raise UndecidedBall("an elementary function's enclosure is not finite")
        # float(arf) rounds to nearest: one step outward contains the endpoint
        enc = from_bounds(down(lo), up_any(hi))
        outs.append(Interval(enc.m.reshape(a.shape).to(a.m.device),
                             enc.r.reshape(a.shape).to(a.m.device)))
    return tuple(outs)


# ------------------------------------------------------------------- forward mode on the map

class VParam:
    """A parameter block at the rational point (exact floats) with its part of the chosen
    directions: unit directions as `seeds`, (j, row, column) for each direction j that is its
    entry (row, column); or dense directions as `dx`, a tensor (k, rows, columns) of floats
    (exact: the directions are float vectors, read as the rationals they store)."""

    __slots__ = ("x", "seeds", "dx")

    def __init__(self, x: torch.Tensor, seeds: list[tuple[int, int, int]],
                 dx: torch.Tensor | None = None):
        self.x, self.seeds, self.dx = x, seeds, dx


def _lift(d: torch.Tensor, ndim: int) -> Interval:
    """A block's dense directions (k, r, c) as an exact interval broadcasting against tangents
    of `ndim` axes (k, ..., r, c)."""
    return exact(d.reshape(d.shape[0], *([1] * (ndim - 3)), *d.shape[1:]))


def _plus(a: Interval | None, b: Interval | None) -> Interval | None:
    return b if a is None else a if b is None else add(a, b)


class VerifiedDual:
    """The block map's primitives (`core.blocks.ArrayArithmetic` lists them) on `Dual`s of
    `Interval`s, batched: a value (..., d, t) over the samples and its k tangents (k, ..., d, t)
    along the chosen parameter directions, with the explicit derivatives of softmax (causal: over
    j <= i), the norms, the activations, the causal mask, bias columns, embeddings and rotary
    positions. Parameters are `VParam`s; their directions enter where the block is used."""

    def __init__(self, k: int, like: torch.Tensor):
        self.k = k
        self.like = like

    # -- helpers
    def _zeros(self, shape) -> Interval:
        return exact(torch.zeros((self.k,) + tuple(shape), dtype=torch.float64,
                                 device=self.like.device))

    def _seeded(self, shape, seeds, source: Interval | None, unit_column: bool | None = None):
        """The tangent (k, ..., o, t) that the unit directions of a block contribute: entry
        (j, ..., row, :) = source[..., col, :] (a linear map's dM Z), or ones (a bias)."""
        t = self._zeros(shape)
        for j, row, col in seeds:
            if source is None:
                if unit_column:
                    t.m[j, ..., row, :] = 1.0
                else:
                    t.m[j, ..., row, col] = 1.0
            else:
                t.m[j, ..., row, :] = source.m[..., col, :]
                t.r[j, ..., row, :] = source.r[..., col, :]
        return t

    @staticmethod
    def _const(M: VParam) -> Interval:
        return exact(M.x)

    # -- primitives
    def linear(self, M: VParam, Z: Dual) -> Dual:
        """M Z, with dM = the unit directions M owns."""
        A = self._const(M)
        value = einsum("od,...dt->...ot", A, Z.x)
        dx = None if Z.dx is None else einsum("od,k...dt->k...ot", A, Z.dx)
        if M.seeds:
            dx = _plus(dx, self._seeded(value.shape, M.seeds, Z.x))
        if M.dx is not None:
            dx = _plus(dx, einsum("kod,...dt->k...ot", exact(M.dx), Z.x))
        return Dual(value, dx)

    def scores(self, q: Dual, k: Dual) -> Dual:
        value = einsum("...aj,...ai->...ji", q.x, k.x)
        dx = None
        if q.dx is not None:
            dx = einsum("k...aj,...ai->k...ji", q.dx, k.x)
        if k.dx is not None:
            dx = _plus(dx, einsum("...aj,k...ai->k...ji", q.x, k.dx))
        return Dual(value, dx)

    def softmax(self, L: Dual, temperature: float, causal: bool = False) -> Dual:
        """Column softmax over j (axis -2): dS = S (dL - sum_j S dL), L read over tau; causal: over
        j <= i, exactly 0 elsewhere. exp in arb on each entry's interval."""
        inv_tau = _to_device(reciprocal(constant(float(temperature))), L.x.m)
        Lt = mul(L.x, inv_tau)
        keep = (torch.from_numpy(causal_mask(Lt.shape[-1])).to(Lt.m.device).bool() if causal
                else torch.ones(Lt.shape[-2:], dtype=torch.bool, device=Lt.m.device))
        # an exact float shift (any shift cancels), the max over the kept entries only
        shift = Lt.m.masked_fill(~keep, -_INF).max(dim=-2, keepdim=True).values
        arg = sub(Lt, exact(shift.expand_as(Lt.m).clone()))
        arg = Interval(torch.where(keep, arg.m, torch.zeros_like(arg.m)),   # masked: exp(0), then 0
                       torch.where(keep, arg.r, torch.zeros_like(arg.r)))
        (E,) = arb_map(arg, lambda x: (x.exp(),))
        if causal:
            E = Interval(torch.where(keep, E.m, torch.zeros_like(E.m)),
                         torch.where(keep, E.r, torch.zeros_like(E.r)))
        S = mul(E, reciprocal(total(E, -2)))
        if L.dx is None:
            return Dual(S, None)
        dL = mul(L.dx, inv_tau)
        inner = total(mul(S, dL), -2)                          # sum over j (axis -2)
        return Dual(S, mul(S, sub(dL, inner)))

    def mix(self, values: Dual, scores: Dual) -> Dual:
        value = einsum("...ej,...ji->...ei", values.x, scores.x)
        dx = None
        if values.dx is not None:
            dx = einsum("k...ej,...ji->k...ei", values.dx, scores.x)
        if scores.dx is not None:
            dx = _plus(dx, einsum("...ej,k...ji->k...ei", values.x, scores.dx))
        return Dual(value, dx)

    def add(self, A: Dual, B: Dual) -> Dual:
        return Dual(add(A.x, B.x), _plus(A.dx, B.dx))

    def mask(self, A: Dual) -> Dual:
        m = torch.from_numpy(causal_mask(A.x.shape[-1])).to(dtype=torch.float64, device=A.x.m.device)
        return Dual(scale_exact(A.x, m), None if A.dx is None else scale_exact(A.dx, m))

    def shift(self, A: Dual, b: VParam) -> Dual:
        value = add(A.x, self._const(b))
        dx = A.dx
        if b.seeds:
            dx = _plus(dx, self._seeded(value.shape, b.seeds, None, unit_column=b.x.shape[1] == 1))
        if b.dx is not None:
            lifted = _lift(b.dx, value.m.ndim + 1)
            dx = (Interval(lifted.m.expand((self.k,) + tuple(value.shape)).clone(),
                           torch.zeros((self.k,) + tuple(value.shape), dtype=torch.float64,
                                       device=value.m.device))
                  if dx is None else add(dx, lifted))
        return Dual(value, dx)

    def scale(self, A: Dual, c: float) -> Dual:
        C = _to_device(constant(float(c)), A.x.m)
        return Dual(mul(A.x, C), None if A.dx is None else mul(A.dx, C))

    def mul(self, A: Dual, B: Dual) -> Dual:
        dx = None
        if A.dx is not None:
            dx = mul(A.dx, B.x)
        if B.dx is not None:
            dx = _plus(dx, mul(A.x, B.dx))
        return Dual(mul(A.x, B.x), dx)

    def embed(self, E: VParam, X: Dual) -> Dual:
        """E^T X (one-hot token columns), with dE = the unit directions E owns."""
        value = einsum("vd,...vt->...dt", self._const(E), X.x)
        dx = None
        if E.seeds:
            dx = self._zeros(value.shape)
            for j, row, col in E.seeds:       # d(E^T X)[c, :] = X[r, :] for the entry (r, c)
                dx.m[j, ..., col, :] = X.x.m[..., row, :]
                dx.r[j, ..., col, :] = X.x.r[..., row, :]
        if E.dx is not None:
            dx = _plus(dx, einsum("kvd,...vt->k...dt", exact(E.dx), X.x))
        return Dual(value, dx)

    def rotate(self, x: Dual, pairs: int, base: float | None = None) -> Dual:
        """Token i's column times R^i: the rational rotations enclosed entrywise; with a `base`,
        cos and sin of i theta_f enclosed in arb."""
        a, t = x.x.shape[-2], x.x.shape[-1]
        R = _rotations(a, pairs, t, base, x.x.m)
        value = einsum("iab,...bi->...ai", R, x.x)
        return Dual(value, None if x.dx is None else einsum("iab,k...bi->k...ai", R, x.dx))

    def norm(self, Z: Dual, gain: VParam, kind: str, eps: float = NORM_EPS) -> Dual:
        """g * N(Z) per token, eps as an interval containing the decimal it is written as."""
        d = Z.x.shape[-2]
        inv_d = _to_device(constant(Fraction(1, d)), Z.x.m)
        e = _to_device(constant(Fraction(repr(float(eps)))), Z.x.m)
        c, dc = Z.x, Z.dx
        if kind == "layernorm":
            c = sub(c, mul(total(c, -2), inv_d))
            if dc is not None:
                dc = sub(dc, mul(total(dc, -2), inv_d))
        v = add(mul(total(mul(c, c), -2), inv_d), e)
        s = reciprocal(sqrt(v))
        hat = mul(c, s)
        g = self._const(gain)
        value = mul(g, hat)
        dx = None
        if dc is not None:
            ds = neg(mul(mul(s, reciprocal(v)), mul(total(mul(c, dc), -2), inv_d)))
            dx = mul(g, add(mul(dc, s), mul(c, ds)))
        if gain.seeds:                  # d(g * hat) / d g_row = hat's row `row`
            seeded = self._zeros(value.shape)
            for j, row, _ in gain.seeds:
                seeded.m[j, ..., row, :] = hat.m[..., row, :]
                seeded.r[j, ..., row, :] = hat.r[..., row, :]
            dx = _plus(dx, seeded)
        if gain.dx is not None:
            dx = _plus(dx, mul(_lift(gain.dx, value.m.ndim + 1), hat))
        return Dual(value, dx)

    def activate(self, A: Dual, kind: str) -> Dual:
        """s(A) entrywise with s'(A): square exactly, relu where the sign is decided, gelu (erf),
        silu, gelu_tanh and tanh in arb."""
        x = A.x
        if kind == "square":
            value, slope = mul(x, x), scale_exact(x, 2.0)
        elif kind == "relu":
            lo, hi = x.lo(), x.hi()
            if not bool(((lo > 0) | (hi < 0)).all()):
                raise UndecidedBall("a relu input interval contains 0 (no derivative decided)")
            on = (lo > 0).to(torch.float64)
            value, slope = scale_exact(x, on), exact(on)
        else:
            value, slope = arb_map(x, _ACTIVATIONS[kind])
        return Dual(value, None if A.dx is None else mul(A.dx, slope))


def _gelu(x):
    cdf = (1 + (x / flint.arb(2).sqrt()).erf()) / 2
    return x * cdf, cdf + x * (-(x * x) / 2).exp() / (2 * flint.arb.pi()).sqrt()


def _silu(x):
    sig = 1 / (1 + (-x).exp())
    return x * sig, sig + x * sig * (1 - sig)


def _gelu_tanh(x):
    c, k3 = (2 / flint.arb.pi()).sqrt(), flint.arb(44715) / 10 ** 6
    th = (c * (x + k3 * x * x * x)).tanh()
    return x * (1 + th) / 2, (1 + th) / 2 + x * (1 - th * th) * c * (1 + 3 * k3 * x * x) / 2


def _tanh(x):
    th = x.tanh()
    return th, 1 - th * th


_ACTIVATIONS = {"gelu": _gelu, "silu": _silu, "gelu_tanh": _gelu_tanh, "tanh": _tanh}


def _rotations(a: int, pairs: int, t: int, base: float | None, like: torch.Tensor) -> Interval:
    """R^0..R^{t-1} (t, a, a) enclosed: the exact Fractions, or arb cos/sin of i theta_f."""
    if base is None:
        mats = rotary_fractions(a, pairs, t)
        lo = torch.empty((t, a, a), dtype=torch.float64)
        hi = torch.empty((t, a, a), dtype=torch.float64)
        for i, M in enumerate(mats):
            for r, row in enumerate(M):
                for c, v in enumerate(row):
                    enc = constant(Fraction(v))
                    lo[i, r, c], hi[i, r, c] = enc.m - enc.r, enc.m + enc.r
        enc = from_bounds(down(lo), up_any(hi))
        return Interval(enc.m.to(like.device), enc.r.to(like.device))
    lo = torch.zeros((t, a, a), dtype=torch.float64)
    hi = torch.zeros((t, a, a), dtype=torch.float64)
    for i in range(t):
        for r in range(a):
            lo[i, r, r] = hi[i, r, r] = 1.0
        for f in range(pairs):
            angle = i * flint.arb(base) ** (flint.arb(-f) / pairs)
            cs, sn = angle.cos(), angle.sin()
            for (r, c), ball, sign in (((2 * f, 2 * f), cs, 1), ((2 * f, 2 * f + 1), sn, -1),
                                       ((2 * f + 1, 2 * f), sn, 1), ((2 * f + 1, 2 * f + 1), cs, 1)):
                b = ball * sign
                lo[i, r, c], hi[i, r, c] = float(b.lower()), float(b.upper())
    enc = from_bounds(down(lo), up_any(hi))
    return Interval(enc.m.to(like.device), enc.r.to(like.device))


def verified_block_forward(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                           cols: list[int]) -> tuple[Interval, Interval]:
    """phi_W(X_n) and its derivatives along parameters `cols`, enclosed: `block_forward` run in
    `VerifiedDual` on all samples at once. `blocks` and X (N, d_0, t) are float64, read as the
    exact rationals they store. Returns intervals of shape (N, d_l, t) and (k, N, d_l, t)."""
    k = len(cols)
    device = X.device
    check_float_model(device)
    params = {}
    for name, shape, offset in block_layout(arch):
        seeds = [(j, *divmod(c - offset, shape[1])) for j, c in enumerate(cols)
                 if offset <= c < offset + shape[0] * shape[1]]
        params[name] = VParam(blocks[name].to(device=device, dtype=torch.float64), seeds)
    ops = VerifiedDual(k, X)
    Z = block_forward(arch, params, Dual(exact(X.to(torch.float64)), None), arithmetic=ops)
    tangents = Z.dx if Z.dx is not None else ops._zeros(Z.x.shape)
    for part in (Z.x, tangents):
        if not (bool(torch.isfinite(part.m).all()) and bool(torch.isfinite(part.r).all())):
            raise UndecidedBall("an enclosure overflowed (inf or nan)")
    return Z.x, tangents


# Tangent directions evaluated together (memory: k N d_l t midpoints and radii per tensor).
_COLUMN_CHUNK = 256


def verified_block_jacobian(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                            rows: list[int], cols: list[int]) -> Interval:
    """J[rows, cols] of W -> (phi_W(X_n))_n enclosed (rows ordered (n, d_l, t) as
    `block_jacobian`); only the samples that own a chosen row are evaluated, the columns in
    chunks of `_COLUMN_CHUNK`."""
    per_sample = arch.output_width * arch.tokens
    samples = sorted({row // per_sample for row in rows})
    where = {n: m for m, n in enumerate(samples)}
    index = torch.tensor([where[row // per_sample] * per_sample + row % per_sample for row in rows])
    Xs = X[samples]
    mids, rads = [], []
    for start in range(0, len(cols), _COLUMN_CHUNK):
        chunk = cols[start:start + _COLUMN_CHUNK]
        _, T = verified_block_forward(arch, blocks, Xs, chunk)
        flat_m = T.m.reshape(len(chunk), -1)[:, index.to(T.m.device)]
        flat_r = T.r.reshape(len(chunk), -1)[:, index.to(T.m.device)]
        mids.append(flat_m.T)
        rads.append(flat_r.T)
    return Interval(torch.cat(mids, dim=1).cpu(), torch.cat(rads, dim=1).cpu())


def verified_projected_block(arch: Architecture, blocks: dict[str, torch.Tensor],
                             X: torch.Tensor, W: torch.Tensor, V: torch.Tensor) -> Interval:
    """W J V enclosed, for float matrices W (r x N d_l t, rows ordered (n, d_l, t) as
    `block_jacobian`) and V (n_params x k): the tangents along the dense directions V's columns
    (in chunks of `_COLUMN_CHUNK`), then the left product by W, every step enclosed. Any float
    W and V are exact rationals, so rank J >= rank (W J V) at the point."""
    W = W.to(torch.float64)
    out_m, out_r = [], []
    for start in range(0, V.shape[1], _COLUMN_CHUNK):
        D = V[:, start:start + _COLUMN_CHUNK].to(torch.float64)
        k = D.shape[1]
        check_float_model(X.device)
        params = {}
        for name, shape, offset in block_layout(arch):
            size = shape[0] * shape[1]
            dx = D[offset:offset + size].T.reshape(k, *shape).contiguous().to(X.device)
            params[name] = VParam(blocks[name].to(device=X.device, dtype=torch.float64), [], dx)
        ops = VerifiedDual(k, X)
        Z = block_forward(arch, params, Dual(exact(X.to(torch.float64)), None), arithmetic=ops)
        T = Z.dx if Z.dx is not None else ops._zeros(Z.x.shape)
        if not (bool(torch.isfinite(T.m).all()) and bool(torch.isfinite(T.r).all())):
            raise UndecidedBall("an enclosure overflowed (inf or nan)")
        flat = Interval(T.m.reshape(k, -1), T.r.reshape(k, -1))
        block = einsum("rm,km->rk", exact(W.to(X.device)), flat)
        if not (bool(torch.isfinite(block.m).all()) and bool(torch.isfinite(block.r).all())):
            raise UndecidedBall("an enclosure overflowed (inf or nan)")
        out_m.append(block.m.cpu())
        out_r.append(block.r.cpu())
    return Interval(torch.cat(out_m, dim=1), torch.cat(out_r, dim=1))


def verified_nonsingular(block: Interval) -> tuple[bool, float]:
    """(proved, bound): proved when ||I - X M||_inf < 1 for every M in the interval matrix
    `block` (r x r), X a float approximate inverse of its midpoint; then every such M, the
    exact minor among them, is nonsingular. `bound` is the rigorous upper bound on the norm.

    Bound: |I - X M| <= |I - fl(X Mm)| + gamma_r |X| |Mm| + r ETA + |X| Mr entrywise, so each
    row sum of |I - X M| is at most the row sum of |I - fl(X Mm)| plus (|X| t)_i + r^2 ETA, with
    t = (gamma_r |Mm| + Mr) 1 the row sums of the radii: |X| T 1 = |X| (T 1) for T >= 0, so one
    matrix-vector product (not a second r x r x r product) gives the spread's row sums. Every
    nonnegative sum and product is rounded upward and divided by 1 - gamma_r (`_k`)."""
    Mm, Mr = block.m, block.r
    r = Mm.shape[0]
    if r == 0:
        return True, 0.0
    check_float_model(Mm.device)
    if not (bool(torch.isfinite(Mm).all()) and bool(torch.isfinite(Mr).all())):
        return False, math.inf
    try:
        X = torch.linalg.inv(Mm)
    except RuntimeError:
        return False, math.inf
    if not bool(torch.isfinite(X).all()):
        return False, math.inf
    C = X @ Mm
    eye = torch.eye(r, dtype=torch.float64, device=Mm.device)
    residual = up((eye - C).abs() + _rounding(eye - C))      # the subtraction's rounding
    absX = X.abs()
    T = up(up(gamma(r) * Mm.abs()) + Mr)                       # gamma_r |Mm| + Mr, entrywise
    t = up(_k(r) * up(T.sum(dim=1) + 4 * r * ETA))            # >= T 1 (its row sums)
    spread = up(_k(r) * up(absX @ t + 4 * r * ETA))           # >= |X| T 1, row by row
    res = up(_k(r) * up(residual.sum(dim=1) + 4 * r * ETA))   # >= the residual's row sums
    rows = up(up(res + spread) + 8 * r * r * ETA)             # + r ETA per entry of fl(X Mm)
    bound = float(rows.max())
    return bool(bound < 1.0), bound


__all__ = ["Interval", "VerifiedDual", "VParam", "verified_block_forward",
           "verified_block_jacobian", "verified_projected_block", "verified_nonsingular", "check_float_model", "gamma", "U",
           "ETA"]
