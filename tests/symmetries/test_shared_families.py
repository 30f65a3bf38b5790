"""The converted families' options: one norm per parallel block (`shared_norm`, Falcon) and one
QK-norm gain per layer shared by the heads (`qk_norm_shared`, Qwen3). Every family applied to
them lies in the Jacobian's kernel; the families whose proofs assume two norms or per-head gains
are left out; the shared gain balance's proved count is its rank; small networks certify."""

from __future__ import annotations

import warnings

import pytest
import torch

from neuromanifold import neuromanifold_dim
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import flatten_blocks, random_block_weights
from neuromanifold.core.rank import matrix_rank
from neuromanifold.core.tokens import input_stream
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.errors import InputError
from neuromanifold.symmetries.registry import families_for, family, family_tangents, tangent_rows

SHARED = dict(attention="softmax", heads=2, values=2, residual=True, mlp=3, parallel=True,
              shared_norm=True)
QWEN3 = dict(attention="softmax", heads=2, values=2, residual=True, norm="rmsnorm", qk_norm=True,
             qk_norm_shared=True, mlp=3, mlp_kind="gated", activation="silu", positions="rope",
             causal=True, vocab=6, final_norm=True)
NETWORKS = [
    dict(widths=(4, 4), keys=2, tokens=3, norm="layernorm", **SHARED),
    dict(widths=(4, 4), keys=2, tokens=3, norm="rmsnorm", **SHARED),
    dict(widths=(4, 4, 4), keys=2, tokens=3, norm="layernorm", vocab=6, final_norm=True,
         positions="rope", causal=True, **SHARED),
    dict(widths=(4, 4), keys=2, tokens=3, norm="rmsnorm", vocab=6, tied=True, positions="rope",
         **SHARED),
    dict(widths=(4, 4), keys=2, tokens=3, norm="layernorm", kv_heads=1, vocab=6,
         final_norm=True, positions="rope", causal=True, **SHARED),
    dict(widths=(4, 4), keys=2, tokens=3, **QWEN3),
    dict(widths=(4, 4), keys=2, tokens=3, kv_heads=1, **QWEN3),
    dict(widths=(4, 4), keys=3, tokens=3, heads=2, norm="layernorm", qk_norm=True,
         qk_norm_shared=True),
]


def _ids(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items() if k not in ("widths", "keys", "tokens"))


@pytest.mark.parametrize("options", NETWORKS, ids=_ids)
@pytest.mark.parametrize("seed", [3, 8])
def test_tangents_lie_in_the_float_kernel(options, seed):
    """Every registry tangent is mapped to ~0 by the float Jacobian (relative 1e-9)."""
    arch = Architecture(**options)
    blocks = random_block_weights(arch, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    X = (input_stream(arch, gen, torch.float64)(6) if arch.vocab is not None
         else torch.randn((6, arch.widths[0], arch.tokens), dtype=torch.float64, generator=gen))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    T, counts = tangent_rows(arch, blocks)
    assert len(T), counts
    scale = float(J.abs().max()) * float(T.abs().max())
    assert float((J @ T.T).abs().max()) <= 1e-9 * scale, counts


def test_shared_norm_readers_include_the_mlp():
    """With one norm, the gain rescaling moves g_i with the MLP's columns; no n_i block exists."""
    arch = Architecture(**NETWORKS[0])
    blocks = random_block_weights(arch, seed=1)
    assert "n_1" not in blocks
    rescaled = dict(family_tangents(arch, blocks))["norm gain rescaling"]
    assert len(rescaled) == 4 and all({"g_1", "P_1", "Q_1_1"} <= set(t) for t in rescaled)


def test_shared_options_leave_out_the_unchecked_families():
    """The per-head QK-norm balance is replaced by the shared one (with gqa too); families
    outside the checked lists are not applied (a lower bound, never a wrong certificate)."""
    for options in (NETWORKS[5], NETWORKS[6]):
        names = {f.name for f in families_for(Architecture(**options))}
        assert "shared QK-norm gain balance" in names and "QK-norm gain balance" not in names
    plain = Architecture(**{**NETWORKS[5], "qk_norm_shared": False})
    assert "shared QK-norm gain balance" not in {f.name for f in families_for(plain)}
    one_token = Architecture(**{**NETWORKS[1], "tokens": 1})
    assert "one-token basis changes" not in {f.name for f in families_for(one_token)}


@pytest.mark.parametrize("options", [NETWORKS[5], NETWORKS[6], NETWORKS[7]], ids=_ids)
def test_shared_gain_balance_count_is_its_rank(options):
    """sum_i (a_i - R_i): one scaling per unrotated coordinate and per rotated pair."""
    arch = Architecture(**options)
    blocks = random_block_weights(arch, seed=1)
    built = dict(family_tangents(arch, blocks))["shared QK-norm gain balance"]
    rows = torch.stack([torch.cat([t.get(n, torch.zeros_like(b)).reshape(-1)
                                   for n, b in blocks.items()]) for t in built])
    expected = family("shared QK-norm gain balance").count(arch)
    assert expected == sum(a - r for a, r in zip(arch.keys, arch.rotated_pairs))
    assert matrix_rank(rows).rank == expected


@pytest.mark.parametrize("options, expected", [(NETWORKS[0], (92, 54)), (NETWORKS[1], (92, 69)),
                                               (NETWORKS[5], (164, 134))], ids=str)
def test_small_networks_certify_at_the_float_rank(options, expected):
    """The values docs/decoder_features.md#one-shared-norm-shared-qk-norm-gains quotes."""
    arch = Architecture(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numerical = neuromanifold_dim(arch, method="numerical", seed=2)
        certified = neuromanifold_dim(arch, method="certified", seed=2)
    assert certified.status == "certified", certified
    assert (arch.n_params, certified.dimension) == expected == (arch.n_params, numerical.dimension)


@pytest.mark.parametrize("options, expected", [(NETWORKS[2], 129), (NETWORKS[3], 89),
                                               ({**NETWORKS[4], "kv_heads": None, "gqa": False,
                                                 "values": 2}, 78)], ids=str)
def test_one_shared_norm_keeps_the_two_norm_dimension(options, expected):
    """A parallel block's n_i (no norm biases) is absorbed by the MLP's columns: the float rank
    is the same with one norm (the docs' 129, 89, 78)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks = {neuromanifold_dim(Architecture(**{**options, "shared_norm": shared}),
                                   method="numerical", seed=2).dimension for shared in (False, True)}
    assert ranks == {expected}


@pytest.mark.parametrize("options, word", [
    (dict(widths=(4, 4), keys=2, tokens=3, residual=True, mlp=3, norm="layernorm",
          shared_norm=True), "shared_norm"),
    (dict(widths=(4, 4), keys=2, tokens=3, norm="rmsnorm", qk_norm_shared=True), "qk_norm_shared"),
])
def test_shared_options_need_their_features(options, word):
    with pytest.raises(InputError, match=word) as info:
        Architecture(**options)
    assert "\n" not in str(info.value)


def test_dim_spells_the_shared_options_and_refuses_them_alone(capsys):
    import json

    from neuromanifold.cli import main

    code = main(["dim", "--widths", "4,4", "--keys", "2", "--attention", "softmax", "--heads", "2",
                 "--values", "2", "--residual", "--mlp", "3", "--norm", "rmsnorm", "--parallel",
                 "--shared-norm", "--qk-norm", "--qk-norm-shared", "--method", "numerical",
                 "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and d["architecture"]["shared_norm"] and d["architecture"]["qk_norm_shared"]
    for args in (["--shared-norm"], ["--residual", "--mlp", "3", "--norm", "layernorm", "--shared-norm"],
                 ["--norm", "rmsnorm", "--qk-norm-shared"]):
        code = main(["dim", "--widths", "4,4", "--keys", "2", *args])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (args, err)
