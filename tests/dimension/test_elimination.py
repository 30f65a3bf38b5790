"""The eliminated route: the last value matrix removed exactly before the rank is read (issue 13)."""

import warnings

import pytest
import torch

from neuromanifold import Architecture, numerical_dim
from neuromanifold.core.maps import forward
from neuromanifold.core.parameters import flatten, random_inputs, random_weights
from neuromanifold.dimension import elimination, memory
from neuromanifold.dimension.gauge import gauge_split
from neuromanifold.dimension.jacobians import jacobian
from neuromanifold.core.rank import matrix_rank, unit_scaled
from neuromanifold.errors import InputError


def test_output_is_the_last_value_matrix_times_the_last_input():
    """phi_W(X) = V_l W(X), the identity the Kronecker block rests on."""
    arch = Architecture((7, 6, 5), (3, 2), 4, "softmax")
    W = random_weights(arch, 21)
    X = random_inputs(arch, 3, 21)
    torch.testing.assert_close(forward(arch, W, X), W.V[-1] @ elimination.last_input(arch, flatten(W), X))


@pytest.mark.parametrize("widths,keys,t,sketch", [((8, 7, 6), (3, 2), 5, False), ((12, 10, 9), (3, 2), 3, True),
                                                  ((6, 5, 4, 3), (2, 3, 1), 4, False)])
def test_rank_identity_on_a_small_jacobian(widths, keys, t, sketch, monkeypatch):
    """rank J[:, free] = d_l rank M + rank Y, with M and Y built over two blocks of samples
    (Y whole, or sketched to 2 t(t-1) rows per sample)."""
    if not sketch:
        monkeypatch.setattr(elimination, "SKETCH_PER_SAMPLE", 10 ** 6)
    arch = Architecture(widths, keys, t, "softmax")
    W = random_weights(arch, 13)
    params = flatten(W)
    split = gauge_split(arch, W)
    elim = elimination.LastValueElimination(arch, split, torch.Generator().manual_seed(3))
    X = random_inputs(arch, 24, 13)
    Y = torch.cat([elim.rows(arch, params, X[:4])[0], elim.rows(arch, params, X[4:])[0]])
    full = matrix_rank(unit_scaled(unit_scaled(jacobian(arch, params, X)[:, split.free], 1), 0))
    reduced, inputs = matrix_rank(unit_scaled(Y, 0)), elim.input_rank()
    assert full.is_settled() and reduced.is_settled() and inputs.is_settled()
    assert inputs.rank == widths[-2]
    assert full.rank == widths[-1] * inputs.rank + reduced.rank
    first, second = widths[-1] * (4 * t - widths[-2]), widths[-1] * 20 * t   # rows per block
    rows = first + (min(second, 2 * t * (t - 1) * 20) if sketch else second)
    assert Y.shape == (rows, split.free.numel() - widths[-1] * widths[-2])
    assert (elim.sketched > 0) == sketch


@pytest.mark.parametrize("widths,keys,t,seed", [((6, 5, 4), (3, 2), 4, 1), ((9, 9, 9), (3, 4), 5, 2),
                                                ((5, 4, 3, 2), (2, 3, 1), 3, 3),
                                                ((16, 12, 10), (4, 5), 6, 4),
                                                ((14, 12, 11), (3, 4), 3, 5)])
def test_eliminated_route_agrees_with_the_full_route(widths, keys, t, seed):
    """Same rank and status as the SVD of the whole free-column Jacobian, on several networks
    (the last one with rows sketched)."""
    arch = Architecture(widths, keys, t, "softmax")
    full = numerical_dim(arch, seed=seed, route="full")
    elim = numerical_dim(arch, seed=seed, route="eliminate")
    assert any("eliminated exactly" in n for n in elim.notes)
    assert not any("eliminated exactly" in n for n in full.notes)
    assert (elim.dimension, elim.status) == (full.dimension, full.status) == (full.upper_bound, "settled")
    assert elim.gap >= 4.0
    assert ("rows sketched" in " ".join(elim.notes)) == (widths[0] == 14)


def test_a_nearly_dependent_column_is_not_settled_at_the_bound(monkeypatch):
    """A reduced column within 1e-9 of another (a small but real direction) is never read as a
    settled full rank: the rule sees sigma_min far above round-off yet far below the others."""
    arch = Architecture((9, 8, 7), (3, 2), 5, "softmax")
    rows = elimination.LastValueElimination.rows
    gen = torch.Generator().manual_seed(5)

    def nearly_dependent(self, *args):
        Y, leak = rows(self, *args)
        Y[:, 1] = Y[:, 0] + 1e-9 * torch.randn(Y.shape[0], generator=gen, dtype=Y.dtype)
        return Y, leak

    monkeypatch.setattr(elimination.LastValueElimination, "rows", nearly_dependent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = numerical_dim(arch, seed=6, route="eliminate", max_samples=40)
    assert not (r.status == "settled" and r.dimension == r.upper_bound)
    assert r.dimension <= r.upper_bound


def test_a_rank_deficient_input_matrix_lowers_the_rank(monkeypatch):
    """When the last layer's input matrix M loses a column's rank, the V_l block counts
    d_l (d_{l-1} - 1), so the reading falls below the bound rather than claiming it."""
    arch = Architecture((8, 7, 6), (2, 3), 5, "softmax")
    last = elimination.last_input

    def deficient(*args):
        W = last(*args)
        W[:, 1] = W[:, 0]
        return W

    monkeypatch.setattr(elimination, "last_input", deficient)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = numerical_dim(arch, seed=8, route="eliminate", max_samples=30)
    assert r.dimension < r.upper_bound
    assert any("input matrix has rank 6," in n for n in r.notes)


def test_route_is_checked_and_auto_eliminates_only_large_gauge_networks():
    """A bad route is one InputError; `auto` eliminates from ELIMINATE_MIN_COLUMNS free columns."""
    with pytest.raises(InputError, match="route"):
        numerical_dim(Architecture((4, 3, 2), (2, 2), 3, "softmax"), route="fast")
    assert not memory.eliminates(Architecture((48, 48, 48), (8, 8), 16, "softmax"))  # 3,712 free
    assert memory.eliminates(Architecture((64, 64, 64), (8, 8), 16, "softmax"))      # 6,016 free
    assert not memory.eliminates(Architecture((64, 64, 64), (8, 8), 16, "lightning"))


def test_the_41k_and_92k_networks_are_estimated_within_16_gb_and_the_164k_one_above():
    """The eliminated route's estimate: the 40,960- and 92,160-parameter networks fit in 16 GB
    (group rows in one buffer, rows of Y folded into an in-place factor); the 163,840-parameter
    one does not (figures in docs/scale.md)."""
    est41 = memory.numerical_estimate(Architecture((128,) * 3, (16, 16), 16, "softmax"))
    est92 = memory.numerical_estimate(Architecture((192,) * 3, (24, 24), 16, "softmax"))
    est164 = memory.numerical_estimate(Architecture((256,) * 3, (32, 32), 16, "softmax"))
    assert est41.peak < est92.peak < 16 * memory.GIB < est164.peak
    assert "7680 columns" in est41.advice and "17280 columns" in est92.advice
    full41 = memory.numerical_estimate(Architecture((128,) * 3, (16, 16), 16, "softmax"), route="full")
    assert full41.peak > 2 * est41.peak


def test_memory_restates_the_sketch_size():
    """memory.py needs no torch, so it restates the sketch size; the two must agree."""
    assert memory.SKETCH_PER_SAMPLE == elimination.SKETCH_PER_SAMPLE


def test_blocks_that_exactly_fill_the_input_rows_give_the_one_block_reduction(monkeypatch):
    """Rows kept whole that reach exactly d_{l-1} (here 70 > one fold panel, after 10 samples of
    t = 7) are reduced before the next block is folded in: sample by sample, Y^T Y and R_M^T R_M
    equal those of one block of all samples, and R_M is triangular."""
    monkeypatch.setattr(elimination, "SKETCH_PER_SAMPLE", 10 ** 6)
    arch = Architecture((70, 70, 2), (3, 2), 7, "softmax")
    W = random_weights(arch, 17)
    params, split = flatten(W), gauge_split(arch, W)
    X = random_inputs(arch, 14, 17)

    def reduce(blocks):
        elim = elimination.LastValueElimination(arch, split, torch.Generator().manual_seed(1))
        Y = torch.cat([elim.rows(arch, params, X[a:b])[0] for a, b in blocks])
        return Y.T @ Y, elim._R

    gram_one, R_one = reduce([(0, 14)])
    gram_each, R_each = reduce([(i, i + 1) for i in range(14)])
    assert torch.equal(R_each, torch.triu(R_each))
    torch.testing.assert_close(R_each.T @ R_each, R_one.T @ R_one, rtol=1e-9, atol=1e-12)
    scale = gram_one.abs().max()
    assert (gram_each - gram_one).abs().max() / scale < 1e-7
