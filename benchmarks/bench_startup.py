"""Start-up and whole-process timings (issue 13): `neuromanifold --help`, and the Figure 3 CLI
run (`figure3 --attention softmax --deltas 3-10`, start-up included) against the authors' script.

Each command runs `--repeat` times as a fresh process; the median wall time is printed.
With `--theirs DIR` (a checkout of the paper's code holding the Figure 3 script) that script is
timed the same way and the ratio printed; without it the script says it did not run it.
Run: .venv/bin/python benchmarks/bench_startup.py [--repeat 3] [--theirs DIR [--their-script NAME]]
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


def median_seconds(cmd: list[str], repeat: int, cwd: str | None = None) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=cwd)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--theirs", type=Path, default=None, help="checkout of the authors' code")
    parser.add_argument("--their-script", default=None, help="their Figure 3 script (path in DIR)")
    args = parser.parse_args()
    exe = shutil.which("neuromanifold") or str(Path(sys.executable).with_name("neuromanifold"))
    help_s = median_seconds([exe, "--help"], args.repeat)
    print(f"neuromanifold --help: {help_s:.2f} s (median of {args.repeat}; goal <= 0.5 s)")
    with tempfile.TemporaryDirectory() as out:
        ours = median_seconds([exe, "figure3", "--attention", "softmax", "--deltas", "3-10",
                               "--out", out, "--force"], args.repeat)
    print(f"neuromanifold figure3 --attention softmax --deltas 3-10: {ours:.2f} s (whole process)")
    if args.theirs is None or args.their_script is None:
        print("authors' script: not run (pass --theirs DIR --their-script NAME with their code)")
        return
    script = args.theirs / args.their_script
    if not script.exists():
        print(f"authors' script: not run ({script} does not exist)")
        return
    theirs = median_seconds([sys.executable, str(script)], 1, cwd=str(args.theirs))
    print(f"authors' {args.their_script}: {theirs:.1f} s (one run); ratio {theirs / ours:.0f}x (goal >= 50x)")


if __name__ == "__main__":
    main()
