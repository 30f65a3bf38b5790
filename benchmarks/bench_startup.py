"""Start-up and whole-process timings (issues 13 and 39), old tree against new in one run.

Commands: the README example (`dim --widths 3,5,3 --keys 2,2 --tokens 3`), `--help`,
`--version`, a Tab of the shell completion (bash asking for `neuromanifold count --`; a tree
without completion answers it with an error, exit 1), `count --model-type llama` and the
Figure 3 CLI run (`figure3 --attention softmax --deltas 3-10`, numerical; start-up included). Each runs as a fresh process in an empty folder,
`--repeat` times; with `--old SRC` (the `src` folder of another checkout, e.g. a worktree of
the previous main) the old and the new tree run in turn, old, new, old, new, ..., so a drift of
the machine's speed touches both alike, and the median of each and of the pairwise ratios is
printed. The side-by-side run against the authors' script is `benchmarks/bench_vs_authors.py`.

Run: .venv/bin/python benchmarks/bench_startup.py [--repeat 5] [--old ../main/src] [--quick]
(`--quick` leaves out figure3). Timings on a shared machine are pessimistic: the load average
is printed with the figures.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW_SRC = Path(__file__).resolve().parents[1] / "src"

COMMANDS = (
    (["dim", "--widths", "3,5,3", "--keys", "2,2", "--tokens", "3"], "README example; goal <= 1 s"),
    (["--help"], "goal <= 0.3 s"),
    (["--version"], "goal <= 0.3 s"),
    ([], "a Tab: bash completing `neuromanifold count --`"),
    (["count", "--model-type", "llama"], "goal <= 2 s"),
    (["figure3", "--attention", "softmax", "--deltas", "3-10"], "numerical; whole process"),
)


# The environment of a completion request (the words typed so far), for the command without arguments.
TAB = {"_NEUROMANIFOLD_COMPLETE": "complete_bash", "COMP_WORDS": "neuromanifold count --",
       "COMP_CWORD": "2"}


def wall_seconds(src: Path, args: list[str]) -> float:
    """Wall time of one fresh `python -m neuromanifold ARGS` with `src` first on PYTHONPATH,
    in a new empty folder (figure3 writes its files there); no ARGS: a Tab (`TAB`)."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               **({} if args else TAB))
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "neuromanifold", *args], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):   # 1: an honest ambiguous answer still times the run
        raise SystemExit(f"{' '.join(args)} exited {done.returncode} with {src}")
    return seconds


def paired(args: list[str], repeat: int, old: Path | None) -> tuple[list[float], list[float]]:
    """`repeat` wall times of the new tree and, when `old` is given, of the old one, in turn."""
    new_times, old_times = [], []
    for _ in range(repeat):
        if old is not None:
            old_times.append(wall_seconds(old, args))
        new_times.append(wall_seconds(NEW_SRC, args))
    return new_times, old_times


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} s (runs {', '.join(f'{s:.2f}' for s in times)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old", type=Path, default=None,
                        help="the src folder of the old tree, run in turn with this one")
    parser.add_argument("--quick", action="store_true", help="leave out figure3")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f} at the start; {args.repeat} runs each; {os.cpu_count()} cores")
    for what, goal in COMMANDS:
        if args.quick and what[:1] == ["figure3"]:
            continue
        new_times, old_times = paired(what, args.repeat, args.old)
        line = f"neuromanifold {' '.join(what) or '<Tab>'}: new {_spread(new_times)}"
        if old_times:
            ratios = [n / o for n, o in zip(new_times, old_times)]
            line += f"; old {_spread(old_times)}; new/old {statistics.median(ratios):.2f}"
        print(f"{line} [{goal}]", flush=True)
    if hasattr(os, "getloadavg"):
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
