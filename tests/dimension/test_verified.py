"""The verified float64 arithmetic (dimension/verified.py, docs/verified.md): its enclosures
contain the ball engine's values and tangents on networks of every kind, each primitive's error
term is needed (tight cases that fail when a term is halved or left out), the certificate
refuses singular and nearly singular minors, and the certified engine gives the same values
with it as with the ball engine alone."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
import torch

from neuromanifold import Architecture
from neuromanifold.dimension import ball_dual, verified
from neuromanifold.dimension.ball import UndecidedBall
from neuromanifold.dimension.ball_dual import ball_block_forward, certified_dim, rational_point
from neuromanifold.dimension.verified import (Interval, exact, verified_block_forward,
                                              verified_nonsingular)

S = "softmax"
# Networks of every kind the map has (distinct sizes where the options allow).
NETWORKS = [
    Architecture((3, 3, 3), (2, 2), 3, S),
    Architecture((3, 2), (2,), 3),
    Architecture((2, 3, 2), (1, 2), 2),
    Architecture((4, 3), (2,), 3, S, 0.7),
    Architecture((3, 4, 2), (2, 3), 3, S, heads=(2, 3), values=(2, 1)),
    Architecture((3, 3, 3), (2, 2), 3, S, heads=(2, 2), residual=True, mlp=(4, 2), activation="relu"),
    Architecture((3, 3, 3), (2, 2), 3, S, heads=(2, 2), residual=True, mlp=(4, 2), activation="gelu"),
    Architecture((3, 3, 3), (2, 2), 3, S, heads=(1, 2), residual=True, mlp=(2, 3),
                 activation="tanh", norm="layernorm"),
    Architecture((4, 4), (2,), 3, S, heads=(2,), mlp=(3,), activation="relu", norm="layernorm"),
    Architecture((4, 4), (2,), 3, S, 0.7, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                 norm="rmsnorm"),
    Architecture((4, 5, 3), (2, 3), 3, S, heads=(2, 1), mlp=(2, 0), activation="tanh", norm="rmsnorm"),
    Architecture((3, 4), (2,), 1, S, heads=(2,), mlp=(2,), activation="relu"),
    Architecture((3, 4), (2,), 2, heads=(2,), values=(3,), mlp=(5,), activation="tanh"),
    Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(5,), activation="silu",
                 norm="rmsnorm", causal=True),
    Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="gelu_tanh",
                 norm="layernorm", norm_bias=True, bias=True, mlp_bias=True),
    Architecture((4, 4, 4), (2, 2), 3, S, heads=(2, 2), residual=True, mlp=(3, 3),
                 activation="tanh", norm="layernorm", positions="rope"),
    Architecture((4, 4), (4,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="silu",
                 norm="rmsnorm", positions="rope", rope_base=10000.0),
    Architecture((4, 4), (2,), 3, S, heads=(4,), kv_heads=(2,), values=(2,), residual=True,
                 mlp=(3,), activation="silu", mlp_kind="gated", norm="rmsnorm", causal=True),
    Architecture((4, 4), (2,), 2, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                 norm="layernorm", vocab=6, tied=True, final_norm=True, positions="learned"),
    Architecture((4, 4), (2,), 2, S, heads=(2,), residual=True, mlp=(2,), activation="gelu",
                 norm="rmsnorm", vocab=5, final_norm=True, qk_norm=True),
    Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                 norm="layernorm", parallel=True, causal=True),
    Architecture((3, 3), (2,), 3, S, heads=(2,), residual=True, mlp=(2,), activation="square"),
    Architecture((3, 3), (2,), 3, causal=True, heads=(2,), residual=True),
    Architecture((5, 3), (2,), 2, S, heads=(3,), values=(1,)),
    Architecture((2, 2, 2, 2), (1, 1, 1), 3, S),
    Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                 norm="layernorm", norm_eps=1e-12),
    Architecture((3, 3), (2,), 3, S, 1e-3, heads=(1,)),
    Architecture((4, 4), (2,), 2, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                 norm="layernorm", post_norm=True, vocab=5, hidden_output=True),
    Architecture((4, 4), (2,), 2, S, heads=(2,), residual=True, mlp=(3,), activation="silu",
                 norm="rmsnorm", vocab=6, embed_scale=2.0, mlp_kind="gated", final_norm=True),
    Architecture((3, 5), (2,), 3, S, heads=(2,), mlp=(4,), activation="square", mlp_bias=True,
                 bias=True),
]


def _ball_bounds(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = np.vectorize(lambda e: float(flint.arb(e).lower()) if not isinstance(e, int) else float(e))
    hi = np.vectorize(lambda e: float(flint.arb(e).upper()) if not isinstance(e, int) else float(e))
    return lo(array).astype(float), hi(array).astype(float)


def _ball_forward(arch, blocks, X, cols, bits: int):
    """The ball engine's values (N, d_l, t) and tangents (k, N, d_l, t) at `bits` bits."""
    old = flint.ctx.prec
    flint.ctx.prec = bits
    try:
        bv, bt = ball_block_forward(arch, blocks, X, cols)
    finally:
        flint.ctx.prec = old
    return bv, np.asarray(bt).transpose(1, 0, 2, 3)


@pytest.mark.parametrize("arch", NETWORKS, ids=str)
def test_enclosures_contain_the_ball_engine(arch):
    """At the certified engine's rational point, the ball engine's values and tangents (200 bits:
    radii near 2^-190) lie inside the verified enclosures, and the enclosures are narrow."""
    blocks, X = rational_point(arch, 3, 3)
    P = arch.n_params
    cols = sorted(set(range(0, P, max(1, P // 10))) | {P - 1})
    value, tangents = verified_block_forward(arch, blocks, X, cols)
    for enc, balls in zip((value, tangents), _ball_forward(arch, blocks, X, cols, 200)):
        lo, hi = _ball_bounds(balls)
        assert enc.m.shape == lo.shape
        assert bool((torch.from_numpy(lo) >= enc.lo()).all()), arch
        assert bool((torch.from_numpy(hi) <= enc.hi()).all()), arch
        scale = max(float(enc.m.abs().max()), 1e-300)
        assert float(enc.r.max()) < 1e-6 * scale + 1e-300   # narrow enough to prove ranks


def _as_fraction(t: torch.Tensor) -> list[Fraction]:
    return [Fraction(float(v)) for v in t.reshape(-1)]


def _contains(enc: Interval, exact_values: list[Fraction]) -> bool:
    return all(Fraction(float(m)) - Fraction(float(r)) <= x <= Fraction(float(m)) + Fraction(float(r))
               for m, r, x in zip(enc.m.reshape(-1), enc.r.reshape(-1), exact_values))


# Tight cases: the computed result errs by close to its bound, so a halved or missing term misses.
F64 = torch.float64
A_SUM = torch.tensor([1.0, 1.0 + 2 ** -52], dtype=F64)
B_SUM = torch.tensor([2.0 ** -53, 2.0 ** -53 * 3 / 4], dtype=F64)
A_PROD = torch.tensor([1 + 3 * 2.0 ** -28], dtype=F64)


def test_tight_cases_are_contained():
    """1 + 2^-53 (a tie rounded away: error u |m|) and (1 + 3 2^-28)^2 (error 0.875 u): each
    primitive's enclosure holds the exact rational value."""
    s = verified.add(exact(A_SUM), exact(B_SUM))
    assert _contains(s, [a + b for a, b in zip(_as_fraction(A_SUM), _as_fraction(B_SUM))])
    p = verified.mul(exact(A_PROD), exact(A_PROD))
    assert _contains(p, [a * a for a in _as_fraction(A_PROD)])
    q = verified.einsum("i,i->", exact(A_PROD), exact(A_PROD))
    assert _contains(q, [_as_fraction(A_PROD)[0] ** 2])


@pytest.mark.parametrize("mutant", ["halved rounding", "einsum without gamma"])
def test_mutants_of_the_error_terms_are_caught(mutant, monkeypatch):
    """A radius shrunk by half, or the gamma_n term left out of the products: the tight cases
    are no longer contained (so the containment test above can fail)."""
    if mutant == "halved rounding":
        real = verified._inflate
        monkeypatch.setattr(verified, "_inflate", lambda c, k: real(c, k) / 2)
        s = verified.add(exact(A_SUM), exact(B_SUM))
        assert not _contains(s, [a + b for a, b in zip(_as_fraction(A_SUM), _as_fraction(B_SUM))])
    else:
        monkeypatch.setattr(verified, "gamma", lambda n: 0.0)
        q = verified.einsum("i,i->", exact(A_PROD), exact(A_PROD))
        assert not _contains(q, [_as_fraction(A_PROD)[0] ** 2])


def _interval(m: torch.Tensor, r: float) -> Interval:
    return Interval(m, torch.full_like(m, r))


def test_certificate_proves_a_well_conditioned_minor_and_refuses_singular_ones():
    """A random 40 x 40 minor with radii 1e-14 is proved; the same with one row duplicated, or
    with its smallest singular value (1e-12) below what radii 1e-10 can separate, is not."""
    gen = torch.Generator().manual_seed(5)
    M = torch.randn(40, 40, generator=gen, dtype=torch.float64)
    proved, bound = verified_nonsingular(_interval(M, 1e-14))
    assert proved and bound < 1e-6
    dup = M.clone()
    dup[7] = dup[3]
    assert not verified_nonsingular(_interval(dup, 1e-14))[0]
    U, _, Vh = torch.linalg.svd(M)
    sv = torch.logspace(0, -12, 40, dtype=torch.float64)
    near = U @ torch.diag(sv) @ Vh
    assert not verified_nonsingular(_interval(near, 1e-10))[0]


def test_the_radius_term_decides_the_certificate():
    """[[1, 1], [1, 1 + 1e-3]] with radii 1e-2 contains the singular [[1, 1], [1, 1]]: refused;
    the same midpoint with radius 0 is proved, so a certificate that left |X| rad out would
    prove the first (that mutant fails this test)."""
    M = torch.tensor([[1.0, 1.0], [1.0, 1.001]], dtype=torch.float64)
    block = _interval(M, 1e-2)
    assert not verified_nonsingular(block)[0]
    assert verified_nonsingular(Interval(M, torch.zeros_like(M)))[0]


@pytest.mark.parametrize("arch, truth", [
    (Architecture((3, 3, 3), (2, 2), 3, S), 25),
    (Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                  norm="layernorm"), None),
    (Architecture((4, 4), (2,), 3, S, heads=(4,), kv_heads=(2,), values=(2,), residual=True,
                  mlp=(3,), activation="silu", mlp_kind="gated", norm="rmsnorm", causal=True,
                  positions="rope"), None),
    (Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,), activation="gelu",
                  norm="layernorm", norm_eps=1e-12), None),
    (Architecture((3, 3), (2,), 3, S, 1e-6), None),
], ids=["figure3 delta 3", "layernorm gelu", "decoder", "bert eps", "saturated softmax"])
def test_certified_values_equal_the_ball_engines(arch, truth):
    """The certified engine with the verified certificate gives the value the ball engine alone
    gives (or, at a saturated softmax, nothing more certain than it): never a different
    certified value."""
    new = certified_dim(arch, seed=0)
    old = certified_dim(arch, seed=0, engine="ball")    # arb balls only, no gauged proof
    assert any("engine ball" in n for n in old.notes)
    assert not any("verified float64 arithmetic:" in n for n in old.notes)
    if new.status == "certified" and old.status == "certified":
        assert new.dimension == old.dimension
    else:
        assert new.lower_bound <= old.upper_bound and old.lower_bound <= new.upper_bound
    if truth is not None:
        assert new.status == "certified" and new.dimension == truth
        assert any("verified float64" in n for n in new.notes)


def test_a_relu_at_zero_is_undecided():
    """A relu input interval containing 0 has no decided derivative: UndecidedBall, as in balls."""
    arch = Architecture((3, 4), (2,), 2, "softmax", mlp=(2,), activation="relu")
    blocks, X = rational_point(arch, 0, 2)
    blocks = {k: v.clone() for k, v in blocks.items()}
    blocks["P_1"] = torch.zeros_like(blocks["P_1"])
    with pytest.raises(UndecidedBall):
        verified_block_forward(arch, blocks, X, [0, 1])


@pytest.mark.parametrize("arch", [NETWORKS[0], NETWORKS[17], NETWORKS[18]], ids=str)
def test_jacobian_block_contains_the_ball_block(arch):
    """The block prove_rank certifies: rows (n, d_l, t) and columns as `ball_block_jacobian`."""
    blocks, X = rational_point(arch, 1, 4)
    per = arch.output_width * arch.tokens
    rows = [1, per + 2, 3 * per + per - 1, 2 * per]
    cols = [0, arch.n_params // 2, arch.n_params - 1]
    enc = verified.verified_block_jacobian(arch, blocks, X, rows, cols)
    lo, hi = _ball_bounds(ball_dual.ball_block_jacobian(arch, blocks, X, rows, cols))
    assert bool((torch.from_numpy(lo) >= enc.lo()).all()) and bool((torch.from_numpy(hi) <= enc.hi()).all())


@pytest.mark.parametrize("arch", [NETWORKS[0], NETWORKS[7], NETWORKS[17]], ids=str)
def test_projected_matrix_contains_the_ball_product(arch):
    """W J V along dense directions V (the float SVD's, in the certificate): its enclosure
    contains W (J in balls) V computed in arb from the full ball Jacobian."""
    blocks, X = rational_point(arch, 2, 3)
    per = arch.output_width * arch.tokens
    m, P = 3 * per, arch.n_params
    gen = torch.Generator().manual_seed(1)
    W = torch.randn(4, m, generator=gen, dtype=torch.float64)
    V = torch.randn(P, 3, generator=gen, dtype=torch.float64)
    enc = verified.verified_projected_block(arch, blocks, X, W, V)
    old = flint.ctx.prec
    flint.ctx.prec = 200
    try:
        J = ball_dual.ball_block_jacobian(arch, blocks, X, list(range(m)), list(range(P)))
        prod = (flint.arb_mat(W.tolist()) * flint.arb_mat(J.tolist()) * flint.arb_mat(V.tolist()))
    finally:
        flint.ctx.prec = old
    lo, hi = _ball_bounds(np.array(prod.entries(), dtype=object).reshape(4, 3))
    assert bool((torch.from_numpy(lo) >= enc.lo()).all()) and bool((torch.from_numpy(hi) <= enc.hi()).all())


def test_projected_certificate_refuses_a_duplicated_direction():
    """W J V with two equal columns of V is singular: never proved, whatever its radii."""
    arch = NETWORKS[0]
    blocks, X = rational_point(arch, 0, 10)
    m = 10 * arch.output_width * arch.tokens
    gen = torch.Generator().manual_seed(2)
    V = torch.randn(arch.n_params, 6, generator=gen, dtype=torch.float64)
    W = torch.randn(6, m, generator=gen, dtype=torch.float64)
    assert verified_nonsingular(verified.verified_projected_block(arch, blocks, X, W, V))[0]
    V[:, 5] = V[:, 2]
    assert not verified_nonsingular(verified.verified_projected_block(arch, blocks, X, W, V))[0]


def test_a_broadcast_summed_label_counts_its_full_length():
    """einsum('ij,jk->ik') of a 1 x 1 left operand against a 3 x 1 right one sums 3 terms
    (torch broadcasts j): 1 + 2^-53 + 2^-53 rounds to 1, an error of 2u that gamma_1 misses."""
    a = exact(torch.tensor([[1.0]], dtype=F64))
    b = exact(torch.tensor([[1.0], [2.0 ** -53], [2.0 ** -53]], dtype=F64))
    assert _contains(verified.einsum("ij,jk->ik", a, b), [Fraction(1) + 2 * Fraction(2) ** -53])


def test_causal_softmax_with_large_scores_is_decided():
    """Causal scores: the shift is the max over the kept entries, so large masked scores do not
    push the kept exponentials to 0 (before: an undecided division); contains the balls."""
    arch = Architecture((4, 4), (2,), 3, S, heads=(2,), residual=True, mlp=(3,),
                        activation="silu", norm="rmsnorm", causal=True)
    blocks, X = rational_point(arch, 3, 3)
    blocks = {k: v * 20 for k, v in blocks.items()}
    cols = [0, 5, arch.n_params - 1]
    value, tangents = verified_block_forward(arch, blocks, X, cols)
    for enc, balls in zip((value, tangents), _ball_forward(arch, blocks, X, cols, 300)):
        lo, hi = _ball_bounds(balls)
        assert bool((torch.from_numpy(lo) >= enc.lo()).all()) and bool((torch.from_numpy(hi) <= enc.hi()).all())


def test_primitives_against_exact_rationals():
    """Seeded random intervals (signs, magnitudes from 2^-1060 to 2^60, ties): every exact
    result over the intervals' endpoints lies in add's, mul's and einsum's enclosure."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(20):
        scale = 2.0 ** torch.randint(-1060, 60, (6,), generator=gen).to(F64)
        am = torch.randn(6, generator=gen, dtype=F64) * scale
        bm = torch.randn(6, generator=gen, dtype=F64) * scale.flip(0)
        a, b = Interval(am, am.abs() * 2.0 ** -40), Interval(bm, bm.abs() * 2.0 ** -45)
        for sa in (-1, 1):
            for sb in (-1, 1):
                xa = [Fraction(float(m)) + sa * Fraction(float(r)) for m, r in zip(a.m, a.r)]
                xb = [Fraction(float(m)) + sb * Fraction(float(r)) for m, r in zip(b.m, b.r)]
                assert _contains(verified.add(a, b), [x + y for x, y in zip(xa, xb)])
                assert _contains(verified.mul(a, b), [x * y for x, y in zip(xa, xb)])
                assert _contains(verified.einsum("i,i->", a, b), [sum(x * y for x, y in zip(xa, xb))])


def _old_entrywise_bound(block: Interval) -> float:
    """The certificate's bound as first written: the spread |X| (gamma_r |Mm| + Mr) formed
    entrywise by a second r x r x r product, then the row sums."""
    Mm, Mr = block.m, block.r
    r = Mm.shape[0]
    X = torch.linalg.inv(Mm)
    C = X @ Mm
    eye = torch.eye(r, dtype=torch.float64)
    up, k, g, eta = verified.up, verified._k, verified.gamma, verified.ETA
    residual = up((eye - C).abs() + verified._rounding(eye - C))
    T = up(up(g(r) * Mm.abs()) + Mr)
    spread = up(k(r) * up(X.abs() @ T + 4 * r * eta))
    E = up(residual + up(spread + 4 * r * eta))
    return float(up(k(r) * up(E.sum(dim=1) + 4 * r * eta)).max())


@pytest.mark.parametrize("radius", [0.0, 1e-14, 1e-9, 1e-4])
def test_the_matrix_vector_spread_is_no_smaller_than_the_entrywise_one(radius):
    """The certificate's row sums of |X| T come from |X| (T 1), one matrix-vector product: in
    exact arithmetic the same numbers, so its bound must not fall below the entrywise form's
    (beyond a few ulps of rounding each way)."""
    gen = torch.Generator().manual_seed(11)
    M = torch.randn(60, 60, generator=gen, dtype=torch.float64)
    block = _interval(M, radius)
    new, old = verified_nonsingular(block)[1], _old_entrywise_bound(block)
    assert new >= old * (1 - 1e-12)


def test_the_gauged_proof_certifies_the_papers_model_without_the_float_jacobian():
    """The paper's softmax model: the gauge's free columns enclosed on all rows, rows by LU, the
    minor proved in verified float64; no float Jacobian computed, the value Eq. 16's."""
    r = certified_dim(Architecture((4, 4, 4), (2, 2), 3, S), seed=0)
    assert (r.status, r.dimension) == ("certified", 40)
    assert any("gauge-free columns" in n for n in r.notes)
    assert r.seconds["float jacobian"] == 0.0 and "row selection" in r.seconds


def _columns_of(M: torch.Tensor, radius: float):
    return lambda cols: Interval(M[:, cols].clone(), torch.full((M.shape[0], len(cols)), radius,
                                                               dtype=torch.float64))


def test_the_gauged_proof_never_proves_a_singular_column_set(monkeypatch):
    """A column set of rank below its size (a column the sum of two others) is never proved,
    whichever rows the selection takes (its mutant: the first rows, unpivoted); an independent
    one is."""
    from neuromanifold.dimension import ball

    gen = torch.Generator().manual_seed(3)
    M = torch.randn(30, 8, generator=gen, dtype=torch.float64)
    got = ball.prove_rank_on_columns(_columns_of(M, 1e-14), list(range(8)), verified_nonsingular)
    assert got.proved == 8
    M[:, 5] = M[:, 1] + M[:, 2]
    for select in (ball._partial_pivot_rows, lambda A: list(range(A.shape[1]))):
        monkeypatch.setattr(ball, "_partial_pivot_rows", select)
        got = ball.prove_rank_on_columns(_columns_of(M, 1e-14), list(range(8)), verified_nonsingular)
        assert got.proved == 0


def test_a_symmetry_tangent_outside_the_kernel_stops_the_gauged_proof(monkeypatch):
    """The gauged proof's defence: a GL tangent that leaks out of the float kernel (a bug in the
    symmetries) would let rank J exceed the upper bound: refused, not certified."""
    from neuromanifold.dimension.gauge import GaugeSplit
    from neuromanifold.errors import ComputationError

    monkeypatch.setattr(GaugeSplit, "leak", lambda self, arch, params, X: 1e-3)
    with pytest.raises(ComputationError, match="not in the kernel"):
        certified_dim(Architecture((3, 3, 3), (2, 2), 3, S), seed=0)


def test_engine_option_cross_checks_the_certified_value(capsys):
    """dim --engine ball gives the certified value --engine verified gives, and its notes name
    the engine; an engine is refused for polynomial networks and unknown names."""
    import json

    from neuromanifold.cli import main
    from neuromanifold.dimension.api import neuromanifold_dim
    from neuromanifold.errors import InputError

    values = {}
    for engine in ("verified", "ball"):
        code = main(["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "3", "--attention",
                     "softmax", "--method", "certified", "--engine", engine, "--json"])
        data = json.loads(capsys.readouterr().out)
        assert code == 0 and data["status"] == "certified"
        values[engine] = data["dimension"]
        named = [n for n in data["notes"] if "engine ball" in n]
        assert bool(named) == (engine == "ball")
    assert values == {"verified": 25, "ball": 25}
    with pytest.raises(InputError, match="engine"):
        neuromanifold_dim(Architecture((3, 3, 3), (2, 2), 3), method="exact", engine="ball")
    with pytest.raises(InputError, match="engine"):
        neuromanifold_dim(Architecture((3, 3, 3), (2, 2), 3, S), method="certified", engine="arb")


def test_rank_at_a_point_takes_the_engine_too():
    """rank_at_point(engine='ball'), as `rank --weights ... --engine ball`: the same certified
    rank as the default engine, the notes naming the ball engine."""
    from neuromanifold import random_weights
    from neuromanifold.dimension.point import rank_at_point

    arch = Architecture((3, 3, 3), (2, 2), 3, S)
    w = random_weights(arch, 1)
    new = rank_at_point(arch, w, method="certified", generic=False)
    old = rank_at_point(arch, w, method="certified", generic=False, engine="ball")
    assert (new.rank, new.status) == (old.rank, old.status) == (25, "certified")
    assert any("engine ball" in n for n in old.notes)
    assert not any("engine ball" in n for n in new.notes)


def test_a_gauged_proof_that_fails_leaves_the_float_path_to_decide(monkeypatch):
    """A gauged minor that is not separated (its mutant: every gauged attempt refused) proves
    nothing itself: N doubles once, then the float Jacobian's path certifies, and the notes keep
    both attempts."""
    from neuromanifold.dimension import ball

    calls = []

    def refused(enclose, cols, nonsingular, progress=None, what=""):
        calls.append(len(cols))
        return ball.BallRank(0, len(cols), 53, "not separated", {"verified jacobian": 0.0},
                             ["gauged mutant: not separated"], engine="verified")

    monkeypatch.setattr(ball, "prove_rank_on_columns", refused)
    r = certified_dim(Architecture((3, 3, 3), (2, 2), 3, S), seed=0)
    assert calls == [25, 25]
    assert (r.status, r.dimension) == ("certified", 25) and r.seconds["float jacobian"] > 0
    assert sum("gauged mutant" in n for n in r.notes) == 2


def test_local_geometry_takes_the_engine():
    """local_geometry(engine='ball') (`rank PATH --engine ball`): the same lower bound, the notes
    naming the engine."""
    from neuromanifold.core.blocks import random_block_weights
    from neuromanifold.dimension.local import local_geometry

    arch = Architecture((3, 3), (2,), 2, S, heads=(1,), residual=True)
    blocks = random_block_weights(arch, 1)
    new = local_geometry(arch, blocks, method="certified", generic=False, parts=False)
    old = local_geometry(arch, blocks, method="certified", generic=False, parts=False,
                         engine="ball")
    assert new.lower_bound == old.lower_bound == new.rank
    assert any("engine ball" in n for n in old.notes)
    assert not any("engine ball" in n for n in new.notes)
