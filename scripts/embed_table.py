"""The computed tables of docs/decoder_features.md (issue 21, slice B: positions).

Run `PYTHONPATH=src python scripts/embed_table.py` to print the tables, or with `--write` to
replace the block between the markers of docs/decoder_features.md; tests/core/test_embed_features.py
recomputes them and compares with the page. Every number comes from the engines:
`neuromanifold_dim` (method auto: exact over F_p or balls where the bounds meet, else float64)
and float64 Jacobian ranks by autodiff of the one map (`core.blocks.block_forward`).
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import torch
from torch.func import jacrev

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import (ArrayArithmetic, block_forward, block_layout, flatten_blocks,
                                       random_block_weights, unflatten_blocks)
from neuromanifold.core.positions import base_angles
from neuromanifold.core.rank import numerical_rank
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.dimension.api import neuromanifold_dim

sys.path.insert(0, str(Path(__file__).resolve().parent))  # doc_blocks, run or loaded by path
from doc_blocks import read_block, write_block  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "decoder_features.md"
BEGIN, END = "<!-- embed_table: begin -->", "<!-- embed_table: end -->"
VOCAB_BEGIN, VOCAB_END = "<!-- embed_vocab_table: begin -->", "<!-- embed_vocab_table: end -->"
NORM_BEGIN, NORM_END = "<!-- embed_norm_table: begin -->", "<!-- embed_norm_table: end -->"

# (name, keyword arguments of Architecture), each computed with lightning and softmax attention.
POSITION_NETWORKS = [
    ("one layer, no positions", dict(widths=(4, 4), keys=4, tokens=3)),
    ("one layer, learned", dict(widths=(4, 4), keys=4, tokens=3, positions="learned")),
    ("one layer, rope (2 pairs)", dict(widths=(4, 4), keys=4, tokens=3, positions="rope")),
    ("one layer, rope (1 pair)", dict(widths=(4, 4), keys=4, tokens=3, positions="rope",
                                      rope_pairs=1)),
    ("two heads, rope", dict(widths=(3, 3), keys=3, tokens=3, heads=2, positions="rope")),
    ("two layers, rope", dict(widths=(3, 3, 3), keys=2, tokens=3, positions="rope")),
    ("mini GPT-NeoX (partial rope)", dict(widths=(4, 4, 4), keys=4, tokens=3, heads=2,
                                          residual=True, mlp=3, positions="rope",
                                          rope_pairs=1)),
    ("residual + MLP, no positions", dict(widths=(4, 4, 4), keys=2, tokens=3, residual=True,
                                          mlp=3)),
    ("residual + MLP, learned", dict(widths=(4, 4, 4), keys=2, tokens=3, residual=True, mlp=3,
                                     positions="learned")),
]

# Networks with a vocabulary (token-id inputs, logits), each with lightning and softmax.
VOCAB_NETWORKS = [
    ("V = 5, untied", dict(widths=(3, 3), keys=3, tokens=2, vocab=5)),
    ("V = 5, tied", dict(widths=(3, 3), keys=3, tokens=2, vocab=5, tied=True)),
    ("V = 5, residual, untied", dict(widths=(3, 3), keys=3, tokens=2, vocab=5, residual=True)),
    ("V = 5, residual, tied", dict(widths=(3, 3), keys=3, tokens=2, vocab=5, residual=True,
                                   tied=True)),
    ("V = 5, learned positions, tied", dict(widths=(3, 3), keys=3, tokens=2, vocab=5,
                                            positions="learned", tied=True)),
    ("two layers, V = 6, untied", dict(widths=(3, 3, 3), keys=2, tokens=2, vocab=6)),
    ("small V = 3 (V <= d_0 + 2)", dict(widths=(3, 3), keys=3, tokens=2, vocab=3)),
    ("V = 2, t = 1", dict(widths=(3, 3), keys=3, tokens=1, vocab=2)),
    ("mini GPT-NeoX-like (rope 1 pair, residual, MLP, untied)",
     dict(widths=(4, 4), keys=4, tokens=2, heads=2, residual=True, mlp=3, positions="rope",
          rope_pairs=1, vocab=6)),
    ("mini GPT-2-like (learned, residual, MLP, tied)",
     dict(widths=(4, 4), keys=2, tokens=2, heads=2, residual=True, mlp=3, positions="learned",
          vocab=6, tied=True)),
    ("rmsnorm, residual, untied, no final norm",
     dict(widths=(3, 3), keys=3, tokens=2, vocab=5, residual=True, norm="rmsnorm")),
]

# QK-norm, final norms and parallel blocks, each with lightning and softmax.
NORM_NETWORKS = [
    ("rmsnorm, no QK-norm", dict(widths=(4, 4), keys=4, tokens=2, norm="rmsnorm")),
    ("rmsnorm + QK-norm", dict(widths=(4, 4), keys=4, tokens=2, norm="rmsnorm", qk_norm=True)),
    ("rmsnorm + QK-norm + rope (1 pair)", dict(widths=(4, 4), keys=4, tokens=2, norm="rmsnorm",
                                               qk_norm=True, positions="rope", rope_pairs=1)),
    ("rmsnorm + final norm", dict(widths=(4, 4), keys=4, tokens=2, norm="rmsnorm",
                                  final_norm=True)),
    ("residual, rmsnorm, V = 5, tied", dict(widths=(3, 3), keys=3, tokens=2, norm="rmsnorm",
                                            residual=True, vocab=5, tied=True)),
    ("residual, rmsnorm, V = 5, tied + final norm",
     dict(widths=(3, 3), keys=3, tokens=2, norm="rmsnorm", residual=True, vocab=5, tied=True,
          final_norm=True)),
    ("residual, MLP, sequential", dict(widths=(4, 4), keys=4, tokens=2, residual=True, mlp=2)),
    ("residual, MLP, parallel", dict(widths=(4, 4), keys=4, tokens=2, residual=True, mlp=2,
                                     parallel=True)),
    ("mini Falcon-like (parallel, layernorm, rope, 2 heads)",
     dict(widths=(4, 4), keys=2, tokens=2, heads=2, residual=True, mlp=2, parallel=True,
          norm="layernorm", positions="rope")),
]

# Networks on which the float64 rank is compared under the rational angles and base 10000.
FREQUENCY_NETWORKS = [
    dict(widths=(4, 4), keys=4, tokens=3, positions="rope"),
    dict(widths=(6, 6), keys=6, tokens=4, positions="rope", rope_pairs=2),
    dict(widths=(3, 3, 3), keys=2, tokens=3, positions="rope"),
    dict(widths=(4, 4, 4), keys=4, tokens=3, heads=2, residual=True, mlp=3, positions="rope"),
]

# (Q, K) of one head: (a, d, R) for the measured symmetry count 2 a d - rank J_{Q,K}.
QK_CASES = [(4, 4, 0), (4, 4, 1), (4, 4, 2), (6, 6, 1), (6, 6, 3), (5, 6, 2), (3, 4, 1)]


def _dim(arch: Architecture):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method="certified")


def _families(result) -> str:
    return "; ".join(f"{k} {v}" for k, v in (result.symmetries or {}).items() if v) or "-"


def _rows(networks, sequences: bool) -> list[str]:
    """One table row per network and attention: parameters, (V^t,) dimension, status, families."""
    head = "| network | attention | parameters |" + (" V^t |" if sequences else "")
    lines = [head + " dimension | status | symmetry families (incremental rank) |",
             "|---|---|---|" + ("---|" if sequences else "") + "---|---|---|"]
    for name, kwargs in networks:
        for attention in ("lightning", "softmax"):
            arch = Architecture(attention=attention, **kwargs)
            r = _dim(arch)
            lines.append(f"| {name} | {attention} | {arch.n_params} |"
                         + (f" {arch.n_sequences} |" if sequences else "")
                         + f" {r.dimension} | {r.status} | {_families(r)} |")
    return lines


def positions_table() -> list[str]:
    """Parameters, dimension, status and symmetry families of each position network."""
    return _rows(POSITION_NETWORKS, False)


def norm_table() -> list[str]:
    """Parameters, dimension, status and families with QK-norm, final norms, parallel blocks."""
    return _rows(NORM_NETWORKS, False)


def vocab_table() -> list[str]:
    """Parameters, V^t, dimension, status and families of each network with a vocabulary."""
    return _rows(VOCAB_NETWORKS, True)


def float_rank(arch: Architecture, angles=None, seed: int = 0, columns=None) -> tuple[int, float]:
    """(rank, gap in decades) of the float64 Jacobian of W -> phi_W(X_1..X_N) at seeded W and X,
    rotary angles rational (None) or `angles`; optionally only the parameter `columns`."""
    ops = ArrayArithmetic(angles)
    params = flatten_blocks(arch, random_block_weights(arch, seed))
    n = math.ceil(2 * arch.n_params / (arch.widths[-1] * arch.tokens)) + 2
    gen = seeded_generator(seed, "inputs")
    X = torch.randn((n, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64)

    def f(w):
        return block_forward(arch, unflatten_blocks(arch, w), X, arithmetic=ops).reshape(-1)

    J = jacrev(f)(params)
    if columns is not None:
        J = J[:, columns]
    J = J / J.norm(dim=0, keepdim=True).clamp(min=1e-300)
    nr = numerical_rank(torch.linalg.svdvals(J), *J.shape)
    return nr.rank, nr.gap


def frequency_table() -> list[str]:
    """The float64 rank under the rational Pythagorean angles and under base-10000 angles."""
    lines = ["| network | parameters | rank, Pythagorean angles (gap) | rank, base 10000 (gap) |",
             "|---|---|---|---|"]
    for kwargs in FREQUENCY_NETWORKS:
        arch = Architecture(**kwargs)
        a = arch.keys[0]
        ours, gap = float_rank(arch)
        theirs, gap2 = float_rank(arch, base_angles(a))
        lines.append(f"| `{arch}` | {arch.n_params} | {ours} ({gap:.1f}) | {theirs} ({gap2:.1f}) |")
    return lines


def qk_table() -> list[str]:
    """Symmetry directions left in one head's (Q, K): 2 a d - rank of J on the Q, K columns."""
    lines = ["| a | d | rotated pairs R | measured 2 a d - rank of J on the Q, K columns | 2 R + (a - 2 R)^2 |",
             "|---|---|---|---|---|"]
    for a, d, pairs in QK_CASES:
        arch = Architecture((d, d), a, 3, positions="rope", rope_pairs=pairs)
        cols = [c for name, shape, offset in block_layout(arch) if name[0] in "QK"
                for c in range(offset, offset + shape[0] * shape[1])]
        rank, _ = float_rank(arch, columns=cols)
        lines.append(f"| {a} | {d} | {pairs} | {2 * a * d - rank} | {2 * pairs + (a - 2 * pairs) ** 2} |")
    return lines


def tables() -> str:
    """Every table of the page's block, as Markdown."""
    parts = ["**Dimensions with positions** (`neuromanifold_dim(arch, method='certified')`, "
             "seed 0: exact over F_p for lightning, ball arithmetic for softmax):", "",
             *positions_table(), "",
             "**The frequencies do not matter**: float64 Jacobian rank (seed 0) with the rational "
             "angles and with the usual base-10000 angles theta_f = 10000^(-2 (f - 1) / a):", "",
             *frequency_table(), "",
             "**What survives in (Q, K)** (one lightning head, t = 3, float64):", "", *qk_table()]
    return "\n".join(parts)


def vocab_tables() -> str:
    """The table of the embeddings section, as Markdown."""
    return "\n".join(["**Dimensions with token embeddings and logits** (`neuromanifold_dim(arch, "
                      "method='certified')`, seed 0):", "", *vocab_table()])


def norm_tables() -> str:
    """The table of the QK-norm, final norm and parallel section, as Markdown."""
    return "\n".join(["**Dimensions with QK-norm, final norms and parallel blocks** "
                      "(`neuromanifold_dim(arch, method='certified')`, seed 0):", "",
                      *norm_table()])


def write(text: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the block between the markers `begin` and `end` of the page."""
    write_block(PAGE, begin, end, text)


def page_block(begin: str = BEGIN, end: str = END) -> str:
    """The block between the markers as the page has it."""
    return read_block(PAGE, begin, end)


if __name__ == "__main__":
    out, vocab, norms = tables(), vocab_tables(), norm_tables()
    if "--write" in sys.argv[1:]:
        write(out)
        write(vocab, VOCAB_BEGIN, VOCAB_END)
        write(norms, NORM_BEGIN, NORM_END)
    print(out + "\n\n" + vocab + "\n\n" + norms)
