"""Folding rows into a triangular factor in place (`dimension.fold`), and the rank read that way."""

import pytest
import torch
from conftest import signed_rows

from neuromanifold import Architecture, numerical_dim
from neuromanifold.dimension import numerical
from neuromanifold.dimension.fold import fold_rows_


@pytest.mark.parametrize("n,k,m,panel", [(7, 3, 5, 4), (70, 150, 33, 16), (130, 41, 0, 64), (45, 17, 900, 8)])
def test_fold_equals_the_qr_of_the_stacked_rows(n, k, m, panel):
    """R_new is the triangular factor of [R; K] and the companions become Q^T [C_top; C_bottom]."""
    g = torch.Generator().manual_seed(n + k)
    R0 = torch.linalg.qr(torch.randn(n + 6, n, generator=g, dtype=torch.float64), mode="r").R
    K0 = torch.randn(k, n, generator=g, dtype=torch.float64)
    top0, bottom0 = (torch.randn(rows, m, generator=g, dtype=torch.float64) for rows in (n, k))
    R, K, top, bottom = R0.clone(), K0.clone(), top0.clone(), bottom0.clone()
    fold_rows_(R, K, companions=(top, bottom) if m else None, panel=panel)
    Q, R_ref = torch.linalg.qr(torch.cat([R0, K0]), mode="complete")
    assert torch.equal(R, torch.triu(R))
    torch.testing.assert_close(signed_rows(R), signed_rows(R_ref[:n]), rtol=0, atol=1e-12)
    if m:
        rotated = Q.T @ torch.cat([top0, bottom0])
        signs = torch.sign(torch.diagonal(R)) * torch.sign(torch.diagonal(R_ref))
        torch.testing.assert_close(top, rotated[:n] * signs[:, None], rtol=0, atol=1e-12)
        # The rows below R are Q^T's last k rows up to an orthogonal change of basis.
        torch.testing.assert_close(bottom.T @ bottom, rotated[n:].T @ rotated[n:], rtol=0, atol=1e-10)


def test_fold_refuses_an_r_that_is_not_triangular():
    """Entries below R's diagonal would be ignored by the panels: refused, not folded wrongly."""
    g = torch.Generator().manual_seed(9)
    R, K = torch.randn(130, 130, generator=g, dtype=torch.float64), torch.randn(5, 130, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match="upper triangular"):
        fold_rows_(R, K)


def test_fold_checks_shapes():
    """R must be square and K must have R's columns."""
    with pytest.raises(ValueError, match="n x n"):
        fold_rows_(torch.zeros(3, 4, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64))


def _count_folds(monkeypatch, keep: int, fold: int) -> list[int]:
    """Tiny keep/fold thresholds for the engine; returns the list each fold appends its rows to."""
    folds = []
    original = numerical.LocalRows._to_triangular

    def counted(self):
        folds.append(self.rows)
        original(self)

    monkeypatch.setattr(numerical, "NUMERICAL_KEEP_ROWS_BYTES", keep)
    monkeypatch.setattr(numerical, "NUMERICAL_FOLD_ROWS_BYTES", fold)
    monkeypatch.setattr(numerical.LocalRows, "_to_triangular", counted)
    return folds


@pytest.mark.parametrize("widths,keys,t,route", [((9, 8, 7), (3, 2), 5, "eliminate"), ((6, 5, 4), (2, 3), 4, "full")])
def test_rows_folded_into_a_triangular_factor_give_the_same_rank(widths, keys, t, route, monkeypatch):
    """With tiny keep/fold thresholds the rows go through the in-place triangular factor: same
    rank, status and N as keeping them whole, gap within a tenth of a decade."""
    arch = Architecture(widths, keys, t, "softmax")
    whole = numerical_dim(arch, seed=4, route=route)
    folds = _count_folds(monkeypatch, keep=8 * 40 * 60, fold=8 * 30 * 60)
    folded = numerical_dim(arch, seed=4, route=route)
    assert len(folds) == 1
    assert (folded.dimension, folded.status, folded.n_samples) == (whole.dimension, whole.status, whole.n_samples)
    assert folded.dimension == whole.upper_bound
    assert abs(folded.gap - whole.gap) < 0.1


def test_block_networks_fold_too(monkeypatch):
    """Networks beyond the paper's model run in the same engine, so their rows are folded into
    the triangular factor past the same thresholds: same rank, status and N as kept whole."""
    arch = Architecture((5, 5, 5), 2, 3, "softmax", heads=2, residual=True, mlp=3, activation="gelu")
    whole = numerical_dim(arch, seed=2)
    folds = _count_folds(monkeypatch, keep=8 * 150 * 120, fold=8 * 150 * 60)
    folded = numerical_dim(arch, seed=2)
    assert len(folds) == 1
    assert (folded.dimension, folded.status, folded.n_samples) == (whole.dimension, whole.status, whole.n_samples)
    assert whole.status == "settled" and abs(folded.gap - whole.gap) < 0.1
