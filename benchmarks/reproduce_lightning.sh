#!/usr/bin/env bash
# Reproduce every number of docs/lightning_dimension.md and docs/eq14_map.md with one command.
#
# Usage: benchmarks/reproduce_lightning.sh OUT_DIR [JOBS] [--quick]
#
# Writes into OUT_DIR (refused if it exists): one log per step and SUMMARY.txt, the closing line
# of every step. Steps: the `general` closed form against certified dimensions (l = 1, 2 and 3:
# every architecture with widths 1..6, keys 1..4, t = 1, 2, 3; seeded samples of l = 4 and l = 5
# with widths 1..8), the named counterexamples to Eq. 14 and the effective-width conjecture
# (`neuromanifold dim`, certified), the eq14_map sweep with its report, and the replay of the
# version-1 rules that separates the three causes. --quick replaces the full l = 3 grid by its
# 30,000-item seeded sample. Every value is computed; nothing is read from a stored result.
# Measured on the project's 2-core machine with JOBS = 2: the l = 3 grid (248,832 architectures)
# took 1,213 s, l = 1, 2, 4 and 5 under a minute together; the eq14_map sweep about 9 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: benchmarks/reproduce_lightning.sh OUT_DIR [JOBS] [--quick]" >&2
  exit 2
fi
out=$1
jobs=${2:-2}
quick=${3:-}
if [ -e "$out" ]; then
  echo "OUT_DIR must not exist yet; got '$out'. Pass a new folder." >&2
  exit 2
fi
py=${PYTHON:-.venv/bin/python}
nm=(env PYTHONPATH=src "$py" -m neuromanifold)
mkdir -p "$out"
summary=$out/SUMMARY.txt

step() {  # step NAME COMMAND...: run, keep the log, copy its last line into the summary
  local name=$1
  shift
  echo "== $name" >&2
  "$@" > "$out/$name.log"
  { echo "$name: $(tail -n 1 "$out/$name.log")"; } >> "$summary"
}
general() { env PYTHONPATH=src "$py" benchmarks/check_general.py --jobs "$jobs" "$@"; }

step general_l1 general --layers 1
step general_l2 general --layers 2
if [ "$quick" = "--quick" ]; then
  step general_l3_sample general --layers 3 --sample 30000
else
  step general_l3 general --layers 3
fi
step general_l4_sample general --layers 4 --max-width 8 --sample 300 --seed 4
step general_l5_sample general --layers 5 --max-width 8 --sample 200 --seed 5

# The counterexamples named in the docs: certified dimension beside Eq. 14 and `general`.
for case in "6,6,6,6 1,4,4" "6,6,6 1,2" "6,5,2 2,1" "7,6,2 2,1" "8,6,2 2,1" "6,5,1 2,1" "9,7,1 2,2"; do
  set -- $case
  json=$out/dim_${1//,/-}_${2//,/-}.json
  "${nm[@]}" dim --widths "$1" --keys "$2" --tokens 3 --json > "$json" 2>> "$out/dim.log"
  "$py" - "$json" >> "$summary" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, f, g = r["architecture"], r["formula"], r["general"]
print("widths", a["widths"], "keys", a["keys"], "t = 3:", r["dimension"], "(" + r["status"] + ");",
      "Eq. 14", f["value"], "(hypotheses hold: " + str(f["hypotheses_hold"]) + "),", "general", g["value"])
PY
done

step eq14_map_sweep "${nm[@]}" sweep eq14_map --db "$out/eq14_map.sqlite" --jobs "$jobs" --seed 0
step eq14_map_report "${nm[@]}" report "$out/eq14_map.sqlite" --out "$out/eq14_report" --heat-fix a1=2,a2=2
step eq14_causes env PYTHONPATH=src "$py" benchmarks/eq14_causes.py "$out/eq14_map.sqlite"
cat "$summary"
