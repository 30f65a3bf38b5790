"""Budgets of the degree and equations engines: a deadline every phase polls, and the memory of
each phase bounded from the architecture before the phase starts (docs/degree.md, "Limits").

Math (term bounds). Group the variables of a polynomial map (the input entries X, or the
weights of each parameter block). If every output entry f has, in each group g of n_g variables,
only monomials of total degree in [lo_g, hi_g], then f has at most

    prod_g #{monomials of degree lo_g..hi_g in n_g variables}
        = prod_g (C(hi_g + n_g, n_g) - C(lo_g - 1 + n_g, n_g))

terms. The per-group degree ranges follow the map's own arithmetic: a sum takes the union of
the ranges, a product their sum, a nonzero constant is degree 0 and the constant 0 drops out.
`degree_ranges` runs the one block forward (`core.blocks.block_forward`) on `DegreeRange`
objects, so the bound is read off the very code the engines run, with no second copy of the
network. Cancellations only lower the true count: the bound is an upper bound, never an
estimate from below. (A network with no residual path and no bias is homogeneous in each group,
lo_g = hi_g, and the bound is then the binomial C(hi_g + n_g - 1, n_g - 1).)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..core.architecture import Architecture, block_layout
from ..dimension.memory import MIB, BASE_BYTES, MemoryEstimate, check_memory, format_bytes

# Cap on the random networks the span of the neurovariety is measured with: a span that is
# still growing past it is not settled (`network.span_basis`: no degree is then claimed).
MAX_SPAN_SAMPLES = 4096
# Bytes of a python-flint nmod_mpoly term beyond its packed exponent words (the coefficient).
_COEFFICIENT_BYTES = 8
# Transient copies of the symbolic map while it is built (the scores, the values and their
# products beside the outputs, each a polynomial of the same size): a factor on the outputs.
_SYMBOLIC_COPIES = 4
# A python int of a residue with its list slot (function_coefficients' coefficients, transient).
_PYINT_BYTES = 40


class DegreeStopped(Exception):
    """A phase of the degree or equations engine ran past its deadline (the result is
    `stopped`; raised between steps of a phase, never inside a C call)."""

    def __init__(self, phase: str):
        super().__init__(phase)
        self.phase = phase


@dataclass(frozen=True)
class Deadline:
    """A wall-clock deadline (time.perf_counter seconds) shared by every phase of one run."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """The deadline `seconds` from now."""
        return cls(time.perf_counter() + float(seconds))

    def left(self) -> float:
        """Seconds left (<= 0 once passed)."""
        return self.at - time.perf_counter()

    def check(self, phase: str) -> None:
        """Raise DegreeStopped(phase) once the deadline has passed."""
        if time.perf_counter() >= self.at:
            raise DegreeStopped(phase)


class DegreeRange:
    """Per-group (lowest, highest) total degree of a polynomial; the arithmetic of the bound.

    `lo`, `hi`: tuples over the groups. Ints mix in as constants (0 is the zero polynomial).
    """

    __slots__ = ("lo", "hi")

    def __init__(self, lo: tuple[int, ...], hi: tuple[int, ...]):
        self.lo, self.hi = lo, hi

    @staticmethod
    def _of(other, size: int):
        if isinstance(other, DegreeRange):
            return other
        if other == 0:
            return None
        return DegreeRange((0,) * size, (0,) * size)

    def __add__(self, other):
        o = self._of(other, len(self.lo))
        if o is None:
            return self
        return DegreeRange(tuple(map(min, self.lo, o.lo)), tuple(map(max, self.hi, o.hi)))

    __radd__ = __add__
    __sub__ = __add__
    __rsub__ = __add__

    def __mul__(self, other):
        o = self._of(other, len(self.lo))
        if o is None:
            return 0
        return DegreeRange(tuple(a + b for a, b in zip(self.lo, o.lo)),
                           tuple(a + b for a, b in zip(self.hi, o.hi)))

    __rmul__ = __mul__

    def __neg__(self):
        return self


def _monomials_between(n: int, lo: int, hi: int) -> int:
    """Monomials of total degree lo..hi in n variables."""
    if n == 0:
        return 1
    return math.comb(hi + n, n) - (math.comb(lo - 1 + n, n) if lo > 0 else 0)


def degree_ranges(arch: Architecture, symbolic: str) -> tuple[list, list[int]]:
    """(outputs of phi as DegreeRange or 0, group sizes): with `symbolic` = "inputs" one group,
    the d_0 t input entries (weights constant, as `polymap.function_coefficients`); with
    "weights" one group per parameter block (inputs constant, as the gauge's symbolic map).
    One input sequence; the flat order (d_l, t)."""
    from ..core.blocks import block_forward  # noqa: PLC0415
    from .polymap import object_array  # noqa: PLC0415

    layout = block_layout(arch)
    d0, t = arch.widths[0], arch.tokens
    if symbolic == "inputs":
        sizes = [d0 * t]
        X = object_array((1, d0, t), [DegreeRange((1,), (1,))] * (d0 * t))
        blocks = {name: object_array(shape, [1] * (shape[0] * shape[1]))
                  for name, shape, _ in layout}
    else:
        sizes = [shape[0] * shape[1] for _, shape, _ in layout]
        G = len(sizes)
        blocks = {}
        for g, (name, shape, _) in enumerate(layout):
            unit = tuple(int(g == h) for h in range(G))
            blocks[name] = object_array(shape, [DegreeRange(unit, unit)] * (shape[0] * shape[1]))
        X = object_array((1, d0, t), [1] * (d0 * t))
    out = block_forward(arch, blocks, X)
    return list(np.asarray(out).reshape(-1)), sizes


def term_bounds(arch: Architecture, symbolic: str) -> list[int]:
    """Upper bound on the number of terms of each output entry of phi (one input sequence), in
    the variables `symbolic` names (module docstring)."""
    outputs, sizes = degree_ranges(arch, symbolic)
    bounds = []
    for f in outputs:
        if not isinstance(f, DegreeRange):
            bounds.append(0 if f == 0 else 1)
            continue
        bounds.append(math.prod(_monomials_between(n, lo, hi)
                                for n, lo, hi in zip(sizes, f.lo, f.hi)))
    return bounds


def highest_degree(arch: Architecture, symbolic: str) -> int:
    """The highest total degree of phi in the variables `symbolic` names (an upper bound)."""
    outputs, _ = degree_ranges(arch, symbolic)
    return max((sum(f.hi) for f in outputs if isinstance(f, DegreeRange)), default=0)


def _term_bytes(n_vars: int, degree: int) -> int:
    """Bytes of one nmod_mpoly term: the coefficient and the exponents packed in fields of at
    least 8 bits (flint's smallest), wide enough for `degree`, in 64-bit words."""
    bits = max(8, 1 << degree.bit_length().bit_length())
    return _COEFFICIENT_BYTES + 8 * math.ceil(n_vars * bits / 64)


term_bytes = _term_bytes   # public: the ED degree's minor combination is bounded with it


def coefficient_count_bound(arch: Architecture) -> int:
    """Upper bound on the coefficients of phi in the input monomials (the columns of the span)."""
    return sum(term_bounds(arch, "inputs"))


def span_estimate(arch: Architecture, columns: int | None = None) -> MemoryEstimate:
    """Peak of the span phase (`network.span_basis`, per prime): the reduced basis (at most
    min(columns, MAX_SPAN_SAMPLES) rows of int64 residues), one sample's coefficients (its
    polynomials, the python ints read off them, its dense row and the reduction's temporaries).
    `columns`: the coefficients of phi, known after the first sample; else the bound."""
    C = coefficient_count_bound(arch) if columns is None else columns
    rows = min(C, MAX_SPAN_SAMPLES)
    n, D = arch.widths[0] * arch.tokens, highest_degree(arch, "inputs")
    parts = {"torch": BASE_BYTES,
             "reduced basis": rows * C * 8,
             "one sample's coefficients": C * (_SYMBOLIC_COPIES * _term_bytes(n, D)
                                               + 3 * _PYINT_BYTES) + 8 * C * 8,
             "row reduction": 2 * min(rows, 256) * C * 8}
    advice = (f"Use smaller --widths, --keys or --tokens, or fewer layers (phi has up to {C} "
              f"coefficients in its inputs; the span is measured on up to {rows} rows of them)")
    return MemoryEstimate(f"span of the neurovariety of {arch} ({C} coefficients)",
                          int(sum(parts.values())), parts, advice)


def gauge_estimate(arch: Architecture, n_inputs: int) -> MemoryEstimate:
    """Peak of a gauge and solve run (`engine._one_run`): the symbolic map W -> phi_W(X_1..X_N)
    in all n_params weights (its outputs and the transient copies of the forward), bounded term
    by term; the slice and fiber systems are smaller (fewer variables) and live beside it."""
    per_input = term_bounds(arch, "weights")
    terms = n_inputs * sum(per_input)
    D = highest_degree(arch, "weights")
    term = _term_bytes(arch.n_params, D)
    parts = {"torch": BASE_BYTES,
             "symbolic map": _SYMBOLIC_COPIES * terms * term,
             "slice and fiber systems": 2 * terms * term + 64 * MIB}
    advice = (f"Use smaller --widths or --keys, or fewer layers (the map on N = {n_inputs} "
              f"inputs has up to {terms} terms in {arch.n_params} weights, degree {D})")
    return MemoryEstimate(f"symbolic map of {arch} ({terms} terms)", int(sum(parts.values())),
                          parts, advice)


def interpolation_estimate(monomials: int) -> MemoryEstimate:
    """Peak of one degree of `equations.implicit_equations` with `monomials` monomials: the
    monomial matrix over F_p (#monomials + 10 rows, #monomials columns, int64), the flint copy
    and the one its rank or kernel eliminates in (8 bytes an entry each), and the kernel basis
    read back as python ints."""
    entries = (monomials + 10) * monomials
    parts = {"torch": BASE_BYTES, "monomial matrix": entries * 8,
             "flint matrix and its elimination": 2 * entries * 8,
             "kernel basis": monomials * monomials * _PYINT_BYTES}
    advice = (f"Pass a smaller --max-monomials or --max-degree (the interpolation may reach "
              f"{monomials} monomials here), or use smaller --widths or --keys")
    return MemoryEstimate(f"interpolation on up to {monomials} monomials",
                          int(sum(parts.values())), parts, advice)


def check_phase(estimate: MemoryEstimate, max_memory: object | None) -> MemoryEstimate:
    """`check_memory` for a phase of these engines (one line, ResourceError, exit 2)."""
    return check_memory(estimate, max_memory)


__all__ = ["MAX_SPAN_SAMPLES", "Deadline", "DegreeStopped", "DegreeRange", "term_bounds",
           "coefficient_count_bound", "span_estimate", "gauge_estimate",
           "interpolation_estimate", "check_phase", "format_bytes"]
