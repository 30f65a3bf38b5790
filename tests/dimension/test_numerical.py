"""Numerical dimension against the worked values of docs/math (issue 2)."""

import json

import pytest
import torch
from conftest import random_matrix

from neuromanifold import Architecture, numerical_dim
from neuromanifold.dimension.result import AmbiguousRankWarning, require_settled
from neuromanifold.errors import AmbiguousRankError
from neuromanifold.core.rank import numerical_rank


@pytest.mark.parametrize("widths,keys,t,attention,truth", [
    ((3, 3), (2,), 3, "lightning", 16),          # Eq. 7
    ((4, 4), (3,), 2, "lightning", 30),          # Eq. 7, t = 2
    ((4, 3), (6,), 3, "lightning", 27),          # Eq. 7, a > d
    ((3, 3, 3), (2, 2), 3, "lightning", 23),     # Eq. 14
    ((5, 5, 5), (2, 2), 3, "lightning", 55),
    ((4, 4, 4, 4), (2, 2, 2), 3, "lightning", 49),
    ((5, 3, 3, 5), (2, 2, 2), 3, "lightning", 50),
    ((6, 4, 2, 4), (2, 2, 2), 3, "lightning", 53),
    ((4, 4, 4, 4), (2, 2, 2), 3, "softmax", 52),  # Konda 2026 test case
    ((4, 3), (2,), 3, "softmax", 24),            # Theorem 3.9
])
def test_worked_values_where_formula_holds(widths, keys, t, attention, truth):
    """Numerical rank reproduces the docs/math worked values, settled, and agrees with the formula."""
    r = numerical_dim(Architecture(widths, keys, t, attention), seed=1)
    assert (r.dimension, r.status) == (truth, "settled")
    assert r.formula.hypotheses_hold and r.formula.value == truth
    assert r.dimension + r.fiber_dim == r.n_params
    assert r.gap >= 4.0


@pytest.mark.parametrize("widths,keys,truth,formula", [
    ((3, 5, 3), (2, 2), 23, 27), ((3, 4, 5), (2, 2), 29, 34), ((3, 3, 3), (1, 2), 18, 20)])
def test_worked_values_where_eq14_fails(widths, keys, truth, formula):
    """Where Eq. 14 fails the numerical rank finds the true value and the formula is marked failing."""
    r = numerical_dim(Architecture(widths, keys, 3), seed=2)
    assert (r.dimension, r.status) == (truth, "settled")
    assert (r.formula.value, r.formula.hypotheses_hold) == (formula, False)


def test_t1_sees_only_symmetric_part():
    """t = 1: the dimension drops below Eq. 7 (only the symmetric part of A is seen)."""
    r = numerical_dim(Architecture((3, 3), (3,), 1), seed=3)
    assert r.status == "settled" and r.dimension < 3 * 3 + 9 - 1
    assert not r.formula.hypotheses_hold


def test_one_token_one_key_single_layer():
    """a = d' = 1, t >= 2: Eq. 7 still matches numerically (docs/math/single-layer.md)."""
    r = numerical_dim(Architecture((3, 1), (1,), 2), seed=4)
    assert r.dimension == 1 * (2 * 3 - 1) + 3 - 1


def test_rank_stable_when_samples_grow():
    """The rank does not move once N has saturated (fixed N, then twice as many)."""
    arch = Architecture((5, 3, 4), (2, 3), 3, "softmax")
    auto = numerical_dim(arch, seed=5)
    bigger = numerical_dim(arch, seed=5, samples=2 * auto.n_samples)
    assert bigger.dimension == auto.dimension
    assert bigger.status == "settled"


def test_adaptive_samples_exceed_naive_count():
    """docs/math/method.md: N t d_l > n_params is not enough for t = 3; adaptive N goes beyond it."""
    arch = Architecture((8, 8, 8, 8), (2, 2, 2), 3)
    r = numerical_dim(arch, seed=6)
    naive = -(-arch.n_params // (3 * 8))
    assert r.status == "settled" and r.n_samples > naive
    assert r.dimension == r.formula.value


def test_fixed_too_few_samples_is_ambiguous_not_settled():
    """A fixed N too small to saturate reports status ambiguous with a warning, never settled."""
    arch = Architecture((8, 8, 8, 8), (2, 2, 2), 3)
    minimum = -(-arch.n_params // 24)
    with pytest.warns(AmbiguousRankWarning):
        r = numerical_dim(arch, seed=7, samples=minimum)
    assert r.status == "ambiguous"
    assert r.dimension < r.formula.value
    with pytest.raises(AmbiguousRankError, match="ambiguous"):
        require_settled(r)


def test_numerical_rank_known_matrix():
    """Largest-gap rule on a matrix of known rank 4 with a wide spectrum."""
    g = torch.Generator().manual_seed(8)
    U = torch.linalg.qr(torch.randn(30, 30, generator=g, dtype=torch.float64)).Q
    Vt = torch.linalg.qr(torch.randn(7, 7, generator=g, dtype=torch.float64)).Q
    s = torch.tensor([1.0, 1e-1, 1e-3, 1e-4, 0, 0, 0], dtype=torch.float64)
    M = U[:, :7] @ torch.diag(s) @ Vt
    nr = numerical_rank(torch.linalg.svdvals(M), 30, 7)
    assert nr.rank == 4 and nr.gap > 8


def test_full_rank_matrix():
    """A well-conditioned full-rank matrix has rank n (gap measured against the round-off floor)."""
    M = random_matrix(9, 5, seed=9)
    nr = numerical_rank(torch.linalg.svdvals(M), 9, 5)
    assert nr.rank == 5 and not nr.is_ambiguous(4.0)


def test_result_json_keys():
    """The result serialises to JSON with the documented keys and the invariant dim + fiber = params."""
    r = numerical_dim(Architecture((3, 2), (2,), 3), seed=10)
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("n_params", "dimension", "method", "fiber_dim", "formula", "status", "gap", "n_samples",
                "seed", "seconds"):
        assert key in d
    assert d["formula"]["name"] == "Eq. 7" and d["formula"]["hypotheses_hold"] is True
    assert d["dimension"] + d["fiber_dim"] == d["n_params"] and d["method"] == "numerical"


def test_seeded_reproducible():
    """Same seed, same result; the seed is echoed."""
    arch = Architecture((4, 3, 2), (2, 2), 3, "softmax")
    a, b = numerical_dim(arch, seed=11), numerical_dim(arch, seed=11)
    assert (a.dimension, a.gap, a.seed) == (b.dimension, b.gap, 11)


def test_zero_like_inputs_do_not_crash():
    """Ambiguity machinery handles an all-zero spectrum (rank 0)."""
    nr = numerical_rank(torch.zeros(3, dtype=torch.float64), 5, 3)
    assert nr.rank == 0


def test_tiny_real_singular_value_never_settled_wrong():
    """Sweep regression: (2,2,2,6), keys (2,4,3), seed 0 once read 20 'settled'; certified is 21."""
    r = numerical_dim(Architecture((2, 2, 2, 6), (2, 4, 3), 3), seed=0)
    assert r.dimension == 21 or r.status == "ambiguous"


def test_dependent_tangents_split_without_leak():
    """a_2 > d_1 makes GL(a_2) tangents dependent; the split still keeps them in ker J (no leak)."""
    r = numerical_dim(Architecture((6, 2, 6, 2), (4, 3, 2), 3, "softmax"), seed=0)
    assert r.upper_bound == r.n_params - 68
    assert (r.dimension, r.status) == (52, "settled")


def test_time_cap_stops_with_status_stopped():
    """A cap reached before the rank saturates gives status stopped (a warning), never settled."""
    arch = Architecture((3, 3, 3), (1, 2), 3)   # dim 18 < the float symmetry bound: needs 2 rounds
    with pytest.warns(AmbiguousRankWarning, match="stopped"):
        r = numerical_dim(arch, seed=2, max_seconds=1e-9)
    assert r.status == "stopped" and not r.is_settled
    assert any("time cap" in n for n in r.notes) and len(r.rank_history) == 1


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
def test_readout_tangents_in_float_kernel_and_bound(attention):
    """The float read-out tangents lie in the Jacobian's kernel, so the numerical symmetry bound
    drops by the read-out directions: 6,5,2 keys 2,1 is settled at 41 (lightning) via the bound."""
    from neuromanifold.core.parameters import flatten, random_weights  # noqa: PLC0415
    from neuromanifold.dimension.jacobians import jacobian  # noqa: PLC0415
    from neuromanifold.symmetries.paper import readout_tangents_float  # noqa: PLC0415
    arch = Architecture((6, 5, 2), (2, 1), 3, attention)
    W = random_weights(arch, 4)
    T = readout_tangents_float(arch, W)
    assert T.shape[0] == 1 * 6
    J = jacobian(arch, flatten(W), torch.randn((9, 6, 3), dtype=torch.float64,
                                               generator=torch.Generator().manual_seed(3)))
    assert float((J @ T.T).norm() / J.norm()) < 1e-12
    if attention == "lightning":
        r = numerical_dim(arch, seed=4)
        assert (r.status, r.dimension, r.upper_bound) == ("settled", 41, 41)


def test_a_norms_eps_does_not_hide_directions_below_the_bound():
    """A direction that rescales what a norm reads is broken only by the norm's eps, so its
    singular value can sit at round-off: a float rank below the bound of a normed network is
    not settled (it read 33 `settled`, gap 8.4 decades, where balls prove 34), and `auto`
    escalates it to the proof."""
    from neuromanifold import neuromanifold_dim

    arch = Architecture((4, 4), (1,), 1, "softmax", heads=3, mlp=3, activation="gelu",
                        norm="rmsnorm")
    with pytest.warns(AmbiguousRankWarning):
        float_only = numerical_dim(arch)
    assert (float_only.dimension, float_only.status) == (33, "ambiguous")
    assert any("norm's eps" in note for note in float_only.notes)
    proved = neuromanifold_dim(arch)
    assert (proved.dimension, proved.status) == (34, "certified")
