"""functional_dim: the Jacobian rank of any module, checked against `dim` on the paper's networks
and against hand-counted symmetries of torch's own attention modules (fused kernels included)."""

import pytest
import torch

import neuromanifold as nm
import neuromanifold.dimension.result
from neuromanifold.core.maps import forward
from neuromanifold.errors import InputError
from neuromanifold.models.functional import functional_dim


class PaperNet(torch.nn.Module):
    """The paper's network as a module: same weights (random_weights, same seed), same map."""

    def __init__(self, arch, seed):
        super().__init__()
        w = nm.random_weights(arch, seed=seed)
        self.arch = arch
        self.Q = torch.nn.ParameterList([torch.nn.Parameter(x.clone()) for x in w.Q])
        self.K = torch.nn.ParameterList([torch.nn.Parameter(x.clone()) for x in w.K])
        self.V = torch.nn.ParameterList([torch.nn.Parameter(x.clone()) for x in w.V])

    def forward(self, X):
        return forward(self.arch, nm.LayerWeights(tuple(self.Q), tuple(self.K), tuple(self.V)), X)


def _draw(arch):
    return lambda n, g: torch.randn(n, arch.widths[0], arch.tokens, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("arch", [nm.Architecture((3, 3, 3), (2, 2), 3),
                                  nm.Architecture((4, 3, 5), (2, 3), 3, "softmax"),
                                  nm.Architecture((2, 4), (1,), 5)], ids=str)
def test_functional_dim_equals_dim(arch):
    """Same seed family, same answer as the numerical engine (which splits off symmetries)."""
    r = functional_dim(PaperNet(arch, seed=3), _draw(arch), seed=3)
    d = nm.neuromanifold_dim(arch, method="numerical", seed=3)
    assert r.is_settled and d.is_settled
    assert (r.dimension, r.n_params) == (d.dimension, d.n_params)
    assert r.dimension + r.fiber_dim == r.n_params


class MHA(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        torch.manual_seed(1)
        self.m = torch.nn.MultiheadAttention(d, h, batch_first=True)

    def forward(self, x):
        return self.m(x, x, x, need_weights=False)[0]


class SDPA(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        torch.manual_seed(2)
        self.h = h
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        out = torch.nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                                               split(self.v(x)))
        return self.scale * out


def _tokens(d, t=4):
    return lambda n, g: torch.randn(n, t, d, generator=g, dtype=torch.float64)


def test_fused_multihead_attention_falls_back_and_counts_symmetries():
    """nn.MultiheadAttention (6 wide, 2 heads): 168 params minus per-head GL(3) on (Q, K) and on
    (V, O) (2 * 2 * 9), the key bias (6) and the value bias absorbed into the output bias (6)."""
    r = functional_dim(MHA(6, 2), _tokens(6))
    assert r.is_settled and (r.n_params, r.dimension) == (168, 168 - 36 - 12)
    assert r.architecture["jacobian_mode"] != "forward"
    assert any("failed" in n for n in r.notes)


def test_sdpa_with_buffer_and_param_restriction():
    """F.scaled_dot_product_attention with a buffer: per-head GL(3) on (Q, K) and the key bias."""
    r = functional_dim(SDPA(6, 2), _tokens(6))
    assert r.is_settled and (r.n_params, r.dimension) == (126, 126 - 18 - 6)
    only_q = functional_dim(SDPA(6, 2), _tokens(6), params=["q.weight", "q.bias"])
    assert only_q.n_params == 42 and only_q.is_settled and only_q.dimension == 42


def test_fixed_batch_and_symmetry_tangents():
    lin = torch.nn.Sequential(torch.nn.Linear(3, 2, bias=False), torch.nn.Linear(2, 2, bias=False))
    X = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    with pytest.warns(nm.dimension.result.AmbiguousRankWarning):
        r = functional_dim(lin, X)  # a fixed batch cannot show saturation in N by itself
    assert r.status == "ambiguous" and (r.n_params, r.dimension) == (10, 6)

    def gl2(named):  # tangents of (A, B) -> (M A, B M^-1) at the current weights
        A, B = named["0.weight"], named["1.weight"]
        rows = []
        for i in range(2):
            for j in range(2):
                E = torch.zeros(2, 2, dtype=torch.float64)
                E[i, j] = 1
                rows.append(torch.cat([(E @ A).reshape(-1), (-B @ E).reshape(-1)]))
        return torch.stack(rows)

    s = functional_dim(lin, X, symmetry_tangents=gl2)
    assert s.is_settled and s.dimension == 6 and s.upper_bound == 6


def test_module_left_unchanged():
    m = SDPA(4, 2).float().train()
    functional_dim(m, _tokens(4), samples=20)
    assert m.training and m.q.weight.dtype == torch.float32


@pytest.mark.parametrize("call", [
    lambda: functional_dim(torch.nn.ReLU(), torch.zeros(3, 2)),
    lambda: functional_dim(torch.nn.Linear(3, 2), torch.zeros(5, 4)),
    lambda: functional_dim(torch.nn.Linear(3, 2), torch.zeros(5, 3), params=["nope"]),
    lambda: functional_dim(torch.nn.Linear(3, 2), torch.zeros(5, 3), samples=4),
    lambda: functional_dim("model", torch.zeros(5, 3)),
])
def test_bad_input_is_one_line(call):
    with pytest.raises(InputError) as info:
        call()
    assert "\n" not in str(info.value)
