"""The rank over F_p of every catalogue family's tangents, read family by family where a family
has columns of its own: the same number as `ball_dual.block_upper_bound`'s, without the dense
tangent matrix, so that it reaches the real head widths (64 to 256).

Math. T is the tangent matrix (a row per tangent, a column per parameter), its rows grouped by
family. Take a family F and a set C of columns that no other family still in play touches
(T[others, C] = 0). If T[F, C] has full row rank |F|, then

    rank T = |F| + rank T[others]

exactly (a combination of rows that vanishes must give F's rows zero weight, since on C only
they are non-zero and they are independent there). So families are peeled off one at a time,
each against the families not yet peeled (peeling one frees its blocks for the others), and
the rest, if any, goes into one dense rank over F_p (`fp.rank_mod_p`) on the columns it
touches. T[F, C] is read block by block; an invertible change of a block's columns keeps the
rank, and the catalogue's families act on a block by a matrix on one side (GL(v): dW = X W;
the stream's rotations: dE = -E X), so the block is read in the coordinates of the action: for
a wide block B (a x n, a <= n) whose tangents move few rows, dB[:, S] B[:, S]^{-1} on a set S
of a columns with B[:, S] invertible (X itself for dB = X B); for a tall one whose tangents
move few columns, B[S, :]^{-1} dB[S, :] (a column subset, then an invertible change: a full
row rank there is one on C). The result is then block diagonal in small pieces (connected
components of rows and columns), each ranked by flint.

Where the rest is over MAX_REMAINDER_ENTRIES, a family F is eliminated instead (`_eliminate`):
on pivot columns S of blocks the others share, F[:, S] square and invertible (GL(a) on the
query blocks: X itself in the action's coordinates, after every family's entries on those
blocks are changed to them alike, the whole block: y = v_S B_S^{-1}, z = v_R - y B_R on a
line v), every other row t becomes t - t_S F[:, S]^{-1} F, zero on S. Row operations keep the
rank, and F alone touches S now, so rank T = |F| + rank of the changed others; the peeling
resumes on them. The others gain entries on F's other blocks (fill-in, kept sparse). The
family with the most entries goes first (every later step rewrites the entries left), and a
row of F with a column that no other row of F touches may pivot on it (F[:, S] a permuted
diagonal: the stream's rotations, read on the untied logits L as X, each have an entry (a, b)
of their own, so they leave first and their fill-in is a few rows of theirs per other row).

The tangents are built by the catalogue's own constructions (`registry.build_family`), over
F_p with a product that skips the zeros of a sparse factor (`sparse_fp_ops`: the same residues
as `fp_dual.fp_ops`), and kept as their non-zero entries.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.blocks import block_layout
from ..core.seeds import seeded_generator
from ..errors import ComputationError
from ..symmetries.catalogue import TangentOps
from ..symmetries.registry import CATALOGUE, build_family
from .fp import DEFAULT_PRIME, check_prime, inverse_mod_p, rank_mod_p, to_nmod_mat
from .fp_dual import fp_ops, random_blocks_mod_p
from .modular import check_word_prime, matmul_mod

# A dense remainder above this many entries is not ranked (about 8 bytes an entry in flint).
MAX_REMAINDER_ENTRIES = 2 ** 26
# A connected piece of a family's private columns above this many entries is not ranked.
MAX_PIECE_ENTRIES = 2 ** 24
# Entries read to tell which side a family acts on a block from.
_SAMPLE = 2 ** 16


def sparse_fp_ops(p: int) -> TangentOps:
    """`fp_dual.fp_ops(p)` with a product that works on the non-zero entries of a sparse
    factor (the catalogue multiplies every block by unit matrices: X with two entries, diagonal
    gains): the same residues, in far fewer operations."""
    base = fp_ops(p)

    def left_sparse(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        rows, inner = A.nonzero(as_tuple=True)
        terms = (A[rows, inner].unsqueeze(1) * B[inner]).remainder_(p)   # each < 2^62
        out = torch.zeros((A.shape[0], B.shape[1]), dtype=torch.int64)
        return out.index_add_(0, rows, terms).remainder_(p)      # sums of < 2^32 terms < 2^31

    def mm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if A.dim() != 2 or B.dim() != 2:
            return base.mm(A, B)
        a, b = int(torch.count_nonzero(A)), int(torch.count_nonzero(B))
        if a <= max(A.shape) and a * B.shape[1] <= b * A.shape[0]:
            return left_sparse(A, B)
        if b <= max(B.shape):
            return left_sparse(B.T, A.T).T.contiguous()
        return base.mm(A, B)

    return replace(base, mm=mm)


@dataclass
class _Family:
    """One family's tangents as non-zero entries, block by block: {block: (row, position in
    the flattened block, value)}."""

    name: str
    rows: int = 0
    entries: dict[str, list] = field(default_factory=dict)

    def add(self, parts: dict[str, torch.Tensor]) -> None:
        for block, d in parts.items():
            flat = d.reshape(-1)
            pos = flat.nonzero().reshape(-1)
            if pos.numel():      # int32: positions in a block, rows and residues (p < 2^31)
                self.entries.setdefault(block, []).append(
                    (np.full(pos.numel(), self.rows, dtype=np.int32),
                     pos.numpy().astype(np.int32), flat[pos].numpy().astype(np.int32)))
        self.rows += 1

    def close(self) -> None:
        for block in list(self.entries):
            chunks = self.entries[block]
            self.entries[block] = tuple(np.concatenate([c[k] for c in chunks]).astype(np.int64)
                                        if k == 0 else np.concatenate([c[k] for c in chunks])
                                        for k in range(3))
            del chunks


def family_entries(arch: Architecture, blocks: dict[str, torch.Tensor], p: int
                   ) -> list[_Family]:
    """Every applicable catalogue family's tangents at residue `blocks`, in registry order (the
    rows `registry.tangent_rows` stacks), as non-zero entries."""
    ops = sparse_fp_ops(p)
    zero = {name: torch.zeros_like(t) for name, t in blocks.items()}
    out = []
    for fam in CATALOGUE:
        if not fam.applies(arch):
            continue
        acc = _Family(fam.name)
        build_family(fam, arch, blocks, ops, zero, acc.add)
        acc.close()
        if acc.rows:
            out.append(acc)
    return out


def _coordinates(block: torch.Tensor, rows: np.ndarray, pos: np.ndarray, vals: np.ndarray,
                 p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The entries (row, column, value) of a family on `block`, in the coordinates of the
    action (module docstring), or None where that change does not apply (a vector, a block
    without an invertible square part, tangents moving as many rows as columns)."""
    a, n = block.shape
    left = _side(block, rows, pos)      # True: dB = X B, rows of X B read through B_S
    if left is None:
        return None
    pos = pos.astype(np.int64)
    i, j = pos // n, pos % n
    B = block.numpy() if left else block.numpy().T
    k = B.shape[0]                                 # the square part: k x k on the first columns
    inv = inverse_mod_p(B[:, :k], p)
    if inv is None:
        return None
    line, at = (i, j) if left else (j, i)
    keep = at < k
    width = max(a, n)
    groups, index = np.unique(rows[keep] * width + line[keep], return_inverse=True)
    dense = torch.zeros((len(groups), k), dtype=torch.int64)
    dense[torch.from_numpy(index), torch.from_numpy(at[keep])] = torch.from_numpy(
        vals[keep].astype(np.int64))
    moved = matmul_mod(dense, torch.from_numpy(inv), p).numpy()   # each line times B_S^{-1}
    g, c = moved.nonzero()
    return groups[g] // width, (groups[g] % width) * k + c, moved[g, c]


def _full_row_rank(fam: _Family, own: list[str], blocks: dict[str, torch.Tensor], p: int,
                   moved: frozenset | set = frozenset()) -> bool:
    """Whether fam's tangents have rank fam.rows on the blocks `own` (no other family in play
    touches them), read in the action's coordinates where that applies. Blocks are added,
    fewest entries first, until every row has an entry; all of them where that is not
    enough."""
    order = sorted(own, key=lambda name: len(fam.entries[name][0]))
    covered, first = np.zeros(fam.rows, dtype=bool), []
    for name in order:
        first.append(name)
        covered[fam.entries[name][0]] = True
        if covered.all():
            break
    if not covered.all():
        return False
    tries = [first] if len(first) == len(order) else [first, order]
    return any(_independent(fam, names, blocks, p, moved) for names in tries)


def _independent(fam: _Family, names: list[str], blocks: dict[str, torch.Tensor], p: int,
                 moved: frozenset | set = frozenset()) -> bool:
    """Whether fam's tangents have rank fam.rows on the columns of `names` (those of `moved`
    blocks already in the action's coordinates, read as they are)."""
    rows, cols, vals, offset = [], [], [], 0
    for name in names:
        r, pos, v = fam.entries[name]
        changed = None if name in moved else _coordinates(blocks[name], r, pos, v, p)
        r, c, v = changed if changed is not None else (r, pos.astype(np.int64), v)
        rows.append(r)
        cols.append(c + offset)
        vals.append(v)
        offset += blocks[name].numel()
    rows, cols, vals = (np.concatenate(x) for x in (rows, cols, vals))
    if len(np.unique(rows)) < fam.rows:           # a row with no entry here
        return False
    piece = _pieces(rows, cols)
    row_keys = np.unique(piece * (fam.rows + 1) + rows)
    col_keys = np.unique(piece * (offset + 1) + cols)
    row_count = np.bincount(row_keys // (fam.rows + 1))
    col_count = np.bincount(col_keys // (offset + 1), minlength=len(row_count))
    if np.any((row_count > 1) & (col_count < row_count)):
        return False
    for label in np.flatnonzero(row_count > 1):    # a piece of one row has rank 1
        at = np.flatnonzero(piece == label)
        ur, ri = np.unique(rows[at], return_inverse=True)
        uc, ci = np.unique(cols[at], return_inverse=True)
        if len(ur) * len(uc) > MAX_PIECE_ENTRIES:
            return False
        M = np.zeros((len(ur), len(uc)), dtype=np.int64)
        M[ri, ci] = vals[at]
        if rank_mod_p(M, p) < len(ur):
            return False
    return True


def _pieces(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A label per entry: the connected component of the bipartite graph of rows and columns
    joined by an entry (union-find)."""
    ur, ri = np.unique(rows, return_inverse=True)
    _, ci = np.unique(cols, return_inverse=True)
    parent = list(range(len(ur) + ci.max() + 1))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(ri.tolist(), (ci + len(ur)).tolist()):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    roots = np.array([find(x) for x in range(len(ur))])
    _, label = np.unique(roots, return_inverse=True)
    return label[ri]


# ---- Block (Schur-complement) elimination: a family with full row rank on blocks others touch.

# Products (coefficient x entry) built at once in one elimination step.
_CHUNK = 2 ** 22
# A pivot piece (connected rows and columns of a family on its pivot columns) above this many
# rows is not inverted.
MAX_PIVOT_PIECE = 64
# Entries searched for connected pieces (a loop in Python) when choosing pivots.
_PIECE_SEARCH = 2 ** 18


def _side(block: torch.Tensor, rows: np.ndarray, pos: np.ndarray) -> bool | None:
    """True where a family's tangents on `block` act on the left (dB = X B: few rows moved, a
    wide block), False on the right (a tall block), None for neither (`_coordinates` reads
    its blocks by it)."""
    a, n = block.shape
    if a == 1 or n == 1:
        return None
    pos = pos.astype(np.int64)
    i, j = pos // n, pos % n
    sample = slice(0, _SAMPLE)           # the first tangents say which side they act on
    moved_rows = len(np.unique(rows[sample] * a + i[sample]))
    moved_cols = len(np.unique(rows[sample] * n + j[sample]))
    if moved_rows < moved_cols and a <= n:
        return True
    if moved_cols < moved_rows and a >= n:
        return False
    return None


def _change(block: torch.Tensor, left: bool, p: int):
    """The whole block's columns changed invertibly to the action's coordinates (y, z): on a
    line v of a wide block B = [B_S | B_R] (B_S square), y = v_S B_S^{-1} and
    z = v_R - y B_R (X and 0 for v = X B); a tall block read through its transpose. A function
    of (rows, pos, vals) giving the entries in the new coordinates (same positions in the
    block), or None where B_S is singular."""
    a, n = block.shape
    B = block.numpy() if left else block.numpy().T        # k x w, k <= w: lines of width w
    k, w = B.shape
    inv = inverse_mod_p(B[:, :k], p)
    if inv is None:
        return None
    inv_t = torch.from_numpy(inv)
    rest = torch.from_numpy(B[:, k:].astype(np.int64))
    lines = a if left else n

    def apply(rows: np.ndarray, pos: np.ndarray, vals: np.ndarray):
        if len(rows) == 0:
            return rows, pos, vals
        pos = pos.astype(np.int64)
        i, j = pos // n, pos % n
        line, at = (i, j) if left else (j, i)
        groups, index = np.unique(rows.astype(np.int64) * lines + line, return_inverse=True)
        out_r, out_p, out_v = [], [], []
        step = max(1, _CHUNK // w)
        order = np.argsort(index, kind="stable")
        index, at, vals = index[order], at[order], vals[order]
        bounds = np.searchsorted(index, np.arange(0, len(groups) + step, step))
        for s in range(0, len(groups), step):
            lo, hi = bounds[s // step], bounds[s // step + 1]
            dense = torch.zeros((min(step, len(groups) - s), w), dtype=torch.int64)
            dense[torch.from_numpy(index[lo:hi] - s), torch.from_numpy(at[lo:hi])] = \
                torch.from_numpy(vals[lo:hi].astype(np.int64))
            y = matmul_mod(dense[:, :k], inv_t, p)
            new = torch.empty_like(dense)
            new[:, :k] = y
            if w > k:
                new[:, k:] = (dense[:, k:] - matmul_mod(y, rest, p)).remainder_(p)
            g, c = new.numpy().nonzero()
            key = groups[s + g]
            ln = key % lines
            out_r.append(key // lines)
            out_p.append(ln * n + c if left else c * n + ln)
            out_v.append(new.numpy()[g, c])
        return tuple(np.concatenate(x) for x in (out_r, out_p, out_v))

    return apply


def _combine(rows: np.ndarray, pos: np.ndarray, vals: np.ndarray, size: int, p: int):
    """Entries with the same (row, position) summed mod p, zeros dropped."""
    if len(rows) == 0:
        return rows, pos, vals
    key = rows.astype(np.int64) * size + pos
    order = np.argsort(key, kind="stable")
    key, vals = key[order], vals[order].astype(np.int64) % p
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sums = np.add.reduceat(vals, starts) % p
    key = key[starts]
    keep = sums != 0
    return key[keep] // size, key[keep] % size, sums[keep]


def _by_label(label: np.ndarray) -> list[np.ndarray]:
    """The positions of each label's entries (sorted once: no pass over all entries a label)."""
    order = np.argsort(label, kind="stable")
    cuts = np.flatnonzero(np.diff(label[order])) + 1
    return np.split(order, cuts)


def _single(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Whether each entry is alone in its row and in its column (a 1 x 1 piece)."""
    _, ri, rn = np.unique(r, return_inverse=True, return_counts=True)
    _, ci, cn = np.unique(c, return_inverse=True, return_counts=True)
    return (rn[ri] == 1) & (cn[ci] == 1)


def _own_columns(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per entry, whether it is the first entry of its row alone in its column (one per row
    that has such a column): on those columns the rows have one entry each, a permuted
    diagonal (the stream's rotations on the logits, read as X: entry (a, b), a < b, of
    E_ab - E_ba corrected for X 1 = 0 is theirs alone)."""
    out = np.zeros(len(r), dtype=bool)
    if len(r) == 0:
        return out
    _, ci, cn = np.unique(c, return_inverse=True, return_counts=True)
    at = np.flatnonzero(cn[ci] == 1)
    _, first = np.unique(r[at], return_index=True)
    out[at[first]] = True
    return out


def _pivots(fam: _Family, order: list[str], p: int):
    """Pivot columns for every row of fam, block by block in `order` (entries in the
    coordinates used): a row alone in its piece with one entry takes that column; a row with a
    column no other row touches there takes it (`_own_columns`); a larger connected piece of
    the rows not yet pivoted (at most MAX_PIVOT_PIECE rows) takes its first independent
    columns (flint's echelon form) where it has full row rank. {block: (rows, cols)} covering
    every row once, or None."""
    todo = np.ones(fam.rows, dtype=bool)
    chosen = {}
    for name in order:
        r, c, v = fam.entries[name]
        keep = todo[r]
        r, c, v = r[keep], c[keep], v[keep]
        if len(r) == 0:
            continue
        one = _single(r, c)
        got_r, got_c = [r[one]], [c[one]]
        r, c, v = r[~one], c[~one], v[~one]
        own = _own_columns(r, c)       # a column no other row touches here: that row's pivot
        got_r.append(r[own])
        got_c.append(c[own])
        keep = ~np.isin(r, r[own])
        r, c, v = r[keep], c[keep], v[keep]
        if 0 < len(r) <= _PIECE_SEARCH:
            for at in _by_label(_pieces(r, c)):
                ur, ri = np.unique(r[at], return_inverse=True)
                uc, ci = np.unique(c[at], return_inverse=True)
                if len(ur) > len(uc) or len(ur) > MAX_PIVOT_PIECE:
                    continue
                M = np.zeros((len(ur), len(uc)), dtype=np.int64)
                M[ri, ci] = v[at]
                echelon, rank = to_nmod_mat(M, p).rref()
                if rank < len(ur):
                    continue
                got_r.append(ur)
                got_c.append(uc[[next(j for j in range(len(uc)) if int(echelon[i, j]))
                                 for i in range(rank)]])
        rr, cc = np.concatenate(got_r), np.concatenate(got_c)
        if len(rr):
            chosen[name] = (rr, cc)
            todo[rr] = False
        if not todo.any():
            return chosen
    return None


def _pivot_inverse(fam: _Family, chosen: dict, sizes: dict, p: int):
    """fam's rows on the chosen pivot columns S, split into connected pieces, each of which
    must be square and invertible (else None). Returns (lookup, coefficient): lookup[block]
    numbers S's positions of a block (-1 off S); coefficient(g, s, t) gives, for entries t at
    pivot columns s of rows g of another family, the entries (g, row of fam, c) of the
    combination c with (c F)[S] = t[S] (c = t_S F[:, S]^{-1}, piece by piece)."""
    offset, lookup = 0, {}
    for name, (_rows, cols) in chosen.items():
        at = np.full(sizes[name], -1, dtype=np.int64)
        at[cols] = np.arange(offset, offset + len(cols))
        lookup[name] = at
        offset += len(cols)
    r, s, v = [], [], []
    for name, at in lookup.items():
        rr, pos, vv = fam.entries[name]
        col = at[pos]
        keep = col >= 0
        r.append(rr[keep])
        s.append(col[keep])
        v.append(vv[keep].astype(np.int64))
    r, s, v = (np.concatenate(x) for x in (r, s, v))
    width = np.zeros(offset, dtype=np.int64)      # per pivot column: its piece's size,
    row_base = np.zeros(offset, dtype=np.int64)   # where its rows start in `rows_of`,
    inv_base = np.zeros(offset, dtype=np.int64)   # where its row of the inverse starts
    rows_of, invs, nr, ni = [], [], 0, 0
    one = _single(r, s)
    if one.any():
        at = np.flatnonzero(one)
        width[s[at]] = 1
        row_base[s[at]] = nr + np.arange(len(at))
        inv_base[s[at]] = ni + np.arange(len(at))
        rows_of.append(r[at])
        invs.append(np.array([pow(int(x), p - 2, p) for x in v[at]], dtype=np.int64))
        nr, ni = nr + len(at), ni + len(at)
    rest = np.flatnonzero(~one)
    for at in (_by_label(_pieces(r[rest], s[rest])) if len(rest) else []):
        at = rest[at]
        ur, ri = np.unique(r[at], return_inverse=True)
        uc, ci = np.unique(s[at], return_inverse=True)
        if len(ur) != len(uc) or len(ur) > MAX_PIVOT_PIECE:
            return None
        M = np.zeros((len(ur), len(uc)), dtype=np.int64)
        M[ri, ci] = v[at]
        inv = inverse_mod_p(M, p)                  # columns x rows of fam
        if inv is None:
            return None
        w = len(ur)
        width[uc] = w
        row_base[uc] = nr
        inv_base[uc] = ni + np.arange(w) * w
        rows_of.append(ur)
        invs.append(inv.reshape(-1))
        nr, ni = nr + w, ni + w * w
    rows_of, invs = np.concatenate(rows_of), np.concatenate(invs)
    if len(np.unique(rows_of)) != fam.rows or nr != fam.rows:
        return None

    def coefficient(g: np.ndarray, col: np.ndarray, t: np.ndarray):
        w = width[col]
        j = np.arange(w.sum()) - np.repeat(np.cumsum(w) - w, w)
        col, t, g = np.repeat(col, w), np.repeat(t.astype(np.int64), w), np.repeat(g, w)
        c = t * invs[inv_base[col] + j] % p
        return g, rows_of[row_base[col] + j], c

    return lookup, coefficient


def _expand(fam: _Family, name: str, skip: np.ndarray | None):
    """fam's entries on block `name` off the positions `skip` marks, sorted by row, with each
    row's start and length: (starts, lengths, pos, vals)."""
    r, pos, v = fam.entries[name]
    if skip is not None:
        keep = skip[pos] < 0
        r, pos, v = r[keep], pos[keep], v[keep]
    order = np.argsort(r, kind="stable")
    r, pos, v = r[order], pos[order].astype(np.int64), v[order].astype(np.int64)
    lengths = np.bincount(r, minlength=fam.rows)
    starts = np.cumsum(lengths) - lengths
    return starts, lengths, pos, v


class _Coordinates(dict):
    """fam's entries block by block in the action's coordinates (`_change`; as they are where
    none applies), each block changed when first read: the blocks the pivots are not searched
    on are never copied (the stream's rotations touch every block)."""

    def __init__(self, fam: _Family, changes: dict):
        super().__init__()
        self.fam, self.changes = fam, changes

    def __missing__(self, name: str):
        r, pos, v = self.fam.entries[name]
        change = self.changes[name]
        self[name] = (change(r, pos, v) if change is not None
                      else (r, pos.astype(np.int64), v.astype(np.int64)))
        return self[name]


def _eliminate(left: list[_Family], blocks: dict[str, torch.Tensor], moved: set, p: int
               ) -> _Family | None:
    """One block elimination: the first family (most entries first) with full row rank on pivot
    columns S of the blocks it touches (read in its action's coordinates, every family's
    entries on those blocks changed alike) is subtracted from every other family so that their
    entries on S vanish (t -> t - t_S F_S^{-1} F, row operations: the rank is kept); it then
    touches S alone and counts its rows in full. Returns it (removed from `left`), or None."""
    touch: dict[str, int] = {}
    for g in left:
        for name, (r, _pos, _v) in g.entries.items():
            touch[name] = touch.get(name, 0) + len(r)
    sizes = {name: t.numel() for name, t in blocks.items()}
    # the family with the most entries first: every later step reads and rewrites the
    # entries of the families left, so the largest is removed before it gains fill-in
    for fam in sorted(left, key=lambda f: -sum(len(e[0]) for e in f.entries.values())):
        changes = {}
        for name, (r, pos, _v) in fam.entries.items():
            change = None
            if name not in moved:
                side = _side(blocks[name], r, pos)
                change = None if side is None else _change(blocks[name], side, p)
            changes[name] = change
        coords = _Coordinates(fam, changes)
        order = sorted(changes, key=lambda name: touch[name] - len(fam.entries[name][0]))
        chosen = _pivots(_Family(fam.name, fam.rows, coords), order, p)
        if chosen is None:
            continue
        for name in chosen:
            if changes[name] is not None:
                for g in left:
                    if name in g.entries:
                        g.entries[name] = (coords[name] if g is fam
                                           else changes[name](*g.entries[name]))
                moved.add(name)
        solved = _pivot_inverse(fam, chosen, sizes, p)
        if solved is None:
            continue
        lookup, coefficient = solved
        rows = {}
        for name in list(fam.entries):     # fam leaves: its entries go, sorted by row
            rows[name] = _expand(fam, name, lookup.get(name))
            del fam.entries[name]
        for g in left:
            if g is fam:
                continue
            gr, gc, gt = [], [], []
            for name, at in lookup.items():
                if name in g.entries:
                    r, pos, v = g.entries[name]
                    col = at[pos]
                    hit = col >= 0
                    gr.append(r[hit])
                    gc.append(col[hit])
                    gt.append(v[hit])
                    g.entries[name] = (r[~hit], pos[~hit], v[~hit])
            if not gr or not sum(map(len, gr)):
                continue
            cg, cf, cv = coefficient(*(np.concatenate(x) for x in (gr, gc, gt)))
            cg, cf, cv = _combine(cg, cf, cv, fam.rows, p)
            for name, (starts, lengths, pos, v) in rows.items():
                n = lengths[cf]
                cum = np.cumsum(n)
                if not len(cum) or not cum[-1]:
                    continue
                cuts = np.r_[0, np.searchsorted(cum, np.arange(_CHUNK, cum[-1], _CHUNK)), len(n)]
                acc = [g.entries.get(name, (np.zeros(0, np.int64),) * 3)]
                for lo, hi in itertools.pairwise(cuts):
                    k = n[lo:hi]
                    if not k.sum():
                        continue
                    at = np.repeat(starts[cf[lo:hi]] - np.cumsum(k) + k, k) + np.arange(k.sum())
                    acc.append((np.repeat(cg[lo:hi], k), pos[at],
                                (p - np.repeat(cv[lo:hi], k) * v[at] % p) % p))
                    if sum(len(x[0]) for x in acc) > 4 * _CHUNK:
                        acc = [_combine(*(np.concatenate(x) for x in zip(*acc)), sizes[name], p)]
                if len(acc) > 1:
                    acc = [_combine(*(np.concatenate(x) for x in zip(*acc)), sizes[name], p)]
                g.entries[name] = acc[0]
            for name in [b for b, e in g.entries.items() if not len(e[0])]:
                del g.entries[name]
        left.remove(fam)
        return fam
    return None


@dataclass
class PeeledRank:
    """rank: the rank over F_p of every family's tangents; peeled: the families whose rows
    are independent on columns of their own, in the order peeled (their rows count in full);
    eliminated: the families subtracted from the others on pivot columns (`_eliminate`), which
    then count in full; remainder: the other families, ranked together densely (rows with an
    entry x columns, its rank); seconds: the time taken."""

    rank: int
    rows: int
    peeled: list[str]
    remainder: list[str]
    remainder_shape: tuple[int, int]
    remainder_rank: int
    seconds: float
    eliminated: list[str] = field(default_factory=list)


def _remainder(left: list[_Family], offsets: dict[str, int]):
    """The families left as one matrix: (rows, columns, values) of its rows with an entry and
    the columns touched, renumbered from 0."""
    rows, cols, vals, base = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], \
        [np.zeros(0, np.int64)], 0
    for fam in left:
        for name, (r, pos, v) in fam.entries.items():
            rows.append(r + base)
            cols.append(pos.astype(np.int64) + offsets[name])
            vals.append(v.astype(np.int64))
        base += fam.rows
    rows, cols, vals = (np.concatenate(x) for x in (rows, cols, vals))
    _, ri = np.unique(rows, return_inverse=True)
    _, ci = np.unique(cols, return_inverse=True)
    return ri.reshape(-1), ci.reshape(-1), vals


def peeled_rank(arch: Architecture, blocks: dict[str, torch.Tensor], p: int) -> PeeledRank:
    """The rank over F_p of the catalogue's tangents at residue `blocks` (module docstring):
    families peeled where they have blocks of their own; while the rest is over
    MAX_REMAINDER_ENTRIES, one eliminated on pivot columns (`_eliminate`) and the peeling
    resumed; ComputationError where the dense remainder stays over MAX_REMAINDER_ENTRIES."""
    start = time.perf_counter()
    families = family_entries(arch, blocks, p)
    offsets = {name: offset for name, _shape, offset in block_layout(arch)}
    left, peeled, eliminated, rank, moved = list(families), [], [], 0, set()
    while True:
        changed = True
        while changed:
            changed = False
            for fam in list(left):
                others = set().union(*(set(g.entries) for g in left if g is not fam))
                own = [b for b in fam.entries if b not in others]
                if own and _full_row_rank(fam, own, blocks, p, moved):
                    left.remove(fam)
                    peeled.append(fam.name)
                    rank += fam.rows
                    changed = True
        rows, cols, vals = _remainder(left, offsets)
        shape = (int(rows.max()) + 1, int(cols.max()) + 1) if len(rows) else (0, 0)
        if shape[0] * shape[1] <= MAX_REMAINDER_ENTRIES:
            break
        done = _eliminate(left, blocks, moved, p)
        if done is None:
            raise ComputationError(
                f"the families not peeled ({', '.join(f.name for f in left)}) leave a dense "
                f"{shape[0]} x {shape[1]} remainder, over the {MAX_REMAINDER_ENTRIES:,} "
                "entries ranked here; use a smaller size.")
        eliminated.append(done.name)
        rank += done.rows
    rest = 0
    if len(rows):
        M = np.zeros(shape, dtype=np.int64)
        M[rows, cols] = vals
        rest = rank_mod_p(M, p)
    return PeeledRank(rank + rest, sum(f.rows for f in families), peeled,
                      [f.name for f in left], shape, rest, time.perf_counter() - start,
                      eliminated)

def catalogue_rank(arch: Architecture, seed: int = 0, prime: int = DEFAULT_PRIME) -> PeeledRank:
    """`peeled_rank` at the random point of `ball_dual.block_upper_bound` (same seed, same
    residues): n_params - rank is its upper bound on the dimension."""
    p = check_word_prime(check_prime("prime", prime))
    blocks = random_blocks_mod_p(arch, p, seeded_generator(seed, "certified-upper"))
    return peeled_rank(arch, blocks, p)
