"""A long-lived session (a notebook): the second identical call builds nothing again (issue 39)."""

from __future__ import annotations

import pytest

from neuromanifold.core import architecture as architecture_module
from neuromanifold.core.architecture import Architecture
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.symmetries import registry


def _builds() -> tuple[int, int, int]:
    """How often the per-network look-ups were worked out (cache misses = builder calls)."""
    return (registry.catalogue_plan.cache_info().misses, registry.families_for.cache_info().misses,
            architecture_module._block_layout.cache_info().misses)


def _answer(result) -> dict:
    out = result.to_dict()
    out.pop("seconds")
    return out


@pytest.mark.parametrize("method", ["certified", "numerical"])
def test_second_identical_call_rebuilds_nothing_and_answers_the_same(method):
    """Second call on an equal (not the same) network: no registry plan or layout is rebuilt,
    the look-ups are read from the cache, and the result is the first one's, but the seconds."""
    first = neuromanifold_dim(Architecture((4, 4), 2, 3, heads=2, mlp=3), method=method, seed=5)
    built, hits = _builds(), registry.catalogue_plan.cache_info().hits
    second = neuromanifold_dim(Architecture((4, 4), 2, 3, heads=2, mlp=3), method=method, seed=5)
    assert _builds() == built
    assert registry.catalogue_plan.cache_info().hits > hits
    assert _answer(second) == _answer(first)
    assert first.dimension == 55


def test_a_new_network_or_a_cleared_cache_is_built_again():
    """The counters above can move: another network, or `registry_cache_clear`, builds anew."""
    neuromanifold_dim(Architecture((4, 4), 2, 3, heads=2, mlp=3), method="certified")
    plans = registry.catalogue_plan.cache_info().misses
    neuromanifold_dim(Architecture((5, 5), 2, 3, heads=2, mlp=3), method="certified")
    assert registry.catalogue_plan.cache_info().misses == plans + 1
    registry.registry_cache_clear()
    neuromanifold_dim(Architecture((4, 4), 2, 3, heads=2, mlp=3), method="certified")
    assert registry.catalogue_plan.cache_info().misses == 1


def test_cached_layout_is_a_fresh_list_each_call():
    """`block_layout` hands out a new list: a caller that edits it cannot corrupt the cache."""
    arch = Architecture((4, 4), 2, 3, heads=2, mlp=3)
    layout = arch.param_layout()
    layout.clear()
    assert arch.param_layout() and sum(s[0] * s[1] for _, s, _ in arch.param_layout()) == arch.n_params
