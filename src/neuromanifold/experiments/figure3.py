"""Reproductions of the paper's experiments."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from ..core.architecture import Architecture
from ..core.checks import bad_value, check_choice, check_int
from ..core.limits import MAX_WIDTH
from ..dimension.numerical import DimensionResult, numerical_dim

# The paper's Figure 3 setting: l = 2, t = 3, a_i = 2, d_i = delta, N = 250.
FIGURE3_TOKENS = 3
FIGURE3_KEYS = 2
FIGURE3_SAMPLES = 250


def parse_int_set(name: str, text: str, example: str = "3-10") -> list[int]:
    """Parse 'a-b' (inclusive range) or 'a,b,c' into a sorted list of distinct positive ints."""
    spec = str(text).strip()
    range_match = re.fullmatch(r"(\d+)\s*-\s*(\d+)", spec)
    if range_match:
        low, high = int(range_match[1]), int(range_match[2])
        if low < 1 or high < low or high > MAX_WIDTH:
            raise bad_value(name, f"a range a-b with 1 <= a <= b <= {MAX_WIDTH}", text,
                            f"Pass e.g. --{name} {example}.")
        return list(range(low, high + 1))
    if re.fullmatch(r"\d+(\s*,\s*\d+)*", spec):
        values = sorted({int(v) for v in spec.split(",")})
        if values[0] < 1 or values[-1] > MAX_WIDTH:
            raise bad_value(name, f"integers in 1..{MAX_WIDTH}", text, f"Pass e.g. --{name} {example}.")
        return values
    raise bad_value(name, "a range a-b or a comma-separated list of positive integers", text,
                    f"Pass e.g. --{name} {example} or --{name} 3,5,8.")


def figure3_architecture(delta: int, attention: str) -> Architecture:
    """widths (delta, delta, delta), keys (2, 2), t = 3."""
    return Architecture((delta,) * 3, (FIGURE3_KEYS,) * 2, FIGURE3_TOKENS, attention)


def figure3_plans(deltas: list[int], attention: str, *, samples: int = FIGURE3_SAMPLES,
                  device: str = "cpu", max_memory=None) -> dict:
    """The numerical plan of every delta (`dimension.plan`), checked before any work: a delta
    whose architecture is invalid, or whose estimated peak exceeds the budget (default 80% of the
    available memory; on a GPU its free memory, once the device is resolved), is refused."""
    from ..dimension.plan import checked_numerical_plan  # noqa: PLC0415

    return {delta: checked_numerical_plan(figure3_architecture(delta, attention), None,
                                          max_memory, device, min_samples=samples)
            for delta in deltas}


def figure3(attention: str = "softmax", deltas: list[int] | None = None, *, seed: int = 0,
            samples: int = FIGURE3_SAMPLES, device: str = "cpu",
            progress: Callable[[int, DimensionResult], None] | None = None,
            method: str = "numerical", precision: int | None = None,
            plans: dict | None = None,
            on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """The paper's Figure 3: numerical dimension vs the closed form, for l = 2, t = 3, a_i = 2.

    Math: expected = delta^2 + 8 delta - 8 (Eq. 16, softmax) or 2 less (Eq. 14, lightning).
    Each point starts at N = `samples` input sequences (the paper's 250) and grows N if the rank
    has not saturated. Rows carry `status` so that an ambiguous point is never read as settled.
    `method` 'certified' proves every point instead (softmax: docs/certified_softmax.md), each
    row then carrying its lower and upper bound and the ball precision. `plans`: the deltas'
    checked plans (`figure3_plans`), made here when not given. `on_row(row)` is called with each
    row as soon as it is finished (the CLI writes it to disk then), before `progress`.
    """
    samples = check_int("samples", samples, minimum=1, fix="Pass --samples 250 (the paper's N).")
    method = check_choice("method", method, ("numerical", "certified"))
    device = check_choice("device", device, ("cpu", "cuda", "auto"))
    if device == "cuda" and method == "certified":
        raise bad_value("device", "'cpu' (or 'auto') for the certified method", device,
                        "Ball arithmetic and F_p run on the CPU; drop --device.")
    deltas = deltas or list(range(3, 11))
    if plans is None:
        plans = figure3_plans(deltas, attention, samples=samples, device=device)
    rows = []
    for delta in deltas:
        arch = figure3_architecture(delta, attention)
        t0 = time.perf_counter()
        if method == "certified":
            from ..dimension.api import neuromanifold_dim  # noqa: PLC0415

            result = neuromanifold_dim(arch, method="certified", seed=seed, precision=precision)
        else:
            result = numerical_dim(arch, seed=seed, device=device, min_samples=samples,
                                   plan=plans[delta])
        row = {"delta": delta, "n_params": result.n_params, "estimated": result.dimension,
               "expected": result.formula.value, "formula": result.formula.name,
               "hypotheses_hold": result.formula.hypotheses_hold, "gap": result.gap,
               "status": result.status, "method": result.method, "n_samples": result.n_samples,
               "seconds": time.perf_counter() - t0}
        if method == "certified":
            row.update(lower_bound=result.lower_bound, upper_bound=result.upper_bound,
                       precision=next((n.split()[2] for n in result.notes
                                       if n.startswith("ball precision")), None))
        rows.append(row)
        if on_row:
            on_row(row)
        if progress:
            progress(delta, result)
    return rows
