"""The pieces of `local.local_geometry`: the network's parts (layers, heads, MLPs, norms), the
float64 spectra it reads (a dense Jacobian or its Gram matrix), and the causes of degeneracy it
can name at given weights.

Math (docs/local_geometry.md). J is the row-scaled Jacobian of W -> (phi_W(X_n))_n at the
weights, Q = [Q1 Q2] an orthonormal basis with Q1 spanning the float symmetry tangents there
(`jacobians.KernelSplit`). The spectrum on the complement is that of J Q2 (dense route: its
singular values, float64 to round-off) or of Q2^T J^T J Q2 (Gram route, for Jacobians too big
to hold: its eigenvalues sigma_i^2, so that relative singular values below about
sqrt(eps max(m, P)) are not resolved and are reported as such). A part's rank is the numerical
rank of its own column block J[:, S] (the same rule), at the weights and at a seeded random
point of the same architecture: a family acting inside S only is in the kernel of J[:, S] at
both, so the part's rank is read modulo its own families without building them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from ..core.architecture import Architecture, block_layout
from ..core.blocks import ArrayArithmetic, block_forward, block_reverse_jacobian
from ..core.finite import require_finite
from ..core.rank import FLOAT64_EPS, NumericalRank, matrix_rank, numerical_rank
from .jacobians import KernelSplit

# A block whose largest |entry| is at most this times the largest |weight| is numerically zero.
ZERO_RELATIVE = 1e-12
# A softmax column is saturated when its largest weight exceeds 1 - SATURATION; a head is
# saturated when more than SATURATED_SHARE of its columns are.
SATURATION = 1e-12
SATURATED_SHARE = 0.5

_HEAD = ("Q", "K", "V", "W", "O", "bq", "bk", "bv", "qn", "kn")
_MLP = ("P", "U", "G", "bp", "bu", "bg")
_NORMS = {"g": "attention norm", "c": "attention norm", "n": "MLP norm", "cn": "MLP norm"}
_ENDS = {"E": ("embedding", "embedding"), "T": ("embedding", "embedding"),
         "Ty": ("embedding", "embedding"), "L": ("unembedding", "unembedding"),
         "ge": ("embedding norm", "norm"), "ce": ("embedding norm", "norm"),
         "f": ("final norm", "norm"), "cf": ("final norm", "norm")}


@dataclass(frozen=True)
class Part:
    """A part of the network: its name, kind and the parameter columns it owns."""

    name: str
    kind: str          # layer, head, mlp, norm, embedding or unembedding
    columns: tuple[int, ...]
    blocks: tuple[str, ...]


def network_parts(arch: Architecture) -> list[Part]:
    """Every layer, head, MLP, norm, embedding and unembedding of `arch`, with its columns
    (`block_layout` order). A layer holds every block of its index; a head its own Q, K, value
    and output blocks, biases and QK-norm gains (with grouped heads, the blocks stored under its
    index)."""
    groups: dict[tuple[str, str], list[tuple[str, range]]] = {}

    def put(name: str, kind: str, block: str, cols: range) -> None:
        groups.setdefault((name, kind), []).append((block, cols))

    for block, shape, offset in block_layout(arch):
        cols = range(offset, offset + shape[0] * shape[1])
        if block in _ENDS:
            put(*_ENDS[block], block, cols)
            continue
        m = re.fullmatch(r"([A-Za-z]+)_(\d+)(?:_(\d+))?", block)
        if m is None:                                   # pragma: no cover - layout names
            put(block, "other", block, cols)
            continue
        prefix, i, h = m.group(1), m.group(2), m.group(3)
        put(f"layer {i}", "layer", block, cols)
        if h is not None and prefix in _HEAD:
            put(f"layer {i} head {h}", "head", block, cols)
        elif prefix in _MLP:
            put(f"layer {i} mlp", "mlp", block, cols)
        elif prefix in _NORMS:
            put(f"layer {i} {_NORMS[prefix]}", "norm", block, cols)
        elif prefix in ("qn", "kn"):
            put(f"layer {i} QK-norm", "norm", block, cols)
    parts = []
    for (name, kind), members in groups.items():
        columns = tuple(c for _, cols in members for c in cols)
        parts.append(Part(name, kind, columns, tuple(b for b, _ in members)))
    return parts


# ---------------------------------------------------------------------------------------------
# Spectra

@dataclass
class Spectrum:
    """What the engine reads off one Jacobian: the complement's values (singular values, or
    Gram eigenvalues when `gram`), its numerical rank, the tangent split and the part ranks."""

    values: torch.Tensor       # sigma_i of J Q2 (dense) or sigma_i^2 (Gram), descending
    rank: NumericalRank
    gram: bool
    shape: tuple[int, int]     # (rows m, columns P) of J
    tangent_rank: int          # columns split off: the float rank of the tangents
    leak: float                # ||J Q1|| / ||J||
    part_ranks: dict[str, NumericalRank]
    dense: torch.Tensor | None = None   # the unscaled J (dense route only; for the proof)

    def route_text(self) -> str:
        if self.gram:
            return (f"Gram route (eigenvalues of Q2^T J^T J Q2, J {self.shape[0]} x {self.shape[1]}; "
                    f"gap read on sigma^2, relative sigma below {self.resolution():.0e} unresolved)")
        return f"dense route (singular values of J Q2, J {self.shape[0]} x {self.shape[1]})"

    def singular_values(self) -> torch.Tensor:
        if not self.gram:
            return self.values
        return self.values.clamp(min=0).sqrt()

    def resolution(self) -> float:
        """The smallest relative singular value this route resolves: the round-off floor
        eps max(m, P) of an SVD, or its square root for a Gram matrix (its eigenvalues carry
        eps max(m, P) lambda_1)."""
        floor = FLOAT64_EPS * max(self.shape)
        return math.sqrt(floor) if self.gram else floor

    def profile(self, tolerances) -> list[dict]:
        """[{tolerance, effective_dimension, resolved}]: #sigma_i > tol sigma_1 on the
        complement; None where tol is below the route's resolution."""
        sv = self.singular_values()
        top = float(sv[0]) if sv.numel() else 0.0
        out = []
        for tol in tolerances:
            resolved = tol >= self.resolution()
            k = int((sv > tol * top).sum()) if top > 0 else 0
            out.append({"tolerance": tol, "effective_dimension": k if resolved else None,
                        "resolved": resolved})
        return out


def sample_jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """J of W -> (phi_W(X_n))_n, rows ordered (n, d_l, t) as `jacobians.jacobian`: reverse
    mode per sample, vmapped over the samples (each vjp runs on one sample's small tensors, about
    twice as fast here as one vjp per row over the whole batch). Raises ComputationError when an
    entry overflows."""
    J = block_reverse_jacobian(arch, params, X, per_sample=True)
    require_finite(J, "the Jacobian entries", fix="Float64 cannot hold this network's values.")
    return J


def _outermost(parts: list[Part]) -> list[Part]:
    """The parts whose columns lie inside no other part's (the first of equal ones)."""
    sets = [set(p.columns) for p in parts]
    keep = []
    for i, p in enumerate(parts):
        inside = any(j != i and sets[i] <= sets[j] and (sets[i] != sets[j] or j < i)
                     for j in range(len(parts)))
        if not inside:
            keep.append(p)
    return keep


def _scaled_rows(J: torch.Tensor) -> torch.Tensor:
    return J / J.norm(dim=1, keepdim=True).clamp(min=torch.finfo(J.dtype).tiny)


# Column block of the symmetric Gram update: only the blocks on and below the diagonal are
# multiplied (half the flops of one G += S^T S), the upper ones are mirrored once at the end.
GRAM_BLOCK = 2048


def _add_gram(G: torch.Tensor, S: torch.Tensor) -> None:
    """G[j, i] += S[:, j]^T S[:, i] for the column blocks j >= i (the lower triangle)."""
    P = G.shape[0]
    for i in range(0, P, GRAM_BLOCK):
        right = S[:, i: i + GRAM_BLOCK]
        G[i:, i: i + GRAM_BLOCK].addmm_(S[:, i:].T, right)


def _mirror(G: torch.Tensor) -> None:
    """Copy the blocks below the diagonal blocks onto those above (the diagonal blocks are
    whole already): G symmetric again."""
    P = G.shape[0]
    for i in range(0, P, GRAM_BLOCK):
        G[i: i + GRAM_BLOCK, i + GRAM_BLOCK:] = G[i + GRAM_BLOCK:, i: i + GRAM_BLOCK].T


def _gram_rank(G: torch.Tensor, rows: int) -> NumericalRank:
    """The gap rule on the eigenvalues of a Gram matrix (its rank is the Jacobian's)."""
    if G.numel() == 0:
        return NumericalRank(0, math.inf, 0.0, 0.0, 0.0)
    return numerical_rank(torch.linalg.eigvalsh(G).flip(0), rows, G.shape[0])


def complement(split: KernelSplit, J: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(J Q2, leak): the Jacobian on the complement of the tangents (`KernelSplit.reduce`)."""
    return split.reduce(J)


def gram_complement(split: KernelSplit, G: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(Q2^T G Q2, sqrt(tr Q1^T G Q1 / tr G)) for G = J^T J."""
    if split.rank == 0:
        return G, 0.0
    A = torch.ormqr(split.householder, split.tau, G, left=True, transpose=True)
    B = torch.ormqr(split.householder, split.tau, A.T.contiguous(), left=True, transpose=True)
    del A
    r = split.rank
    leak = math.sqrt(max(float(B[:r, :r].diagonal().sum()), 0.0)
                     / max(float(G.diagonal().sum()), torch.finfo(G.dtype).tiny))
    return B[r:, r:].contiguous(), leak


def spectrum(arch: Architecture, params: torch.Tensor, X: torch.Tensor, split: KernelSplit | None,
             parts: list[Part], *, gram: bool, chunk: int, progress=None) -> Spectrum:
    """The complement spectrum (when `split` is given) and the part ranks of J at `params` on
    inputs X (N, d_0, t), dense or through the Gram matrix accumulated `chunk` samples at a time.
    Without a split only the part ranks are read (a generic point's)."""
    say = progress or (lambda _m: None)
    n_rows = X.shape[0] * arch.output_width * arch.tokens
    P = arch.n_params
    if not gram:
        J = sample_jacobian(arch, params, X)
        S = _scaled_rows(J)
        ranks = {p.name: matrix_rank(S[:, list(p.columns)]) for p in parts}
        if split is None:
            return Spectrum(torch.zeros(0), NumericalRank(0, 0.0, 0.0, 0.0, 0.0), False,
                            tuple(J.shape), 0, 0.0, ranks)
        R, leak = complement(split, S)
        sv = torch.linalg.svdvals(R) if R.numel() else torch.zeros(0, dtype=R.dtype)
        # the tangent count is the number of columns split off (a skipped split shows as 0)
        return Spectrum(sv, numerical_rank(sv, *S.shape), False, tuple(J.shape), P - R.shape[1],
                        leak, ranks, dense=J)
    # Gram route: the full P x P Gram at the point; otherwise only the diagonal blocks of the
    # parts inside no other part (a layer holds its heads, MLP and norms: theirs are its
    # sub-blocks, read off it), each accumulated in its lower triangle.
    G = torch.zeros((P, P), dtype=torch.float64) if split is not None else None
    index = {p.name: torch.tensor(p.columns) for p in parts}
    outer = _outermost(parts) if split is None else []
    blocks = {p.name: torch.zeros((len(p.columns),) * 2, dtype=torch.float64) for p in outer}
    for start in range(0, X.shape[0], chunk):
        S = _scaled_rows(sample_jacobian(arch, params, X[start: start + chunk]))
        if G is not None:
            _add_gram(G, S)
        else:
            for p in outer:
                _add_gram(blocks[p.name], S[:, index[p.name]])
        say(f"Gram matrix: samples {min(start + chunk, X.shape[0])}/{X.shape[0]}")
    if G is not None:
        _mirror(G)
        ranks = {p.name: _gram_rank(G[index[p.name]][:, index[p.name]], n_rows) for p in parts}
        C, leak = gram_complement(split, G)
        del G
        say(f"eigenvalues of the {C.shape[0]} x {C.shape[0]} complement Gram matrix ...")
        values = torch.linalg.eigvalsh(C).flip(0) if C.numel() else torch.zeros(0)
        return Spectrum(values, numerical_rank(values, n_rows, P), True, (n_rows, P),
                        P - C.shape[0], leak, ranks)
    ranks = {}
    for p in outer:
        _mirror(blocks[p.name])
    for p in parts:
        host = next(q for q in outer if set(p.columns) <= set(q.columns))
        if host is p:
            ranks[p.name] = _gram_rank(blocks[p.name], n_rows)
        else:
            position = {c: k for k, c in enumerate(host.columns)}
            at = torch.tensor([position[c] for c in p.columns])
            ranks[p.name] = _gram_rank(blocks[host.name][at][:, at], n_rows)
    return Spectrum(torch.zeros(0), NumericalRank(0, 0.0, 0.0, 0.0, 0.0), True, (n_rows, P), 0,
                    0.0, ranks)


# ---------------------------------------------------------------------------------------------
# Causes

class _Recording(ArrayArithmetic):
    """The float map's arithmetic, keeping every activation's input (the MLP pre-activations)."""

    def __init__(self):
        super().__init__()
        self.pre: list[torch.Tensor] = []

    def activate(self, x, kind: str):
        self.pre.append(x.detach())
        return super().activate(x, kind)


def _zero(t: torch.Tensor, scale: float) -> bool:
    return float(t.abs().max()) <= ZERO_RELATIVE * scale if t.numel() else True


def _same(a: torch.Tensor, b: torch.Tensor, scale: float) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= ZERO_RELATIVE * scale


def _head_blocks(arch: Architecture, blocks: dict, i: int, h: int) -> dict[str, torch.Tensor]:
    g = arch.group_of(i, h)
    out = {}
    for prefix in _HEAD:
        for j in (h, g):
            name = f"{prefix}_{i}_{j}"
            if name in blocks and prefix not in out:
                out[prefix] = blocks[name]
    return out


def detect_causes(arch: Architecture, blocks: dict[str, torch.Tensor],
                  inputs: list[tuple[str, torch.Tensor]]) -> dict[str, list[str]]:
    """{part name: [cause, ...]} at named float64 blocks: zero output or value maps, collapsed QK
    or OV products, duplicated heads, zero or tied gains, and on each input set (label, X) dead
    relu neurons and saturated softmax heads."""
    causes: dict[str, list[str]] = {}
    scale = max((float(t.abs().max()) for t in blocks.values() if t.numel()), default=0.0) or 1.0

    def add(part: str, text: str) -> None:
        causes.setdefault(part, []).append(text)

    for i in range(1, arch.n_layers + 1):
        heads = {h: _head_blocks(arch, blocks, i, h) for h in range(1, arch.head_counts[i - 1] + 1)}
        for h, own in heads.items():
            part = f"layer {i} head {h}"
            if "V" in own:
                if _zero(own["V"], scale):
                    add(part, f"output map V_{i}_{h} is numerically zero: its Q and K "
                        "directions leave")
                elif (r := matrix_rank(own["V"])).is_settled() and r.rank < min(own["V"].shape):
                    add(part, f"collapsed OV: rank V_{i}_{h} = {r.rank} < {min(own['V'].shape)}")
            else:
                O, W = own.get("O"), own.get("W")
                if O is not None and _zero(O, scale):
                    add(part, f"output map O_{i}_{h} is numerically zero: its Q, K and value "
                        "directions leave")
                elif W is not None and _zero(W, scale):
                    add(part, f"value map W_{i}_{h} is numerically zero: its Q and K directions "
                        "leave")
                elif O is not None and W is not None and O.shape[1] == W.shape[0]:
                    r, full = matrix_rank(O @ W), min(O.shape[1], O.shape[0], W.shape[1])
                    if r.is_settled() and r.rank < full:
                        add(part, f"collapsed OV: rank O W = {r.rank} < {full}")
            Q, K = own.get("Q"), own.get("K")
            if Q is not None and K is not None and Q.shape == K.shape:
                full = min(Q.shape)
                if _zero(Q, scale) or _zero(K, scale):
                    add(part, "query or key map numerically zero: uniform attention")
                elif (r := matrix_rank(Q.T @ K)).is_settled() and r.rank < full:
                    add(part, f"collapsed QK: rank Q^T K = {r.rank} < min(a, d) = {full}")
        names = sorted(heads)
        for x, h in enumerate(names):
            for h2 in names[x + 1:]:
                a, b = heads[h], heads[h2]
                if a.keys() == b.keys() and all(_same(a[k], b[k], scale) for k in a):
                    add(f"layer {i}", f"heads {h} and {h2} are identical")
                    add(f"layer {i} head {h}", f"duplicate of head {h2}")
                    add(f"layer {i} head {h2}", f"duplicate of head {h}")
    parts = {p.name: p for p in network_parts(arch)}
    for part in parts.values():
        if part.kind != "norm":
            continue
        for block in part.blocks:
            if block[0] == "c" or block.startswith(("cn", "cf", "ce")):
                continue                                  # norm biases
            g = blocks[block].reshape(-1)
            zero = [int(k) for k in torch.nonzero(g.abs() <= ZERO_RELATIVE * scale).flatten()]
            if zero:
                add(part.name, f"gain {block} is zero at coordinates {zero}: their readers' "
                    "directions leave")
                if part.name.endswith("attention norm"):
                    for h in range(1, arch.head_counts[int(block.split('_')[1]) - 1] + 1):
                        add(f"{part.name.rsplit(' ', 2)[0]} head {h}",
                            f"reads zero gain coordinates {zero} of {block}")
                elif part.name.endswith("MLP norm"):
                    add(f"{part.name.rsplit(' ', 2)[0]} mlp",
                        f"reads zero gain coordinates {zero} of {block}")
            values, counts = torch.unique(g, return_counts=True)
            if g.numel() > 1 and int(counts.max()) > 1 and not zero:
                add(part.name, f"gain {block} has tied entries ({g.numel() - values.numel()} "
                    "repeats)")
    for label, X in inputs:
        if X is None or not X.shape[0]:
            continue
        ops = _Recording()
        record: list = []
        with torch.no_grad():
            block_forward(arch, blocks, X, record=record, arithmetic=ops)
        if arch.activation == "relu" and ops.pre:
            mlps = [i for i in range(1, arch.n_layers + 1) if arch.mlp_widths[i - 1] > 0]
            for i, pre in zip(mlps, ops.pre):
                dead = [int(k) for k in torch.nonzero((pre <= 0).all(dim=-1).all(dim=0))]
                if dead:
                    add(f"layer {i} mlp", f"dead relu neurons {dead} on the {X.shape[0]} "
                        f"{label} inputs: their P, U (and bias) directions leave")
        at = 0
        for i in range(1, arch.n_layers + 1):
            for h in range(1, arch.head_counts[i - 1] + 1):
                if at < len(record):
                    S = record[at]
                    share = float((S.amax(dim=-2) > 1 - SATURATION).double().mean()) \
                        if S.numel() else 0.0
                    if share > SATURATED_SHARE:
                        add(f"layer {i} head {h}", f"saturated softmax on {share:.0%} of the "
                            f"{label} inputs' columns (max weight > 1 - {SATURATION:g})")
                at += 1
    return causes

