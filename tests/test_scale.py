"""Gauge fixing, memory estimates and refusals (issue 13)."""

import pytest
import torch

from neuromanifold import Architecture, numerical_dim
from neuromanifold.core.parameters import flatten, random_weights, random_inputs
from neuromanifold.core.symmetries import symmetry_tangents
from neuromanifold.dimension import gauge
from neuromanifold.dimension.jacobians import jacobian


@pytest.mark.parametrize("widths,keys,t", [((6, 5, 4), (3, 2), 4), ((8, 8, 8), (3, 3), 5),
                                           ((5, 4, 3, 2), (2, 3, 1), 3)])
def test_gauge_pivots_are_independent_on_the_tangents(widths, keys, t):
    """The tangents restricted to the pivot columns have full rank (so rank J = rank J[:, free])."""
    arch = Architecture(widths, keys, t, "softmax")
    W = random_weights(arch, 4)
    split = gauge.gauge_split(arch, W)
    T, _ = symmetry_tangents(arch, W)
    keep = torch.ones(arch.n_params, dtype=torch.bool)
    keep[split.free] = False
    assert int(keep.sum()) == T.shape[0] == split.rank == gauge.tangent_count(arch)
    assert torch.linalg.matrix_rank(T[:, keep]) == T.shape[0]


@pytest.mark.parametrize("widths,keys,t", [((6, 5, 4), (3, 2), 4), ((7, 7, 7), (2, 3), 3)])
def test_gauge_and_dense_routes_agree(widths, keys, t, monkeypatch):
    """The gauge-fixed rank equals the rank read on the dense complement of the tangents."""
    arch = Architecture(widths, keys, t, "softmax")
    fixed = numerical_dim(arch, seed=5)
    assert "free columns of a gauge" in " ".join(fixed.notes)
    monkeypatch.setattr(gauge, "gauge_split", lambda *_: None)
    dense = numerical_dim(arch, seed=5)
    assert (fixed.dimension, fixed.status) == (dense.dimension, dense.status) == (fixed.upper_bound, "settled")


def test_gauge_rows_match_full_jacobian_columns():
    """Forward mode on the free columns gives the same numbers as the full Jacobian's columns."""
    arch = Architecture((6, 5, 4), (3, 2), 4, "softmax")
    W = random_weights(arch, 6)
    params, X = flatten(W), random_inputs(arch, 3, 6)
    split = gauge.gauge_split(arch, W)
    full = jacobian(arch, params, X)[:, split.free]
    torch.testing.assert_close(gauge._forward_columns(arch, params, X, split.free), full)


def test_gauge_leak_exposes_wrong_tangents():
    """The kernel check is round-off at the right point and large at another point."""
    arch = Architecture((6, 5, 4), (3, 2), 4, "softmax")
    W = random_weights(arch, 7)
    X = random_inputs(arch, 2, 7)
    split = gauge.gauge_split(arch, W)
    assert split.leak(arch, flatten(W), X) < 1e-12
    other = random_weights(arch, 8)
    assert split.leak(arch, flatten(other), X) > 1e-3


def test_gauge_does_not_apply_outside_its_hypotheses():
    assert not gauge.gauge_applies(Architecture((4, 4, 4), (2, 2), 3, "lightning"))
    assert not gauge.gauge_applies(Architecture((3, 5, 3), (2, 2), 3, "softmax"))   # d_1 > d_0
    assert not gauge.gauge_applies(Architecture((3, 3), (4,), 3, "softmax"))         # a_1 > d_0
