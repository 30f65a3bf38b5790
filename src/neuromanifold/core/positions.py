"""Rotary positions with rational rotations (docs/decoder_features.md#positions).

Math: with `positions='rope'`, token i (0-based) of a head's queries and keys has its first R
coordinate pairs (0, 1), (2, 3), ..., (2R - 2, 2R - 1) rotated: pair f (1-based) by the matrix
[[c_f, -s_f], [s_f, c_f]]^i, where (c_f, s_f) = (x/z, y/z) for the f-th primitive Pythagorean
triple (x, y, z), x < y, in the order of increasing hypotenuse z (ties by increasing x):
(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), ... Every entry of every
rotation is rational, so the float, F_p and ball arithmetics compute the same map exactly
(mod p: the denominators are powers of z < p). The angles are distinct, in (pi/4, pi/2), never
0 or pi and never each other's negatives, so no two pairs share an eigenvalue e^{+-i theta}.
The score of tokens j (query) and i (key) is q_j^T R^{i - j} k_i (R^i = rotations of token i).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache


@lru_cache(maxsize=None)
def pythagorean_triples(count: int) -> tuple[tuple[int, int, int], ...]:
    """The first `count` primitive triples (x, y, z), x < y, x^2 + y^2 = z^2, by increasing z
    (then x): Euclid's (m^2 - n^2, 2 m n, m^2 + n^2) for m > n > 0 coprime, m - n odd."""
    found: list[tuple[int, int, int]] = []
    bound = 5
    while True:
        found = []
        m = 2
        while m * m + 1 <= bound:
            for n in range(1, m):
                if (m - n) % 2 == 1 and math.gcd(m, n) == 1 and m * m + n * n <= bound:
                    x, y = sorted((m * m - n * n, 2 * m * n))
                    found.append((x, y, m * m + n * n))
            m += 1
        if len(found) >= count:
            return tuple(sorted(found, key=lambda t: (t[2], t[0]))[:count])
        bound *= 2


def pair_rotation(f: int) -> tuple[Fraction, Fraction]:
    """(cos, sin) of pair f (1-based): (x/z, y/z) of the f-th Pythagorean triple."""
    x, y, z = pythagorean_triples(f)[f - 1]
    return Fraction(x, z), Fraction(y, z)


def _power(c, s, i: int):
    """(cos, sin) of i times the angle, by repeated rotation (exact for Fractions)."""
    cc, ss = 1, 0
    for _ in range(i):
        cc, ss = cc * c - ss * s, cc * s + ss * c
    return cc, ss


@lru_cache(maxsize=None)
def rotary_fractions(a: int, pairs: int, tokens: int) -> tuple[tuple[tuple[Fraction, ...], ...], ...]:
    """The t rotation matrices R^0, ..., R^{t-1} (a x a, exact Fractions, row-major tuples):
    pair f of token i rotated by i times the f-th Pythagorean angle, coordinates beyond the
    first `pairs` pairs fixed."""
    return tuple(_rotation_matrix(a, [_power(*pair_rotation(f), i) for f in range(1, pairs + 1)])
                 for i in range(tokens))


def rotary_floats(a: int, pairs: int, tokens: int, angles=None) -> list[list[list[float]]]:
    """The same matrices in float64: the rationals rounded once (default), or, with `angles`
    (pair f -> angle in radians), rotations by those angles instead (the docs compare the
    dimension under the usual base-10000 frequencies, `base_angles`)."""
    if angles is None:
        return [[[float(v) for v in row] for row in M] for M in rotary_fractions(a, pairs, tokens)]
    return [[[float(v) for v in row] for row in _rotation_matrix(
        a, [(math.cos(i * angles(f)), math.sin(i * angles(f))) for f in range(1, pairs + 1)])]
        for i in range(tokens)]


def base_angles(a: int, base: float = 10000.0):
    """The usual rotary frequencies theta_f = base^(-2 (f - 1) / a) (pair f, 1-based)."""
    return lambda f: base ** (-2.0 * (f - 1) / a)


def _rotation_matrix(a: int, rotations) -> tuple:
    """Block-diagonal a x a matrix: [[c, -s], [s, c]] on each leading pair, 1 elsewhere."""
    rows = [[1 if r == col else 0 for col in range(a)] for r in range(a)]
    for f, (c, s) in enumerate(rotations):
        p = 2 * f
        rows[p][p], rows[p][p + 1], rows[p + 1][p], rows[p + 1][p + 1] = c, -s, s, c
    return tuple(tuple(row) for row in rows)
