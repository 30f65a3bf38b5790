"""The pre-norm layernorm families with norm biases (GPT-2: c_i after g_i, cn_i after n_i;
docs/decoder_features.md#mean-directions-and-bias-shifts-with-norm-biases): the mean directions
taken back by the readers' biases and the norm's bias shifted into them. Their tangents lie in
the float64 Jacobian's kernel (two seeds, four sizes; layernorm is not polynomial, so there is
no exact kernel check), a finite move along each leaves the map unchanged, their proved counts
are their tangents' rank in float and mod p, and they stay out where they are not proved."""

from __future__ import annotations

import warnings

import pytest
import torch

from neuromanifold import neuromanifold_dim
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import block_forward, flatten_blocks, random_block_weights
from neuromanifold.core.rank import matrix_rank
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.core.tokens import input_stream
from neuromanifold.dimension.fp import rank_mod_p
from neuromanifold.dimension.fp_dual import fp_ops, random_blocks_mod_p
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.symmetries.registry import family, family_tangents, tangent_rows

MEANS = "layernorm means with reader biases"
SHIFTS = "layernorm bias into readers' biases"
LN = dict(norm="layernorm", norm_bias=True)
GPT2 = dict(widths=(4, 4, 4), keys=2, tokens=3, heads=2, values=2, residual=True, mlp=3,
            activation="gelu_tanh", causal=True, bias=True, mlp_bias=True, positions="learned",
            vocab=7, tied=True, final_norm=True, **LN)
NETWORKS = [   # (options, the means' count, the shifts' count)
    # the shrunk GPT-2 (count --validate): 2 x (3 d + m) reader rows, 2 norms of width 4 per layer
    (GPT2, 30, 16),
    # one head of width 3, untied logits, another size
    (dict(widths=(3, 3), keys=3, tokens=2, residual=True, mlp=2, activation="gelu", bias=True,
          mlp_bias=True, vocab=5, final_norm=True, **LN), 3 * 3 + 2, 6),
    # transformers' grouping (K_h per head, Q_g and W_g per group), a gated MLP
    (dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, values=2, residual=True,
          mlp=2, mlp_kind="gated", activation="silu", bias=True, mlp_bias=True, **LN),
     (2 + 1) * 2 + 2 + 2 * 2, 8),
    # no residual, MLP readers without biases: the attention norms' readers only
    (dict(widths=(3, 4, 3), keys=2, tokens=2, mlp=(2, 2), activation="tanh", bias=True, **LN),
     (2 + 2 + 4) + (2 + 2 + 3), 3 + 4),
]


def _ids(case) -> str:
    options = case[0] if isinstance(case, tuple) else case
    return ",".join(f"{k}={v}" for k, v in options.items() if k not in LN)


def _family_rows(arch, blocks, name, ops=None):
    tangents = dict(family_tangents(arch, blocks, *([ops] if ops else [])))[name]
    return torch.stack([torch.cat([t.get(k, torch.zeros_like(v)).reshape(-1)
                                   for k, v in blocks.items()]) for t in tangents])


def _biased(blocks: dict) -> dict:
    """Norm biases drawn away from 0, so a tangent that forgets one shows."""
    return {k: v + 0.5 if k.startswith("c") else v for k, v in blocks.items()}


@pytest.mark.parametrize("case", NETWORKS, ids=_ids)
@pytest.mark.parametrize("seed,attention", [(2, "softmax"), (9, "softmax"), (4, "lightning")])
def test_tangents_lie_in_the_float_kernel(case, seed, attention):
    """Every registry tangent, the two families' among them, is mapped to ~0 by the float64
    Jacobian (relative 1e-9 of |J| |T|), softmax attention at two seeds, lightning at one."""
    options, _, _ = case
    counts = _kernel_counts(Architecture(attention=attention, **options), seed)
    assert counts[MEANS] > 0 and counts[SHIFTS] > 0, counts


def _kernel_counts(arch: Architecture, seed: int) -> dict[str, int]:
    """The registry's tangent counts at a seeded point with biased norms, after checking that
    every tangent is in the float64 Jacobian's kernel (relative 1e-9 of |J| |T|)."""
    blocks = _biased(random_block_weights(arch, seed=seed))
    T, counts = tangent_rows(arch, blocks)
    X = input_stream(arch, torch.Generator().manual_seed(seed + 1), torch.float64)(8)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    scale = float(J.abs().max()) * float(T.abs().max())
    assert float((J @ T.T).abs().max()) <= 1e-9 * scale, counts
    return dict(counts)


@pytest.mark.parametrize("case", NETWORKS, ids=_ids)
def test_counts_are_the_tangents_rank_in_float_and_mod_p(case):
    """Each family's proved count is the rank of its own tangents at a random float point and
    at the certified path's random residues mod p."""
    options, means, shifts = case
    arch = Architecture(attention="softmax", **options)
    blocks = random_block_weights(arch, seed=1)
    p = 2147483629
    point = random_blocks_mod_p(arch, p, seeded_generator(0, "certified-upper"))
    for name, expected in ((MEANS, means), (SHIFTS, shifts)):
        assert family(name).count(arch) == expected, name
        assert matrix_rank(_family_rows(arch, blocks, name)).rank == expected, name
        rows = _family_rows(arch, point, name, fp_ops(p)).remainder(p).numpy()
        assert rank_mod_p(rows, p) == expected, name


def test_finite_moves_keep_the_map():
    """Both moves are affine in the weights, so a finite step along each keeps the float map to
    round-off: a value row gaining (1/g)^T with its bias losing (1/g)^T c, and the MLP norm's
    bias shifted by x with the MLP's bias losing P x."""
    arch = Architecture(attention="softmax", **{**GPT2, "vocab": None, "tied": False,
                                                "final_norm": False})
    blocks = _biased(random_block_weights(arch, seed=7))
    X = torch.randn((5, 4, 3), dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    moved = dict(blocks)
    u = 1.3 / blocks["g_1"][:, 0]
    moved["W_1_2"] = blocks["W_1_2"].clone()
    moved["W_1_2"][1] += u
    moved["bv_1_2"] = blocks["bv_1_2"].clone()
    moved["bv_1_2"][1] -= u @ blocks["c_1"][:, 0]
    x = torch.tensor([[0.7], [-1.1], [0.4], [2.0]], dtype=torch.float64)
    moved["cn_2"] = blocks["cn_2"] + x
    moved["bp_2"] = blocks["bp_2"] - blocks["P_2"] @ x
    assert torch.allclose(block_forward(arch, moved, X), block_forward(arch, blocks, X),
                          rtol=1e-12, atol=1e-12)


def test_families_stay_out_where_unproved():
    """Not without norm biases (the plain mean directions hold there), not with rmsnorm, not
    after post-norm blocks (BERT's own families); no tangent where no reader has a bias."""
    base = dict(widths=(3, 3), keys=2, tokens=2, residual=True, mlp=2, bias=True, mlp_bias=True)
    for name in (MEANS, SHIFTS):
        assert family(name).applies(Architecture(norm="layernorm", norm_bias=True, **base))
        assert not family(name).applies(Architecture(norm="layernorm", **base))
        assert not family(name).applies(Architecture(norm="rmsnorm", **base))
        assert not family(name).applies(Architecture(norm="layernorm", norm_bias=True,
                                                     post_norm=True, **base))
    bare = Architecture(widths=(3, 3), keys=2, tokens=2, residual=True, mlp=2, **LN)
    built = dict(family_tangents(bare, random_block_weights(bare, seed=0)))
    assert built[MEANS] == built[SHIFTS] == []
    assert family(MEANS).count(bare) == family(SHIFTS).count(bare) == 0


@pytest.mark.parametrize("options,truth", [
    # the shrunk GPT-2 of `count --validate` (was 171 <= dim <= 217): its float rank at seed 3
    (dict(GPT2, temperature=2 ** 0.5), 171),
])
def test_gpt2_like_networks_certify(options, truth):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = neuromanifold_dim(Architecture(attention="softmax", **options),
                                   method="certified", seed=0)
    assert (result.status, result.dimension) == ("certified", truth), result
