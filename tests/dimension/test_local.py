"""local_geometry at constructed degenerate points, against answers derived by hand.

Notation: one softmax layer, residual, stream width d, H heads of key width a, unfactored values
V (d x d) unless `values` v is given (W: v x d, O: d x v), t tokens, no biases unless said.
A head h maps Z to V_h Z S(Z^T Q_h^T K_h Z); its column block (Q_h, K_h, V_h) has generic rank
    g1 = (2ad - a^2) + d^2        (M = Q^T K has rank <= a: the variety of rank-<=a d x d
                                   matrices has dimension 2ad - a^2, GL(a) acting on (Q, K);
                                   M -> head is injective on tangents for t >= 2 generic tokens)
and with factored values (2ad - a^2) + (2vd - v^2) (GL(v) on (W, O)). Heads are independent
generically, so the layer's generic rank is H g1 (d = 5, a = 2, H = 2: 2 * 41 = 82, which the
registry's count n_params - 8 = 90 - 8 gives too).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import random_block_weights
from neuromanifold.dimension import local_parts
from neuromanifold.dimension.ball_dual import block_upper_bound
from neuromanifold.dimension.local import local_geometry
from neuromanifold.dimension.point import rank_at_point
from neuromanifold.errors import InputError

D, A, T = 5, 2, 3


def _arch(**kw) -> Architecture:
    base = {"widths": (D, D), "keys": A, "tokens": T, "attention": "softmax", "heads": 2,
            "residual": True}
    return Architecture(**{**base, **kw})


def _part(g, name: str) -> dict:
    return next(p for p in g.parts if p["name"] == name)


def _check_generic(arch: Architecture, seed: int) -> None:
    """The generic-point checks (shared with the mutant test, which must make them fail)."""
    g = local_geometry(arch, random_block_weights(arch, seed), seed=seed)
    upper, families = block_upper_bound(arch, seed)
    assert g.status == "certified" and g.lower_bound == g.upper_bound == g.rank
    assert g.excess == 0 and g.generic_dimension == g.rank
    assert g.tangent_count == g.registry_count == sum(families.values()) == arch.n_params - upper
    assert not g.deficient_families()
    assert all(p["excess"] == 0 and not p["causes"] for p in g.parts)
    point = rank_at_point(arch, random_block_weights(arch, seed), seed=seed, generic=False)
    assert g.rank == point.rank


def _degenerate(g, generic: int, rank: int) -> None:
    """A degenerate point with the hand-derived `rank` below the generic dimension: the float
    rank and the proven lower bound meet the derivation, but the upper bound (the registry's
    tangents) stays above it, so the status is `ambiguous` with the bracket (never `settled`)
    and the excess is the bracket [generic - upper, generic - lower] holding generic - rank."""
    assert (g.generic_dimension, g.float_rank, g.lower_bound) == (generic, rank, rank)
    assert g.upper_bound > rank and (g.status, g.rank) == ("ambiguous", None)
    assert g.excess == [max(0, generic - g.upper_bound), generic - rank]


def test_generic_point_bracket_closes():
    """At a random point the bracket closes at rank_at_point's value, the excess is 0 and the
    split tangent count is the registry's."""
    _check_generic(_arch(), 3)


def test_mutant_skipped_projection_is_caught(monkeypatch):
    """Mutant: skipping the tangent projection (J instead of J Q2) fails the generic checks."""
    monkeypatch.setattr(local_parts, "complement", lambda split, J: (J, 0.0))
    with pytest.raises(AssertionError):
        _check_generic(_arch(), 3)


def test_zero_output_map():
    """O_1 = 0 (factored values, v = 2): every derivative through head 1 carries O_1, so its
    Q, K and W columns are zero in J and only dO W Z S remains, of rank d v = 10. Generic head
    rank (2ad - a^2) + (2vd - v^2) = 16 + 16 = 32; excess 32 - 10 = 22. Network: kernel = those
    30 zero columns (GL(a) and GL(v) of head 1 lie in them: dW = X W, dO = -O X = 0) plus head
    2's 8 tangents, so rank 80 - 38 = 42 = 64 - 22."""
    arch = _arch(values=2)
    b = random_block_weights(arch, 5)
    b["O_1_1"] = torch.zeros_like(b["O_1_1"])
    g = local_geometry(arch, b, seed=5)
    _degenerate(g, 64, 42)
    assert g.upper_bound == 64
    head = _part(g, "layer 1 head 1")
    assert (head["rank"], head["generic_rank"], head["excess"]) == (10, 32, 22)
    assert any("O_1_1 is numerically zero" in c for c in head["causes"])
    assert _part(g, "layer 1 head 2")["excess"] == 0


def test_identical_heads():
    """Head 2 = head 1: the layer is 2 V Z S(Z^T Q^T K Z), head 2's columns equal head 1's, so
    the layer's rank is g1 = 41 against 2 g1 = 82: excess 41, on the layer; each head alone keeps
    its generic rank 41 (excess 0 there) and both are named duplicates."""
    arch = _arch()
    b = random_block_weights(arch, 7)
    for k in "QKV":
        b[f"{k}_1_2"] = b[f"{k}_1_1"].clone()
    g = local_geometry(arch, b, seed=7)
    _degenerate(g, 82, 41)
    layer = _part(g, "layer 1")
    assert (layer["rank"], layer["excess"]) == (41, 41)
    assert "heads 1 and 2 are identical" in layer["causes"]
    assert [_part(g, f"layer 1 head {h}")["excess"] for h in (1, 2)] == [0, 0]


def test_rank_one_qk_product():
    """Q_1, K_1 with second rows 0 (Q^T K = q1^T k1, rank 1 < a = 2): d(Q^T K) = dq1^T k1 +
    q1^T dk1 spans 2d - 1 = 9 against 2ad - a^2 = 16, so head 1 has rank 9 + 25 = 34, excess
    2d - 3 = 7. GL(a) loses one dimension there (X = E_22 fixes Q and K): F_p rank 7 < 8, named
    deficient, and the point's own bound n_params - rank_p T(W) rises to 90 - 7 = 83 (the upper
    bound stays at the registry's generic bound 82: no point has a rank above the generic one)."""
    arch = _arch()
    b = random_block_weights(arch, 11)
    b["Q_1_1"][1] = 0.0
    b["K_1_1"][1] = 0.0
    g = local_geometry(arch, b, seed=11)
    _degenerate(g, 82, 75)
    assert (g.point_upper_bound, g.upper_bound) == (83, 82)
    fam = g.families["per-head GL(a) on (Q, K)"]
    assert (fam["rank"], fam["generic_rank"], fam["deficient"]) == (7, 8, True)
    assert g.deficient_families() == ["per-head GL(a) on (Q, K)"]
    head = _part(g, "layer 1 head 1")
    assert (head["rank"], head["excess"]) == (34, 7)
    assert any("collapsed QK: rank Q^T K = 1" in c for c in head["causes"])


def test_zero_norm_gain():
    """rmsnorm gain g_1[0] = 0: coordinate 0 of N(Z) is 0, so each head's readers of it
    (Q[:, 0], K[:, 0]: a each, V[:, 0]: d) have zero columns: 2a + d = 9 per head, each head
    reading d - 1 = 4 coordinates has rank (2a4 - a^2) + 4d = 12 + 20 = 32 = 41 - 9. Network:
    kernel = the 18 zero columns plus the 13 tangents less the gain rescaling at coordinate 0
    (dg_0 = g_0 = 0: inside the zero columns): excess 18 - 1 = 17. The gain's own column block
    keeps rank d = 5 (dphi/dg_0 reads the readers' columns, not zero)."""
    arch = _arch(norm="rmsnorm")
    b = random_block_weights(arch, 13)
    b["g_1"][0] = 0.0
    g = local_geometry(arch, b, seed=13)
    _degenerate(g, 82, 65)
    for h in (1, 2):
        head = _part(g, f"layer 1 head {h}")
        assert (head["rank"], head["excess"]) == (32, 9)
        assert any("zero gain coordinates [0]" in c for c in head["causes"])
    norm = _part(g, "layer 1 attention norm")
    assert (norm["rank"], norm["excess"]) == (5, 0) and norm["causes"]


def test_dead_relu_neuron():
    """d = 4, MLP width 3 with biases, neuron 0 with P row 0 and bias -1: pre-activation -1 on
    every input, so its P row (d), bias (1) and U column (d) are zero columns: 2d + 1 = 9; its
    relu rescaling tangent lies in them, so the excess is 2d + 1 - 1 = 8 = d_in + d_out, on the
    MLP (generic 3 4 + 3 + 4 3 + 4 - 3 = 28, here 28 - 8 = 20)."""
    arch = Architecture((4, 4), 2, 2, "softmax", heads=1, residual=True, mlp=3,
                        activation="relu", mlp_bias=True)
    b = random_block_weights(arch, 17)
    b["P_1"][0] = 0.0
    b["bp_1"][0] = -1.0
    g = local_geometry(arch, b, seed=17)
    _degenerate(g, 56, 48)
    mlp = _part(g, "layer 1 mlp")
    assert (mlp["rank"], mlp["generic_rank"], mlp["excess"]) == (20, 28, 8)
    assert any("dead relu neurons [0]" in c for c in mlp["causes"])


def test_gram_route_matches_dense(monkeypatch):
    """The Gram route (eigenvalues of Q2^T J^T J Q2) reads the dense route's rank on a
    zero-output-map point, and the dense route's part ranks there and at the random point (where
    a head's block is read off its layer's), and says it cannot resolve 1e-12 of sigma_1."""
    arch = _arch(heads=3)
    b = random_block_weights(arch, 19)
    b["V_1_2"] = torch.zeros_like(b["V_1_2"])
    dense = local_geometry(arch, b, seed=19, generic=False, method="numerical")
    monkeypatch.setattr("neuromanifold.dimension.local.DENSE_MAX_BYTES", 0)
    monkeypatch.setattr(local_parts, "GRAM_BLOCK", 16)     # several column blocks, mirrored
    monkeypatch.setattr("neuromanifold.dimension.local.GRAM_CHUNK_BYTES", 20000)  # row chunks
    gram = local_geometry(arch, b, seed=19, generic=False, method="numerical")
    assert gram.route == "gram" and dense.route == "dense"
    assert gram.float_rank == dense.float_rank == 3 * 41 - 16
    assert [p["rank"] for p in gram.parts] == [p["rank"] for p in dense.parts]
    # at the random point only the layers' blocks are accumulated, the heads' read off them
    assert [p["generic_rank"] for p in gram.parts] == [p["generic_rank"] for p in dense.parts]
    assert {p["name"]: p["generic_rank"] for p in gram.parts}["layer 1 head 2"] == 41
    assert gram.profile[-1]["resolved"] is False and gram.profile[0]["effective_dimension"] == 107
    assert gram.tangent_count == dense.tangent_count == 12


def test_batch_and_json():
    """Token ids as the user's inputs: the batch spectrum is read, capped by its N t V rows,
    and to_dict is JSON with the issue's keys."""
    arch = Architecture((3, 3), 2, 2, "softmax", heads=1, residual=True, vocab=4)
    b = random_block_weights(arch, 23)
    ids = torch.tensor([[0, 1], [2, 3]])
    g = local_geometry(arch, b, inputs=ids, seed=23, generic=False)
    assert g.batch["n_samples"] == 2 and g.batch["float_rank"] <= 2 * 2 * 4
    d = json.loads(json.dumps(g.to_dict()))
    for key in ("n_params", "lower_bound", "upper_bound", "status", "rank", "float_rank", "gap",
                "generic_dimension", "generic_status", "excess", "profile", "families", "parts",
                "batch", "notes", "seconds"):
        assert key in d


def test_bad_inputs_refused():
    """Wrong input shapes, a missing block and NaN weights: one template line each."""
    arch = Architecture((3, 3), 2, 2, "softmax", heads=1, residual=True, vocab=4)
    b = random_block_weights(arch, 1)
    with pytest.raises(InputError, match=r"`inputs` must be integer token ids of shape \(N, 2\)"):
        local_geometry(arch, b, inputs=torch.zeros(2, 3, dtype=torch.long), generic=False)
    with pytest.raises(InputError, match=r"`inputs` must be token ids in \[0, 4\)"):
        local_geometry(arch, b, inputs=torch.tensor([[0, 9]]), generic=False)
    missing = dict(b)
    del missing["Q_1_1"]
    with pytest.raises(InputError, match="`blocks` must be a dict|a block Q_1_1"):
        local_geometry(arch, missing, generic=False)
    b["K_1_1"][0, 0] = float("nan")
    with pytest.raises(InputError, match="blocks:K_1_1"):
        local_geometry(arch, b, generic=False)


def test_sample_jacobian_is_the_jacobian():
    """The per-sample vmapped reverse mode equals `jacobians.jacobian` (rows (n, d_l, t))."""
    from neuromanifold.core.blocks import flatten_blocks
    from neuromanifold.dimension.jacobians import jacobian

    arch = Architecture((3, 5), 2, 3, "softmax", heads=2, values=(4,), residual=False, mlp=(7,),
                        norm="layernorm")
    params = flatten_blocks(arch, random_block_weights(arch, 29))
    X = torch.randn((4, 3, 3), generator=torch.Generator().manual_seed(29), dtype=torch.float64)
    assert torch.allclose(local_parts.sample_jacobian(arch, params, X), jacobian(arch, params, X),
                          rtol=0, atol=1e-12)


def test_peeled_families_match_dense(monkeypatch):
    """The large-network families route (peeling; each family's rank alone) finds the same upper
    bound and the same deficient family as the dense incremental ranks at the rank-1 QK point."""
    from neuromanifold.dimension import local

    arch = _arch()
    b = random_block_weights(arch, 11)
    b["Q_1_1"][1] = 0.0
    b["K_1_1"][1] = 0.0
    dense = local_geometry(arch, b, seed=11, generic=False, parts=False, method="numerical")
    monkeypatch.setattr(local, "FAMILY_DENSE_MAX_PARAMS", 0)
    peeled = local_geometry(arch, b, seed=11, generic=False, parts=False, method="numerical")
    assert peeled.point_upper_bound == dense.point_upper_bound == 83
    assert peeled.registry_count == dense.registry_count == 8
    assert peeled.deficient_families() == dense.deficient_families() == ["per-head GL(a) on (Q, K)"]


def test_saturated_softmax_and_tied_gains_named():
    """Scores scaled by 10^4 make head 1's softmax one-hot on its columns (named saturated; head
    2 is not), and a gain with equal entries is named tied."""
    arch = _arch(norm="rmsnorm")
    b = random_block_weights(arch, 31)
    b["Q_1_1"] = b["Q_1_1"] * 1e4
    b["g_1"] = torch.ones_like(b["g_1"])
    X = torch.randn((6, D, T), generator=torch.Generator().manual_seed(31), dtype=torch.float64)
    causes = local_parts.detect_causes(arch, b, [("sampled", X)])
    assert any("saturated softmax" in c for c in causes["layer 1 head 1"])
    assert not any("saturated" in c for c in causes.get("layer 1 head 2", []))
    assert any("tied entries" in c for c in causes["layer 1 attention norm"])


def test_memory_refused_before_allocation(monkeypatch):
    """The planner's estimate is checked before any Jacobian: over the budget, one line."""
    from neuromanifold.errors import ResourceError

    monkeypatch.setattr("neuromanifold.dimension.memory.available_memory", lambda: 1 << 20)
    with pytest.raises(ResourceError, match=r"`max_memory` must be at least the estimated peak.*"
                                            r"local geometry of"):
        local_geometry(_arch(), random_block_weights(_arch(), 1), generic=False)


def _nr(rank: int, n: int, small: float):
    """A float64 rank read from singular values: `rank` ones, then n - rank values `small`."""
    from neuromanifold.core.rank import numerical_rank

    return numerical_rank(torch.tensor([1.0] * rank + [small] * (n - rank), dtype=torch.float64),
                          3 * n, n)


def test_status_rule_is_rank_at_points():
    """`local_status`: certified only when lower == upper; settled only for a clear gap with the
    float rank at the proven upper bound; a clear-gap float rank that meets only the lower bound,
    or a float rank at the upper bound without a clean gap, is ambiguous with rank None."""
    from neuromanifold.dimension.local import local_status

    from neuromanifold.core.rank import numerical_rank

    clear = _nr(7, 11, 1e-17)
    blurred = numerical_rank(torch.tensor([10.0 ** (-1.2 * k) for k in range(11)],
                                          dtype=torch.float64), 33, 11)
    assert clear.is_settled() and not blurred.is_settled()
    blurred = dataclasses.replace(blurred, rank=7)      # at the upper bound: still no clean gap
    assert local_status(clear, 9, 9, []) == ("certified", 9)
    assert local_status(blurred, 9, 9, []) == ("certified", 9)
    assert local_status(clear, None, 7, []) == ("settled", 7)
    assert local_status(clear, 5, 7, []) == ("settled", 7)
    assert local_status(clear, 7, 9, []) == ("ambiguous", None)      # meets the lower bound only
    assert local_status(clear, None, 9, []) == ("ambiguous", None)
    assert local_status(blurred, None, 7, []) == ("ambiguous", None)  # no clean gap
    assert local_status(blurred, 7, 7, []) == ("certified", 7)
    notes: list = []
    local_status(clear, 7, 9, notes)
    assert "7 <= rank <= 9" in notes[0]


def test_mutant_loose_status_is_caught(monkeypatch):
    """Mutant: the old rule (a clear-gap float rank equal to the proven lower bound is settled)
    fails the degenerate-point check of the zero output map."""
    from neuromanifold.dimension import local

    def loose(nr, lower, upper, notes):
        if lower is not None and lower == upper:
            return "certified", upper
        if nr.is_settled() and (nr.rank == upper or nr.rank == lower):
            return "settled", nr.rank
        return "ambiguous", None

    monkeypatch.setattr(local, "local_status", loose)
    arch = _arch(values=2)
    b = random_block_weights(arch, 5)
    b["O_1_1"] = torch.zeros_like(b["O_1_1"])
    g = local_geometry(arch, b, seed=5, parts=False)
    with pytest.raises(AssertionError):
        _degenerate(g, 64, 42)


def test_generic_dimension_says_method_and_status_once_when_they_agree():
    """A certified generic dimension read `certified, certified (neuromanifold_dim auto)` (issue
    39, item 8); a numerical one still says both words."""
    from neuromanifold.dimension.local import _generic  # noqa: PLC0415

    assert _generic(Architecture((3, 2), 3, 3), 0, 14, None) == (
        14, "certified (neuromanifold_dim auto)", True)
    assert _generic(Architecture((3, 3, 3), (2, 2), 3, "softmax"), 0, 25, None)[1] == \
        "numerical, settled (neuromanifold_dim auto)"


def test_gram_part_blocks_are_read_off_their_layer(monkeypatch):
    """Without a split (the random point's pass) the Gram route accumulates only the blocks of
    the outermost parts and reads a head's, an MLP's and a norm's off its layer's: at a point
    with head 2's value map and one MLP row zeroed, every part's rank equals the dense route's
    (a sub-block read at the wrong columns, e.g. head 1's for head 2, would not)."""
    from neuromanifold.core.blocks import flatten_blocks
    from neuromanifold.core.seeds import seeded_generator
    from neuromanifold.core.tokens import input_stream

    arch = _arch(heads=3, mlp=4, activation="gelu", norm="layernorm")
    b = random_block_weights(arch, 29)
    b["V_1_2"] = torch.zeros_like(b["V_1_2"])
    b["P_1"][1] = 0.0
    params = flatten_blocks(arch, b)
    X = input_stream(arch, seeded_generator(29, "inputs"))(40)
    parts = local_parts.network_parts(arch)
    assert [p.name for p in local_parts._outermost(parts)] == ["layer 1"]
    dense = local_parts.spectrum(arch, params, X, None, parts, gram=False, chunk=8)
    monkeypatch.setattr(local_parts, "GRAM_BLOCK", 16)
    gram = local_parts.spectrum(arch, params, X, None, parts, gram=True, chunk=8)
    assert {k: r.rank for k, r in gram.part_ranks.items()} == {k: r.rank for k, r in dense.part_ranks.items()}
    heads = [gram.part_ranks[f"layer 1 head {h}"].rank for h in (1, 2, 3)]
    assert heads[1] < heads[0] == heads[2]
