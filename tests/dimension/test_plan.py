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
            "plans = [p.numerical_plan(a), p.numerical_plan(a, backend='dask'), "
            "p.exact_plan(b), p.certified_plan(a)]; "
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
