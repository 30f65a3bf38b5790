"""Degrees with structure first (degrees/structure.py): V = L(W), deg V = deg W / e_L.

Independent paths: the closed forms of the factors against the slice engine on their own
parametrisations; the structured degree against the direct count (`degree`: slices of the network
map itself) on every size where both finish in seconds; mutants (a wrong divisor, a base locus,
a dimension that does not match) must not give a degree.
"""

from __future__ import annotations

import random

import pytest

from neuromanifold import Architecture, InputError, degree, image_degree
from neuromanifold.cli import main
from neuromanifold.degrees.engine import AMBIGUOUS, EXACT, PRIMES
from neuromanifold.degrees.structure import (Factor, base_locus_check, determinantal_degree,
                                             product_degree, route_for, segre_degree,
                                             structured_degree)


def _segre_veronese(ns: list[int], ks: list[int]):
    """Map P^{n_1} x ... with O(k_1, ..., k_s): products of one degree-k_i monomial per factor."""
    import itertools  # noqa: PLC0415

    def F(w):
        out = [1]
        at = 0
        for n, k in zip(ns, ks):
            x = w[at:at + n + 1]
            at += n + 1
            monos = []
            for c in itertools.combinations_with_replacement(range(n + 1), k):
                m = 1
                for i in c:
                    m = m * x[i]
                monos.append(m)
            out = [a * b for a in out for b in monos]
        return out
    return F, sum(n + 1 for n in ns)


@pytest.mark.parametrize("ns, ks", [
    ([1, 2], [1, 1]),        # Segre P1 x P2: 3
    ([2, 2], [1, 1]),        # Segre P2 x P2: 6
    ([1, 1, 1], [1, 1, 1]),  # Segre P1 x P1 x P1: 6
    ([1], [3]),              # twisted cubic: 3
    ([2], [2]),              # Veronese surface: 4
    ([1, 1], [1, 3]),        # P1 x P1 by O(1, 3): 2 * 3 = 6
    ([1, 2], [3, 1]),        # P1 x P2 by O(3, 1): 3 * 3 = 9
])
def test_segre_veronese_closed_form_matches_the_slice_engine(ns, ks):
    """product_degree (the multidegree formula) against the slices of the map itself."""
    F, n = _segre_veronese(ns, ks)
    expected = product_degree([Factor("P", m, k) for m, k in zip(ns, ks)], [1] * len(ns))
    result = image_degree(F, n, sum(ns) + 1, seed=5, repeats=1)
    assert result.status == EXACT and result.degree == expected


def test_closed_forms():
    """Determinantal and Segre degrees (Harris 19.10 and the multinomial)."""
    assert [determinantal_degree(3, 3, 1), determinantal_degree(3, 3, 2),
            determinantal_degree(4, 4, 2), determinantal_degree(2, 3, 1),
            determinantal_degree(4, 4, 1), determinantal_degree(3, 3, 3)] == [6, 3, 20, 3, 20, 1]
    assert segre_degree([5, 7], [1, 3]) == 2376 and segre_degree([1, 1, 1], [1, 1, 1]) == 6


@pytest.mark.parametrize("widths, keys, tokens, expected", [
    ((2, 1), (1,), 2, 3),
    ((2, 1), (2,), 3, 4),         # Figure 1
    ((2, 2), (1,), 2, 20),
    ((2, 2), (2,), 2, 20),
    ((3, 1), (1,), 2, 45),
    ((3, 1), (2,), 3, 108),
    ((2, 1, 1), (1, 1), 2, 81),   # the Veronese route (phi = c z |z|^2)
    ((2, 1, 1), (2, 1), 2, 324),  # issue 37's target: 3^4 * 4 (Figure 1's quartic, cubed)
    ((1, 2, 1), (1, 1), 2, 1),    # the virtual-weight route, d_0 = 1
])
def test_structured_degree_equals_the_direct_count(widths, keys, tokens, expected):
    """Both routes over both primes, with distinct seeds; every hypothesis check printed."""
    arch = Architecture(widths, keys, tokens)
    s = structured_degree(arch, seed=2)
    d = degree(arch, seed=7, repeats=1)
    assert s.status == EXACT and d.status == EXACT
    assert s.degree == d.degree == expected
    assert [c.status for c in s.base_locus] == ["empty", "empty"]
    assert len(s.runs) == 4 and {r.prime for r in s.runs} == set(PRIMES)
    assert s.product_degree == expected * s.runs[0].e_L
    text = str(s)
    assert "no base locus" in text and "checked, no zero" in text and "e_L" in text


def test_targets_of_issue_37_by_structure():
    """The single-layer targets in seconds (the direct count stops within 10 minutes on them)."""
    for widths, keys, expected in [((3, 2), (2,), 2376), ((3, 3), (1,), 2970),
                                   ((3, 3), (2,), 19305), ((3, 2), (1,), 756)]:
        s = structured_degree(Architecture(widths, keys, 2), seed=1)
        assert (s.status, s.degree) == (EXACT, expected)
        assert {r.e_L for r in s.runs} == {1}


def test_wrong_divisor_mutant_is_caught_by_the_cross_check():
    """A route that forgets to divide by the W fiber (e_L = network fiber) or by e_L at all gives a
    wrong number; with the direct count as cross-check the result is ambiguous, never exact."""
    arch = Architecture((2, 1, 1), (1, 1), 2)
    wrong = structured_degree(arch, seed=2, _divisor=lambda g, s: 1)
    assert wrong.degree == 162 != 81
    checked = structured_degree(arch, seed=2, cross_check=True, _divisor=lambda g, s: 1)
    assert checked.status == AMBIGUOUS and checked.degree is None
    assert "the direct count gave 81" in " ".join(checked.notes)
    right = structured_degree(arch, seed=2, cross_check=True)
    assert (right.status, right.degree, right.cross_check.degree) == (EXACT, 81, 81)


def test_a_base_locus_is_found_and_blocks_the_route():
    """t = 1: a skew A gives v X X^T A X = 0 (x^T A x = 0), so the check must find zeros; two
    layers with full-rank keys have a base locus on W: ambiguous, no degree."""
    p = PRIMES[0]
    assert base_locus_check(2, 1, p, random.Random(0), 30).status != "empty"
    assert base_locus_check(2, 2, p, random.Random(0), 30).status == "empty"
    r = structured_degree(Architecture((2, 2, 1), (2, 2), 2), seed=1)
    assert r.status == AMBIGUOUS and r.degree is None
    assert "base-locus system" in " ".join(r.notes)


def test_dimension_mismatch_blocks_the_route():
    """Widths 2,2,1 keys 1,2: dim V = 6 < dim W = 7, L is not finite on W: no degree."""
    r = structured_degree(Architecture((2, 2, 1), (1, 2), 2), seed=1)
    assert r.status == AMBIGUOUS and r.degree is None
    assert "dim V = 6 differs from dim W = 7" in " ".join(r.notes)


def test_unsupported_networks_are_refused():
    assert route_for(Architecture((2, 2, 2, 1), (1, 1, 1), 2)) is None
    assert route_for(Architecture((2, 1), (1,), 1)) is None
    assert route_for(Architecture((2, 2), (1,), 2, residual=True)) is None
    with pytest.raises(InputError, match="route"):
        structured_degree(Architecture((2, 1), (1,), 1))


def test_cli_route_structure(capsys):
    assert main(["degree", "--widths", "3,2", "--keys", "2", "--tokens", "2",
                 "--route", "structure"]) in (0, None)
    out = capsys.readouterr().out
    assert "degree 2376  [exact (mod p, randomised)]" in out and "no base locus" in out
    code = main(["degree", "--widths", "2,2,2,1", "--keys", "1", "--tokens", "2",
                 "--route", "structure"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and "`route` must be" in out.err


def test_tiny_timeout_is_stopped_never_a_degree():
    """Past --timeout the structured route is `stopped` with no degree (and exit 1 from the CLI)."""
    r = structured_degree(Architecture((3, 2), (2,), 2), timeout=1e-3)
    assert r.status == "stopped" and r.degree is None
    assert main(["degree", "--widths", "3,2", "--keys", "2", "--tokens", "2", "--route",
                 "structure", "--timeout", "0.001"]) == 1
