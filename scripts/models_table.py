"""The docs/models.md table of `count --validate` (certified) for every shipped family that
converts: shrunk parameters / counted / certified dimension, verified or not, the full-size count
and what is proved about it, and the time taken. `--write` rewrites the rows of the models given
(every converted shipped type by default) in place, keeping the others; `--limit S` writes a row
that takes over S seconds as unfinished; tests/models/test_hf.py recomputes the rows of QUICK
(all but the time column).

    PYTHONPATH=src .venv/bin/python scripts/models_table.py --write
    PYTHONPATH=src .venv/bin/python scripts/models_table.py --write --limit 600 falcon gpt_neox
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from neuromanifold.models import certify, convert, hf

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
BEGIN, END = "<!-- models_table: begin -->", "<!-- models_table: end -->"
QUICK = ("llama", "mistral", "qwen2", "gemma", "qwen3", "phi3")
HEADER = ("| family (shipped config) | shrunk native network (logits; bert: hidden state) | parameters | counted | "
          "registry | certified | verdict | independence over F_p (hidden: rank = counted) | "
          "full-size count (hidden state / logits) | time |\n|---|---|---|---|---|---|---|---|---|---|")


def _ladder(rows: list[dict]) -> str:
    return ", ".join(f"{r['hidden']}: {r['tangent_rank']}"
                     + ("" if r["independent"] else f" of {r['counted_symmetry']} (not shown)")
                     for r in rows)


def row(model_type: str, ladder=certify.QUICK_LADDER) -> tuple[str, str]:
    """(the row without its time cell, the time cell) of one shipped family."""
    cfg = hf.shipped_config(model_type)
    ladder = certify.FAMILY_LADDER.get(model_type, ladder)
    v = certify.validate(cfg)
    proved = (str(v["certified"]) + " certified" if v["status"] == "certified"
              else f"{v['lower_bound']} <= dim <= {v['upper_bound']} ({v['status']})")
    verdict = "`verified`" if v["verified"] else "not verified"
    ladder_cell, full = "no rules", "no rules"
    seconds = v["seconds"]
    if model_type not in hf.MODEL_TYPES:
        size = certify.full_size(cfg)
        hidden = certify.full_size(cfg, output="hidden")["count"]
        full = (f"{'not counted' if hidden is None else f'{hidden:,}'} / {size['count']:,} "
                "(registry)" if size["count"] is not None
                else "not counted (registry lacks the layernorm-bias families)")
        if size["count"] is not None:
            rows = certify.independence(cfg, ladder=ladder)
            seconds += sum(r["seconds"] for r in rows)
            ladder_cell = _ladder(rows)
        else:
            ladder_cell = "no count"
    else:
        rows = certify.independence(cfg, ladder=ladder)
        seconds += sum(r["seconds"] for r in rows)
        ladder_cell = _ladder(rows)
        spec = hf.read_config(cfg)
        tied = bool(cfg.get("tie_word_embeddings", model_type in ("gpt2", "gemma")))
        hidden = certify.rules_count(spec, "hidden", tied)["count"]
        logits = certify.rules_count(spec, "logits", tied)["count"]
        full = f"{hidden:,} / {logits:,}" if logits is not None else f"{hidden:,} / not counted"
    counted = ("not counted" if v["counted"] is None else str(v["counted"])
               + (" (registry)" if v["rules"].get("source") == "registry" else ""))
    source = hf.shipped_source(model_type).split(" ")[0]
    text = (f"| {model_type} ({source}) | `{v['architecture']}` | {v['n_params']} | {counted} | "
            f"{v['registry']['count']} | {proved} | {verdict} | {ladder_cell} | {full} |")
    return text, f" {seconds:.0f} s |"


def unfinished_row(model_type: str, limit: float) -> str:
    """The row of a family whose certificate did not finish in `limit` seconds: the shrunk
    network, its parameters, the registry's count and F_p upper bound (fast), no certificate."""
    from neuromanifold.dimension.ball_dual import block_upper_bound

    cfg = hf.shipped_config(model_type)
    small, _ = certify.shrunk_config(cfg, **certify.FAMILY_SHRINK.get(model_type, {}))
    arch = convert.from_config(small, certify.SHRINK["tokens"])
    upper, _families = block_upper_bound(arch, 0)
    counted = certify.registry_rules(arch)
    source = hf.shipped_source(model_type).split(" ")[0]
    return (f"| {model_type} ({source}) | `{arch}` | {arch.n_params} | "
            + ("not counted" if counted["count"] is None else f"{counted['count']} (registry)")
            + f" | {upper} | not finished: dim <= {upper} | not verified | no count | "
            + ("not counted (registry lacks the layernorm-bias families)"
               if counted["count"] is None and arch.norm_bias else "see `count`") + " | "
            f"> {limit:.0f} s (stopped) |")


def _timed_row(model_type: str, limit: float | None) -> str:
    """`row` of `model_type`, or `unfinished_row` when it takes more than `limit` seconds."""
    if limit is None:
        text, time_cell = row(model_type)
        return text + time_cell
    import multiprocessing

    with multiprocessing.Pool(1) as pool:
        job = pool.apply_async(row, (model_type,))
        try:
            text, time_cell = job.get(limit)
        except multiprocessing.TimeoutError:
            return unfinished_row(model_type, limit)
    return text + time_cell


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*",
                        default=[m for m in hf.SHIPPED if m in convert.CONVERTED])
    parser.add_argument("--write", action="store_true", help="rewrite the given models' rows of "
                        "the table in docs/models.md (the other rows are kept)")
    parser.add_argument("--limit", type=float, default=None, help="seconds a row may take; past "
                        "them the row says so (`unfinished_row`)")
    args = parser.parse_args(argv)
    new = {}
    for m in args.models:
        new[m] = _timed_row(m, args.limit)
        print(new[m], flush=True)
    doc = DOC.read_text()  # read after the rows, which may take minutes
    old = re.search(re.escape(BEGIN) + "\n(.*?)\n" + re.escape(END), doc, flags=re.S)
    rows = {line.split(" ", 2)[1]: line for line in (old.group(1).splitlines()[2:] if old else [])}
    rows.update(new)
    order = [m for m in hf.SHIPPED if m in rows] + [m for m in rows if m not in hf.SHIPPED]
    lines = [HEADER] + [rows[m] for m in order]
    if args.write:
        table = BEGIN + "\n" + "\n".join(lines) + "\n" + END
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: table, doc, flags=re.S)
        DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
