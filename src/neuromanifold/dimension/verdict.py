"""The verdict on a float64 rank: its status and notes, from what was measured.

One rule serves the numerical engine (`numerical.numerical_dim`, every network) and
`models.functional.functional_dim`. In order:

1. the singular-value gap must be clear (`rank.NumericalRank.is_ambiguous`), else `ambiguous`;
2. the symmetry tangents must lie in the float kernel (leak at most `MAX_LEAK`), else `ambiguous`;
3. every doubt the engine measured (a saturated softmax point, an unclear elimination) makes it
   `ambiguous`;
4. N must have stopped growing for a reason that shows saturation (`growth.grow_samples`:
   `bound` or `saturated`, or `exhausted`: every input of a finite input set used). N fixed by the caller: `ambiguous`. A cap: `stopped` when every
   reading so far was clear (the rank was still growing), else `ambiguous`;
5. a reading that would settle below the upper bound goes through the engine's late checks (in
   order, each run only if the ones before found nothing: they may cost a Jacobian), any of which
   makes it `ambiguous`;
6. a piecewise-analytic map (relu and its kin) settled below the upper bound is a `lower-bound`
   (NOTE: [relu ranks depend on the point]).

Otherwise the rank is `settled`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# Largest ||J Q1|| / ||J|| (the float Jacobian on the symmetry tangents, Q1 an orthonormal basis
# of their span: `jacobians.KernelSplit`) accepted as round-off. The tangents are exact kernel
# vectors, so the leak is float64 round-off times the conditioning of the split (1.0e-16 in
# docs/tutorial.md's example); 1e-9 leaves seven decades for that and still catches a wrong
# tangent, whose leak is of the order of the Jacobian's own directions.
MAX_LEAK = 1e-9
# The certified block path's guard (`ball_dual._check_kernel`): max |J T^T| over
# max |J| * max(1, max |T|), with the catalogue tangents T unnormalised, at the rational point the
# proof uses. A different ratio from MAX_LEAK's (no orthonormal basis, entry-wise maxima), so its own
# threshold; it raises an error (a catalogue bug) rather than deciding a status, and its value is
# kept as it was (1e-8), so that no certified result changes.
MAX_KERNEL_IMAGE_CERTIFIED = 1e-8

STABLE = "stable rank"


def leak_note(leak: float) -> str:
    """The note of a leak above `MAX_LEAK`."""
    return f"symmetry tangents are not in the float kernel (leak {leak:.1e}): round-off"


def numerical_verdict(reading, rank: int, upper: int, min_gap: float, reason: str, detail: str, *,
                      n_samples: int, leak: float = 0.0, doubts: Iterable[str | None] = (),
                      late_checks: Iterable[Callable[[], str | None]] = (),
                      bound_name: str = "upper bound",
                      fixed_hint: str = "leave --samples out to grow N",
                      piecewise: str | None = None,
                      piecewise_hint: str = "try --method certified or another --seed",
                      ) -> tuple[str, list[str]]:
    """(status, notes) of a float64 rank `rank` (read as `reading`, a `rank.NumericalRank`) below
    or at `upper`, N having stopped for `reason` (`growth.Growth.reason`, with its `detail`).

    `doubts` are notes of measured reasons not to trust a reading below the bound (None: none);
    `late_checks` run only on a reading about to settle below the bound; `bound_name` names what
    the rank met; `piecewise` names the piecewise-analytic parts of the map (None: analytic).
    The rules, in order, are the module docstring's.
    """
    notes: list[str] = []
    ambiguous = reading.is_ambiguous(min_gap)
    if ambiguous:
        notes.append(reading.ambiguity_note(min_gap))
    if leak > MAX_LEAK:
        ambiguous = True
        notes.append(leak_note(leak))
    for doubt in doubts:
        if doubt:
            ambiguous = True
            notes.append(doubt)
    status = "ambiguous" if ambiguous else "settled"
    if reason in ("bound", "saturated"):
        notes.append(f"saturated in N: {bound_name if reason == 'bound' else STABLE}")
    elif reason == "exhausted":
        notes.append(f"every input used: {detail}")
    elif reason == "fixed":
        status = "ambiguous"
        why = (f"rank {rank} is below the {bound_name} {upper} and" if rank < upper
               else "the reading is not clear and")
        notes.append(f"{why} N = {n_samples} was fixed: saturation in N not verified ({fixed_hint})")
    else:  # a cap: the readings were clear (stopped) or not (ambiguous)
        status = "ambiguous" if ambiguous else "stopped"
        notes.append(f"stopped at a cap before the rank saturated with a clear gap: {detail}")
    if status == "settled" and rank < upper:
        for check in late_checks:
            doubt = check()
            if doubt:
                status = "ambiguous"
                notes.append(doubt)
                break
    if status == "settled" and piecewise is not None:
        if rank < upper:
            # NOTE: [relu ranks depend on the point]
            # A relu network is analytic only inside each activation region (an open set of
            # parameters on which every unit stays on one piece at every input); the Jacobian
            # rank is constant off a null set inside a region but can differ between regions of
            # positive measure (a unit dead on every input stays dead under small changes), and
            # the dimension is the largest of them. Inputs that rarely enter a unit's region can
            # also keep a stable rank in N below the rank of the whole input space (measured in
            # docs/models.md). So a clear rank at one point is only a lower bound on the dimension
            # unless it meets the upper bound (measured: a 2-head residual relu block reads 38 at
            # one point with a 10-decade gap, 40 = the bound at two others).
            status = "lower-bound"
            notes.append(f"piecewise-analytic parts ({piecewise}): the map is piecewise analytic "
                         f"(analytic only inside each activation region), and regions can differ "
                         f"in rank, so the rank {rank} at this point is a lower bound on the "
                         f"dimension, which is at most {upper}; {piecewise_hint}")
        else:
            notes.append(f"piecewise-analytic parts ({piecewise}): the rank meets the upper bound "
                         f"{upper}, so no activation region has a higher one")
    return status, notes


def unsettled_message(what: str, rank: int, status: str, notes: list[str]) -> str | None:
    """The `AmbiguousRankWarning` text of an `ambiguous` or `stopped` rank, else None."""
    if status not in ("ambiguous", "stopped"):
        return None
    return f"{what}: numerical rank {rank} is {status}: " + "; ".join(notes)
