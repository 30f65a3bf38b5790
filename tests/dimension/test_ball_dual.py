"""Certified dimensions of non-polynomial transformer blocks (softmax heads, relu/gelu/tanh MLPs,
layernorm/rmsnorm): the ball forward pass, the catalogue's upper bound, `dim --method certified`
and `auto` (docs/certified_softmax.md, docs/blocks.md)."""

import json
import warnings

import flint
import numpy as np
import pytest
import torch

from neuromanifold import Architecture, neuromanifold_dim, rank_at_point
from neuromanifold.cli import main
from neuromanifold.core.blocks import block_forward, flatten_blocks, random_block_weights
from neuromanifold.symmetries.registry import CATALOGUE, tangent_rows

FAMILIES = tuple(f.name for f in CATALOGUE)
from neuromanifold.dimension.ball import UndecidedBall, prove_rank
from neuromanifold.dimension.ball_dual import (ball_block_forward, ball_block_jacobian,
                                                 block_upper_bound, certified_dim,
                                                 rational_point)
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.dimension.numerical import numerical_dim as block_numerical_dim
from neuromanifold.io.weightfiles import write_block_weights

# Pairwise-distinct sizes where the options allow (a residual needs equal widths).
CASES = {
    "softmax heads values": Architecture((3, 4, 2), (2, 3), 3, "softmax", heads=(2, 3),
                                         values=(2, 1)),
    "residual relu": Architecture((3, 3, 3), (2, 2), 3, "softmax", heads=(2, 2), residual=True,
                                  mlp=(4, 2), activation="relu"),
    "residual gelu": Architecture((3, 3, 3), (2, 2), 3, "softmax", heads=(2, 2), residual=True,
                                  mlp=(4, 2), activation="gelu"),
    "layernorm tanh residual": Architecture((3, 3, 3), (2, 2), 3, "softmax", heads=(1, 2),
                                            residual=True, mlp=(2, 3), activation="tanh",
                                            norm="layernorm"),
    "layernorm relu": Architecture((4, 4), (2,), 3, "softmax", heads=(2,), mlp=(3,),
                                   activation="relu", norm="layernorm"),
    "rmsnorm gelu residual": Architecture((4, 4), (2,), 3, "softmax", 0.7, heads=(2,),
                                          residual=True, mlp=(3,), activation="gelu",
                                          norm="rmsnorm"),
    "rmsnorm tanh": Architecture((4, 5, 3), (2, 3), 3, "softmax", heads=(2, 1), mlp=(2, 0),
                                 activation="tanh", norm="rmsnorm"),
    "one token relu": Architecture((3, 4), (2,), 1, "softmax", heads=(2,), mlp=(2,),
                                   activation="relu"),
    "lightning tanh": Architecture((3, 4), (2,), 2, heads=(2,), values=(3,), mlp=(5,),
                                   activation="tanh"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_certified_equals_numerical(name):
    """The ball lower bound meets the catalogue's F_p upper bound and equals the float64 rank."""
    arch = CASES[name]
    proved = certified_dim(arch, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        float_result = block_numerical_dim(arch, seed=5)
    assert proved.status == "certified" and float_result.status == "settled"
    assert proved.dimension == proved.lower_bound == proved.upper_bound == float_result.dimension
    assert proved.dimension + proved.fiber_dim == arch.n_params


@pytest.mark.parametrize("heads,truth", [(1, 18), (2, 36), (4, 72)])
def test_softmax_heads_certified(heads, truth):
    """d = d' = 3, a = v = 3: H softmax heads give 18 H, proved (per-head GL(a) and GL(v) only)."""
    arch = Architecture((3, 3), (3,), 3, "softmax", heads=(heads,), values=(3,))
    r = neuromanifold_dim(arch, method="certified")
    assert (r.dimension, r.status, r.method) == (truth, "certified", "certified")
    families = r.symmetries
    assert families["per-head GL(a) on (Q, K)"] == families["per-head GL(v) on (W, O)"] == 9 * heads


def test_bounds_apart_reported_as_lower_bound():
    """Lightning with layernorm, d = 3, a = 2, H = 2: 16 proved, the catalogue bounds it by 18
    (head mixing inside the mean-free plane is not in it); both bounds are reported."""
    arch = Architecture((3, 3), (2,), 3, heads=(2,), norm="layernorm")
    r = neuromanifold_dim(arch, method="certified")
    assert (r.dimension, r.lower_bound, r.upper_bound, r.status) == (16, 16, 18, "lower-bound")
    assert any("bounds do not meet: 16 <= dim M <= 18" in n for n in r.notes)


ARCH_FORWARD = Architecture((3, 3, 3), (2, 3), 4, "softmax", 0.7, heads=(2, 1), values=(2, 4),
                            residual=True, mlp=(5, 2), activation="gelu", norm="layernorm")


def test_ball_forward_midpoint_matches_float():
    """The arb forward pass's midpoints equal `block_forward` in float64 (to 1e-12), tight balls."""
    blocks, X = rational_point(ARCH_FORWARD, 3, 3)
    old = flint.ctx.prec
    flint.ctx.prec = 100
    try:
        values, _ = ball_block_forward(ARCH_FORWARD, blocks, X, [0, 7])
    finally:
        flint.ctx.prec = old
    mid = np.vectorize(lambda e: float(e.mid()))(values)
    assert np.abs(mid - block_forward(ARCH_FORWARD, blocks, X).numpy()).max() < 1e-12
    assert max(float(e.rad()) for e in values.flat) < 1e-20


@pytest.mark.parametrize("arch", [
    ARCH_FORWARD, CASES["layernorm relu"], CASES["rmsnorm tanh"],
    Architecture((2, 3), (3,), 2, "softmax", values=(4,), mlp=(5,), activation="square"),
], ids=["layernorm gelu", "layernorm relu", "rmsnorm tanh", "softmax square"])
def test_ball_jacobian_contains_autodiff(arch):
    """At 40 bits every ball of a Jacobian block contains the float64 autodiff entry."""
    blocks, X = rational_point(arch, 4, 3)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    rows, cols = list(range(0, J.shape[0], 2)), list(range(0, arch.n_params, 3))
    old = flint.ctx.prec
    flint.ctx.prec = 40
    try:
        block = ball_block_jacobian(arch, blocks, X, rows, cols)
    finally:
        flint.ctx.prec = old
    expected = J[rows][:, cols].numpy()
    assert all(ball.contains(flint.arb(float(x))) for ball, x in zip(block.flat, expected.flat))
    assert np.abs(expected).max() > 0.1


def test_relu_at_zero_is_undecided_not_guessed():
    """A relu input that is exactly 0 has no derivative: the ball pass stops, nothing is proved."""
    arch = Architecture((3, 3), (2,), 3, "softmax", heads=(2,), mlp=(4,), activation="relu")
    blocks, X = rational_point(arch, 1, 2)
    blocks["P_1"][1] = 0.0
    with pytest.raises(UndecidedBall, match="relu input ball contains 0"):
        ball_block_forward(arch, blocks, X, [0])
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    ball = prove_rank(J, 5, lambda rows, cols: ball_block_jacobian(arch, blocks, X, rows, cols),
                      precision=512)
    assert ball.proved == 0 and "relu" in ball.notes[0]


def test_never_proves_more_than_the_upper_bound():
    """Soundness: a block one larger than the catalogue's upper bound never gets a proof."""
    arch = CASES["layernorm relu"]
    upper, _ = block_upper_bound(arch)
    blocks, X = rational_point(arch, 0, 14)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    ball = prove_rank(J, upper + 1, lambda r, c: ball_block_jacobian(arch, blocks, X, r, c),
                      precision=128)
    assert ball.proved == 0 and ball.precision == 1024


@pytest.mark.parametrize("arch,families", [
    (CASES["layernorm relu"], ("layernorm mean directions", "layernorm shifts", "norm rotations")),
    (CASES["rmsnorm tanh"], ("norm rotations",)),
    (CASES["one token relu"], ("one-token softmax",)),
], ids=["layernorm", "rmsnorm", "one token"])
def test_new_families_leave_outputs_unchanged(arch, families):
    """The norm and one-token families are present and lie in the float Jacobian's kernel."""
    blocks = random_block_weights(arch, seed=6)
    tangents, counts = tangent_rows(arch, blocks)
    count = dict(counts)
    assert [f for f, _ in counts] == list(FAMILIES) and all(count[f] > 0 for f in families)
    X = torch.randn((3, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(8))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    image = J @ tangents.T
    assert float(image.abs().max()) < 1e-9 * float(J.abs().max()) * float(tangents.abs().max())


def test_cli_certified_block_json(capsys):
    """`dim --method certified` of a softmax block with values, residual, relu MLP and layernorm."""
    code = main(["dim", "--widths", "3,3", "--keys", "2", "--heads", "2", "--values", "4",
                 "--residual", "--mlp", "5", "--activation", "relu", "--norm", "layernorm",
                 "--attention", "softmax", "--method", "certified", "--seed", "3", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["status"] == "certified"
    assert data["lower_bound"] == data["upper_bound"] == data["dimension"] == 40
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numerical = neuromanifold_dim(RELU_LAYERNORM, method="numerical", seed=3)
    assert data["dimension"] == numerical.dimension


RELU_LAYERNORM = Architecture((3, 3), (2,), 3, "softmax", heads=(2,), values=(4,), residual=True,
                              mlp=(5,), activation="relu", norm="layernorm")


def test_relu_rank_depends_on_the_point():
    """relu: the weights of seed 1 have Jacobian rank 38 (float64 and balls agree, 40 x 40 blocks
    are singular to 1024 bits), below the dimension 40 that other seeds prove: the certified path
    reports 38 <= dim <= 40 there, never 38 as the dimension."""
    low = certified_dim(RELU_LAYERNORM, seed=1)
    assert (low.status, low.lower_bound, low.upper_bound) == ("lower-bound", 38, 40)
    assert certified_dim(RELU_LAYERNORM, seed=3).status == "certified"


def test_auto_escalates_a_thin_block_gap():
    """`auto`: a settled float rank with a gap under 6 decades is escalated and proved."""
    arch = Architecture((4, 4, 4), (2, 2), 3, "softmax", heads=(2, 2), mlp=(3, 3),
                        activation="gelu", norm="layernorm")
    r = neuromanifold_dim(arch, method="auto")
    assert (r.dimension, r.status, r.method) == (98, "certified", "certified")
    assert r.notes[0].startswith("auto: numerical first gave 98 (gap")
    assert "escalated to the certified path" in r.notes[0]


def test_auto_keeps_a_clear_block_gap():
    """`auto`: a clear float rank of a block stays numerical and says it was not escalated."""
    arch = CASES["residual gelu"]
    r = neuromanifold_dim(arch, method="auto")
    assert (r.dimension, r.status, r.method) == (104, "settled", "numerical")
    assert any("not escalated" in n for n in r.notes)


def test_rank_at_block_point_certified_and_degenerate():
    """`rank_at_point` of block weights: 49 proved at seed 5's weights (layernorm, relu); at
    seed 1's relu weights 38 is proved and 40 is not, so the answer is 38 <= rank <= 40."""
    arch = CASES["layernorm relu"]
    r = rank_at_point(arch, random_block_weights(arch, 5), method="certified", generic=False)
    assert (r.rank, r.status, r.upper_bound) == (49, "certified", 49)
    low = rank_at_point(RELU_LAYERNORM, random_block_weights(RELU_LAYERNORM, 1), method="auto",
                        generic=False)
    assert (low.rank, low.status, low.lower_bound, low.upper_bound) == (38, "lower-bound", 38, 40)


def test_rank_at_block_point_rejects_missing_blocks():
    """Block weights missing a block get the one-line template error naming it."""
    arch = CASES["layernorm relu"]
    blocks = random_block_weights(arch, 5)
    del blocks["n_1"]
    with pytest.raises(ValueError, match=r"`weights` must be a block n_1 of shape \(4, 1\)"):
        rank_at_point(arch, blocks)


def test_cli_rank_of_a_block_file(tmp_path, capsys):
    """`rank --weights` reads a block file (with --activation, --norm) and proves the rank."""
    arch = Architecture((4, 4), (2,), 3, "softmax", heads=(2,), residual=True, mlp=(3,),
                        activation="gelu", norm="rmsnorm")
    path = write_block_weights(tmp_path / "w.npz",
                               {k: v.numpy() for k, v in random_block_weights(arch, 2).items()})
    code = main(["rank", "--weights", str(path), "--attention", "softmax", "--residual",
                 "--activation", "gelu", "--norm", "rmsnorm", "--method",
                 "certified", "--no-generic", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and (data["rank"], data["status"]) == (80, "certified")


def test_relu_rank_below_the_bound_is_a_lower_bound_not_settled():
    """A relu network's clear rank at one point below the symmetry bound is a lower bound only."""
    arch = Architecture((3, 3), (2,), 3, "softmax", heads=(2,), values=(4,), residual=True,
                        mlp=(5,), activation="relu", norm="layernorm")
    low = neuromanifold_dim(arch, method="numerical", seed=1)
    assert (low.status, low.dimension, low.lower_bound, low.upper_bound) == ("lower-bound", 38, 38, 40)
    assert not low.is_settled and "piecewise analytic" in " ".join(low.notes)
    high = neuromanifold_dim(arch, method="numerical", seed=2)
    assert (high.status, high.dimension) == ("settled", 40)


def test_slowly_decaying_spectrum_still_proves_a_strong_lower_bound():
    """When the bound is not proved, the fallback tries counts above round-off, not only the largest gap."""
    arch = Architecture((4, 3, 4), (2, 2), 3, "softmax", heads=(1, 2), mlp=(3, 2),
                        activation="square", norm="layernorm")
    r = neuromanifold_dim(arch, method="certified", seed=0)
    # An independent float64 rank reads about 47 here; the largest-gap rule alone read 4.
    assert r.status == "lower-bound" and 40 <= r.lower_bound <= r.upper_bound == 50


# One token, softmax, residual, no norm: every attention layer is z -> (I + V) z (family 13).
ONE_TOKEN = {
    "three layers": Architecture((3, 3, 3, 3), (2, 1, 3), 1, "softmax", heads=(2, 3, 1),
                                 residual=True, mlp=(2, 0, 4), activation="tanh"),
    "stacked values": Architecture((4, 4, 4), (2, 3), 1, "softmax", 0.7, heads=(2, 3),
                                   values=(2, 3), residual=True, mlp=(3, 5), activation="gelu"),
    "wide value": Architecture((5, 5, 5), (3, 2), 1, "softmax", heads=(1, 2), values=(6, 3),
                               residual=True, mlp=(2, 4), activation="relu"),
}


def _assert_in_kernel(arch, blocks, rows, seed):
    """rows (tangents) map to round-off under the float Jacobian at 4 one-token inputs."""
    X = torch.randn((4, arch.widths[0], 1), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    assert float((J @ rows.T).abs().max()) < 1e-10 * float(J.abs().max()) * float(rows.abs().max())


def _layer_value(arch, blocks, j):
    """V_j = sum over heads of the value maps (O W with value widths)."""
    return sum(blocks[f"V_{j}_{h}"] if f"V_{j}_{h}" in blocks
               else blocks[f"O_{j}_{h}"] @ blocks[f"W_{j}_{h}"]
               for h in range(1, arch.head_counts[j - 1] + 1))


def _add_to_layer_value(arch, blocks, j, delta):
    """Blocks whose layer-j value sum is V_j + delta: on V_{j,1}, or O_{j,h} += delta pinv(S)_h
    with S the heads' W stacked (pinv(S) S = I when S has full column rank)."""
    out = dict(blocks)
    if f"V_{j}_1" in blocks:
        out[f"V_{j}_1"] = blocks[f"V_{j}_1"] + delta
        return out
    v = arch.values[j - 1]
    heads = range(1, arch.head_counts[j - 1] + 1)
    lift = torch.linalg.pinv(torch.cat([blocks[f"W_{j}_{h}"] for h in heads]))
    for h in heads:
        out[f"O_{j}_{h}"] = blocks[f"O_{j}_{h}"] + delta @ lift[:, (h - 1) * v: h * v]
    return out


ONE_TOKEN_FAMILY = "one-token basis changes"


def _family_rows(tangents, counts, name: str):
    """(the family's count, its rows of `tangent_rows`' matrix), found by name (families after
    it in the registry are appended by later features)."""
    start = 0
    for family, count in counts:
        if family == name:
            return count, tangents[start:start + count]
        start += count
    raise AssertionError(f"{name} not among {counts}")


@pytest.mark.parametrize("name", sorted(ONE_TOKEN))
def test_one_token_basis_changes_leave_outputs_unchanged(name):
    """Family 13: d^2 tangents per pair of consecutive layers, in the float Jacobian's kernel,
    and a finite B (V_i -> B (I + V_i) - I, P_i -> P_i B^-1, U_i -> B U_i,
    V_{i+1} -> (I + V_{i+1}) B^-1 - I) leaves the outputs unchanged to round-off."""
    arch = ONE_TOKEN[name]
    d, layers = arch.widths[0], arch.n_layers
    blocks = random_block_weights(arch, seed=4)
    tangents, counts = tangent_rows(arch, blocks)
    count, family = _family_rows(tangents, counts, ONE_TOKEN_FAMILY)
    assert count == d * d * (layers - 1)
    assert int(torch.linalg.matrix_rank(family)) == d * d * (layers - 1)
    _assert_in_kernel(arch, blocks, family, 9)
    X = torch.randn((5, d, 1), dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    before = block_forward(arch, blocks, X)
    eye = torch.eye(d, dtype=torch.float64)
    for i in range(1, layers):
        B = eye + 0.3 * torch.randn((d, d), dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(10 + i))
        moved = _add_to_layer_value(arch, blocks, i,
                                    B @ (eye + _layer_value(arch, blocks, i)) - eye
                                    - _layer_value(arch, blocks, i))
        after_value = _layer_value(arch, blocks, i + 1)
        moved = _add_to_layer_value(arch, moved, i + 1, (eye + after_value) @ torch.linalg.inv(B)
                                    - eye - after_value)
        if arch.mlp_widths[i - 1]:
            moved[f"P_{i}"] = blocks[f"P_{i}"] @ torch.linalg.inv(B)
            moved[f"U_{i}"] = B @ blocks[f"U_{i}"]
        changed = max(float((moved[k] - blocks[k]).abs().max()) for k in blocks)
        assert changed > 0.05
        assert torch.allclose(block_forward(arch, moved, X), before, atol=1e-12, rtol=1e-11)


# Value widths with H v < d: the heads' sum has rank H v, so only the X whose dV stays in that
# set act; each such layer costs (d - H v)^2 of the d^2 (l - 1) directions.
NARROW = {
    "three layers": (Architecture((4, 4, 4, 4), (2, 3, 1), 1, "softmax", heads=(1, 2, 1),
                                  values=(2, 1, 3), residual=True, mlp=(3, 0, 2),
                                  activation="gelu"), 2 * 16 - 4 - 4 - 1),
    "two layers": (Architecture((5, 5, 5), (3, 2), 1, "softmax", heads=(2, 1), values=(1, 4),
                                residual=True, mlp=(2, 3), activation="tanh"), 25 - 9 - 1),
}


@pytest.mark.parametrize("name", sorted(NARROW))
def test_one_token_basis_changes_with_narrow_values(name):
    """H v < d: family 13 has d^2 (l - 1) - sum (d - H v)^2 independent tangents, all in the float
    Jacobian's kernel (dO = M W^+, dW = O^+ M (1 - W^+ W) realises each layer's dV = M)."""
    arch, count = NARROW[name]
    blocks = random_block_weights(arch, seed=7)
    tangents, counts = tangent_rows(arch, blocks)
    measured, family = _family_rows(tangents, counts, ONE_TOKEN_FAMILY)
    assert measured == count
    assert int(torch.linalg.matrix_rank(family)) == count
    _assert_in_kernel(arch, blocks, family, 3)


@pytest.mark.parametrize("arch,truth,family", [
    (Architecture((4, 4, 4), (2, 2), 1, "softmax", residual=True, mlp=(2, 2), activation="gelu"),
     48, 16),
    (Architecture((4, 4, 4), (2, 3), 1, "softmax", values=(2, 3), residual=True, mlp=(3, 2),
                  activation="gelu"), 56, 11),
], ids=["unfactored", "narrow values"])
def test_one_token_basis_changes_certify(arch, truth, family):
    """t = 1, residual, gelu MLP: widths 4,4,4 keys 2,2 (96 parameters) has dimension 48, and
    keys 2,3 values 2,3 (120) has 56, both certified (the bounds were 64 and 67 before family 13)
    and settled numerically with the bound equal to the rank."""
    r = neuromanifold_dim(arch, method="certified")
    assert (r.dimension, r.status, r.lower_bound, r.upper_bound) == (truth, "certified", truth,
                                                                     truth)
    assert r.symmetries["one-token basis changes"] == family
    n = neuromanifold_dim(arch, method="numerical", seed=1)
    assert (n.dimension, n.status, n.upper_bound) == (truth, "settled", truth)


@pytest.mark.parametrize("arch", [
    Architecture((4, 4, 4), (2, 2), 2, "softmax", residual=True, mlp=(2, 3), activation="gelu"),
    Architecture((4, 4, 4), (2, 3), 1, "softmax", residual=True, mlp=(2, 3), activation="gelu",
                 norm="rmsnorm"),
    Architecture((4, 4, 4), (2, 3), 1, "softmax", values=(1, 1), residual=True, mlp=(2, 3),
                 activation="gelu"),
    Architecture((4, 4, 4), (2, 3), 1, "lightning", residual=True, mlp=(2, 3)),
    Architecture((4, 4, 4), (2, 3), 1, "softmax", mlp=(2, 3), activation="gelu"),
], ids=["two tokens", "rmsnorm", "rank one values", "lightning", "no residual"])
def test_one_token_basis_changes_only_where_layers_are_linear(arch):
    """Family 13 is absent for t = 2, a norm, lightning, no residual (family 5 acts there): the
    layers are not linear maps of the stream; and with rank-one values on d = 4 the 2 (4 - 1)^2
    conditions exceed the 16 directions."""
    _, counts = tangent_rows(arch, random_block_weights(arch, seed=4))
    assert dict(counts)[ONE_TOKEN_FAMILY] == 0


def test_one_token_value_widths_only_the_heads_sum_matters():
    """t = 1 with value widths: GL(H v) on the heads' stacked W and side-by-side O (family 11's
    cross-head part, H (H - 1) v^2 rows) lies in the kernel, and closes a layernorm block:
    widths 4,4,4, keys 2,3, heads 2,2, values 1,3, tanh MLP 3,2 has dimension 57 of 200,
    certified."""
    arch = Architecture((4, 4, 4), (2, 3), 1, "softmax", heads=(2, 2), values=(1, 3),
                        residual=True, mlp=(3, 2), activation="tanh", norm="layernorm")
    blocks = random_block_weights(arch, seed=5)
    tangents, counts = tangent_rows(arch, blocks)
    count = dict(counts)
    assert count["one-token softmax"] == 2 * 2 * (2 + 3) * 4 + 2 * 1 * (1 + 9)
    _assert_in_kernel(arch, blocks, tangents, 6)
    r = certified_dim(arch, seed=2)
    assert (r.dimension, r.status, r.upper_bound) == (57, "certified", 57)


NETWORK_132 = Architecture((3, 3), 2, 2, "softmax", causal=True, positions="learned", bias=True,
                           mlp_bias=True, residual=True, mlp=2, activation="gelu",
                           norm="layernorm", final_norm=True, vocab=6, tied=True)


def test_tangents_entering_a_norm_are_balls(monkeypatch):
    """Every tangent entry a norm divides by d is a ball: the unit directions of learned
    positions were Python integers, 1/3 of one a rounded float outside every ball, and a
    determinant built on them 'certified' 49 where the dimension is 47 (independent check:
    float64 rank 47 with a 7.8-decade gap, 60-digit rank 47)."""
    from neuromanifold.dimension import ball_dual

    seen = []
    original = ball_dual._normalised

    def checked(Z, kind, eps):
        if Z.dx is not None:
            seen.append(all(isinstance(e, flint.arb) for e in Z.dx.flat))
        return original(Z, kind, eps)

    monkeypatch.setattr(ball_dual, "_normalised", checked)
    blocks, X = rational_point(NETWORK_132, 0, 2)
    _, tangents = ball_block_forward(NETWORK_132, blocks, X, list(range(NETWORK_132.n_params)))
    assert seen and all(seen)
    assert all(isinstance(e, flint.arb) for e in tangents.flat)


def test_learned_positions_behind_a_layernorm_not_over_certified():
    """The network above: 47 (lower bound, the registry's bound is 49), never 49 certified."""
    result = neuromanifold_dim(NETWORK_132, method="certified", seed=0)
    assert result.lower_bound <= 47 <= result.upper_bound
    assert result.status != "certified" or result.dimension == 47


def test_one_token_one_layer_with_narrow_values_has_no_basis_change():
    """One layer has no pair of consecutive layers: family 13 builds nothing (it stacked an empty
    list of conditions and raised; found by an independent check), and the network is certified
    at its float rank."""
    arch = Architecture((4, 4), 1, 1, "softmax", values=1, residual=True)
    _, counts = tangent_rows(arch, random_block_weights(arch, seed=4))
    assert dict(counts)[ONE_TOKEN_FAMILY] == 0
    from neuromanifold.dimension.api import neuromanifold_dim

    numerical = neuromanifold_dim(arch, method="numerical", seed=0)
    certified = neuromanifold_dim(arch, method="certified", seed=0)
    assert certified.lower_bound == numerical.dimension
