"""Figure 1 (d = 2, d' = 1, a = 2): span, exact defining polynomial, singular locus, CLI."""

import numpy as np
import pytest
import sympy

from neuromanifold.cli import main
from neuromanifold.experiments.figure1 import (SYMBOLS, check_span_coordinates, defining_polynomial, evaluate_exact,
                                   span_coordinates)


@pytest.fixture(scope="module")
def polynomial():
    return defining_polynomial(seed=0)


def test_span_is_six_dimensional():
    """The linear span of M has dimension 6 and y are coordinates on it (exact over Q)."""
    assert check_span_coordinates(seed=1) == (6, True)


def test_span_dimension_from_coefficients_agrees_with_degree_engine():
    """dim span(M) from phi's coefficients over Q equals the degree engine's span over F_p (6)."""
    from neuromanifold.degrees.network import span_basis
    from neuromanifold.experiments.figure1 import ARCH, span_dimension_exact

    assert span_dimension_exact() == span_basis(ARCH, 1_073_741_789, 2).dimension == 6


@pytest.mark.parametrize("n_inputs", [1, 2])
def test_too_few_inputs_refused_not_reported_as_dimension(n_inputs):
    """An evaluation rank capped by 3 N < 6 is refused (it used to be printed as the dimension)."""
    with pytest.raises(ValueError, match="`n_inputs` must be enough inputs"):
        check_span_coordinates(n_inputs=n_inputs)


def test_polynomial_vanishes_on_manifold_not_on_span(polynomial):
    """F = 0 exactly at random integer points of M, F != 0 at random integer points of the span."""
    F, degree = polynomial
    assert degree == 4
    rng = np.random.default_rng(5)
    for _ in range(10):
        A, V = rng.integers(-30, 31, size=(2, 2)).tolist(), rng.integers(-30, 31, size=(1, 2)).tolist()
        assert evaluate_exact(F, span_coordinates(A, V)) == 0
    assert all(evaluate_exact(F, rng.integers(-30, 31, size=6).tolist()) != 0 for _ in range(10))


def test_polynomial_is_independent_of_seed(polynomial):
    """The primitive defining polynomial does not depend on the interpolation points."""
    assert sympy.expand(defining_polynomial(seed=3)[0] - polynomial[0]) == 0


def test_singular_points_are_singular_on_hypersurface(polynomial):
    """Theorem 3.4: at rank A <= 1 the gradient of F vanishes; at a generic point it does not."""
    F, _ = polynomial
    grad = [sympy.diff(F, y) for y in SYMBOLS]
    rng = np.random.default_rng(6)
    a, b, g = (rng.integers(-9, 10, size=2) for _ in range(3))
    singular = span_coordinates(np.outer(a, b).tolist(), [g.tolist()])
    assert all(evaluate_exact(G, singular) == 0 for G in grad)
    generic = span_coordinates([[1, 2], [3, -1]], [[2, 5]])
    assert any(evaluate_exact(G, generic) != 0 for G in grad)


def test_cli_figure1_writes_and_refuses_overwrite(tmp_path, capsys):
    """figure1 writes the PNG and the polynomial text, and refuses to overwrite without --force."""
    out = tmp_path / "fig"
    assert main(["figure1", "--out", str(out), "--grid", "12"]) == 0
    text = (out / "figure1_polynomial.txt").read_text()
    assert "F = y1**2*y6**2" in text and (out / "figure1.png").stat().st_size > 10_000
    assert "F = y1**2*y6**2" in capsys.readouterr().out
    assert main(["figure1", "--out", str(out), "--grid", "12"]) == 2
    assert "`out` must be a folder without earlier results" in capsys.readouterr().err
    assert main(["figure1", "--out", str(out), "--grid", "12", "--force"]) == 0
