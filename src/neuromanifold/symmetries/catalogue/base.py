"""The shared pieces of the tangent constructions: the arithmetic (`TangentOps`, float or mod p) and
the lookups of blocks every feature reads (value maps, key/value groups, biases, readers and writers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...core.architecture import Architecture


@dataclass(frozen=True)
class TangentOps:
    """Arithmetic for tangents: float torch, or residues mod p."""

    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    add: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    neg: Callable[[torch.Tensor], torch.Tensor]
    inv: Callable[[torch.Tensor], torch.Tensor]
    times: Callable[[int, torch.Tensor], torch.Tensor]
    # A basis of the right kernel {n : M n = 0} as columns, or None when M is not of full rank
    # min(rows, cols) at this point (then the family is not used: its count would not be generic).
    kernel: Callable[[torch.Tensor], torch.Tensor | None]


def float_kernel(M: torch.Tensor) -> torch.Tensor | None:
    from ...core.rank import numerical_rank  # noqa: PLC0415

    _, sv, vh = torch.linalg.svd(M, full_matrices=True)
    nr = numerical_rank(sv, *M.shape)
    if nr.rank != min(M.shape) or nr.is_ambiguous():
        return None
    return vh[nr.rank:].T


FLOAT_OPS = TangentOps(mm=lambda A, B: A @ B, add=lambda A, B: A + B, neg=lambda x: -x,
                       inv=torch.linalg.inv, times=lambda c, x: c * x, kernel=float_kernel)


def value_names(blocks: dict, i: int, h: int) -> tuple[str, str]:
    """(input-side value block, output-side value block): (V, V) or (W, O)."""
    if f"V_{i}_{h}" in blocks:
        return f"V_{i}_{h}", f"V_{i}_{h}"
    return f"W_{i}_{h}", f"O_{i}_{h}"


def kv_groups(arch: Architecture, i: int) -> list[tuple[int, list[int]]]:
    """(g, the heads of group g) for layer i: the key/value groups (kv_heads), or one group per
    head (g = h) without them."""
    groups: dict[int, list[int]] = {}
    for h in range(1, arch.head_counts[i - 1] + 1):
        groups.setdefault(arch.group_of(i, h), []).append(h)
    return list(groups.items())


def bias_of(blocks: dict, name: str) -> list[str]:
    """[name] when the network has that bias block, else []."""
    return [name] if name in blocks else []


def score_maps(arch: Architecture, blocks: dict, i: int, g: int, heads: list[int]
                ) -> tuple[list[str], list[str]]:
    """(the Q side, the K side) of group g's scores in layer i, each map with its bias: the
    group's Q_g and its heads' K_h (kv_heads, transformers' grouping); one head's Q_h and K_h
    without kv_heads."""
    def named(kind: str, js: list[int]) -> list[str]:
        return [name for j in js for name in [f"{kind}_{i}_{j}"] + bias_of(blocks, f"b{kind.lower()}_{i}_{j}")]
    return named("Q", [g]), named("K", heads)


def consumers_of(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """Blocks reading the input of attention layer i through their columns."""
    if arch.kv_heads is not None:  # transformers' grouping: K_i_h per head, Q_i_g, V/W_i_g per group
        return ([f"K_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
                + [name for g, _ in kv_groups(arch, i)
                   for name in (f"Q_{i}_{g}", value_names(blocks, i, g)[0])])
    names = []
    for h in range(1, arch.head_counts[i - 1] + 1):
        names += [f"Q_{i}_{h}", f"K_{i}_{h}", value_names(blocks, i, h)[0]]
    return names


def sum_terms(terms: list[torch.Tensor], ops: TangentOps) -> torch.Tensor:
    """terms[0] + terms[1] + ... in the arithmetic of `ops`."""
    total = terms[0]
    for term in terms[1:]:
        total = ops.add(total, term)
    return total


def shift_route(blocks: dict, zero: dict, ops: TangentOps, source: str | None,
                 readers: list[str], back: str | None, put) -> None:
    """For each stream coordinate r, the tangent that writes e_r to every token through `source`
    (a bias b: entry r; the position table T: row r; the embedding E: column r, since E^T X
    gains e_r 1^T for one-hot X), moves each reader's bias by -R e_r, and takes e_r back through
    `back` (a later block written to every token: entry or row r by -1; "" where nothing takes
    it back, as without a residual). Nothing where the source, a reader's bias or a needed
    `back` (None) is missing."""
    reader_biases = [reader_bias(blocks, name) for name in readers]
    if source is None or back is None or any(b is None for b in reader_biases):
        return
    if back and back not in blocks:
        return
    for r in range(blocks[source].shape[1] if source == "E" else blocks[source].shape[0]):
        parts = {source: zero[source].clone()}
        if source == "E":
            parts[source][:, r] = 1
        else:
            parts[source][r] = 1
        if back:
            parts[back] = zero[back].clone()
            parts[back][r] = ops.neg(torch.ones_like(parts[back][r]))
        for name, rb in zip(readers, reader_biases):
            parts[rb] = ops.neg(blocks[name][:, r:r + 1].clone())
        put(parts)


def reader_bias(blocks: dict, name: str) -> str | None:
    """The bias added after reader `name` (Q_i_h -> bq_i_h, P_i -> bp_i, ...), None if absent."""
    kind, rest = name.split("_", 1)
    bias = {"Q": "bq", "K": "bk", "V": "bv", "W": "bv", "G": "bg", "P": "bp"}[kind] + "_" + rest
    return bias if bias in blocks else None


def mlp_readers(arch: Architecture, i: int) -> list[str]:
    """The blocks reading the MLP's input: P_i, and G_i before it when gated."""
    return [f"G_{i}", f"P_{i}"] if arch.mlp_kind == "gated" else [f"P_{i}"]


def head_writers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """The blocks attention i writes the stream with through their rows: each group's value
    output (V_g or O_g), the unfactored value biases bv_g (d_i x 1, mixed by the scores like
    V_g z) and the output bias bo_i; with kv_heads and value widths every head's O_h (bv_g is
    read through them)."""
    writers = ([f"O_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
               if arch.kv_heads is not None and arch.values is not None
               else [value_names(blocks, i, g)[1] for g, _ in kv_groups(arch, i)])
    if f"V_{i}_1" in blocks:
        writers += [name for g, _ in kv_groups(arch, i) for name in bias_of(blocks, f"bv_{i}_{g}")]
    return writers + bias_of(blocks, f"bo_{i}")


def layer_writers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """Every block layer i writes its output with through its rows: the heads' writers and,
    with an MLP, U_i and bu_i."""
    mlp = [f"U_{i}"] + bias_of(blocks, f"bu_{i}") if arch.mlp_widths[i - 1] > 0 else []
    return head_writers(arch, blocks, i) + mlp


def layer_stages(arch: Architecture, blocks: dict, i: int) -> list[tuple[list[str], list[str]]]:
    """(producers, readers) at each boundary after attention i: producers write the stream
    through their rows (their bias columns too: unfactored value biases, bo_i, bu_i), readers
    read it through their columns."""
    producers = head_writers(arch, blocks, i)
    stages = []
    if arch.mlp_widths[i - 1] > 0:
        stages.append((producers, mlp_readers(arch, i)))
        producers = [f"U_{i}"] + bias_of(blocks, f"bu_{i}")
    if i < arch.n_layers:
        stages.append((producers, consumers_of(arch, blocks, i + 1)))
    return stages


def stage_gain(blocks: dict, readers: list[str], i: int) -> torch.Tensor:
    """The norm gain in front of a boundary's readers: n_i before the MLP, else g_{i+1}."""
    return blocks[f"n_{i}" if f"P_{i}" in readers else f"g_{i + 1}"][:, 0]
