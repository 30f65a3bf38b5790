"""Exact (over F_p) and certified dimensions of lightning networks (docs/math/deep.md, method.md)."""

import json

import numpy as np
import pytest
import torch

from neuromanifold import Architecture, numerical_dim
from neuromanifold.cli import main
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.dimension.fp import DEFAULT_PRIME, check_prime, rank_mod_p
from neuromanifold.dimension.exact import degree_bound, exact_dim
from neuromanifold.dimension.jacobians import jacobian
from neuromanifold.core.maps import forward
from neuromanifold.dimension.modular import (all_symmetry_tangents, forward_mod_p, hidden_symmetry_tangents,
                                   jacobian_rows_mod_p, matmul_mod, random_residues,
                                   random_weights_mod_p)
from neuromanifold.core.parameters import flatten
from neuromanifold.symmetries.paper import symmetry_tangents

P = DEFAULT_PRIME


def full_jacobian_mod_p(arch, weights, n_samples, p, gen):
    """The whole Jacobian over F_p: one identity cotangent per output entry."""
    X = random_residues((n_samples, arch.widths[0], arch.tokens), p, gen)
    eye = torch.eye(arch.widths[-1] * arch.tokens, dtype=torch.int64)
    G = eye.reshape(-1, arch.widths[-1], arch.tokens).expand(n_samples, -1, -1, -1).contiguous()
    return jacobian_rows_mod_p(weights, X, G, p)


def test_default_prime_is_a_word_prime():
    """DEFAULT_PRIME is prime and below 2^31 (products of residues fit in int64)."""
    assert check_prime("prime", DEFAULT_PRIME) == DEFAULT_PRIME < 2 ** 31


def test_non_prime_rejected():
    """A composite modulus is rejected with the template message."""
    with pytest.raises(ValueError, match=r"`prime` must be a prime >= 3; got 100\. Pass a prime"):
        exact_dim(Architecture((3, 3), (2,), 3), prime=100)


def test_prime_above_word_size_rejected():
    """A prime >= 2^31 is rejected by the exact Jacobian (int64 products would overflow)."""
    with pytest.raises(ValueError, match=r"`prime` must be a prime below 2\^31"):
        exact_dim(Architecture((3, 3), (2,), 3), prime=2147483659)


def test_rank_of_known_matrices():
    """rank_mod_p: a 7 x 11 product through rank 3 has rank 3; p-divisible entries vanish."""
    gen = torch.Generator().manual_seed(3)
    B, C = random_residues((7, 3), P, gen), random_residues((3, 11), P, gen)
    assert rank_mod_p(matmul_mod(B, C, P).numpy(), P) == 3
    assert rank_mod_p(np.array([[1, 2], [3, 6 + 5]]), 5) == 1
    assert rank_mod_p(np.diag([1, 2, 3, 13, 0]), 13) == 3


def test_matmul_mod_is_exact():
    """matmul_mod equals Python big-integer arithmetic reduced mod p."""
    gen = torch.Generator().manual_seed(4)
    A, B = random_residues((5, 7), P, gen), random_residues((7, 3), P, gen)
    ref = [[sum(int(A[i, k]) * int(B[k, j]) for k in range(7)) % P for j in range(3)] for i in range(5)]
    assert matmul_mod(A, B, P).tolist() == ref


def test_modular_rows_match_float_jacobian():
    """Reverse-mode rows mod p equal G^T J of the float64 forward-mode Jacobian (small integers)."""
    arch = Architecture((3, 5, 2), (2, 3), 3)
    gen = torch.Generator().manual_seed(0)
    W = random_weights_mod_p(arch, 2, gen)  # entries 0/1: every float64 value below is exact
    X = random_residues((2, 3, 3), 2, gen)
    G = random_residues((2, 4, 2, 3), 3, gen)
    rows = jacobian_rows_mod_p(W, X, G, P)
    Wf = W.map(lambda x: x.double())
    J = jacobian(arch, flatten(Wf), X.double()).reshape(2, 6, -1)
    ref = torch.einsum("nkc,ncq->nkq", G.double().reshape(2, 4, 6), J).reshape(8, -1)
    assert ref.abs().max() < 2 ** 52
    assert torch.equal(ref.to(torch.int64) % P, rows)
    assert torch.equal(forward(arch, Wf, X.double()).to(torch.int64) % P, forward_mod_p(W, X, P))


@pytest.mark.parametrize("widths,keys", [((3, 5, 3), (2, 2)), ((3, 4, 5), (2, 2)),
                                         ((3, 3, 3), (1, 2)), ((5, 3, 3, 5), (2, 2, 2))])
def test_symmetry_tangents_in_kernel(widths, keys):
    """Every symmetry tangent, hidden ones included, satisfies J T^T = 0 over F_p exactly."""
    arch = Architecture(widths, keys, 3)
    gen = torch.Generator().manual_seed(5)
    W = random_weights_mod_p(arch, P, gen)
    T, labels, skipped = all_symmetry_tangents(arch, W, P)
    J = full_jacobian_mod_p(arch, W, 3, P, gen)
    assert not skipped and len(labels) == T.shape[0]
    assert torch.count_nonzero(matmul_mod(J, T.T.contiguous(), P)) == 0


@pytest.mark.parametrize("widths,keys,fiber,eq14", [
    ((3, 5, 3), (2, 2), 39, 27), ((3, 4, 5), (2, 2), 31, 34), ((3, 3, 3), (1, 2), 18, 20)])
def test_hidden_tangents_close_the_gap(widths, keys, fiber, eq14):
    """Known tangents alone leave the Eq. 14 gap; adding the hidden ones gives the true fiber."""
    arch = Architecture(widths, keys, 3)
    W = random_weights_mod_p(arch, P, torch.Generator().manual_seed(6))
    known, _ = symmetry_tangents(arch, W)
    assert arch.n_params - rank_mod_p((known % P).numpy(), P) == eq14
    T, _, _ = all_symmetry_tangents(arch, W, P)
    assert rank_mod_p(T.numpy(), P) == fiber
    assert hidden_symmetry_tangents(arch, W, P)[0].shape[0] > 0


@pytest.mark.parametrize("widths,keys,truth", [
    ((3, 3), (2,), 16), ((4, 3), (6,), 27), ((3, 3, 3), (2, 2), 23),
    ((4, 4, 4, 4), (2, 2, 2), 49), ((5, 3, 3, 5), (2, 2, 2), 50), ((6, 4, 2, 4), (2, 2, 2), 53)])
def test_certified_where_formula_holds(widths, keys, truth):
    """Eq. 7 / Eq. 14 values are certified: exact lower bound == symmetry upper bound."""
    r = exact_dim(Architecture(widths, keys, 3), seed=1)
    assert (r.dimension, r.status, r.method) == (truth, "certified", "certified")
    assert r.lower_bound == r.upper_bound == truth == r.formula.value
    assert r.failure_probability == 0.0 and r.prime == P
    assert r.dimension + r.fiber_dim == r.n_params


@pytest.mark.parametrize("widths,keys,truth,formula", [
    ((3, 5, 3), (2, 2), 23, 27), ((3, 4, 5), (2, 2), 29, 34), ((3, 3, 3), (1, 2), 18, 20),
    ((2, 3, 5), (1, 1), 14, 18)])
def test_certified_where_eq14_fails(widths, keys, truth, formula):
    """Where Eq. 14 fails (docs/math/deep.md) the true value is certified and Eq. 14 marked failing."""
    r = exact_dim(Architecture(widths, keys, 3), seed=2)
    assert (r.dimension, r.lower_bound, r.upper_bound, r.status) == (truth, truth, truth, "certified")
    assert r.formula.value == formula and not r.formula.hypotheses_hold


@pytest.mark.parametrize("widths,keys,t", [((3, 5, 2), (2, 3), 3), ((4, 3), (2,), 2),
                                           ((2, 3, 5), (3, 2), 4), ((4, 2, 3), (5, 1), 2),
                                           ((2, 3, 5), (1, 1), 3)])
def test_exact_equals_numerical(widths, keys, t):
    """The exact rank over F_p equals the float64 numerical rank (independent paths)."""
    arch = Architecture(widths, keys, t)
    exact = exact_dim(arch, certify=False, seed=3)
    numerical = numerical_dim(arch, seed=3)
    assert numerical.status == "settled"
    assert exact.dimension == numerical.dimension


def test_plain_exact_is_a_lower_bound():
    """certify=False reports a lower bound with its Schwartz-Zippel probability, no upper bound."""
    arch = Architecture((3, 3, 3), (2, 2), 3)
    r = exact_dim(arch, certify=False, seed=0)
    assert (r.method, r.status, r.dimension, r.upper_bound) == ("exact", "lower-bound", 23, None)
    assert r.failure_probability == pytest.approx(arch.n_params * degree_bound(arch) / P)
    assert degree_bound(arch) == 12 + 9 and degree_bound(Architecture((3, 3), (2,), 3)) == 6


def test_too_few_samples_give_lower_bound():
    """With N fixed too small the rank is capped by N t d_l rows: status stopped, not certified."""
    r = exact_dim(Architecture((3, 3, 3), (2, 2), 3), samples=1, seed=0)
    assert r.status == "stopped" and r.dimension <= 9 < r.upper_bound == 23
    assert r.method == "exact" and r.failure_probability is None
    assert any("no probability is claimed" in n for n in r.notes)


def test_dispatch_and_softmax_rejected():
    """neuromanifold_dim routes auto to certified for lightning and rejects exact for softmax."""
    assert neuromanifold_dim(Architecture((3, 3), (2,), 3)).method == "certified"
    with pytest.raises(ValueError, match=r"`method` must be 'numerical', 'certified' or 'auto' for softmax"):
        neuromanifold_dim(Architecture((3, 3), (2,), 3, "softmax"), method="exact")


def test_cli_certified(capsys):
    """`dim --method certified` exits 0 and prints the certified dimension with its prime."""
    code = main(["dim", "--widths", "3,4,5", "--keys", "2,2", "--method", "certified", "--seed", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "29  [certified: 29 <= dim <= 29, p = 2147483629" in out


def test_cli_json_and_small_prime(capsys):
    """--json carries status, bounds and the chosen prime."""
    code = main(["dim", "--widths", "3,3,3", "--keys", "2,2", "--method", "exact", "--prime", "1000003",
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (data["dimension"], data["status"], data["prime"]) == (23, "lower-bound", 1000003)


@pytest.mark.parametrize("args,message", [
    (["--prime", "100"], "`prime` must be a prime >= 3; got 100."),
    (["--attention", "softmax", "--method", "exact"], "`method` must be 'numerical', 'certified' or 'auto'"),
    (["--method", "numerical", "--prime", "7"], "`prime` must be given only with the exact or certified method")])
def test_cli_bad_input_exit_2(capsys, args, message):
    """Bad --prime or softmax with --method exact: one line on stderr, exit code 2."""
    code = main(["dim", "--widths", "3,3,3", "--keys", "2,2"] + args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_staircase_rank_and_free_columns():
    """Block-wise rank of the tangents equals the plain exact rank; J keeps its rank on free columns."""
    from neuromanifold.dimension.exact import staircase_boundaries
    from neuromanifold.dimension.modular import staircase_rank_mod_p
    arch = Architecture((3, 5, 4, 2), (2, 3, 2), 3)
    gen = torch.Generator().manual_seed(7)
    W = random_weights_mod_p(arch, P, gen)
    T, _, _ = all_symmetry_tangents(arch, W, P)
    rank, pivots = staircase_rank_mod_p(T, staircase_boundaries(arch), P)
    assert rank == rank_mod_p(T.numpy(), P) == len(pivots) == rank_mod_p(T[:, pivots].numpy(), P)
    J = full_jacobian_mod_p(arch, W, 12, P, gen)
    free = [c for c in range(arch.n_params) if c not in set(pivots)]
    assert rank_mod_p(J[:, free].numpy(), P) == rank_mod_p(J.numpy(), P) > 20


@pytest.mark.parametrize("boundaries", [[0, 3, 5, 11, 13, 17], [0, 17], [0, 1, 2, 7, 17]])
def test_staircase_rank_of_dependent_block_rows(boundaries):
    """The staircase rank of block-sparse rows with dependent ones (mod 11) equals the plain rank,
    and its pivot columns carry the whole rank, for any column blocks."""
    from neuromanifold.dimension.modular import staircase_rank_mod_p
    gen = torch.Generator().manual_seed(13)
    base = random_residues((7, 17), 11, gen)
    base[:, :5] *= (torch.arange(7) < 3).unsqueeze(1)       # only three rows reach the first blocks
    mix = random_residues((19, 7), 11, gen)                 # 19 rows spanning at most 7
    rows = torch.cat([base, matmul_mod(mix, base, 11), torch.zeros((2, 17), dtype=torch.int64)])
    rank, pivots = staircase_rank_mod_p(rows, boundaries, 11)
    assert rank == len(pivots) == rank_mod_p(rows.numpy(), 11) == rank_mod_p(rows[:, pivots].numpy(), 11) == 7


@pytest.mark.parametrize("list_entries", [2 ** 22, 5])
def test_flint_matrix_reduces_and_reads_strided_arrays(monkeypatch, list_entries):
    """Negative entries, entries >= p and a non-contiguous view reach flint as their residues,
    through one list (small matrices) and entry by entry (large ones, here from 5 entries)."""
    from neuromanifold.dimension import fp
    monkeypatch.setattr(fp, "_LIST_ENTRIES", list_entries)
    monkeypatch.setattr(fp, "_ROWS_PER_LIST", 2)
    m = np.arange(-9, 26, dtype=np.int64).reshape(5, 7)[::2, 1::2]    # 3 x 4, strided
    assert fp.to_nmod_mat(m, 7).tolist() == [[int(x) % 7 for x in row] for row in m.tolist()]


@pytest.mark.parametrize("numpy_route", [True, False])
def test_a_tangent_outside_the_kernel_is_caught(monkeypatch, numpy_route):
    """A wrong symmetry tangent (here e_0, which moves phi) stops the run instead of certifying,
    on the numpy route and on the torch one."""
    from neuromanifold.dimension import exact as exact_module
    from neuromanifold.errors import ComputationError
    real = exact_module.all_symmetry_tangents
    if not numpy_route:
        monkeypatch.setattr(exact_module, "NUMPY_MAX_PARAMS", 0)

    def with_wrong_row(arch, weights, p):
        rows, labels, skipped = real(arch, weights, p)
        assert isinstance(rows, np.ndarray) == numpy_route
        wrong = rows[:1] * 0
        wrong[0, 0] = 1
        both = np.concatenate([rows, wrong]) if numpy_route else torch.cat([rows, wrong])
        return both, labels + ["wrong"], skipped

    monkeypatch.setattr(exact_module, "all_symmetry_tangents", with_wrong_row)
    with pytest.raises(ComputationError, match="not in the kernel of the exact Jacobian"):
        exact_dim(Architecture((5, 4, 3), (2, 3), 3), seed=2)


def test_one_token_certified_through_symmetric_part():
    """t = 1 sees only the symmetric part of A: the antisymmetric directions are hidden symmetries,
    so (3,3), a = 2, t = 1 is certified at 14 (< 16 of Eq. 7, whose t >= 2 hypothesis fails)."""
    arch = Architecture((3, 3), (2,), 1)
    r = exact_dim(arch, seed=0)
    assert (r.dimension, r.upper_bound, r.status, r.failure_probability) == (14, 14, "certified", 0.0)
    assert not r.formula.hypotheses_hold


@pytest.mark.slow
def test_certified_widths_32():
    """docs/math/method.md: widths 32^4, keys 8^3, t = 8 is certified at 2365 = Eq. 14."""
    r = exact_dim(Architecture((32, 32, 32, 32), (8, 8, 8), 8), seed=0)
    assert (r.dimension, r.status) == (2365, "certified")


def test_early_stop_case_grows_to_certified():
    """Issue 9 cause 1: with a_1 = 1 each sample adds about one direction; N keeps growing (no
    fixed number of rounds) until the rank meets the bound: 6,6,6,6 / 1,4,4 at t = 3 is 86."""
    r = exact_dim(Architecture((6, 6, 6, 6), (1, 4, 4), 3), seed=0)
    assert (r.status, r.dimension, r.upper_bound) == ("certified", 86, 86)
    assert len(r.rank_history) > 6


def test_saturated_rank_states_its_probability():
    """A batch of >= 2 fresh samples adding no rank stops as saturated: lower-bound + probability."""
    arch = Architecture((6, 6, 6), (1, 2), 3)
    r = exact_dim(arch, certify=False, seed=0)
    assert r.status == "lower-bound" and r.dimension == 63
    last, before = r.rank_history[-1], r.rank_history[-2]
    assert last[1] == before[1] and last[0] - before[0] >= 2
    assert 0 < r.failure_probability < 1e-5 and any("saturated" in n for n in r.notes)


def test_caps_stop_with_status_stopped():
    """A memory cap too small for the rows needed ends with status stopped and no probability."""
    r = exact_dim(Architecture((6, 6, 6, 6), (1, 4, 4), 3), seed=0, max_bytes=2 ** 19)
    assert r.status == "stopped" and r.dimension < 86 and r.failure_probability is None
    assert any("memory cap" in n for n in r.notes)


def test_hidden_block_rank_symmetric_count():
    """Issue 9 cause 2: the symmetrised hidden block has rank k m - k (k - 1) / 2, k = min(2a, m),
    at random F_p points (not min(r (2m - r), m (m + 1) / 2)); 6,6,6 / 1,2 is certified at 63."""
    from neuromanifold.dimension.modular import hidden_block_rank  # noqa: PLC0415
    assert hidden_block_rank(2, 6, True) == 18 and hidden_block_rank(3, 6, True) == 21
    assert hidden_block_rank(2, 6, False) == 20 and hidden_block_rank(1, 6, True) == 11
    r = exact_dim(Architecture((6, 6, 6), (1, 2), 3), seed=0)
    assert (r.status, r.dimension) == ("certified", 63) and not any("skipped" in n for n in r.notes)


@pytest.mark.parametrize("widths,keys,truth", [
    ((6, 5, 2), (2, 1), 41), ((7, 6, 2), (2, 1), 49), ((8, 6, 2), (2, 1), 57), ((6, 5, 1), (2, 1), 35)])
def test_readout_symmetry_closes_the_open_family(widths, keys, truth):
    """Issue 9 cause 3: V_{j-1} -> V_{j-1} + n y with [V_j; Q_j; K_j] n = 0 leaves phi unchanged
    exactly over F_p; its tangents bring the bound down to an independent full-Jacobian rank."""
    from neuromanifold.dimension.modular import readout_symmetry_tangents  # noqa: PLC0415
    from neuromanifold.dimension.fp import nullspace_mod_p  # noqa: PLC0415
    from neuromanifold.core.parameters import LayerWeights  # noqa: PLC0415
    arch = Architecture(widths, keys, 3)
    gen = torch.Generator().manual_seed(9)
    W = random_weights_mod_p(arch, P, gen)
    M = torch.cat([W.V[1], W.Q[1], W.K[1]])
    n = torch.from_numpy(nullspace_mod_p(M.numpy(), P))            # (d_1, k)
    y = random_residues((n.shape[1], arch.widths[0]), P, gen)
    moved = LayerWeights(W.Q, W.K, ((W.V[0] + matmul_mod(n, y, P)) % P,) + tuple(W.V[1:]))
    X = random_residues((4, arch.widths[0], 3), P, gen)
    assert torch.equal(forward_mod_p(W, X, P), forward_mod_p(moved, X, P))
    assert not torch.equal(moved.V[0], W.V[0])
    T, _, skipped = readout_symmetry_tangents(arch, W, P)
    assert not skipped and T.shape[0] == n.shape[1] * arch.widths[0]
    J = full_jacobian_mod_p(arch, W, 40, P, gen)                   # independent: every row, N = 40
    assert rank_mod_p(J.numpy(), P) == truth
    r = exact_dim(arch, seed=3)
    assert (r.status, r.dimension, r.upper_bound) == ("certified", truth, truth)


def test_one_short_of_the_bound_is_not_certified():
    """`certified` needs the exact rank to equal the upper bound: one cotangent per sample makes
    the rank climb by one, and N = upper - 1 samples stops one short: `stopped`, not certified.
    (A rule that certified within one of the bound passed every other test.)"""
    from neuromanifold.dimension.exact import exact_dim

    arch = Architecture((3, 4, 2), (2, 1), 2)
    short = exact_dim(arch, samples=16, rows=1)
    assert (short.lower_bound, short.upper_bound) == (16, 17)
    assert short.status == "stopped" and short.method == "exact" and not short.is_settled
    full = exact_dim(arch, samples=17, rows=1)
    assert (full.status, full.dimension) == ("certified", 17)
