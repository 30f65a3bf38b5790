"""Reliability round three (issue 24): configs, memory paths, caps and --timeout, the Dask
scheduler, certified options, damaged stores, `heads` and the API (docs/reliability.md).

Generated cases (hypothesis, derandomized) and their neighbours: each is refused with exit 2 and
one line naming the option, nothing created, or gives the right answer. Servers are sockets
opened here on 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reliability import PROBE, assert_refused, run_cli

from neuromanifold import Architecture, neuromanifold_dim, random_weights, rank_at_point
from neuromanifold.errors import InputError
from neuromanifold.models import hf
from neuromanifold.sweeps.engine import sweep

CONFIGS = Path(hf.__file__).parent / "configs"
TINY_GRID = 'widths = [[2, 3], [3, 2], [2, 2]]\nkeys = [[1]]\ntokens = [2]\nmethod = ["exact"]\n'


def _config(tmp_path: Path, model_type: str, name: str = "cfg.json", **fields) -> Path:
    data = json.loads((CONFIGS / f"{model_type}.json").read_text())
    data.update(fields)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# ---------------------------------------------------------------- configs

BAD_SIZES = st.one_of(st.integers(max_value=0), st.integers(min_value=2 ** 24 + 1, max_value=10 ** 30),
                      st.floats(allow_nan=True).filter(lambda v: not (math.isfinite(v) and v.is_integer())),
                      st.text(max_size=4), st.booleans(), st.lists(st.integers(), max_size=2))
SIZE_FIELDS = [("gpt2", "n_embd"), ("gpt2", "n_head"), ("gpt2", "n_layer"), ("gpt2", "n_inner"),
               ("gpt2", "vocab_size"), ("llama", "num_key_value_heads"), ("llama", "head_dim"),
               ("llama", "intermediate_size"), ("bert", "type_vocab_size")]


@PROBE
@given(field=st.sampled_from(SIZE_FIELDS), value=BAD_SIZES)
def test_count_refuses_a_bad_size_field_naming_it(tmp_path, field, value):
    """Wrong types, fractions, zero, negatives, past 2^24 (layers past 1000): one line naming the
    field, exit 2, before the model class is built (no TypeError, no hang on 10^30 layers)."""
    model_type, name = field
    path = _config(tmp_path, model_type, **{name: value})
    t0 = time.perf_counter()
    code, out, err = run_cli(["count", str(path)])
    assert time.perf_counter() - t0 < 30
    assert_refused(code, out, err, f"{path}: {name}")


@pytest.mark.parametrize("model_type, name, value", [
    ("llama", "attention_bias", "false"), ("llama", "mlp_bias", "yes"), ("llama", "attention_bias", 1),
    ("mistral", "attention_bias", [True])])
def test_string_bias_flags_are_refused(tmp_path, model_type, name, value):
    """A bias flag must be a JSON boolean: 'false' would read as true (bool('false'))."""
    path = _config(tmp_path, model_type, **{name: value})
    code, out, err = run_cli(["count", str(path)])
    assert_refused(code, out, err, f"{path}: {name}")
    assert "JSON boolean" in err


def test_zero_key_value_heads_is_refused_not_read_as_absent(tmp_path):
    """num_key_value_heads 0 was read as 'absent' (one group per head): refused, both commands."""
    path = _config(tmp_path, "llama", num_key_value_heads=0)
    assert_refused(*run_cli(["count", str(path)]), f"{path}: num_key_value_heads")
    assert_refused(*run_cli(["dim", "--hf-config", str(path), "--shrink", "layers=1"]),
                   f"{path}: num_key_value_heads")


def test_deeply_nested_json_is_one_line(tmp_path):
    """A JSON nested 100,000 levels deep: `config`, exit 2 (it was a RecursionError)."""
    path = tmp_path / "deep.json"
    path.write_text('{"model_type": "gpt2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, out, err = run_cli(["count", str(path)])
    assert_refused(code, out, err, "config")
    assert "nested" in err


def test_a_field_transformers_rejects_is_one_line(tmp_path):
    """A field only transformers validated (layer_norm_epsilon 'abc') is refused by `count`'s own
    config check in one line naming the file and the field, exit 2."""
    path = _config(tmp_path, "gpt2", layer_norm_epsilon="abc")
    code, out, err = run_cli(["count", str(path)])
    assert_refused(code, out, err, f"{path}: layer_norm_epsilon")


@pytest.mark.parametrize("shrink", ["layers=1,layers=2", "heads=4,vocab=7,heads=2"])
def test_duplicate_shrink_keys_are_refused(shrink):
    """--shrink with a key twice is refused, naming `shrink` and the key."""
    code, out, err = run_cli(["dim", "--hf-config", str(CONFIGS / "gpt2.json"), "--shrink", shrink])
    assert_refused(code, out, err, "shrink")
    assert "at most once" in err


@PROBE
@given(option=st.sampled_from([
    ("method", "exact"), ("method", "certified"), ("attention", "softmax"), ("temperature", "0.5"),
    ("samples", "3"), ("prime", "7"), ("precision", "64"), ("heads", "2"), ("values", "2"),
    ("mlp", "3"), ("activation", "relu"), ("norm", "layernorm")]))
def test_dim_options_that_hf_config_does_not_use_are_refused(option):
    """Options --hf-config ignored are refused by name, before any work."""
    name, value = option
    argv = ["dim", "--hf-config", str(CONFIGS / "gpt2.json"), "--shrink", "layers=1",
            f"--{name}", value]
    assert_refused(*run_cli(argv), name)
    assert_refused(*run_cli(argv[:-2] + ["--residual"]), "residual")


def test_count_seed_and_tokens_only_with_validate():
    """count --seed/--tokens without --validate are refused; a seed past 2^63 names the range."""
    assert_refused(*run_cli(["count", "--model-type", "gpt2", "--seed", "3"]), "seed")
    assert_refused(*run_cli(["count", "--model-type", "gpt2", "--tokens", "3"]), "tokens")
    code, out, err = run_cli(["count", "--model-type", "gpt2", "--validate", "--seed", str(2 ** 63)])
    assert_refused(code, out, err, "seed")
    assert "2^63 - 1" in err


# ---------------------------------------------------------------- memory paths and caps

@pytest.mark.parametrize("argv", [
    ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "100000"],
    ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "30000", "--attention", "softmax",
     "--method", "numerical"],
    ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "100000", "--attention", "softmax"],
    ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "100000", "--heads", "2,2"],
    ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "100000", "--mlp", "3,3",
     "--attention", "softmax"],
    ["dim", "--hf-config", str(CONFIGS / "gpt2.json"), "--shrink", "heads=1000000000"],
    ["dim", "--hf-config", str(CONFIGS / "gpt2.json"), "--shrink", "vocab=1000000000000"],
    ["dim", "--hf-config", str(CONFIGS / "llama.json"), "--shrink", "layers=1", "--tokens", "100000"],
])
def test_memory_paths_the_estimate_missed_are_refused_with_the_estimate(argv):
    """t x t score matrices and shrunk Hugging Face models are in the estimate: exit 2 naming
    `max_memory` with the estimate, quickly (they were the allocator's RuntimeError)."""
    t0 = time.perf_counter()
    code, out, err = run_cli(argv)
    assert time.perf_counter() - t0 < 60
    assert_refused(code, out, err, "max_memory")
    assert "estimated peak" in err and ("GB" in err or "TB" in err)


def test_rank_memory_paths_are_refused(tmp_path):
    """rank with many tokens, or a large weight file: exit 2 with the estimate."""
    import numpy as np

    rng = np.random.default_rng(3)
    small = tmp_path / "small.npz"
    np.savez(small, Q_1=rng.standard_normal((2, 3)), K_1=rng.standard_normal((2, 3)),
             V_1=rng.standard_normal((4, 3)))
    big = tmp_path / "big.npz"
    np.savez(big, Q_1=rng.standard_normal((50, 1000)), K_1=rng.standard_normal((50, 1000)),
             V_1=rng.standard_normal((1000, 1000)))
    for argv in (["rank", "--weights", str(small), "--tokens", "100000"],
                 ["rank", "--weights", str(big), "--no-generic"]):
        code, out, err = run_cli(argv)
        assert_refused(code, out, err, "max_memory")
        assert "rank at a point" in err


def test_heads_refuses_before_creating_its_folder(tmp_path):
    """`heads` with a bad seed, width, too many heads or tokens: no folder, one line."""
    out_dir = tmp_path / "heads"
    for extra, option in ((["--seed", "-1"], "seed"), (["--seed", str(2 ** 63)], "seed"),
                          (["--widths", "0,3"], "widths"), (["--widths", "3,3,3"], "widths"),
                          (["--max-heads", "100000000"], "max_heads"),
                          (["--tokens", "100000"], "max_memory")):
        t0 = time.perf_counter()
        assert_refused(*run_cli(["heads", "--out", str(out_dir)] + extra), option)
        assert time.perf_counter() - t0 < 30
        assert not out_dir.exists()


def test_a_billion_heads_is_refused_at_once():
    """--heads 1000000000 built a layout of 3 * 10^9 entries (it hung): refused from the cap."""
    t0 = time.perf_counter()
    code, out, err = run_cli(["dim", "--widths", "3,3,3", "--keys", "2,2", "--heads", "1000000000,1"])
    assert time.perf_counter() - t0 < 10
    assert_refused(code, out, err, "heads")
    assert "1024" in err


def test_count_with_a_huge_layer_count_does_not_hang(tmp_path):
    """n_layer 10^30 hung in the meta build: refused at once, naming the field and the cap."""
    t0 = time.perf_counter()
    path = _config(tmp_path, "gpt2", n_layer=10 ** 30)
    code, out, err = run_cli(["count", str(path)])
    assert time.perf_counter() - t0 < 10
    assert_refused(code, out, err, f"{path}: n_layer")
    assert "1,000" in err


def test_samples_past_the_parameter_count_are_capped():
    """--samples 99999999 on a 21-parameter network: N = 21, the same rank as the default N,
    and a note saying why (it streamed rows for hours)."""
    arch = Architecture((3, 3), (2,), 3, "softmax")
    capped = neuromanifold_dim(arch, method="numerical", samples=99_999_999)
    default = neuromanifold_dim(arch, method="numerical")
    assert (capped.n_samples, capped.dimension, capped.status) == (21, default.dimension, "settled")
    assert "N capped at n_params = 21" in capped.notes[0]
    point = rank_at_point(arch, random_weights(arch, 2), method="numerical", samples=10 ** 8,
                          generic=False)
    assert point.n_samples == 21 and point.rank == default.dimension


@pytest.mark.parametrize("command", ["dim", "rank"])
def test_timeout_stops_with_status_stopped(tmp_path, command):
    """--timeout 2 on minutes of work: status stopped on stdout, exit 1, within seconds."""
    import numpy as np

    if command == "dim":
        argv = ["dim", "--widths", "3,3,3", "--keys", "2,2", "--tokens", "3000", "--attention",
                "softmax", "--method", "numerical", "--samples", "2"]
    else:
        path = tmp_path / "w.npz"
        rng = np.random.default_rng(4)
        np.savez(path, Q_1=rng.standard_normal((2, 3)), K_1=rng.standard_normal((2, 3)),
                 V_1=rng.standard_normal((3, 3)))
        argv = ["rank", "--weights", str(path), "--tokens", "2000", "--no-generic"]
    # CPU time of this process, not wall time: on a loaded shared machine the wall clock of a
    # 2 s stop has reached 40 s, while the work itself would take minutes of CPU.
    t0, w0 = time.process_time(), time.perf_counter()
    code, out, err = run_cli(argv + ["--timeout", "2", "--json"])
    assert time.process_time() - t0 < 40
    assert time.perf_counter() - w0 < 150
    assert code == 1, err
    result = json.loads(out)
    assert result["status"] == "stopped" and result["dimension"] is None and result["timeout"] == 2


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_bad_timeouts_are_refused(value):
    """--timeout must be a positive finite number of seconds."""
    assert_refused(*run_cli(["dim", "--widths", "3,3", "--keys", "2", "--timeout", value]), "timeout")


# ---------------------------------------------------------------- the Dask scheduler

@pytest.fixture()
def local_server():
    """Start servers on 127.0.0.1 (ephemeral ports): 'silent' accepts and says nothing,
    'foreign' answers as an HTTP server; yields {kind: address}."""
    sockets, stop = [], threading.Event()

    def serve(sock, reply):
        sock.settimeout(0.2)
        held = []
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if reply:
                conn.sendall(reply)
            held.append(conn)
        for conn in held:
            conn.close()

    addresses = {}
    for kind, reply in (("silent", b""), ("foreign", b"HTTP/1.1 200 OK\r\n\r\nhello")):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        sockets.append(sock)
        threading.Thread(target=serve, args=(sock, reply), daemon=True).start()
        addresses[kind] = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    yield addresses
    stop.set()
    for sock in sockets:
        sock.close()


@PROBE
@given(protocol=st.sampled_from(["ucx", "tls", "ws", "wss", "udp", "http"]),
       port=st.integers(min_value=1, max_value=65535))
def test_scheduler_with_another_protocol_is_refused_without_connecting(protocol, port):
    """ucx://, tls:// (no certificates) and other protocols: `scheduler`, exit 2, at once."""
    t0 = time.perf_counter()
    argv = ["dim", "--widths", "3,3", "--keys", "2", "--backend", "dask", "--method", "numerical",
            "--scheduler", f"{protocol}://127.0.0.1:{port}"]
    code, out, err = run_cli(argv)
    assert time.perf_counter() - t0 < 10
    assert_refused(code, out, err, "scheduler")
    assert "tcp://" in err


@pytest.mark.parametrize("kind, message", [("silent", "no Dask handshake within"),
                                           ("foreign", "not a Dask scheduler")])
def test_scheduler_that_is_not_dask_is_refused_in_bounded_time(tmp_path, monkeypatch, local_server,
                                                               kind, message):
    """A server that never answers, or is not Dask: one line naming `scheduler`, within the
    probe's wait; a sweep refuses before its store exists."""
    from neuromanifold.core import scheduler
    from neuromanifold.dimension import dask_rank

    monkeypatch.setattr(dask_rank, "CONNECT_SECONDS", 2)
    monkeypatch.setattr(scheduler, "PROBE_SECONDS", 2.0)
    t0 = time.perf_counter()
    code, out, err = run_cli(["dim", "--widths", "3,3", "--keys", "2", "--backend", "dask",
                              "--method", "numerical", "--scheduler", local_server[kind]])
    assert time.perf_counter() - t0 < 45
    assert_refused(code, out, err, "scheduler")
    assert message in err
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_GRID)
    db = tmp_path / "s.sqlite"
    assert_refused(*run_cli(["sweep", str(grid), "--db", str(db), "--backend", "dask",
                             "--scheduler", local_server[kind]]), "scheduler")
    assert not db.exists()


# ---------------------------------------------------------------- certified options and sweeps

@pytest.mark.parametrize("extra", [["--attention", "softmax"],
                                   ["--attention", "softmax", "--method", "certified"],
                                   ["--mlp", "3,3", "--activation", "relu"],
                                   [], ["--method", "exact"]])
@pytest.mark.parametrize("prime", ["4", "1", "2147483648"])
def test_composite_or_oversized_prime_is_refused_for_every_exact_path(extra, prime):
    """--prime 4 was refused for lightning only: softmax auto and relu blocks now too."""
    code, out, err = run_cli(["dim", "--widths", "3,3,3", "--keys", "2,2", "--prime", prime] + extra)
    assert_refused(code, out, err, "prime")


def test_sweep_asking_exact_of_a_softmax_grid_is_refused(tmp_path):
    """method = exact on a softmax grid (in the grid, or by --method): refused, no store."""
    db = tmp_path / "s.sqlite"
    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\nattention = ["softmax"]\n'
                    'method = ["exact"]\n')
    assert_refused(*run_cli(["sweep", str(grid), "--db", str(db)]), "method")
    grid.write_text('widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\nattention = ["softmax"]\n')
    assert_refused(*run_cli(["sweep", str(grid), "--db", str(db), "--method", "exact"]), "method")
    assert not db.exists()


def test_block_grid_is_counted_before_it_expands(tmp_path):
    """Block options multiply the grid: 3 * 10^8 combinations refused at once from the count."""
    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[4, 4, 4]]\nkeys = [[2, 2]]\ntokens = [3]\n'
                    'heads = {layers = [2], range = [1, 100]}\nvalues = {layers = [2], range = [1, 100]}\n'
                    'mlp = [[1, 1], [2, 2], [3, 3]]\n')
    t0 = time.perf_counter()
    code, out, err = run_cli(["sweep", str(grid), "--db", str(tmp_path / "s.sqlite")])
    assert time.perf_counter() - t0 < 10
    assert_refused(code, out, err, "grid")
    assert "300000000" in err


# ---------------------------------------------------------------- damaged stores

@pytest.fixture(scope="module")
def three_row_store(tmp_path_factory) -> Path:
    """A store with three finished rows of the paper's model (exact)."""
    folder = tmp_path_factory.mktemp("store")
    grid = folder / "g.toml"
    grid.write_text(TINY_GRID)
    db = folder / "s.sqlite"
    sweep(grid, db, seed=0)
    return db


DAMAGE = st.sampled_from([("tokens", "'abc'"), ("tokens", "NULL"), ("tokens", "0"), ("widths", "NULL"),
                          ("widths", "'3,x'"), ("widths", "''"), ("keys", "'1,1'"), ("keys", "NULL"),
                          ("item_key", "''"), ("item_key", "NULL"), ("dimension", "'x'"),
                          ("dimension", "2.5"), ("attention", "'relu'"), ("status", "NULL"),
                          ("formula", "'seven'"), ("n_params", "'many'"), ("sv_gap", "'zz'"),
                          ("seconds", "'slow'"), ("n_samples", "'x'"), ("seed", "1.5")])


@settings(parent=PROBE, max_examples=15)  # each example writes a report (figures)
@given(damage=st.lists(st.tuples(st.integers(min_value=1, max_value=3), DAMAGE), min_size=1, max_size=4))
def test_report_on_damaged_values_skips_or_refuses_in_one_line(tmp_path, three_row_store, damage):
    """Text in an integer column, NULL widths, empty keys: the damaged rows are skipped and
    counted (exit 0), or, when none is readable, `db` is refused (exit 2); never internal."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one per generated example
    db = folder / "d.sqlite"
    db.write_bytes(three_row_store.read_bytes())
    conn = sqlite3.connect(db)
    for rowid, (column, value) in damage:
        conn.execute(f"UPDATE results SET {column} = {value} WHERE rowid = {rowid}")
    conn.commit()
    conn.close()
    rows = {rowid for rowid, _ in damage}
    before = db.read_bytes()
    code, out, err = run_cli(["report", str(db), "--out", str(folder / "rep"), "--json"])
    assert "internal error" not in err and "Traceback" not in err
    if len(rows) == 3:
        assert_refused(code, out, err, "db")
        assert not (folder / "rep").exists()
    else:
        assert code == 0, err
        summary = json.loads(out)
        assert (summary["rows"], summary["damaged_rows"]) == (3 - len(rows), len(rows))
    assert db.read_bytes() == before


# ---------------------------------------------------------------- the Python API

BAD_GAPS = st.one_of(st.sampled_from([math.nan, -math.inf, math.inf, 0.0, "4", None, True]),
                     st.floats(max_value=0.0, allow_nan=False))


@PROBE
@given(min_gap=BAD_GAPS)
def test_api_refuses_bad_min_gap(min_gap):
    """neuromanifold_dim and rank_at_point: min_gap NaN, zero, negative, infinite or not a
    number is the template error naming `min_gap` (it was accepted without a word)."""
    arch = Architecture((3, 3), (2,), 3, "softmax")
    with pytest.raises(InputError, match="^`min_gap` must be a positive"):
        neuromanifold_dim(arch, method="numerical", min_gap=min_gap)
    with pytest.raises(InputError, match="^`min_gap` must be a positive"):
        rank_at_point(arch, random_weights(arch, 1), min_gap=min_gap, generic=False)


def test_api_refuses_string_samples_and_composite_primes():
    """A string max_samples or samples, and prime=4 for softmax auto: the house template."""
    from neuromanifold.dimension.numerical import numerical_dim

    arch = Architecture((3, 3), (2,), 3, "softmax")
    with pytest.raises(InputError, match="^`max_samples` must be an integer >= 1; got '8'"):
        numerical_dim(arch, max_samples="8")
    with pytest.raises(InputError, match="^`samples` must be an integer >= 1; got '8'"):
        neuromanifold_dim(arch, samples="8")
    with pytest.raises(InputError, match="^`prime` must be a prime >= 3; got 4"):
        neuromanifold_dim(arch, prime=4)
    with pytest.raises(InputError, match="^`prime` must be a prime below 2\\^31"):
        neuromanifold_dim(Architecture((3, 3), (2,), 3), prime=2 ** 61 - 1)


# ---------------------------------------------------------------- deep networks and Ctrl-C

def test_deep_network_jacobian_passes_report_progress(monkeypatch):
    """A deep network's long phases (the gauge's forward-mode columns, the float Jacobian and the
    ball block of the certified path) each say how far they are, throttled by time."""
    from neuromanifold.core.blocks import flatten_blocks  # noqa: PLC0415
    from neuromanifold.dimension import ball_dual, gauge, jacobians  # noqa: PLC0415

    monkeypatch.setattr(gauge, "_PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(gauge, "_CHUNK_BYTES", 1)  # one column a chunk: several lines
    arch = Architecture((3, 2, 3), (2, 2), 2, attention="softmax")
    lines: list[str] = []
    result = neuromanifold_dim(arch, method="numerical", progress=lines.append)
    assert (result.dimension, result.status) == (20, "settled")  # the same answer as without progress
    assert any(line.startswith("Jacobian columns ") for line in lines), lines

    monkeypatch.setattr(ball_dual, "PROGRESS_SECONDS", 0.0)
    blocks, X = ball_dual.rational_point(arch, 0, 3)
    lines = []
    J = jacobians.jacobian(arch, flatten_blocks(arch, blocks), X)
    ball_dual.ball_block_jacobian(arch, blocks, X, list(range(J.shape[0])), [0, 1], lines.append)
    assert [line.split(" (")[0] for line in lines] == [
        "ball Jacobian block: sample 1/3", "ball Jacobian block: sample 2/3"]


def test_deep_network_progress_is_not_printed_when_quick():
    """A network that takes well under a second prints no progress line of those passes."""
    lines: list[str] = []
    neuromanifold_dim(Architecture((3, 2, 3), (2, 2), 2, attention="softmax"), method="numerical",
                      progress=lines.append)
    assert not [line for line in lines if "Jacobian columns" in line or "ball Jacobian" in line]


_INTERRUPTED = "neuromanifold: interrupted; results already written are kept"


def _ctrl_c_at_a_terminal(args: list[str], cue: str, delay: float) -> tuple[int | None, str]:
    """Run the CLI in its own process group, wait for the stderr line containing `cue`, then send
    SIGINT to the whole group after `delay` seconds, as a terminal's Ctrl-C does (the Dask
    workers included); (exit code, None if it finished first; all of stderr). Every wait is
    bounded, and the group is killed if anything of it is left."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    src = str(Path(__file__).resolve().parents[2] / "src")
    cmd = [sys.executable, "-c", "from neuromanifold.cli import main; raise SystemExit(main())", *args]
    # start_new_session: a group of its own to signal; SIG_DFL: a test run started in the
    # background of a shell inherits SIGINT ignored, which a terminal's foreground job does not.
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=src), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[str] = []
    try:
        for line in proc.stderr:  # bounded: the command ends by itself within a minute
            seen.append(line)
            if cue in line:
                break
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 20  # the workers follow their parent out
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("processes of the interrupted command are still running")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(timeout=30)
    return (None if finished else proc.returncode), "".join(seen) + err


def _assert_one_interrupted_line(code: int | None, err: str) -> None:
    """Exit 130, and after the command's own progress lines only the interrupted line: no
    traceback from this process or its Dask workers, no log or warning."""
    if code is None:
        pytest.skip("the run finished before the signal landed")
    assert code == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == _INTERRUPTED, err
    assert all(line.startswith(("dim: ", "sweep: ")) for line in lines[:-1]), err


def test_ctrl_c_while_the_dask_local_cluster_starts_prints_one_line():
    """Ctrl-C (SIGINT to the process group) while `dim --backend dask` starts its LocalCluster:
    exit 130 and the one interrupted line, without Dask's atexit or asyncio tracebacks."""
    code, err = _ctrl_c_at_a_terminal(
        ["dim", "--widths", "3,2,3", "--keys", "2", "--tokens", "2", "--backend", "dask"],
        "starting a LocalCluster", 0.7)  # inside the cluster's start (measured: it takes 1-5 s)
    _assert_one_interrupted_line(code, err)


def test_ctrl_c_while_dask_workers_compute_prints_one_line():
    """Ctrl-C (SIGINT to the process group, workers included) while the LocalCluster's workers
    compute Jacobian rows: exit 130 and the one interrupted line; no worker prints its own
    KeyboardInterrupt traceback (they block SIGINT: `dask_rank.connect`) and none is left."""
    code, err = _ctrl_c_at_a_terminal(
        ["dim", "--widths", "24,24,24", "--keys", "6,6", "--tokens", "8", "--attention", "softmax",
         "--method", "numerical", "--backend", "dask"],  # about 20 s: it cannot finish first
        "samples sent to the workers", 0.3)
    _assert_one_interrupted_line(code, err)


def test_a_keyboard_interrupt_swallowed_by_a_gc_callback_is_raised_again():
    """A Ctrl-C that lands in a garbage-collector callback (Dask's GCDiagnosis) is reported as
    unraisable and dropped by Python; the CLI raises it again in the main thread, so the command
    stops instead of running on (a `sweep --backend dask` ran on after its Ctrl-C)."""
    import gc  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from neuromanifold.cli import app as cli_app  # noqa: PLC0415

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default here (a background run): the CLI leaves it")
    fired: list[str] = []

    def callback(phase, _info):
        if not fired:
            fired.append(phase)
            raise KeyboardInterrupt

    record: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        with cli_app._interrupts_recorded(record):
            gc.callbacks.append(callback)
            try:
                gc.collect()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                gc.callbacks.remove(callback)
    assert fired and record  # swallowed once, then raised (and recorded) by the CLI's handler


def test_prove_rank_float_selection_and_pivot_fallback_report_progress(monkeypatch):
    """`prove_rank`'s float phases (the SVD that chooses the block, the column-pivoting fallback
    when that block's ball contains 0) say what they do, and the pivoting how far it is: on a
    deep network they took seconds without a line. The answer is the same as without progress."""
    import flint  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from neuromanifold.dimension import ball  # noqa: PLC0415

    monkeypatch.setattr(ball, "_SELECTION_NOTE_WORK", 0)
    monkeypatch.setattr(ball, "PROGRESS_SECONDS", 0.0)
    M = torch.tensor([[1., 2., 3., 3.], [2., 4., 6., 1.], [0., 1., 1., 5.], [1., 1., 2., 7.],
                      [3., 5., 8., 2.]], dtype=torch.float64)  # column 3 = column 1 + column 2

    def evaluate(rows, cols):
        return np.array([[flint.arb(float(M[r, c])) for c in cols] for r in rows], dtype=object)

    monkeypatch.setattr(ball, "_select_block", lambda J, r: ([0, 1, 2], [0, 1, 2], None))  # singular
    lines: list[str] = []
    got = ball.prove_rank(M, 3, evaluate, progress=lines.append)
    assert got.proved == 3 and got.proved == ball.prove_rank(M, 3, evaluate).proved
    assert lines[0].startswith("float selection of the 3 x 3 block: SVD of the 5 x 4 Jacobian"), lines
    assert lines[1].startswith("float selection: block chosen"), lines
    pivoting = [line for line in lines if line.startswith("column pivoting: ")]
    assert [line.split(" (")[0] for line in pivoting] == [
        "column pivoting: 1/3 columns chosen", "column pivoting: 2/3 columns chosen",
        "column pivoting: 1/3 rows chosen", "column pivoting: 2/3 rows chosen"], lines
    assert any(line.startswith("trying the block chosen by column pivoting") for line in lines), lines


@pytest.mark.parametrize(("option", "value", "match"), [
    ("min_gap", float("nan"), "`min_gap` must be a positive finite number of decades; got nan"),
    ("min_gap", -1.0, "`min_gap` must be a positive finite number of decades; got -1.0"),
    ("min_gap", "4", "`min_gap` must be a positive number of decades; got '4'"),
    ("max_samples", "5", "`max_samples` must be an integer >= 1; got '5'"),
    ("max_samples", 0, "`max_samples` must be an integer >= 1; got 0"),
])
def test_functional_dim_validates_min_gap_and_max_samples_as_the_cli_does(option, value, match):
    """`functional_dim` refuses what `neuromanifold_dim` refuses (a NaN or negative `min_gap`, a
    string or zero `max_samples`) with the house template, before any work; it took them and
    answered `settled`."""
    import re  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from neuromanifold import functional_dim  # noqa: PLC0415

    module = torch.nn.Linear(3, 2).double()
    with pytest.raises(InputError, match=re.escape(match)):
        functional_dim(module, inputs=lambda n, g: torch.randn(n, 3, dtype=torch.float64, generator=g),
                       **{option: value})


@pytest.mark.parametrize(("column", "value"), [("sv_gap", "'zz'"), ("seconds", "'slow'"),
                                               ("n_samples", "'x'"), ("seed", "1.5")])
def test_report_skips_text_in_a_number_column_it_copies(tmp_path, three_row_store, column, value):
    """Text in `sv_gap` or `seconds` (copied into results.csv) or a fractional `n_samples` or
    `seed`: the row is skipped and counted, where the report copied 'zz' into the CSV."""
    db = tmp_path / "d.sqlite"
    db.write_bytes(three_row_store.read_bytes())
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE results SET {column} = {value} WHERE rowid = 2")
    conn.commit()
    conn.close()
    code, out, err = run_cli(["report", str(db), "--out", str(tmp_path / "rep"), "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["rows"], summary["damaged_rows"], summary["damage"]) == (2, 1, {column: 1})
