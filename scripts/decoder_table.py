#!/usr/bin/env python3
"""The table of docs/decoder_features.md: each decoder option alone and combined, lightning and
softmax: parameters, dimension, status and the symmetry families (incremental ranks).

Usage: PYTHONPATH=src .venv/bin/python scripts/decoder_table.py      (prints the Markdown tables)
       PYTHONPATH=src .venv/bin/python scripts/decoder_table.py --write [MARKER ...]
           (writes the tables between their markers in docs/decoder_features.md, e.g.
            `--write grouping_table gqa_table`; every table without a marker named)

Four tables: every option alone and combined (`table`), the causal mask against none on the
paper's networks (`causal_table`), the cost of grouping key/value heads (`grouping_table`), and
the mini models with the features of both halves of the issue (`table(model_rows())`).

Every value is computed (`neuromanifold_dim`, method `certified`: the exact rank over F_p for
polynomial networks, ball arithmetic for the others, each against the registry's upper bound);
tests/core/test_decoder_features.py recomputes the rows and compares them with the page.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

from neuromanifold.core.architecture import Architecture
from neuromanifold.dimension.api import neuromanifold_dim

# (row name, Architecture keyword options); widths, keys and tokens in the options too.
ROWS: tuple[tuple[str, dict], ...] = (
    ("one layer", dict(widths=(3, 3), keys=2, tokens=3)),
    ("one layer, causal", dict(widths=(3, 3), keys=2, tokens=3, causal=True)),
    ("two layers", dict(widths=(3, 3, 3), keys=2, tokens=3)),
    ("two layers, causal", dict(widths=(3, 3, 3), keys=2, tokens=3, causal=True)),
    ("4 heads", dict(widths=(3, 3), keys=2, tokens=3, heads=4)),
    ("4 heads, 2 key/value groups", dict(widths=(3, 3), keys=2, tokens=3, heads=4, kv_heads=2)),
    ("2 heads", dict(widths=(3, 3), keys=2, tokens=3, heads=2)),
    ("4 heads, 1 key/value head", dict(widths=(3, 3), keys=2, tokens=3, heads=4, kv_heads=1)),
    ("one layer, bias", dict(widths=(3, 3), keys=2, tokens=3, bias=True)),
    ("two layers, bias", dict(widths=(3, 3, 3), keys=2, tokens=3, bias=True)),
    ("MLP", dict(widths=(3, 3), keys=2, tokens=3, mlp=3)),
    ("MLP, mlp_bias", dict(widths=(3, 3), keys=2, tokens=3, mlp=3, mlp_bias=True)),
    ("gated MLP", dict(widths=(3, 3), keys=2, tokens=3, mlp=3, mlp_kind="gated")),
    ("gated MLP, mlp_bias", dict(widths=(3, 3), keys=2, tokens=3, mlp=3, mlp_kind="gated",
                                 mlp_bias=True)),
    ("mini Llama (decoder half)", dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1,
                                       causal=True, residual=True, mlp=3, mlp_kind="gated")),
    ("mini GPT-2 (decoder half)", dict(widths=(4, 4), keys=2, tokens=3, heads=2, causal=True,
                                       bias=True, residual=True, mlp=3, mlp_bias=True)),
    ("mini Falcon (decoder half)", dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1,
                                        causal=True, residual=True, mlp=3)),
)
# The MLP activation of each attention: square keeps lightning networks polynomial (exact over
# F_p); softmax rows use the activation of the models they mimic (silu: SwiGLU, gelu: GPT-2).
ACTIVATION = {"lightning": "square", "softmax": "silu"}
GPT2_ACTIVATION = {"lightning": "square", "softmax": "gelu"}


def architecture(name: str, options: dict, attention: str) -> Architecture:
    """The row's network with `attention` (and its activation where it has an MLP)."""
    options = dict(options)
    if "mlp" in options:
        options["activation"] = (GPT2_ACTIVATION if "GPT-2" in name else ACTIVATION)[attention]
    return Architecture(attention=attention, **options)


def measure(arch: Architecture) -> dict:
    """n_params, dimension, status and the non-zero families of one network."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = neuromanifold_dim(arch, method="certified", seed=0)
    families = {k: v for k, v in (r.symmetries or {}).items() if v}
    return {"params": arch.n_params, "dim": r.dimension, "status": r.status,
            "upper": r.upper_bound, "families": families}


def rows() -> list[tuple[str, str, dict]]:
    """(row name, attention, measurement) for every row, lightning then softmax."""
    return [(name, attention, measure(architecture(name, options, attention)))
            for name, options in ROWS for attention in ("lightning", "softmax")]


def _families(families: dict) -> str:
    return "; ".join(f"{k} {v}" for k, v in families.items())


def table(measured: list[tuple[str, str, dict]]) -> str:
    """The Markdown table of `measured`."""
    lines = ["| network | attention | params | dimension | status | upper bound | families (incremental rank) |",
             "|---|---|---|---|---|---|---|"]
    for name, attention, m in measured:
        lines.append(f"| {name} | {attention} | {m['params']} | {m['dim']} | {m['status']} | "
                     f"{m['upper']} | {_families(m['families'])} |")
    return "\n".join(lines)


# The paper's networks (one head and two), with and without the causal mask.
CAUSAL_NETWORKS: tuple[tuple[tuple[int, ...], int, int], ...] = (
    ((3, 3), 1, 2), ((3, 3), 2, 3), ((4, 4), 2, 2), ((4, 2), 3, 3), ((5, 3), 2, 4),
    ((3, 3, 3), 2, 2), ((4, 3, 2), 2, 3), ((2, 2, 2), 1, 3), ((3, 3, 3, 3), 2, 2))


def causal_rows() -> list[tuple[str, list[tuple[dict, dict]]]]:
    """For each network and attention: (label, [(without mask, with mask) for 1 and 2 heads])."""
    out = []
    for widths, keys, tokens in CAUSAL_NETWORKS:
        for attention in ("lightning", "softmax"):
            pairs = [tuple(measure(Architecture(widths, keys, tokens, attention, heads=heads,
                                                causal=causal)) for causal in (False, True))
                     for heads in (1, 2)]
            out.append((f"widths {','.join(map(str, widths))}, keys {keys}, t = {tokens}, "
                        f"{attention}", pairs))
    return out


def causal_table(measured) -> str:
    lines = ["| network | 1 head: no mask | 1 head: causal | 2 heads: no mask | 2 heads: causal |",
             "|---|---|---|---|---|"]
    for label, pairs in measured:
        cells = [f"{m['dim']} ({m['status']})" for pair in pairs for m in pair]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# H = 4 query heads sharing G = 4, 2, 1 key/value heads.
GROUPING_NETWORKS: tuple[tuple[tuple[int, ...], int, int], ...] = (
    ((3, 3), 2, 3), ((4, 4), 2, 3), ((4, 4), 4, 3), ((3, 3, 3), 2, 3))


def grouping_rows() -> list[tuple[str, int, dict, dict]]:
    """(network, G, lightning measurement, softmax measurement) for G = 4, 2, 1 (H = 4)."""
    return [(f"widths {','.join(map(str, widths))}, keys {keys}, t = {tokens}", groups,
             *(measure(Architecture(widths, keys, tokens, attention, heads=4, kv_heads=groups))
               for attention in ("lightning", "softmax")))
            for widths, keys, tokens in GROUPING_NETWORKS for groups in (4, 2, 1)]


def grouping_table(measured) -> str:
    lines = ["| network (H = 4 heads) | key/value heads G | params | lightning | softmax |",
             "|---|---|---|---|---|"]
    for label, groups, light, soft in measured:
        lines.append(f"| {label} | {groups} | {light['params']} | {light['dim']} ({light['status']}) "
                     f"| {soft['dim']} ({soft['status']}) |")
    return "\n".join(lines)


# The models the issue names, with both halves of the features (positions, groups, biases, gated
# MLPs, embeddings and logits), no norms (so that lightning rows stay polynomial): width 4,
# keys 2 (one rotated pair; 4 for the partial-rotary NeoX row), 2 heads, t = 3, vocabulary 8
# (above d + 2: not a small vocabulary), and the Falcon row again with 16 token ids.
MODEL_ROWS: tuple[tuple[str, dict], ...] = (
    # Grouped rows (kv_heads, transformers' grouping: the group shares the paper's Q and W, each
    # head keeps its K and O; docs/decoder_features.md#grouped-keyvalue-heads), with value widths.
    ("mini Llama: causal, rope, 1 key/value head, gated MLP, residual, untied logits",
     dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, values=2, causal=True,
          positions="rope", residual=True, mlp=3, mlp_kind="gated", vocab=8)),
    ("mini GPT-2: causal, learned positions, biases, MLP biases, residual, tied logits",
     dict(widths=(4, 4), keys=2, tokens=3, heads=2, causal=True, positions="learned", bias=True,
          residual=True, mlp=3, mlp_bias=True, vocab=8, tied=True)),
    ("mini GPT-NeoX: causal, partial rope (1 of 2 pairs), parallel, biases, untied logits",
     dict(widths=(4, 4), keys=4, tokens=3, heads=2, causal=True, positions="rope", rope_pairs=1,
          parallel=True, residual=True, mlp=3, bias=True, mlp_bias=True, vocab=8)),
    ("mini Falcon: causal, rope, 1 key/value head, parallel, untied logits",
     dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, values=2, causal=True,
          positions="rope", parallel=True, residual=True, mlp=3, vocab=8)),
    # The same with 16 token ids: the finite-vocabulary gap of its parallel MLP closes
    # (docs/decoder_features.md#combined-features).
    ("mini Falcon, 16 token ids",
     dict(widths=(4, 4), keys=2, tokens=3, heads=2, kv_heads=1, values=2, causal=True,
          positions="rope", parallel=True, residual=True, mlp=3, vocab=16)),
)


# Grouped key/value heads with value widths (transformers' layout): 2 heads sharing 1 key/value
# group, value width 2, keys 2, t = 3; the Llama shape adds causal rotary positions, rmsnorm, a
# gated silu MLP of 3, a vocabulary of 6 and a final norm (softmax only: rmsnorm is not
# polynomial either way).
GQA = dict(heads=2, kv_heads=1, values=2, keys=2, tokens=3)
LLAMA_SHAPE = dict(GQA, attention="softmax", residual=True, norm="rmsnorm", mlp=3,
                   mlp_kind="gated", activation="silu", positions="rope", causal=True, vocab=6,
                   final_norm=True)
GQA_ROWS: tuple[tuple[str, tuple[str, ...], dict], ...] = (
    ("widths 3,3", ("lightning", "softmax"), dict(GQA, widths=(3, 3))),
    ("widths 3,3, biases", ("lightning", "softmax"), dict(GQA, widths=(3, 3), bias=True)),
    ("widths 3,3, rotary", ("lightning", "softmax"), dict(GQA, widths=(3, 3), positions="rope")),
    ("widths 3,3,3, residual", ("lightning", "softmax"), dict(GQA, widths=(3, 3, 3), residual=True)),
    ("widths 3,3, vocab 5", ("lightning",), dict(GQA, widths=(3, 3), vocab=5)),
    ("Llama-shaped: widths 4,4, causal, rotary, rmsnorm, gated silu MLP 3, vocab 6, final norm",
     ("softmax",), dict(LLAMA_SHAPE, widths=(4, 4))),
    ("Qwen2-shaped: the same with q/k/v biases, no $b_o$, rope base $10^4$", ("softmax",),
     dict(LLAMA_SHAPE, widths=(4, 4), bias=True, out_bias=False, rope_base=1e4)),
    ("the Llama shape, widths 4,4,4, tied logits", ("softmax",),
     dict(LLAMA_SHAPE, widths=(4, 4, 4), tied=True)),
)


def gqa_rows() -> list[tuple[str, int, dict]]:
    """(network, params, {attention: measurement}) of every grouped row with value widths."""
    out = []
    for label, attentions, options in GQA_ROWS:
        measured = {a: measure(Architecture(**{**options, "attention": a})) for a in attentions}
        out.append((label, next(iter(measured.values()))["params"], measured))
    return out


def gqa_table(measured) -> str:
    lines = ["| network | params | lightning | softmax |", "|---|---|---|---|"]
    for label, params, by_attention in measured:
        cells = [f"{m['dim']} ({m['status']})" if (m := by_attention.get(a)) else ""
                 for a in ("lightning", "softmax")]
        lines.append(f"| {label} | {params} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def model_rows() -> list[tuple[str, str, dict]]:
    """(row name, attention, measurement) of every model row, lightning then softmax (gelu MLPs
    for the GPT rows, silu for the others)."""
    return [(name, attention, measure(architecture(name.replace("GPT-NeoX", "GPT-2 NeoX"),
                                                   options, attention)))  # gelu: as GPT-2
            for name, options in MODEL_ROWS for attention in ("lightning", "softmax")]


TABLES = {"decoder_table": lambda: table(rows()),
          "causal_table": lambda: causal_table(causal_rows()),
          "grouping_table": lambda: grouping_table(grouping_rows()),
          "models_table": lambda: table(model_rows()),
          "gqa_table": lambda: gqa_table(gqa_rows())}
PAGE = Path(__file__).resolve().parents[1] / "docs" / "decoder_features.md"


def write(markers: list[str]) -> None:
    """Recompute the tables `markers` (all without any) and write each between its markers."""
    text = PAGE.read_text(encoding="utf-8")
    for marker in markers or list(TABLES):
        block = TABLES[marker]()
        text = re.sub(rf"(<!-- {marker} -->\n).*?(\n<!-- /{marker} -->)",
                      lambda m, b=block: m.group(1) + b + m.group(2), text, flags=re.S)
    PAGE.write_text(text, encoding="utf-8")


if __name__ == "__main__" and "--write" in sys.argv:
    write(sys.argv[sys.argv.index("--write") + 1:])
elif __name__ == "__main__":
    print(table(model_rows()))
    print()
    print(table(rows()))
    print()
    print(causal_table(causal_rows()))
    print()
    print(grouping_table(grouping_rows()))
    print()
    print(gqa_table(gqa_rows()))
