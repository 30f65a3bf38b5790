"""The project's error classes: one hierarchy, so callers and the CLI can tell bad input from
mathematical outcomes and from internal failures.

- `InputError` (also a `ValueError`) and `InputTypeError` (also a `TypeError`): the caller
  passed something unusable. Every message follows one template:
  "`name` must be <requirement>; got <value>. <one concrete fix>." The CLI prints it as one line
  and exits with code 2.
- `ResourceError` (an `InputError`): the request is well formed but would exceed a stated limit
  (memory, sizes); the message gives the estimate and what to change. Exit code 2.
- `AmbiguousRankError`: a numerical rank whose singular-value gap is too small to be trusted.
- `ComputationError`: a computation that could not give an answer (non-finite values, an
  internal consistency check that failed). Exit code 1.

Anything else that escapes a public function is a bug: the CLI exits 1 and suggests `--debug`.
"""

from __future__ import annotations


class NeuromanifoldError(Exception):
    """Base class of every error the library raises on purpose."""


class InputError(NeuromanifoldError, ValueError):
    """A bad value passed by the caller (exit code 2 on the command line)."""


class InputTypeError(InputError, TypeError):
    """An argument of the wrong type (exit code 2 on the command line)."""


class ResourceError(InputError):
    """A request that would exceed a stated resource limit (exit code 2 on the command line)."""


class AmbiguousRankError(NeuromanifoldError):
    """A numerical rank whose singular-value gap is too small to be trusted (exit code 1)."""


class ComputationError(NeuromanifoldError):
    """A computation that could not produce a trustworthy answer (exit code 1)."""
