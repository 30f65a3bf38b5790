"""The Jacobian rank at given weights (the local functional dimension there), with a proof when
possible, and the generic dimension beside it.

At a point W the rank of dPhi(W) may be below the generic rank (the dimension). Bounds:
  lower  rank J_N(W) for N random rational inputs, proved by a non-zero ball determinant of an
         r x r block (`ball.prove_rank` over `ball_dual.ball_block_jacobian`);
         J_N(W) = E_N dPhi(W), so rank J_N(W) <= rank dPhi(W).
  upper  n_params - rank_p(kernel directions at W): the symmetry tangents at W lie in ker dPhi(W)
         at every W, W's float64 entries are dyadic rationals reduced mod p exactly
         (`ball.to_residues`), and rank_p <= rank over Q; the registry's group for the
         network (`ball_dual.point_bounds`).
For a polynomial network (lightning, square or no MLP, no norm; continuous inputs, no rotary
positions) the proof tried first is the exact rank over Q of the Jacobian at the inputs of a
lattice unisolvent for phi's degree in X (`exact_point`): equal to rank dPhi(W) itself, a lower
and an upper bound at once (method `exact`); the balls and the symmetry bound above are the
fallback where that matrix is too large.
The float64 rank (gap rule) is always computed; `auto` escalates to the proof when the gap is
thin, the rank is ambiguous or it falls short of the upper bound (a float rank below the truth
can come with a clear gap near degenerate weights), and never reports an unproved float rank
below the upper bound as settled without saying so.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from ..core.architecture import Architecture, check_architecture
from ..core.checks import bad_value, check_choice, check_int, check_min_gap, check_seed
from ..core.display import Tabulated, architecture_text
from ..core.finite import largest_entry, require_finite
from ..core.parameters import LayerWeights, flatten
from ..core.seeds import seeded_generator
from ..core.tokens import input_stream
from ..errors import ComputationError
from .ball import DEFAULT_PRECISION, ROW_FACTOR, prove_rank, to_dyadic
from .fp import DEFAULT_PRIME
from ..core.rank import MIN_GAP_DECADES, numerical_rank, rank_rule
from .result import Progress

POINT_METHODS = ("auto", "numerical", "certified")


@dataclass
class PointRank(Tabulated):
    """The Jacobian rank at one point, how it was obtained, and the generic dimension."""

    architecture: dict
    n_params: int
    rank: int
    method: str            # numerical, certified or exact (over Q, `exact_point`)
    status: str            # settled, ambiguous, certified or lower-bound
    lower_bound: int | None
    upper_bound: int
    float_rank: int
    gap: float
    precision: int | None
    n_samples: int
    seed: int
    generic_dimension: int | None = None
    generic_status: str | None = None
    generic_method: str | None = None
    rank_rule: dict | None = None
    exact: dict | None = None   # the exact path's record (`ExactPointRank.to_dict`) when tried
    seconds: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def is_settled(self) -> bool:
        return self.status in ("settled", "certified")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["is_settled"] = self.is_settled
        if out["gap"] is not None and not math.isfinite(out["gap"]):
            out["gap"] = None
        return out

    def summary_lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs of `summary`."""
        if self.method == "exact":
            how = (f"exact over Q, {self.status}: {self.lower_bound} <= rank <= "
                   f"{self.upper_bound}, flint's rank at {self.exact['inputs']} lattice inputs")
        elif self.method == "certified":
            how = self.method if self.status == "certified" else f"{self.method}, {self.status}"
            how += f": {self.lower_bound} <= rank <= {self.upper_bound}, {self.precision} bits"
        else:
            how = f"numerical, {self.status}: gap {self.gap:.1f} decades"
        lines = [("architecture", architecture_text(self.architecture)),
                 ("seed", str(self.seed)), ("parameters", str(self.n_params)),
                 ("rank at the point", f"{self.rank}  [{how}]" if self.method == "exact"
                  else f"{self.rank}  [{how}, N = {self.n_samples}]"),
                 ("float64 rank", f"{self.float_rank} (gap {self.gap:.1f} decades)")]
        if self.generic_dimension is not None:
            how = (self.generic_method if self.generic_method == self.generic_status
                   else f"{self.generic_method}, {self.generic_status}")
            lines.append(("generic dimension", f"{self.generic_dimension}  [{how}]"))
        lines += [("notes", n) for n in self.notes]
        lines.append(("seconds", ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items())))
        return lines

    def _title(self) -> str:
        return f"rank at the point {self.rank} ({self.method}, {self.status})"

    def __repr__(self) -> str:
        how = self.method if self.method == self.status else f"{self.method}, {self.status}"
        return (f"<PointRank {self.rank} [{how}] of {self.n_params} parameters: "
                f"{architecture_text(self.architecture)}>")


def rank_at_point(arch: Architecture, weights: LayerWeights | dict, *, method: str = "auto",
                  samples: int | None = None, seed: int = 0, precision: int | None = None,
                  min_gap: float = MIN_GAP_DECADES, generic: bool = True,
                  progress: Progress | None = None, engine: str = "verified") -> PointRank:
    """Rank of the Jacobian of W -> phi_W at `weights` (see the module docstring).

    `weights`: `LayerWeights` of the paper's model, or named blocks (`core.blocks`, as
    `io.weightfiles.read_block_weights` returns them) of a block network. `engine`: the
    certified lower bound's, `verified` (float64 certificate first) or `ball` (arb balls only).

    Example:
        >>> from neuromanifold import Architecture, random_weights
        >>> arch = Architecture((3, 3, 3), (2, 2), 3, "softmax")
        >>> r = rank_at_point(arch, random_weights(arch, 1), method="certified", generic=False)
        >>> (r.rank, r.status)
        (25, 'certified')
    """
    from .api import ESCALATE_GAP_DECADES, cap_samples  # noqa: PLC0415

    check_architecture(arch)
    method = check_choice("method", method, POINT_METHODS)
    seed = check_seed(seed)
    bits = DEFAULT_PRECISION if precision is None else check_int(
        "precision", precision, minimum=16, fix=f"Pass --precision {DEFAULT_PRECISION} or more.")
    min_gap = check_min_gap(min_gap)
    samples, capped = cap_samples(arch, samples)
    n = samples or max(1, math.ceil(ROW_FACTOR * arch.n_params / (arch.widths[-1] * arch.tokens)) + 1)
    from .memory import check_memory, point_estimate  # noqa: PLC0415

    check_memory(point_estimate(arch, n, certify=method != "numerical", precision=bits))
    say = progress or (lambda _m: None)
    t_start = time.perf_counter()
    if not arch.is_block:
        if not isinstance(weights, LayerWeights) or len(weights.V) != arch.n_layers \
                or flatten(weights).numel() != arch.n_params:
            got = (f"{flatten(weights).numel()} parameters" if isinstance(weights, LayerWeights)
                   else type(weights).__name__)
            raise bad_value("weights", f"weights of {arch}", got,
                            "Pass weights of the same architecture.")
        weights = weights.map(lambda t: t.detach().to(torch.float64).cpu())
    from .ball_dual import point_bounds  # noqa: PLC0415

    from .ball_dual import check_engine  # noqa: PLC0415

    engine = check_engine(engine)
    weights, upper, notes, jacobian_at, evaluator = point_bounds(arch, weights, DEFAULT_PRIME,
                                                                 engine)
    t_upper = time.perf_counter() - t_start
    gen = seeded_generator(seed, "point-inputs")
    # N(0, 1) inputs drawn as always; with a vocabulary, distinct one-hot token sequences (at most
    # V^t of them, said in the notes).
    draw = input_stream(arch, gen)
    X = to_dyadic(draw(n))
    n = X.shape[0]
    if draw.tokens is not None:
        notes.append(draw.tokens.note())
    t0 = time.perf_counter()
    J = _finite_jacobian(jacobian_at, X, weights)
    sv = torch.linalg.svdvals(J / J.norm(dim=1, keepdim=True).clamp(min=1e-300))
    nr = numerical_rank(sv, *J.shape)
    t_float = time.perf_counter() - t0
    say(f"float64 rank {nr.rank} (gap {nr.gap:.1f} decades); upper bound at the point {upper}")
    seconds = {"upper bound": t_upper, "float jacobian": t_float}
    float_ok = (not nr.is_ambiguous(min_gap)) and nr.rank <= upper
    escalate = method == "certified" or (method == "auto" and not (
        float_ok and nr.gap >= ESCALATE_GAP_DECADES and nr.rank == upper))
    result = dict(architecture=arch.to_dict(), n_params=arch.n_params, float_rank=nr.rank,
                  gap=nr.gap, n_samples=n, seed=seed, upper_bound=upper, rank_rule=rank_rule(min_gap))
    if not escalate:
        # Near degenerate weights float64 can return too low a rank with a clear gap, so a float
        # rank below the proven upper bound is never settled on its own.
        status = "settled" if float_ok and nr.rank == upper else "ambiguous"
        if nr.rank < upper:
            notes.append(f"float64 rank {nr.rank} is below the proven upper bound {upper} at this "
                         "point: not settled without a proof (use --method certified or auto)")
        out = PointRank(rank=nr.rank, method="numerical", status=status, lower_bound=None,
                        precision=None, notes=notes, **result)
    else:
        exact = _exact_rank(arch, weights, bits, say)
        if exact is not None:
            seconds.update(exact.seconds)
        if exact is not None and exact.rank is not None:
            out = _exact_result(exact, nr, upper, method, notes, result)
        else:
            out = _ball_result(J, X, nr, upper, method, bits, evaluator, say, seconds, notes,
                               result, exact, engine)
    if capped is not None:
        out.notes.insert(0, capped)
    if generic:
        from .api import neuromanifold_dim  # noqa: PLC0415

        t1 = time.perf_counter()
        gen_result = neuromanifold_dim(arch, method="auto", seed=seed)
        out.generic_dimension = gen_result.dimension
        out.generic_status = gen_result.status
        out.generic_method = gen_result.method
        out.seconds["generic dimension"] = time.perf_counter() - t1
        if gen_result.is_settled and out.is_settled and out.rank < gen_result.dimension:
            out.notes.append(f"this point is degenerate: rank {out.rank} < generic dimension "
                             f"{gen_result.dimension}")
    out.seconds = {**seconds, **out.seconds, "total": time.perf_counter() - t_start}
    return out


def _exact_rank(arch: Architecture, weights, bits: int, say: Progress):
    """The exact path's record (`exact_point.exact_rank_at_point`), None where it does not
    apply; a ComputationError of its ball pass is left to the fallback, said in its reason."""
    from .exact_point import ExactPointRank, exact_rank_at_point  # noqa: PLC0415

    try:
        return exact_rank_at_point(arch, weights, precision=bits, progress=say)
    except ComputationError as exc:
        return ExactPointRank(None, 0, None, reason=f"its ball pass failed ({exc})")


def _exact_result(exact, nr, upper: int, method: str, notes: list, result: dict) -> PointRank:
    """The `exact` PointRank: rank over Q of the lattice Jacobian, both bounds."""
    if exact.rank > upper:
        raise ComputationError(f"the exact rank over Q ({exact.rank}) exceeds the symmetry upper "
                               f"bound {upper} at this point: a bug; please report it with the "
                               "command (--debug shows the traceback).")
    if method == "auto":
        notes.append(f"auto: float64 rank {nr.rank} (gap {nr.gap:.1f} decades, upper bound "
                     f"{upper}) escalated to the exact rank over Q")
    notes.append(exact.note())
    if exact.rank < upper:
        notes.append(f"the symmetry upper bound n_params - rank_p(kernel directions) = {upper} "
                     f"is not met at this point: the exact rank {exact.rank} is below it")
    if nr.rank != exact.rank:
        notes.append(f"float64 alone gave {nr.rank} here at {result['n_samples']} random inputs"
                     + (": wrong, as proved" if nr.rank > exact.rank else
                        " (a lower bound: too few inputs or round-off)"))
    return PointRank(**{**result, "upper_bound": exact.rank}, rank=exact.rank, method="exact",
                     status="certified", lower_bound=exact.rank, precision=exact.bits,
                     notes=notes, exact={**exact.to_dict(), "symmetry_upper_bound": upper})


def _ball_result(J, X, nr, upper: int, method: str, bits: int, evaluator, say: Progress,
                 seconds: dict, notes: list, result: dict, exact,
                 engine: str = "verified") -> PointRank:
    """Today's proof: the ball (and verified float64) lower bound against the symmetry bound."""
    if exact is not None:
        notes.append(exact.note())
    if method == "auto":
        notes.append(f"auto: float64 rank {nr.rank} (gap {nr.gap:.1f} decades, upper bound "
                     f"{upper}) escalated to ball arithmetic from {bits} bits")
    evaluate = evaluator(X)
    ball = prove_rank(J, upper, evaluate, precision=bits, progress=say)
    if not ball.proved and 0 < nr.rank < upper:
        say(f"rank {upper} not proved; trying the float64 rank {nr.rank}")
        first = ball
        ball = prove_rank(J, nr.rank, evaluate, precision=bits, progress=say)
        ball.notes = first.notes + ball.notes
        ball.seconds = {k: v + first.seconds[k] for k, v in ball.seconds.items()}
    seconds.update(ball.seconds)
    certified = ball.proved == upper
    notes += ball.notes
    if engine == "ball":
        notes.append("engine ball (--engine ball): the lower bound in arb balls only, the "
                     "verified float64 certificate not tried")
    if certified:
        how = (f"a {upper} x {upper} matrix W J V (or block of J) at this point is "
               f"nonsingular, {ball.determinant} (verified float64 arithmetic)"
               if ball.engine == "verified" else
               f"a {upper} x {upper} block of J at this point has determinant "
               f"{ball.determinant} ({ball.precision}-bit ball arithmetic)")
        notes.append(f"certified: {how}, and n_params - rank_p(kernel directions) = {upper}")
        if nr.rank != upper:
            notes.append(f"float64 alone gave {nr.rank} here: wrong, as proved")
    else:
        notes.append(f"bounds do not meet at this point: {ball.proved} <= rank <= {upper}")
    return PointRank(rank=ball.proved, method="certified",
                     status="certified" if certified else "lower-bound",
                     lower_bound=ball.proved, precision=ball.precision, notes=notes, **result)


def _finite_jacobian(jacobian_at, X: torch.Tensor, weights) -> torch.Tensor:
    """The float64 Jacobian at the caller's weights, refused as their bad input (exit code 2)
    when it overflows: the weights, not the tool's draws, are too large for float64."""
    tensors = list(weights.values()) if isinstance(weights, dict) else \
        list(weights.Q + weights.K + weights.V)
    try:
        J = jacobian_at(X)
    except ComputationError:
        J = torch.tensor(math.nan)
    require_finite(J, "Jacobian entries", input_name="weights",
                   largest=largest_entry(torch.as_tensor(t, dtype=torch.float64) for t in tensors))
    return J
