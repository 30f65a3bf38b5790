"""Certified softmax dimensions and ranks at a point (issue 11): ball-arithmetic lower bound,
F_p upper bound, auto escalation, `rank --weights`, `figure3 --method certified`."""

import json
import warnings

import flint
import numpy as np
import pytest
import torch

from neuromanifold import Architecture, neuromanifold_dim, random_weights, rank_at_point
from neuromanifold.cli import main
from neuromanifold.core.blocks import flatten_blocks
from neuromanifold.core.parameters import LayerWeights, flatten
from neuromanifold.dimension.ball import prove_rank, softmax_upper_bound
from neuromanifold.dimension.ball_dual import ball_block_jacobian, certified_dim, rational_point
from neuromanifold.dimension.jacobians import jacobian
from neuromanifold.dimension.numerical import numerical_dim
from neuromanifold.io.weightfiles import write_weights

# (widths, keys, tokens, temperature): pairwise-distinct sizes, earlier narrower layers, t = 1, 2,
# key width 1, temperatures other than 1.
CASES = [((3, 5, 3), (2, 2), 3, 1.0), ((4, 3, 5), (2, 3), 3, 1.0), ((3, 4), (2,), 1, 1.0),
         ((5, 4, 3), (3, 2), 2, 2.0), ((2, 5, 4, 3), (1, 2, 2), 3, 1.0), ((3, 2, 4), (1, 3), 3, 0.5)]


@pytest.mark.parametrize("widths,keys,tokens,tau", CASES)
def test_certified_equals_numerical(widths, keys, tokens, tau):
    """Certified (ball + F_p) and numerical (float64 gap rule) agree on every case."""
    arch = Architecture(widths, keys, tokens, "softmax", tau)
    proved = certified_dim(arch, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        float_result = numerical_dim(arch, seed=5)
    assert proved.status == "certified" and float_result.status == "settled"
    assert proved.dimension == proved.lower_bound == proved.upper_bound == float_result.dimension
    assert proved.dimension + proved.fiber_dim == arch.n_params


def test_worked_values_certified():
    """The reference's softmax values: 3,5,3 -> 25 (GL alone bounds it by 29), 4,4,4,4 keys
    2,2,2 -> 52, Figure 3 deltas 3..6, one layer r (2d - r) + d d'."""
    assert neuromanifold_dim(Architecture((3, 5, 3), (2, 2), 3, "softmax"),
                             method="certified").dimension == 25
    deep = neuromanifold_dim(Architecture((4, 4, 4, 4), (2, 2, 2), 3, "softmax"), method="certified")
    assert (deep.n_params, deep.dimension, deep.status) == (96, 52, "certified")
    for delta, expected in zip(range(3, 7), (25, 40, 57, 76)):
        r = neuromanifold_dim(Architecture((delta,) * 3, (2, 2), 3, "softmax"), method="certified")
        assert (r.dimension, r.status) == (expected, "certified")
    single = neuromanifold_dim(Architecture((4, 3), (2,), 3, "softmax"), method="certified")
    assert single.dimension == 2 * (2 * 4 - 2) + 4 * 3


@pytest.mark.parametrize("attention,tau", [("softmax", 1.0), ("softmax", 0.7), ("lightning", 1.0)])
def test_ball_block_matches_autodiff(attention, tau):
    """The network map run in arb forward mode equals torch autodiff's float64 Jacobian of the
    paper's own map, and the balls are tight."""
    arch = Architecture((3, 4, 2), (2, 3), 3, attention, tau)
    blocks, X = rational_point(arch, 3, 4)
    J = jacobian(arch, flatten_blocks(arch, blocks), X)
    rows, cols = list(range(0, J.shape[0], 3)), list(range(0, arch.n_params, 2))
    old = flint.ctx.prec
    flint.ctx.prec = 100
    try:
        block = ball_block_jacobian(arch, blocks, X, rows, cols)
        mid = np.array([[float(x.mid()) for x in row] for row in block])
        rad = max(float(x.rad()) for x in block.ravel())
    finally:
        flint.ctx.prec = old
    assert np.allclose(mid, J[rows][:, cols].numpy(), rtol=1e-10, atol=1e-12)
    assert rad < 1e-20


def test_never_proves_more_than_the_upper_bound():
    """Soundness: a block one larger than the upper bound has a determinant ball containing 0."""
    arch = Architecture((3, 3, 3), (2, 2), 3, "softmax")
    upper, _ = softmax_upper_bound(arch)
    blocks, X = rational_point(arch, 0, 12)
    J = jacobian(arch, flatten_blocks(arch, blocks), X)

    def evaluate(rows, cols):
        return ball_block_jacobian(arch, blocks, X, rows, cols)
    ball = prove_rank(J, upper + 1, evaluate, precision=64)
    assert ball.proved == 0 and ball.precision == 1024
    assert prove_rank(J, upper, evaluate).proved == upper == 25


def test_t1_query_key_columns_vanish():
    """t = 1: a 1 x 1 softmax is 1, so every Q, K column of the Jacobian is zero (the extra
    kernel directions of the upper bound)."""
    arch = Architecture((3, 4), (2,), 1, "softmax")
    J = jacobian(arch, flatten(random_weights(arch, 1)), torch.randn(5, 3, 1, dtype=torch.float64))
    assert torch.all(J[:, : 2 * 2 * 3] == 0) and torch.linalg.matrix_rank(J) == 12


def test_auto_escalates_thin_gap_only(monkeypatch):
    """auto: a gap below the threshold is escalated and certified; a wide gap stays numerical; the
    result says what was done. The 96-parameter case has a gap of about 6.1 decades on the gauge's
    free columns (4.8 on the dense route), so the threshold is raised here to make it thin."""
    import neuromanifold.dimension.api as api

    monkeypatch.setattr(api, "ESCALATE_GAP_DECADES", 9.0)
    thin = neuromanifold_dim(Architecture((4, 4, 4, 4), (2, 2, 2), 3, "softmax"), method="auto")
    assert (thin.dimension, thin.status, thin.method) == (52, "certified", "certified")
    assert "escalated to the certified path" in thin.notes[0] and "numerical" in thin.seconds
    monkeypatch.setattr(api, "ESCALATE_GAP_DECADES", 6.0)
    wide = neuromanifold_dim(Architecture((4, 3), (2,), 3, "softmax"), method="auto")
    assert (wide.method, wide.status) == ("numerical", "settled")
    assert any("not escalated" in n for n in wide.notes)


def test_escalated_total_covers_every_phase(monkeypatch):
    """After auto escalates, the timing's total is the whole answer's wall time: its parts (the
    numerical pass, then the proof's phases) never sum to more than it (issue 39: the numerical
    pass was left out of the total), and it is no less than the numerical pass plus the proof."""
    import time

    import neuromanifold.dimension.api as api

    monkeypatch.setattr(api, "ESCALATE_GAP_DECADES", 99.0)  # every gap is thin: always escalated
    start = time.perf_counter()
    r = neuromanifold_dim(Architecture((4, 3), (2,), 3, "softmax"), method="auto")
    wall = time.perf_counter() - start
    assert (r.method, r.status) == ("certified", "certified") and "numerical" in r.seconds
    assert list(r.seconds)[0] == "numerical" and list(r.seconds)[-1] == "total"
    parts = sum(v for k, v in r.seconds.items() if k != "total")
    assert r.seconds["numerical"] > 0 and parts <= r.seconds["total"] <= wall
    shown = dict(r.summary_lines())["seconds"]
    assert shown.startswith("numerical ") and shown.endswith(f"total {r.seconds['total']:.2f}")


def test_refusals():
    """exact stays refused for softmax; certified runs on the CPU; precision is for non-polynomial
    networks (softmax, non-polynomial blocks)."""
    soft = Architecture((3, 3), (2,), 3, "softmax")
    with pytest.raises(ValueError, match="not polynomial"):
        neuromanifold_dim(soft, method="exact")
    with pytest.raises(ValueError, match="`device` must be 'cpu'"):
        neuromanifold_dim(soft, method="certified", device="cuda")
    with pytest.raises(ValueError, match="`precision` must be given only for non-polynomial networks"):
        neuromanifold_dim(Architecture((3, 3), (2,), 3), precision=200)
    with pytest.raises(ValueError, match="`precision` must be an integer >= 16"):
        neuromanifold_dim(soft, method="certified", precision=8)


def _near_degenerate(eps: float) -> tuple[Architecture, LayerWeights]:
    """4,4,4,4 keys 2,2,2 softmax with Q_i, K_i of two rows eps apart: Q_i^T K_i nearly rank one."""
    arch = Architecture((4, 4, 4, 4), (2, 2, 2), 3, "softmax")
    w = random_weights(arch, 3)
    gen = torch.Generator().manual_seed(5)

    def squeeze(m):
        return torch.stack([m[0], m[0] + eps * torch.randn(m.shape[1], generator=gen, dtype=torch.float64)])
    return arch, LayerWeights(tuple(map(squeeze, w.Q)), tuple(map(squeeze, w.K)), w.V)


def test_near_degenerate_point_float_wrong_proof_right():
    """float64 reads 37 with a 6-decade gap at this point; the proof there gives 52. Numerical
    alone is never settled below the proven upper bound; auto escalates and certifies 52."""
    arch, weights = _near_degenerate(1e-10)
    numeric = rank_at_point(arch, weights, method="numerical", generic=False)
    assert numeric.rank == numeric.float_rank < 52 and numeric.status == "ambiguous"
    proved = rank_at_point(arch, weights, method="auto", generic=False)
    assert (proved.rank, proved.status, proved.upper_bound) == (52, "certified", 52)
    assert proved.float_rank < 52
    assert any("float64 alone gave" in n for n in proved.notes)


def test_rank_cli_on_weight_file(tmp_path, capsys):
    """`rank --weights` prints the proved rank at the point and the generic dimension; JSON too."""
    arch, weights = _near_degenerate(1e-10)
    path = write_weights(tmp_path / "W.npz", weights)
    code = main(["rank", "--weights", str(path), "--attention", "softmax"])
    out = capsys.readouterr().out
    assert code == 0
    assert "rank at the point  52  [certified" in out and "generic dimension  52" in out
    code = main(["rank", "--weights", str(path), "--attention", "softmax", "--method", "numerical",
                 "--no-generic", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["status"] == "ambiguous" and data["rank"] < 52


def test_rank_at_generic_point_lightning():
    """Any architecture dim accepts: lightning weights at a generic point give the dimension."""
    arch = Architecture((3, 4, 2), (2, 3), 3)
    r = rank_at_point(arch, random_weights(arch, 4), method="certified")
    assert (r.rank, r.status) == (r.generic_dimension, "certified")


def test_cli_dim_and_figure3_certified(tmp_path, capsys):
    """dim --method certified (softmax) in JSON; figure3 --method certified proves its points."""
    code = main(["dim", "--widths", "3,5,3", "--keys", "2,2", "--attention", "softmax",
                 "--method", "certified", "--precision", "96", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and (data["dimension"], data["status"]) == (25, "certified")
    # the engine that proved it is named: the verified float64 certificate, tried first, or
    # the balls at the precision asked for
    assert ("lower bound proved by the verified float64 arithmetic" in data["notes"]
            or "ball precision 96 bits" in data["notes"])
    code = main(["figure3", "--deltas", "3,4", "--method", "certified", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.count("certified") >= 3
    assert (tmp_path / "figure3_softmax.csv").exists()


def test_an_upper_bound_below_the_float_rank_is_a_bug_not_a_certificate(monkeypatch):
    """If the symmetry bound undercounts (a wrong family), certify_rank raises instead of certifying."""
    from neuromanifold.dimension import ball
    from neuromanifold.errors import ComputationError

    real = ball.staircase_rank_mod_p
    monkeypatch.setattr(ball, "staircase_rank_mod_p",
                        lambda *a, **k: (lambda r: (r[0] + 2, r[1]))(real(*a, **k)))
    arch = Architecture((3, 4, 2), (2, 3), 3, "softmax")
    with pytest.raises(ComputationError, match="exceeds the symmetry upper bound"):
        neuromanifold_dim(arch, method="certified", seed=0)


def test_a_singular_first_block_is_retried_by_column_pivoting(monkeypatch):
    """When the first r x r block chosen from float64 is exactly singular, prove_rank tries a block
    chosen by column pivoting, which proves the rank (here 3 of a 5 x 4 integer matrix of rank 3);
    a matrix of rank 2 still proves nothing at rank 3."""
    import flint

    from neuromanifold.dimension import ball

    M = torch.tensor([[1., 2., 3., 3.], [2., 4., 6., 1.], [0., 1., 1., 5.], [1., 1., 2., 7.],
                      [3., 5., 8., 2.]], dtype=torch.float64)        # column 3 = column 1 + column 2

    def evaluate(rows, cols):
        return np.array([[flint.arb(float(M[r, c])) for c in cols] for r in rows], dtype=object)

    monkeypatch.setattr(ball, "_select_block", lambda J, r: ([0, 1, 2], [0, 1, 2], None))
    got = ball.prove_rank(M, 3, evaluate)
    assert got.proved == 3 and "column pivoting proved it" in got.notes[0]
    low = torch.outer(M[:, 0], torch.tensor([1., 0., 1., 2.], dtype=torch.float64)) + \
        torch.outer(M[:, 3], torch.tensor([0., 1., 1., 1.], dtype=torch.float64))
    M = low
    assert ball.prove_rank(low, 3, evaluate).proved == 0
