"""The promise under hostile use: bad input gets one line naming the option, exit code 2, and
nothing written or changed; no traceback; no process left behind (docs/reliability.md).

Property-based cases (hypothesis, derandomized, a modest number of examples) generate command
lines and weight files; fixtures build damaged stores and hostile files. Every subprocess runs
with a timeout.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuromanifold.cli import main
from neuromanifold.errors import InputError
from neuromanifold.io.weightfiles import read_weights
from neuromanifold.sweeps import store as store_module
from neuromanifold.sweeps.engine import sweep
from neuromanifold.sweeps.store import insert_result, open_store, read_results

SRC = str(Path(__file__).resolve().parents[2] / "src")
PROBE = settings(max_examples=40, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TINY_GRID = 'widths = [[2, 3], [3, 2]]\nkeys = [[1]]\ntokens = [2]\nmethod = ["exact"]\n'


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command line run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def assert_refused(code: int, out: str, err: str, option: str) -> None:
    """Exit 2, nothing on stdout, one stderr line that names `option`, no traceback."""
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert out == "", out
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert f"`{option}`" in lines[0] or f"--{option}" in lines[0], (option, lines[0])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (to prove that a refusal changed nothing)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _weights(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def _npy_member(shape, descr: str = "<f8", data: bytes = b"\0" * 64) -> bytes:
    """An .npy member whose header declares `shape` and `descr`, followed by `data`."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    return header.getvalue() + data


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.fixture()
def good_layer(tmp_path) -> Path:
    """A single-layer file with d = 3, d' = 4, a = 2 (pairwise-distinct sizes)."""
    rng = np.random.default_rng(5)
    return _weights(tmp_path / "good.npz", Q_1=rng.standard_normal((2, 3)),
                    K_1=rng.standard_normal((2, 3)), V_1=rng.standard_normal((4, 3)))


# ---------------------------------------------------------------- generated command lines

BAD_SEEDS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2 ** 63, max_value=2 ** 80))
BAD_WIDTH_LISTS = st.one_of(
    st.lists(st.integers(min_value=100_001, max_value=10 ** 30), min_size=2, max_size=3)
    .map(lambda v: ",".join(map(str, v))),
    st.lists(st.integers(min_value=-5, max_value=0), min_size=2, max_size=3).map(lambda v: ",".join(map(str, v))),
    st.text(alphabet="abc,;. x-", min_size=1, max_size=8).filter(lambda s: s.strip() != ""),
)


@PROBE
@given(option=st.sampled_from(["seed", "widths", "tokens", "keys"]), data=st.data())
def test_dim_refuses_any_one_bad_option_before_work(option, data):
    """`dim` with one bad option (the rest small and valid): exit 2, one line naming it."""
    args = {"widths": "4,3,2", "keys": "2,1", "tokens": "4", "seed": "0"}
    if option == "seed":
        args["seed"] = str(data.draw(BAD_SEEDS))
    elif option == "widths":
        args["widths"] = data.draw(BAD_WIDTH_LISTS)
        args["keys"] = ",".join(["1"] * max(1, args["widths"].count(",")))  # one per layer
    elif option == "keys":
        args["keys"] = data.draw(st.sampled_from(["2,", "2,1,3", "100001,2", "0,2"]))
    else:
        args["tokens"] = str(data.draw(st.one_of(st.integers(max_value=0),
                                                 st.integers(min_value=100_001, max_value=10 ** 12))))
    argv = ["dim"] + [x for k, v in args.items() for x in (f"--{k}", v)]
    assert_refused(*run_cli(argv), option)


@PROBE
@given(seed=BAD_SEEDS)
def test_commands_refuse_bad_seeds_before_any_output(tmp_path, good_layer, seed):
    """Every command refuses a seed outside [0, 2^63 - 1] first: no folder, no store, one line."""
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_GRID)
    before = snapshot(tmp_path)
    cases = [
        ["classify", "--weights", str(good_layer)],
        ["fiber", "--weights", str(good_layer), "--other", str(good_layer)],
        ["figure3", "--out", str(tmp_path / "fig3")],
        ["figure1", "--out", str(tmp_path / "fig1")],
        ["sweep", str(grid), "--db", str(tmp_path / "new.sqlite")],
    ]
    for argv in cases:
        assert_refused(*run_cli(argv + ["--seed", str(seed)]), "seed")
    assert snapshot(tmp_path) == before


@PROBE
@given(jobs=st.integers(min_value=4 * (os.cpu_count() or 1) + 1, max_value=10 ** 9))
def test_sweep_caps_jobs_before_starting_processes(tmp_path, monkeypatch, jobs):
    """`--jobs` above 4 per core is refused before the store exists or a worker starts."""
    from neuromanifold.sweeps import workers

    def no_pool(*_args, **_kwargs):
        raise AssertionError("a worker pool was started")

    monkeypatch.setattr(workers, "_LocalPool", no_pool)  # fail fast instead of starting `jobs` processes
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_GRID)
    db = tmp_path / f"j{jobs}.sqlite"
    assert_refused(*run_cli(["sweep", str(grid), "--db", str(db), "--jobs", str(jobs)]), "jobs")
    assert not db.exists()


def test_classify_refuses_one_token(good_layer):
    """Theorem 3.4 needs t >= 2: `classify --tokens 1` is bad input, not a disagreement."""
    assert_refused(*run_cli(["classify", "--weights", str(good_layer), "--tokens", "1"]), "tokens")


def test_sizes_beyond_the_caps_are_refused_before_torch_sees_them():
    """A width of 10^20 and 1001 layers are refused with the cap in the message."""
    code, out, err = run_cli(["dim", "--widths", "100000000000000000000,3", "--keys", "2"])
    assert_refused(code, out, err, "widths")
    assert "100000" in err
    widths = ",".join(["2"] * 1002)
    keys = ",".join(["1"] * 1001)
    assert_refused(*run_cli(["dim", "--widths", widths, "--keys", keys]), "keys")


def test_dimension_beyond_the_memory_limit_is_refused():
    """Widths whose dense matrices cannot fit are refused with the estimate (ResourceError)."""
    code, out, err = run_cli(["dim", "--widths", "3000,2000,1000", "--keys", "2,1"])
    assert_refused(code, out, err, "widths")
    assert "GiB" in err or "GB" in err  # the estimate, in either unit


def test_huge_grid_is_counted_before_it_is_built(tmp_path):
    """A grid of 10^10 combinations is refused at once, from its arithmetic count."""
    grid = tmp_path / "huge.toml"
    grid.write_text("widths = {layers = [4], range = [1, 100]}\nkeys = {layers = [4], values = [1, 2, 3]}\n"
                    "tokens = [2, 3]\n")
    db = tmp_path / "h.sqlite"
    t0 = time.perf_counter()
    code, out, err = run_cli(["sweep", str(grid), "--db", str(db)])
    assert time.perf_counter() - t0 < 10  # not built: building it would take minutes and gigabytes
    assert_refused(code, out, err, "widths")
    assert not db.exists()
    # Lists each within their caps whose product (219,122) is not: refused from the count.
    grid.write_text("widths = {layers = [1], range = [1, 331]}\nkeys = [[1], [2]]\ntokens = [2]\n")
    code, out, err = run_cli(["sweep", str(grid), "--db", str(db)])
    assert_refused(code, out, err, "grid")
    assert "219122" in err and "combinations" in err
    assert not db.exists()


def test_figure3_refuses_before_progress_or_folder(tmp_path):
    """A bad seed or a delta beyond the cap: no progress line, no folder."""
    out_dir = tmp_path / "g"
    assert_refused(*run_cli(["figure3", "--seed", "-1", "--out", str(out_dir)]), "seed")
    assert_refused(*run_cli(["figure3", "--deltas", "1-1000000000000", "--out", str(out_dir)]), "deltas")
    assert not out_dir.exists()


def test_figure3_on_an_absent_gpu_refuses_before_progress_or_folder(tmp_path, monkeypatch):
    """--device cuda where torch sees no GPU: one line, no progress line, no --out folder."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out_dir = tmp_path / "g"
    assert_refused(*run_cli(["figure3", "--device", "cuda", "--out", str(out_dir)]), "device")
    assert not out_dir.exists()


def test_unwritable_output_place_is_refused_before_work(tmp_path):
    """An --out or --db where no file can be created (a probe file is tried) is refused first."""
    blocked = tmp_path / "file"
    blocked.write_text("x")
    assert_refused(*run_cli(["figure1", "--out", str(blocked / "sub")]), "out")
    assert_refused(*run_cli(["figure1", "--out", "/proc/neuromanifold-test"]), "out")
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_GRID)
    assert_refused(*run_cli(["sweep", str(grid), "--db", "/proc/neuromanifold-test.sqlite"]), "db")
    assert blocked.read_text() == "x"


# ---------------------------------------------------------------- generated weight files

DTYPES = st.sampled_from(["<f8", "<f4", "<i8", "|u1", "|O", "<c16", "|S4", "<U2", "|b1"])
SHAPES = st.one_of(st.lists(st.integers(min_value=0, max_value=4), min_size=0, max_size=3).map(tuple),
                   st.tuples(st.integers(min_value=2001, max_value=10 ** 6), st.integers(min_value=1, max_value=10 ** 6)))
NAMES = st.one_of(st.sampled_from(["Q_1.npy", "K_1.npy", "V_1.npy", "A_1.npy", "V_2.npy"]),
                  st.text(alphabet="QKVAx_0123.npy/", min_size=1, max_size=9))


@st.composite
def hostile_members(draw) -> dict[str, bytes]:
    """Archive members: honest arrays, lying headers, foreign dtypes, or random bytes."""
    members = {}
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        name = draw(NAMES)
        kind = draw(st.sampled_from(["header", "honest", "bytes"]))
        if kind == "header":
            members[name] = _npy_member(draw(SHAPES), draw(DTYPES), draw(st.binary(max_size=64)))
        elif kind == "honest":
            rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 4))
            scale = draw(st.sampled_from([1.0, 1e150, 1e300]))
            buf = io.BytesIO()
            np.save(buf, np.random.default_rng(rows * 7 + cols).standard_normal((rows, cols)) * scale)
            members[name] = buf.getvalue()
        else:
            members[name] = draw(st.binary(max_size=200))
    return members


@PROBE
@given(members=hostile_members())
def test_any_weight_file_reads_or_is_refused_in_one_line(tmp_path, members):
    """read_weights on a generated archive: a WeightFile or one-line InputError; nothing else."""
    path = _zip(tmp_path / "w.npz", members)
    before = path.read_bytes()
    try:
        data = read_weights(path)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("`")
    else:
        assert data.arch.n_layers >= 1
    assert path.read_bytes() == before


@PROBE
@given(data=st.binary(max_size=300))
def test_random_bytes_are_refused_as_weights(tmp_path, data):
    """Bytes that are not a zip archive: `weights` refused, one line, exit 2."""
    path = tmp_path / "r.npz"
    path.write_bytes(data)
    assert_refused(*run_cli(["fiber", "--weights", str(path), "--other", str(path)]), "weights")


@pytest.mark.parametrize("members, message", [
    ({"Q_1.npy": _npy_member((100_000, 100_000))}, "at most 2000 rows"),
    ({"V_1.npy": _npy_member((2, 2), "|O")}, "no pickled objects"),
    ({"V_1.npy": _npy_member((3, 3, 3))}, "2-D"),
    ({"V_1.npy": b"not an array"}, "array header"),
    ({"readme.txt": b"hello"}, "named Q_i"),
    ({"V_1.npy": _npy_member((100, 100))}, "data matches their headers"),
])
def test_hostile_weight_files_are_refused_before_data_is_read(tmp_path, members, message):
    """Lying headers, object dtypes, 3-D arrays, non-arrays, foreign members: one line, exit 2."""
    path = _zip(tmp_path / "h.npz", members)
    code, out, err = run_cli(["fiber", "--weights", str(path), "--other", str(path)])
    assert_refused(code, out, err, "weights" if "readme" in str(members) or "data matches" in message
                   else f"weights:{next(iter(members))[:-4]}")
    assert message in err


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_an_archive_with_a_repeated_member_is_refused(tmp_path):
    """Two members named V_1.npy: numpy would read one of them silently; refused in one line."""
    rng = np.random.default_rng(3)

    def npy(shape):
        buf = io.BytesIO()
        np.save(buf, rng.standard_normal(shape))
        return buf.getvalue()

    path = tmp_path / "dup.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for name, shape in (("Q_1", (2, 3)), ("K_1", (2, 3)), ("V_1", (4, 3)), ("V_1", (4, 3))):
            zf.writestr(name + ".npy", npy(shape))
    for argv in (["rank", "--weights", str(path), "--tokens", "2"], ["classify", "--weights", str(path)]):
        code, out, err = run_cli(argv)
        assert_refused(code, out, err, "weights")
        assert "'V_1.npy' stored 2 times" in err


def test_honest_but_too_large_file_is_refused_from_its_header(tmp_path):
    """A real 2001 x 3 array is refused at once from its header, naming member and limit."""
    path = _weights(tmp_path / "big.npz", V_1=np.zeros((2001, 3)))
    code, out, err = run_cli(["classify", "--weights", str(path)])
    assert_refused(code, out, err, "weights:V_1")
    assert "(2001, 3)" in err


# ---------------------------------------------------------------- non-finite values

def test_overflowing_weights_are_bad_input_never_a_verdict(tmp_path):
    """Weights near 1e300: `fiber` and `classify` refuse (exit 2, overflow named), never 'NOT same'."""
    rng = np.random.default_rng(11)
    qk = _weights(tmp_path / "qk.npz", Q_1=rng.standard_normal((2, 3)) * 1e300,
                  K_1=rng.standard_normal((2, 3)) * 1e300, V_1=rng.standard_normal((4, 3)))
    av = _weights(tmp_path / "av.npz", A_1=rng.standard_normal((3, 3)) * 1e300,
                  V_1=rng.standard_normal((4, 3)) * 1e300)
    for argv in (["fiber", "--weights", str(qk), "--other", str(qk)], ["classify", "--weights", str(qk)],
                 ["fiber", "--weights", str(av), "--other", str(av)]):
        code, out, err = run_cli(argv)
        assert code == 2 and out == "" and "overflow" in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "NOT" not in err
    # classify of (A, V) near 1e300 stays finite (phi is bilinear in A, V): a true answer.
    code, out, err = run_cli(["classify", "--weights", str(av)])
    assert code == 0 and "agrees" in out, err


def test_large_but_finite_weights_keep_the_right_rank(tmp_path):
    """Weights near 1e100 (Jacobian columns near 1e200): classify still agrees with Theorem 3.4.

    Regression: column norms overflowed to inf and zeroed half the Jacobian (rank 9, not 20).
    """
    rng = np.random.default_rng(13)
    path = _weights(tmp_path / "mid.npz", Q_1=rng.standard_normal((2, 3)) * 1e100,
                    K_1=rng.standard_normal((2, 3)) * 1e100, V_1=rng.standard_normal((4, 3)) * 1e100)
    code, out, err = run_cli(["classify", "--weights", str(path)])
    assert code == 0, err
    assert "agrees" in out


def test_non_finite_jacobian_is_a_computation_error():
    """A Jacobian with inf is never ranked: ComputationError (exit 1), not a number."""
    import torch

    from neuromanifold.core.architecture import Architecture
    from neuromanifold.dimension.jacobians import jacobian
    from neuromanifold.errors import ComputationError

    arch = Architecture((3, 2), (1,), 4)
    params = torch.full((arch.n_params,), 1e200, dtype=torch.float64)
    X = torch.full((2, 3, 4), 1e200, dtype=torch.float64)
    with pytest.raises(ComputationError, match="inf or nan"):
        jacobian(arch, params, X)


# ---------------------------------------------------------------- damaged and foreign stores

@pytest.fixture()
def good_store(tmp_path) -> Path:
    """A store with two finished rows (d = (2, 3) and (3, 2), a = 1, t = 2, exact)."""
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_GRID)
    db = tmp_path / "s.sqlite"
    sweep(grid, db, seed=0)
    assert len(read_results(db)) == 2
    return db


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for i in range(page + 100, len(data), 7):
        data[i] = (data[i] * 31 + 7) % 256
    path.write_bytes(bytes(data))


def _drop_column(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE results DROP COLUMN message")
    conn.commit()
    conn.close()


def _foreign(path: Path) -> None:
    path.unlink()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("damage, message", [
    (_garble, "SQLite"), (_drop_column, "lacks column message"), (_foreign, "another application"),
])
def test_damaged_or_foreign_store_is_never_written_or_read_as_results(tmp_path, good_store, damage, message):
    """sweep and report refuse a garbled, column-less or foreign store; its bytes stay as they were."""
    damage(good_store)
    before = snapshot(tmp_path)
    grid = tmp_path / "g.toml"
    for argv, option in ((["sweep", str(grid), "--db", str(good_store), "--seed", "1"], "db"),
                         (["report", str(good_store), "--out", str(tmp_path / "rep")], "db")):
        code, out, err = run_cli(argv)
        assert_refused(code, out, err, option)
        assert message in err
    assert snapshot(tmp_path) == before


def test_report_leaves_nothing_beside_the_store(good_store, tmp_path):
    """`report` opens the store read-only and creates no -wal or -shm file beside it."""
    before = snapshot(good_store.parent)
    code, _, err = run_cli(["report", str(good_store), "--out", str(tmp_path / "rep")])
    assert code == 0, err
    after = snapshot(good_store.parent)
    assert {k: v for k, v in after.items() if not k.startswith("rep")} == before
    assert not any(k.endswith(("-wal", "-shm")) for k in after)


def test_store_on_read_only_storage_is_read_immutable(good_store, monkeypatch):
    """Where the storage refuses writes, the store is opened immutable (no lock, no log files)."""
    monkeypatch.setattr(store_module.os, "access", lambda *_a, **_k: False)
    assert "immutable=1" in store_module._read_only_uri(good_store)
    assert len(read_results(good_store)) == 2


def test_finished_row_is_never_overwritten(tmp_path):
    """The store's insert-once write: a second insert of the same key changes nothing."""
    conn = open_store(tmp_path / "once.sqlite")
    first = {"item_key": "k", "widths": "4,3", "keys": "2", "tokens": 5, "status": "settled", "dimension": 7}
    assert insert_result(conn, first) is True
    assert insert_result(conn, dict(first, dimension=99, status="error")) is False
    conn.close()
    rows = read_results(tmp_path / "once.sqlite")
    assert [(r["dimension"], r["status"]) for r in rows] == [(7, "settled")]


def test_rerun_sweep_leaves_finished_rows_byte_identical(good_store):
    """A sweep re-run over a finished store writes nothing: rows and finish times are unchanged."""
    before = read_results(good_store)
    again = sweep(good_store.parent / "g.toml", good_store, seed=0)
    assert again.n_written == 0
    assert read_results(good_store) == before


# ---------------------------------------------------------------- processes and signals

def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _loaded_torch(pid: int) -> bool:
    try:
        return "torch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


SLOW_GRID = 'widths = [[40, 30, 20, 10], [30, 40, 20, 10]]\nkeys = [[6, 5, 4]]\ntokens = [3]\nmethod = ["numerical"]\n'


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_sweep(tmp_path):
    """SIGKILL of a sweep leaves no worker process running (prctl death signal + watchdog)."""
    grid = tmp_path / "slow.toml"
    grid.write_text(SLOW_GRID)
    cmd = [sys.executable, "-c", "from neuromanifold.cli import main; raise SystemExit(main())",
           "sweep", str(grid), "--db", str(tmp_path / "k.sqlite"), "--jobs", "2"]
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = [p for p in _children(proc.pid) if "spawn_main" in
                       Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        assert len(workers) == 2, "the sweep did not start its workers"
        # Kill only once both are computing (an idle worker would end anyway at its pipe's EOF):
        # imports take a few CPU seconds, the items minutes.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not all(_cpu_seconds(p) > 8 for p in workers):
            time.sleep(0.5)
        assert all(_cpu_seconds(p) > 8 for p in workers), "the workers did not start computing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_sigint_says_interrupted_and_exits_130(tmp_path):
    """Ctrl-C during a computation: the interrupted line on stderr, exit code 130, no traceback."""
    cmd = [sys.executable, "-c", "from neuromanifold.cli import main; raise SystemExit(main())",
           "dim", "--widths", "64,64,64", "--keys", "8,8", "--tokens", "16", "--attention", "softmax",
           "--method", "numerical"]  # minutes of work: it cannot finish before the signal
    env = dict(os.environ, PYTHONPATH=SRC)
    # A test run started in the background of a shell inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: give the child the default disposition, as a terminal does.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _loaded_torch(proc.pid):
            time.sleep(0.2)  # wait until the computation has started (torch loaded)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
