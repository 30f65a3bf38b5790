"""The one check for non-finite values on the way to a result.

Float64 overflows quietly: weights of size 1e300, or a deep lightning network (a polynomial of
degree 3^l) at random weights, give inf and then nan, and a comparison or a rank read from them
is meaningless (nan <= tol is False: "not the same function"). Every result path (network
outputs compared by `fiber`, Jacobians whose rank is read, the matrices `classify` ranks) passes
its values through `require_finite` before deciding anything.

Who is to blame decides the exit code: values made from the caller's weights raise `InputError`
naming that input (exit code 2: rescale the weights); values made from the tool's own random
draws raise `ComputationError` (exit code 1: float64 cannot answer this request, a different
method can).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ComputationError
from .checks import bad_value


def _all_finite(values) -> bool:
    if isinstance(values, (int, float)):
        return math.isfinite(values)
    if isinstance(values, np.ndarray):
        return values.dtype == object or bool(np.isfinite(values).all())
    import torch  # noqa: PLC0415  (only on the computing path)

    return bool(torch.isfinite(values).all())


def require_finite(values, what: str, *, input_name: str | None = None, largest: float | None = None,
                   fix: str = "") -> None:
    """Raise unless every entry of `values` (tensor, array or float) is finite.

    `what` names the values ("the outputs", "the Jacobian"); `input_name` the caller's input
    they were made from (then `InputError`, with `largest`, the largest weight entry, quoted),
    else `ComputationError` with `fix`.
    """
    if _all_finite(values):
        return
    if input_name is not None:
        size = "" if largest is None else f" (largest |entry| {largest:.1e})"
        raise bad_value(input_name, f"weights whose {what} stay finite in float64",
                        f"weights{size} for which {what} overflow to inf or nan",
                        "Rescale the weights (for example divide each matrix by its largest entry).")
    raise ComputationError(f"{what} contain inf or nan (float64 overflow); no answer is given. "
                           f"{fix or 'Use smaller sizes or fewer layers.'}")


def largest_entry(matrices) -> float:
    """max |entry| over a sequence of tensors or arrays (for messages)."""
    out = 0.0
    for m in matrices:
        if m.numel() if hasattr(m, "numel") else m.size:
            out = max(out, float(abs(m).max()))
    return out
