"""Confident wrong answers (issues 24 and 26): each case ends in the right value, `ambiguous`,
`lower-bound` or a one-line refusal (exit 2), never in a wrong settled answer.

Every test here failed on the code before its fix (the values that code printed are in the
docstrings).
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings

import pytest
import torch

from neuromanifold import Architecture, neuromanifold_dim, random_weights
from neuromanifold.cli import main
from neuromanifold.core import blocks as blocks_module
from neuromanifold.core import parameters as parameters_module
from neuromanifold.dimension.result import AmbiguousRankWarning
from neuromanifold.dimension.saturation import SATURATED_SHARE, saturation_counts
from neuromanifold.sweeps.items import compute_item

NOT_SETTLED = ("ambiguous", "lower-bound", "stopped")


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command line run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def assert_right_or_unsettled(result, truth: int) -> None:
    """`truth` (settled or certified), or a status that claims nothing."""
    if result.status in ("settled", "certified"):
        assert result.dimension == truth, (result.dimension, result.status, result.notes)
    else:
        assert result.status in NOT_SETTLED, result.status


# ------------------------------------------------------------------ softmax temperature (item 1)

SOFTMAX_333 = dict(widths=(3, 3, 3), keys=(2, 2), tokens=3, attention="softmax")


@pytest.mark.parametrize("temperature", [1.0, 1e-2, 1e-4, 1e-6, 1e-8, 1e4, 1e8])
def test_temperature_sweep_reads_25_numerically(temperature):
    """phi(Q, K, tau) = phi(Q / tau, K, 1): the dimension is 25 for every tau > 0 (was 12 settled
    at 1e-4 and 11 settled at 1e-6, gaps 8.6 and 12.7 decades)."""
    arch = Architecture(**SOFTMAX_333, temperature=temperature)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmbiguousRankWarning)
        result = neuromanifold_dim(arch, method="numerical", seed=0)
    assert (result.dimension, result.status) == (25, "settled")


@pytest.mark.parametrize("temperature", [1e-6, 3e-5])
def test_temperature_auto_and_certified_agree(temperature):
    """`auto` and the certified path give 25 at small temperatures (auto printed 11 settled)."""
    arch = Architecture(**SOFTMAX_333, temperature=temperature)
    auto = neuromanifold_dim(arch, method="auto", seed=1)
    assert (auto.dimension, auto.status) == (25, "settled")
    certified = neuromanifold_dim(arch, method="certified", seed=1)
    assert (certified.dimension, certified.status) == (25, "certified")


def test_temperature_cli_prints_25():
    """`dim --temperature 1e-6` prints 25 (it printed 11 settled)."""
    code, out, _ = run_cli(["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "3",
                            "--attention", "softmax", "--temperature", "1e-6", "--json"])
    data = json.loads(out)
    assert code == 0 and (data["dimension"], data["status"]) == (25, "settled")


def test_temperature_sweep_item_reads_25():
    """A sweep item with temperature 1e-6 records 25 (sweeps recorded 11 settled)."""
    item = {**SOFTMAX_333, "method": "auto", "temperature": 1e-6, "seed": 0, "key": "k"}
    row = compute_item(item)
    assert (row["dimension"], row["status"]) == (25, "settled")


@pytest.mark.parametrize("temperature", [1e-4, 1e-7])
def test_temperature_block_network_reads_its_dimension(temperature):
    """A 2-head residual block network has the same dimension at every temperature (68 at
    tau = 1; it read 36 settled at 1e-6)."""
    arch = Architecture(**SOFTMAX_333, temperature=temperature, heads=(2, 2), residual=True)
    reference = Architecture(**SOFTMAX_333, heads=(2, 2), residual=True)
    truth = neuromanifold_dim(reference, method="numerical", seed=0)
    assert (truth.dimension, truth.status) == (68, "settled")
    result = neuromanifold_dim(arch, method="numerical", seed=0)
    assert (result.dimension, result.status) == (68, "settled")


def test_temperature_one_draws_are_unchanged():
    """tau = 1 draws are bit-identical to the draws before the temperature scale: Q, K as a
    lightning network's (whose scales never had a temperature)."""
    soft = random_weights(Architecture(**SOFTMAX_333), seed=5)
    light = random_weights(Architecture((3, 3, 3), (2, 2), 3), seed=5)
    assert all(torch.equal(a, b) for a, b in zip(soft.Q + soft.K, light.Q + light.K))
    hot = random_weights(Architecture(**SOFTMAX_333, temperature=1e-6), seed=5)
    assert torch.equal(hot.Q[0], soft.Q[0] * 2.0 ** -10)  # c = 2^round(log2(1e-6) / 2)
    assert torch.equal(hot.V[0], soft.V[0])


@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize("temperature", [1e-4, 1e-6, 1e-8])
def test_saturated_point_is_never_settled_below_the_bound(monkeypatch, temperature, block):
    """Detection: at the old, unscaled draws (logits of order 1 / tau: the softmax one-hot to
    round-off) a rank below the symmetry bound is `ambiguous`, never settled (was 12, 11, 9
    settled; blocks 37, 36, 36 settled, where the truth is 25 and 68)."""
    monkeypatch.setattr(parameters_module, "score_factor", lambda arch: 1.0)
    monkeypatch.setattr(blocks_module, "score_factor", lambda arch: 1.0)
    options = dict(heads=(2, 2), residual=True) if block else {}
    arch = Architecture(**SOFTMAX_333, temperature=temperature, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmbiguousRankWarning)
        result = neuromanifold_dim(arch, method="numerical", seed=0)
    assert_right_or_unsettled(result, 68 if block else 25)
    assert result.status == "ambiguous"
    assert any("softmax saturated at this point" in note for note in result.notes)


def test_saturation_share_counts_one_hot_columns():
    """A one-hot column is saturated, a uniform one and a 1 x 1 softmax are not."""
    one_hot = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    uniform = torch.full((2, 2), 0.5)
    assert saturation_counts([one_hot, uniform, torch.ones(4, 1, 1)]) == (2, 4)
    assert SATURATED_SHARE < 1


# ------------------------------------------------- weight files read as what they are (items 2-4)

def _weight_files(tmp_path):
    """P (paper's names), P moved by a between-layer change of basis G (a symmetry of the plain
    network only), the same two as one-head block files, and P and B scaled by 1e150."""
    from neuromanifold.core.parameters import LayerWeights
    from neuromanifold.io.weightfiles import write_block_weights
    from neuromanifold.io.weightfiles import write_weights

    w = random_weights(Architecture((3, 3, 3), (2, 2), 3), seed=1)
    G = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, -1.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    Gi = torch.linalg.inv(G)
    moved = LayerWeights((w.Q[0], w.Q[1] @ Gi), (w.K[0], w.K[1] @ Gi), (G @ w.V[0], w.V[1] @ Gi))

    def blocks(weights, scale=1.0):
        return {f"{m}_{i + 1}_1": getattr(weights, m)[i].numpy() * scale for m in "QKV"
                for i in range(2)}
    files = {"P": write_weights(tmp_path / "P.npz", w),
             "P_gl": write_weights(tmp_path / "P_gl.npz", moved),
             "B": write_block_weights(tmp_path / "B.npz", blocks(w)),
             "B_gl": write_block_weights(tmp_path / "B_gl.npz", blocks(moved)),
             "B_big": write_block_weights(tmp_path / "B_big.npz", blocks(w, 1e150)),
             "P_big": write_weights(tmp_path / "P_big.npz", LayerWeights(
                 *(tuple(t * 1e150 for t in group) for group in (w.Q, w.K, w.V))))}
    return {k: str(v) for k, v in files.items()}


def _refused(code: int, out: str, err: str, option: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    assert f"`{option}`" in lines[0], lines[0]


def _rank_json(*args: str) -> dict:
    code, out, err = run_cli(["rank", *args, "--no-generic", "--json"])
    assert code == 0, err
    return json.loads(out)


def test_rank_paper_file_with_residual_is_the_one_head_block_network(tmp_path):
    """`rank --weights P.npz --residual` computes the residual network: 32, as the block file
    gives (it dropped --residual and printed 23 settled)."""
    files = _weight_files(tmp_path)
    paper = _rank_json("--weights", files["P"], "--residual")
    block = _rank_json("--weights", files["B"], "--residual")
    assert (paper["rank"], paper["status"]) == (block["rank"], block["status"]) == (32, "settled")
    assert paper["read_as"]["architecture"].endswith("residual")
    assert "--residual" in paper["read_as"]["reading"]
    plain = _rank_json("--weights", files["P"])
    assert plain["rank"] == 23 and "no residual" in plain["read_as"]["reading"]


@pytest.mark.parametrize("command", ["rank", "fiber"])
@pytest.mark.parametrize("flag, option", [(["--norm", "layernorm"], "norm"),
                                          (["--norm", "rmsnorm"], "norm"),
                                          (["--activation", "relu"], "activation")])
def test_flags_a_paper_file_cannot_carry_are_refused(tmp_path, command, flag, option):
    """--norm and --activation on a file in the paper's format (no gains, no MLP) are refused
    in one line (they were dropped: `rank` printed 23 settled, `fiber` compared plain networks)."""
    files = _weight_files(tmp_path)
    other = ["--other", files["P"]] if command == "fiber" else []
    _refused(*run_cli([command, "--weights", files["P"], *other, *flag]), option)


@pytest.mark.parametrize("command", ["rank", "fiber"])
def test_square_block_file_needs_the_residual_flag(tmp_path, command):
    """A block file whose widths are all equal fits a residual and a plain network: refused
    without --residual/--no-residual (it was read as plain, silently)."""
    files = _weight_files(tmp_path)
    other = ["--other", files["B"]] if command == "fiber" else []
    _refused(*run_cli([command, "--weights", files["B"], *other]), "residual")
    code, out, _ = run_cli([command, "--weights", files["B"], *other, "--no-residual"])
    assert code == 0 and out.startswith("read as") and "--no-residual" in out.splitlines()[0]


def test_block_file_flags_it_cannot_carry_and_unequal_widths(tmp_path):
    """--activation without an MLP and --norm without gains are refused; an MLP needs
    --activation; unequal widths need no residual flag and say why."""
    from neuromanifold.core.blocks import random_block_weights
    from neuromanifold.io.weightfiles import write_block_weights

    files = _weight_files(tmp_path)
    _refused(*run_cli(["rank", "--weights", files["B"], "--residual", "--activation", "gelu"]),
             "activation")
    _refused(*run_cli(["rank", "--weights", files["B"], "--residual", "--norm", "layernorm"]), "norm")
    mlp = Architecture((3, 3), (2,), 3, heads=(2,), mlp=(2,), activation="tanh")
    path = str(write_block_weights(tmp_path / "mlp.npz", {
        k: v.numpy() for k, v in random_block_weights(mlp, 3).items()}))
    _refused(*run_cli(["rank", "--weights", path, "--no-residual"]), "activation")
    data = _rank_json("--weights", path, "--no-residual", "--activation", "tanh")
    assert "activation=tanh" in data["read_as"]["architecture"]
    narrow = Architecture((4, 3), (2,), 3, heads=(2,))
    path = str(write_block_weights(tmp_path / "narrow.npz", {
        k: v.numpy() for k, v in random_block_weights(narrow, 4).items()}))
    data = _rank_json("--weights", path)
    assert "the widths differ" in data["read_as"]["reading"]


def test_fiber_paper_files_with_residual_compare_residual_networks(tmp_path):
    """A between-layer change of basis is a symmetry of the plain network only: `fiber --residual`
    on paper files says False, as on block files (it said True)."""
    files = _weight_files(tmp_path)
    for a, b in (("P", "P_gl"), ("B", "B_gl")):
        code, out, _ = run_cli(["fiber", "--weights", files[a], "--other", files[b], "--residual",
                                "--json"])
        data = json.loads(out)
        assert code == 0 and data["same_function"] is False
        assert data["read_as"]["architecture"].endswith("residual")
    code, out, _ = run_cli(["fiber", "--weights", files["P"], "--other", files["P_gl"], "--json"])
    assert code == 0 and json.loads(out)["same_function"] is True


@pytest.mark.parametrize("args", [["fiber", "--weights", "B_big", "--other", "B_big", "--no-residual"],
                                  ["fiber", "--weights", "B_big", "--other", "B_big", "--residual"],
                                  ["fiber", "--weights", "P_big", "--other", "P_big"],
                                  ["rank", "--weights", "B_big", "--residual"],
                                  ["rank", "--weights", "B_big", "--no-residual"],
                                  ["rank", "--weights", "P_big"]])
def test_overflowing_weight_files_are_refused(tmp_path, args):
    """Entries of 1e150 overflow float64: refused as bad input naming --weights, exit 2 (the
    block file gave `same function False (max difference nan)`, exit 0; `rank` exit 1)."""
    files = _weight_files(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = run_cli([files.get(a, a) for a in args] + ["--no-generic"] * (args[0] == "rank"))
    _refused(*result, "weights")


# ------------------------------------------------------------------ functional_dim (items 5, 6)

def _gaussian(dim: int, scale: float = 1.0):
    """inputs(n, generator): n fresh standard normal samples of `dim` numbers, times `scale`."""
    return lambda n, gen: scale * torch.randn(n, dim, generator=gen, dtype=torch.float64)


def _tanh_net() -> torch.nn.Module:
    """Linear(3, 4), tanh, Linear(4, 2): 26 parameters, generic functional dimension 26."""
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


@pytest.mark.parametrize("dtype", [torch.cfloat, torch.cdouble])
def test_functional_dim_refuses_complex_parameters(dtype):
    """A complex Linear(3, 2) has 16 real parameters; the float64 copy dropped the imaginary
    parts (8 settled): refused in one line naming the parameter."""
    from neuromanifold.models.functional import functional_dim

    with pytest.raises(ValueError, match=r"^`module` must be a module with real floating-point "
                       r"parameters; got \"complex parameter 'weight' \(torch\.complex"):
        functional_dim(torch.nn.Linear(3, 2, dtype=dtype), _gaussian(3))


def test_functional_dim_refuses_integer_and_meta_parameters():
    """An integer (index) parameter and a meta-device module are refused as bad input (they
    raised IndexError and NotImplementedError)."""
    from neuromanifold.models.functional import functional_dim

    class Indexed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.idx = torch.nn.Parameter(torch.tensor([1, 0]), requires_grad=False)

        def forward(self, x):
            return self.lin(x)[:, self.idx]

    with pytest.raises(ValueError, match=r"^`params` must be floating-point parameters .* 'idx'"):
        functional_dim(Indexed(), _gaussian(3))
    result = functional_dim(Indexed(), _gaussian(3), params=["lin.weight", "lin.bias"])
    assert (result.dimension, result.status) == (8, "settled")
    with pytest.raises(ValueError, match=r"^`module` must be a module whose parameters hold values"):
        functional_dim(torch.nn.Linear(3, 2, device="meta"), _gaussian(3))


def test_functional_dim_checks_length_and_freshness_of_a_callable():
    """A callable that ignores n (one sample) or repeats one sample is refused (it read 2
    settled for a module of rank 8); the same prefix of a fixed tensor in two calls too."""
    from neuromanifold.models.functional import functional_dim

    one = torch.randn(1, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    pool = torch.randn(400, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^`inputs` must be a callable returning n samples .* "
                       r"got '1 samples for n = 9'"):
        functional_dim(torch.nn.Linear(3, 2), lambda n, gen: one)
    with pytest.raises(ValueError, match=r"^`inputs` must be a callable returning fresh samples"
                       r" on every call; got 'one sample repeated 9 times'"):
        functional_dim(torch.nn.Linear(3, 2), lambda n, gen: one.repeat(n, 1))
    with pytest.raises(ValueError, match=r"^`inputs` must be a callable returning fresh samples"
                       r" on every call; got 'the same samples again'"):
        # a gap rule no reading meets makes N grow, so the callable is asked twice
        functional_dim(_tanh_net(), lambda n, gen: pool[:n], min_gap=20.0)
    fresh = functional_dim(torch.nn.Linear(3, 2), _gaussian(3))
    assert (fresh.dimension, fresh.status) == (8, "settled")


@pytest.mark.parametrize("scale", [1e300, 1e100, 1e6])
def test_functional_dim_huge_inputs_are_not_settled(scale):
    """Inputs of magnitude 1e300 saturate the tanh: rank 10 was settled where the generic
    dimension is 26; now the same inputs rescaled show a higher rank: not settled."""
    from neuromanifold.models.functional import functional_dim

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmbiguousRankWarning)
        result = functional_dim(_tanh_net(), _gaussian(3, scale))
    assert_right_or_unsettled(result, 26)
    assert any("saturate the module" in note for note in result.notes) or result.dimension == 26
    normal = functional_dim(_tanh_net(), _gaussian(3))
    assert (normal.dimension, normal.status) == (26, "settled")


@pytest.mark.parametrize("bad, match", [
    (torch.full((5, 3), float("nan"), dtype=torch.float64), r"^`inputs` must be finite numbers"),
    (torch.full((5, 3), float("inf"), dtype=torch.float64), r"^`inputs` must be finite numbers"),
    (torch.zeros(0, 3, dtype=torch.float64), r"^`inputs` must be a batch of at least one sample"),
])
def test_functional_dim_bad_batches_are_bad_input(bad, match):
    """NaN, inf and empty batches are the caller's bad input (they raised ComputationError and
    AttributeError)."""
    from neuromanifold.models.functional import functional_dim

    with pytest.raises(ValueError, match=match):
        functional_dim(_tanh_net(), bad)
    with pytest.raises(ValueError, match=match):
        functional_dim(_tanh_net(), lambda n, gen: bad)


def test_functional_dim_nan_tangents_and_huge_samples_are_refused():
    """NaN symmetry tangents (a LinAlgError) and a Jacobian past memory (an allocator error)
    are refused in one line naming the argument, the latter with the estimate."""
    from neuromanifold.errors import ResourceError
    from neuromanifold.models.functional import functional_dim

    with pytest.raises(ValueError, match=r"^`symmetry_tangents` must be a callable returning "
                       r"finite tangent vectors"):
        functional_dim(torch.nn.Linear(3, 2), _gaussian(3),
                       symmetry_tangents=lambda named: torch.full((1, 8), float("nan")))
    with pytest.raises(ResourceError, match=r"^`samples` must give a Jacobian that fits in "
                       r"memory; got 1000000000 samples: .* peak against"):
        functional_dim(torch.nn.Linear(30, 20), _gaussian(30), samples=10 ** 9)


# --------------------------------------------------------- count: configs the rules do not cover

@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
@pytest.mark.parametrize("change, field", [
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rotary_pct": 0.25}, "rotary_pct"),
    ({"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 0.5}}, "partial_rotary_factor"),
    ({"hidden_act": "relu"}, "hidden_act"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_count_refuses_what_its_rules_do_not_cover(tmp_path, model_type, change, field):
    """Partial rotary was counted with the full-rotary (Q, K) rule and a relu gate was called
    silu (exit 0, a count that is not this config's): now one line naming the field, exit 2."""
    from neuromanifold.models.hf import shipped_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**shipped_config(model_type), **change}))
    code, out, err = run_cli(["count", str(path)])
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert f"{field}` must be" in lines[0]


def test_count_full_rotary_silu_config_still_counts(tmp_path):
    """The explicit defaults (factor 1, silu) count as the shipped config does."""
    from neuromanifold.models.hf import shipped_config

    config = shipped_config("llama")
    counts = []
    for extra in ({}, {"partial_rotary_factor": 1.0, "hidden_act": "silu"}):
        path = tmp_path / f"c{len(counts)}.json"
        path.write_text(json.dumps({**config, **extra}))
        code, out, _ = run_cli(["count", str(path), "--json"])
        assert code == 0
        counts.append(json.loads(out)["count"])
    assert counts[0] == counts[1] > 0


def test_fiber_block_files_honour_the_exact_method(tmp_path):
    """--method exact on block files compares the outputs in exact rational arithmetic: a
    between-layer GL move is not a symmetry of the residual network (different, certain), a file
    against itself is the same function (with a Schwartz-Zippel bound), and a softmax block
    network, which is not polynomial, is refused."""
    files = _weight_files(tmp_path)
    code, out, err = run_cli(["fiber", "--weights", files["B"], "--other", files["B_gl"],
                              "--residual", "--method", "exact", "--json"])
    result = json.loads(out)
    assert code == 0 and result["method"] == "exact" and result["same_function"] is False, err
    code, out, err = run_cli(["fiber", "--weights", files["B"], "--other", files["B"],
                              "--residual", "--method", "exact", "--json"])
    result = json.loads(out)
    assert code == 0 and result["method"] == "exact" and result["same_function"] is True, err
    assert 0 < result["failure_probability"] < 1e-40
    _refused(*run_cli(["fiber", "--weights", files["B"], "--other", files["B_gl"], "--residual",
                       "--attention", "softmax", "--method", "exact"]), "method")
