"""Side by side on one machine (issue 13): the authors' Figure 3 run vs `neuromanifold figure3`.

Their code is the public repository https://github.com/giovanni-marchetti/NeuroDim (measured at
commit fd9a6e9). Get it with
    git clone https://github.com/giovanni-marchetti/NeuroDim /tmp/NeuroDim
and run
    .venv/bin/python benchmarks/bench_vs_authors.py --authors-dir /tmp/NeuroDim
It needs only torch, numpy and matplotlib, which this project's environment already has.

What runs for them. Their `dim_estimator.py` is written for another experiment (d = 4, l = 3,
a = 1..4, N = 10 inputs); Figure 3 is l = 2, t = 3, a = 2, d = delta = 3..10 with N = 250 inputs,
and their script takes no arguments. So a small runner, started as a fresh Python process in an
empty temporary folder with MPLBACKEND=Agg, reads their file (never modified on disk) and, for
each delta, executes its computing part (everything before `plt.figure()`) in memory with four
parameter lines replaced:
    d = 4                              -> d = delta
    num_samples = 10                   -> num_samples = 250   (--samples)
    a_vec = np.arange(1, d + 1)        -> a_vec = np.array([2])
    l_vec = np.array([3] * len(a_vec)) -> l_vec = np.array([2])
Everything else is theirs as published: t = 3, normalize = True, num_iters = 5 draws per point,
unscaled N(0, 1) float32 weights and inputs, one backward pass per output entry, and
torch.linalg.matrix_rank with its default tolerance; the point's rank is the largest of the 5.
Their plotting part is not run (it would add time to theirs, and it plots the closed form under
both labels: its `plt.plot(a_vec, dim_vec, ...)` line is commented out). The script prints no
rank; the runner reads `ranks` and `dim_vec` from the executed namespace.

What runs for us: `neuromanifold figure3 --attention softmax --deltas 3-10`, the exact command, as
a whole process (start-up, imports, all eight points, PNG and CSV written) in a fresh empty folder.
Ours is timed `--repeat` times (median); theirs `--their-repeat` times (median). Both are printed
with the ratio, and both sets of ranks next to Eq. 16 (delta^2 + 8 delta - 8).
With `--float64-check`, the points where their rank differs from Eq. 16 are run once more
(untimed) with torch's default dtype set to float64 before their code runs: the same code with
fresh random draws (theirs are unseeded), only the precision changed, which shows whether a wrong
rank of theirs comes from float32.
Wall and CPU seconds are printed. On a loaded machine torch's default thread pool stalls on small
operations (theirs far more than ours: measured 26 ms instead of 1.1 ms per backward pass at load
8 on 2 cores), so there pass `--threads 1`, which sets OMP_NUM_THREADS=1 for both processes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_startup import neuromanifold_exe

REPO_URL = "https://github.com/giovanni-marchetti/NeuroDim"
DELTAS = list(range(3, 11))
# Their published parameter lines and what each becomes for Figure 3 ({delta}, {samples} filled in).
SUBSTITUTIONS = {
    "d = 4": "d = {delta}",
    "num_samples = 10": "num_samples = {samples}",
    "a_vec = np.arange(1, d + 1)": "a_vec = np.array([2])",
    "l_vec = np.array([3] * len(a_vec))": "l_vec = np.array([2])",
}
# Lines that must already hold the Figure 3 value (kept as published).
KEPT = ("t = 3", "num_iters = 5", "normalize = True", "from attn import *")
PLOT_START = "plt.figure()"

# Runs in a fresh interpreter: argv = authors_dir samples deltas(comma) float64(0/1).
RUNNER = r"""
import json, sys, time
authors, samples, deltas, float64 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
subs = json.loads(sys.argv[5])
sys.path.insert(0, authors)
if float64:
    import torch
    torch.set_default_dtype(torch.float64)
with open(authors + "/dim_estimator.py") as fh:
    compute = fh.read().split("plt.figure()")[0]
points = []
for delta in [int(d) for d in deltas.split(",")]:
    t0 = time.perf_counter()
    lines = [subs[ln].format(delta=delta, samples=samples) if ln in subs else ln
             for ln in compute.splitlines()]
    namespace = {"__name__": "__main__"}
    exec(compile("\n".join(lines), "dim_estimator.py", "exec"), namespace)
    points.append({"delta": delta, "ranks": [int(r) for r in namespace["ranks"]],
                   "rank": int(namespace["dim_vec"][0]), "seconds": time.perf_counter() - t0})
    print(f"  theirs{' (float64)' if float64 else ''}: delta = {delta}: ranks {points[-1]['ranks']}"
          f" ({points[-1]['seconds']:.1f} s)", file=sys.stderr, flush=True)
print("RANKS " + json.dumps(points))
"""


def eq16(delta: int) -> int:
    """The closed form for Figure 3 (softmax, l = 2, a = 2): delta^2 + 8 delta - 8."""
    return delta * delta + 8 * delta - 8


def check_authors_dir(path: Path) -> None:
    """Exit 2 with one line unless `path` holds their dim_estimator.py and attn.py as published."""
    script = path / "dim_estimator.py"
    fix = f"Clone it: git clone {REPO_URL} /tmp/NeuroDim, then pass --authors-dir /tmp/NeuroDim."
    problem = None
    if not path.is_dir():
        problem = "no such folder"
    elif not script.is_file() or not (path / "attn.py").is_file():
        problem = "no dim_estimator.py and attn.py in it"
    else:
        lines = script.read_text().split(PLOT_START)[0].splitlines()
        missing = [ln for ln in (*SUBSTITUTIONS, *KEPT) if lines.count(ln) != 1]
        if PLOT_START not in script.read_text() or missing:
            problem = f"dim_estimator.py differs from the published one ({missing or [PLOT_START]})"
    if problem:
        print(f"`--authors-dir` must be a checkout of {REPO_URL}; got {path} ({problem}). {fix}",
              file=sys.stderr)
        raise SystemExit(2)


def timed(cmd: list[str], cwd: str, **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `cmd` as a fresh process: (wall seconds, its CPU seconds user + system, the result).
    CPU seconds are less sensitive than wall time to other work on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, text=True, **kwargs)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def run_theirs(authors: Path, samples: int, deltas: list[int],
               float64: bool = False) -> tuple[float, float, list[dict]]:
    """One whole-process run of their Figure 3 computation: (wall s, CPU s, points). Its
    per-point progress goes to stderr."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-c", RUNNER, str(authors.resolve()), str(samples),
           ",".join(map(str, deltas)), "1" if float64 else "0", json.dumps(SUBSTITUTIONS)]
    with tempfile.TemporaryDirectory() as cwd:
        wall, cpu, proc = timed(cmd, cwd, env=env, stdout=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"their run failed (exit {proc.returncode}); its error is printed above")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RANKS "))
    return wall, cpu, json.loads(line[len("RANKS "):])


def run_ours(exe: str) -> tuple[float, float, dict[int, dict]]:
    """One whole-process run of the exact command in an empty folder: (wall s, CPU s, rows by
    delta)."""
    cmd = [exe, "figure3", "--attention", "softmax", "--deltas", "3-10"]
    with tempfile.TemporaryDirectory() as cwd:
        wall, cpu, proc = timed(cmd, cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if proc.returncode != 0:
            sys.exit(f"`neuromanifold figure3` failed (exit {proc.returncode})")
        with open(Path(cwd) / "figure3" / "figure3_softmax.csv", newline="") as fh:
            rows = {int(r["delta"]): r for r in csv.DictReader(fh)}
    return wall, cpu, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--authors-dir", type=Path, required=True,
                        help=f"an extracted checkout of {REPO_URL}")
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours (median)")
    parser.add_argument("--their-repeat", type=int, default=1, help="runs of theirs (median)")
    parser.add_argument("--samples", type=int, default=250,
                        help="their N per draw (Figure 3's 250; their script's own default is 10)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS and MKL_NUM_THREADS for both processes (default: "
                             "torch's own choice); 1 keeps a loaded machine from stalling torch's "
                             "thread pool on small operations")
    parser.add_argument("--float64-check", action="store_true",
                        help="rerun their wrong points in float64 (untimed)")
    args = parser.parse_args()
    check_authors_dir(args.authors_dir)
    if args.threads is not None:  # both children inherit it
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    exe = neuromanifold_exe()
    load = os.getloadavg()[0]
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load average {load:.1f} at start; "
          f"python {platform.python_version()}; torch threads "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')} in both processes")

    ours_runs, ours_rows = [], {}
    for _ in range(args.repeat):
        wall, cpu, ours_rows = run_ours(exe)
        ours_runs.append((wall, cpu))
    ours, ours_cpu = (statistics.median(x) for x in zip(*ours_runs))
    print(f"ours:   neuromanifold figure3 --attention softmax --deltas 3-10: {ours:.2f} s wall, "
          f"{ours_cpu:.2f} s CPU (medians of {args.repeat}; wall "
          f"{', '.join(f'{w:.2f}' for w, _ in ours_runs)})", flush=True)

    their_runs, their_points = [], []
    for _ in range(args.their_repeat):
        wall, cpu, their_points = run_theirs(args.authors_dir, args.samples, DELTAS)
        their_runs.append((wall, cpu))
        print(f"theirs: one run {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    theirs, theirs_cpu = (statistics.median(x) for x in zip(*their_runs))
    print(f"theirs: dim_estimator.py, Figure 3 parameters, 5 draws per point, N = {args.samples}: "
          f"{theirs:.1f} s wall, {theirs_cpu:.1f} s CPU (medians of {args.their_repeat})")
    print(f"ratio theirs / ours: {theirs / ours:.0f}x wall, {theirs_cpu / ours_cpu:.0f}x CPU "
          f"(goal >= 50x); load average {os.getloadavg()[0]:.1f} at the end")

    wrong = [p["delta"] for p in their_points if p["rank"] != eq16(p["delta"])]
    check64 = {}
    if args.float64_check and wrong:
        print(f"float64 check of their wrong points {wrong} (untimed)", flush=True)
        check64 = {p["delta"]: p for p in run_theirs(args.authors_dir, args.samples, wrong, True)[2]}
    print()
    header = (f"{'delta':>5} {'params':>6} {'Eq. 16':>6} {'ours':>5} {'gap':>5} {'our s':>6} "
              f"{'theirs':>6} {'their s':>7}  their 5 draws")
    print(header + ("  | same code in float64: rank [5 draws]" if check64 else ""))
    for point in their_points:
        delta = point["delta"]
        row = ours_rows[delta]
        mark = "" if point["rank"] == eq16(delta) else "  <- wrong"
        extra = (f"  | {check64[delta]['rank']} {check64[delta]['ranks']}"
                 if delta in check64 else "")
        print(f"{delta:>5} {row['n_params']:>6} {eq16(delta):>6} {row['estimated']:>5} "
              f"{float(row['gap']):>5.1f} {float(row['seconds']):>6.2f} {point['rank']:>6} "
              f"{point['seconds']:>7.1f}  {point['ranks']}{mark}{extra}")
    print("ours: float64, rank by the largest singular-value gap (decades shown); theirs: float32, "
          "torch.linalg.matrix_rank default tolerance, largest of 5 draws")


if __name__ == "__main__":
    main()
