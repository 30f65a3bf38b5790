"""Growing the number of samples N until a Jacobian rank settles: the one loop every rank path uses.

A rank path adds samples (rows of the Jacobian) in batches and measures the rank after each.
`grow_samples` decides when to stop, the same way for the exact and the numerical path:

- `bound`: the rank meets the symmetry upper bound (with a clear reading, for floats);
- `saturated`: a batch of at least `MIN_BATCH` fresh samples added no rank (see
  docs/lightning_dimension.md for why this means saturation, and with what probability over F_p);
- `fixed`: the caller fixed N;
- `exhausted`: a finite input set (token ids: V^t sequences) is used up, so the rank is over
  every input there is;
- `cap`: the next batch would pass a cap on samples, memory, time or rounds. A result stopped
  there says so (status `stopped`): its rank is a lower bound at best.

Each path passes its own first N and growth rule (the N sequence decides the random inputs drawn,
hence every documented rank and gap); the float paths grow by `GROWTH` (`grow_by_half`) from
`first_target`, capped by default at `default_max_samples`. What the loop's reason means for the
result's status is `dimension.verdict`'s rule.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Fewest fresh samples in a batch whose failure to add rank is read as saturation.
MIN_BATCH = 2
# The float paths' growth factor: N -> ceil(1.5 N), enough new rows per round to widen the gap
# without overshooting the saturating N by much.
GROWTH = 1.5


def first_target(upper: int, rows_per_sample: int, least: int = 2) -> int:
    """The float paths' first N: N t d_l rows about twice the upper bound, and at least `least`."""
    return max(least, math.ceil(2 * upper / rows_per_sample) + 1)


def default_max_samples(first: int) -> int:
    """The float paths' default cap on N: 8 times the first N, at least 64."""
    return max(8 * first, 64)


def grow_by_half(n_done: int, _rank: int) -> int:
    """The float paths' `next_target`: ceil(GROWTH N)."""
    return math.ceil(n_done * GROWTH)


@dataclass
class Growth:
    """How a grow-N loop ended: the last measurement, N, the history and the reason."""

    measurement: Any
    rank: int
    n_done: int
    reason: str  # "bound", "saturated", "fixed", "exhausted" or "cap"
    detail: str = ""
    last_batch: int = 0
    rounds: int = 0
    history: list = field(default_factory=list)


def grow_samples(first: int, add: Callable[[int, int], None], measure: Callable[[], Any], *,
                 rank_of: Callable[[Any], int] = int, upper: int | None = None,
                 fixed: bool = False, next_target: Callable[[int, int], int],
                 clear: Callable[[Any], bool] = lambda _m: True,
                 max_samples: int | None = None, max_bytes: int | None = None,
                 bytes_per_sample: int = 0, max_seconds: float | None = None,
                 max_rounds: int | None = None, min_batch: int = MIN_BATCH,
                 finite: int | None = None,
                 say: Callable[[str], None] = lambda _msg: None) -> Growth:
    """Add samples (`add(n_done, n_target)`) and `measure` until one of the stop reasons holds.

    `next_target(n_done, rank)` proposes the next N (at least `min_batch` more are always
    drawn, and a batch of at least `min_batch` that adds no rank is saturation).
    `clear(measurement)` says whether a reading may end the loop (floats: a clear gap).
    Caps: `max_samples` on N, `max_bytes` on N * `bytes_per_sample`, `max_seconds` on the time
    spent so far, `max_rounds` on the measurements; the loop stops with reason `cap` when the
    next batch would pass one. `finite`: the number of distinct inputs there are (N never
    passes it; reason `exhausted` once every one is used).
    """
    start = time.perf_counter()
    if finite is not None:
        first = min(first, finite)
    n_done, target, previous, history, rounds = 0, first, None, [], 0
    while True:
        add(n_done, target)
        batch, n_done = target - n_done, target
        m = measure()
        rank = rank_of(m)
        history.append([n_done, rank])
        ok = clear(m)
        done = None
        if upper is not None and rank >= upper and ok:
            done = ("bound", f"rank {rank} meets the upper bound {upper}")
        elif previous is not None and rank == previous and batch >= min_batch and ok:
            done = ("saturated", f"a batch of {batch} fresh samples added no rank at N = {n_done}")
        elif fixed:
            done = ("fixed", f"N = {n_done} fixed by the caller")
        elif finite is not None and n_done >= finite and ok:
            done = ("exhausted", f"every one of the {finite} distinct inputs used at N = {n_done}")
        else:
            nxt = max(next_target(n_done, rank), n_done + min_batch)
            if max_samples is not None:
                nxt = min(nxt, max_samples)
            if finite is not None:
                nxt = min(nxt, finite)
            if max_bytes is not None and bytes_per_sample > 0:
                nxt = min(nxt, max_bytes // bytes_per_sample)
            elapsed = time.perf_counter() - start
            if max_seconds is not None and elapsed >= max_seconds:
                done = ("cap", f"time cap of {max_seconds:g} s reached after {elapsed:.1f} s at N = {n_done}")
            elif max_rounds is not None and len(history) >= max_rounds:
                done = ("cap", f"round cap of {max_rounds} reached at N = {n_done}")
            elif nxt < n_done + min_batch and not (finite is not None and n_done < nxt == finite):
                which = ("sample cap" if max_samples is not None and n_done + min_batch > max_samples
                         else "memory cap")
                done = ("cap", f"{which} reached at N = {n_done} (max_samples = {max_samples}, "
                               f"max_bytes = {max_bytes})")
            else:
                target = nxt
        if done is not None:
            say(f"N = {n_done}: stop ({done[1]})")
            return Growth(m, rank, n_done, done[0], done[1], batch, rounds, history)
        previous = rank
        rounds += 1
