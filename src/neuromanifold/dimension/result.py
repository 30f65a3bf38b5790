"""The result vocabulary shared by every dimension engine.

A `DimensionResult` says what the dimension is and how it was obtained:

- `method` (`Method`): `numerical` (float64 rank with its singular-value gap), `exact` (rank
  over F_p: a proven lower bound), `certified` (that lower bound meets a proven upper bound),
  or `formula` (a closed form, used only where its hypotheses hold and it is proved).
- `status` (`Status`): `settled` (numerical, clear gap, saturated in N), `ambiguous` (numerical,
  do not trust), `certified` (a proof), `lower-bound` (exact rank below the upper bound: the
  dimension lies in [lower_bound, upper_bound]) or `stopped` (the work ended at a cap on
  memory, time or samples before the rank saturated; the value is a lower bound at best).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

from ..errors import AmbiguousRankError
from ..core.display import Tabulated, architecture_text
from ..core.formulas import FormulaValue

Status = Literal["settled", "ambiguous", "certified", "lower-bound", "stopped"]
Method = Literal["numerical", "exact", "certified", "formula"]
STATUSES: tuple[str, ...] = ("settled", "ambiguous", "certified", "lower-bound", "stopped")
# Statuses under which `dimension` is the dimension (numerically or provably).
SETTLED_STATUSES: tuple[str, ...] = ("settled", "certified")

Progress = Callable[[str], None]


class AmbiguousRankWarning(UserWarning):
    """Emitted when a numerical rank is reported with status `ambiguous`."""


@dataclass
class DimensionResult(Tabulated):
    """The dimension of a neuromanifold and everything needed to judge it.

    `method` and `status` use the vocabulary of this module. For numerical results
    `rank_rule` names the rule and tolerances that decided the rank (see `core.rank`).
    Invariant: dimension + fiber_dim == n_params.

    Example:
        >>> from neuromanifold import Architecture, neuromanifold_dim
        >>> r = neuromanifold_dim(Architecture((3, 3, 3), (2, 2), 3), method="certified")
        >>> r.is_settled and r.dimension + r.fiber_dim == r.n_params
        True
    """

    architecture: dict
    n_params: int
    dimension: int
    method: Method
    status: Status
    formula: FormulaValue
    conjecture: FormulaValue
    general: FormulaValue | None = None
    lower_bound: int | None = None
    upper_bound: int | None = None
    gap: float | None = None
    sigma_before: float | None = None
    sigma_after: float | None = None
    n_samples: int = 0
    seed: int = 0
    prime: int | None = None
    failure_probability: float | None = None
    device: str = "cpu"
    rank_rule: dict | None = None
    seconds: dict = field(default_factory=dict)
    rank_history: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    # Block networks: each symmetry family's incremental tangent rank, in catalogue order.
    symmetries: dict | None = None
    # Where the rows were computed when not in this process: {"name": "dask", "scheduler", ...}.
    backend: dict | None = None

    @property
    def fiber_dim(self) -> int:
        """Generic fiber dimension n_params - dimension."""
        return self.n_params - self.dimension

    @property
    def is_settled(self) -> bool:
        """True when `dimension` is the dimension: `settled` (numerical) or `certified` (proved)."""
        return self.status in SETTLED_STATUSES

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (keys n_params, dimension, method, fiber_dim, formula, ...)."""
        out = asdict(self)
        out["formula"] = self.formula.to_dict()
        out["conjecture"] = self.conjecture.to_dict()
        out["general"] = None if self.general is None else self.general.to_dict()
        out["fiber_dim"] = self.fiber_dim
        out["is_settled"] = self.is_settled
        for key in ("symmetries", "backend"):
            if out[key] is None:
                del out[key]
        for key in ("gap", "sigma_before", "sigma_after"):
            if out[key] is not None and not math.isfinite(out[key]):
                out[key] = None
        return out

    def describe_dimension(self) -> str:
        """'50  [numerical, settled: gap 9.4 decades, ...]' and the like: value and provenance."""
        if self.method == "numerical":
            how = f"numerical, {self.status}"
            if self.gap is not None:
                how += (f": singular-value gap {self.gap:.1f} decades (sigma_r = "
                        f"{self.sigma_before:.2e}, sigma_r+1 = {self.sigma_after:.2e})")
            if self.lower_bound is not None and self.upper_bound is not None:
                how += f"; {self.lower_bound} <= dim <= {self.upper_bound}"
            how += f", N = {self.n_samples}"
        else:
            how = self.method if self.method == self.status else f"{self.method}, {self.status}"
            if self.lower_bound is not None and self.upper_bound is not None:
                how += f": {self.lower_bound} <= dim <= {self.upper_bound}"
            if self.prime:
                how += f", p = {self.prime}"
                if self.failure_probability is not None and self.status != "certified":
                    how += f", P(dim > lower bound) <= {self.failure_probability:.1e}"
            how += f", N = {self.n_samples}"
        return f"{self.dimension}  [{how}]"

    def describe_formula(self, formula: FormulaValue | None = None) -> str:
        """A closed form's value with whether it may be read as the dimension."""
        f = self.formula if formula is None else formula
        label = f"{f.name} ({f.status})"
        if f.status == "none":  # a placeholder: nothing is known in closed form here
            return f"none known for this architecture (closed forms cover: {f.hypotheses})"
        if not f.hypotheses_hold:
            return (f"{f.name} would give {f.value}, but its hypotheses fail ({f.hypotheses} "
                    "required): not the dimension")
        if self.is_settled:
            verdict = "agrees" if f.value == self.dimension else "DISAGREES"
        elif self.upper_bound is not None and self.lower_bound is not None:
            low, high = self.lower_bound, self.upper_bound
            verdict = (f"consistent with {low} <= dim <= {high}" if low <= f.value <= high
                       else f"outside the bounds {low} <= dim <= {high}")
        else:
            verdict = f"not compared: the dimension is {self.status}"
        if f.status == "conjecture":
            verdict += "; a conjecture, not the dimension"
        return f"{label} = {f.value} (hypotheses hold: {f.hypotheses}; {verdict})"

    def summary_lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs of `summary`, for callers that lay them out themselves."""
        text = architecture_text(self.architecture)
        lines = [("architecture", text), ("seed", str(self.seed)),
                 ("parameters", str(self.n_params)), ("dimension", self.describe_dimension()),
                 ("fiber dimension", str(self.fiber_dim)), ("formula", self.describe_formula())]
        if self.general is not None and self.general.hypotheses_hold:
            lines.append(("general", self.describe_formula(self.general)))
        c = self.conjecture
        if c.status == "none":
            lines.append(("conjecture", "none known for this architecture"))
        else:
            lines.append(("conjecture", f"{c.name} = {c.value} ({c.status}"
                          + ("" if c.hypotheses_hold else "; outside its stated range") + ")"))
        if self.rank_rule:
            lines.append(("rank rule", ", ".join(f"{k} {v}" for k, v in self.rank_rule.items())))
        lines += [("notes", n) for n in self.notes]
        lines.append(("seconds", ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items())))
        return lines

    def _title(self) -> str:
        return f"dimension {self.describe_dimension()}"

    def __repr__(self) -> str:
        how = self.method if self.method == self.status else f"{self.method}, {self.status}"
        if self.gap is not None and math.isfinite(self.gap):
            how += f", gap {self.gap:.1f} decades"
        elif self.lower_bound is not None and self.upper_bound is not None \
                and self.lower_bound != self.upper_bound:
            how += f", {self.lower_bound} <= dim <= {self.upper_bound}"
        return (f"<DimensionResult {self.dimension} [{how}] of {self.n_params} parameters: "
                f"{architecture_text(self.architecture)}>")

    def to_row(self) -> dict:
        """One flat row (architecture fields, dimension, how it was obtained, the closed form
        where one is known), as `results_frame` tabulates results."""
        row = {k: (",".join(map(str, v)) if isinstance(v, list) else v)
               for k, v in self.architecture.items()}
        known = self.formula.status != "none"
        row.update(n_params=self.n_params, dimension=self.dimension, fiber_dim=self.fiber_dim,
                   method=self.method, status=self.status, lower_bound=self.lower_bound,
                   upper_bound=self.upper_bound, gap=self.gap, n_samples=self.n_samples,
                   seed=self.seed, formula_name=self.formula.name,
                   formula=self.formula.value if known else None,
                   formula_status=self.formula.status,
                   hypotheses_hold=self.formula.hypotheses_hold,
                   seconds=self.seconds.get("total"))
        return row


def require_settled(result: DimensionResult) -> DimensionResult:
    """Return `result` if it is settled or certified; raise AmbiguousRankError otherwise."""
    if not result.is_settled:
        raise AmbiguousRankError(f"dimension {result.dimension} of {result.architecture} is "
                                 f"{result.status}: " + "; ".join(result.notes))
    return result
