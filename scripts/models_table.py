"""The docs/models.md table of `count --validate` (certified) for every shipped family that
converts: shrunk parameters / counted / certified dimension, verified or not, the full-size count
and what is proved about it, and the time taken. `--write` rewrites the table in place;
tests/models/test_hf.py recomputes the rows of QUICK (all but the time column).

    PYTHONPATH=src .venv/bin/python scripts/models_table.py --write
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from neuromanifold.models import certify, convert, hf

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
BEGIN, END = "<!-- models_table: begin -->", "<!-- models_table: end -->"
QUICK = ("llama", "mistral", "qwen2", "gemma")
HEADER = ("| family (shipped config) | shrunk native network (logits) | parameters | counted | "
          "registry | certified | verdict | independence over F_p (hidden: rank = counted) | "
          "full-size count (hidden state / logits) | time |\n|---|---|---|---|---|---|---|---|---|---|")


def row(model_type: str, ladder=certify.QUICK_LADDER) -> tuple[str, str]:
    """(the row without its time cell, the time cell) of one shipped family."""
    cfg = hf.shipped_config(model_type)
    v = certify.validate(cfg)
    proved = (str(v["certified"]) + " certified" if v["status"] == "certified"
              else f"{v['lower_bound']} <= dim <= {v['upper_bound']} ({v['status']})")
    verdict = "`verified`" if v["verified"] else "not verified"
    ladder_cell, full = "no rules", "no rules"
    seconds = v["seconds"]
    if model_type in hf.MODEL_TYPES:
        rows = certify.independence(cfg, ladder=ladder)
        seconds += sum(r["seconds"] for r in rows)
        ladder_cell = ", ".join(f"{r['hidden']}: {r['tangent_rank']}"
                                + ("" if r["independent"] else
                                   f" of {r['counted_symmetry']} (not shown)")
                                for r in rows)
        spec = hf.read_config(cfg)
        tied = bool(cfg.get("tie_word_embeddings", model_type in ("gpt2", "gemma")))
        hidden = certify.rules_count(spec, "hidden", tied)["count"]
        logits = certify.rules_count(spec, "logits", tied)["count"]
        full = f"{hidden:,} / {logits:,}" if logits is not None else f"{hidden:,} / not counted"
    counted = "no rules" if v["counted"] is None else str(v["counted"])
    source = hf.shipped_source(model_type).split(" ")[0]
    text = (f"| {model_type} ({source}) | `{v['architecture']}` | {v['n_params']} | {counted} | "
            f"{v['registry']['count']} | {proved} | {verdict} | {ladder_cell} | {full} |")
    return text, f" {seconds:.0f} s |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*",
                        default=[m for m in hf.SHIPPED if m in convert.CONVERTED])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/models.md")
    args = parser.parse_args(argv)
    lines = [HEADER]
    for m in args.models:
        text, time_cell = row(m)
        print(text + time_cell, flush=True)
        lines.append(text + time_cell)
    if args.write:
        doc = DOC.read_text()
        table = BEGIN + "\n" + "\n".join(lines) + "\n" + END
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: table, doc, flags=re.S)
        DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
