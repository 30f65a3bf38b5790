"""Dimension against the number of heads of one attention layer (docs/blocks.md).

For H = 1..H_max heads of one layer (widths d -> d', per-head key width a, value width v,
t tokens): the lightning dimension (certified where a bound meets, else an exact lower bound),
the softmax dimension (numerical), the naive count (parameters), the ambient bound of the
lightning map and the lightning closed form with its status. It shows where lightning heads
stop adding dimensions (the ambient bound) while softmax heads keep adding them.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

from ..core.architecture import Architecture
from ..core.formulas import ambient_bound
from ..core.checks import bad_value, check_int


def heads_architecture(heads: int, widths: tuple[int, int], key: int, value: int | None,
                       tokens: int, attention: str) -> Architecture:
    """One layer with `heads` heads (value width `value`, or unfactored values if None)."""
    return Architecture(widths, (key,), tokens, attention, heads=(heads,),
                        values=None if value is None else (value,))


# Largest H of the heads sweep: each H is two full dimension computations (a certified and a
# numerical rank) of a network with H times the parameters of one head.
MAX_SWEEP_HEADS = 64


def check_max_heads(max_heads: object) -> int:
    """`max_heads` as an int in [1, MAX_SWEEP_HEADS]."""
    max_heads = check_int("max_heads", max_heads, minimum=1, fix="Pass --max-heads 4.")
    if max_heads > MAX_SWEEP_HEADS:
        raise bad_value("max_heads", f"at most {MAX_SWEEP_HEADS} (each H is a certified and a "
                        "numerical rank of H heads)", max_heads,
                        f"Pass --max-heads {MAX_SWEEP_HEADS} or fewer; measure one larger H with "
                        "`dim --heads`.")
    return max_heads


def check_heads_memory(max_heads: int, widths: tuple[int, int], key: int, value: int | None,
                       tokens: int) -> None:
    """Refuse (ResourceError, exit 2) before any work when the largest network of the sweep,
    H = max_heads, would not fit: its certified lightning rank or its numerical softmax rank
    (the estimates of `dimension.memory`; H grows the parameters, tokens the score matrices)."""
    from ..dimension.memory import check_memory, exact_estimate, numerical_estimate  # noqa: PLC0415

    check_memory(exact_estimate(heads_architecture(max_heads, widths, key, value, tokens,
                                                   "lightning")))
    check_memory(numerical_estimate(heads_architecture(max_heads, widths, key, value, tokens,
                                                       "softmax")))


def heads_experiment(max_heads: int = 4, *, widths: tuple[int, int] = (3, 3), key: int = 3,
                     value: int | None = 3, tokens: int = 3, seed: int = 0,
                     progress: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per H = 1..max_heads: lightning and softmax dimensions with their provenance."""
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415

    max_heads = check_max_heads(max_heads)
    if len(widths) != 2:
        raise bad_value("widths", "two widths d,d' (one layer)", list(widths), "Pass e.g. --widths 3,3.")
    check_heads_memory(max_heads, tuple(widths), key, value, tokens)
    rows = []
    for H in range(1, max_heads + 1):
        lightning = heads_architecture(H, widths, key, value, tokens, "lightning")
        softmax = heads_architecture(H, widths, key, value, tokens, "softmax")
        t0 = time.perf_counter()
        light = neuromanifold_dim(lightning, method="certified", seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an ambiguous rank shows in the row's status
            soft = neuromanifold_dim(softmax, method="numerical", seed=seed)
        row = {"heads": H, "n_params": lightning.n_params,
               "lightning": light.dimension, "lightning_status": light.status,
               "lightning_upper": light.upper_bound, "ambient": ambient_bound(lightning),
               "softmax": soft.dimension, "softmax_status": soft.status,
               "formula": light.formula.value if light.formula.hypotheses_hold else None,
               "formula_status": light.formula.status,
               "seconds": round(time.perf_counter() - t0, 3)}
        rows.append(row)
        if progress:
            progress(row)
    return rows
