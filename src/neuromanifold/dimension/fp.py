"""Exact linear algebra over prime fields F_p and over Q. The only module that imports python-flint.

No floating point is used here: matrices are integer numpy arrays (entries reduced mod p) or
Python ints/fractions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction

import flint
import numpy as np

from ..errors import InputTypeError
from ..core.checks import bad_value

# A prime below 2^31 (so that a product of two residues fits in int64 exactly).
DEFAULT_PRIME = 2_147_483_629
# Entries from which a rank is taken with several threads (flint multiplies blocks in parallel).
# Measured on a 4000 x 4000 rank, 2 threads against 1 on 2 cores: 1.5x faster once, 0.8-0.9x
# in three runs while other processes kept both cores busy.
_THREADED_ENTRIES = 2 ** 22
# Entries above which a matrix goes into flint entry by entry instead of through one list.
_LIST_ENTRIES = 2 ** 22
_ROWS_PER_LIST = 64


def check_prime(name: str, p: object) -> int:
    """Return `p` as an int if it is a prime >= 3; raise the template ValueError otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise InputTypeError(f"`{name}` must be a prime integer; got {p!r}. Pass e.g. {DEFAULT_PRIME}.")
    p = int(p)
    if p < 3 or not flint.fmpz(p).is_prime():
        raise bad_value(name, "a prime >= 3", p, f"Pass a prime such as {DEFAULT_PRIME}.")
    if p >= 2 ** 62:
        raise bad_value(name, "a prime below 2^62 (word-size modular arithmetic)", p,
                        f"Pass a prime such as {DEFAULT_PRIME}.")
    return p


def to_nmod_mat(matrix: np.ndarray, p: int) -> flint.nmod_mat:
    """A 2-D integer array as a flint matrix over F_p (entries reduced mod p)."""
    m = np.ascontiguousarray(matrix, dtype=np.int64)
    if m.size and (int(m.min()) < 0 or int(m.max()) >= p):
        m = np.mod(m, p)
    rows, cols = m.shape
    if m.size < _LIST_ENTRIES:
        # Through fmpz_mat: about 35% faster than nmod_mat(rows, cols, list, p) (measured, 6M entries).
        return flint.nmod_mat(flint.fmpz_mat(rows, cols, m.ravel().tolist()), p)
    # python-flint turns any sequence it is given into a list of Python ints first (48 bytes an
    # entry, measured even for a memoryview); set entry by entry instead, a few rows' list at a
    # time: about 200 ns an entry, against 150 ns through the list (measured, 9M entries).
    out = flint.nmod_mat(rows, cols, p)
    for start in range(0, rows, _ROWS_PER_LIST):
        for i, row in enumerate(m[start:start + _ROWS_PER_LIST].tolist(), start):
            for j in range(cols):
                out[i, j] = row[j]
    return out


def _flint_threads() -> int:
    """Threads flint may use for a large elimination: as many as torch is allowed (a sweep's
    workers are held to one each), at least one."""
    import torch  # noqa: PLC0415

    return max(1, torch.get_num_threads())


def rank_mod_p(matrix: np.ndarray, p: int, say: Callable[[str], None] | None = None) -> int:
    """Exact rank of an integer matrix over F_p; `say` hears when flint holds the matrix."""
    if 0 in np.shape(matrix):
        return 0
    start = time.perf_counter()
    m = to_nmod_mat(matrix, p)
    if say is not None:
        say(f"{m.nrows()} x {m.ncols()} matrix in flint ({time.perf_counter() - start:.1f} s); "
            f"exact rank over F_p ...")
    if m.nrows() * m.ncols() < _THREADED_ENTRIES:
        return int(m.rank())
    before, flint.ctx.threads = flint.ctx.threads, _flint_threads()
    try:
        return int(m.rank())
    finally:
        flint.ctx.threads = before


def nullspace_mod_p(matrix: np.ndarray, p: int) -> np.ndarray:
    """A basis of {x : M x = 0 over F_p}, as the columns of an int64 array (cols x k)."""
    rows, cols = np.shape(matrix)
    if rows == 0:
        return np.eye(cols, dtype=np.int64)
    basis, k = to_nmod_mat(matrix, p).nullspace()
    # Element access beats converting all cols x cols entries when the kernel is small.
    return np.array([[int(basis[i, j]) for j in range(k)] for i in range(cols)],
                    dtype=np.int64).reshape(cols, k)


def left_kernel_mod_p(matrix: np.ndarray, p: int) -> np.ndarray:
    """A basis of {y : y^T M = 0 over F_p}, as the rows of an int64 array (k x rows)."""
    return nullspace_mod_p(np.ascontiguousarray(np.asarray(matrix).T), p).T


def pivot_columns_mod_p(matrix: np.ndarray, p: int) -> list[int]:
    """Pivot columns of the reduced row echelon form over F_p (as many as the exact rank)."""
    if 0 in np.shape(matrix):
        return []
    R, rank = to_nmod_mat(matrix, p).rref()
    pivots, col = [], 0
    for i in range(rank):
        while int(R[i, col]) == 0:
            col += 1
        pivots.append(col)
        col += 1
    return pivots


def nullspace_rational(rows: list[list[int | Fraction]]) -> list[list[Fraction]]:
    """A basis of the right kernel over Q of a matrix with rational entries (exact)."""
    n_rows, n_cols = len(rows), len(rows[0])
    M = flint.fmpq_mat(n_rows, n_cols, [flint.fmpq(Fraction(x).numerator, Fraction(x).denominator)
                                         for row in rows for x in row])
    R, rank = M.rref()
    pivots, r = [], 0
    for c in range(n_cols):
        if r < rank and R[r, c] != 0:
            pivots.append(c)
            r += 1
    free = [c for c in range(n_cols) if c not in pivots]
    basis = []
    for f in free:
        vec = [Fraction(0)] * n_cols
        vec[f] = Fraction(1)
        for i, c in enumerate(pivots):
            q = R[i, f]
            vec[c] = -Fraction(int(q.p), int(q.q))
        basis.append(vec)
    return basis


def rank_rational(rows: list[list[int | Fraction]]) -> int:
    """Exact rank over Q of a matrix with rational entries (0 for an empty matrix)."""
    if not rows or not rows[0]:
        return 0
    M = flint.fmpq_mat(len(rows), len(rows[0]),
                       [flint.fmpq(Fraction(x).numerator, Fraction(x).denominator)
                        for row in rows for x in row])
    return int(M.rank())


def inverse_mod_p(matrix: np.ndarray, p: int) -> np.ndarray | None:
    """The inverse over F_p of a square integer matrix, or None when it is singular mod p."""
    m = to_nmod_mat(matrix, p)
    if m.rank() < m.nrows():
        return None
    inv = m.inv()
    n = m.nrows()
    return np.array([[int(inv[i, j]) for j in range(n)] for i in range(n)], dtype=np.int64)
