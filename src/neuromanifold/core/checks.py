"""Input validation shared by every public function.

Every message follows one template (STYLE.md, scikit-learn's validation):
"`name` must be <requirement>; got <value>. <one concrete fix>."
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from ..errors import InputError, InputTypeError

ATTENTION_KINDS = ("lightning", "softmax")
METHODS = ("auto", "numerical", "exact", "certified")


def bad_value(name: str, requirement: str, got: object, fix: str) -> InputError:
    """Build the one message template used for every bad input."""
    return InputError(f"`{name}` must be {requirement}; got {got!r}. {fix}")


def bad_type(name: str, requirement: str, got: object, fix: str) -> InputTypeError:
    """The same template for an argument of the wrong type."""
    return InputTypeError(f"`{name}` must be {requirement}; got {got!r}. {fix}")


def check_int(name: str, value: object, *, minimum: int = 1, fix: str = "") -> int:
    """Return `value` as an int >= `minimum`, or raise the template error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputTypeError(
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
        raise InputTypeError(
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


MAX_SEED = 2 ** 63 - 1


def check_seed(seed: object) -> int:
    """Return `seed` as an int in [0, 2^63 - 1] (what torch generators and SQLite hold)."""
    value = check_int("seed", seed, minimum=0, fix="Pass a non-negative integer seed such as 0.")
    if value > MAX_SEED:
        raise bad_value("seed", f"at most 2^63 - 1 = {MAX_SEED}", value,
                        "Pass a smaller non-negative integer seed such as 0.")
    return value


def check_bool(name: str, value: object, *, allow_none: bool = False, fix: str = "") -> bool | None:
    """Return `value` if it is True or False (or None when `allow_none`), else the template error."""
    if isinstance(value, bool) or (allow_none and value is None):
        return value
    requirement = "True, False or None" if allow_none else "True or False"
    raise bad_type(name, requirement, value, fix or f"Pass {name}=True or {name}=False.")


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Return the one of `choices` that `value` names, ignoring case and surrounding spaces.

    Every choice is lower case, so `attention="Softmax"` means 'softmax' in Python as it does on
    the command line; callers use the returned spelling.
    """
    normalised = value.strip().lower() if isinstance(value, str) else value
    if normalised not in choices:
        raise bad_value(name, "one of " + ", ".join(repr(c) for c in choices), value,
                        f"Use for example {choices[0]!r}.")
    return normalised  # type: ignore[return-value]


def check_positive_float(name: str, value: object) -> float:
    """Return `value` as a float > 0."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputTypeError(f"`{name}` must be a positive number; got {value!r}. Pass e.g. 1.0.") from None
    if not out > 0 or out == float("inf"):
        raise bad_value(name, "a positive finite number", value, "Pass e.g. 1.0.")
    return out


def check_min_gap(min_gap: object) -> float:
    """Return `min_gap` (decades of singular-value gap that settle a numerical rank) as a positive
    finite float; NaN, zero, negative, infinite or non-numeric values are the template error."""
    if isinstance(min_gap, bool) or not isinstance(min_gap, numbers.Real):
        raise bad_type("min_gap", "a positive number of decades", min_gap,
                       "Pass e.g. min_gap=4.0 (the default), or leave it out.")
    value = float(min_gap)
    if not (0 < value < float("inf")):
        raise bad_value("min_gap", "a positive finite number of decades", min_gap,
                        "Pass e.g. min_gap=4.0 (the default), or leave it out.")
    return value


def check_weights_type(name: str, weights: object, kind: type | tuple[type, ...]) -> None:
    """Raise the template error unless `weights` is an instance of `kind`."""
    if not isinstance(weights, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise bad_type(name, " or ".join(k.__name__ for k in kinds), type(weights).__name__,
                       "Build them with random_weights(arch) or read_weights(path).")
