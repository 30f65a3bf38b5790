"""Transformer blocks: architecture options, forward pass, symmetry catalogue, exact and
numerical dimensions, closed forms and the CLI (docs/blocks.md)."""

import json
import math
import warnings

import pytest
import torch

from neuromanifold.cli import main
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.formulas import block_formula
from neuromanifold.core.blocks import (activate, block_forward, block_layout, flatten_blocks,
                                       random_block_weights, unflatten_blocks)
from neuromanifold.core.formulas import ambient_bound
from neuromanifold.symmetries.registry import CATALOGUE, tangent_rows

FAMILIES = tuple(f.name for f in CATALOGUE)
from neuromanifold.core.formulas import expected_dim
from neuromanifold.core.maps import forward
from neuromanifold.core.parameters import random_weights
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.dimension.fp_dual import forward_dual_mod_p, jacobian_mod_p

P = 2147483629

BLOCKS = {
    "heads": Architecture((3, 4), (2,), 3, heads=(3,)),
    "values": Architecture((4, 3, 5), (2, 3), 3, heads=(2, 1), values=(3, 2)),
    "residual mlp": Architecture((4, 4, 4), (2, 3), 2, heads=(2, 2), values=(2, 3), residual=True,
                                 mlp=(3, 2)),
    "softmax layernorm gelu": Architecture((3, 3), (2,), 4, "softmax", 0.7, heads=(2,),
                                           mlp=(4,), activation="gelu", norm="layernorm",
                                           residual=True),
    "rmsnorm relu": Architecture((3, 3, 3), (3, 2), 3, heads=(2, 2), mlp=(2, 3), activation="relu",
                                 norm="rmsnorm"),
    "tanh no residual": Architecture((4, 3), (3,), 3, heads=(2,), values=(2,), mlp=(2,),
                                     activation="tanh"),
}
# Decoder options (docs/decoder_features.md); tests/core/test_decoder_features.py has the rest.
DECODER_BLOCKS = {
    "causal softmax deep": Architecture((3, 3, 3), 2, 3, "softmax", causal=True, heads=2),
    "grouped lightning": Architecture((3, 3), 3, 3, heads=4, kv_heads=2),
    "bias softmax values mlp": Architecture((3, 3, 3), 2, 3, "softmax", 0.5, bias=True, values=2,
                                            heads=2, mlp=2, mlp_bias=True, activation="tanh"),
    "gated square residual": Architecture((3, 3), 2, 3, residual=True, mlp=3, mlp_kind="gated",
                                          mlp_bias=True, bias=True, causal=True),
    "gated silu layernorm": Architecture((3, 3, 3), 2, 3, "softmax", mlp=3, mlp_kind="gated",
                                         activation="silu", norm="layernorm", bias=True,
                                         mlp_bias=True, causal=True),
    "bias lightning deep": Architecture((3, 3, 3), 2, 3, bias=True, heads=2, kv_heads=1),
    "grouped softmax values bias": Architecture((3, 3), 2, 3, "softmax", heads=4, kv_heads=2,
                                                values=2, bias=True, causal=True),
}


def test_old_model_is_the_default_spelling():
    """heads of all ones, mlp of all zeros and no other option are exactly today's model."""
    old = Architecture((4, 3, 5), (2, 3), 3)
    same = Architecture((4, 3, 5), (2, 3), 3, heads=(1, 1), mlp=(0, 0))
    assert same == old and not same.is_block
    assert same.param_layout() == old.param_layout() and same.to_dict() == old.to_dict()
    assert torch.equal(torch.cat([w.reshape(-1) for w in random_weights(same, 3).V]),
                       torch.cat([w.reshape(-1) for w in random_weights(old, 3).V]))


def test_layout_names_and_count():
    """Block names and sizes follow the documented order; n_params is their sum."""
    arch = BLOCKS["residual mlp"]
    names = [name for name, _, _ in block_layout(arch)]
    assert names[:6] == ["Q_1_1", "K_1_1", "W_1_1", "O_1_1", "Q_1_2", "K_1_2"]
    assert names[8:10] == ["P_1", "U_1"]
    assert arch.n_params == 2 * (2 * 2 * 4 + 2 * 4 * 2) + 2 * 4 * 3 + 2 * (2 * 3 * 4 + 2 * 3 * 4) + 2 * 4 * 2


def _loop_forward(arch, blocks, X):
    """The block network written out token by token with Python loops (independent of einsum),
    decoder options included (causal masks, key/value groups, biases, gated MLPs)."""
    def lin(name, z, bias):
        out = blocks[name] @ z
        return out + blocks[bias][:, 0] if bias in blocks else out

    def norm(z, g):
        if arch.norm == "none":
            return z
        if arch.norm == "layernorm":
            z = z - z.mean()
        return g[:, 0] * z / math.sqrt(float((z * z).mean()) + 1e-5)

    Z = [X[:, i].clone() for i in range(X.shape[1])]
    t = len(Z)
    for i in range(1, arch.n_layers + 1):
        Zn = [norm(z, blocks.get(f"g_{i}")) for z in Z]
        H, G = arch.head_counts[i - 1], arch.kv_counts[i - 1]
        outs = []
        for col in range(t):
            total = blocks[f"bo_{i}"][:, 0].clone() if f"bo_{i}" in blocks else 0
            for h in range(1, H + 1):
                g = math.ceil(h * G / H)
                def value(z):
                    if f"V_{i}_{g}" in blocks:  # noqa: B023
                        return lin(f"V_{i}_{g}", z, f"bv_{i}_{g}")  # noqa: B023
                    return blocks[f"O_{i}_{h}"] @ lin(f"W_{i}_{g}", z, f"bv_{i}_{g}")  # noqa: B023
                seen = range(col + 1) if arch.causal else range(t)
                # transformers' grouping: the group shares Q and the value map, K and O per head
                logits = [float(lin(f"Q_{i}_{g}", Zn[j], f"bq_{i}_{g}") @ lin(f"K_{i}_{h}", Zn[col], f"bk_{i}_{h}"))
                          for j in seen]
                if arch.attention == "softmax":
                    e = [math.exp(s / arch.temperature) for s in logits]
                    logits = [x / sum(e) for x in e]
                total = total + sum(w * value(Zn[j]) for w, j in zip(logits, seen))
            outs.append(total)
        Z = [z + o for z, o in zip(Z, outs)] if arch.residual else outs
        if arch.mlp_widths[i - 1]:
            Yn = [norm(z, blocks.get(f"n_{i}")) for z in Z]
            hidden = [activate(lin(f"P_{i}", y, f"bp_{i}"), arch.activation) for y in Yn]
            if arch.mlp_kind == "gated":
                hidden = [activate(lin(f"G_{i}", y, f"bg_{i}"), arch.activation) * lin(f"P_{i}", y, f"bp_{i}")
                          for y in Yn]
            outs = [lin(f"U_{i}", h, f"bu_{i}") for h in hidden]
            Z = [z + o for z, o in zip(Z, outs)] if arch.residual else outs
    return torch.stack(Z, dim=1)


@pytest.mark.parametrize("name", sorted(BLOCKS) + sorted(DECODER_BLOCKS))
def test_forward_equals_written_out_loop(name):
    arch = BLOCKS.get(name) or DECODER_BLOCKS[name]
    blocks = random_block_weights(arch, seed=5)
    X = torch.randn((2, arch.widths[0], arch.tokens), generator=torch.Generator().manual_seed(1),
                    dtype=torch.float64)
    out = block_forward(arch, blocks, X)
    for n in range(2):
        assert torch.allclose(out[n], _loop_forward(arch, blocks, X[n]), atol=1e-12, rtol=1e-10)


def test_residual_block_is_identity_plus_old_layer():
    """With one head and unfactored values, att(Z) is the paper's layer: Z + phi(Z)."""
    arch = Architecture((3, 3), (2,), 3, residual=True)
    old = Architecture((3, 3), (2,), 3)
    w = random_weights(old, seed=2)
    blocks = {"Q_1_1": w.Q[0], "K_1_1": w.K[0], "V_1_1": w.V[0]}
    X = torch.randn((4, 3, 3), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(block_forward(arch, blocks, X), X + forward(old, w, X), atol=1e-13)


def test_flatten_round_trip():
    arch = BLOCKS["values"]
    blocks = random_block_weights(arch, seed=1)
    again = unflatten_blocks(arch, flatten_blocks(arch, blocks))
    assert all(torch.equal(again[k], blocks[k]) for k in blocks)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_catalogue_tangents_leave_outputs_unchanged(name):
    """Every catalogue tangent lies in the float Jacobian's kernel (to round-off)."""
    arch = BLOCKS[name]
    blocks = random_block_weights(arch, seed=3)
    tangents, counts = tangent_rows(arch, blocks)
    assert [f for f, _ in counts] == list(FAMILIES)
    X = torch.randn((3, arch.widths[0], arch.tokens), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(2))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    image = J @ tangents.T
    assert float(image.abs().max()) < 1e-9 * float(J.abs().max()) * max(1.0, float(tangents.abs().max()))


@pytest.mark.parametrize("arch", [
    BLOCKS["heads"], BLOCKS["values"],
    Architecture((3, 3), (2,), 2, heads=(2,), values=(2,), residual=True, mlp=(2,)),
    Architecture((3, 3, 3), (2, 2), 2, heads=(2, 1), mlp=(2, 0))], ids=["heads", "values", "mlp", "deep"])
def test_modular_jacobian_matches_float_on_integers(arch):
    """The F_p forward-mode Jacobian equals the float autodiff Jacobian on small integer points."""
    g = torch.Generator().manual_seed(7)
    blocks = {n: torch.randint(-1, 2, s, generator=g).to(torch.float64) for n, s, _ in block_layout(arch)}
    X = torch.randint(-1, 2, (2, arch.widths[0], arch.tokens), generator=g).to(torch.float64)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    assert float(J.abs().max()) < 2 ** 50
    fp_blocks = {k: v.to(torch.int64).remainder(P) for k, v in blocks.items()}
    Jp = jacobian_mod_p(arch, fp_blocks, X.to(torch.int64).remainder(P), P)
    assert torch.equal(J.round().to(torch.int64).remainder(P), Jp)
    out = forward_dual_mod_p(arch, fp_blocks, X.to(torch.int64).remainder(P), P).x
    assert torch.equal(block_forward(arch, blocks, X).round().to(torch.int64).remainder(P), out)


def _quiet_dim(arch, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method=method, **kw)


@pytest.mark.parametrize("heads,truth", [(1, 17), (2, 32), (3, 45), (4, 54)])
def test_head_sweep_certified(heads, truth):
    """d = d' = 3, a = v = 3: 17, 32, 45, 54 certified (54 by the ambient bound); the closed form
    agrees, labelled proved for one head and a conjecture beyond."""
    arch = Architecture((3, 3), (3,), 3, heads=(heads,), values=(3,))
    r = _quiet_dim(arch, "certified")
    assert (r.dimension, r.status) == (truth, "certified")
    f = block_formula(arch)
    assert f.value == truth and f.status == ("proved" if heads == 1 else "conjecture")
    if heads == 4:
        assert ambient_bound(arch) == 54 and any("symmetries 56" in n for n in r.notes)
    assert _quiet_dim(arch, "numerical").dimension == truth


@pytest.mark.parametrize("widths,key", [((3, 3), 3), ((4, 2), 4), ((2, 5), 2), ((4, 4), 2),
                                        ((3, 2), 1)])
def test_single_head_formula_is_the_papers(widths, key):
    arch = Architecture(widths, (key,), 3, residual=widths[0] == widths[1])
    paper = expected_dim(Architecture(widths, (key,), 3))
    assert paper.hypotheses_hold and block_formula(arch).value == paper.value


@pytest.mark.parametrize("widths,key,value,heads,truth", [
    ((3, 3), 2, 3, 3, 45), ((4, 4), 3, 4, 3, 87), ((4, 4), 2, None, 6, 156)])
def test_narrow_key_heads_match_the_conjectured_excess(widths, key, value, heads, truth):
    """Exact ranks below the known symmetries' bound, matched by the measured head-mixing excess
    H (H - 1 - (d - a)^2): a conjecture, so the result stays a lower bound."""
    arch = Architecture(widths, (key,), 3, heads=(heads,), values=None if value is None else (value,))
    r = _quiet_dim(arch, "certified")
    assert (r.dimension, r.status) == (truth, "lower-bound") and r.upper_bound > truth
    f = block_formula(arch)
    assert (f.value, f.status) == (truth, "conjecture")


@pytest.mark.parametrize("residual,truth", [(True, 42), (False, 30)])
def test_mlp_cases_certified(residual, truth):
    arch = Architecture((3, 3), (3,), 3, heads=(2,), values=(3,), mlp=(2,), residual=residual)
    r = _quiet_dim(arch, "certified")
    assert (r.n_params, r.dimension, r.status) == (84, truth, "certified")
    assert _quiet_dim(arch, "numerical").dimension == truth


def test_case_where_bounds_do_not_meet():
    """d = 3, d' = 1, a = 3, v = 1, H = 2: exact 17 below both bounds (symmetries 20, ambient 18)."""
    r = _quiet_dim(Architecture((3, 1), (3,), 3, heads=(2,), values=(1,)), "certified")
    assert (r.dimension, r.status, r.upper_bound) == (17, "lower-bound", 18)
    assert any("symmetries 20" in n and "ambient 18" in n for n in r.notes)


@pytest.mark.parametrize("heads,truth", [(1, 18), (2, 36), (4, 72)])
def test_softmax_heads_numerical(heads, truth):
    r = _quiet_dim(Architecture((3, 3), (3,), 3, "softmax", heads=(heads,), values=(3,)), "numerical")
    assert (r.dimension, r.status) == (truth, "settled")


@pytest.mark.parametrize("arch", [
    Architecture((3, 4, 3), (2, 3), 2, heads=(2, 2), values=(2, 1), mlp=(2, 0)),
    Architecture((4, 4), (2,), 3, heads=(3,), residual=True, mlp=(3,)),
    Architecture((2, 3, 4), (1, 2), 3, heads=(3, 2)),
    Architecture((3, 4), (3,), 2, heads=(2,), values=(2,), mlp=(1,)),
    Architecture((4, 4), (4,), 1, values=(1,), residual=True, mlp=(1,)),
    Architecture((3, 3, 3), (2, 2), 2, values=(2, 4), residual=True, mlp=(0, 3)),
], ids=["mixed", "residual", "narrow", "bounds apart", "one token", "wide values"])
def test_exact_equals_numerical(arch):
    exact = _quiet_dim(arch, "exact")
    numerical = _quiet_dim(arch, "numerical")
    assert exact.dimension == numerical.dimension


def test_cli_block_json(capsys):
    code = main(["dim", "--widths", "3,3", "--keys", "3", "--heads", "2", "--values", "3",
                 "--mlp", "2", "--residual", "--activation", "square", "--norm", "none",
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and (data["dimension"], data["status"]) == (42, "certified")
    assert list(data["symmetries"]) == list(FAMILIES)
    assert data["architecture"]["heads"] == [2] and data["architecture"]["residual"] is True


def test_cli_norm_numerical(capsys):
    code = main(["dim", "--widths", "3,3", "--keys", "2", "--heads", "2", "--norm", "rmsnorm",
                 "--mlp", "2", "--activation", "tanh", "--residual"])
    out = capsys.readouterr().out
    assert code == 0 and "numerical, settled" in out


def test_heads_command_writes_png_csv_and_table(tmp_path, capsys):
    """`heads`: lightning stops at the ambient bound while softmax keeps adding dimensions."""
    code = main(["heads", "--max-heads", "4", "--out", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and (tmp_path / "heads.png").stat().st_size > 0
    assert [r["lightning"] for r in rows] == [17, 32, 45, 54]
    assert [r["softmax"] for r in rows] == [18, 36, 54, 72]
    assert all(r["lightning_status"] == "certified" and r["ambient"] == 54 for r in rows)
    assert (tmp_path / "heads.csv").read_text().splitlines()[0].startswith("heads,n_params,lightning")


@pytest.mark.parametrize("arch,truth", [
    (Architecture((3, 3), (4,), 3, heads=(2,), values=(3,)), 32),
    (Architecture((3, 2), (3,), 3, heads=(3,), values=(2,)), 36),
    (Architecture((2, 2), (2,), 3, heads=(3,)), 12),
], ids=["wide keys", "v = d'", "unfactored"])
def test_head_mixing_lifts_certify_and_match_the_formula(arch, truth):
    """Head mixing through one-sided inverses (a > d, v = d' < d) closes the bound."""
    r = _quiet_dim(arch, "certified")
    assert (r.dimension, r.status) == (truth, "certified")
    assert block_formula(arch).value == truth and block_formula(arch).hypotheses_hold


def test_heads_formula_excludes_one_output_width():
    """d' = 1 is a counterexample to the heads count (18 vs exact 17): outside its hypotheses."""
    f = block_formula(Architecture((3, 1), (3,), 3, heads=(2,), values=(1,)))
    assert not f.hypotheses_hold and f.status == "none"
    assert block_formula(Architecture((3, 1), (3,), 3, values=(1,))).hypotheses_hold


def test_block_numerical_stops_at_a_cap_like_the_paper_path():
    """A block network's rank still growing at a time or sample cap is `stopped` (with the
    warning), never settled: the same verdict as the paper's path (test_numerical_dim)."""
    from neuromanifold.dimension.numerical import numerical_dim as block_numerical_dim  # noqa: PLC0415
    from neuromanifold.dimension.result import AmbiguousRankWarning  # noqa: PLC0415

    arch = Architecture((3, 3), (2,), 3, heads=(3,), values=(3,))  # 45 < bound 48: needs 2 rounds
    assert (block_numerical_dim(arch).status, block_numerical_dim(arch).rank_history) == (
        "settled", [[12, 45], [18, 45]])
    for cap, says in [({"max_seconds": 1e-9}, "time cap"), ({"max_samples": 12}, "sample cap")]:
        with pytest.warns(AmbiguousRankWarning, match="stopped"):
            r = block_numerical_dim(arch, **cap)
        assert (r.status, r.dimension, r.rank_history) == ("stopped", 45, [[12, 45]])
        assert not r.is_settled and any(says in n for n in r.notes)


def test_block_exact_with_fixed_samples_is_stopped_like_the_paper_path():
    """A block network's exact rank at a fixed N below the bound is `stopped` (no probability
    claimed), as `exact_dim` reports it; before the one loop it read `lower-bound`."""
    arch = Architecture((4, 4, 4), (2, 2), 3, heads=(2, 2), values=(2, 2))
    r = _quiet_dim(arch, "certified", samples=2)
    assert (r.dimension, r.status, r.failure_probability, r.upper_bound) == (24, "stopped", None, 76)
    assert any("N = 2 fixed by the caller" in n for n in r.notes)


@pytest.mark.parametrize("arch", [
    Architecture((3, 3), 2, 2, heads=2, values=2, residual=True, mlp=3),
    DECODER_BLOCKS["gated square residual"], DECODER_BLOCKS["bias lightning deep"],
    DECODER_BLOCKS["grouped lightning"]], ids=["blocks", "gated", "bias", "grouped"])
def test_one_map_in_four_arithmetics_agrees(arch):
    """block_forward is the one map: on small integer weights and inputs, its value in exact
    Fractions equals the float64 value, is the F_p dual's value mod p, and lies in the ball
    (decoder options included: causal masks, key/value groups, biases, gated MLPs)."""
    from fractions import Fraction

    import flint
    import numpy as np

    from neuromanifold.dimension.ball_dual import ball_block_forward

    gen = torch.Generator().manual_seed(11)
    blocks = {n: torch.randint(-2, 3, s, generator=gen).to(torch.float64)
              for n, s, _ in block_layout(arch)}
    X = torch.randint(-2, 3, (2, arch.widths[0], arch.tokens), generator=gen).to(torch.float64)
    as_fraction = np.frompyfunc(lambda v: Fraction(int(v)), 1, 1)
    exact = block_forward(arch, {n: as_fraction(b.numpy()) for n, b in blocks.items()},
                          as_fraction(X.numpy()))
    floats = block_forward(arch, blocks, X)
    assert np.array_equal(exact.astype(float), floats.numpy())      # small integers: no rounding
    fp = forward_dual_mod_p(arch, {n: b.to(torch.int64).remainder(P) for n, b in blocks.items()},
                            X.to(torch.int64).remainder(P), P).x
    assert all(int(f) == int(e) % P for f, e in zip(fp.flatten().tolist(), exact.flat))
    flint.ctx.prec = 128
    balls, _ = ball_block_forward(arch, blocks, X, [0])
    assert all(b.contains(flint.arb(int(e))) for b, e in zip(balls.flat, exact.flat))
