"""The rank over F_p of the catalogue's tangents read family by family (`dimension.peel`):
equal to the dense rank of `ball_dual.block_upper_bound` on small converted networks, a
dependent family caught, and the sparse product equal to `matmul_mod`."""

from dataclasses import replace

import pytest
import torch

from neuromanifold.dimension import peel
from neuromanifold.dimension.ball_dual import block_upper_bound
from neuromanifold.dimension.fp import DEFAULT_PRIME
from neuromanifold.dimension.modular import matmul_mod
from neuromanifold.models import certify, convert, hf
from neuromanifold.symmetries.registry import CATALOGUE, family


def _shrunk(model_type: str, layers: int, heads: int, head_dim: int, intermediate: int):
    cfg, _ = certify.shrunk_config(hf.shipped_config(model_type), layers=layers, heads=heads,
                                   head_dim=head_dim, intermediate=intermediate, tokens=3)
    return convert.from_config(cfg, 3)


# RMSNorm with untied logits (the stream's rotations), tied, a shared QK-norm, LayerNorm with
# biases, and BERT's post-norm families (most of them left to the dense remainder).
@pytest.mark.parametrize("model_type", ["mistral", "llama", "qwen3", "gpt2", "bert", "falcon"])
@pytest.mark.parametrize("size,seed", [((2, 2, 2, 3), 0), ((2, 2, 4, 6), 1), ((1, 2, 4, 5), 2)])
def test_peeled_rank_equals_the_dense_rank(model_type, size, seed):
    arch = _shrunk(model_type, *size)
    upper, _ = block_upper_bound(arch, seed)
    got = peel.catalogue_rank(arch, seed)
    assert got.rank == arch.n_params - upper
    assert got.rows >= got.rank
    assert not set(got.peeled) & set(got.remainder)
    assert set(got.peeled + got.remainder) <= {f.name for f in CATALOGUE if f.applies(arch)}
    assert not got.eliminated          # under the cap the remainder is ranked densely


# With a dense remainder of at most 6,000 entries allowed, the families not peeled are
# eliminated on pivot columns (`peel._eliminate`) until the rest fits: the rank is still the
# dense one.
@pytest.mark.parametrize("model_type", ["gpt2", "bert", "falcon", "gpt_neox", "llama"])
@pytest.mark.parametrize("size,seed", [((2, 2, 4, 3), 0), ((2, 2, 4, 6), 1), ((1, 3, 4, 5), 2)])
def test_eliminated_rank_equals_the_dense_rank(model_type, size, seed, monkeypatch):
    arch = _shrunk(model_type, *size)
    upper, _ = block_upper_bound(arch, seed)
    monkeypatch.setattr(peel, "MAX_REMAINDER_ENTRIES", 6000)
    got = peel.catalogue_rank(arch, seed)
    assert got.rank == arch.n_params - upper
    assert got.remainder_shape[0] * got.remainder_shape[1] <= 6000
    assert got.eliminated or model_type not in ("gpt2", "bert")   # the others may all peel
    assert set(got.peeled) | set(got.eliminated) | set(got.remainder) <= {
        f.name for f in CATALOGUE if f.applies(arch)}


# GPT-NeoX's stream rotations with norm biases (a tangent for each generator E_ab - E_ba
# corrected for X 1 = 0, each touching every block) have, read on the untied logits as X, an
# entry (a, b) of their own each: the most entries of all, they are eliminated first on those
# columns (a permuted diagonal), and the rank is still the dense one.
@pytest.mark.parametrize("size,seed", [((2, 2, 4, 3), 0), ((2, 2, 4, 6), 1), ((1, 3, 4, 5), 2),
                                       ((2, 2, 8, 3), 0)])
def test_the_stream_rotations_are_eliminated_on_columns_of_their_own(size, seed, monkeypatch):
    arch = _shrunk("gpt_neox", *size)
    upper, _ = block_upper_bound(arch, seed)
    monkeypatch.setattr(peel, "MAX_REMAINDER_ENTRIES", 6000)
    got = peel.catalogue_rank(arch, seed)
    assert got.rank == arch.n_params - upper
    assert got.eliminated[0] == "stream rotations with norm biases"


def test_own_columns_pick_one_private_column_a_row():
    import numpy as np

    rows = np.array([0, 0, 0, 1, 1, 2, 2])
    cols = np.array([5, 6, 7, 5, 8, 6, 7])      # 8 is row 1's alone; row 0 and 2 share 6, 7
    own = peel._own_columns(rows, cols)
    assert own.tolist() == [False, False, False, False, True, False, False]


def test_a_family_listed_twice_is_caught(monkeypatch):
    """GL(v) twice: neither copy has blocks of its own, both go to the dense remainder, and
    the rank stays the rank of one copy, below the rows."""
    arch = _shrunk("llama", 2, 2, 4, 6)
    once = peel.catalogue_rank(arch)
    again = replace(family("per-head GL(v) on (W, O)"), name="GL(v) again")
    monkeypatch.setattr(peel, "CATALOGUE", CATALOGUE + (again,))
    twice = peel.catalogue_rank(arch)
    assert twice.rows == once.rows + arch.n_layers * 4 * 4   # one group of width 4 a layer
    assert twice.rank == once.rank < twice.rows
    assert {"per-head GL(v) on (W, O)", "GL(v) again"} <= set(twice.remainder)


@pytest.mark.parametrize("model_type,name", [("gpt2", "per-head GL(a) on (Q, K)"),
                                             ("bert", "per-head GL(v) on (W, O)")])
def test_a_family_listed_twice_is_caught_when_eliminated(model_type, name, monkeypatch):
    """A large family twice, the dense remainder capped so that the families are eliminated:
    once one copy is subtracted from the other, the other has no entries left, and the rank
    stays the rank with one copy, below the rows."""
    arch = _shrunk(model_type, 2, 2, 4, 6)
    monkeypatch.setattr(peel, "MAX_REMAINDER_ENTRIES", 6000)
    once = peel.catalogue_rank(arch, 1)
    monkeypatch.setattr(peel, "CATALOGUE", CATALOGUE + (replace(family(name), name="again"),))
    twice = peel.catalogue_rank(arch, 1)
    assert twice.rows == once.rows + arch.n_layers * 2 * 16   # 2 heads of width 4 a layer
    assert twice.rank == once.rank < twice.rows
    assert name in twice.eliminated or "again" in twice.eliminated
    assert name in twice.remainder or "again" in twice.remainder


def test_sparse_product_is_matmul_mod():
    p = DEFAULT_PRIME
    gen = torch.Generator().manual_seed(3)
    dense = torch.randint(0, p, (5, 7), generator=gen)
    unit = torch.zeros((5, 5), dtype=torch.int64)
    unit[1, 3], unit[3, 1] = 1, p - 1
    diag = torch.diag(torch.randint(0, p, (7,), generator=gen))
    mm = peel.sparse_fp_ops(p).mm
    for A, B in ((unit, dense), (dense, diag), (dense.T, unit), (dense, dense.T)):
        assert torch.equal(mm(A, B), matmul_mod(A, B, p))


def test_a_remainder_too_large_is_refused(monkeypatch):
    """BERT's embedding families leave a dense remainder that no elimination removes; past
    MAX_REMAINDER_ENTRIES it is refused (ComputationError naming the families), never ranked
    in part."""
    from neuromanifold.errors import ComputationError

    arch = _shrunk("bert", 2, 2, 2, 3)
    monkeypatch.setattr(peel, "MAX_REMAINDER_ENTRIES", 100)
    with pytest.raises(ComputationError, match="embedding shift into positions"):
        peel.catalogue_rank(arch)
