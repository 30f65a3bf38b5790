"""`neuromanifold_dim`: the dimension of a neuromanifold by the method asked for.

A `DimensionProblem` (the network and the options, validated once) is handed to `solve`, which
runs the route `plan_route` picks (the routes and their order are listed there);
`neuromanifold_dim` is the keyword form of the same call.

Methods:
  numerical  rank of the float64 Jacobian at a random point, decided by the gap rule
             (`core.rank`); `ambiguous` when the gap is small or N did not saturate.
  exact      rank over F_p at a random point: a proven lower bound (polynomial networks).
  certified  that lower bound together with the upper bound n_params - rank(symmetry tangents);
             `certified` when they meet. Non-polynomial networks (softmax, relu/gelu/tanh MLPs,
             norms): the lower bound is a ball-arithmetic determinant at a rational point
             instead (`dimension.ball`, and `dimension.ball_dual` for transformer blocks).
  auto       certified for polynomial networks; for the others numerical first, escalated to
             certified when the gap is below ESCALATE_GAP_DECADES or the rank is ambiguous.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..core.architecture import Architecture, check_architecture
from ..errors import ResourceError
from ..core.checks import METHODS, bad_value, check_choice, check_int, check_min_gap, check_seed
from ..core.scheduler import check_backend
from ..core.rank import MIN_GAP_DECADES
from .memory import gauge_applies
from .plan import (certified_plan, checked_numerical_plan, cuda_available, exact_plan,
                   numerical_plan)
from .result import AmbiguousRankWarning, DimensionResult, Progress

# A numerical rank of a non-polynomial network (softmax, blocks) whose singular-value gap is
# below this many decades (or ambiguous) is escalated to the certified path by method `auto`
# (docs/certified_softmax.md).
ESCALATE_GAP_DECADES = 6.0
# ... but only up to this many parameters, where a proof costs at most about 3 times the numerical
# answer it would replace. Measured 2026-12-03 on a quiet 2-core machine with the verified float64
# certificate (docs/verified.md): Figure 3 at 1,792 parameters certified in 4.5 s against 2.3 s
# numerical (2x); at 2,304 in 15.5 s against 2.8 s (5.5x: the first inputs hide the rank, so N
# doubles before the proof). Past the limit `auto` keeps the numerical answer, with a note;
# `--method certified` proves it.
ESCALATE_MAX_PARAMS = 2048
# ... and up to this many for the paper's softmax model where its gauge applies
# (`memory.gauge_applies`): its proof needs neither the float Jacobian nor its SVD (the gauged
# proof, docs/verified.md). Measured 2026-12-03, one `bench_large_softmax.py --certified` run per
# size on the shared 2-core machine (load 5-8), certified against numerical wall time: 2,304
# parameters (Figure 3, delta 32, t = 3) 11.6 s / 36.7 s (0.32x); 2,560 (32,32,32 keys 4,4,
# t = 16) 12.9 s / 43.9 s (0.29x); 5,760 (48, keys 6) 47.5 s / 186.7 s (0.25x); 10,240 (64, keys
# 8) 133.8 s / 82.6 s (1.62x; 69.7 s / 69.3 s, 1.01x, in a second run at load 2-3). Not
# measured past 10,240, where the r x r certificate's r^3 grows
# faster than the numerical rank's cost.
ESCALATE_MAX_PARAMS_GAUGED = 10240

# The certified path's lower-bound engines (`ball_dual.ENGINES`; torch-free here).
ENGINES = ("verified", "ball")

MethodChoice = Literal["auto", "numerical", "exact", "certified"]
DeviceChoice = Literal["cpu", "cuda", "auto"]


@dataclass(frozen=True)
class DimensionProblem:
    """What `solve` computes: a network and how, every field validated once, here.

    Fields are those of `neuromanifold_dim` (see there) except `progress`; `samples` above
    n_params is capped at n_params (`cap_samples`) and the note saying so is kept in
    `capped_note`.

    Example:
        >>> problem = DimensionProblem(Architecture((3, 3, 3), 2, 3), method="exact")
        >>> plan_route(problem).name
        'exact'
    """

    arch: Architecture
    method: str = "auto"
    samples: int | None = None
    seed: int = 0
    device: str = "cpu"
    min_gap: float = MIN_GAP_DECADES
    prime: int | None = None
    precision: int | None = None
    engine: str = "verified"
    backend: str = "local"
    scheduler: str | None = None
    max_memory: str | float | int | None = None
    capped_note: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        check_architecture(self.arch)
        checked = {"method": check_choice("method", self.method, METHODS),
                   "device": check_choice("device", self.device, ("cpu", "cuda", "auto")),
                   "backend": check_backend(self.backend, self.scheduler),
                   "seed": check_seed(self.seed), "min_gap": check_min_gap(self.min_gap),
                   "engine": check_choice("engine", self.engine, ENGINES)}
        if self.prime is not None:
            checked["prime"] = check_word_size_prime(self.prime)
        checked["samples"], checked["capped_note"] = cap_samples(self.arch, self.samples)
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Route:
    """One way of computing a dimension: `name` (for messages and tests) and `run(problem,
    progress)`."""

    name: str
    run: Callable[[DimensionProblem, Progress | None], DimensionResult]


def neuromanifold_dim(arch: Architecture, *, method: MethodChoice = "auto",
                      samples: int | None = None, seed: int = 0, device: DeviceChoice = "cpu",
                      min_gap: float = MIN_GAP_DECADES, prime: int | None = None,
                      progress: Progress | None = None,
                      max_memory: str | float | int | None = None, precision: int | None = None,
                      backend: str = "local", scheduler: str | None = None,
                      engine: str = "verified") -> DimensionResult:
    """Dimension of the neuromanifold of `arch`, by `method` (see the module docstring).

    A thin wrapper: `solve(DimensionProblem(arch, ...), progress)`.

    Args:
        arch: the network.
        method: `auto`, `numerical`, `exact` or `certified`.
        samples: input samples N; by default N grows until the rank saturates.
        seed: user seed; every random draw comes from a stream derived from it.
        device: `cpu`, `cuda` or `auto` (numerical method only).
        min_gap: decades of singular-value gap needed to settle a numerical rank.
        prime: the prime p of the exact methods (default 2147483629).
        progress: called with one line per phase (for a progress display).
        max_memory: budget for the estimated peak (bytes, '16G', or a fraction of the available
            memory; default 80% of it): `ResourceError` before any large allocation when the
            estimate (`dimension.memory`) exceeds it. On a GPU (numerical method) the budget
            is the GPU's: default 80% of its free memory.
        precision: bits of the ball arithmetic of the certified softmax path (default 128).
        backend: `local`, or `dask` to compute the numerical rank's Jacobian rows on a Dask
            cluster (`dimension.dask_rank`; `auto` then means `numerical`, which is not escalated).
        scheduler: the Dask scheduler's address (default: a LocalCluster started for the call).
        engine: the certified path's lower-bound engine: `verified` (the verified float64
            certificate first, arb balls where floats cannot separate; docs/verified.md) or
            `ball` (arb balls only, to cross-check the first).

    Example:
        >>> r = neuromanifold_dim(Architecture((3, 3, 3), (2, 2), 3), method="numerical")
        >>> r.dimension + r.fiber_dim == r.n_params
        True
    """
    problem = DimensionProblem(arch, method=method, samples=samples, seed=seed, device=device,
                               min_gap=min_gap, prime=prime, precision=precision,
                               backend=backend, scheduler=scheduler, max_memory=max_memory,
                               engine=engine)
    return solve(problem, progress)


def solve(problem: DimensionProblem, progress: Progress | None = None) -> DimensionResult:
    """The dimension `problem` asks for, by the route `plan_route` picks."""
    result = plan_route(problem).run(problem, progress)
    if problem.capped_note is not None:
        result.notes.insert(0, problem.capped_note)
    return result


def check_word_size_prime(prime: object) -> int:
    """`prime` validated for every exact and certified path (a prime 3 <= p < 2^31), before any
    work: a composite is refused whichever path would have used it (lightning, softmax `auto`
    before it escalates, relu blocks)."""
    from .fp import check_prime  # noqa: PLC0415

    p = check_prime("prime", prime)
    if p >= 2 ** 31:
        raise bad_value("prime", "a prime below 2^31 (residue products must fit in int64)", p,
                        "Pass a prime such as 2147483629 (the default).")
    return p


def cap_samples(arch: Architecture, samples: object) -> tuple[int | None, str | None]:
    """(N, note): `samples` validated, and capped at n_params with a note when it is larger.

    Math: for generic inputs the row spaces of the samples' Jacobians add rank until one
    generic sample adds none, after which none ever does (the span of every sample's rows is
    reached); each sample that adds rank adds at least one, so N = n_params samples reach the
    rank of all of them, and more only cost time and memory."""
    if samples is None:
        return None, None
    samples = check_int("samples", samples, minimum=1, fix="Pass --samples 1 or more, or leave "
                        "it out to grow N automatically.")
    if samples <= arch.n_params:
        return samples, None
    return arch.n_params, (f"N capped at n_params = {arch.n_params} (asked for {samples}): "
                           "generic samples past it cannot add rank")


def plan_route(problem: DimensionProblem) -> Route:
    """The route of `problem`, or the one-line refusal of an option that does not apply to it.

    Routes, in the order they are tried:
      dask       backend 'dask': the numerical rank's rows on a Dask cluster (numerical method
                 of the paper's model only);
      escalating non-polynomial networks by `certified` or `auto`: ball arithmetic, directly or
                 after a numerical pass with a thin gap (`_escalating`);
      numerical  the float64 Jacobian rank (`numerical.numerical_dim`, every network; the
                 paper's model adds the gauge and elimination routes);
      exact      polynomial networks by `exact`, or `certified` / `auto`: the rank over F_p with
                 the symmetry upper bound (the paper's model: reverse pass mod p and gauge;
                 block networks: forward-mode duals over F_p).
    """
    arch, method = problem.arch, problem.method
    if problem.backend == "dask":
        _check_dask(problem)
        return Route("dask", _dask_dim)
    if method == "exact" and not arch.is_polynomial:
        raise bad_value("method", "'numerical', 'certified' or 'auto' for softmax networks "
                        "and other non-polynomial ones (relu/gelu/tanh MLPs, norms)", method,
                        "Softmax networks are not polynomial (nor are relu/gelu/tanh MLPs or "
                        "norms), so there is no exact rank over F_p; use --method certified "
                        "(ball arithmetic) or numerical.")
    if not arch.is_polynomial and method in ("certified", "auto"):
        return Route("escalating", _escalating)
    if problem.engine != "verified":
        raise bad_value("engine", "'ball' only for non-polynomial networks (certified or auto)",
                        problem.engine, "Drop --engine: the other ranks are exact over F_p or "
                        "float64, without a ball engine.")
    if problem.precision is not None:
        raise bad_value("precision", "given only for non-polynomial networks (certified or auto)",
                        problem.precision, "Drop --precision: the other ranks are exact over F_p "
                        "or float64.")
    if method == "numerical":
        if problem.prime is not None:
            raise bad_value("prime", "given only with the exact or certified method",
                            problem.prime, "Drop the prime, or ask for method 'certified' of a "
                            "lightning network.")
        return Route("numerical", _numerical)
    if problem.device == "cuda":
        raise bad_value("device", "'cpu' (or 'auto') for the exact methods", problem.device,
                        "Exact arithmetic over F_p runs on the CPU; drop --device or use "
                        "--method numerical for a GPU run.")
    return Route("exact", _exact)


def _numerical(problem: DimensionProblem, progress: Progress | None) -> DimensionResult:
    """The float64 rank: its plan checked before torch is imported, so refusals are quick."""
    arch, device = problem.arch, problem.device
    plan = checked_numerical_plan(arch, problem.samples, problem.max_memory, device)
    from .numerical import numerical_dim  # noqa: PLC0415

    return numerical_dim(arch, samples=problem.samples, seed=problem.seed, device=device,
                         min_gap=problem.min_gap, progress=progress,
                         max_memory=problem.max_memory, plan=plan)


def _exact(problem: DimensionProblem, progress: Progress | None) -> DimensionResult:
    """The rank over F_p, with the symmetry upper bound unless the method is `exact`."""
    arch, certify = problem.arch, problem.method != "exact"
    plan = exact_plan(arch, certify, problem.samples).check(problem.max_memory)
    options = {} if problem.prime is None else {"prime": problem.prime}
    from .exact import exact_dim  # noqa: PLC0415

    return exact_dim(arch, certify=certify, samples=problem.samples, seed=problem.seed,
                     progress=progress, max_memory=problem.max_memory, plan=plan, **options)


def _check_dask(problem: DimensionProblem) -> None:
    """The Dask route computes numerical ranks of the paper's model only: refuse the rest."""
    if problem.method in ("exact", "certified"):
        raise bad_value("method", "'numerical' (or 'auto') with --backend dask", problem.method,
                        "Exact and certified ranks run on this machine; drop --backend dask, or "
                        "use --method numerical.")
    if problem.arch.is_block:
        raise bad_value("backend", "'local' for block networks (heads, values, residual, MLP, "
                        "norms)", "dask", "Drop --backend dask: block ranks run on this machine.")
    for name, value in (("prime", problem.prime), ("precision", problem.precision),
                        ("engine", None if problem.engine == "verified" else problem.engine)):
        if value is not None:
            raise bad_value(name, "given only with the exact or certified method (not with "
                            "--backend dask)", value, f"Drop --{name}.")


def _dask_dim(problem: DimensionProblem, progress: Progress | None) -> DimensionResult:
    """The numerical rank on Dask (refusals in `_check_dask`)."""
    arch = problem.arch
    plan = checked_numerical_plan(arch, problem.samples, problem.max_memory, backend="dask",
                                  scheduler=problem.scheduler)  # before torch: quick
    from .numerical import numerical_dim  # noqa: PLC0415

    result = numerical_dim(arch, samples=problem.samples, seed=problem.seed,
                           device=problem.device, min_gap=problem.min_gap, progress=progress,
                           max_memory=problem.max_memory, backend="dask",
                           scheduler=problem.scheduler, plan=plan)
    if problem.method == "auto":
        result.notes.append("auto with --backend dask: the numerical rank, not escalated (exact "
                            "and certified ranks run on this machine)")
    return result


def _warned(result: DimensionResult) -> DimensionResult:
    """`result`, after the AmbiguousRankWarning its numerical pass (run with warnings silenced,
    in case it was escalated) would have raised when it is not settled."""
    if result.status != "settled":
        import warnings  # noqa: PLC0415

        warnings.warn(f"numerical rank {result.dimension} is {result.status}: "
                      + "; ".join(result.notes), AmbiguousRankWarning, stacklevel=3)
    return result


def escalation_limit(arch: Architecture) -> int:
    """The most parameters `auto` escalates: ESCALATE_MAX_PARAMS_GAUGED for the paper's softmax
    model where its gauge applies (the gauged proof), else ESCALATE_MAX_PARAMS."""
    return ESCALATE_MAX_PARAMS_GAUGED if gauge_applies(arch) else ESCALATE_MAX_PARAMS


def _escalating(problem: DimensionProblem, progress: Progress | None) -> DimensionResult:
    """Non-polynomial networks: `certified` proves; `auto` runs numerical and escalates on a
    thin gap or an ambiguous rank."""
    import time  # noqa: PLC0415

    from .memory import BALL_DEFAULT_PRECISION as DEFAULT_PRECISION  # noqa: PLC0415

    t_start = time.perf_counter()  # an escalated answer's total covers both passes
    arch, method, device = problem.arch, problem.method, problem.device
    samples, max_memory, precision = problem.samples, problem.max_memory, problem.precision
    if precision is not None:
        precision = check_int("precision", precision, minimum=16,
                              fix=f"Pass --precision {DEFAULT_PRECISION} (bits), or more.")
    options = {"seed": problem.seed, "progress": progress, "prime": problem.prime,
               "precision": DEFAULT_PRECISION if precision is None else precision,
               "engine": problem.engine}
    on_gpu = (lambda: device == "cuda" or (device == "auto" and cuda_available()))
    proof = certified_plan(arch, samples, options["precision"])
    # Both routes build the float Jacobian first; the certified one adds the ball block.
    if method == "certified":
        proof = proof.check(max_memory, skip=on_gpu)
    else:
        first_plan = numerical_plan(arch, samples).check(max_memory, skip=on_gpu)
    from .numerical import numerical_dim as float_dim  # noqa: PLC0415  (torch only past the check)

    def certified_dim(arch, **kwargs):
        # flint only where a proof is computed: a numerical answer (on a GPU machine, say)
        # needs neither flint nor the ball modules
        from .ball_dual import certified_dim as prove  # noqa: PLC0415
        from .fp import DEFAULT_PRIME  # noqa: PLC0415

        return prove(arch, **dict(kwargs, prime=kwargs["prime"] or DEFAULT_PRIME))
    if method == "certified":
        if device == "cuda":
            raise bad_value("device", "'cpu' (or 'auto') for the certified method", device,
                            "Ball arithmetic runs on the CPU; drop --device.")
        return certified_dim(arch, samples=samples, **options)
    import warnings  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmbiguousRankWarning)
        first = float_dim(arch, samples=samples, seed=problem.seed, device=device,
                          min_gap=problem.min_gap, progress=progress, max_memory=max_memory,
                          plan=first_plan)
    if first.status == "settled" and first.gap is not None and first.gap >= ESCALATE_GAP_DECADES:
        first.notes.append(f"auto: numerical gap {first.gap:.1f} >= {ESCALATE_GAP_DECADES} "
                           "decades, not escalated")
        return first
    why = (f"gap {first.gap:.1f} < {ESCALATE_GAP_DECADES} decades" if first.status == "settled"
           else f"numerical rank {first.dimension} {first.status}")
    limit = escalation_limit(arch)
    if arch.n_params > limit:
        first.notes.append(f"auto: {why}, but not escalated: {arch.n_params} parameters is past "
                           f"the {limit} up to which auto escalates (the proof would "
                           "take far longer than this answer); pass --method certified to prove it")
        (progress or (lambda _m: None))(f"auto: {why}; not escalated ({arch.n_params} parameters "
                                        f"> {limit}; --method certified proves it)")
        return _warned(first)
    try:
        proof.check(max_memory)
    except ResourceError as exc:  # keep the numerical answer, labelled as it is, and say why
        first.notes.append(f"auto: {why}, but not escalated: {exc}")
        return _warned(first)
    where = "" if str(first.device) == "cpu" else " (ball arithmetic, on the CPU)"
    (progress or (lambda _m: None))(f"auto: {why}; escalating to the certified path{where}")
    result = certified_dim(arch, **options)
    result.notes.insert(0, f"auto: numerical first gave {first.dimension} ({why}); escalated to "
                        f"the certified path at {options['precision']} bits")
    # the total is the wall time of the whole answer: the numerical pass, the checks and the
    # proof (the proof's own total covers only itself)
    result.seconds = {"numerical": first.seconds.get("total", 0.0),
                      **{k: v for k, v in result.seconds.items() if k != "total"},
                      "total": time.perf_counter() - t_start}
    return result
