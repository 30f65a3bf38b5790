"""Long commands say what they are doing on stderr, phase by phase (issue 38, item 2); stdout,
--json included, carries only the result."""

from __future__ import annotations

import json

from neuromanifold.cli import main


def test_figure1_names_each_phase(tmp_path, capsys):
    """figure1 (a minute at the default grid): one stderr line per phase, from the
    interpolation to the drawing, each with its elapsed time."""
    assert main(["figure1", "--out", str(tmp_path / "f"), "--grid", "8"]) == 0
    err = capsys.readouterr().err
    for phase in ("defining polynomial by exact interpolation", "sampling the sliced surface",
                  "tracing the singular curve", "drawing the figure"):
        assert f"figure1: {phase}" in err
    assert err.count(" s]\n") >= 5


def test_count_validate_reports_its_phases_even_with_json(capsys):
    """count --validate --json: the JSON on stdout alone; on stderr a line for the count, the
    shrunk model's certification (with the engine's own lines) and the independence ladder."""
    code = main(["count", "--model-type", "gpt2", "--validate", "--json"])
    out = capsys.readouterr()
    assert code == 0 and json.loads(out.out)["validation"]["verified"] is True
    for phase in ("count: counting gpt2 from the config", "count: validation: certifying",
                  "count: independence of the counted families", "count: independence at"):
        assert phase in out.err


def test_deep_softmax_says_its_work_and_stops_early_on_a_projection():
    """A 200-layer softmax network of width 2 (issue 38): the plan and the first pass's work
    on stderr before any of it; with --timeout 20, the Jacobian pass (about two minutes on 2
    cores) is projected from its first chunks and stopped early: status `stopped`, exit 1, the
    projection named (a behavioural check: a machine fast enough to finish is not asserted on)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    widths, keys = ",".join(["2"] * 201), ",".join(["1"] * 200)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"),
               OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "neuromanifold", "dim", "--widths", widths,
                          "--keys", keys, "--attention", "softmax", "--timeout", "20", "--json"],
                         capture_output=True, text=True, timeout=180, env=env)
    assert "dim: plan: numerical" in out.stderr and "first pass: the Jacobian of" in out.stderr
    if out.returncode == 0:          # finished within the limit: nothing to stop
        return
    result = json.loads(out.stdout)
    assert out.returncode == 1 and result["status"] == "stopped" and result["dimension"] is None
    assert "projected to need" in result["notes"][0]


def test_projection_stops_a_pass_that_cannot_end_in_time():
    """check_projection: 1 of 10 steps in 1 s projects 9 s more; with 5 s left it raises
    TimeLimitReached naming the projection, with 60 s left it returns the 9 s; with no
    deadline it never raises (mutant: a projection ignoring the steps left would not raise)."""
    import time

    import pytest

    from neuromanifold.core.limits import TimeLimitReached, check_projection, set_deadline

    previous = set_deadline(time.perf_counter() + 5.0)
    try:
        with pytest.raises(TimeLimitReached, match="projected to need 10 s"):
            check_projection(1, 10, 1.0, "a pass")
        assert check_projection(9, 10, 1.0, "a pass") == pytest.approx(1.0 / 9)
        set_deadline(time.perf_counter() + 60.0)
        assert check_projection(1, 10, 1.0, "a pass") == pytest.approx(9.0)
        set_deadline(None)
        assert check_projection(1, 10, 100.0, "a pass") == pytest.approx(900.0)
    finally:
        set_deadline(previous)
