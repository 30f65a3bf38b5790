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

The tangents are built by the catalogue's own constructions (`registry.build_family`), over
F_p with a product that skips the zeros of a sparse factor (`sparse_fp_ops`: the same residues
as `fp_dual.fp_ops`), and kept as their non-zero entries.
"""

from __future__ import annotations

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
from .fp import DEFAULT_PRIME, check_prime, inverse_mod_p, rank_mod_p
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
    if a == 1 or n == 1:
        return None
    pos = pos.astype(np.int64)
    i, j = pos // n, pos % n
    sample = slice(0, _SAMPLE)           # the first tangents say which side they act on
    moved_rows = len(np.unique(rows[sample] * a + i[sample]))
    moved_cols = len(np.unique(rows[sample] * n + j[sample]))
    left = moved_rows < moved_cols and a <= n     # dB = X B: rows of X B, read through B_S
    if not left and not (moved_cols < moved_rows and a >= n):
        return None
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


def _full_row_rank(fam: _Family, own: list[str], blocks: dict[str, torch.Tensor], p: int
                   ) -> bool:
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
    return any(_independent(fam, names, blocks, p) for names in tries)


def _independent(fam: _Family, names: list[str], blocks: dict[str, torch.Tensor], p: int
                 ) -> bool:
    """Whether fam's tangents have rank fam.rows on the columns of `names`."""
    rows, cols, vals, offset = [], [], [], 0
    for name in names:
        r, pos, v = fam.entries[name]
        moved = _coordinates(blocks[name], r, pos, v, p)
        r, c, v = moved if moved is not None else (r, pos.astype(np.int64), v)
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


@dataclass
class PeeledRank:
    """rank: the rank over F_p of every family's tangents; peeled: the families whose rows
    are independent on columns of their own, in the order peeled (their rows count in full);
    remainder: the other families, ranked together densely (rows x columns, its rank);
    seconds: the time taken."""

    rank: int
    rows: int
    peeled: list[str]
    remainder: list[str]
    remainder_shape: tuple[int, int]
    remainder_rank: int
    seconds: float


def peeled_rank(arch: Architecture, blocks: dict[str, torch.Tensor], p: int) -> PeeledRank:
    """The rank over F_p of the catalogue's tangents at residue `blocks` (module docstring);
    ComputationError where the dense remainder is over MAX_REMAINDER_ENTRIES."""
    start = time.perf_counter()
    families = family_entries(arch, blocks, p)
    support = {f.name: set(f.entries) for f in families}
    left, peeled, rank = list(families), [], 0
    changed = True
    while changed:
        changed = False
        for fam in list(left):
            others = set().union(*(support[g.name] for g in left if g is not fam))
            own = [b for b in fam.entries if b not in others]
            if own and _full_row_rank(fam, own, blocks, p):
                left.remove(fam)
                peeled.append(fam.name)
                rank += fam.rows
                changed = True
    shape, rest = (0, 0), 0
    if left:
        offsets = {name: offset for name, _shape, offset in block_layout(arch)}
        rows, cols, vals, base = [], [], [], 0
        for fam in left:
            for name, (r, pos, v) in fam.entries.items():
                rows.append(r + base)
                cols.append(pos + offsets[name])
                vals.append(v)
            base += fam.rows
        rows, cols, vals = (np.concatenate(x) for x in (rows, cols, vals))
        uc, ci = np.unique(cols, return_inverse=True)
        shape = (base, len(uc))
        if base * len(uc) > MAX_REMAINDER_ENTRIES:
            raise ComputationError(
                f"the families not peeled ({', '.join(f.name for f in left)}) leave a dense "
                f"{base} x {len(uc)} remainder, over the {MAX_REMAINDER_ENTRIES:,} entries "
                "ranked here; use a smaller size.")
        M = np.zeros(shape, dtype=np.int64)
        M[rows, ci] = vals
        rest = rank_mod_p(M, p)
    return PeeledRank(rank + rest, sum(f.rows for f in families), peeled,
                      [f.name for f in left], shape, rest, time.perf_counter() - start)


def catalogue_rank(arch: Architecture, seed: int = 0, prime: int = DEFAULT_PRIME) -> PeeledRank:
    """`peeled_rank` at the random point of `ball_dual.block_upper_bound` (same seed, same
    residues): n_params - rank is its upper bound on the dimension."""
    p = check_word_prime(check_prime("prime", prime))
    blocks = random_blocks_mod_p(arch, p, seeded_generator(seed, "certified-upper"))
    return peeled_rank(arch, blocks, p)
