"""One layer's geometry: the Theorem 3.4 classification agrees with the Jacobian rank (Lemma A.3)."""

import json

import numpy as np
import pytest
import torch
from conftest import random_matrix

from neuromanifold import AttentionWeights, LayerWeights
from neuromanifold.cli import main
from neuromanifold.geometry.classify import classify_layer

ALPHA, BETA, NU = [1, 2, 3], [0, 1, -1], [1, 4]
KINDS = ["generic", "boundary", "rank-one", "A=0", "V=0"]


def _aw(A, V):
    return AttentionWeights((torch.tensor(A, dtype=torch.float64),), (torch.tensor(V, dtype=torch.float64),))


def _random_point(kind, d, d_out, rng, integer):
    draw = ((lambda *s: rng.integers(-6, 7, size=s).astype(float)) if integer
            else (lambda *s: rng.standard_normal(s)))
    alpha, beta, gamma, nu = draw(d), draw(d), draw(d), draw(d_out)
    if kind == "generic":
        return draw(d, d), draw(d_out, d)
    if kind == "boundary":
        return np.outer(alpha, beta), np.outer(nu, alpha)
    if kind == "rank-one":
        return np.outer(alpha, beta), np.outer(nu, gamma)
    if kind == "A=0":
        return np.zeros((d, d)), draw(d_out, d)
    return draw(d, d), np.zeros((d_out, d))


# (kind, A, V, smooth, singular, boundary, critical, jacobian rank) for d = 3, d' = 2, a = 3.
MATH_MD = [
    ("generic", [[1, 2, 0], [0, 1, 1], [3, 0, -1]], [[1, 0, 2], [0, 3, 1]], True, False, False, False, 14),
    ("boundary", np.outer(ALPHA, BETA).tolist(), np.outer(NU, ALPHA).tolist(), False, True, True, True, 12),
    ("rank-one", np.outer(ALPHA, BETA).tolist(), np.outer(NU, BETA).tolist(), False, True, False, False, 14),
    ("A=0", [[0] * 3] * 3, [[1, 0, 2], [0, 3, 1]], False, True, True, True, 9),
    ("V=0", [[1, 2, 0], [0, 1, 1], [3, 0, -1]], [[0] * 3] * 2, False, True, True, True, 6),
]


@pytest.mark.parametrize("case", MATH_MD, ids=[c[0] for c in MATH_MD])
def test_math_md_ranks_exact(case):
    """Thm 3.4, Lemma A.3 (docs/math/single-layer.md): ranks 14, 12, 14, 9, 6 over F_p, with classes."""
    _, A, V, smooth, singular, boundary, critical, rank = case
    c = classify_layer(_aw(A, V))
    assert c.rank_method == "exact"
    assert (c.smooth, c.singular, c.boundary, c.critical) == (smooth, singular, boundary, critical)
    assert c.jacobian_rank == rank == c.expected_jacobian_rank and c.agrees


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("integer", [True, False], ids=["exact", "numerical"])
def test_random_points_of_each_kind(kind, integer):
    """At random points of each kind (d = 5, d' = 3), classification and Jacobian rank agree."""
    rng = np.random.default_rng(KINDS.index(kind) * 2 + integer)
    A, V = _random_point(kind, 5, 3, rng, integer)
    c = classify_layer(_aw(A, V), tokens=2, seed=1)
    assert c.rank_method == ("exact" if integer else "numerical")
    assert c.agrees, (c.jacobian_rank, c.expected_jacobian_rank)
    assert c.critical == (c.jacobian_rank < c.generic_jacobian_rank) == (kind in ("boundary", "A=0", "V=0"))
    assert c.singular == (kind != "generic")
    assert c.boundary == c.critical


def test_query_key_input_matches_attention_input():
    """(Q, K, V) input is classified through A = Q^T K, like (A, V) input."""
    rng = np.random.default_rng(2)
    Q, K, V = rng.standard_normal((2, 4)), rng.standard_normal((2, 4)), rng.standard_normal((3, 4))
    W = LayerWeights((torch.from_numpy(Q),), (torch.from_numpy(K),), (torch.from_numpy(V),))
    c = classify_layer(W)
    assert c.keys == 2 and c.smooth and c.jacobian_rank == 4 * 4 + 4 * 3 - 1
    assert any("a = 2 < d = 4" in n for n in c.notes)


def test_deep_weights_rejected():
    """classify is for one layer: two layers raise the template error."""
    W = AttentionWeights((torch.eye(3), torch.eye(3)), (torch.eye(3), torch.eye(3)))
    with pytest.raises(ValueError, match="`weights` must be single-layer weights for classify"):
        classify_layer(W)


def test_cli_classify_json(tmp_path, capsys):
    """`classify --json` gives the four booleans and the Jacobian rank; (A, V) and (Q, K, V) files."""
    path = tmp_path / "b.npz"
    np.savez(path, A_1=np.outer(ALPHA, BETA), V_1=np.outer(NU, ALPHA))
    assert main(["classify", "--weights", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["smooth"], out["singular"], out["boundary"], out["critical"]) == (False, True, True, True)
    assert out["jacobian_rank"] == 12 and out["rank_method"] == "exact"
    qkv = tmp_path / "q.npz"
    np.savez(qkv, Q_1=np.eye(3), K_1=np.array([[1, 2, 0], [0, 1, 1], [3, 0, -1]]), V_1=np.ones((2, 3)))
    assert main(["classify", "--weights", str(qkv)]) == 0
    assert "jacobian rank  14" in capsys.readouterr().out


def test_cli_classify_bad_input(tmp_path, capsys):
    """Deep, malformed or inconsistent files: one stderr line, exit code 2."""
    deep = tmp_path / "deep.npz"
    np.savez(deep, A_1=np.eye(3), V_1=np.eye(3), A_2=np.eye(3), V_2=np.eye(2, 3))
    assert main(["classify", "--weights", str(deep)]) == 2
    err = capsys.readouterr().err
    assert "`weights` must be a single-layer file for classify" in err and len(err.strip().splitlines()) == 1
    cases = {
        "names.npz": ({"W_1": np.eye(3), "V_1": np.eye(3)}, "must be arrays named Q_i, K_i, V_i"),
        "shape.npz": ({"Q_1": np.eye(3), "K_1": np.eye(2), "V_1": np.eye(3)}, "both of shape"),
        "chain.npz": ({"A_1": np.eye(3), "V_1": np.eye(3), "A_2": np.eye(2), "V_2": np.eye(2)},
                      "must be of shape \\(d_2, 3\\)"),
        "nan.npz": ({"A_1": np.full((2, 2), np.nan), "V_1": np.eye(2)}, "must be finite"),
        "both.npz": ({"A_1": np.eye(2), "Q_1": np.eye(2), "K_1": np.eye(2), "V_1": np.eye(2)},
                     "layer 1 given as"),
    }
    for name, (arrays, message) in cases.items():
        np.savez(tmp_path / name, **arrays)
        assert main(["classify", "--weights", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert __import__("re").search(message, err), (name, err)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, A_1=np.array([{"a": 1}, None], dtype=object), V_1=np.eye(2))
    assert main(["classify", "--weights", str(pickled)]) == 2
    assert "no pickled objects" in capsys.readouterr().err


def test_one_token_sees_only_symmetric_part():
    """t = 1 is outside Theorem 3.4: the rank drops to d(d+1)/2 + d d' - 1 and `agrees` is False."""
    c = classify_layer(_aw([[1, 2, 0], [0, 1, 1], [3, 0, -1]], [[1, 0, 2], [0, 3, 1]]), tokens=1)
    assert c.jacobian_rank == 6 + 6 - 1 and not c.agrees
    assert any("t = 1" in n for n in c.notes)


def test_width_one_layer_is_never_critical():
    """d = 1: every point has the boundary form, yet the Jacobian keeps its generic rank n - 1,
    so classify agrees with the theorem instead of reporting a spurious mismatch."""
    from neuromanifold import AttentionWeights

    A = torch.tensor([[2.0]], dtype=torch.float64)
    V = torch.tensor([[1.0], [3.0], [-2.0]], dtype=torch.float64)
    result = classify_layer(AttentionWeights((A,), (V,)), tokens=3, seed=5)
    assert result.boundary and not result.critical
    assert result.jacobian_rank == result.generic_jacobian_rank == 3 and result.agrees


def test_ambiguous_float_rank_is_not_settled():
    """A float A whose singular values have no clear gap is flagged, not silently classified."""
    from neuromanifold import AttentionWeights

    A = torch.diag(torch.tensor([1.0, 1e-5, 1e-9], dtype=torch.float64))
    V = random_matrix(2, 3, seed=7)
    result = classify_layer(AttentionWeights((A,), (V,)), tokens=3, seed=6)
    assert not result.ranks_settled and any("ambiguous" in n for n in result.notes)


@pytest.mark.parametrize("A, V", [
    (np.outer([1, 2, 3], [0, 1, -1]), [[1, 0, 2], [0, 3, 1], [1, 3, 3], [2, 0, 4]]),   # rank A = 1, rank V = 2
    ([[1, 2, 0], [0, 1, 1], [1, 3, 1]], np.outer([1, 4, -2, 3], [2, 0, 1])),            # rank A = 2, rank V = 1
])
def test_singular_needs_both_ranks_at_most_one(A, V):
    """Theorem 3.4: singular <=> rank A <= 1 AND rank V <= 1; one rank of 2 leaves the point smooth.

    d = 3, d' = 4 (pairwise distinct); the Jacobian rank is the generic n - 1 = 9 + 12 - 1 = 20.
    """
    c = classify_layer(_aw(np.asarray(A).tolist(), np.asarray(V).tolist()), tokens=4)
    assert sorted((c.rank_A, c.rank_V)) == [1, 2]
    assert c.smooth and not c.singular and not c.boundary and not c.critical
    assert c.jacobian_rank == 20 and c.agrees


def test_both_ranks_one_is_singular():
    """Theorem 3.4: rank A = 1 and rank V = 1 (not of boundary form) is a singular point."""
    c = classify_layer(_aw(np.outer([1, 2, 3], [0, 1, -1]).tolist(),
                           np.outer([1, 4, -2, 3], [2, 0, 1]).tolist()), tokens=4)
    assert (c.rank_A, c.rank_V) == (1, 1)
    assert c.singular and not c.smooth and not c.boundary
