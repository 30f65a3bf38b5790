"""The symmetry families of grouped key/value heads (`kv_heads`, transformers' grouping: the group
shares Q and the value map, each head keeps K and O): per-group GL(a) and its rotary commutant,
per-group GL(v), per-head rescaling and head mixing (lightning, value widths), the grouped key
sums, per-group rescaling and head mixing between groups (lightning, unfactored values), the
softmax query and value biases, the norm gains. Every tangent lies in the Jacobian's kernel, and
small grouped networks certify where the bound closes, at the float rank."""

from __future__ import annotations

import warnings

import pytest
import torch

from neuromanifold import neuromanifold_dim
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import flatten_blocks, random_block_weights
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.symmetries.registry import families_for, tangent_rows

GQA = dict(heads=2, kv_heads=1, values=2)
LIGHTNING = [
    dict(widths=(3, 3), keys=2, tokens=3, **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, bias=True, **GQA),
    dict(widths=(4, 4), keys=2, tokens=3, heads=4, kv_heads=2, values=2, causal=True),
    dict(widths=(3, 3, 3), keys=2, tokens=3, residual=True, mlp=2, **GQA),
    dict(widths=(4, 4), keys=3, tokens=3, heads=3, kv_heads=1, values=3,
         positions="rope", rope_pairs=1, bias=True),
    dict(widths=(3, 3), keys=2, tokens=3, vocab=5, **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, vocab=5, residual=True, bias=True, **GQA),
    dict(widths=(3, 4, 3), keys=2, tokens=2, vocab=5, tied=True, positions="learned", bias=True,
         **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, residual=True, norm="rmsnorm", mlp=2, **GQA),
]
EXACT = LIGHTNING[:8]
# Unfactored values (V_g shared by the group): the factored layout with O_h = identity.
KV = dict(heads=2, kv_heads=1)
UNFACTORED = [
    dict(widths=(3, 3), keys=2, tokens=3, **KV),
    dict(widths=(3, 3), keys=2, tokens=3, bias=True, **KV),
    dict(widths=(4, 4), keys=2, tokens=3, heads=4, kv_heads=2, causal=True),
    dict(widths=(3, 3, 3), keys=2, tokens=3, residual=True, mlp=2, **KV),
    dict(widths=(4, 4), keys=3, tokens=3, heads=3, kv_heads=1, positions="rope", rope_pairs=1,
         bias=True),
    dict(widths=(3, 3), keys=3, tokens=3, heads=4, kv_heads=2),
    dict(widths=(3, 3, 3), keys=3, tokens=2, heads=4, kv_heads=2, causal=True),
    dict(widths=(3, 3), keys=2, tokens=3, vocab=5, residual=True, bias=True, **KV),
]
UNFACTORED_SOFTMAX = [dict(options, attention="softmax") for options in UNFACTORED[:5]] + [
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", residual=True, norm="rmsnorm",
         mlp=2, **KV),
    dict(widths=(4, 4), keys=2, tokens=3, attention="softmax", heads=4, kv_heads=2,
         norm="layernorm", residual=True, qk_norm=True, causal=True),
    dict(widths=(3, 3, 3), keys=2, tokens=1, attention="softmax", heads=4, kv_heads=2),
    dict(widths=(3, 3, 3), keys=2, tokens=3, attention="softmax", vocab=5, norm="layernorm",
         mlp=2, bias=True, mlp_bias=True, **KV),
]
LLAMA = dict(attention="softmax", heads=2, kv_heads=1, values=2, residual=True,
             norm="rmsnorm", mlp=3, mlp_kind="gated", activation="silu", positions="rope",
             causal=True, vocab=6, final_norm=True)
SOFTMAX = [
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", bias=True, **GQA),
    dict(widths=(3, 3, 3), keys=2, tokens=3, attention="softmax", residual=True, **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", positions="rope", **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", residual=True, mlp=2, **GQA),
    dict(widths=(3, 3), keys=2, tokens=3, attention="softmax", residual=True, norm="rmsnorm",
         mlp=2, **GQA),
    dict(widths=(4, 4), keys=2, tokens=3, attention="softmax", heads=4, kv_heads=2, values=2,
         norm="layernorm", residual=True, qk_norm=True, causal=True),
    dict(widths=(4, 4), keys=2, tokens=3, **LLAMA),
    dict(widths=(4, 4), keys=2, tokens=3, bias=True, out_bias=False, rope_base=1e4, **LLAMA),
    dict(widths=(4, 4, 4), keys=2, tokens=3, tied=True, **LLAMA),
    dict(widths=(3, 3, 3), keys=2, tokens=3, attention="softmax", vocab=5, norm="layernorm",
         mlp=2, bias=True, mlp_bias=True, **GQA),
    dict(widths=(4, 4), keys=2, tokens=3, attention="softmax", vocab=5, norm="layernorm",
         residual=True, final_norm=True, positions="learned", **GQA),
    dict(widths=(3, 3, 3), keys=2, tokens=3, attention="softmax", bias=True, mlp=2,
         mlp_bias=True, **GQA),
]


def _ids(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items() if k not in GQA or v != GQA[k])


@pytest.mark.parametrize("options", EXACT + UNFACTORED, ids=_ids)
@pytest.mark.parametrize("seed", [5, 11])
def test_lightning_tangents_lie_in_the_exact_kernel(options, seed):
    """Every registry tangent of polynomial lightning grouped networks lies in the kernel of the
    exact Jacobian mod p, at two seeds."""
    from neuromanifold.core.tokens import input_stream
    from neuromanifold.dimension.fp import DEFAULT_PRIME as p
    from neuromanifold.dimension.fp_dual import fp_ops, jacobian_mod_p, random_blocks_mod_p
    from neuromanifold.dimension.modular import matmul_mod

    arch = Architecture(**options)
    gen = torch.Generator().manual_seed(seed)
    blocks = random_blocks_mod_p(arch, p, gen)
    T, counts = tangent_rows(arch, blocks, fp_ops(p))
    assert dict(counts)["per-head GL(v) on (W, O)" if arch.values else "grouped key sums"] > 0
    X = (input_stream(arch, gen, torch.int64)(40) if arch.vocab is not None
         else torch.randint(0, p, (40, arch.widths[0], arch.tokens), generator=gen))
    J = jacobian_mod_p(arch, blocks, X, p)
    assert not matmul_mod(J, T.remainder(p).T.contiguous(), p).any(), counts


@pytest.mark.parametrize("options", SOFTMAX + LIGHTNING[len(EXACT):] + UNFACTORED_SOFTMAX, ids=_ids)
@pytest.mark.parametrize("seed", [3, 8])
def test_tangents_lie_in_the_float_kernel(options, seed):
    """Every registry tangent of softmax (and normed) grouped networks is mapped to ~0 by the float
    Jacobian (relative 1e-9), at two seeds."""
    arch = Architecture(**options)
    blocks = random_block_weights(arch, seed=seed)
    from neuromanifold.core.tokens import input_stream

    gen = torch.Generator().manual_seed(seed + 1)
    X = (input_stream(arch, gen, torch.float64)(6) if arch.vocab is not None
         else torch.randn((6, arch.widths[0], arch.tokens), dtype=torch.float64, generator=gen))
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    T, counts = tangent_rows(arch, blocks)
    assert len(T), counts
    scale = float(J.abs().max()) * float(T.abs().max())
    assert float((J @ T.T).abs().max()) <= 1e-9 * scale, counts


def test_grouping_families_follow_the_value_maps():
    """With value widths the group's heads mix in (O_h, K_h) (gqa head mixing); unfactored, only
    the sum of a group's K_h matters (grouped key sums) and groups mix as heads do; the one-token
    family is built for unfactored groups only."""
    names = {f.name for f in families_for(Architecture(**LIGHTNING[0]))}
    assert "gqa head mixing" in names and "per-head GL(a) on (Q, K)" in names
    assert not names & {"grouped key sums", "head mixing", "one-token softmax"}
    one_token = Architecture(**{**SOFTMAX[0], "tokens": 1})
    assert "one-token softmax" not in {f.name for f in families_for(one_token)}
    names = {f.name for f in families_for(Architecture(**UNFACTORED[5]))}
    assert {"grouped key sums", "head mixing", "per-head rescaling"} <= names
    assert "gqa head mixing" not in names
    assert "one-token softmax" in {f.name for f in families_for(Architecture(**UNFACTORED_SOFTMAX[7]))}


def test_gqa_keyword_is_deprecated_and_changes_nothing():
    """gqa=True warns and gives the network kv_heads alone gives."""
    with pytest.warns(DeprecationWarning, match="gqa is deprecated"):
        arch = Architecture(**LIGHTNING[0], gqa=True)
    assert arch == Architecture(**LIGHTNING[0]) and not arch.gqa


@pytest.mark.parametrize("options", [LIGHTNING[0], LIGHTNING[1], LIGHTNING[2], LIGHTNING[4],
                                     LIGHTNING[5], LIGHTNING[6], LIGHTNING[7], LIGHTNING[8]]
                         + SOFTMAX[:6] + SOFTMAX[7:10] + [SOFTMAX[11]]
                         + UNFACTORED[:6] + UNFACTORED_SOFTMAX[:4] + UNFACTORED_SOFTMAX[5:6]
                         + UNFACTORED_SOFTMAX[7:8], ids=_ids)
def test_small_grouped_networks_certify_at_the_float_rank(options):
    """The bound closes on small grouped networks, Llama- and Qwen2-shaped ones among them (rotary,
    rmsnorm, gated silu MLP, untied or tied logits behind a final norm, q/k/v biases without
    b_o): the status is certified (exact over F_p for polynomial lightning networks, ball
    arithmetic otherwise) and the value equals the float rank."""
    arch = Architecture(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numerical = neuromanifold_dim(arch, method="numerical", seed=2)
        certified = neuromanifold_dim(arch, method="certified", seed=2)
    assert numerical.status == "settled"
    assert certified.status == "certified", certified
    assert certified.dimension == numerical.dimension


@pytest.mark.parametrize("options", [LIGHTNING[2], LIGHTNING[4], SOFTMAX[1], SOFTMAX[3],
                                     SOFTMAX[6], UNFACTORED[1], UNFACTORED[4]], ids=_ids)
def test_proved_counts_match_the_ranks_with_groups(options):
    """The proved per-group counts (G a^2, the rotary commutant's G (2R + (a - 2R)^2), G v^2,
    the softmax query bias's G a, the QK-norm gains' G (a - R)) equal the rank of each family's
    own tangents at a random point."""
    from neuromanifold.core.rank import matrix_rank
    from neuromanifold.symmetries.registry import family, family_tangents

    arch = Architecture(**options)
    blocks = random_block_weights(arch, seed=1)
    built = dict(family_tangents(arch, blocks))
    checked = 0
    for name in ("per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)", "per-head GL(v) on (W, O)",
                 "softmax query bias", "QK-norm gain balance", "grouped key sums"):
        expected = family(name).count(arch)
        if expected is None:
            continue
        rows = torch.stack([torch.cat([t.get(n, torch.zeros_like(b)).reshape(-1)
                                       for n, b in blocks.items()]) for t in built[name]])
        assert matrix_rank(rows).rank == expected, name
        checked += 1
    assert checked >= 2
