"""Closed forms for block networks, each with its status (docs/blocks.md).

`block_formula` returns a `FormulaValue`: `conjecture` where we state a count backed by exact
ranks but no proof, `proved` where it reduces to the paper's single-layer theorem (one head), and
`none` (hypotheses not holding) where no closed form is known. A conjecture is never the dimension.
"""

from __future__ import annotations

from .architecture import Architecture
from .catalogue import ambient_bound
from .formulas import FormulaValue

NO_FORMULA = "no closed form for this block network"
_HYPOTHESES = ("one lightning attention layer, no MLP, no norm, t >= 2, value width "
               "v >= min(d_0, d_1) or unfactored values; d_1 >= 2 when H > 1")


def block_formula(arch: Architecture) -> FormulaValue:
    """Dimension of H lightning heads: min(H c - H max(0, H - 1 - (d - r)^2), ambient bound).

    Math: one head has c = r (2 d - r) + s (d + d' - s) - 1 free directions (its A = Q^T K is any
    d x d matrix of rank <= r = min(a, d), its V = O W any d' x d matrix of rank <= s =
    min(v, d, d'), one common rescaling); H heads add H c less the head-mixing directions beyond
    the rescalings: H (H - 1) with full-rank keys (r = d), and, measured, H (H - 1 - (d - r)^2)
    when positive with narrower keys; the map lies in a space of dimension d' d d (d + 1) / 2
    (`catalogue.ambient_bound`).
    For H = 1 this is the paper's single-layer count (proved); for H > 1 a conjecture checked by
    exact ranks (d = d' = 3: 17, 32, 45, 54 for H = 1..4). It fails for d' = 1 (d = 3, v = 1,
    H = 2: it would say 18, the exact rank is 17), which its hypotheses exclude.
    """
    d, d_out, H = arch.widths[0], arch.widths[1], arch.head_counts[0]
    v = min(d, d_out) if arch.values is None else min(arch.values[0], d, d_out)
    holds = (arch.n_layers == 1 and arch.attention == "lightning" and arch.mlp is None
             and arch.norm == "none" and arch.tokens >= 2
             and v == min(d, d_out) and (H == 1 or d_out >= 2))
    if not holds:
        return FormulaValue(NO_FORMULA, arch.n_params, False,
                            _HYPOTHESES, status="none")
    r = min(arch.keys[0], d)
    single = r * (2 * d - r) + v * (d + d_out - v) - 1
    value = min(H * single - H * max(0, H - 1 - (d - r) ** 2), ambient_bound(arch))
    if H == 1:
        return FormulaValue("single lightning head", value, True, _HYPOTHESES, status="proved",
                            source="Henry, Marchetti, Kohn, ICLR 2025, one-layer count")
    return FormulaValue("lightning heads with head mixing", value, True, _HYPOTHESES,
                        status="conjecture", source="exact ranks over F_p (docs/blocks.md)")
