"""Ctrl-C at any moment: one line on stderr, exit code 130, nothing half-written that claims to be
complete (issue 39, items 2-4; docs/reliability.md).

Every subprocess runs with a timeout and gets SIGINT's default disposition, as a terminal's
foreground job does (a test run started in the background of a shell inherits SIGINT ignored).
"""

from __future__ import annotations

import contextlib
import csv
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neuromanifold.cli import main

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = dict(os.environ, PYTHONPATH=SRC)
PROGRAM = [sys.executable, "-m", "neuromanifold"]  # as `python -m neuromanifold` runs it
INTERRUPTED = "neuromanifold: interrupted; results already written are kept"
FIGURE3 = ["figure3", "--attention", "lightning", "--deltas", "3,4,5"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint, **kwargs)


def _finish(proc: subprocess.Popen, timeout: float = 90) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _assert_interrupted(code: int, err: str, command: str, last: str | None = INTERRUPTED) -> None:
    """Exit 130; the last stderr line is the interrupted one (`last`, or any interrupted line),
    every other one is the command's own progress; no traceback."""
    lines = err.strip().splitlines()
    assert code == 130, err
    assert "Traceback" not in err and lines, err
    if last is None:
        assert lines[-1].startswith("neuromanifold: interrupted"), err
    else:
        assert lines[-1] == last, err
    assert all(line.startswith((f"{command}: ", f"{command} ", "  delta =")) for line in lines[:-1]), err


# ---------------------------------------------------------------- item 2: start-up and teardown

def test_ctrl_c_at_any_moment_of_figure3_gives_one_line_and_130(tmp_path):
    """SIGINT at seeded moments across a whole `figure3` run (imports, computation, writing,
    the interpreter's exit): exit 130 and one interrupted line every time, or (signalled after
    the command's last exit handler) a complete run. Before: about one moment in seven ended with
    exit -2 and no line, or ran on to an AttributeError (a module left half-imported)."""
    t0 = time.monotonic()
    out, err = _finish(_start([*PROGRAM, *FIGURE3, "--out", str(tmp_path / "whole")]))
    whole = time.monotonic() - t0
    assert "wrote" in out, err
    rng = random.Random(39)
    delays = sorted(rng.uniform(0.05, 0.95) * whole for _ in range(6))
    landed = 0
    for i, delay in enumerate(delays):
        proc = _start([*PROGRAM, *FIGURE3, "--out", str(tmp_path / f"run{i}")])
        time.sleep(delay)
        if proc.poll() is not None:  # finished first (a quicker run than the measured one)
            _finish(proc)
            continue
        proc.send_signal(signal.SIGINT)
        _, err = _finish(proc)
        _assert_interrupted(proc.returncode, err, "figure3", last=None)
        landed += 1
    assert landed >= 3, f"the runs finished before the signals: {delays} s"


def test_ctrl_c_once_the_results_are_printed_is_one_line_and_130(tmp_path):
    """SIGINT right after `figure3` printed its last line, while the interpreter ends (torch's
    teardown took a fraction of a second, and CPython reset SIGINT to its default first): one
    line and 130, or a run that had already ended with 0. Before: exit -2 without a line."""
    for i, pause in enumerate((0.0, 0.02, 0.1)):
        out_dir = tmp_path / f"run{i}"
        proc = _start([*PROGRAM, "figure3", "--attention", "lightning", "--deltas", "3",
                       "--out", str(out_dir)])
        for line in proc.stdout:  # bounded: the run takes seconds
            if line.startswith("wrote"):
                break
        time.sleep(pause)
        proc.send_signal(signal.SIGINT)
        _, err = _finish(proc)
        assert proc.returncode in (0, 130), err
        if proc.returncode == 130:
            _assert_interrupted(proc.returncode, err, "figure3")
        else:
            assert "interrupted" not in err and "Traceback" not in err, err
        assert sorted(p.name for p in out_dir.iterdir()) == ["figure3_lightning.csv",
                                                             "figure3_lightning.png"]


def test_a_ctrl_c_inside_an_import_is_raised_once_the_import_is_done(tmp_path):
    """A SIGINT that lands inside an import, in a library that catches everything there, is
    raised once the import has finished: the module is whole (before, the KeyboardInterrupt was
    swallowed, the module half-imported, and the command ran on)."""
    (tmp_path / "greedy.py").write_text(textwrap.dedent("""\
        import os, signal, time
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here
        except BaseException:  # a library that swallows whatever happens in its import
            pass
        WHOLE = True
        """))
    script = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        from neuromanifold.cli import interrupts
        record = []
        try:
            with interrupts.interrupts_recorded(record):
                import greedy
                time.sleep(10)
        except KeyboardInterrupt:
            print("raised", greedy.WHOLE, len(record))
        else:
            print("ran on")
        """)
    proc = _start([sys.executable, "-c", script])
    out, err = _finish(proc, timeout=60)
    assert out.strip() == "raised True 1", out + err


def test_an_error_after_a_swallowed_ctrl_c_is_the_interruption(monkeypatch, capsys, tmp_path):
    """A Ctrl-C that a library swallowed, then a failure of what it left half-made (the
    AttributeError of a half-imported numpy.ma): the interrupted line and 130, not an internal
    error with exit 1."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default here (a background run): the CLI leaves it")
    from neuromanifold.experiments import figure3 as experiment

    def swallowed_then_broken(*_args, **_kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException:  # noqa: BLE001 - the library that swallows it
            pass
        raise AttributeError("module 'numpy' has no attribute 'ma'")

    monkeypatch.setattr(experiment, "numerical_dim", swallowed_then_broken)
    code = main([*FIGURE3, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    _assert_interrupted(code, err, "figure3", last=None)
    assert "internal error" not in err


# ---------------------------------------------------------------- item 4: figure3 keeps its rows

def _interrupt_at_call(monkeypatch, n: int) -> list[int]:
    """`numerical_dim` as before, except that call `n` raises KeyboardInterrupt (a Ctrl-C there)."""
    from neuromanifold.experiments import figure3 as experiment

    real, calls = experiment.numerical_dim, []

    def numerical_dim(arch, **kwargs):
        calls.append(arch.widths[0])
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(arch, **kwargs)

    monkeypatch.setattr(experiment, "numerical_dim", numerical_dim)
    return calls


def test_interrupted_figure3_keeps_the_finished_rows_and_says_where(monkeypatch, capsys, tmp_path):
    """Ctrl-C during the second delta: the first delta's row is on disk, in the partial CSV the
    interrupted line names (rows equal to an uninterrupted run's); no figure or final CSV."""
    calls = _interrupt_at_call(monkeypatch, 2)
    out = tmp_path / "out"
    code = main([*FIGURE3, "--out", str(out)])
    err = capsys.readouterr().err
    partial = out / "figure3_lightning.partial.csv"
    _assert_interrupted(code, err, "figure3",
                        last=f"neuromanifold: interrupted; the finished row (delta = 3) is in "
                             f"{partial}; no figure and no final CSV were written")
    assert calls == [3, 4]
    assert sorted(p.name for p in out.iterdir()) == [partial.name]
    with partial.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["delta"], r["estimated"], r["expected"], r["status"]) for r in rows] == \
        [("3", "23", "23", "settled")]
    # the rerun refuses to overwrite the kept rows without --force, then replaces them
    assert main([*FIGURE3, "--out", str(out)]) == 2
    assert "figure3_lightning.partial.csv" in capsys.readouterr().err
    monkeypatch.undo()
    assert main([*FIGURE3, "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["figure3_lightning.csv",
                                                     "figure3_lightning.png"]
    with (out / "figure3_lightning.csv").open() as fh:
        final = list(csv.DictReader(fh))
    assert [r["delta"] for r in final] == ["3", "4", "5"]
    assert {k: v for k, v in final[0].items() if k != "seconds"} == \
        {k: v for k, v in rows[0].items() if k != "seconds"}


def test_figure3_interrupted_before_any_row_leaves_no_folder(monkeypatch, capsys, tmp_path):
    """Ctrl-C during the first delta: the --out folders made for the run are removed (an
    existing one is left as it was) and the line says nothing was written."""
    _interrupt_at_call(monkeypatch, 1)
    out = tmp_path / "new" / "out"
    code = main([*FIGURE3, "--out", str(out)])
    err = capsys.readouterr().err
    _assert_interrupted(code, err, "figure3",
                        last="neuromanifold: interrupted; no delta had finished; nothing was written")
    assert list(tmp_path.iterdir()) == []
    _interrupt_at_call(monkeypatch, 1)
    (tmp_path / "kept").mkdir()
    assert main([*FIGURE3, "--out", str(tmp_path / "kept")]) == 130
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


# ---------------------------------------------------------------- item 3: sweep workers

SLOW_GRID = 'widths = [[40, 30, 20, 10], [30, 40, 20, 10]]\nkeys = [[6, 5, 4]]\ntokens = [3]\nmethod = ["numerical"]\n'


def _workers(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and \
                        b"spawn_main" in (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
    return out


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("moment", ["importing", "computing"])
def test_ctrl_c_on_a_sweep_with_two_workers_is_one_line(tmp_path, moment):
    """Ctrl-C at a terminal (SIGINT to the whole process group, workers included) while the two
    workers import or compute: exit 130, the one line, no worker traceback (before: about 88
    interleaved lines of them), no worker left, the store intact and resumable."""
    grid = tmp_path / "slow.toml"
    grid.write_text(SLOW_GRID)
    db = tmp_path / "s.sqlite"
    proc = _start([*PROGRAM, "sweep", str(grid), "--db", str(db), "--jobs", "2"],
                  start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.1)
            workers = _workers(proc.pid)
        assert len(workers) == 2, "the sweep did not start its workers"
        if moment == "importing":
            time.sleep(0.3)
        else:  # imports take a few CPU seconds, the items minutes
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not all(_cpu_seconds(p) > 8 for p in workers):
                time.sleep(0.3)
            assert all(_cpu_seconds(p) > 8 for p in workers), "the workers did not compute"
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers), "a worker outlived the interrupted sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(timeout=30)
    _assert_interrupted(proc.returncode, err, "sweep")
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
