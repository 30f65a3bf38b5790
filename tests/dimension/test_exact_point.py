"""The exact rank over Q at a rational point of a polynomial network (`dimension.exact_point`,
`rank_at_point`'s first proof): the lattice, the boundary layer of the tutorial, a cross-check
against the F_p Jacobian, and the points where only the exact path gets the right answer."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math

import flint
import numpy as np
import pytest
import torch

from neuromanifold import Architecture, neuromanifold_dim, random_weights, rank_at_point
from neuromanifold.cli import main
from neuromanifold.core.blocks import block_layout, blocks_of
from neuromanifold.dimension import exact_point
from neuromanifold.dimension.exact_point import (exact_rank_at_point, lattice_inputs,
                                                 lattice_size, not_applicable)
from neuromanifold.dimension.fp import DEFAULT_PRIME, rank_mod_p
from neuromanifold.dimension.fp_dual import jacobian_mod_p
from neuromanifold.io.weightfiles import read_network_file

# The tutorial's boundary point (docs/tutorial.md): A = alpha beta^T, V = nu alpha^T, d = 3,
# d' = 2, t = 3; Theorem 3.4 gives Jacobian rank 12 (generic 14).
ALPHA, BETA, NU = np.array([1, 2, 0]), np.array([0, 1, 3]), np.array([2, -1])


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue()


def _boundary_file(tmp_path, scale: float = 1.0) -> str:
    path = tmp_path / "boundary.npz"
    np.savez(path, A_1=np.outer(ALPHA, BETA) * scale, V_1=np.outer(NU, ALPHA) / scale)
    return str(path)


def _boundary_point(tmp_path, scale: float = 1.0):
    data = read_network_file(_boundary_file(tmp_path, scale), tokens=3)
    return data.arch, data.point


def _integer_blocks(arch: Architecture, seed: int, bound: int = 2) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {name: torch.randint(-bound, bound + 1, shape, generator=gen).to(torch.float64)
            for name, shape, _ in block_layout(arch)}


# ------------------------------------------------------------------------------- the lattice

@pytest.mark.parametrize(("m", "degree"), [(1, 4), (2, 3), (3, 3), (4, 2), (9, 1)])
def test_lattice_is_the_principal_lattice_and_unisolvent(m, degree):
    """S_D: every x >= 0 with sum <= D, once each; the monomials of degree <= D evaluated there
    form a nonsingular square matrix (exact rank), so evaluation is injective on P_D."""
    points = lattice_inputs(m, degree)
    assert points.shape == (lattice_size(m, degree), m) == (math.comb(m + degree, degree), m)
    assert len({tuple(p) for p in points}) == len(points)
    assert points.min() >= 0 and points.sum(axis=1).max() == degree
    exponents = [e for e in itertools.product(range(degree + 1), repeat=m) if sum(e) <= degree]
    assert len(exponents) == len(points)
    vandermonde = [int(np.prod([int(x) ** int(k) for x, k in zip(p, e)]))
                   for p in points for e in exponents]
    assert flint.fmpz_mat(len(points), len(points), vandermonde).rank() == len(points)


# ---------------------------------------------------------------------- the boundary example

def test_boundary_layer_reads_rank_12_proved(tmp_path):
    """`rank --weights boundary.npz`: 12 certified by the exact rank over Q (it read
    `12 <= rank <= 14`, not proved, exit 1), and the generic dimension's method is said once."""
    path = _boundary_file(tmp_path)
    code, out = _run(["rank", "--weights", path, "--json"])
    d = json.loads(out)
    assert code == 0 and d["is_settled"]
    assert (d["rank"], d["method"], d["status"]) == (12, "exact", "certified")
    assert d["lower_bound"] == d["upper_bound"] == 12
    assert d["exact"]["symmetry_upper_bound"] == 14 and d["exact"]["inputs"] == math.comb(12, 3)
    assert d["generic_dimension"] == 14
    code, out = _run(["rank", "--weights", path])
    assert code == 0
    assert "12  [exact over Q, certified: 12 <= rank <= 12" in out
    assert "generic dimension  14  [certified]" in out and "certified, certified" not in out
    assert "this point is degenerate: rank 12 < generic dimension 14" in out


def test_boundary_layer_without_the_exact_path_is_not_proved(tmp_path, monkeypatch):
    """The mutant: with the exact path's size limit at 0 the answer is today's ball bracket
    12 <= rank <= 14 (not settled), and the note says why the exact rank was not taken. So the
    certified 12 above comes from the exact path."""
    arch, point = _boundary_point(tmp_path)
    monkeypatch.setattr(exact_point, "MAX_ENTRIES", 0)
    r = rank_at_point(arch, point, generic=False)
    assert (r.method, r.status, r.lower_bound, r.upper_bound) == ("certified", "lower-bound", 12, 14)
    assert not r.is_settled and r.exact is None
    assert any(n.startswith("exact rank over Q not taken: its lattice Jacobian") for n in r.notes)
    monkeypatch.undo()
    r = rank_at_point(arch, point, generic=False)
    assert (r.rank, r.method, r.status) == (12, "exact", "certified")


@pytest.mark.parametrize("k", [20, 40])
def test_rescaled_boundary_point_keeps_rank_12(tmp_path, k):
    """(A, V) -> (2^k A, 2^-k V) is a symmetry (phi unchanged), a diffeomorphism of the
    parameters, so the rank at the moved point is 12 by construction. float64 loses half of it
    there (6 with a clear gap, measured) and the balls prove only 6 <= rank <= 14; the exact path
    reads 12 at both scales."""
    arch, point = _boundary_point(tmp_path, 2.0 ** k)
    r = rank_at_point(arch, point, method="certified", generic=False)
    assert (r.rank, r.method, r.status, r.lower_bound, r.upper_bound) == (
        12, "exact", "certified", 12, 12)
    assert r.float_rank < 12
    assert any(n.startswith(f"float64 alone gave {r.float_rank} here") for n in r.notes)


# ---------------------------------------------------------- cross-checks against other engines

CROSS = [Architecture((2, 2), 2, 2), Architecture((3, 2), 2, 3), Architecture((2, 3), 3, 2),
         Architecture((2, 2, 2), 2, 2), Architecture((2, 2), 2, 2, residual=True, mlp=2),
         Architecture((2, 2), 1, 3, causal=True)]


@pytest.mark.parametrize("arch", CROSS, ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_exact_rank_against_f_p(arch, seed):
    """At a seeded random integer point: the same lattice Jacobian over F_p (`fp_dual`, no
    shared arithmetic) has rank <= the rank over Q for every prime, equal for a large prime
    here; the F_p rank at random F_p inputs is <= it as well (rank_p of dPhi mod p <= rank over Q)."""
    blocks = _integer_blocks(arch, seed)
    exact = exact_rank_at_point(arch, blocks)
    assert exact is not None and exact.rank is not None
    m = arch.input_width * arch.tokens
    X = torch.from_numpy(lattice_inputs(m, exact.degree)).reshape(-1, arch.input_width,
                                                                   arch.tokens)
    for p in (DEFAULT_PRIME, 3):
        residues = {k: v.to(torch.int64).remainder(p) for k, v in blocks.items()}
        rank_p = rank_mod_p(jacobian_mod_p(arch, residues, X.remainder(p), p).numpy(), p)
        assert rank_p <= exact.rank
        if p == DEFAULT_PRIME:
            assert rank_p == exact.rank
    p = DEFAULT_PRIME
    residues = {k: v.to(torch.int64).remainder(p) for k, v in blocks.items()}
    gen = torch.Generator().manual_seed(seed)
    Y = torch.randint(0, p, (3 * arch.n_params, arch.input_width, arch.tokens), generator=gen)
    assert rank_mod_p(jacobian_mod_p(arch, residues, Y, p).numpy(), p) <= exact.rank


@pytest.mark.parametrize("arch", CROSS[:4], ids=str)
def test_exact_rank_at_a_random_float_point_is_the_generic_dimension(arch):
    """float64 weights are dyadic rationals: at random ones the exact rank over Q is the
    certified generic dimension (another engine: F_p ranks and the symmetry bound)."""
    w = random_weights(arch, 3).map(lambda t: t.detach().to(torch.float64))
    blocks = {k: v.detach().to(torch.float64) for k, v in blocks_of(arch, w).items()}
    exact = exact_rank_at_point(arch, blocks)
    generic = neuromanifold_dim(arch, method="certified")
    assert generic.status == "certified" and exact.rank == generic.dimension


def test_designed_rank_drop_duplicated_heads():
    """Two heads with the same query, key and value blocks: phi = 2 h(W) and the columns of the
    two heads are equal, so the rank is that of one head (known from the one-head network at the
    same blocks); a generic two-head point has more."""
    two = Architecture((2, 2), 2, 2, heads=2)
    one = Architecture((2, 2), 2, 2)
    base = _integer_blocks(one, 5)
    same = {name: base[name.rsplit("_", 1)[0] + "_1"] for name, _, _ in block_layout(two)}
    r_one = exact_rank_at_point(one, base).rank
    r_same = exact_rank_at_point(two, same).rank
    r_two = exact_rank_at_point(two, _integer_blocks(two, 5)).rank
    assert r_same == r_one < r_two


def test_not_applicable_networks_keep_their_path():
    """Softmax, token inputs and rotary positions are left to the balls (None: no exact path)."""
    for arch in (Architecture((2, 2), 2, 2, attention="softmax"),
                 Architecture((2, 2), 2, 2, positions="rope"),
                 Architecture((2, 2), 2, 2, vocab=3)):
        assert not_applicable(arch) is not None
        assert exact_rank_at_point(arch, _integer_blocks(arch, 0)) is None
    assert not_applicable(Architecture((2, 2), 2, 2)) is None
    soft = Architecture((2, 2), 2, 2, attention="softmax")
    r = rank_at_point(soft, random_weights(soft, 1), method="certified", generic=False)
    assert r.method == "certified" and r.exact is None
