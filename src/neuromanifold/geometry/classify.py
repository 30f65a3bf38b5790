"""The geometry of one lightning layer: smooth, singular, boundary and critical points (Thm 3.4).

Math (docs/math/single-layer.md; t >= 2, and a > 1 or d' > 1):
  singular points of M:  rank A <= 1 and rank V <= 1 (phi = 0 included: A = 0 or V = 0);
  relative boundary:     A = alpha beta^T, V = nu alpha^T (phi = 0 included, beta = 0);
  critical points of (A, V) -> phi (Lemma A.3): A = 0, V = 0, or (alpha beta^T, nu alpha^T).
  Test used here: (alpha beta^T, nu alpha^T) <=> rank [A | V^T] <= 1 (the columns of A and of
  V^T all lie on one line).
Beside the theorem's answer, `classify_layer` reports the rank of the Jacobian of the
parametrisation (A, V) -> (phi(X_1), ..., phi(X_N)), A in R^{d x d}, V in R^{d' x d}, at N random
inputs. phi is bilinear in (A, V), so the Jacobian column of the direction E (a unit matrix) is
phi evaluated with E in place of A (or of V): computed by the one network map, no derivatives.
The rank is exact (over F_p, inputs random in F_p) when the entries of A and V are integers,
and numerical (float64, singular-value gap) otherwise. Theorem-derived values (from the proof
of Lemma A.3, n = d^2 + d d'): generic n - 1; boundary with A, V != 0: n - d; A = 0 != V: d^2;
V = 0 != A: d d'; A = V = 0: 0. Checked: d = 3, d' = 2, a = 3 gives 14, 12, 14, 9, 6
(docs/math/single-layer.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np
import torch

from ..errors import InputTypeError
from ..core.architecture import Architecture
from ..core.seeds import seeded_rng
from ..core.checks import bad_value, check_int, check_seed
from ..core.display import Tabulated
from ..dimension.fp import DEFAULT_PRIME, rank_mod_p, rank_rational
from ..core.rank import matrix_rank, numerical_rank, rank_rule, unit_scaled
from ..core.finite import largest_entry, require_finite
from ..core.maps import forward_attention
from ..core.parameters import AttentionWeights, LayerWeights, integral_tensors


@dataclass
class LayerClassification(Tabulated):
    """Where one layer's point lies on its neuromanifold (Theorem 3.4, Lemma A.3).

    `smooth`, `singular`, `boundary` describe phi in M; `critical` describes (A, V) for the
    parametrisation. `jacobian_rank` is the rank of (A, V) -> phi at N inputs (`rank_method`
    exact over F_p, or numerical with the singular-value `rank_gap` in decades);
    `expected_jacobian_rank` is the theorem's value and `agrees` compares them
    (critical <=> jacobian_rank < generic_jacobian_rank).
    """

    smooth: bool
    singular: bool
    boundary: bool
    critical: bool
    jacobian_rank: int
    expected_jacobian_rank: int
    generic_jacobian_rank: int
    agrees: bool
    rank_A: int
    rank_V: int
    rank_method: str
    jacobian_parametrisation: str = "(A, V) -> phi, A in R^{d x d}"
    prime: int | None = None
    rank_gap: float | None = None
    ranks_settled: bool = True
    rank_rule: dict | None = None
    n_samples: int = 0
    widths: tuple = ()
    keys: int = 0
    tokens: int = 0
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        if out["rank_gap"] is not None and not math.isfinite(out["rank_gap"]):
            out["rank_gap"] = None
        out["widths"] = list(out["widths"])
        return out

    def summary_lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs of `summary`."""
        rank_how = (f"exact over F_p, p = {self.prime}" if self.rank_method == "exact" else
                    f"numerical, gap {self.rank_gap:.1f} decades")
        lines = [("smooth", str(self.smooth)), ("singular", str(self.singular)),
                 ("boundary", str(self.boundary)), ("critical", str(self.critical)),
                 ("jacobian rank", f"{self.jacobian_rank} [{rank_how}; "
                  f"{self.jacobian_parametrisation}, N = {self.n_samples}]"),
                 ("theorem says", f"{self.expected_jacobian_rank} (generic "
                  f"{self.generic_jacobian_rank}); " + ("agrees" if self.agrees else "DISAGREES"))]
        return lines + [("notes", n) for n in self.notes]

    def _kind(self) -> str:
        """The flags that hold, e.g. 'smooth' or 'singular, critical'."""
        return ", ".join(name for name in ("smooth", "singular", "boundary", "critical")
                         if getattr(self, name)) or "neither smooth nor singular"

    def __repr__(self) -> str:
        return (f"<LayerClassification {self._kind()}: jacobian rank {self.jacobian_rank} "
                f"({self.rank_method}), theorem {self.expected_jacobian_rank}, "
                f"{'agrees' if self.agrees else 'DISAGREES'}>")

    def _title(self) -> str:
        return f"layer point: {self._kind()}"


def _as_attention(weights: object) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(A, V, a) from single-layer LayerWeights or AttentionWeights."""
    if isinstance(weights, (LayerWeights, AttentionWeights)) and weights.n_layers != 1:
        raise bad_value("weights", "single-layer weights for classify", f"{weights.n_layers} layers",
                        "Theorem 3.4 describes one layer; pass Q_1, K_1, V_1 (or A_1, V_1) only.")
    if isinstance(weights, LayerWeights):
        Q, K = weights.Q[0].to(torch.float64), weights.K[0].to(torch.float64)
        return Q.T @ K, weights.V[0].to(torch.float64), Q.shape[0]
    if isinstance(weights, AttentionWeights):
        A = weights.A[0].to(torch.float64)
        return A, weights.V[0].to(torch.float64), A.shape[0]
    raise InputTypeError(f"`weights` must be LayerWeights or AttentionWeights; got {type(weights).__name__}. "
                    "Read them with read_weights(path).")


def _rank(M: torch.Tensor, exact: bool) -> tuple[int, bool]:
    """(rank, settled): exact over Q for integer entries, else the package's gap rule."""
    if M.numel() == 0:
        return 0, True
    if exact:
        return rank_rational([[Fraction(int(x)) for x in row] for row in M.tolist()]), True
    nr = matrix_rank(M)
    return nr.rank, nr.is_settled()


def expected_jacobian_rank(d: int, d_out: int, A_zero: bool, V_zero: bool, boundary: bool) -> int:
    """Rank of (A, V) -> phi at a point, from the proof of Lemma A.3 (t >= 2; n = d^2 + d d').

    Math: generic n - 1 (rescaling); (alpha beta^T, nu alpha^T), both non-zero: n - d (the
    swap directions (x beta^T, -nu x^T), x in R^d, join the kernel); A = 0 != V: d^2;
    V = 0 != A: d d'; A = V = 0: 0.
    """
    n = d * d + d * d_out
    if A_zero and V_zero:
        return 0
    if A_zero:
        return d * d
    if V_zero:
        return d * d_out
    return n - d if boundary else n - 1


def _unit(shape: tuple[int, int], r: int, s: int, like):
    E = np.zeros(shape, dtype=object) if isinstance(like, np.ndarray) else torch.zeros(shape, dtype=torch.float64)
    E[r, s] = 1
    return E


def attention_jacobian(arch: Architecture, A, V, inputs: list) -> list[list]:
    """Columns of the Jacobian of (A, V) -> (phi(X_1), ..., phi(X_N)); A-block first, row-major.

    Math: phi is bilinear in (A, V), so d phi[E_rs, 0] = phi(E_rs, V) and d phi[0, E_rs] =
    phi(A, E_rs); each column is one call of `forward_attention` per input (exact for object
    arrays of integers, float64 for tensors).
    """
    columns = []
    d, d_out = A.shape[0], V.shape[0]
    for r in range(d):
        for s in range(d):
            E = _unit((d, d), r, s, A)
            columns.append([forward_attention(arch, AttentionWeights((E,), (V,)), X) for X in inputs])
    for r in range(d_out):
        for s in range(d):
            E = _unit((d_out, d), r, s, V)
            columns.append([forward_attention(arch, AttentionWeights((A,), (E,)), X) for X in inputs])
    return columns


def classify_layer(weights: LayerWeights | AttentionWeights, *, tokens: int = 3, seed: int = 0,
                   prime: int = DEFAULT_PRIME,
                   n_samples: int | None = None) -> LayerClassification:
    """Classify a single lightning layer's point (Theorem 3.4, Lemma A.3) and check it by rank.

    Math: singular <=> (rank A <= 1 and rank V <= 1) or phi = 0; boundary <=> critical <=>
    A = 0, V = 0 or rank [A | V^T] <= 1; smooth <=> not singular. Ranks are exact when all
    entries are integers, numerical otherwise (the gap rule of `core.rank`; an ambiguous
    rank sets `ranks_settled` to False); the Jacobian rank of (A, V) -> phi likewise (exact
    over F_p, or float64 by the same rule). Critical points are those where the theorem's
    Jacobian rank falls below the generic n - 1 (for d = 1 the boundary form is every point,
    yet the rank never drops there).
    """
    A, V, a = _as_attention(weights)
    tokens = check_int("tokens", tokens, minimum=1, fix="Pass t >= 2 (Theorem 3.4 needs t >= 2).")
    seed = check_seed(seed)
    d, d_out = A.shape[0], V.shape[0]
    require_finite(torch.cat([A, V.T], dim=1), "matrices A = Q^T K and V", input_name="weights",
                   largest=largest_entry([A, V]))
    exact = integral_tensors(A, V)
    (rank_A, ok_A), (rank_V, ok_V) = _rank(A, exact), _rank(V, exact)
    rank_joint, ok_joint = _rank(torch.cat([A, V.T], dim=1), exact)
    A_zero, V_zero = rank_A == 0, rank_V == 0
    singular = A_zero or V_zero or (rank_A <= 1 and rank_V <= 1)
    boundary = A_zero or V_zero or rank_joint <= 1
    arch = Architecture((d, d_out), (d,), tokens)
    n_params = d * d + d * d_out
    if n_samples is None:
        n_samples = 2 * math.ceil(n_params / (tokens * d_out)) + 2
    n_samples = check_int("n_samples", n_samples, minimum=1, fix="Pass e.g. 12.")
    gen = seeded_rng(seed, "classify-inputs")
    notes = []
    if exact:
        Ai = np.array([[int(x) for x in row] for row in A.tolist()], dtype=object)
        Vi = np.array([[int(x) for x in row] for row in V.tolist()], dtype=object)
        inputs = [np.array(gen.integers(0, prime, size=(d, tokens)).tolist(), dtype=object)
                  for _ in range(n_samples)]
        columns = attention_jacobian(arch, Ai, Vi, inputs)
        J = np.array([[int(v) % prime for out in col for v in out.reshape(-1)] for col in columns],
                     dtype=np.int64).T
        jac_rank, gap, method = rank_mod_p(J, prime), None, "exact"
        notes.append(f"Jacobian rank exact over F_p, p = {prime}, at {n_samples} random inputs in F_p "
                     "(a lower bound on the rank over Q, equal to it with high probability)")
    else:
        inputs = [torch.from_numpy(gen.standard_normal((d, tokens))) for _ in range(n_samples)]
        columns = attention_jacobian(arch, A, V, inputs)
        J = torch.stack([torch.cat([out.reshape(-1) for out in col]) for col in columns], dim=1)
        require_finite(J, "Jacobian entries", input_name="weights", largest=largest_entry([A, V]))
        J = unit_scaled(J, dim=0)
        nr = numerical_rank(torch.linalg.svdvals(J), *J.shape)
        jac_rank, gap, method = nr.rank, nr.gap, "numerical"
        ok_J = nr.is_settled()
        notes.append(f"ranks numerical (float64) by the gap rule for A, V, [A | V^T] and the "
                     f"Jacobian (Jacobian gap {gap:.1f} decades)")
    settled = exact or (ok_A and ok_V and ok_joint and ok_J)
    if not settled:
        notes.append("a numerical rank is ambiguous (no clear singular-value gap): the point is "
                     "too close to a rank change to classify in float64; pass integer weights")
    expected = expected_jacobian_rank(d, d_out, A_zero, V_zero, boundary)
    generic = n_params - 1
    critical = expected < generic
    if tokens < 2:
        notes.append("t = 1: Theorem 3.4 needs t >= 2 (only the symmetric part of A is seen)")
    if a < d:
        notes.append(f"a = {a} < d = {d}: the Jacobian is that of (A, V) with A ranging over all of "
                     "R^{d x d} (Lemma A.3's map); M_{d,a} itself is its image on {rank A <= a}")
    return LayerClassification(
        smooth=not singular, singular=singular, boundary=boundary, critical=critical,
        jacobian_rank=jac_rank, expected_jacobian_rank=expected, generic_jacobian_rank=generic,
        agrees=(jac_rank == expected) and (critical == (jac_rank < generic)),
        rank_A=rank_A, rank_V=rank_V, rank_method=method,
        prime=prime if exact else None, rank_gap=gap, ranks_settled=settled,
        rank_rule=None if exact else rank_rule(),
        n_samples=n_samples, widths=(d, d_out), keys=a, tokens=tokens, notes=notes)
