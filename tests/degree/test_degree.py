"""The degree engine (gauge fixing, random slices, msolve over F_p) and implicit equations."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from neuromanifold import Architecture, InputError, degree, image_degree, implicit_equations
from neuromanifold.cli import main
from neuromanifold.degrees.engine import EXACT, PRIMES, STOPPED
from neuromanifold.degrees.network import evaluation_inputs, span_dimension
from neuromanifold.degrees.msolve import count_solutions, parse_output
from neuromanifold.degrees.polymap import forward_objects, network_map, object_array
from neuromanifold.dimension.fp_dual import forward_dual_mod_p

P = 1_073_741_789


def _product_map(m: int, n: int, r: int):
    """(A, B) -> A B with A in K^{m x r}, B in K^{r x n}: the m x n matrices of rank <= r."""
    def F(w):
        A, B = w[: m * r], w[m * r:]
        return [sum(A[i * r + k] * B[k * n + j] for k in range(r)) for i in range(m) for j in range(n)]
    return F, r * (m + n)


@pytest.mark.parametrize("m, n, r, expected", [(3, 3, 1, 6), (3, 3, 2, 3), (4, 4, 2, 20), (2, 3, 1, 3)])
def test_determinantal_degrees(m, n, r, expected):
    """Closed forms: deg of m x n matrices of rank <= r (Segre P2xP2: 6, the 3x3 det: 3, 4x4 rank 2: 20,
    Segre P1xP2: 3), with every run over two primes agreeing."""
    F, n_params = _product_map(m, n, r)
    result = image_degree(F, n_params, seed=3)
    assert result.degree == expected
    assert result.status == EXACT
    assert result.dimension == r * (m + n - r)
    assert result.agree and len(result.runs) == 4 and len({run.prime for run in result.runs}) == 2
    for run in result.runs:  # each count is degree x generic fiber size, from simple zeros
        assert run.slice_count.radical and run.fiber_count.radical
        assert run.slice_count.n_distinct == expected * run.fiber_count.n_distinct


def test_wrong_dimension_is_ambiguous_not_a_degree():
    """A dimension above the true one (6 for 3 x 3 rank 1, whose variety has dimension 5) gives no degree."""
    F, n_params = _product_map(3, 3, 1)
    result = image_degree(F, n_params, 6, repeats=1)
    assert result.degree is None and result.status == "ambiguous"
    assert "Jacobian rank 5" in result.runs[0].note


def test_figure1_quartic_degree_and_equation_agree():
    """Figure 1 (d = 2, d' = 1, a = 2, t = 3): a hypersurface of degree 4 in its 6-dim span, found both
    by slicing (degree 4) and by interpolation (one quartic, verified over Q)."""
    arch = Architecture((2, 1), (2,), 3)
    result = degree(arch, seed=1)
    assert (result.degree, result.status, result.dimension, result.span_dim) == (4, EXACT, 5, 6)
    eqs = implicit_equations(arch, seed=2)
    assert (eqs.span_dim, eqs.lowest_degree, len(eqs.equations), eqs.verified) == (6, 4, 1, True)
    assert eqs.hilbert == {1: 6, 2: 21, 3: 56, 4: 125}
    assert all(sum(mono) == 4 for mono in eqs.equations[0])


@pytest.mark.parametrize("widths, keys, expected, fiber", [
    ((2, 1), (1,), 3, 2),     # Segre P1xP1xP1 (degree 6) seen through the (k, r) swap: 2 to 1
    ((2, 2), (1,), 20, 1),    # Segre P3xP1xP1: 5!/(3! 1! 1!) = 20
    ((2, 2), (2,), 20, 1),    # Segre P3xP3: binomial(6, 3) = 20
    ((3, 1), (2,), 108, 1),   # P2 x (3 x 3 det cubic): binomial(9, 2) * 3 = 108
])
def test_single_layer_degrees_match_segre_closed_forms(widths, keys, expected, fiber):
    """One lightning layer factors through V (x) A (docs/degree.md): degree = deg(Segre x determinantal)
    / the generic degree of the projection onto the span, here independent of t."""
    result = degree(Architecture(widths, keys, 2), seed=4, repeats=1)
    assert result.degree == expected and result.status == EXACT
    assert {run.fiber_count.n_distinct for run in result.runs} == {fiber}


def test_polynomial_map_equals_mod_p_forward():
    """The one block forward over nmod_mpoly (W symbolic), evaluated at random F_p weights, and
    over python ints, equals the mod-p forward of dimension/fp_dual.py on the same weights
    and inputs (heads, factored values, residual + square MLP, two layers)."""
    import flint

    rng = random.Random(7)
    archs = [(Architecture((3, 2), (2,), 4), True), (Architecture((2, 2, 1), (1, 1), 2), True),
             (Architecture((3, 3), (2,), 2, heads=(2,), values=(1,)), True),
             (Architecture((2, 2), (1,), 3, residual=True, mlp=(3,)), False),
             (Architecture((2, 2, 2), (1, 1), 2, heads=(1, 2), mlp=(1, 2)), False)]
    for arch, symbolic in archs:
        n_inputs = 2
        w = [rng.randrange(P) for _ in range(arch.n_params)]
        x = [rng.randrange(P) for _ in range(n_inputs * arch.widths[0] * arch.tokens)]
        inputs = object_array((n_inputs, arch.widths[0], arch.tokens), x)
        X = torch.tensor(x, dtype=torch.int64).reshape(n_inputs, arch.widths[0], arch.tokens)
        expected = forward_dual_mod_p(arch, _blocks(arch, w), X, P).x.reshape(-1).tolist()
        assert [int(v) % P for v in forward_objects(arch, w, inputs)] == expected
        if symbolic:  # small enough to expand in all parameters
            ctx = flint.nmod_mpoly_ctx.get(("w", arch.n_params), modulus=P)
            polys = network_map(arch, inputs)(list(ctx.gens()))
            assert [int(f(*w)) for f in polys] == expected


def _blocks(arch, w):
    from neuromanifold.core.blocks import block_layout

    return {name: torch.tensor(w[offset: offset + shape[0] * shape[1]], dtype=torch.int64).reshape(shape)
            for name, shape, offset in block_layout(arch)}


def test_block_forward_float_path_unchanged_by_object_support():
    """block_forward on torch tensors still autodiffs; over object arrays of ints it gives the
    same numbers as over int64 tensors (exact, small integers)."""
    from neuromanifold.core.blocks import block_forward

    arch = Architecture((3, 3), (2,), 3, heads=(2,), mlp=(2,), residual=True)
    rng = np.random.default_rng(5)
    w = rng.integers(-3, 4, arch.n_params).tolist()
    x = rng.integers(-3, 4, (2, 3, 3))
    as_tensor = block_forward(arch, _blocks(arch, w), torch.tensor(x, dtype=torch.int64))
    as_objects = forward_objects(arch, w, object_array(x.shape, x.reshape(-1).tolist()))
    assert [int(v) for v in as_objects] == as_tensor.reshape(-1).tolist()


@pytest.mark.parametrize("kwargs, name", [
    ({"attention": "softmax"}, "attention"),
    ({"mlp": (2,), "activation": "relu"}, "activation"),
    ({"norm": "rmsnorm"}, "norm"),
])
def test_non_polynomial_networks_are_refused(kwargs, name):
    """Softmax, relu and norms: not algebraic, no degree (ValueError naming the option)."""
    arch = Architecture((2, 2), (1,), 2, **kwargs)
    with pytest.raises(InputError, match=rf"`{name}` must be polynomial .* not algebraic and has no degree"):
        degree(arch)
    with pytest.raises(InputError, match=rf"`{name}` must be polynomial"):
        implicit_equations(arch)


def test_cli_refuses_softmax_with_one_line(capsys):
    """`degree --attention softmax`: exit 2, one line on stderr, nothing on stdout."""
    code = main(["degree", "--widths", "2,1", "--keys", "2", "--tokens", "3", "--attention", "softmax"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and "not algebraic" in out.err


def test_cli_degree_prints_figure1(capsys):
    """`degree --widths 2,1 --keys 2 --tokens 3` prints degree 4 with its label; exit 0."""
    code = main(["degree", "--widths", "2,1", "--keys", "2", "--tokens", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "degree 4  [exact (mod p, randomised)]" in out and "runs agree: yes" in out


def test_tiny_timeout_is_stopped_never_guessed():
    """A solve past --timeout is `stopped` with no degree: no time left before the first solve,
    and msolve killed mid-run (d = 3, d' = 2, a = 1: a slice with 756 zeros, about a minute)."""
    F, n_params = _product_map(4, 4, 2)
    early = image_degree(F, n_params, timeout=1e-4)
    assert early.status == STOPPED and early.degree is None
    # the slice solve itself past the limit (the earlier phases, also under the limit in
    # `degree`, are run here without one: tests/degree/test_degree_limits.py stops those)
    arch = Architecture((3, 2), (1,), 2)
    spans = [(p,) + span_dimension(arch, p, 0) for p in PRIMES]
    inputs, _ = evaluation_inputs(arch, spans, 0)
    result = image_degree(network_map(arch, inputs), arch.n_params, 10, timeout=2, repeats=1)
    assert result.status == STOPPED and result.degree is None
    assert result.runs[0].slice_count.status == "stopped"
    assert "did not finish within" in result.runs[0].slice_count.reason


def test_msolve_counts_multiplicity_and_dimension():
    """x^2 = 0, y = 1: one zero of multiplicity 2 (not radical); x y = 1: positive-dimensional;
    x = 0, x = 1: empty; x^2 = 3 y, y^2 = x - 1: four simple zeros."""
    import flint

    ctx = flint.nmod_mpoly_ctx.get(("x", "y"), modulus=P)
    x, y = ctx.gens()
    double = count_solutions([x * x, y - 1], ctx.names(), P, 30)
    assert (double.n_distinct, double.n_with_multiplicity, double.radical) == (1, 2, False)
    assert count_solutions([x * y - 1], ctx.names(), P, 30).status == "positive-dimensional"
    assert count_solutions([x, x - 1], ctx.names(), P, 30).status == "empty"
    four = count_solutions([x * x - 3 * y, y * y - x + 1], ctx.names(), P, 30)
    assert (four.n_distinct, four.radical) == (4, True)


def test_msolve_prime_and_output_checks():
    """Primes at or above 2^30 are refused (msolve's last stage loops there); junk output raises."""
    import flint

    ctx = flint.nmod_mpoly_ctx.get(("x",), modulus=2_147_483_629)
    with pytest.raises(ValueError, match=r"`p` must be an odd prime below 2\^30"):
        count_solutions([ctx.gens()[0]], ctx.names(), 2_147_483_629, 10)
    with pytest.raises(Exception, match="could not be read"):
        parse_output("not msolve")


def test_equations_rank_one_keys_are_quadrics():
    """a = 1 < d = 2, d' = 1: A = q k^T has rank 1, so the lowest equations are 2 x 2 minors: three
    quadrics in the 6-dim span cutting a 4-dim variety of degree 3 (also found by slicing)."""
    arch = Architecture((2, 1), (1,), 2)
    eqs = implicit_equations(arch, seed=1)
    assert (eqs.span_dim, eqs.lowest_degree, len(eqs.equations), eqs.verified) == (6, 2, 3, True)
    assert degree(arch, repeats=1).degree == 3


def test_bad_arguments_follow_the_template():
    """timeout, repeats and max_degree are validated with the one message template."""
    arch = Architecture((2, 1), (2,), 3)
    with pytest.raises(InputError, match=r"`timeout` must be a positive finite number of seconds; got 0"):
        degree(arch, timeout=0)
    with pytest.raises(InputError, match=r"`repeats` must be"):
        image_degree(lambda w: w, 2, repeats=0)
    with pytest.raises(InputError, match=r"`max_degree` must be"):
        implicit_equations(arch, max_degree=0)
