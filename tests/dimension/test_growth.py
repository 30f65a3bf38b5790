"""dimension.growth: the one loop that grows the number of samples N (its stop reasons and caps)."""

from neuromanifold.dimension.growth import (default_max_samples, first_target, grow_by_half,
                                            grow_samples)


def _run(ranks, first=4, **kw):
    """grow_samples over a scripted rank per round; returns (Growth, the N targets drawn)."""
    drawn, it = [], iter(ranks)
    grown = grow_samples(first, lambda _done, target: drawn.append(target), lambda: next(it), **kw)
    return grown, drawn


def test_round_cap_stops_with_reason_cap():
    """`max_rounds` measurements without saturation end the loop with reason cap."""
    grown, drawn = _run([1, 2, 3, 4], next_target=grow_by_half, max_rounds=3)
    assert (grown.reason, grown.rank, drawn) == ("cap", 3, [4, 6, 9])
    assert grown.detail == "round cap of 3 reached at N = 9"


def test_min_batch_one_keeps_the_float_paths_n_sequence():
    """With min_batch 1 a batch of one sample may grow N and show saturation (2 -> 3); with the
    default 2 the loop draws two (2 -> 4)."""
    one, drawn_one = _run([5, 5], first=2, next_target=grow_by_half, min_batch=1)
    two, drawn_two = _run([5, 5], first=2, next_target=grow_by_half)
    assert (one.reason, drawn_one, two.reason, drawn_two) == ("saturated", [2, 3], "saturated", [2, 4])


def test_sample_cap_reads_at_the_cap_then_stops():
    """N grows up to max_samples (the last batch clipped to it), then stops with reason cap."""
    grown, drawn = _run([1, 2, 3, 4], first=8, next_target=grow_by_half, max_samples=14, min_batch=1)
    assert (grown.reason, drawn) == ("cap", [8, 12, 14])


def test_float_path_defaults():
    """First N: about twice the bound's rows, at least 2 (or the floor); cap 8 x first N, at least 64."""
    assert (first_target(23, 9), first_target(1, 100), first_target(1, 100, least=15)) == (7, 2, 15)
    assert (default_max_samples(7), default_max_samples(26)) == (64, 208)
