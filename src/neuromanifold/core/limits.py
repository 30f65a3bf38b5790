"""The limits the tool applies before any work: sizes, process counts, memory and output places.

Every request is checked against these (and the memory it would need, by `dimension.memory`)
before a computation starts, a file is read in full or
anything is printed, so a refusal costs nothing and leaves nothing behind (docs/reliability.md).
A refusal is an `InputError` (exit code 2) or, for a well-formed request that exceeds a stated
resource limit, a `ResourceError` (also exit code 2); the message names the option and the fix.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .checks import bad_value

MAX_WIDTH = 100_000          # any d_i or a_i
MAX_TOKENS = 100_000         # t
MAX_LAYERS = 1_000           # l
JOBS_PER_CORE = 4            # worker processes per CPU core
MAX_HEADS = 1_024            # H_i, heads of one layer (every head is a block of the layout)


def check_sizes(widths: tuple[int, ...], keys: tuple[int, ...], tokens: int) -> None:
    """Refuse widths, keys or tokens above the caps, or more layers than MAX_LAYERS."""
    if len(keys) > MAX_LAYERS:
        raise bad_value("keys", f"at most {MAX_LAYERS} layers", f"{len(keys)} layers",
                        f"Pass at most {MAX_LAYERS} key widths (one per layer).")
    for name, values in (("widths", widths), ("keys", keys)):
        big = [v for v in values if v > MAX_WIDTH]
        if big:
            raise bad_value(name, f"integers at most {MAX_WIDTH}", big[0],
                            f"Pass {name} of at most {MAX_WIDTH} each.")
    if tokens > MAX_TOKENS:
        raise bad_value("tokens", f"at most {MAX_TOKENS}", tokens, f"Pass --tokens {MAX_TOKENS} or fewer.")


def check_block_sizes(heads, values, mlp) -> None:
    """Refuse more than MAX_HEADS heads in a layer, or value or MLP widths above MAX_WIDTH
    (checked before the parameter layout, which has one entry per head, is built)."""
    for name, entries, cap in (("heads", heads, MAX_HEADS), ("values", values, MAX_WIDTH),
                               ("mlp", mlp, MAX_WIDTH)):
        big = [v for v in entries or () if v > cap]
        if big:
            raise bad_value(name, f"integers at most {cap}", big[0],
                            f"Pass --{name} of at most {cap} each.")


def max_jobs() -> int:
    """The largest number of worker processes allowed on this machine (JOBS_PER_CORE per core)."""
    return JOBS_PER_CORE * (os.cpu_count() or 1)


def check_jobs(jobs: int) -> int:
    """Refuse more worker processes than JOBS_PER_CORE per CPU core."""
    cap = max_jobs()
    if jobs > cap:
        raise bad_value("jobs", f"at most {cap} ({JOBS_PER_CORE} per core on {os.cpu_count() or 1} cores)",
                        jobs, f"Pass --jobs {os.cpu_count() or 1} (one per core).")
    return jobs


def check_output_folder(name: str, folder: str | os.PathLike) -> None:
    """Prove that `folder` (or its nearest existing ancestor) accepts a new file: create and remove
    a probe file there. Nothing is left behind; a folder that does not exist yet is not created.
    """
    probe = Path(folder)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise bad_value(name, "a folder (or a path where one can be created)", str(folder),
                        f"{probe} is not a folder; pass another path.")
    test = probe / f".neuromanifold-probe-{os.getpid()}"
    try:
        fd = os.open(test, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise bad_value(name, "a place this user can write", str(folder),
                        f"{probe} refuses new files ({exc.strerror or type(exc).__name__}); "
                        "pass a folder you own.") from None
    os.close(fd)
    os.unlink(test)


class TimeLimitReached(BaseException):
    """Raised in the main thread when a command's --timeout passes, or when a pass of work is
    projected to end past it (a BaseException, like KeyboardInterrupt, so that no library's
    `except Exception` swallows it). `args[0]`, when given, says why (the projection)."""


# The wall-clock deadline (time.perf_counter seconds) of the command running in this process, set
# by the CLI's `time_limit`; None: no limit. Engines read it through `time_left` to stop a pass
# whose projected end is past it, instead of running into the limit with nothing to show.
_DEADLINE: list[float | None] = [None]


def set_deadline(at: float | None) -> float | None:
    """Set the process's deadline (None: none); returns the previous one."""
    previous, _DEADLINE[0] = _DEADLINE[0], at
    return previous


def time_left() -> float | None:
    """Seconds until the process's deadline, or None when no --timeout is running."""
    at = _DEADLINE[0]
    return None if at is None else at - time.perf_counter()


def check_projection(done: int, total: int, elapsed: float, what: str) -> float:
    """The projected seconds left of a pass of `total` equal steps of which `done` took
    `elapsed` seconds; raise TimeLimitReached (saying the projection) when they exceed the
    time left before the deadline.

    Math: remaining = elapsed / done * (total - done), a measured rate, not a model: the steps
    of one pass are chunks of the same size through the same network.
    """
    if done <= 0 or done >= total:
        return 0.0
    remaining = elapsed / done * (total - done)
    left = time_left()
    if left is not None and remaining > left:
        raise TimeLimitReached(
            f"{what} is projected to need {elapsed + remaining:.0f} s ({elapsed:.1f} s for "
            f"{done} of {total}), more than the {max(left, 0.0) + elapsed:.0f} s the --timeout "
            "left it")
    return remaining
