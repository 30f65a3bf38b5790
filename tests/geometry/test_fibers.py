"""Fibers: symmetry moves, function identity with witnesses, canonical forms (Thms 3.2, 3.7, 3.9)."""

import json

import numpy as np
import pytest
import torch

from neuromanifold import Architecture, LayerWeights, forward, random_inputs, random_weights
from neuromanifold.cli import main
from neuromanifold.geometry.fibers import (apply_witness, canonical_distance, canonical_form, random_fiber_point,
                                  same_function)

DEEP = Architecture((7, 5, 3, 2), (2, 3, 2), 3)
SOFTMAX = Architecture((7, 5, 3), (3, 2), 3, "softmax")


def _outputs(arch, W):
    return forward(arch, W, random_inputs(arch, 5, seed=3))


def _single(Q, K, V):
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return LayerWeights((t(Q),), (t(K),), (t(V),))


@pytest.mark.parametrize("arch", [DEEP, SOFTMAX])
def test_random_fiber_point_keeps_outputs(arch):
    """Random group elements (rescaling, GL(a_i), GL(d_i) of Eq. 9) leave phi unchanged."""
    W = random_weights(arch, seed=1)
    W2 = random_fiber_point(arch, W, seed=2)
    assert not torch.allclose(W.V[0], W2.V[0])
    a, b = _outputs(arch, W), _outputs(arch, W2)
    assert float((a - b).abs().max()) <= 1e-10 * float(a.abs().max())


@pytest.mark.parametrize("arch", [DEEP, SOFTMAX])
def test_perturbation_leaves_fiber(arch):
    """A small random perturbation of W changes the function (numerical test says different)."""
    W = random_weights(arch, seed=4)
    gen = torch.Generator().manual_seed(5)
    W2 = W.map(lambda x: x + 1e-4 * torch.randn(x.shape, generator=gen, dtype=torch.float64))
    result = same_function(arch, W, W2)
    assert result.same_function is False and result.method == "numerical"
    assert result.max_difference > 1e-6


@pytest.mark.parametrize("arch", [DEEP, SOFTMAX])
def test_witness_reproduces_other(arch):
    """The witness maps W1 onto W2 blockwise, so it reproduces W2's function (Theorem 3.7)."""
    W = random_weights(arch, seed=6)
    W2 = random_fiber_point(arch, W, seed=7)
    result = same_function(arch, W, W2)
    assert result.same_function and result.kind == "generic"
    moved = apply_witness(arch, W, result.witness)
    assert canonical_distance(moved, W2) < 1e-8
    a, b = _outputs(arch, moved), _outputs(arch, W2)
    assert float((a - b).abs().max()) <= 1e-10 * float(a.abs().max())
    assert json.loads(json.dumps(result.to_dict()))["kind"] == "generic"


def test_exact_identity_for_integer_weights():
    """Integer lightning weights are compared exactly; a rescaling (2A, V/2) is found (Eq. 13)."""
    arch = Architecture((3, 2), (3,), 3)
    Q, K = [[1, 2, 0], [0, 1, 1], [1, 0, -1]], [[2, 0, 1], [1, 1, 0], [0, -1, 1]]
    W1 = _single(Q, K, [[2, 0, 4], [0, 6, 2]])
    W2 = _single((2 * np.array(Q)).tolist(), K, [[1, 0, 2], [0, 3, 1]])
    result = same_function(arch, W1, W2)
    assert result.same_function and result.method == "exact"
    assert result.failure_probability < 1e-40
    assert result.witness[0] == {"move": "rescale", "layer": 1, "scale": 2.0}
    W3 = _single(Q, K, [[1, 0, 2], [0, 3, 2]])
    assert same_function(arch, W1, W3).same_function is False


def test_theorem_3_2_swap_found():
    """(alpha beta^T, nu gamma^T) ~ (gamma beta^T, nu alpha^T): found exactly, with a swap witness."""
    arch = Architecture((3, 2), (2,), 3)
    alpha, beta, gamma, nu = [1, 2, 3], [0, 1, -1], [2, -1, 1], [1, 4]
    W1 = _single([alpha, [0, 0, 0]], [beta, [0, 0, 0]], np.outer(nu, gamma).tolist())
    W2 = _single([gamma, [0, 0, 0]], [beta, [0, 0, 0]], np.outer(nu, alpha).tolist())
    result = same_function(arch, W1, W2)
    assert result.same_function and result.method == "exact" and result.kind == "swap"
    assert result.witness[0]["move"] == "swap"
    moved = apply_witness(arch, W1, result.witness)
    X = random_inputs(arch, 4, seed=8)
    assert torch.allclose(forward(arch, moved, X), forward(arch, W2, X), rtol=1e-12, atol=1e-12)
    assert canonical_distance(moved, W2) < 1e-8


def test_zero_fiber():
    """A = 0 and V = 0 give the same (zero) function: the Theorem 3.2 case-2 fiber."""
    arch = Architecture((3, 2), (2,), 3)
    W1 = _single([[0, 0, 0], [0, 0, 0]], [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]])
    W2 = _single([[1, 0, 0], [0, 1, 0]], [[1, 2, 3], [4, 5, 6]], [[0, 0, 0], [0, 0, 0]])
    result = same_function(arch, W1, W2)
    assert result.same_function and result.kind == "zero"
    with pytest.raises(ValueError, match="A zero fiber has no group element"):
        apply_witness(arch, W1, result.witness)


def test_softmax_rescaling_is_not_a_symmetry():
    """Theorem 3.9: for softmax with V != 0 the fiber in (A, V) is a point, so (2A, V/2) differs."""
    arch = Architecture((5, 3), (2,), 3, "softmax")
    W = random_weights(arch, seed=9)
    W2 = LayerWeights((2 * W.Q[0],), W.K, (W.V[0] / 2,))
    assert same_function(arch, W, W2).same_function is False


@pytest.mark.parametrize("arch", [DEEP, SOFTMAX, Architecture((5, 3), (2,), 3)])
def test_canonical_form_constant_on_fibers(arch):
    """Canonical forms agree along a fiber and differ across fibers; they define the same function."""
    W = random_weights(arch, seed=10)
    canon = canonical_form(arch, W)
    for seed in (11, 12):
        assert canonical_distance(canonical_form(arch, random_fiber_point(arch, W, seed)), canon) < 1e-8
    other = canonical_form(arch, random_weights(arch, seed=13))
    assert canonical_distance(other, canon) > 1e-2
    assert same_function(arch, W, canon).same_function


def test_errors_follow_template():
    """Bad arguments raise the template errors naming the argument."""
    W = random_weights(DEEP, seed=0)
    with pytest.raises(TypeError, match="`weights` must be LayerWeights"):
        same_function(DEEP, "W", W)
    with pytest.raises(ValueError, match="`other` must be weights of 3 layers"):
        same_function(DEEP, W, random_weights(Architecture((7, 5), (2,), 3)))
    with pytest.raises(ValueError, match="`method` must be 'numerical' or 'auto' for softmax"):
        same_function(SOFTMAX, random_weights(SOFTMAX), random_weights(SOFTMAX), method="exact")
    with pytest.raises(ValueError, match="`arch.widths` must be non-increasing"):
        arch = Architecture((3, 5, 2), (2, 2), 3)
        canonical_form(arch, random_weights(arch))


def _save(path, W):
    arrays = {}
    for i in range(W.n_layers):
        arrays.update({f"Q_{i + 1}": W.Q[i].numpy(), f"K_{i + 1}": W.K[i].numpy(), f"V_{i + 1}": W.V[i].numpy()})
    np.savez(path, **arrays)
    return str(path)


def test_cli_fiber_json(tmp_path, capsys):
    """`fiber --json` reports same_function and a witness for a fiber point, false otherwise."""
    W = random_weights(DEEP, seed=14)
    a = _save(tmp_path / "a.npz", W)
    b = _save(tmp_path / "b.npz", random_fiber_point(DEEP, W, seed=15))
    c = _save(tmp_path / "c.npz", random_weights(DEEP, seed=16))
    assert main(["fiber", "--weights", a, "--other", b, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same_function"] is True and out["method"] == "numerical" and out["witness"]
    assert main(["fiber", "--weights", a, "--other", c, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["same_function"] is False


def test_cli_fiber_bad_files(tmp_path, capsys):
    """Missing, malformed or mismatched files give one stderr line and exit code 2."""
    W = random_weights(DEEP, seed=17)
    a = _save(tmp_path / "a.npz", W)
    small = _save(tmp_path / "s.npz", random_weights(Architecture((7, 5), (2,), 3)))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    assert main(["fiber", "--weights", a, "--other", str(tmp_path / "none.npz")]) == 2
    assert "`other` must be an existing .npz file" in capsys.readouterr().err
    assert main(["fiber", "--weights", a, "--other", str(bad)]) == 2
    assert "`other` must be a readable .npz archive" in capsys.readouterr().err
    assert main(["fiber", "--weights", a, "--other", small]) == 2
    err = capsys.readouterr().err
    assert "`other` must be weights of the same architecture" in err and len(err.strip().splitlines()) == 1


def test_weight_file_round_trip(tmp_path):
    """write_weights then read_weights returns the same blocks and architecture; no overwrite."""
    from neuromanifold import read_weights, write_weights

    W = random_weights(DEEP, seed=18)
    path = write_weights(tmp_path / "w.npz", W)
    data = read_weights(path, tokens=3)
    assert data.arch == DEEP and canonical_distance(data.layer_weights, W) == 0.0
    with pytest.raises(ValueError, match="`path` must be a new file"):
        write_weights(path, W)


def test_exact_method_reads_floats_exactly():
    """method='exact' compares the stored dyadic rationals: equal weights agree, a float64 fiber point
    generally does not (its round-off changes the function), which the numerical method tolerates."""
    arch = Architecture((5, 3), (2,), 3)
    W = random_weights(arch, seed=19)
    assert same_function(arch, W, W.map(torch.clone), method="exact").same_function
    W2 = random_fiber_point(arch, W, seed=20)
    assert same_function(arch, W, W2, method="exact").same_function is False
    assert same_function(arch, W, W2, method="numerical").same_function


def test_expanding_widths_unseen_directions():
    """d_1 > d_0 (outside Theorem 3.7): changing Q_2, K_2, V_2 off col(V_1) keeps phi; witness says so."""
    arch = Architecture((3, 5, 3), (2, 2), 3)
    W = random_weights(arch, seed=21)
    moved = random_fiber_point(arch, W, seed=22)
    result = same_function(arch, W, moved)
    assert result.same_function and result.kind in ("generic", "unseen")
    assert canonical_distance(apply_witness(arch, W, result.witness), moved) < 1e-8
    U = torch.linalg.svd(W.V[0]).U[:, 3:]  # an orthonormal basis of col(V_1)^perp in R^5
    gen = torch.Generator().manual_seed(23)
    blind = lambda M: M + torch.randn((M.shape[0], 2), generator=gen, dtype=torch.float64) @ U.T  # noqa: E731
    W2 = LayerWeights(W.Q[:1] + (blind(W.Q[1]),), W.K[:1] + (blind(W.K[1]),), W.V[:1] + (blind(W.V[1]),))
    result = same_function(arch, W, W2)
    assert result.same_function and result.kind == "unseen"
    assert canonical_distance(apply_witness(arch, W, result.witness), W2) < 1e-8


def test_cli_fiber_swap_from_attention_files(tmp_path, capsys):
    """(A, V) files of the Theorem 3.2 swap: exact, kind 'swap', witness reproduces W2's blocks."""
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, A_1=np.outer([1, 2, 3], [0, 1, -1]), V_1=np.outer([1, 4], [2, -1, 1]))
    np.savez(b, A_1=np.outer([2, -1, 1], [0, 1, -1]), V_1=np.outer([1, 4], [1, 2, 3]))
    assert main(["fiber", "--weights", str(a), "--other", str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same_function"] and out["method"] == "exact" and out["kind"] == "swap"
    assert [m["move"] for m in out["witness"]][0] == "swap" and out["witness_residual"] < 1e-12
