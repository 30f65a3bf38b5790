"""The converter's features in the native model (docs/models.md#the-converter-transformers-models-as-native-networks): layernorm
biases, the norms' epsilon, tanh-approximated GELU, the model's own rotary base, q/k/v biases
without an output bias, transformers' grouped-query attention."""

import warnings

import flint
import numpy as np
import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import block_forward, block_layout, random_block_weights
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.dimension.ball_dual import ball_block_forward
from neuromanifold.errors import InputError


def _quiet(arch, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method=method, **kw)


BASE = dict(widths=(4, 4), keys=2, tokens=3, attention="softmax")
FEATURES = {
    "norm_bias": dict(norm="layernorm", norm_bias=True, residual=True, mlp=2, final_norm=True,
                      vocab=5),
    "norm_eps": dict(norm="rmsnorm", norm_eps=1e-3, residual=True, mlp=2),
    "gelu_tanh": dict(residual=True, mlp=3, activation="gelu_tanh"),
    "rope_base": dict(positions="rope", rope_base=500.0, heads=2),
    "no out_bias": dict(bias=True, out_bias=False, heads=2),
    "gqa": dict(heads=2, kv_heads=1, values=2, residual=True),
    "embed_scale": dict(vocab=5, embed_scale=2.0 ** 0.5, residual=True, mlp=2, tied=True),
}


@pytest.mark.parametrize("kwargs, says", [
    (dict(norm="rmsnorm", norm_bias=True), "norm_bias"),
    (dict(norm="layernorm", norm_bias=True, qk_norm=True), "norm_bias"),
    (dict(norm_eps=0.0), "norm_eps"),
    (dict(norm_eps=1e-3), "norm_eps"),
    (dict(rope_base=500.0), "rope_base"),
    (dict(positions="rope", rope_base=0.5), "rope_base"),
    (dict(out_bias=False), "out_bias"),
    (dict(embed_scale=2.0), "embed_scale"),
    (dict(vocab=5, embed_scale=-1.0), "embed_scale"),
])
def test_bad_options_are_one_line_errors(kwargs, says):
    with pytest.raises(InputError, match=says) as info:
        Architecture(**{**BASE, **kwargs})
    assert "\n" not in str(info.value)


def test_defaults_leave_networks_unchanged():
    arch = Architecture(**BASE, heads=2, norm="layernorm", residual=True, mlp=2)
    assert (arch.norm_bias, arch.norm_eps, arch.rope_base, arch.out_bias, arch.gqa) == (
        False, 1e-5, None, True, False)
    assert "norm_bias" not in arch.to_dict() and "gqa" not in repr(arch)
    assert not Architecture((3, 3), 2, 3).is_block


def test_layout_of_the_new_blocks():
    names = [n for n, _, _ in block_layout(Architecture(**BASE, **FEATURES["norm_bias"]))]
    assert names[:3] == ["E", "g_1", "c_1"] and "cn_1" in names and names[-3:] == ["f", "cf", "L"]
    names = [n for n, _, _ in block_layout(Architecture(**BASE, **FEATURES["no out_bias"]))]
    assert "bo_1" not in names and "bq_1_1" in names
    names = [n for n, _, _ in block_layout(Architecture(
        **{**BASE, "widths": (4, 4)}, heads=4, kv_heads=2, values=2, bias=True))]
    assert names[:8] == ["K_1_1", "bk_1_1", "K_1_2", "bk_1_2", "K_1_3", "bk_1_3", "K_1_4", "bk_1_4"]
    assert names[8:16] == ["Q_1_1", "bq_1_1", "W_1_1", "bv_1_1", "Q_1_2", "bq_1_2", "W_1_2", "bv_1_2"]
    assert names[16:] == ["O_1_1", "O_1_2", "O_1_3", "O_1_4", "bo_1"]


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_balls_contain_the_float_forward(name):
    """gelu_tanh, the rotary base, norm biases and epsilons, gqa: the arb-ball forward encloses
    the float64 one (the same map in both arithmetics)."""
    arch = Architecture(**{**BASE, **FEATURES[name]})
    blocks = random_block_weights(arch, 1)
    gen = torch.Generator().manual_seed(2)
    if arch.vocab is not None:
        from neuromanifold.core.tokens import one_hot
        X = one_hot(torch.randint(0, arch.vocab, (2, arch.tokens), generator=gen), arch.vocab)
    else:
        X = torch.randn((2, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64)
    floats = block_forward(arch, blocks, X).numpy()
    flint.ctx.prec = 128
    balls, _ = ball_block_forward(arch, blocks, X, [0])
    mids = np.array([float(b.mid()) for b in balls.flat]).reshape(floats.shape)
    assert np.abs(mids - floats).max() < 1e-12 * max(1.0, np.abs(floats).max())


def test_rope_base_is_refused_over_fp_in_one_line():
    arch = Architecture((4, 4), 2, 3, positions="rope", rope_base=1e4)
    assert not arch.is_polynomial
    with pytest.raises(InputError) as info:
        _quiet(arch, "exact")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_dimension_status_with_each_feature_is_never_wrong(name):
    """Numerical rank vs certified: the numerical rank lies in the certified bracket, and a
    certified value equals it (the families the converter's features break are left out)."""
    arch = Architecture(**{**BASE, **FEATURES[name]})
    numerical, certified = _quiet(arch, "numerical"), _quiet(arch, "certified")
    assert certified.lower_bound <= numerical.dimension <= certified.upper_bound
    if certified.status == "certified":
        assert certified.dimension == numerical.dimension


def test_dim_spells_the_options_and_refuses_bad_ones_in_one_line(capsys):
    import json

    from neuromanifold.cli import main

    code = main(["dim", "--widths", "4,4", "--keys", "2", "--attention", "softmax", "--heads", "2",
                 "--kv-heads", "1", "--values", "2", "--gqa", "--residual", "--norm", "layernorm",
                 "--norm-bias", "--norm-eps", "1e-3", "--mlp", "2", "--activation", "gelu_tanh",
                 "--bias", "--no-out-bias", "--positions", "rope", "--rope-base", "1e4",
                 "--method", "numerical", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and d["architecture"]["kv_heads"] == [1] and "gqa" not in d["architecture"]
    assert d["architecture"]["norm_eps"] == 1e-3
    assert d["architecture"]["rope_base"] == 1e4 and d["architecture"]["out_bias"] is False
    for args in (["--norm-bias"], ["--no-out-bias"], ["--rope-base", "1e4"],
                 ["--positions", "rope", "--rope-base", "1e4", "--method", "exact"]):
        code = main(["dim", "--widths", "4,4", "--keys", "2", *args])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (args, err)
