"""docs/models.md's table of the families' independence at the real head width: for every shipped
family, `certify.independence` at `certify.real_width_size` (2 layers at the config's own head
width), each in a fresh process so that its peak memory is its own. `--write` rewrites the
table in place (the rows of the models given; the others are kept).

    PYTHONPATH=src .venv/bin/python scripts/real_width_table.py --write
    PYTHONPATH=src .venv/bin/python scripts/real_width_table.py llama qwen2
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

from doc_blocks import read_block, write_block

from neuromanifold.dimension import peel  # noqa: E402
from neuromanifold.models import certify, convert, hf  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
BEGIN, END = "<!-- real_width_table: begin -->", "<!-- real_width_table: end -->"
HEADER = ("| family | size (layers x heads x head width, MLP width) | parameters | tangents | "
          "tangent rank over F_p | counted symmetry | time | peak memory |\n"
          "|---|---|---|---|---|---|---|---|")


def measure(model_type: str) -> dict:
    """The independence row at the real head width and the process's peak memory (run in the
    child process)."""
    cfg = hf.shipped_config(model_type)
    size = certify.real_width_size(cfg)
    row = certify.independence(cfg, ladder=(size,))[0]
    row["intermediate"] = size[3]
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def cell(model_type: str, limit: float) -> str:
    """The table row of `model_type`, measured in a child process of at most `limit` s."""
    try:
        out = subprocess.run([sys.executable, __file__, "--child", model_type], check=True,
                             capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        size = certify.real_width_size(hf.shipped_config(model_type))
        return (f"| {model_type} | {size[0]} x {size[1]} x {size[2]}, {size[3]} | | | "
                f"not finished in {limit:.0f} s | | | |")
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr.strip().splitlines() or ["failed"])[-1]
        shape = re.search(r"dense (\d+) x (\d+) remainder", why)
        if shape:
            why = (f"the families not peeled leave a dense {int(shape[1]):,} x {int(shape[2]):,} "
                   f"remainder (over the {peel.MAX_REMAINDER_ENTRIES:,} entries ranked)")
        size = certify.real_width_size(hf.shipped_config(model_type))
        return (f"| {model_type} | {size[0]} x {size[1]} x {size[2]}, {size[3]} | | | "
                f"not reached: {why} | | | |")
    r = json.loads(out.stdout.splitlines()[-1])
    counted = "no count" if r["counted_symmetry"] is None else f"{r['counted_symmetry']:,}"
    return (f"| {model_type} | {r['layers']} x {r['heads']} x {r['head_dim']}, "
            f"{r['intermediate']} | {r['n_params']:,} | {r['tangents']:,} | "
            f"{r['tangent_rank']:,} | {counted} | {r['seconds']:.0f} s | "
            f"{r['peak_mb'] / 1024:.1f} GB |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=[m for m in hf.SHIPPED
                                                     if m in convert.CONVERTED])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a row may take")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.models[0])))
        return 0
    rows = {}
    if DOC.read_text().count(BEGIN):
        rows = {line.split(" ", 2)[1]: line for line in read_block(DOC, BEGIN, END).splitlines()[2:]}
    for m in args.models:
        rows[m] = cell(m, args.limit)
        print(rows[m], flush=True)
    order = [m for m in hf.SHIPPED if m in rows]
    if args.write:
        write_block(DOC, BEGIN, END, "\n".join([HEADER] + [rows[m] for m in order]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
