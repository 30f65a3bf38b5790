"""Decoder options of the native model: causal masks, grouped key/value heads, biases, gated MLPs
(docs/decoder_features.md): architecture, layout, the one map in every arithmetic, the symmetry
families, the engines' values and statuses, the CLI and the docs table."""

import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from neuromanifold.cli import main
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import (block_forward, block_layout, flatten_blocks,
                                       random_block_weights)
from neuromanifold.core.formulas import ambient_bound, block_formula
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.dimension.fp_dual import jacobian_mod_p
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.errors import InputError
from neuromanifold.symmetries.registry import tangent_rows

ROOT = Path(__file__).resolve().parents[2]
P = 2147483629

# The map and the families on these; tests/core/test_blocks.py's DECODER_BLOCKS check the map
# against a written-out loop and in the four arithmetics.
DECODERS = {
    "causal lightning": Architecture((3, 3), 2, 3, causal=True),
    "causal softmax deep": Architecture((3, 4, 3), 2, 3, "softmax", causal=True, heads=2),
    "grouped lightning": Architecture((3, 3), 3, 2, heads=4, kv_heads=2, causal=True),
    "grouped softmax values": Architecture((3, 3), 2, 3, "softmax", heads=4, kv_heads=2, values=2),
    "bias lightning deep": Architecture((3, 3, 3), 2, 2, bias=True, heads=2, kv_heads=1, mlp=2),
    "bias softmax values mlp": Architecture((3, 3, 3), 2, 3, "softmax", 0.5, bias=True, values=2,
                                            heads=2, mlp=2, mlp_bias=True, activation="relu"),
    "gated square residual": Architecture((3, 3), 2, 3, residual=True, mlp=3, mlp_kind="gated",
                                          mlp_bias=True, bias=True),
    "gated silu layernorm": Architecture((3, 3, 3), 2, 3, "softmax", mlp=2, mlp_kind="gated",
                                         activation="silu", norm="layernorm", bias=True,
                                         mlp_bias=True),
    "llama-like rmsnorm": Architecture((4, 4), 2, 3, "softmax", heads=4, kv_heads=2, causal=True,
                                       residual=True, norm="rmsnorm", mlp=3, mlp_kind="gated",
                                       activation="silu"),
    "one token bias values": Architecture((3, 3), 2, 1, "softmax", heads=2, kv_heads=1, bias=True,
                                          values=2, mlp=2, residual=True),
}


def _quiet_dim(arch, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method=method, **kw)


# ------------------------------------------------------------------ architecture and layout

def test_defaults_leave_every_network_unchanged():
    """The decoder options at their defaults are today's networks: same value, layout, draws,
    repr and dict."""
    for old in (Architecture((4, 3, 5), (2, 3), 3),
                Architecture((4, 4), 2, 3, heads=2, values=2, residual=True, mlp=3, norm="rmsnorm")):
        same = Architecture(old.widths, old.keys, old.tokens, heads=old.heads, values=old.values,
                            residual=old.residual, mlp=old.mlp, norm=old.norm, causal=False,
                            kv_heads=None, bias=False, mlp_bias=False, mlp_kind="plain")
        assert same == old and same.is_block == old.is_block
        assert block_layout(same) == block_layout(old) and repr(same) == repr(old)
        assert same.to_dict() == old.to_dict() and str(same) == str(old)
        new, ref = random_block_weights(same, 4), random_block_weights(old, 4)
        assert all(torch.equal(new[k], ref[k]) for k in ref)


def test_layout_names_follow_the_contract():
    """Grouped heads (transformers' grouping): every head's K first, then Q and W per group, then
    every head's O; biases after their maps; bo after the heads; a gated MLP's G before P; MLP
    biases after G, P, U."""
    arch = Architecture((3, 3), 2, 3, heads=4, kv_heads=2, values=2, bias=True, mlp=5,
                        mlp_kind="gated", mlp_bias=True)
    names = [(n, s) for n, s, _ in block_layout(arch)]
    assert names == [
        ("K_1_1", (2, 3)), ("bk_1_1", (2, 1)), ("K_1_2", (2, 3)), ("bk_1_2", (2, 1)),
        ("K_1_3", (2, 3)), ("bk_1_3", (2, 1)), ("K_1_4", (2, 3)), ("bk_1_4", (2, 1)),
        ("Q_1_1", (2, 3)), ("bq_1_1", (2, 1)), ("W_1_1", (2, 3)), ("bv_1_1", (2, 1)),
        ("Q_1_2", (2, 3)), ("bq_1_2", (2, 1)), ("W_1_2", (2, 3)), ("bv_1_2", (2, 1)),
        ("O_1_1", (3, 2)), ("O_1_2", (3, 2)), ("O_1_3", (3, 2)), ("O_1_4", (3, 2)), ("bo_1", (3, 1)), ("G_1", (5, 3)), ("bg_1", (5, 1)), ("P_1", (5, 3)), ("bp_1", (5, 1)),
        ("U_1", (3, 5)), ("bu_1", (3, 1))]
    # n_params without torch: 4 heads (a d + a + d v), 2 groups (a d + a + v d + v), bo, MLP
    a, d, v, m = 2, 3, 2, 5
    assert arch.n_params == 4 * (a * d + a + d * v) + 2 * (a * d + a + v * d + v) + d \
        + 2 * (m * d + m) + d * m + d
    assert [n for n, _, _ in block_layout(Architecture((3, 3), 2, 3, bias=True))] == [
        "Q_1_1", "bq_1_1", "K_1_1", "bk_1_1", "V_1_1", "bv_1_1", "bo_1"]
    assert arch.group_of(1, 1) == arch.group_of(1, 2) == 1 and arch.group_of(1, 3) == 2


def test_random_biases_and_gains_are_drawn_as_the_contract_says():
    """Biases 0.25 N(0, 1) (centred), the gate like P."""
    arch = Architecture((4, 4), 2, 3, bias=True, mlp=40, mlp_kind="gated", mlp_bias=True)
    blocks = random_block_weights(arch, 0)
    assert abs(float(blocks["bg_1"].mean())) < 0.15 and 0.15 < float(blocks["bg_1"].std()) < 0.35
    assert 0.3 < float(blocks["G_1"].std()) < 0.7


@pytest.mark.parametrize("kwargs,match", [
    (dict(heads=4, kv_heads=3), "divisor of the heads of layer 1"),
    (dict(kv_heads=(1, 1)), "one key/value head count per layer"),
    (dict(kv_heads=0), "kv_heads"),
    (dict(mlp_bias=True), "used with an MLP"),
    (dict(mlp_kind="gated"), "used with an MLP"),
    (dict(mlp=2, mlp_kind="glu"), "one of 'plain', 'gated'"),
    (dict(causal="yes"), "True or False"),
    (dict(bias=1), "True or False"),
    (dict(mlp=2, activation="swish"), "silu"),
])
def test_bad_decoder_options_are_refused_in_one_line(kwargs, match):
    with pytest.raises((InputError, TypeError, ValueError), match=match) as info:
        Architecture((3, 3), 2, 3, **kwargs)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ the map

def test_causal_token_ignores_later_tokens():
    """Output token i depends on tokens j <= i only (lightning and softmax, deep)."""
    for attention in ("lightning", "softmax"):
        arch = Architecture((3, 3, 3), 2, 4, attention, causal=True, heads=2, bias=True)
        blocks = random_block_weights(arch, 2)
        X = torch.randn((1, 3, 4), dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        Y = X.clone()
        Y[..., 2:] += 1.0
        a, b = block_forward(arch, blocks, X), block_forward(arch, blocks, Y)
        assert torch.equal(a[..., :2], b[..., :2]) and not torch.allclose(a[..., 2:], b[..., 2:])


@pytest.mark.parametrize("name", ["causal softmax deep", "bias softmax values mlp",
                                  "gated silu layernorm", "llama-like rmsnorm"])
def test_ball_map_and_tangents_contain_the_float_ones(name):
    """Analytic decoder networks: the ball values and tangent columns (BallDual) contain the
    float64 map and its autodiff Jacobian columns, to float round-off."""
    import flint

    from neuromanifold.dimension.ball_dual import ball_block_forward

    arch = DECODERS[name]
    flint.ctx.prec = 128
    blocks = random_block_weights(arch, 1)
    X = torch.randn((1, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(5))
    cols = list(range(0, arch.n_params, max(1, arch.n_params // 9)))
    values, tangents = ball_block_forward(arch, blocks, X, cols)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    floats = block_forward(arch, blocks, X)
    mids = np.vectorize(lambda b: float(b.mid()))
    assert np.allclose(mids(values), floats.numpy(), atol=1e-12)
    assert np.allclose(mids(tangents[0]).reshape(len(cols), -1).T, J[:, cols].numpy(), atol=1e-10)


@pytest.mark.parametrize("name", ["gated silu layernorm", "bias softmax values mlp", "grouped lightning"])
def test_jacobian_matches_finite_differences(name):
    arch = DECODERS[name]
    blocks = random_block_weights(arch, 2)
    w = flatten_blocks(arch, blocks)
    X = torch.randn((2, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(6))
    J = block_jacobian(arch, w, X)
    from neuromanifold.core.blocks import block_forward_flat

    h = 1e-6
    for c in range(0, arch.n_params, max(1, arch.n_params // 12)):
        e = torch.zeros_like(w)
        e[c] = h
        fd = (block_forward_flat(arch, w + e, X) - block_forward_flat(arch, w - e, X)).reshape(-1) / (2 * h)
        assert torch.allclose(fd, J[:, c], atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("name", ["gated square residual", "bias lightning deep", "causal lightning"])
def test_modular_jacobian_matches_float_on_integers(name):
    arch = DECODERS[name]
    g = torch.Generator().manual_seed(7)
    blocks = {n: torch.randint(-1, 2, s, generator=g).to(torch.float64) for n, s, _ in block_layout(arch)}
    X = torch.randint(-1, 2, (2, arch.widths[0], arch.tokens), generator=g).to(torch.float64)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    fp_blocks = {k: v.to(torch.int64).remainder(P) for k, v in blocks.items()}
    Jp = jacobian_mod_p(arch, fp_blocks, X.to(torch.int64).remainder(P), P)
    assert torch.equal(J.round().to(torch.int64).remainder(P), Jp)


# ------------------------------------------------------------------ symmetries and engines

@pytest.mark.parametrize("name", sorted(DECODERS))
def test_catalogue_tangents_leave_outputs_unchanged(name):
    """Every family's tangents (new ones and the ones extended to groups and biases) lie in the
    float Jacobian's kernel."""
    arch = DECODERS[name]
    blocks = random_block_weights(arch, seed=3)
    tangents, _ = tangent_rows(arch, blocks)
    X = torch.randn((3, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(2))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    image = J @ tangents.T
    assert float(image.abs().max()) < 1e-9 * float(J.abs().max()) * max(1.0, float(tangents.abs().max()))


def test_new_families_have_their_proved_counts():
    """The generic counts of the decoder families equal their tangents' rank at a random point."""
    from neuromanifold.symmetries.registry import family

    arch = Architecture((3, 3), 2, 3, "softmax", heads=4, kv_heads=2, bias=True)
    tangents, counts = tangent_rows(arch, random_block_weights(arch, 1))
    start = 0
    for name, n in counts:
        fam = family(name)
        if fam.generic_count is not None and fam.applies(arch) and n:
            assert torch.linalg.matrix_rank(tangents[start:start + n]) == fam.count(arch), name
        start += n
    lightning = Architecture((3, 3), 2, 3, heads=4, kv_heads=2, bias=True)
    assert family("grouped key sums").count(lightning) == 2 * 2 * (3 + 1)


@pytest.mark.parametrize("arch,truth", [
    (Architecture((3, 3), 2, 3, causal=True), 16),
    (Architecture((3, 3, 3), 2, 2, causal=True, bias=True), 40),
    (Architecture((3, 3), 3, 3, heads=4, kv_heads=2), 32),
    (Architecture((3, 3), 2, 2, mlp=2, mlp_kind="gated", mlp_bias=True), 28),
], ids=["causal", "causal bias deep", "grouped", "gated"])
def test_exact_equals_numerical_and_is_certified(arch, truth):
    exact = _quiet_dim(arch, "certified")
    numerical = _quiet_dim(arch, "numerical")
    assert (exact.dimension, exact.status) == (truth, "certified")
    assert (numerical.dimension, numerical.status) == (truth, "settled")


def test_grouped_lightning_heads_are_one_head_per_group():
    """Lightning: the keys K_h of a group enter through their sum beside the shared V_g, so H heads
    in G groups have the dimension of G heads (the `grouped key sums` family); softmax keeps
    every K_h."""
    grouped = _quiet_dim(Architecture((3, 3), 2, 3, heads=4, kv_heads=2), "certified")
    two = _quiet_dim(Architecture((3, 3), 2, 3, heads=2), "certified")
    assert grouped.dimension == two.dimension == 32 and grouped.status == "certified"
    soft = _quiet_dim(Architecture((3, 3), 2, 3, "softmax", heads=4, kv_heads=2), "certified")
    assert (soft.dimension, soft.status) == (46, "certified")


def test_softmax_certified_through_balls():
    r = _quiet_dim(Architecture((3, 3), 2, 3, "softmax", causal=True, bias=True), "certified")
    assert (r.dimension, r.status, r.method) == (22, "certified", "certified")
    assert r.symmetries["softmax query bias"] == 2 and r.symmetries["value bias beside output bias"] == 3


def test_bounds_apart_stay_a_lower_bound():
    """Where the registry does not close the bound the status is never `certified`."""
    arch = Architecture((3, 4, 2), (2, 3), 2, "lightning", mlp=(2, 3), bias=True, mlp_bias=True)
    r = _quiet_dim(arch, "certified")
    assert (r.dimension, r.status, r.upper_bound) == (41, "lower-bound", 43)


def test_no_closed_form_or_ambient_bound_is_claimed_for_decoder_options():
    for arch in (Architecture((3, 3), 2, 3, causal=True), Architecture((3, 3), 2, 3, heads=2, kv_heads=1),
                 Architecture((3, 3), 2, 3, bias=True)):
        assert block_formula(arch).status == "none"
    assert ambient_bound(Architecture((3, 3), 2, 3, bias=True)) is None
    assert ambient_bound(Architecture((3, 3), 2, 3, causal=True)) == 54


def test_causal_saturation_ignores_the_first_token():
    """The first causal column aggregates one token (a one-hot column by construction); it is
    not counted as saturated."""
    from neuromanifold.dimension.saturation import saturation_counts

    arch = Architecture((3, 3), 2, 2, "softmax", causal=True)
    record = []
    block_forward(arch, random_block_weights(arch, 0), torch.randn(5, 3, 2, dtype=torch.float64),
                  record=record)
    saturated, total = saturation_counts(record)
    assert total == 5 and saturated == 0


def test_memory_estimates_cover_the_new_options():
    from neuromanifold.dimension.memory import certified_softmax_estimate, numerical_estimate

    small = Architecture((4, 4), 2, 3, "softmax", heads=2, residual=True, mlp=3)
    big = Architecture((4, 4), 2, 3, "softmax", heads=2, residual=True, mlp=3, causal=True,
                       bias=True, mlp_bias=True, mlp_kind="gated", activation="silu")
    assert numerical_estimate(big, None).peak >= numerical_estimate(small, None).peak
    assert certified_softmax_estimate(big, None, 128).peak > 0


# ------------------------------------------------------------------ CLI and docs

def test_cli_dim_takes_the_decoder_options(capsys):
    code = main(["dim", "--widths", "3,3", "--keys", "2", "--heads", "4", "--kv-heads", "2",
                 "--causal", "--bias", "--attention", "softmax", "--method", "certified", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code in (0, None)
    assert data["architecture"]["kv_heads"] == [2] and data["architecture"]["causal"] is True
    assert data["status"] == "certified"


@pytest.mark.parametrize("args", [
    ["--heads", "4", "--kv-heads", "3"], ["--mlp-bias"], ["--mlp", "2", "--mlp-kind", "glu"],
    ["--kv-heads", "x"], ["--mlp", "2", "--mlp-kind", "gated", "--activation", "swish"]])
def test_cli_bad_decoder_input_exits_2_in_one_line(args, capsys):
    code = main(["dim", "--widths", "3,3", "--keys", "2", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("neuromanifold: error:")


def test_rank_and_fiber_read_decoder_weight_files(tmp_path, capsys):
    """`rank` reads groups, biases and the gate from a file's names and the mask from --causal;
    `fiber` compares decoder networks (a file against itself: the same function)."""
    arch = Architecture((3, 3), 2, 3, "softmax", heads=2, kv_heads=1, bias=True, mlp=2,
                        mlp_kind="gated", mlp_bias=True, activation="silu", causal=True)
    path = tmp_path / "decoder.npz"
    np.savez(path, **{k: v.numpy() for k, v in random_block_weights(arch, 0).items()})
    code = main(["rank", "--weights", str(path), "--attention", "softmax", "--activation", "silu",
                 "--no-residual", "--causal", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code in (0, None) and data["read_as"]["architecture"] == str(arch)
    assert data["rank"] == data["upper_bound"] == data["generic_dimension"]
    code = main(["fiber", "--weights", str(path), "--other", str(path), "--attention", "softmax",
                 "--activation", "silu", "--no-residual", "--causal", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code in (0, None) and data["same_function"] is True


# The causal, grouping and models tables take from 15 s to over a minute each on 2 cores: they
# run with -m slow; the decoder and gqa tables (a few seconds) in the default run.
_SLOW_TABLE = pytest.mark.slow
_TABLES = {"decoder_table": lambda t: t.table(t.rows()),
           "causal_table": lambda t: t.causal_table(t.causal_rows()),
           "grouping_table": lambda t: t.grouping_table(t.grouping_rows()),
           "models_table": lambda t: t.table(t.model_rows()),
           "gqa_table": lambda t: t.gqa_table(t.gqa_rows())}


@pytest.mark.parametrize("marker", [
    "decoder_table", pytest.param("causal_table", marks=_SLOW_TABLE),
    pytest.param("grouping_table", marks=_SLOW_TABLE), pytest.param("models_table", marks=_SLOW_TABLE),
    "gqa_table"])
def test_docs_tables_are_what_the_script_computes(marker):
    """Every row of docs/decoder_features.md's decoder tables is recomputed
    (scripts/decoder_table.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import decoder_table
    finally:
        sys.path.pop(0)
    page = (ROOT / "docs" / "decoder_features.md").read_text(encoding="utf-8")
    block = re.search(rf"<!-- {marker} -->\n(.*?)\n<!-- /{marker} -->", page, re.S)
    assert block is not None, marker
    assert block.group(1).strip() == _TABLES[marker](decoder_table).strip(), marker


def test_float_rank_that_lost_directions_is_not_settled():
    """A deep causal lightning network (degree 216 in its inputs) whose float rank collapses at
    a seed (3 where the dimension is 27; it read `settled` before the late check) is caught by
    the exact late check: `ambiguous`, never a wrong `settled`."""
    arch = Architecture((3, 4, 3, 3), 2, 2, mlp=2, causal=True)
    r = _quiet_dim(arch, "numerical", seed=3)
    assert (r.dimension, r.status) == (3, "ambiguous")
    assert any("exact rank over F_p at a random point is 27 > the float rank 3" in n for n in r.notes)
    assert (_quiet_dim(arch, "numerical", seed=0).dimension, _quiet_dim(arch, "certified").status) \
        == (27, "certified")


COMBINED = [  # both halves of the features together (the docs' model rows and their neighbours)
    dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, causal=True, positions="rope",
         residual=True, mlp=3, mlp_kind="gated", vocab=8),
    dict(widths=(4, 4), keys=2, tokens=3, heads=2, causal=True, positions="learned", bias=True,
         residual=True, mlp=3, mlp_bias=True, vocab=8, tied=True),
    dict(widths=(4, 4), keys=4, tokens=3, heads=2, causal=True, positions="rope", rope_pairs=1,
         parallel=True, residual=True, mlp=3, bias=True, mlp_bias=True, vocab=8),
    dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, causal=True, positions="rope",
         parallel=True, residual=True, mlp=3, vocab=8),
    dict(widths=(3, 3, 3), keys=2, tokens=2, heads=2, bias=True, parallel=True, residual=True,
         mlp=2, mlp_bias=True),
    dict(widths=(3, 3), keys=2, tokens=3, heads=2, kv_heads=1, positions="learned", bias=True),
    # the families widened to groups, biases, gates and parallel blocks, on distinct sizes
    dict(widths=(4, 4), keys=2, tokens=2, heads=4, kv_heads=2, positions="rope", bias=True,
         residual=True, mlp=2, mlp_kind="gated", mlp_bias=True, vocab=7),
    dict(widths=(3, 3, 3), keys=2, tokens=2, heads=2, positions="learned", bias=True,
         parallel=True, residual=True, mlp=2, mlp_bias=True, vocab=6),
    dict(widths=(3, 4), keys=2, tokens=3, heads=2, kv_heads=1, positions="learned", bias=True,
         vocab=5),
    dict(widths=(3, 3), keys=3, tokens=2, heads=2, kv_heads=1, bias=True, vocab=5, tied=True,
         mlp=2, mlp_bias=True, mlp_kind="gated"),
]


@pytest.mark.parametrize("options", COMBINED, ids=lambda o: ",".join(sorted(o)))
def test_combined_features_keep_every_tangent_in_the_exact_kernel(options):
    """Every registry tangent lies in the kernel of the exact Jacobian mod p of lightning networks
    that combine the two halves of the features (parallel blocks with output biases once put one
    outside: the bound would have been unsound; the exact engine refused to use it)."""
    from neuromanifold.core.tokens import input_stream
    from neuromanifold.dimension.fp import DEFAULT_PRIME as p
    from neuromanifold.dimension.fp_dual import fp_ops, jacobian_mod_p, random_blocks_mod_p
    from neuromanifold.dimension.modular import matmul_mod
    from neuromanifold.symmetries.registry import tangent_rows

    arch = Architecture(**options)
    gen = torch.Generator().manual_seed(5)
    blocks = random_blocks_mod_p(arch, p, gen)
    T, counts = tangent_rows(arch, blocks, fp_ops(p))
    X = (input_stream(arch, gen, torch.int64)(40) if arch.vocab is not None
         else torch.randint(0, p, (40, arch.widths[0], arch.tokens), generator=gen))
    J = jacobian_mod_p(arch, blocks, X, p)
    assert not matmul_mod(J, T.remainder(p).T.contiguous(), p).any(), counts


@pytest.mark.parametrize("options", COMBINED + [
    dict(widths=(4, 4), keys=4, tokens=3, heads=2, positions="rope", rope_pairs=1, bias=True),
    dict(widths=(4, 4), keys=2, tokens=3, heads=2, norm="rmsnorm", qk_norm=True, bias=True),
    dict(widths=(4, 4), keys=2, tokens=3, heads=4, kv_heads=2, norm="rmsnorm", qk_norm=True),
    # layernorm and rmsnorm at the ends of a stream without a residual; QK-norm per group
    dict(widths=(3, 3), keys=2, tokens=3, vocab=5, norm="layernorm", final_norm=True),
    dict(widths=(3, 4, 3), keys=2, tokens=2, heads=2, kv_heads=1, vocab=6, norm="rmsnorm",
         bias=True, positions="learned"),
    dict(widths=(4, 3), keys=2, tokens=2, heads=2, vocab=6, norm="layernorm", final_norm=True,
         positions="learned", mlp=2, mlp_kind="gated"),
    dict(widths=(4, 4), keys=4, tokens=3, heads=4, kv_heads=2, norm="layernorm", qk_norm=True,
         positions="rope", rope_pairs=1, residual=True, mlp=2, mlp_kind="gated", bias=True,
         mlp_bias=True, vocab=6, final_norm=True)],
    ids=lambda o: ",".join(sorted(o)))
@pytest.mark.parametrize("attention", ["softmax", "lightning"])
def test_combined_features_keep_every_tangent_in_the_float_kernel(options, attention):
    """The same in float64 for softmax (and lightning behind norms): a softmax query bias before
    a rotation or a QK-norm, and grouped key sums behind a QK-norm, are not symmetries (the
    registry leaves them out there)."""
    from neuromanifold.core.blocks import flatten_blocks
    from neuromanifold.core.tokens import input_stream
    from neuromanifold.dimension.jacobians import block_jacobian
    from neuromanifold.symmetries.registry import tangent_rows

    activation = "gelu" if options.get("mlp") else "square"
    arch = Architecture(attention=attention, activation=activation, **options)
    blocks = random_block_weights(arch, 2)
    X = input_stream(arch, torch.Generator().manual_seed(3))(30)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    T, counts = tangent_rows(arch, blocks)
    if T.shape[0]:
        image = (J @ T.T).abs().max() / (J.abs().max() * max(1.0, float(T.abs().max())))
        assert float(image) < 1e-9, counts


@pytest.mark.parametrize("arch", [
    Architecture((4, 4), 4, 3, heads=4, kv_heads=2, positions="rope", rope_pairs=1, bias=True),
    Architecture((5, 5), 4, 2, "softmax", heads=3, kv_heads=1, positions="rope", bias=True),
    Architecture((4, 4), 3, 3, "softmax", heads=4, kv_heads=2, norm="rmsnorm", qk_norm=True,
                 positions="rope", rope_pairs=1),
    Architecture((3, 4), 2, 2, heads=2, positions="learned", vocab=5),
], ids=str)
def test_widened_families_have_their_proved_counts(arch):
    """The rotary commutant and the QK-norm gain balance per key/value group (biases following
    their maps) and the embedding shift into positions: their tangents' rank at a random point
    is the proved count (sum over groups of 2 R + (a - 2 R)^2 and of a - R; d_0)."""
    from neuromanifold.symmetries.registry import family

    tangents, counts = tangent_rows(arch, random_block_weights(arch, 4))
    start, seen = 0, 0
    for name, n in counts:
        fam = family(name)
        if name in ("rotary commutant on (Q, K)", "QK-norm gain balance",
                    "embedding shift into positions") and n:
            assert torch.linalg.matrix_rank(tangents[start:start + n]) == fam.count(arch), name
            seen += 1
        start += n
    assert seen == 1


def test_layernorm_ends_close_all_but_the_normalised_embedding_points():
    """Widths 3,3, layernorm, V = 5, final norm (lightning): the bound was [22, 34]; the shifts
    and rotations at the ends close it to [22, 25]. The 3 left are GL(2) / O(2) on the plane the
    normalised embedding rows lie in (eps > 0 lets their lengths vary; tangents need sqrt(var +
    eps), not built): the float kernel is 3 larger than the registry's span, all of it in E."""
    arch = Architecture((3, 3), 2, 3, vocab=5, norm="layernorm", final_norm=True)
    r = _quiet_dim(arch, "certified")
    assert (r.dimension, r.upper_bound, r.status) == (22, 25, "lower-bound")
    assert r.symmetries["layernorm shifts at the ends"] == 7
    assert r.symmetries["norm rotations at the ends"] == 2
