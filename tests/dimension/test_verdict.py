"""dimension.verdict: the one rule that turns a float64 rank reading, the reason N stopped growing
and the engine's doubts into a status and notes (numerical engines and functional_dim)."""

import pytest

from neuromanifold.core.rank import numerical_rank
from neuromanifold.dimension.verdict import MAX_LEAK, numerical_verdict, unsettled_message

CLEAR = numerical_rank([3.0, 2.0, 1.0, 1e-15], 4, 4)           # rank 3, a 15-decade gap
UNCLEAR = numerical_rank([1.0, 1e-3, 1e-6, 1e-9, 1e-12], 5, 5)  # 3-decade gaps: no clear rank


def _verdict(reading=CLEAR, rank=3, upper=3, reason="bound", **kw):
    return numerical_verdict(reading, rank, upper, 4.0, reason, kw.pop("detail", "a detail"),
                             n_samples=kw.pop("n_samples", 7), **kw)


def test_clear_reading_at_the_bound_is_settled():
    """A clear gap at the upper bound settles, with the bound named as the saturation reason."""
    assert CLEAR.rank == 3 and not CLEAR.is_ambiguous(4.0)
    assert _verdict(bound_name="symmetry bound") == ("settled", ["saturated in N: symmetry bound"])


def test_stable_rank_below_the_bound_is_settled():
    """A clear rank that a batch did not raise settles below the bound (reason saturated)."""
    assert _verdict(upper=5, reason="saturated") == ("settled", ["saturated in N: stable rank"])


def test_unclear_gap_is_ambiguous():
    """An unclear singular-value gap never settles: ambiguous, with the rank rule's note first."""
    assert UNCLEAR.is_ambiguous(4.0)
    status, notes = _verdict(reading=UNCLEAR, rank=UNCLEAR.rank, upper=UNCLEAR.rank)
    assert status == "ambiguous" and notes[0] == UNCLEAR.ambiguity_note(4.0)


def test_leak_above_the_threshold_is_ambiguous():
    """Symmetry tangents off the float kernel (leak > MAX_LEAK) make the reading ambiguous."""
    assert _verdict(leak=MAX_LEAK)[0] == "settled"
    status, notes = _verdict(leak=10 * MAX_LEAK)
    assert status == "ambiguous" and any("not in the float kernel" in n for n in notes)


def test_measured_doubt_is_ambiguous():
    """A doubt the engine measured (say a saturated softmax point) makes it ambiguous; None is none."""
    assert _verdict(upper=5, reason="saturated", doubts=[None])[0] == "settled"
    status, notes = _verdict(upper=5, reason="saturated", doubts=[None, "softmax saturated"])
    assert status == "ambiguous" and "softmax saturated" in notes


def test_fixed_n_below_the_bound_is_ambiguous():
    """N fixed by the caller cannot show saturation: ambiguous even with a clear gap, with the hint."""
    status, notes = _verdict(upper=5, reason="fixed", fixed_hint="leave --samples out to grow N")
    assert status == "ambiguous"
    assert notes == ["rank 3 is below the upper bound 5 and N = 7 was fixed: saturation in N not "
                     "verified (leave --samples out to grow N)"]


def test_cap_with_clear_readings_is_stopped():
    """A cap reached while every reading was clear (the rank still growing) gives stopped."""
    status, notes = _verdict(upper=5, reason="cap", detail="time cap of 1 s reached")
    assert status == "stopped"
    assert notes == ["stopped at a cap before the rank saturated with a clear gap: time cap of 1 s reached"]


def test_cap_with_a_doubt_is_ambiguous():
    """A cap reached with an unclear reading (or any doubt) is ambiguous, not stopped."""
    assert _verdict(reading=UNCLEAR, rank=UNCLEAR.rank, upper=9, reason="cap")[0] == "ambiguous"
    assert _verdict(upper=5, reason="cap", leak=1.0)[0] == "ambiguous"


def test_late_checks_run_in_order_only_on_a_reading_about_to_settle_below_the_bound():
    """Late checks (costly) run only before settling below the bound; the first finding ends them."""
    ran = []

    def check(name, finding=None):
        return lambda: ran.append(name) or finding

    status, notes = _verdict(upper=5, reason="saturated",
                             late_checks=[check("a"), check("b", "inputs saturate"), check("c")])
    assert (status, ran, notes[-1]) == ("ambiguous", ["a", "b"], "inputs saturate")
    ran.clear()
    assert _verdict(late_checks=[check("a", "x")])[0] == "settled" and ran == []  # at the bound
    assert _verdict(upper=5, reason="cap", late_checks=[check("a", "x")])[0] == "stopped" and ran == []


@pytest.mark.parametrize("upper,status", [(5, "lower-bound"), (3, "settled")])
def test_piecewise_rank_below_the_bound_is_a_lower_bound(upper, status):
    """A piecewise-analytic map's settled rank below the bound is a lower bound; at the bound it stays settled."""
    got, notes = _verdict(upper=upper, reason="saturated" if upper > 3 else "bound", piecewise="ReLU")
    assert got == status and notes[-1].startswith("piecewise-analytic parts (ReLU): ")
    assert ("lower bound on the dimension" in notes[-1]) == (status == "lower-bound")


def test_piecewise_does_not_touch_an_unsettled_reading():
    """A piecewise map stopped at a cap or ambiguous keeps that status (no lower-bound promotion)."""
    assert _verdict(upper=5, reason="cap", piecewise="relu MLP")[0] == "stopped"
    assert _verdict(upper=5, reason="fixed", piecewise="relu MLP")[0] == "ambiguous"


def test_warning_text_only_for_ambiguous_or_stopped():
    """The AmbiguousRankWarning text names the status; settled and lower-bound ranks warn not."""
    assert unsettled_message("net", 3, "stopped", ["a", "b"]) == "net: numerical rank 3 is stopped: a; b"
    assert unsettled_message("net", 3, "lower-bound", ["a"]) is None
    assert unsettled_message("net", 3, "settled", ["a"]) is None
