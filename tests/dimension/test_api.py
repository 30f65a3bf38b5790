"""dimension.api: the problem description, its one validation, and the route each network takes."""

from __future__ import annotations

import pytest

from neuromanifold import Architecture, DimensionProblem, InputError, neuromanifold_dim, solve
from neuromanifold.dimension.api import plan_route

PAPER = Architecture((3, 5, 3), (2, 3), 3)
SOFTMAX = Architecture((3, 5, 3), (2, 3), 3, attention="softmax")
BLOCK = Architecture((4, 4), 2, 3, heads=2, residual=True, mlp=3)


@pytest.mark.parametrize("arch, method, route", [
    (PAPER, "auto", "exact"), (PAPER, "certified", "exact"), (PAPER, "exact", "exact"),
    (PAPER, "numerical", "numerical"), (SOFTMAX, "auto", "escalating"),
    (SOFTMAX, "certified", "escalating"), (SOFTMAX, "numerical", "numerical"),
    (BLOCK, "auto", "exact"), (BLOCK, "numerical", "numerical"),
])
def test_plan_route_names_the_route(arch, method, route):
    """Polynomial networks go to the exact route by auto/certified/exact, the others escalate."""
    assert plan_route(DimensionProblem(arch, method=method)).name == route


def test_problem_validates_once_and_caps_samples():
    """Choices are normalised when the problem is made; samples past n_params are capped."""
    problem = DimensionProblem(PAPER, method="Certified", device="CPU", samples=10 ** 6)
    assert (problem.method, problem.device, problem.samples) == ("certified", "cpu", PAPER.n_params)
    assert "capped" in problem.capped_note
    with pytest.raises(InputError, match="`method` must be"):
        DimensionProblem(PAPER, method="guess")


def test_refusals_come_from_the_plan_before_any_work():
    """An option that does not apply is refused by plan_route, with the house template."""
    with pytest.raises(InputError, match="`method` must be 'numerical', 'certified' or 'auto'"):
        plan_route(DimensionProblem(SOFTMAX, method="exact"))
    with pytest.raises(InputError, match="`prime` must be given only"):
        plan_route(DimensionProblem(PAPER, method="numerical", prime=101))
    with pytest.raises(InputError, match="`backend` must be 'local' for block networks"):
        plan_route(DimensionProblem(BLOCK, method="numerical", backend="dask"))


def test_solve_equals_the_keyword_form():
    """solve(DimensionProblem(...)) is neuromanifold_dim(...): same value, status and note."""
    a = solve(DimensionProblem(PAPER, method="certified", samples=10 ** 6))
    b = neuromanifold_dim(PAPER, method="certified", samples=10 ** 6)
    assert (a.dimension, a.status, a.notes[0]) == (b.dimension, b.status, b.notes[0])
    assert a.status == "certified" and a.notes[0].startswith("N capped")
