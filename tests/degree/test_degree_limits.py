"""Limits of the degree and equations engines (issue 38, item 1): a deadline over every phase,
memory estimates that bound what the phases allocate, and a span that is never claimed past its
sample cap."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from neuromanifold import Architecture, degree, implicit_equations
from neuromanifold.degrees import budget, network
from neuromanifold.degrees.engine import STOPPED
from neuromanifold.degrees.network import span_basis
from neuromanifold.degrees.polymap import (coefficient_polynomials, forward_objects,
                                           function_coefficients, object_array)
from neuromanifold.dimension.fp import rank_mod_p
from neuromanifold.errors import ResourceError

P = 1_073_741_789
# Networks of distinct shapes: one layer, two layers, residual with a square MLP, heads + MLP.
NETWORKS = [Architecture((3, 2), (1,), 2), Architecture((2, 1, 1), (1, 1), 2),
            Architecture((2, 2), (1,), 3, residual=True, mlp=(3,)),
            Architecture((2, 3), (1,), 2, heads=(2,), mlp=(2,))]


@pytest.mark.parametrize("arch", NETWORKS, ids=str)
def test_term_bounds_are_upper_bounds_of_the_real_polynomials(arch):
    """The degree-range bound on the terms of each output entry is at least the number of terms
    flint finds, in the inputs (weights fixed) and in the weights (one input fixed)."""
    rng = random.Random(11)
    weights = [rng.randrange(1, P) for _ in range(arch.n_params)]
    real = [0 if isinstance(f, int) else len(f.monoms())
            for f in coefficient_polynomials(arch, weights, P)]
    bound = budget.term_bounds(arch, "inputs")
    assert len(bound) == len(real) and all(b >= r for b, r in zip(bound, real))
    assert budget.coefficient_count_bound(arch) >= len(function_coefficients(arch, weights, P))
    import flint

    ctx = flint.nmod_mpoly_ctx.get(("w", arch.n_params), modulus=P)
    X = object_array((1, arch.widths[0], arch.tokens),
                     [rng.randrange(1, P) for _ in range(arch.widths[0] * arch.tokens)])
    symbolic = forward_objects(arch, list(ctx.gens()), X)
    real_w = [0 if isinstance(f, int) else len(f.monoms()) for f in symbolic]
    bound_w = budget.term_bounds(arch, "weights")
    assert all(b >= r for b, r in zip(bound_w, real_w)) and sum(real_w) > 0


def test_term_bound_is_the_binomial_for_a_homogeneous_layer():
    """One lightning layer is homogeneous of degree 3 in its d_0 t inputs: each output entry is
    bounded by C(3 + n - 1, n - 1) (n = 6: 56), and the highest degree is 3."""
    arch = Architecture((3, 1), (2,), 2)
    assert budget.term_bounds(arch, "inputs") == [56, 56]
    assert budget.highest_degree(arch, "inputs") == 3
    # in the weights: degree 1 in each of Q (2 x 3), K (2 x 3), V (1 x 3): 6 * 6 * 3 terms
    assert budget.term_bounds(arch, "weights") == [108, 108]


@pytest.mark.parametrize("arch", NETWORKS[:3], ids=str)
def test_span_basis_matches_the_rank_of_many_random_networks(arch):
    """dim S from the reduced basis equals the rank over F_p of K > dim S random coefficient
    vectors built independently (dicts, one dense matrix, flint's rank)."""
    span = span_basis(arch, P, seed=3)
    assert span.complete and len(span.samples) == span.dimension + 1
    rng = random.Random(5)
    rows = [function_coefficients(arch, [rng.randrange(P) for _ in range(arch.n_params)], P)
            for _ in range(span.dimension + 6)]
    keys = sorted({k for r in rows for k in r})
    matrix = np.array([[r.get(k, 0) for k in keys] for r in rows], dtype=np.int64)
    assert rank_mod_p(matrix, P) == span.dimension
    # the basis is reduced: the identity on its pivot columns
    assert np.array_equal(span.basis[:, span.pivots], np.eye(span.dimension, dtype=np.int64))


@pytest.mark.parametrize("arch", [Architecture((3, 2), (1,), 2), Architecture((2, 1, 1), (1, 1), 2)],
                         ids=str)
def test_span_estimate_bounds_what_the_span_allocates(arch):
    """The span phase's estimate (less the process's own torch) is at least the peak that
    tracemalloc sees while it runs (numpy's arrays and the python objects)."""
    estimate = budget.span_estimate(arch)
    tracemalloc.start()
    try:
        span_basis(arch, P, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak > 0 and estimate.peak - estimate.parts["torch"] >= peak


def test_interpolation_estimate_bounds_what_the_interpolation_allocates():
    """Figure 1's equations (126 monomials at degree 4): the interpolation estimate is at least
    the tracemalloc peak of the whole run, span included."""
    arch = Architecture((2, 1), (2,), 3)
    estimates = budget.span_estimate(arch), budget.interpolation_estimate(126)
    tracemalloc.start()
    try:
        result = implicit_equations(arch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.lowest_degree == 4
    assert sum(e.peak - e.parts["torch"] for e in estimates) >= peak


def test_memory_refusal_names_only_options_the_commands_have():
    """A budget below a phase's estimate is a ResourceError naming --max-memory and never
    `--method` (which `degree` and `equations` lack), before anything runs."""
    arch = Architecture((2, 1), (2,), 3)
    for call in (lambda: degree(arch, max_memory="1M"),
                 lambda: implicit_equations(arch, max_memory="1M")):
        with pytest.raises(ResourceError) as info:
            call()
        text = str(info.value)
        assert "--max-memory" in text and "--method" not in text and "\n" not in text


def test_deadline_stops_the_span_phase_and_claims_nothing():
    """A timeout far shorter than the span of widths 8,8 stops there: `stopped`, no degree, a
    note naming the span (the estimate allows it under a large budget)."""
    arch = Architecture((8, 8), (1,), 2)
    result = degree(arch, timeout=1.0, max_memory="64G")
    assert result.status == STOPPED and result.degree is None and result.runs == []
    assert any("span of the neurovariety" in n for n in result.notes)
    eq = implicit_equations(arch, timeout=1.0, max_memory="64G")
    assert eq.status == STOPPED and eq.equations == [] and eq.lowest_degree is None


def test_span_still_growing_at_the_cap_is_never_a_degree(monkeypatch):
    """With the sample cap below dim S (here 4 < 6 for Figure 1), the span is only bounded
    below: the result is `stopped`, never a degree computed on a partial span (mutant of the
    cap: the old code returned the capped rank as dim S)."""
    monkeypatch.setattr(network, "MAX_SPAN_SAMPLES", 4)
    result = degree(Architecture((2, 1), (2,), 3), repeats=1)
    assert result.status == STOPPED and result.degree is None
    assert any("still growing" in n for n in result.notes)
    with pytest.raises(Exception, match="still growing"):
        network.span_dimension(Architecture((2, 1), (2,), 3), P, 0)
