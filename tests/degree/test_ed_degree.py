"""ED degrees (degree/ed.py): Eckart-Young, Segre products, a weighted metric, the rank-drop saturation."""

from __future__ import annotations

import math

import pytest

from neuromanifold import Architecture, InputError
from neuromanifold.degrees import ed
from neuromanifold.degrees.ed import ed_degree, image_ed_degree
from neuromanifold.degrees.engine import EXACT


def _product_map(m: int, n: int, r: int):
    """(A, B) -> A B, A in K^{m x r}, B in K^{r x n}: m x n matrices of rank <= r."""
    def F(w):
        A, B = w[: m * r], w[m * r:]
        return [sum(A[i * r + k] * B[k * n + j] for k in range(r)) for i in range(m) for j in range(n)]
    return F, r * (m + n)


def _deep_linear(widths):
    """x -> W_l ... W_1 x (a deep linear network), its end-to-end matrix's entries."""
    def F(w):
        off, P = 0, None
        for i in range(1, len(widths)):
            a, b = widths[i], widths[i - 1]
            W = [[w[off + x * b + y] for y in range(b)] for x in range(a)]
            off += a * b
            P = W if P is None else [[sum(W[i][k] * P[k][j] for k in range(len(P)))
                                      for j in range(len(P[0]))] for i in range(a)]
        return [v for row in P for v in row]
    return F, sum(widths[i] * widths[i - 1] for i in range(1, len(widths)))


@pytest.mark.parametrize("m, n, r", [(3, 3, 1), (4, 4, 2), (2, 3, 1), (3, 3, 2), (3, 4, 1)])
def test_eckart_young(m, n, r):
    """m x n matrices of rank <= r: ED degree C(min(m, n), r) in the standard metric (Eckart-Young),
    four agreeing runs over two primes."""
    F, k = _product_map(m, n, r)
    result = image_ed_degree(F, k, seed=2)
    assert (result.ed_degree, result.status) == (math.comb(min(m, n), r), EXACT)
    assert len(result.runs) == 4 and len({run.prime for run in result.runs}) == 2
    assert "standard inner product" in result.metric


@pytest.mark.parametrize("widths, expected", [((3, 1, 3), 3), ((3, 2, 2, 3), 3), ((3, 2, 1, 3), 3)])
def test_deep_linear_networks_keep_eckart_young(widths, expected):
    """A deep linear network's image is the rank <= min width matrices: ED degree C(3, min width)."""
    F, k = _deep_linear(widths)
    result = image_ed_degree(F, k, seed=5, repeats=1)
    assert (result.ed_degree, result.status) == (expected, EXACT)


def test_weighted_metric_changes_the_count():
    """2 x 2 rank-1 matrices (a smooth quadric surface): 2 in the standard metric, 6 under a generic
    diagonal one; P1 x P2 and P2 x P2: 10 and 39 (their generic ED degrees)."""
    F, k = _product_map(2, 2, 1)
    assert image_ed_degree(F, k).ed_degree == 2
    generic = image_ed_degree(F, k, weights="generic")
    assert (generic.ed_degree, generic.status) == (6, EXACT) and "generic diagonal" in generic.metric
    given = image_ed_degree(F, k, weights=[3, 5, 7, 11])
    assert given.ed_degree == 6 and "lambda = (3,5,7,11)" in given.metric
    assert image_ed_degree(*_product_map(2, 3, 1), weights="generic", repeats=1).ed_degree == 10
    assert image_ed_degree(*_product_map(3, 3, 1), weights="generic", repeats=1).ed_degree == 39


def test_evaluation_weights_from_one_side_keep_eckart_young():
    """A B X for a fixed random 3 x 5 X (N = 5 >= 3 inputs): the metric is ||(AB - U) X||^2,
    one-sided, and the ED degree is still C(3, 1) = 3."""
    X = [[2, -1, 3, 0, 1], [1, 4, -2, 5, 3], [-3, 2, 1, 1, -4]]
    G, k = _product_map(3, 3, 1)

    def F(w):
        P = G(w)
        return [sum(P[i * 3 + j] * X[j][c] for j in range(3)) for i in range(3) for c in range(5)]
    assert image_ed_degree(F, k, repeats=1).ed_degree == 3


def test_without_the_saturation_the_count_is_not_the_ed_degree(monkeypatch):
    """Mutant: (x, y) -> (x, x y) has a dense image (ED degree 1), but its Jacobian drops rank on
    x = 0, where the critical equations have the spurious zero (0, -u_1/u_2); with m(w) = 1 (no
    saturation) the count is 2."""
    def F(w):
        return [w[0], w[0] * w[1]]
    assert image_ed_degree(F, 2, repeats=1).ed_degree == 1
    monkeypatch.setattr(ed, "_square_free", lambda poly: poly * 0 + 1)
    assert image_ed_degree(F, 2, repeats=1).ed_degree == 2


def test_single_lightning_layer_ed_degree():
    """d = 2, d' = 1, a = 2 at t = 2 (Figure 1's quartic as a function space): 14, fiber 1; the
    output names the metric and N."""
    result = ed_degree(Architecture((2, 1), (2,), 2), seed=0)
    assert (result.ed_degree, result.status, result.n_inputs) == (14, EXACT, 3)
    assert "standard inner product" in str(result) and "N = 3" in str(result)


def test_ed_degree_refuses_softmax_and_bad_weights():
    """A softmax network has no ED degree (not algebraic); weights must be M nonzero integers."""
    with pytest.raises(InputError, match=r"`attention` must be polynomial"):
        ed_degree(Architecture((2, 2), (1,), 2, attention="softmax"))
    F, k = _product_map(2, 2, 1)
    with pytest.raises(InputError, match=r"`weights` must be 'standard', 'generic' or 4 nonzero"):
        image_ed_degree(F, k, weights=[1, 0, 1, 1])


def test_cli_ed_degree_prints_metric_and_refuses_softmax(capsys):
    """`ed-degree --widths 2,1 --keys 2 --tokens 2`: 14 with its label and metric, exit 0;
    `--attention softmax`: one line on stderr, exit 2, nothing on stdout."""
    from neuromanifold.cli import main

    code = main(["ed-degree", "--widths", "2,1", "--keys", "2", "--tokens", "2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "ED degree 14  [exact (mod p, randomised)]" in out
    assert "metric: standard inner product" in out
    code = main(["ed-degree", "--widths", "2,1", "--keys", "2", "--attention", "softmax"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1
    assert "not algebraic" in captured.err


def test_minor_combination_is_bounded_by_the_memory_budget():
    """The Bareiss products are bounded before each starts (terms s s' of a product, and the
    dense count): under a 1 GB budget the 8 x 8 minor combination of 2,2,2 stops, naming the
    budget, instead of allocating; no ED degree is claimed."""
    from neuromanifold.degrees.ed import ed_degree

    result = ed_degree(Architecture((2, 2, 2), (1, 1), 2), timeout=120, repeats=1,
                       max_memory="1G")
    assert result.ed_degree is None and result.status == "stopped"
    assert "memory budget" in result.runs[0].critical_count.reason


def test_image_ed_degree_checks_primes_before_flint():
    """A composite modulus aborts the interpreter inside flint: refused first, as image_degree."""
    from neuromanifold.degrees.ed import image_ed_degree
    from neuromanifold.errors import InputError

    with pytest.raises(InputError, match="primes"):
        image_ed_degree(lambda w: [w[0] * w[1], w[0]], 2, primes=(4,))
    with pytest.raises(InputError, match="dimension"):
        image_ed_degree(lambda w: [w[0] * w[1], w[0]], 2, dimension=5)
