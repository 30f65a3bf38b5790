"""Start-up and whole-process timings (issue 13): `neuromanifold --help`, and the Figure 3 CLI run
(`figure3 --attention softmax --deltas 3-10`, start-up included).

Each command runs `--repeat` times as a fresh process in an empty folder; the median wall time is
printed. The side-by-side run against the authors' script is `benchmarks/bench_vs_authors.py`.
Run: .venv/bin/python benchmarks/bench_startup.py [--repeat 3]
Timings on a shared machine are pessimistic.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def neuromanifold_exe() -> str:
    """The `neuromanifold` console script of the running interpreter's environment."""
    beside = Path(sys.executable).with_name("neuromanifold")
    return str(beside) if beside.exists() else (shutil.which("neuromanifold") or str(beside))


def median_seconds(cmd: list[str], repeat: int) -> tuple[float, list[float]]:
    """Median and all wall times of `repeat` fresh runs of `cmd`, each in a new empty folder."""
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cwd:
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=cwd)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    exe = neuromanifold_exe()
    for what, goal in ((["--help"], "goal <= 0.5 s"),
                       (["figure3", "--attention", "softmax", "--deltas", "3-10"], "whole process")):
        median, times = median_seconds([exe, *what], args.repeat)
        print(f"neuromanifold {' '.join(what)}: {median:.2f} s (median of {args.repeat}: "
              f"{', '.join(f'{s:.2f}' for s in times)}; {goal})")


if __name__ == "__main__":
    main()
