"""`fiber` on decoder networks (issue 21): each group action leaves the network's output
unchanged (float64, seeded, distinct sizes), the witness search finds the moves it models and
says which it does not, token-id networks are compared at every sequence, and `--method` is
honoured on the command line."""

import json

import numpy as np
import pytest
import torch

from neuromanifold import Architecture
from neuromanifold.cli import main
from neuromanifold.core.blocks import block_forward, random_block_weights
from neuromanifold.core.seeds import seeded_rng
from neuromanifold.errors import InputError
from neuromanifold.geometry.moves import apply_block_witness, same_block_function
from neuromanifold.io.weightfiles import write_block_weights
from neuromanifold.symmetries.actions import commutes_with_rotations


def _blocks(arch, seed=1):
    return {k: v.numpy() for k, v in random_block_weights(arch, seed).items()}


def _outputs(arch, blocks, seed=5):
    gen = torch.Generator().manual_seed(seed)
    if arch.vocab is not None:
        ids = torch.randint(0, arch.vocab, (6, arch.tokens), generator=gen)
        X = torch.nn.functional.one_hot(ids, arch.vocab).transpose(-1, -2).double()
    else:
        X = torch.randn((6, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64)
    return block_forward(arch, {k: torch.from_numpy(np.asarray(v, float)) for k, v in blocks.items()},
                         X).numpy()


def _invertible(rng, n):
    return np.eye(n) + 0.3 * rng.standard_normal((n, n))


def _commutant(rng, a, pairs):
    """A random element of the commutant of the rotations of `pairs` pairs in R^a."""
    G = np.zeros((a, a))
    for f in range(pairs):
        x, y = 1 + 0.3 * rng.standard_normal(), 0.3 * rng.standard_normal()
        G[2 * f: 2 * f + 2, 2 * f: 2 * f + 2] = [[x, -y], [y, x]]
    G[2 * pairs:, 2 * pairs:] = _invertible(rng, a - 2 * pairs)
    return G


# (architecture, moves drawn from a generator): every decoder block the moves touch
CASES = {
    "softmax causal biases, GL(a) and head permutation": (
        Architecture((3, 4), 2, 3, "softmax", heads=2, causal=True, bias=True),
        lambda rng: [{"layer": 1, "head": 2, "move": "per-head GL(a)", "G": _invertible(rng, 2)},
                     {"layer": 1, "move": "head permutation", "perm": [2, 1]},
                     {"layer": 1, "head": 1, "move": "query bias shift", "e": rng.standard_normal(2)}]),
    "grouped lightning with biases: group GL, rescaling, key sums": (
        Architecture((3, 4), 3, 2, "lightning", heads=4, kv_heads=2, bias=True, causal=True),
        lambda rng: [{"layer": 1, "group": 1, "move": "per-head GL(a)", "G": _invertible(rng, 3)},
                     {"layer": 1, "group": 2, "move": "per-head rescaling", "c": 1.4},
                     {"layer": 1, "group": 1, "move": "grouped key sums",
                      "D": rng.standard_normal((1, 3, 3)), "Db": rng.standard_normal((1, 3, 1))}]),
    "grouped softmax with biases and value widths": (
        Architecture((3, 4), 2, 3, "softmax", heads=4, kv_heads=2, values=2, bias=True),
        lambda rng: [{"layer": 1, "group": 2, "move": "per-head GL(a)", "G": _invertible(rng, 2)},
                     {"layer": 1, "move": "head permutation", "perm": [2, 1, 3, 4]},
                     {"layer": 1, "group": 2, "move": "query bias shift", "e": rng.standard_normal(2)},
                     {"layer": 1, "group": 1, "move": "value bias shift", "e": rng.standard_normal(2)},
                     {"layer": 1, "group": 2, "move": "per-head GL(v)", "G": _invertible(rng, 2)}]),
    "grouped lightning with value widths: GL(a), GL(v), gqa head mixing": (
        Architecture((4, 4), 3, 3, "lightning", heads=4, kv_heads=2, values=2, causal=True,
                     bias=True),
        lambda rng: [{"layer": 1, "group": 1, "move": "per-head GL(a)", "G": _invertible(rng, 3)},
                     {"layer": 1, "group": 1, "move": "per-head GL(v)", "G": _invertible(rng, 2)},
                     {"layer": 1, "group": 2, "move": "gqa head mixing", "M": _invertible(rng, 2)}]),
    "grouped softmax, rotary commutant, permutation in a group, value bias": (
        Architecture((4, 4), 4, 3, "softmax", heads=4, kv_heads=2, bias=True, positions="rope",
                     rope_pairs=1),
        lambda rng: [{"layer": 1, "group": 1, "move": "rotary commutant", "G": _commutant(rng, 4, 1)},
                     {"layer": 1, "move": "head permutation", "perm": [1, 2, 4, 3]},
                     {"layer": 1, "group": 2, "move": "value bias shift", "e": rng.standard_normal(4)}]),
    "lightning biases and value widths, rescaling and GL(v)": (
        Architecture((4, 3), 3, 2, "lightning", heads=2, values=2, bias=True),
        lambda rng: [{"layer": 1, "head": 1, "move": "per-head rescaling", "c": 1.7},
                     {"layer": 1, "head": 2, "move": "per-head GL(v)", "G": _invertible(rng, 2)},
                     {"layer": 1, "head": 1, "move": "per-head GL(a)", "G": _invertible(rng, 3)}]),
    "partial rotary, commutant": (
        Architecture((5, 5), 5, 3, "softmax", heads=2, positions="rope", rope_pairs=1),
        lambda rng: [{"layer": 1, "head": h, "move": "rotary commutant",
                      "G": _commutant(rng, 5, 1)} for h in (1, 2)]),
    "full rotary lightning, commutant and rescaling": (
        Architecture((4, 4), 4, 3, "lightning", positions="rope", causal=True),
        lambda rng: [{"layer": 1, "head": 1, "move": "rotary commutant", "G": _commutant(rng, 4, 2)},
                     {"layer": 1, "head": 1, "move": "per-head rescaling", "c": -0.6}]),
    "gated MLP with biases (SwiGLU), neuron moves": (
        Architecture((3, 3), 2, 2, "softmax", residual=True, mlp=4, mlp_kind="gated",
                     activation="silu", mlp_bias=True),
        lambda rng: [{"layer": 1, "move": "MLP neuron permutation", "perm": [3, 1, 4, 2]},
                     {"layer": 1, "move": "MLP neuron rescaling",
                      "c": np.array([1.5, -0.7, 2.0, 0.4])}]),
    "softmax biases with value widths, value bias shifts": (
        Architecture((3, 4), 2, 3, "softmax", heads=2, values=2, bias=True, causal=True),
        lambda rng: [{"layer": 1, "group": 1, "move": "value bias shift",
                      "e": rng.standard_normal(2)},
                     {"layer": 1, "head": 2, "move": "per-head GL(v)", "G": _invertible(rng, 2)},
                     {"layer": 1, "group": 2, "move": "value bias shift",
                      "e": rng.standard_normal(2)}]),
    "QK-norm with partial rotary, gain balance; final norm gain before untied logits": (
        Architecture((4, 4), 4, 3, "softmax", heads=2, residual=True, norm="layernorm",
                     qk_norm=True, positions="rope", rope_pairs=1, vocab=6, final_norm=True),
        lambda rng: [{"layer": 1, "head": 2, "move": "QK-norm gain balance",
                      "c": np.array([1.5, 1.5, -0.8, 2.0])},
                     {"move": "final norm gain", "c": np.array([0.5, 1.5, -2.0, 1.2])}]),
    "gated square MLP with biases, gate rescaling; grouped heads": (
        Architecture((3, 3), 2, 2, "lightning", heads=2, kv_heads=1, residual=True, mlp=3,
                     mlp_kind="gated", mlp_bias=True),
        lambda rng: [{"layer": 1, "move": "MLP neuron permutation", "perm": [2, 3, 1]},
                     {"layer": 1, "move": "MLP neuron rescaling", "c": np.array([1.5, -0.7, 2.0]),
                      "cg": np.array([-1.2, 0.6, 1.1])}]),
    "relu MLP with biases, neuron rescaling": (
        Architecture((4, 4), 2, 2, "softmax", mlp=3, activation="relu", mlp_bias=True),
        lambda rng: [{"layer": 1, "move": "MLP neuron rescaling", "c": np.array([1.5, 0.7, 2.0])}]),
    "square MLP, QK-norm heads permuted, parallel, learned positions, vocabulary": (
        Architecture((4, 4), 2, 3, "softmax", heads=2, residual=True, mlp=2, norm="rmsnorm",
                     qk_norm=True, parallel=True, positions="learned", vocab=5, final_norm=True),
        lambda rng: [{"layer": 1, "move": "head permutation", "perm": [2, 1]},
                     {"layer": 1, "move": "MLP neuron rescaling", "c": np.array([-1.3, 0.8])}]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_action_leaves_the_output_unchanged(name):
    arch, draw = CASES[name]
    W1 = _blocks(arch)
    moves = draw(seeded_rng(3, name))
    W2 = apply_block_witness(arch, W1, moves)
    assert any(not np.allclose(W1[k], W2[k]) for k in W1)  # the moves moved something
    out1, out2 = _outputs(arch, W1), _outputs(arch, W2)
    assert np.abs(out1 - out2).max() <= 1e-9 * np.abs(out1).max()


def test_the_qk_gain_balance_is_checked():
    """A gain balance with two factors on one rotated pair changes the function; refused."""
    arch = Architecture((4, 4), 4, 3, "softmax", norm="rmsnorm", qk_norm=True, positions="rope",
                        rope_pairs=1)
    move = {"layer": 1, "head": 1, "move": "QK-norm gain balance", "c": np.array([2.0, 1.0, 1.0, 1.0])}
    with pytest.raises(InputError, match="one factor per rotated pair"):
        apply_block_witness(arch, _blocks(arch), [move])


def test_grouped_moves_stay_inside_their_groups():
    arch = Architecture((3, 3), 2, 2, "softmax", heads=4, kv_heads=2)
    with pytest.raises(InputError, match="within the key/value groups"):
        apply_block_witness(arch, _blocks(arch), [{"layer": 1, "move": "head permutation",
                                                   "perm": [3, 2, 1, 4]}])


def test_the_rotary_commutant_is_checked():
    """With rotary positions a G outside the commutant changes the function, and the action
    refuses it (one line) rather than apply it."""
    arch = Architecture((4, 4), 4, 3, "softmax", positions="rope")
    W = _blocks(arch)
    G = _invertible(seeded_rng(4, "G"), 4)
    assert not commutes_with_rotations(arch, 1, G)
    moved = apply_block_witness(arch, W, [{"layer": 1, "head": 1, "move": "per-head GL(a)", "G": G}])
    assert np.abs(_outputs(arch, W) - _outputs(arch, moved)).max() > 1e-3
    with pytest.raises(InputError, match="commutes with the rotations"):
        apply_block_witness(arch, W, [{"layer": 1, "head": 1, "move": "rotary commutant", "G": G}])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_search_finds_the_moves(name):
    arch, draw = CASES[name]
    W1 = _blocks(arch)
    W2 = apply_block_witness(arch, W1, draw(seeded_rng(3, name)))
    result = same_block_function(arch, W1, W2, method="numerical")
    assert result.same_function and result.kind == "generic" and result.witness
    assert result.witness_residual < 1e-6
    remapped = apply_block_witness(arch, W1, result.witness)
    assert all(np.allclose(remapped[k], W2[k]) for k in W2)


# Grouped networks (transformers' grouping) related by seeded random group elements: the search
# names the grouped moves (per group on Q_g, V_g / W_g; per head on K_h, O_h).
GROUPED = [
    (Architecture((4, 4), 3, 3, "lightning", heads=4, kv_heads=2, values=2, causal=True),
     lambda rng: [{"layer": 1, "group": 2, "move": "per-head GL(a)", "G": _invertible(rng, 3)},
                  {"layer": 1, "group": 1, "move": "per-head GL(v)", "G": _invertible(rng, 2)},
                  {"layer": 1, "group": 1, "move": "gqa head mixing", "M": _invertible(rng, 2)}],
     {"per-head GL(a)", "per-head GL(v)", "gqa head mixing"}),
    (Architecture((3, 3, 3), 3, 3, "lightning", heads=3, kv_heads=1, residual=True),
     lambda rng: [{"layer": 1, "group": 1, "move": "per-head rescaling", "c": 1.3},
                  {"layer": 2, "group": 1, "move": "per-head GL(a)", "G": _invertible(rng, 3)},
                  {"layer": 2, "group": 1, "move": "grouped key sums",
                   "D": 0.5 * rng.standard_normal((2, 3, 3))}],
     {"per-head rescaling", "per-head GL(a)", "grouped key sums"}),
    (Architecture((4, 4), 2, 3, "softmax", heads=4, kv_heads=2, values=2, bias=True),
     lambda rng: [{"layer": 1, "group": 1, "move": "per-head GL(a)", "G": _invertible(rng, 2)},
                  {"layer": 1, "group": 2, "move": "per-head GL(v)", "G": _invertible(rng, 2)},
                  {"layer": 1, "group": 1, "move": "query bias shift", "e": rng.standard_normal(2)},
                  {"layer": 1, "move": "head permutation", "perm": [2, 1, 3, 4]}],
     {"per-head GL(a)", "per-head GL(v)", "query bias shift", "head permutation"}),
]


@pytest.mark.parametrize("case", range(len(GROUPED)))
@pytest.mark.parametrize("seed", [0, 7])
def test_the_search_names_the_grouped_moves(case, seed):
    arch, draw, names = GROUPED[case]
    W1 = _blocks(arch, seed)
    W2 = apply_block_witness(arch, W1, draw(seeded_rng(seed, f"grouped {case}")))
    assert np.abs(_outputs(arch, W1) - _outputs(arch, W2)).max() <= 1e-9 * np.abs(_outputs(arch, W1)).max()
    result = same_block_function(arch, W1, W2, method="numerical")
    assert result.same_function and result.kind == "generic", result.notes
    assert names <= {m["move"] for m in result.witness}, result.witness
    remapped = apply_block_witness(arch, W1, result.witness)
    assert all(np.allclose(remapped[k], W2[k]) for k in W2)


def test_fiber_cli_names_the_grouped_moves(tmp_path, capsys):
    """`neuromanifold fiber` on two weight files of a grouped network (read back as kv_heads from
    the blocks: Q_i_g per group, K_i_h per head) names the gqa head mixing and GL(v)."""
    arch, draw, names = GROUPED[0]
    W1 = _blocks(arch, 2)
    W2 = apply_block_witness(arch, W1, draw(seeded_rng(2, "cli")))
    a = write_block_weights(tmp_path / "a.npz", W1)
    b = write_block_weights(tmp_path / "b.npz", W2)
    code, out, _ = run(capsys, "fiber", "--weights", str(a), "--other", str(b), "--no-residual",
                       "--causal", "--method", "numerical", "--json")
    d = json.loads(out)
    assert code == 0 and d["same_function"] and d["kind"] == "generic"
    assert names <= {m["move"] for m in d["witness"]}


def test_grouped_witness_is_applied_back_exactly():
    """Integer weights of an unfactored grouped lightning network and rational moves (per-group
    rescaling, grouped key sums): `fiber` proves the identity and applies the witness exactly."""
    arch = Architecture((3, 3), 2, 2, "lightning", heads=4, kv_heads=2, causal=True)
    W1 = {k: np.round(4 * v) for k, v in _blocks(arch, 3).items()}
    D = np.round(2 * seeded_rng(1, "D").standard_normal((1, 2, 3)))
    W2 = apply_block_witness(arch, W1, [
        {"layer": 1, "group": 2, "move": "per-head rescaling", "c": 2.0},
        {"layer": 1, "group": 1, "move": "grouped key sums", "D": D}])
    result = same_block_function(arch, W1, W2, method="exact")
    assert result.same_function and result.method == "exact" and result.kind == "generic"
    assert {"per-head rescaling", "grouped key sums"} <= {m["move"] for m in result.witness}
    assert any("applied back exactly" in n for n in result.notes)


def test_token_networks_are_compared_at_every_sequence():
    arch = Architecture((3, 3), 2, 2, "lightning", heads=2, vocab=3, bias=True, causal=True)
    W1 = _blocks(arch)
    W2 = apply_block_witness(arch, W1, [{"layer": 1, "move": "head permutation", "perm": [2, 1]}])
    for method in ("numerical", "exact"):
        result = same_block_function(arch, W1, W2, method=method)
        assert result.same_function and result.method == method and result.n_points == 9
        assert any("every one of the V^t = 9" in n for n in result.notes)
    W2["E"] = W2["E"] + 1e-3
    assert not same_block_function(arch, W1, W2, method="exact").same_function


def test_moves_outside_the_search_are_named():
    """A change of the stream's basis at the embedding: the same function, no searched move
    explains it, and the note names the family instead of claiming an explanation."""
    arch = Architecture((3, 3), 2, 2, "lightning", vocab=4)
    W1 = _blocks(arch)
    M = _invertible(seeded_rng(5, "M"), 3)
    Minv_T = np.linalg.inv(M).T
    W2 = dict(W1, E=W1["E"] @ M, **{f"{b}_1_1": W1[f"{b}_1_1"] @ Minv_T for b in "QKV"})
    result = same_block_function(arch, W1, W2)
    assert result.same_function and result.kind == "unexplained" and result.witness is None
    assert any("stream basis at the embedding and logits" in n and "not searched" in n
               for n in result.notes)


@pytest.mark.parametrize("options", [dict(heads=4, kv_heads=2, norm="rmsnorm", qk_norm=True)])
def test_unsearched_options_stay_unexplained(options):
    arch = Architecture((3, 3), (2,), 3, "softmax", **options)
    W = _blocks(arch)
    result = same_block_function(arch, W, {k: v.copy() for k, v in W.items()})
    assert result.same_function and result.kind == "unexplained" and result.witness is None
    assert any("not modelled by the search" in n for n in result.notes)


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_fiber_cli_on_decoder_files_honours_method(tmp_path, capsys):
    arch, draw = CASES["full rotary lightning, commutant and rescaling"]
    W1 = {k: 2 * np.round(4 * v) for k, v in _blocks(arch).items()}   # even integer weights
    W2 = apply_block_witness(arch, W1, [{"layer": 1, "head": 1, "move": "per-head rescaling",
                                         "c": 2.0}])
    a = write_block_weights(tmp_path / "a.npz", W1)
    b = write_block_weights(tmp_path / "b.npz", W2)
    args = ["fiber", "--weights", str(a), "--other", str(b), "--no-residual", "--causal",
            "--positions", "rope", "--json"]
    for method, expected in (("auto", "exact"), ("exact", "exact"), ("numerical", "numerical")):
        code, out, _ = run(capsys, *args, "--method", method)
        d = json.loads(out)
        assert code == 0 and d["same_function"] and d["method"] == expected
        assert d["kind"] == "generic" and d["witness"][0]["move"] == "per-head rescaling"
    # without the rotary positions the same files are another network: one line, exit 2 when
    # an option contradicts the blocks
    code, out, err = run(capsys, *args, "--bias")
    assert code == 2 and out == "" and "`bias`" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "fiber", "--weights", str(a), "--other", str(b), "--no-residual",
                         "--attention", "softmax", "--positions", "rope", "--method", "exact")
    assert code == 2 and "`method`" in err
