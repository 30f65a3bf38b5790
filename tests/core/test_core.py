"""Architecture, parametrisations, network maps and closed forms (issue 2)."""

import math

import pytest
import torch
from conftest import random_matrix

from neuromanifold import (Architecture, AttentionWeights, eq7, eq14, eq16, effective_width,
                           expected_dim, flatten, forward, forward_attention, forward_closed_form,
                           forward_virtual, random_inputs, random_weights, unflatten)
from neuromanifold.core.maps import closed_form_factors
from neuromanifold.symmetries.paper import act_between_layers, act_keys, act_rescale, symmetry_tangents
from neuromanifold.dimension.jacobians import jacobian


def _arch(widths, keys, t=3, attention="lightning"):
    return Architecture(widths, keys, t, attention)


@pytest.mark.parametrize("widths,keys", [((3, 5, 7), (2, 3)), ((4, 2), (3,)), ((5, 3, 2, 4), (2, 3, 2))])
def test_param_count(widths, keys):
    """n_params = sum_i (2 a_i d_{i-1} + d_i d_{i-1}) and equals the flat vector length."""
    arch = _arch(widths, keys)
    expected = sum(2 * a * d0 + d1 * d0 for a, d0, d1 in zip(keys, widths[:-1], widths[1:]))
    assert arch.n_params == expected
    assert flatten(random_weights(arch, seed=1)).numel() == expected


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
def test_flatten_roundtrip(attention):
    """unflatten(flatten(W)) == W block by block."""
    arch = _arch((3, 5, 7), (2, 4), attention=attention)
    W = random_weights(arch, seed=3)
    W2 = unflatten(arch, flatten(W))
    for a, b in zip(W.Q + W.K + W.V, W2.Q + W2.K + W2.V):
        assert torch.equal(a, b)


def test_attention_roundtrip_through_factorisation():
    """(Q, K, V) -> (A, V) -> (Q', K', V) -> (A', V) gives A' == A and the same function."""
    arch = _arch((5, 3, 4), (2, 3))
    W = random_weights(arch, seed=4)
    AW = W.to_attention()
    W2 = AW.to_layer_weights(arch)
    for A, A2 in zip(AW.A, W2.to_attention().A):
        assert torch.allclose(A, A2, atol=1e-12)
    X = random_inputs(arch, 6, seed=4)
    assert torch.allclose(forward(arch, W, X), forward(arch, W2, X), atol=1e-12)


def test_factorisation_rejects_rank_above_keys():
    """An A_i of rank > a_i cannot be written as Q_i^T K_i: clear error."""
    arch = _arch((3, 4), (1,))
    A = AttentionWeights((torch.eye(3, dtype=torch.float64),), (torch.ones(4, 3, dtype=torch.float64),))
    with pytest.raises(ValueError, match=r"`A_1` must be of rank <= a_1 = 1"):
        A.to_layer_weights(arch)


def test_single_layer_matches_definition():
    """phi(X)_i = sum_j (x_j^T A x_i) V x_j (Eq. 1), written out with loops."""
    arch = _arch((3, 2), (2,), t=4)
    W = random_weights(arch, seed=5)
    X = random_inputs(arch, 1, seed=5)[0]
    A, V = W.Q[0].T @ W.K[0], W.V[0]
    expected = torch.stack([sum((X[:, j] @ A @ X[:, i]) * (V @ X[:, j]) for j in range(4))
                            for i in range(4)], dim=1)
    assert torch.allclose(forward(arch, W, X), expected, atol=1e-12)


def test_softmax_normalises_over_aggregated_index():
    """Eq. 15: each output token is a convex combination of the V x_j (weights sum to 1 over j)."""
    arch = _arch((3, 4), (2,), t=5, attention="softmax")
    W = random_weights(arch, seed=6)
    X = random_inputs(arch, 1, seed=6)[0]
    A, V = W.Q[0].T @ W.K[0], W.V[0]
    S = torch.exp(X.T @ A @ X)  # S[j, i]
    expected = (V @ X) @ (S / S.sum(dim=0, keepdim=True))
    assert torch.allclose(forward(arch, W, X), expected, atol=1e-12)


def test_softmax_temperature():
    """S = exp(x / tau): temperature tau equals scaling A by 1/tau."""
    arch_hot = Architecture((3, 5), (2,), 4, "softmax", temperature=2.5)
    arch = Architecture((3, 5), (2,), 4, "softmax")
    W = random_weights(arch, seed=7)
    X = random_inputs(arch, 3, seed=7)
    W_scaled = type(W)((W.Q[0] / 2.5,), W.K, W.V)
    assert torch.allclose(forward(arch_hot, W, X), forward(arch, W_scaled, X), atol=1e-12)


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
@pytest.mark.parametrize("widths,keys", [((3, 5), (2,)), ((4, 3, 5), (2, 3)), ((3, 5, 2, 4), (2, 3, 2))])
def test_all_evaluations_agree(widths, keys, attention):
    """Layer-by-layer (Q,K,V), (A,V) and Lemma 3.6 virtual-weight recursion give the same phi."""
    arch = _arch(widths, keys, t=4, attention=attention)
    W = random_weights(arch, seed=8)
    X = random_inputs(arch, 5, seed=8)
    out = forward(arch, W, X)
    assert out.shape == (5, widths[-1], 4)
    assert torch.allclose(forward_attention(arch, W.to_attention(), X), out, rtol=1e-10, atol=1e-12)
    assert torch.allclose(forward_virtual(arch, W.to_virtual(), X), out, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("widths,keys", [((3, 2), (2,)), ((4, 3, 5), (2, 3)), ((3, 5, 2, 4), (2, 3, 2))])
def test_eq12_closed_form(widths, keys):
    """Eq. 12: phi(X) = V' X prod_k (X^T S_k X) equals the forward pass, l = 1, 2, 3."""
    arch = _arch(widths, keys, t=3)
    W = random_weights(arch, seed=9)
    X = random_inputs(arch, 4, seed=9)
    assert torch.allclose(forward_closed_form(arch, W.to_virtual(), X), forward(arch, W, X),
                          rtol=1e-10, atol=1e-12)


def test_eq12_factor_order():
    """Eq. 12 factors: l = 1 -> (A1); l = 2 -> (A1, A1^T, A2, A1); count (3^l - 1)/2."""
    assert closed_form_factors(1) == [(1, False)]
    assert closed_form_factors(2) == [(1, False), (1, True), (2, False), (1, False)]
    assert len(closed_form_factors(3)) == 13


def test_closed_form_rejects_softmax():
    """Eq. 12 is for lightning only: softmax gets a clear error."""
    arch = _arch((3, 4), (2,), attention="softmax")
    W = random_weights(arch)
    with pytest.raises(ValueError, match="must be 'lightning' for the Eq. 12 closed form"):
        forward_closed_form(arch, W.to_virtual(), random_inputs(arch, 1))


def test_homogeneity_degree():
    """phi is homogeneous of degree 3^l in X (lightning)."""
    arch = _arch((3, 4, 2), (2, 2))
    W = random_weights(arch, seed=10)
    X = random_inputs(arch, 2, seed=10)
    assert torch.allclose(forward(arch, W, 1.3 * X), 1.3 ** 9 * forward(arch, W, X), rtol=1e-10)


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
def test_key_symmetry_preserves_outputs(attention):
    """Lemma 3.1: (Q_i, K_i) -> (C Q_i, C^{-T} K_i) leaves phi unchanged."""
    arch = _arch((4, 3, 5), (2, 3), attention=attention)
    W = random_weights(arch, seed=11)
    X = random_inputs(arch, 4, seed=11)
    C = random_matrix(3, 3, seed=1) + 2 * torch.eye(3, dtype=torch.float64)
    assert torch.allclose(forward(arch, act_keys(W, 2, C), X), forward(arch, W, X), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
def test_interlayer_symmetry_preserves_outputs(attention):
    """Eq. 9: C in GL(d_i) between layers leaves phi unchanged."""
    arch = _arch((4, 3, 5, 2), (2, 3, 2), attention=attention)
    W = random_weights(arch, seed=12)
    X = random_inputs(arch, 4, seed=12)
    C = random_matrix(5, 5, seed=2) + 3 * torch.eye(5, dtype=torch.float64)
    assert torch.allclose(forward(arch, act_between_layers(W, 2, C), X), forward(arch, W, X),
                          rtol=1e-9, atol=1e-12)


def test_rescaling_symmetry_lightning_only():
    """(A_i, V_i) -> (lambda A_i, V_i / lambda) keeps a lightning network, changes a softmax one."""
    X = None
    for attention, same in (("lightning", True), ("softmax", False)):
        arch = _arch((3, 4, 2), (2, 2), attention=attention)
        W = random_weights(arch, seed=13)
        X = random_inputs(arch, 3, seed=13)
        moved = forward(arch, act_rescale(W, 1, 1.7), X)
        assert torch.allclose(moved, forward(arch, W, X), rtol=1e-9) == same


@pytest.mark.parametrize("attention", ["lightning", "softmax"])
def test_symmetry_tangents_in_jacobian_kernel(attention):
    """Every symmetry tangent T satisfies J T^T = 0 (in float64, to round-off)."""
    arch = _arch((3, 4, 2), (2, 3), attention=attention)
    W = random_weights(arch, seed=14)
    T, labels = symmetry_tangents(arch, W)
    assert T.shape == (4 + 9 + 16 + (2 if attention == "lightning" else 0), arch.n_params)
    assert len(labels) == T.shape[0]
    J = jacobian(arch, flatten(W), random_inputs(arch, 6, seed=14))
    assert (J @ T.T).abs().max() < 1e-10 * J.abs().max() * T.abs().max() * arch.n_params


def test_autodiff_jacobian_matches_finite_differences():
    """Forward-mode Jacobian equals central finite differences on a tiny case."""
    arch = _arch((2, 3, 2), (2, 1), t=2, attention="softmax")
    w = flatten(random_weights(arch, seed=15))
    X = random_inputs(arch, 2, seed=15)
    J = jacobian(arch, w, X)
    h = 1e-6
    fd = torch.stack([(forward(arch, unflatten(arch, w + h * e), X) -
                       forward(arch, unflatten(arch, w - h * e), X)).reshape(-1) / (2 * h)
                      for e in torch.eye(arch.n_params, dtype=torch.float64)], dim=1)
    assert torch.allclose(J, fd, atol=1e-7)


# ------------------------------------------------------------------ closed forms


@pytest.mark.parametrize("widths,keys,value", [((3, 3), (2,), 16), ((4, 4), (3,), 30), ((4, 3), (6,), 27)])
def test_eq7_worked_values(widths, keys, value):
    """Corollary 3.3 / Eq. 7 worked values of docs/math/single-layer.md."""
    f = eq7(_arch(widths, keys))
    assert (f.value, f.hypotheses_hold) == (value, True)


@pytest.mark.parametrize("widths,keys,value", [
    ((3, 3, 3), (2, 2), 23), ((5, 5, 5), (2, 2), 55), ((4, 4, 4, 4), (2, 2, 2), 49),
    ((5, 3, 3, 5), (2, 2, 2), 50), ((6, 4, 2, 4), (2, 2, 2), 53)])
def test_eq14_worked_values(widths, keys, value):
    """Corollary 3.8 / Eq. 14 worked values of docs/math/deep.md, hypotheses hold."""
    f = eq14(_arch(widths, keys))
    assert (f.value, f.hypotheses_hold) == (value, True)


@pytest.mark.parametrize("widths,keys,formula,truth", [
    ((3, 5, 3), (2, 2), 27, 23), ((3, 4, 5), (2, 2), 34, 29), ((3, 3, 3), (1, 2), 20, 18)])
def test_eq14_failures_flagged(widths, keys, formula, truth):
    """Where Eq. 14 is wrong (docs/math/deep.md), its hypotheses are reported as failing."""
    f = eq14(_arch(widths, keys))
    assert (f.value, f.hypotheses_hold) == (formula, False)


@pytest.mark.parametrize("widths,keys,truth", [((3, 5, 3), (2, 2), 23), ((3, 4, 5), (2, 2), 29),
                                               ((4, 4, 4, 4), (2, 2, 2), 49)])
def test_effective_width_conjecture_values(widths, keys, truth):
    """Eq. 14 with d_i -> min(d_0..d_i) matches the certified dimensions (docs/math/deep.md); a conjecture."""
    f = effective_width(_arch(widths, keys))
    assert f.value == truth and f.conjecture


def test_eq16_figure3_values():
    """Eq. 16 for Figure 3 (l = 2, t = 3, a = 2): delta^2 + 8 delta - 8; lightning Eq. 14 two less."""
    for delta, value in zip(range(3, 11), (25, 40, 57, 76, 97, 120, 145, 172)):
        assert eq16(_arch((delta,) * 3, (2, 2), attention="softmax")).value == value
        assert eq14(_arch((delta,) * 3, (2, 2))).value == value - 2


def test_single_layer_softmax_formula():
    """Theorem 3.9: single softmax layer has dimension r (2d - r) + d d' (no -1)."""
    f = expected_dim(_arch((4, 3), (2,), attention="softmax"))
    assert (f.name, f.value, f.hypotheses_hold) == ("Eq. 16", 2 * 6 + 12, True)


def test_formula_hypotheses_need_two_tokens():
    """t = 1: no closed form's hypotheses hold (only the symmetric part of A is seen)."""
    assert not expected_dim(_arch((3, 3), (2,), t=1)).hypotheses_hold
    assert not expected_dim(_arch((3, 3, 3), (2, 2), t=1)).hypotheses_hold


def test_deep_ratio_limit():
    """a_i = d, all d_i = d: parameters 3 l d^2, dimension (l+1) d^2 - l (docs/math/deep.md)."""
    d, l = 5, 3
    arch = _arch((d,) * (l + 1), (d,) * l)
    assert arch.n_params == 3 * l * d * d
    assert eq14(arch).value == (l + 1) * d * d - l
    assert math.isclose(arch.n_params / eq14(arch).value, 3 * l / (l + 1), rel_tol=0.05)


@pytest.mark.parametrize("widths,keys,t,truth", [
    ((6, 6, 6, 6), (1, 4, 4), 3, 86), ((6, 6, 6), (1, 2), 3, 63), ((6, 5, 2), (2, 1), 3, 41),
    ((7, 6, 2), (2, 1), 3, 49), ((8, 6, 2), (2, 1), 3, 57), ((6, 5, 1), (2, 1), 3, 35),
    ((3, 3, 3), (2, 2), 3, 23), ((5, 3, 3, 5), (2, 2, 2), 3, 50)])
def test_general_formula_worked_values(widths, keys, t, truth):
    """`general` (a conjecture) gives the certified dimensions of the issue-9 cases."""
    from neuromanifold.core.formulas import general  # noqa: PLC0415
    f = general(Architecture(widths, keys, t))
    assert (f.name, f.value, f.status, f.hypotheses_hold) == ("general", truth, "conjecture", True)
    assert not f.is_the_dimension


def test_general_formula_against_independent_exact_ranks():
    """On random deep architectures nobody tuned it to (l = 4, 5, widths <= 8, any keys and t),
    `general` equals the exact F_p rank of the whole Jacobian (every output coordinate a cotangent)."""
    import random  # noqa: PLC0415
    from neuromanifold.core.formulas import general  # noqa: PLC0415
    from neuromanifold.dimension.fp import DEFAULT_PRIME, rank_mod_p  # noqa: PLC0415
    from neuromanifold.dimension.modular import (jacobian_rows_mod_p, random_residues,  # noqa: PLC0415
                                                 random_weights_mod_p)
    rng, gen, p = random.Random(2026), torch.Generator().manual_seed(11), DEFAULT_PRIME
    for _ in range(4):
        l = rng.choice([4, 5])
        arch = Architecture(tuple(rng.randint(1, 8) for _ in range(l + 1)),
                            tuple(rng.randint(1, 4) for _ in range(l)), rng.choice([1, 2, 3]))
        W = random_weights_mod_p(arch, p, gen)
        out = arch.widths[-1] * arch.tokens
        n = arch.n_params // out + 12
        X = random_residues((n, arch.widths[0], arch.tokens), p, gen)
        G = torch.eye(out, dtype=torch.int64).reshape(-1, arch.widths[-1], arch.tokens)
        J = jacobian_rows_mod_p(W, X, G.expand(n, -1, -1, -1).contiguous(), p)
        assert rank_mod_p(J.numpy(), p) == general(arch).value, arch


def test_eq14_hypotheses_exclude_invisible_widths():
    """Widths 9,7,1 keys 2,2 (non-increasing, a_i >= 2): dimension 71 (certified), Eq. 14 says 75,
    because layer 2 sees only d_2 + 2 a_2 = 5 of the 7 directions; the hypotheses now exclude it."""
    from neuromanifold.core.formulas import general  # noqa: PLC0415
    arch = _arch((9, 7, 1), (2, 2))
    assert eq14(arch).value == 75 and not eq14(arch).hypotheses_hold
    assert not effective_width(arch).hypotheses_hold and general(arch).value == 71
    assert eq14(_arch((6, 4, 2, 4), (2, 2, 2))).hypotheses_hold
