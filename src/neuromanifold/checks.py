"""Input validation shared by every public function, and the project's error classes.

Every message follows one template (STYLE.md, scikit-learn's validation):
"`name` must be <requirement>; got <value>. <one concrete fix>."
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

ATTENTION_KINDS = ("lightning", "softmax")
METHODS = ("auto", "numerical", "exact", "certified")


class NeuromanifoldError(Exception):
    """Base class for mathematical outcomes a caller may want to catch."""


class AmbiguousRankError(NeuromanifoldError):
    """A numerical rank whose singular-value gap is too small to be trusted."""


def bad_value(name: str, requirement: str, got: object, fix: str) -> ValueError:
    """Build the one ValueError message template used everywhere."""
    return ValueError(f"`{name}` must be {requirement}; got {got!r}. {fix}")


def check_int(name: str, value: object, *, minimum: int = 1, fix: str = "") -> int:
    """Return `value` as an int >= `minimum`, or raise the template error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise TypeError(
                f"`{name}` must be an integer >= {minimum}; got {value!r}. "
                f"{fix or f'Pass a whole number such as {max(minimum, 2)}.'}"
            )
    value = int(value)
    if value < minimum:
        raise bad_value(name, f"an integer >= {minimum}", value,
                        fix or f"Pass a whole number such as {max(minimum, 2)}.")
    return value


def check_int_tuple(name: str, values: object, *, minimum: int = 1,
                    min_length: int = 1, example: str = "3,3,3") -> tuple[int, ...]:
    """Return `values` as a tuple of ints >= `minimum` with at least `min_length` entries."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(
            f"`{name}` must be a sequence of integers; got {values!r}. "
            f"Pass a list such as [{example}]."
        )
    if len(values) < min_length:
        raise bad_value(name, f"a list of at least {min_length} integers", list(values),
                        f"Pass a list such as [{example}].")
    out = []
    for v in values:
        if isinstance(v, bool) or not (isinstance(v, numbers.Integral)
                                       or (isinstance(v, float) and v.is_integer())):
            raise bad_value(name, f"a list of integers >= {minimum}", list(values),
                            f"Pass a list such as [{example}].")
        if int(v) < minimum:
            raise bad_value(name, f"a list of integers >= {minimum}", list(values),
                            f"Replace {v} by a positive integer, as in [{example}].")
        out.append(int(v))
    return tuple(out)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Return `value` if it is one of `choices`."""
    if value not in choices:
        raise bad_value(name, "one of " + ", ".join(repr(c) for c in choices), value,
                        f"Use for example {choices[0]!r}.")
    return value  # type: ignore[return-value]


def check_positive_float(name: str, value: object) -> float:
    """Return `value` as a float > 0."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a positive number; got {value!r}. Pass e.g. 1.0.") from None
    if not out > 0 or out == float("inf"):
        raise bad_value(name, "a positive finite number", value, "Pass e.g. 1.0.")
    return out
