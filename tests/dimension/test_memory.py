"""Gauge fixing, memory estimates and refusals (issue 13)."""

import pytest
import torch

from neuromanifold import Architecture, neuromanifold_dim, numerical_dim
from neuromanifold.errors import ResourceError
from neuromanifold.core.parameters import flatten, random_weights, random_inputs
from neuromanifold.symmetries.paper import symmetry_tangents
from neuromanifold.dimension import gauge
from neuromanifold.dimension.growth import first_target
from neuromanifold.dimension.jacobians import jacobian


@pytest.mark.parametrize("widths,keys,t", [((6, 5, 4), (3, 2), 4), ((8, 8, 8), (3, 3), 5),
                                           ((5, 4, 3, 2), (2, 3, 1), 3)])
def test_gauge_pivots_are_independent_on_the_tangents(widths, keys, t):
    """The tangents restricted to the pivot columns have full rank (so rank J = rank J[:, free])."""
    arch = Architecture(widths, keys, t, "softmax")
    W = random_weights(arch, 4)
    split = gauge.gauge_split(arch, W)
    T, _ = symmetry_tangents(arch, W)
    keep = torch.ones(arch.n_params, dtype=torch.bool)
    keep[split.free] = False
    assert int(keep.sum()) == T.shape[0] == split.rank == gauge.tangent_count(arch)
    assert torch.linalg.matrix_rank(T[:, keep]) == T.shape[0]


@pytest.mark.parametrize("widths,keys,t", [((6, 5, 4), (3, 2), 4), ((7, 7, 7), (2, 3), 3)])
def test_gauge_and_dense_routes_agree(widths, keys, t, monkeypatch):
    """The gauge-fixed rank equals the rank read on the dense complement of the tangents."""
    arch = Architecture(widths, keys, t, "softmax")
    fixed = numerical_dim(arch, seed=5)
    assert "free columns of a gauge" in " ".join(fixed.notes)
    monkeypatch.setattr(gauge, "gauge_split", lambda *_: None)
    dense = numerical_dim(arch, seed=5)
    assert (fixed.dimension, fixed.status) == (dense.dimension, dense.status) == (fixed.upper_bound, "settled")


def test_gauge_rows_match_full_jacobian_columns():
    """Forward mode on the free columns gives the same numbers as the full Jacobian's columns."""
    arch = Architecture((6, 5, 4), (3, 2), 4, "softmax")
    W = random_weights(arch, 6)
    params, X = flatten(W), random_inputs(arch, 3, 6)
    split = gauge.gauge_split(arch, W)
    full = jacobian(arch, params, X)[:, split.free]
    torch.testing.assert_close(gauge.forward_columns(arch, params, X, split.free), full)


def test_gauge_leak_exposes_wrong_tangents():
    """The kernel check is round-off at the right point and large at another point."""
    arch = Architecture((6, 5, 4), (3, 2), 4, "softmax")
    W = random_weights(arch, 7)
    X = random_inputs(arch, 2, 7)
    split = gauge.gauge_split(arch, W)
    assert split.leak(arch, flatten(W), X) < 1e-12
    other = random_weights(arch, 8)
    assert split.leak(arch, flatten(other), X) > 1e-3


def test_gauge_does_not_apply_outside_its_hypotheses():
    assert not gauge.gauge_applies(Architecture((4, 4, 4), (2, 2), 3, "lightning"))
    assert not gauge.gauge_applies(Architecture((3, 5, 3), (2, 2), 3, "softmax"))   # d_1 > d_0
    assert not gauge.gauge_applies(Architecture((3, 3), (4,), 3, "softmax"))         # a_1 > d_0


# ---------------------------------------------------------------- memory estimates and refusals

from neuromanifold.dimension import memory  # noqa: E402
from neuromanifold.errors import InputError  # noqa: E402


@pytest.mark.parametrize("text,expected", [("16G", 16 * 2 ** 30), ("500M", 500 * 2 ** 20),
                                           ("1.5GiB", int(1.5 * 2 ** 30)), ("2048", 2048),
                                           ("64kb", 64 * 1024)])
def test_parse_memory_sizes(text, expected):
    assert memory.parse_memory(text) == expected


def test_parse_memory_fraction_of_available(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: 10 * 2 ** 30)
    assert memory.parse_memory("0.5") == 5 * 2 ** 30
    assert memory.resolve_budget(None) == int(0.8 * 10 * 2 ** 30)


@pytest.mark.parametrize("text", ["", "lots", "-1", "0", "1.5", "16Q", "nan", True])
def test_parse_memory_rejects_malformed(text):
    with pytest.raises(InputError):
        memory.parse_memory(text)


def test_estimates_grow_with_the_network_and_drop_with_the_gauge():
    small, large = (Architecture((w,) * 3, (8, 8), 16, "softmax") for w in (32, 128))
    assert memory.numerical_estimate(large, route="full").peak > 4 * memory.numerical_estimate(small).peak
    # The 41k softmax network: the dense route would hold the 16,896 x 40,960 tangent matrix.
    arch = Architecture((128, 128, 128), (16, 16), 16, "softmax")
    est = memory.numerical_estimate(arch)
    assert "symmetry tangents" not in est.parts
    lightning = Architecture((72,) * 4, (24,) * 3, 16)
    assert memory.exact_estimate(lightning).peak > memory.exact_estimate(lightning, certify=False).peak / 4


def test_refusal_says_what_to_change(capsys):
    """The 41k softmax network is refused on a small budget before anything large is allocated
    (its speed is a benchmark figure, not asserted here)."""
    from neuromanifold.cli import main

    code = main(["dim", "--widths", "128,128,128", "--keys", "16,16", "--tokens", "16",
                 "--attention", "softmax", "--max-memory", "2G"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "estimated peak" in err and "--samples" in err and "GB" in err


def test_api_refuses_with_resource_error():
    with pytest.raises(ResourceError, match="estimated peak"):
        from neuromanifold import neuromanifold_dim
        neuromanifold_dim(Architecture((5, 4, 3), (2, 2), 3), method="certified", max_memory="1M")


def test_sweep_stores_items_over_budget_as_refused(tmp_path):
    """An item whose estimate exceeds the per-item budget is a stored row with status 'refused'."""
    import sqlite3

    from neuromanifold.sweeps.engine import sweep

    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\nattention = ["softmax"]\n'
                    'method = ["numerical"]\n')
    db = tmp_path / "r.sqlite"
    summary = sweep(grid, db, seed=2, max_memory="1M")
    assert summary.counts == {"refused": 1}
    with sqlite3.connect(db) as conn:
        status, message = conn.execute("select status, message from results").fetchone()
    assert status == "refused" and "estimated peak" in message


def test_the_computing_modules_read_their_block_sizes_from_memory():
    """Each block size is defined once, in memory.py (torch-free), and the engines read it there."""
    from neuromanifold.dimension import ball, dask_rank, elimination, exact, fold, jacobians, numerical

    assert numerical.NUMERICAL_ROW_BLOCK_BYTES is memory.NUMERICAL_ROW_BLOCK_BYTES
    assert dask_rank.NUMERICAL_ROW_BLOCK_BYTES is memory.NUMERICAL_ROW_BLOCK_BYTES
    assert numerical.NUMERICAL_KEEP_ROWS_BYTES is memory.NUMERICAL_KEEP_ROWS_BYTES
    assert numerical.NUMERICAL_FOLD_ROWS_BYTES is memory.NUMERICAL_FOLD_ROWS_BYTES
    assert jacobians._CHUNK_BYTES is gauge._CHUNK_BYTES is memory.AUTODIFF_CHUNK_BYTES
    assert exact._CHUNK_BYTES is memory.EXACT_CHUNK_BYTES
    assert fold.PANEL is memory.FOLD_PANEL
    assert elimination.SKETCH_PER_SAMPLE is memory.SKETCH_PER_SAMPLE
    assert elimination._CHUNK_BYTES is memory.ELIMINATION_CHUNK_BYTES
    assert ball.DEFAULT_PRECISION is memory.BALL_DEFAULT_PRECISION
    for arch in (Architecture((7, 5, 3), (2, 3), 4, "softmax"), Architecture((9, 9), (4,), 2)):
        n_tangents, upper = memory._upper_guess(arch)
        first = first_target(upper, arch.tokens * arch.output_width)
        assert f"N = {first})" in memory.numerical_estimate(arch).what
        N = -(-(upper + max(8, 0.05 * upper)) // exact.rows_per_sample(arch))
        assert f"N = {int(N)})" in memory.exact_estimate(arch).what


def _fresh_python(code: str) -> list[str]:
    """The words `code` prints when run by a fresh interpreter (so that sys.modules starts empty)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_refusal_imports_no_torch():
    """The estimate and the refusal come before torch is imported (so they take well under 5 s)."""
    code = ("import sys\nfrom neuromanifold.cli import main\n"
            "rc = main(['dim', '--widths', '128,128,128', '--keys', '16,16', '--tokens', '16', "
            "'--attention', 'softmax', '--max-memory', '1G'])\n"
            "print(rc, 'torch' in sys.modules)")
    assert _fresh_python(code) == ["2", "False"]


def test_gauge_dimension_does_not_load_dynamo():
    """A softmax gauge dimension (figure3's path) never imports torch._dynamo (seconds of start-up)."""
    code = ("import sys, torch\nbare = 'torch._dynamo' in sys.modules\n"
            "from neuromanifold import Architecture, numerical_dim\n"
            "r = numerical_dim(Architecture((5, 4, 3), (2, 3), 3, 'softmax'), seed=4)\n"
            "print(bare, r.dimension, 'gauge' in ' '.join(r.notes), 'torch._dynamo' in sys.modules)")
    bare, dim, gauged, dynamo = _fresh_python(code)
    if bare == "True":
        pytest.skip("this torch imports torch._dynamo at `import torch`")
    # widths 5,4,3 keys 2,3: 47 (Eq. 16), read through the gauge, with no torch._dynamo loaded.
    assert (dim, gauged, dynamo) == ("47", "True", "False")


@pytest.mark.parametrize("method", ["auto", "certified"])
def test_softmax_auto_and_certified_are_checked_too(method):
    """The softmax routes (auto runs numerical first, certified adds the ball block) are refused
    before any work like the numerical one; the certified estimate is the larger."""
    from neuromanifold.dimension.memory import certified_softmax_estimate, numerical_estimate

    arch = Architecture((128, 128, 128), (16, 16), 16, "softmax")
    with pytest.raises(ResourceError, match="max_memory"):
        neuromanifold_dim(arch, method=method, max_memory="1G")
    assert certified_softmax_estimate(arch).peak > numerical_estimate(arch).peak


def test_auto_does_not_escalate_past_its_parameter_limit(monkeypatch):
    """A thin gap past ESCALATE_MAX_PARAMS keeps the numerical answer with a note naming the limit
    and --method certified; at or below it the same gap is escalated and certified."""
    import neuromanifold.dimension.api as api

    monkeypatch.setattr(api, "ESCALATE_GAP_DECADES", 1e9)  # every gap counts as thin
    small_arch, big_arch = (Architecture((3, 4, 2), (2, 1), 3, "softmax"),
                            Architecture((5, 3, 2), (2, 1), 3, "softmax"))
    monkeypatch.setattr(api, "ESCALATE_MAX_PARAMS", small_arch.n_params)
    monkeypatch.setattr(api, "ESCALATE_MAX_PARAMS_GAUGED", small_arch.n_params)
    assert big_arch.n_params > small_arch.n_params
    big = neuromanifold_dim(big_arch, method="auto")
    assert (big.method, big.status) == ("numerical", "settled")
    assert any(f"past the {small_arch.n_params} up to which auto escalates" in n
               and "--method certified" in n for n in big.notes)
    small = neuromanifold_dim(small_arch, method="auto")
    assert (small.method, small.status) == ("certified", "certified")
    assert small.dimension == neuromanifold_dim(small_arch, method="numerical").dimension


def test_auto_warns_when_it_keeps_an_unsettled_numerical_answer(monkeypatch):
    """Not escalated past the parameter limit, an ambiguous numerical answer still raises the
    AmbiguousRankWarning that its silenced first pass would have raised."""
    import neuromanifold.dimension.api as api
    from neuromanifold.dimension.result import AmbiguousRankWarning

    monkeypatch.setattr(api, "ESCALATE_MAX_PARAMS", 0)
    monkeypatch.setattr(api, "ESCALATE_MAX_PARAMS_GAUGED", 0)
    arch = Architecture((5, 4, 3), (2, 2), 3, "softmax")
    with pytest.warns(AmbiguousRankWarning, match="is ambiguous"):
        r = neuromanifold_dim(arch, method="auto", min_gap=30.0)  # no float64 gap is that wide
    assert (r.method, r.status) == ("numerical", "ambiguous")
    assert any("not escalated" in n for n in r.notes)


def test_auto_keeps_its_numerical_answer_when_the_escalation_would_not_fit(monkeypatch):
    """A thin gap that cannot be escalated within the budget keeps the numerical result, with a
    note saying why it was not escalated (never a silent certified claim, never a lost answer)."""
    import neuromanifold.dimension.api as api

    monkeypatch.setattr(api, "ESCALATE_GAP_DECADES", 1e9)  # every gap counts as thin
    from neuromanifold.dimension import memory, plan

    monkeypatch.setattr(plan, "certified_softmax_estimate",
                        lambda *a, **k: memory.MemoryEstimate("huge", 10 ** 15, {}, "smaller"))
    r = neuromanifold_dim(Architecture((3, 4, 2), (2, 1), 3, "softmax"), method="auto")
    assert r.method == "numerical"
    assert any("not escalated" in n for n in r.notes)


def test_gauge_and_elimination_are_routes_of_the_papers_model_only():
    """The gauge (and so the elimination) applies to the paper's model only: a two-head network
    of the same widths, which the engine reads without a gauge, is not planned with one."""
    paper = Architecture((80, 80, 80), (8, 8), 16, "softmax")
    heads = Architecture((80, 80, 80), (8, 8), 16, "softmax", heads=2)
    assert memory.gauge_applies(paper) and not memory.gauge_applies(heads)
    assert not memory.eliminates(heads)
    assert "numerical rank" in memory.numerical_estimate(heads).what
