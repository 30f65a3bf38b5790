"""Engines plan, then run: the plan (route, first N, peak) is made without torch and checked once."""

import subprocess
import sys

import pytest

from neuromanifold import Architecture, neuromanifold_dim
from neuromanifold.dimension import memory, plan
from neuromanifold.errors import ResourceError


def test_plans_are_made_without_importing_torch():
    """Every engine's plan is arithmetic on the architecture: torch stays unimported."""
    code = ("import sys; from neuromanifold import Architecture; "
            "from neuromanifold.dimension import plan as p; "
            "a = Architecture((96, 96, 96), (12, 12), 16, 'softmax'); "
            "b = Architecture((4, 4, 4), (2, 2), 3, heads=2, residual=True, mlp=3); "
            "c = Architecture((8, 8, 8), 4, 4, 'softmax', heads=2, kv_heads=1, residual=True, "
            "mlp=8, mlp_kind='gated', bias=True, causal=True, positions='rope', norm='rmsnorm', "
            "final_norm=True, qk_norm=True, vocab=11); "
            "plans = [p.numerical_plan(a), p.numerical_plan(a, backend='dask'), "
            "p.exact_plan(b), p.certified_plan(a), p.numerical_plan(c), p.certified_plan(c)]; "
            "print(sorted({q.engine for q in plans}), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("]")[-1].strip() == "False", out.stdout


@pytest.mark.parametrize("arch, route", [
    (Architecture((128, 128, 128), (16, 16), 16, "softmax"), "eliminate"),   # 40,960 parameters
    (Architecture((24, 24, 24), (4, 4), 4, "softmax"), "full"),              # below the threshold
    (Architecture((128, 128, 128), (16, 16), 16, "lightning"), "full"),      # no gauge
    (Architecture((64, 64, 64), (8, 8), 4, "softmax", heads=2), "full"),     # not the paper's model
])
def test_numerical_plan_resolves_the_route_once(arch, route):
    """Route 'auto' is decided by the plan; the estimate is the one of that route, at the plan's N."""
    p = plan.numerical_plan(arch)
    assert (p.engine, p.route) == ("numerical", route)
    assert p.estimate == memory.numerical_estimate(arch, route=route)
    assert f"N = {p.samples})" in p.estimate.what and p.samples >= 2


def test_exact_plan_names_the_route_and_its_first_n():
    paper = plan.exact_plan(Architecture((3, 3, 3), 2, 3))
    blocks = plan.exact_plan(Architecture((3, 3, 3), 2, 3, heads=2))
    assert (paper.route, blocks.route) == ("reverse", "forward-dual")
    assert plan.exact_plan(Architecture((3, 3, 3), 2, 3), samples=7).samples == 7


def test_the_memory_check_reads_the_plan_once(monkeypatch):
    """One check per run, whichever engine: the API checks the plan and hands it to the engine,
    which does not estimate or check again; an engine called directly checks its own plan."""
    calls = []
    real = plan.check_memory

    def counting(estimate, *args, **kwargs):
        calls.append(estimate.what)
        return real(estimate, *args, **kwargs)

    monkeypatch.setattr(plan, "check_memory", counting)
    monkeypatch.setattr(memory, "check_memory", lambda *a, **k: pytest.fail("checked outside the plan"))
    cases = [(Architecture((3, 3, 3), 2, 3, "softmax"), "numerical"),
             (Architecture((3, 3, 3), 2, 3), "certified"),
             (Architecture((3, 3, 3), 2, 3, heads=2), "exact"),
             (Architecture((3, 3, 3), 2, 3, "softmax"), "auto")]
    for arch, method in cases:
        calls.clear()
        neuromanifold_dim(arch, method=method)
        assert len(calls) == 1, (method, calls)
    from neuromanifold.dimension.numerical import numerical_dim

    calls.clear()
    numerical_dim(Architecture((3, 3, 3), 2, 3, "softmax"))
    assert len(calls) == 1


def test_a_plan_over_budget_is_refused_before_torch_work():
    p = plan.numerical_plan(Architecture((128, 128, 128), (16, 16), 16, "softmax"))
    with pytest.raises(ResourceError, match="max_memory"):
        p.check("1M")
    assert p.check("1T").checked and "N = " in p.describe()


@pytest.mark.parametrize("attention, kwargs", [
    ("softmax", dict(heads=2)),
    ("softmax", dict(residual=True, mlp=4, norm="rmsnorm", vocab=5, final_norm=True)),
    ("softmax", dict(vocab=3, residual=True, mlp=2)),   # 27 sequences: all of them
    ("lightning", dict(heads=2, values=1, bias=True)),
])
def test_block_plans_draw_at_least_the_engines_first_n(attention, kwargs):
    """Beyond the paper's model the plan over-estimates the rank bound (the registry's tangents
    are built in torch), so its first N, at which the peak is estimated, is at least the one
    the engine draws; with a vocabulary it counts the covering or all V^t sequences."""
    from neuromanifold.dimension.numerical import numerical_dim

    arch = Architecture((4, 4, 4), 2, 3, attention, **kwargs)
    result = numerical_dim(arch) if attention == "lightning" else _quiet(numerical_dim, arch)
    assert plan.numerical_plan(arch).samples >= result.rank_history[0][0]
    if arch.vocab is not None and arch.n_sequences <= 64:
        assert plan.numerical_plan(arch).samples == arch.n_sequences


def test_block_exact_plans_draw_at_least_the_engines_first_n():
    from neuromanifold.dimension.exact import exact_dim

    for arch in (Architecture((4, 4, 4), 2, 3, heads=2),
                 Architecture((4, 4, 4), 2, 2, vocab=5, mlp=3)):
        assert plan.exact_plan(arch).samples >= exact_dim(arch).rank_history[0][0]
    assert plan.exact_plan(Architecture((4, 4, 4), 2, 2, vocab=5, mlp=3)).samples == 25


def test_block_estimates_count_the_tangents_and_columns_from_the_layout():
    """n_params from the layout, at most n_params tangent rows, the ambient bound on N."""
    arch = Architecture((6, 6, 6), 2, 3, heads=2, residual=True, mlp=4, vocab=7, causal=True)
    assert memory.tangent_count(arch) == arch.n_params
    assert memory._upper_guess(arch) == (arch.n_params, arch.n_params)
    one = Architecture((4, 4), 2, 1, heads=2)   # ambient bound d' (d + 2 choose 3) = 80
    assert memory._rank_bound(one) == min(one.n_params, 80)


def _quiet(engine, arch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return engine(arch)
