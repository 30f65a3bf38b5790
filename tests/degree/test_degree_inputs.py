"""`image_degree` refuses bad arguments with the house template before flint sees them (issue 38,
items 2 and 9): no IndexError, no flint TypeError, and no SIGABRT of the interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from neuromanifold import InputError, image_degree
from neuromanifold.errors import InputTypeError


def _segre(w):
    """2 x 2 rank-1 matrices a b^T: the quadric det = 0 (degree 2, dimension 3)."""
    return [w[0] * w[2], w[0] * w[3], w[1] * w[2], w[1] * w[3]]


@pytest.mark.parametrize("modulus", [4, 9, 1_073_741_789 * 3])
def test_a_composite_modulus_is_refused_without_aborting(modulus):
    """primes=(4,) aborted the interpreter (flint SIGABRT on a composite modulus): now a one-line
    InputError in a process that exits normally."""
    code = ("from neuromanifold import image_degree\n"
            "def F(w): return [w[0] * w[2], w[0] * w[3], w[1] * w[2], w[1] * w[3]]\n"
            f"try:\n    image_degree(F, 4, primes=({modulus},))\n"
            "except ValueError as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-500:])
    assert out.stdout.startswith("InputError `primes` must be primes p with 3 <= p < 2^30"), out.stdout
    assert f"got {modulus}." in out.stdout


@pytest.mark.parametrize("primes, kind", [((2,), InputError), ((2 ** 31 - 1,), InputError),
                                          ((1_073_741_827,), InputError), ((), InputError),
                                          ((1_073_741_789.0,), InputTypeError),
                                          (1_073_741_789, InputTypeError)])
def test_primes_outside_msolves_range_are_input_errors(primes, kind):
    """2, a prime above 2^30 (msolve's range ends there), no prime, a float or a bare int: the
    project's InputError with the template, before any solve."""
    with pytest.raises(kind, match=r"^`primes` must be .*; got .*\. Pass e\.g\. primes=\("):
        image_degree(_segre, 4, primes=primes)


def test_too_few_parameters_is_a_template_error():
    """n_params smaller than the variables F reads: the template naming n_params (was IndexError)."""
    with pytest.raises(InputError, match=r"^`n_params` must be at least the number of variables "
                                         r"F reads; got 3\. "):
        image_degree(_segre, 3)


@pytest.mark.parametrize("dimension, kind, requirement", [
    (-1, InputError, "an integer >= 1; got -1"), (0, InputError, "an integer >= 1; got 0"),
    ("5", InputTypeError, "an integer >= 1; got '5'"), (5, InputError, "at most n_params = 4; got 5")])
def test_bad_dimension_is_a_template_error(dimension, kind, requirement):
    """dimension=-1, 0, '5' or more than n_params: refused (-1 and '5' ran on before)."""
    with pytest.raises(kind, match=rf"^`dimension` must be {requirement}\. "):
        image_degree(_segre, 4, dimension)


def test_a_float_coefficient_is_a_template_type_error():
    """A float coefficient: the template TypeError naming F (was flint's TypeError)."""
    with pytest.raises(InputTypeError, match=r"^`F` must be a map with integer coefficients"):
        image_degree(lambda w: [w[0] * w[1] * 0.5, w[0]], 2)


def test_valid_arguments_still_give_the_degree():
    """The checks pass what is valid: the Segre quadric has degree 2 in dimension 3 (given or read)."""
    assert image_degree(_segre, 4, 3, repeats=1).degree == 2
    assert image_degree(_segre, 5, repeats=1, primes=(1_073_741_783,)).degree == 2  # an unused variable
