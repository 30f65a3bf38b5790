"""A block of Jacobian rows grown past the first pass is computed in pieces of the first
block's samples (`numerical.LocalRows.add`): the same rows in the same order, to round-off, the
first block as before, so the autodiff working set and the full rows of a growing run stay those
of the first pass that `memory.numerical_estimate` models (docs/scale.md)."""

from __future__ import annotations

import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.dimension.numerical import LocalRows


def _rows(arch: Architecture, blocks: list[torch.Tensor]) -> tuple[LocalRows, torch.Tensor]:
    rows = LocalRows(arch, 0, torch.device("cpu"))
    for X in blocks:
        rows.add(X)
    return rows, torch.cat(rows.kept)


def test_later_blocks_are_computed_in_pieces_of_the_first():
    arch = Architecture((3, 3, 3), 2, 3, "softmax", heads=2, residual=True, mlp=2,
                        norm="layernorm", causal=True, bias=True)
    X = torch.randn((15, 3, 3), dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    pieced, kept = _rows(arch, [X[:4], X[4:]])
    whole, reference = _rows(arch, [X])
    assert pieced.piece == 4 and whole.piece == 15
    assert [k.shape[0] for k in pieced.kept] == [4 * 9, 4 * 9, 4 * 9, 3 * 9]
    assert kept.shape == reference.shape and pieced.rows == whole.rows == 15 * 9
    assert torch.allclose(kept, reference, rtol=1e-12, atol=1e-12)
    _, first = _rows(arch, [X[:4]])
    assert torch.equal(first, kept[: 4 * 9])   # the first block: as one call, bit for bit
