"""symmetries.registry: one object per family, looked up by name, with its proof in the docs,
tangents in the Jacobian's kernel, and proved counts that match the computed ranks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import flatten_blocks, random_block_weights
from neuromanifold.core.rank import matrix_rank
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.symmetries.registry import (CATALOGUE, FAMILIES, families_for, family,
                                               family_of_move, family_tangents, tangent_rows)

ROOT = Path(__file__).resolve().parents[2]
NETWORKS = [
    Architecture((3, 5, 3), (2, 2), 3, heads=(2, 3), values=(2, 2), mlp=(3, 2)),
    Architecture((5, 5, 5), 2, 2, "softmax", heads=2, residual=True, mlp=3, norm="layernorm",
                 activation="relu"),
    Architecture((3, 3), 3, 3, heads=3),
    Architecture((4, 4), 2, 1, "softmax", heads=2, residual=True, mlp=3),
    Architecture((3, 4, 3), (2, 2), 3, norm="rmsnorm", heads=(2, 2), mlp=(2, 2)),
]


def _slug(heading: str) -> str:
    """The anchor mkdocs' toc extension gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text)


def test_every_proof_anchor_exists():
    """Each family's proof points at a heading that exists in the docs."""
    for fam in FAMILIES:
        path, anchor = fam.proof.split("#")
        headings = [line.lstrip("#").strip() for line in (ROOT / path).read_text().splitlines()
                    if line.startswith("#")]
        assert anchor in {_slug(h) for h in headings}, (fam.name, fam.proof)


def test_families_are_looked_up_by_name():
    """Names are unique, lookups by name return the family, unknown names are refused."""
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
    assert all(family(f.name) is f for f in FAMILIES)
    with pytest.raises(KeyError, match="no symmetry family"):
        family("GL(7)")


def test_fiber_moves_name_registry_families():
    """The moves `fiber` reports map to the registry's families."""
    assert family_of_move("per-head GL(a)") == "per-head GL(a) on (Q, K)"
    assert family_of_move("GL(d_i)") == "between-layer GL(d_i) (Eq. 9)"
    assert family_of_move("head permutation") is None  # a discrete move, no tangents


def test_engines_use_the_paper_group_or_the_catalogue():
    """The paper's model gets its own group, every other network the catalogue."""
    paper = families_for(Architecture((3, 3, 3), 2, 3))
    assert paper and all(f.paper for f in paper)
    assert all(not f.paper for f in families_for(NETWORKS[0]))


@pytest.mark.parametrize("arch", NETWORKS, ids=str)
def test_each_family_lies_in_the_jacobian_kernel(arch):
    """Every family's tangents are mapped to ~0 by the float Jacobian (relative 1e-9)."""
    blocks = random_block_weights(arch, seed=3)
    X = torch.randn((4, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(5))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    rows, counts = tangent_rows(arch, blocks)
    start = 0
    for name, n in counts:
        T = rows[start:start + n]
        start += n
        if n:
            scale = float(J.abs().max()) * float(T.abs().max())
            assert float((J @ T.T).abs().max()) <= 1e-9 * scale, name
    assert [name for name, _ in counts] == [f.name for f in CATALOGUE]


@pytest.mark.parametrize("arch", [NETWORKS[0], NETWORKS[2], Architecture((5, 4), 3, 2, heads=2, values=3)],
                         ids=str)
def test_proved_counts_match_the_ranks(arch):
    """Where a count is proved (GL(a) on full-rank keys, GL(v) on full-rank values), the rank
    of that family's own tangents at a random point equals it."""
    blocks = random_block_weights(arch, seed=1)
    built = dict(family_tangents(arch, blocks))
    for name in ("per-head GL(a) on (Q, K)", "per-head GL(v) on (W, O)"):
        fam = family(name)
        expected = fam.count(arch)
        if expected is None:
            continue
        rows = torch.stack([torch.cat([t.get(n, torch.zeros_like(b)).reshape(-1)
                                       for n, b in blocks.items()]) for t in built[name]])
        assert matrix_rank(rows).rank == expected, name


def test_fiber_applies_every_move_it_names_with_the_registrys_action():
    """Each move a block witness can hold is applied by the registry's action: the family's own
    for continuous families, a discrete symmetry's for permutations; an unknown move is a
    KeyError (apply_block_witness turns it into a one-line refusal)."""
    import re

    from neuromanifold.symmetries import actions
    from neuromanifold.symmetries.registry import DISCRETE_MOVES, FAMILIES, action

    source = open(actions.__file__).read()
    named = set(re.findall(r"^  ([a-zA-Z][\w()\- ]+?)  +", source.split('"""')[1], re.M))
    assert named == {f.move for f in FAMILIES if f.act is not None} | {
        m for m in DISCRETE_MOVES if m != "swap"}
    for move in named:
        assert callable(action(move))
    fam = next(f for f in FAMILIES if f.move == "per-head GL(a)")
    assert action("per-head GL(a)") is fam.act
    with pytest.raises(KeyError):
        action("teleport")
