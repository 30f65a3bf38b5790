"""Fibers of block networks: named moves found by same_block_function and applied back exactly."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import torch

from neuromanifold.cli import main
from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import block_forward, block_layout
from neuromanifold.errors import InputError
from neuromanifold.geometry.moves import (_exact_blocks, apply_block_witness,
                                                 same_block_function)
from neuromanifold.io.weightfiles import read_block_weights, write_block_weights

ARCH = Architecture((3, 3, 3), (3, 3), 3, heads=(2, 2), values=(3, 3), residual=True, mlp=(2, 2))


def _unimodular(rng, n):
    L, U = np.eye(n), np.eye(n)
    for i in range(n):
        L[i, :i] = rng.integers(-1, 2, size=i)
        U[i, i + 1:] = rng.integers(-1, 2, size=n - i - 1)
    return L @ U


def _generic_integers(rng):
    """Small integer blocks, redrawn until every block has full rank (generic weights)."""
    while True:
        W = {n: rng.integers(-3, 4, size=s).astype(float) for n, s, _ in block_layout(ARCH)}
        if all(np.linalg.matrix_rank(v) == min(v.shape) for v in W.values()):
            return W


def _pair(seed=1):
    """Integer weights and their image under every kind of move, computed in exact fractions."""
    rng = np.random.default_rng(seed)
    W1 = _generic_integers(rng)

    def exact(M):
        return [[str(Fraction(x)) for x in row] for row in M]

    moves = [
        {"layer": 1, "move": "head permutation", "perm": [2, 1]},
        {"layer": 1, "head": 1, "move": "per-head GL(a)", "G": exact(_unimodular(rng, 3))},
        {"layer": 1, "head": 2, "move": "per-head rescaling", "c": "2"},
        {"layer": 1, "head": 2, "move": "per-head GL(v)", "G": exact(_unimodular(rng, 3))},
        {"layer": 1, "move": "MLP neuron permutation", "perm": [2, 1]},
        {"layer": 1, "move": "MLP neuron rescaling", "c": ["2", "-1/2"]},
        {"layer": 2, "move": "head mixing", "M": [["1", "1"], ["0", "1"]]},
        {"layer": 2, "head": 1, "move": "per-head GL(a)", "G": exact(_unimodular(rng, 3))},
    ]
    return W1, apply_block_witness(ARCH, _exact_blocks(W1), moves)


def test_moves_leave_the_function_unchanged():
    W1, W2 = _pair()
    X = torch.randn((4, 3, 3), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out1 = block_forward(ARCH, {k: torch.tensor(v) for k, v in W1.items()}, X)
    out2 = block_forward(ARCH, {k: torch.tensor(np.asarray(v, float)) for k, v in W2.items()}, X)
    assert torch.allclose(out1, out2, rtol=1e-10, atol=1e-10)


def test_witness_is_found_named_and_applied_back_exactly():
    W1, W2 = _pair()
    r = same_block_function(ARCH, W1, W2)
    assert r.same_function and r.kind == "generic"
    names = {m["move"] for m in r.witness}
    assert {"head permutation", "head mixing", "per-head GL(a)", "MLP neuron rescaling"} <= names
    assert any("applied back exactly" in n for n in r.notes)
    mapped = apply_block_witness(ARCH, _exact_blocks(W1), r.witness)
    assert all(np.array_equal(mapped[k], W2[k]) for k in W2)


def test_different_functions_are_told_apart():
    W1, _ = _pair()
    W3 = dict(W1, P_1=W1["P_1"] + 1.0)
    r = same_block_function(ARCH, W1, W3)
    assert not r.same_function and r.witness is None


def test_exact_identity_agrees_with_float64():
    """The exact identity test (rational outputs at integer inputs) and the float64 one agree:
    moved weights (fractions) are the same function, a changed MLP block is not."""
    W1, W2 = _pair()
    W3 = dict(W1, P_1=W1["P_1"] + 1.0)
    for other, same in ((W2, True), (W3, False)):
        exact = same_block_function(ARCH, W1, other, method="exact")
        numerical = same_block_function(ARCH, W1, other, method="numerical")
        assert exact.method == "exact" and numerical.method == "numerical"
        assert exact.same_function == numerical.same_function == same
        assert (exact.failure_probability > 0) == same
    # the map has degree 3 * 3 * 2 * 2 = 36 in X: the bound is (36 / (2^21 + 1))^8
    assert exact.failure_probability == 0.0
    assert ARCH.polynomial_degrees()[1] == 36


def test_exact_method_is_refused_for_softmax_blocks():
    """Softmax block networks are not polynomial: method='exact' is refused in one line."""
    soft = Architecture((3, 3, 3), (3, 3), 3, attention="softmax", heads=(2, 2), values=(3, 3),
                        residual=True, mlp=(2, 2))
    W1, _ = _pair()
    with pytest.raises(InputError, match="`method` must be 'numerical' or 'auto'"):
        same_block_function(soft, W1, W1, method="exact")


def test_block_files_round_trip_and_cli(tmp_path, capsys):
    rng = np.random.default_rng(3)
    W1 = _generic_integers(rng)
    G = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, -1.0], [0.0, 0.0, 1.0]])
    W2 = dict(W1, Q_1_1=G @ W1["Q_1_1"], K_1_1=np.linalg.inv(G).T @ W1["K_1_1"])
    W2["K_1_1"] = np.round(W2["K_1_1"])  # G unimodular: its inverse is an integer matrix
    a, b = write_block_weights(tmp_path / "a.npz", W1), write_block_weights(tmp_path / "b.npz", W2)
    arch, blocks = read_block_weights(a, residual=True)
    assert arch == ARCH and set(blocks) == set(W1)
    code = main(["fiber", "--weights", str(a), "--other", str(b), "--residual", "--activation",
                 "square", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["same_function"] and data["kind"] == "generic"
    assert data["method"] == "exact"  # auto: integer weights of a polynomial network
    assert [m["move"] for m in data["witness"]] == ["per-head GL(a)"]


def test_bad_block_files(tmp_path):
    np.savez(tmp_path / "bad.npz", Q_1_1=np.ones((2, 3)), K_1_1=np.ones((2, 3)), X_1=np.ones((3, 3)))
    with pytest.raises(InputError, match="names Q_i_h"):
        read_block_weights(tmp_path / "bad.npz")
    np.savez(tmp_path / "shape.npz", Q_1_1=np.ones((2, 3)), K_1_1=np.ones((2, 4)), V_1_1=np.ones((3, 3)))
    with pytest.raises(InputError, match="K_1_1"):
        read_block_weights(tmp_path / "shape.npz")
    np.savez(tmp_path / "gain.npz", g_1=np.ones((3, 1)), Q_1_1=np.ones((2, 3)), K_1_1=np.ones((2, 3)),
             V_1_1=np.ones((3, 3)))
    with pytest.raises(InputError, match="`norm` must be layernorm or rmsnorm"):
        read_block_weights(tmp_path / "gain.npz")
