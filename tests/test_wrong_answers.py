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
