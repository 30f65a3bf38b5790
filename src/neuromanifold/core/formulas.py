"""Closed-form dimensions, each with whether its hypotheses hold (docs/math).

Each function returns a `FormulaValue`. A value whose `hypotheses_hold` is False is only what
the formula would say: it is not the dimension (docs/math/deep.md lists where it is wrong).
The paper's model has the paper's closed forms (`eq7`, `eq14`, `eq16`, `effective_width`,
`general`); networks beyond it (heads, value widths, residuals, MLPs, norms) have
`block_formula` (`proved` for one head, a `conjecture` for several, `none` elsewhere) and the
`ambient_bound` of one lightning layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from .architecture import Architecture, check_architecture

FormulaStatus = Literal["proved", "conjecture", "none"]

_PAPER = "Henry, Marchetti, Kohn, ICLR 2025"


@dataclass(frozen=True)
class FormulaValue:
    """The value of a closed form, whether its hypotheses hold, and what backs it.

    `status` is `proved` (a theorem; `source` names it), `conjecture` (evidence only; never to
    be read as the dimension) or `none` (a count with no claim attached, e.g. a naive bound).
    Even a proved formula is the dimension only where `hypotheses_hold`.
    """

    name: str
    value: int
    hypotheses_hold: bool
    hypotheses: str
    status: FormulaStatus = "proved"
    source: str = ""

    @property
    def conjecture(self) -> bool:
        """True when the formula is only conjectured."""
        return self.status == "conjecture"

    @property
    def is_the_dimension(self) -> bool:
        """True only for a proved formula whose hypotheses hold."""
        return self.status == "proved" and self.hypotheses_hold

    def to_dict(self) -> dict:
        out = asdict(self)
        out["conjecture"] = self.conjecture
        return out

    def __repr__(self) -> str:
        if self.status == "none":
            return f"<FormulaValue none: {self.name}>"
        holds = "hypotheses hold" if self.hypotheses_hold else "hypotheses fail"
        return f"<FormulaValue {self.name} = {self.value} ({self.status}, {holds})>"


def _layer_terms(widths: tuple[int, ...], keys: tuple[int, ...], d_last: int) -> int:
    """sum_i [r_i (2 d_{i-1} - r_i) + d_i d_{i-1}] - sum_{i<l} d_i^2, r_i = min(a_i, d_{i-1})."""
    ws = list(widths[:-1]) + [d_last]
    total = 0
    for a, d_in, d_out in zip(keys, ws[:-1], ws[1:]):
        r = min(a, d_in)
        total += r * (2 * d_in - r) + d_out * d_in
    return total - sum(d * d for d in ws[1:-1])


def eq7(arch: Architecture) -> FormulaValue:
    """Single lightning layer (Corollary 3.3, Eq. 7).

    Math: dim M = r (2d - r) + d d' - 1, r = min(a, d); needs t >= 2 and (a > 1 or d' > 1).
    """
    d, dp, a = arch.widths[0], arch.widths[-1], arch.keys[0]
    r = min(a, d)
    holds = arch.n_layers == 1 and arch.tokens >= 2 and (a > 1 or dp > 1)
    return FormulaValue("Eq. 7", r * (2 * d - r) + d * dp - 1, holds,
                        "one layer, t >= 2, and a > 1 or d' > 1", "proved",
                        f"Corollary 3.3 of {_PAPER}")


def _readout_visible(arch: Architecture) -> bool:
    """d_{j-1} <= d_j + 2 a_j for j = 2..l: no width the next layer cannot see (no read-out reduction).

    Where it fails the neuromanifold is that of narrower widths (docs/hidden_directions.md): e.g.
    widths 9,7,1, keys 2,2, t = 3 has dimension 71 (certified; softmax 73, numerical) while Eq. 14
    gives 75 (Eq. 16: 77), with d_0 >= d_1 and every a_i >= 2.
    """
    w, a = arch.widths, arch.keys
    return all(w[j - 1] <= w[j] + 2 * a[j - 1] for j in range(2, arch.n_layers + 1))


def _deep_hypotheses(arch: Architecture) -> bool:
    w = arch.widths
    return (arch.tokens >= 2 and all(a >= 2 for a in arch.keys)
            and all(w[i] >= w[i + 1] for i in range(arch.n_layers - 1)) and _readout_visible(arch))


_DEEP_TEXT = ("t >= 2, d_0 >= d_1 >= ... >= d_{l-1}, every a_i >= 2 and d_{j-1} <= d_j + 2 a_j "
              "(verified region)")


def eq14(arch: Architecture) -> FormulaValue:
    """Deep lightning network (Corollary 3.8, Eq. 14).

    Math: dim M = sum_i [r_i (2 d_{i-1} - r_i) + d_i d_{i-1}] - sum_{i=1..l-1} d_i^2 - l,
    r_i = min(a_i, d_{i-1}); verified where t >= 2, d_0 >= ... >= d_{l-1}, all a_i >= 2.
    """
    value = _layer_terms(arch.widths, arch.keys, arch.widths[-1]) - arch.n_layers
    if arch.n_layers == 1:
        single = eq7(arch)
        return FormulaValue("Eq. 14", value, single.hypotheses_hold, single.hypotheses, "proved",
                            single.source)
    return FormulaValue("Eq. 14", value, _deep_hypotheses(arch), _DEEP_TEXT, "proved",
                        f"Corollary 3.8 of {_PAPER}, in the region where certified ranks confirm it")


def eq16(arch: Architecture) -> FormulaValue:
    """Deep normalised (softmax) network (Conjecture 3.10, Eq. 16): Eq. 14 + l.

    For l = 1 this is Theorem 3.9: r (2d - r) + d d', needing t >= 2. For l >= 2 it is the
    paper's conjecture (a real-analytic proof is reported by Konda 2026; docs/math/softmax.md).
    """
    value = _layer_terms(arch.widths, arch.keys, arch.widths[-1])
    if arch.n_layers == 1:
        return FormulaValue("Eq. 16", value, arch.tokens >= 2, "one layer, t >= 2", "proved",
                            f"Theorem 3.9 of {_PAPER}")
    return FormulaValue("Eq. 16", value, _deep_hypotheses(arch), _DEEP_TEXT, "conjecture",
                        f"Conjecture 3.10 of {_PAPER} (a proof of the real-analytic case is "
                        "reported in a 2026 preprint by Konda)")


def effective_width(arch: Architecture) -> FormulaValue:
    """Eq. 14 (or 16) with every d_i, i < l, replaced by m_i = min(d_0, ..., d_i). A conjecture.

    Observed, not proved (docs/math/deep.md): it matched every a_i >= 2 configuration scanned.
    """
    m, running = [], None
    for d in arch.widths[:-1]:
        running = d if running is None else min(running, d)
        m.append(running)
    value = _layer_terms(tuple(m) + (arch.widths[-1],), arch.keys, arch.widths[-1])
    if arch.attention == "lightning":
        value -= arch.n_layers
    holds = arch.tokens >= 2 and all(a >= 2 for a in arch.keys) and _readout_visible(arch)
    return FormulaValue("effective-width conjecture", value, holds,
                        "t >= 2, every a_i >= 2 and d_{j-1} <= d_j + 2 a_j", "conjecture",
                        "observed on every certified a_i >= 2 architecture of the eq14_map sweep")


def expected_dim(arch: Architecture) -> FormulaValue:
    """The paper's closed form for this architecture: Eq. 7 / Eq. 14 (lightning), Eq. 16 (softmax)."""
    check_architecture(arch)
    if arch.attention == "softmax":
        return eq16(arch)
    return eq7(arch) if arch.n_layers == 1 else eq14(arch)


def readout_widths(arch: Architecture) -> tuple[int, ...]:
    """Widths after the read-out reduction e_{j-1} = min(d_{j-1}, e_j + 2 a_j), j = l..2, e_l = d_l.

    Layer j sees its input only through [V_j; Q_j; K_j] Z, of rank <= e_j + 2 a_j, so a wider
    d_{j-1} gives the same neuromanifold as e_{j-1} (docs/hidden_directions.md, section 2).
    """
    e = list(arch.widths)
    for j in range(arch.n_layers, 1, -1):
        e[j - 1] = min(e[j - 1], e[j] + 2 * arch.keys[j - 1])
    return tuple(e)


def general(arch: Architecture) -> FormulaValue:
    """A closed form for every lightning architecture (a conjecture, checked against certified ranks).

    Math: with e = `readout_widths`, m_i = min(e_0..e_i) (i < l), w_i = m_i (i < l), w_l = d_l:
        dim M = sum_i [h_i + w_i m_{i-1}] - sum_{i=1..l-1} m_i^2 - l,
    h_i = r_i (2 m_{i-1} - r_i), r_i = min(a_i, m_{i-1}), the dimension of the forms
    P^T Q_i^T K_i P; but h_i = k_i m_{i-1} - k_i (k_i - 1) / 2, k_i = min(2 a_i, m_{i-1}), their
    symmetric parts, when t = 1 or an earlier a_j = 1 (then only the symmetric part is seen).
    It is n_params minus the count of every known symmetry, read-out and hidden ones included,
    each counted at its generic size (docs/lightning_dimension.md); no proof that those are all.
    """
    check_architecture(arch)
    holds = arch.attention == "lightning"
    e = readout_widths(arch)
    m, running = [], None
    for d in e[:-1]:
        running = d if running is None else min(running, d)
        m.append(running)
    outs = m[1:] + [arch.widths[-1]]
    total, symmetric = 0, arch.tokens == 1
    for a, m_in, w_out in zip(arch.keys, m, outs):
        if symmetric:
            k = min(2 * a, m_in)
            total += k * m_in - k * (k - 1) // 2
        else:
            r = min(a, m_in)
            total += r * (2 * m_in - r)
        total += w_out * m_in
        symmetric = symmetric or a == 1
    value = total - sum(x * x for x in m[1:]) - arch.n_layers
    return FormulaValue("general", value, holds, "lightning attention (any widths, keys, t >= 1)",
                        "conjecture", "n_params minus the generic count of every known symmetry; "
                        "equal to the certified dimension on every l = 1, 2, 3 architecture "
                        "checked (docs/lightning_dimension.md)")


# ------------------------------------------------------------------ networks beyond the paper

def ambient_bound(arch: Architecture) -> int | None:
    """Dimension of a finite-dimensional space the map lies in, where we know one, else None.

    One lightning attention layer without MLP or norm (residual allowed: it adds a fixed map):
    column i of the output is sum_j T(z_j, z_j, z_i) for a tensor T in R^{d'} (x) Sym^2(R^d)
    (x) R^d, linear in the weights, so dim <= d' d d (d + 1) / 2; with t = 1 only the symmetric
    cubic T(z, z, z) matters: dim <= d' (d + 2 choose 3). A causal mask or grouped key/value
    heads keep the output a linear image of the same T; biases do not (None).
    With a vocabulary (any network) the inputs are the V^t token sequences and the outputs V x t
    logits, so the map lies in R^{V^t V t}.
    """
    if arch.vocab is not None:   # a finite input set: V^t sequences, V t logits each
        return arch.n_sequences * arch.output_width * arch.tokens
    if arch.n_layers != 1 or arch.attention != "lightning" or arch.norm != "none" or arch.mlp is not None:
        return None
    if arch.bias:  # biases make the layer an inhomogeneous cubic: not in that space
        return None
    if arch.positions != "none":  # position-dependent (rope) or inhomogeneous (learned): no T
        return None
    d, d_out = arch.widths
    if arch.tokens == 1:
        return d_out * d * (d + 1) * (d + 2) // 6
    return d_out * d * d * (d + 1) // 2


def covering_count(arch: Architecture) -> int:
    """At most the number of `tokens.covering_sequences` (2 ceil(V / t)), and at most V^t: the
    token sequences the engines draw first, so that every token id occurs (torch-free, for the
    plans)."""
    return min(2 * -(-arch.input_symbols // arch.tokens), arch.n_sequences)


NO_FORMULA = "no closed form for this block network"
# (Decoder options, a causal mask, grouped key/value heads or biases, are outside it too.)
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
             and arch.norm == "none" and arch.tokens >= 2 and not arch.causal
             and arch.kv_heads is None and not arch.bias and arch.positions == "none"
             and arch.vocab is None
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
