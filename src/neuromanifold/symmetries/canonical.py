"""One representative per orbit: a canonical form of named weight blocks (docs/canonical.md).

`canonical_form(arch, blocks)` moves a network's float64 blocks by an element of its symmetry
group to a representative fixed by stated rules, and returns the moved blocks with the moves
(`Move`: the registry's action and its group element) that took it there, so that another
weight set can be moved into this one's gauge (`apply_moves(..., inverse=True)`). Every move
is an action of `actions` (or, for the families `fiber` never searched, one written here beside
them), applied in this order; each step's rule depends only on quantities the earlier steps
fixed, so the whole is constant on an orbit of the families it quotients by:

 1 norm gains       pre-norm gains g_i, n_i (and the final gain f before untied logits) folded
                    into the maps that read them: gain 1, reader columns times the gain,
                    layernorm bias over the gain (`norm gain rescaling`, `gain and bias
                    rescaling`, `final norm gain`); then a layernorm bias into its readers'
                    biases where every reader has one (`layernorm bias into readers' biases`)
 1a bias-free       a layernorm bias beside readers without biases (`layernorm bias beside
                    bias-free readers`: Falcon's norms, the final norm before untied logits):
                    the bias set to 1 and every reader R to R P + (R c) 1^T / d
                    (P = I - 1 1^T / d: what it reads on 1's complement and its constant R c)
 1b input stream    BERT's E^T X + T + Ty^T Y: rows of E and Ty and columns of T centred
                    (`embedding norm means`), Ty's type mean moved into E (`token types beside
                    the embedding`), then E's vocabulary mean into T (`embedding shift into
                    positions`)
 1c post-norm       BERT: every norm bias with a next sub-layer moved into its readers' biases
                    and that sub-layer's output bias (`post-norm bias shifts`), every reader
                    row made orthogonal to 1/g (`post-norm readers' means`), every writer's
                    columns centred (`post-norm write means`)
 1d stream basis    behind RMSNorms, with every gain folded to 1 (`stream rotations behind
                    norms`): the principal axes of the embedding and untied logits
                    (E^T E + L^T L's eigenvectors, eigenvalues descending), each turned so
                    that its column of [E; L] V has its largest entry positive
 1e layernorm means every layernorm reader's rows centred (gain 1, bias 0 after step 1:
                    `layernorm means with reader biases`), every writer of a stream read only
                    through layernorms with its columns centred, an untied E with its rows
                    (`stream shifts behind layernorm`)
 1f stream basis    behind layernorms with biases (`stream rotations with norm biases`: G
                    orthogonal, G 1 = 1, each norm bias rotated too): the principal axes of
                    [E P; L P] on 1's complement sent to its Helmert basis, signs as in 1d
 2 biases           the softmax query bias (native bq: transformers' KEY bias) set to 0 where
                    it does not change the scores (`softmax query bias`, on the unrotated
                    coordinates under rotary positions); the value bias moved into the output
                    bias where there is one (`value bias beside output bias`); a parallel
                    block's MLP output bias moved into its attention output bias
                    (`parallel output bias trade`)
 3 QK gauge         per key/value group, [Q_g | bq_g] and the stacked [K_h | bk_h] in balanced
                    SVD form (`per-head GL(a)`): both S^1/2 times orthonormal rows, singular
                    values descending; under rotary positions only the commutant
                    (`rotary commutant`): each rotated pair balanced (equal Frobenius norms) and
                    turned so that its largest entry of Q (in modulus, as a complex row) is real
                    positive, the unrotated coordinates in balanced SVD form; a shared QK-norm
                    gain balanced against its partner per pair (`shared QK-norm gain balance`)
 4 OV gauge         per group, [W_g | bv_g] and the stacked O_h^T in balanced SVD form
                    (`per-head GL(v)`)
 5 heads, groups    heads within a group (all heads of a layer without key/value groups)
                    sorted by ||O_h W_g||_F descending (ties by ||K_h^T Q_g||_F), then groups
                    by their largest head key (`head permutation`,
                    `group permutation`)
 6 MLP neurons      rescaled (`MLP neuron rescaling`: gated, relu, square) so that the row
                    [P_j | bp_j] and the column U_j have equal norms (a relu or square gate
                    row [G_j | bg_j] of norm 1 first), then sorted by the product of the
                    norms of their rows and column descending (`MLP neuron permutation`)
Signs: each SVD row pair and each rescaled neuron is turned so that the entry of largest
magnitude of its Q (W, P) row is positive. A step that meets a degenerate case (a zero gain, a
rank-deficient head, a zero neuron) leaves that part as it is and says so in `notes`.

What is not quotiented (docs/canonical.md lists it per family): the families that exist only
for lightning attention or networks no converter reads, and none of the converted families'
(`not_quotiented(arch)` names them for a network, from the registry). A family whose proved
generic count is 0 for a network builds no tangent there and is not listed for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.architecture import Architecture
from . import actions
from .registry import families_for

# The registry's families this module fixes (their names in `registry.FAMILIES` or the catalogue).
QUOTIENTED = (
    "per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)", "per-head GL(v) on (W, O)",
    "norm gain rescaling", "gain and bias rescaling", "final norm gain", "final norm gain and bias",
    "layernorm bias into readers' biases", "softmax query bias",
    "softmax query bias on unrotated coordinates", "value bias beside output bias",
    "MLP neuron rescaling", "shared QK-norm gain balance", "stream rotations behind norms",
    "layernorm means with reader biases", "stream shifts behind layernorm",
    "embedding norm means", "token types beside the embedding", "embedding shift into positions",
    "parallel output bias trade", "layernorm bias beside bias-free readers",
    "post-norm bias shifts", "post-norm readers' means", "post-norm write means",
    "stream rotations with norm biases")
DISCRETE = ("head permutation", "group permutation", "MLP neuron permutation")


@dataclass
class Move:
    """One group element: `kind` (the action's name), its `layer` and parameters."""

    kind: str
    params: dict

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                     for k, v in self.params.items()}}


@dataclass
class CanonicalForm:
    """The canonical blocks, the moves that took the input there, and notes on what was left."""

    blocks: dict
    moves: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    quotiented: tuple = ()
    not_quotiented: tuple = ()
    discrete: tuple = ()


def _acting(arch: Architecture) -> list[str]:
    """The registry's families of `arch` that act at some layer (or on the whole network): not
    one whose proved generic count is 0 for `arch` (it builds no tangent there, its group is
    trivial: `layernorm bias beside bias-free readers` on a network whose every norm's readers
    have biases and whose logits are tied, GPT-2 and Falcon's new decoder)."""
    return [f.name for f in families_for(arch)
            if (f.at_layer is None or any(f.at_layer(arch, i) for i in range(1, arch.n_layers + 1)))
            and f.count(arch) != 0]


def discrete(arch: Architecture) -> tuple[str, ...]:
    """The discrete families `canonical_form` sorts for `arch` (of `DISCRETE`)."""
    return tuple(n for n, on in zip(DISCRETE, (
        any(h > 1 for h in arch.head_counts),
        arch.kv_heads is not None and any(g > 1 for g in arch.kv_counts),
        any(m > 0 for m in arch.mlp_widths))) if on)


def _quotients(arch: Architecture, name: str) -> bool:
    """Whether `canonical_form` has a rule for family `name` on `arch`: every family of
    QUOTIENTED, the stream rotations with norm biases only behind layernorms with a final
    norm before untied logits (the rule reads E and L on 1's complement), the post-norm
    readers' means only with norm biases (BERT's; the rule moves each reader's bias with it)."""
    if name == "stream rotations with norm biases":
        return arch.norm == "layernorm" and arch.final_norm and not arch.tied
    if name == "post-norm readers' means":
        return arch.norm_bias
    return name in QUOTIENTED


def not_quotiented(arch: Architecture) -> tuple[str, ...]:
    """The registry's families of `arch` that `canonical_form` does not fix."""
    return tuple(n for n in _acting(arch) if not _quotients(arch, n))


def quotiented(arch: Architecture) -> tuple[str, ...]:
    """The registry's families of `arch` that `canonical_form` fixes (DISCRETE besides)."""
    return tuple(n for n in _acting(arch) if _quotients(arch, n))


# ------------------------------------------------------------------ the moves and their inverses


def _pre_norm_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str | None, list, list]]:
    """(gain, bias or None, reader maps, their bias names) of every pre-norm gain."""
    sites = []
    for i in range(1, arch.n_layers + 1):
        H = arch.head_counts[i - 1]
        groups = sorted({arch.group_of(i, h) for h in range(1, H + 1)})
        heads = [(f"K_{i}_{h}", f"bk_{i}_{h}") for h in range(1, H + 1)]
        heads += [(f"Q_{i}_{g}", f"bq_{i}_{g}") for g in groups]
        heads += [(f"V_{i}_{g}" if f"V_{i}_{g}" in blocks else f"W_{i}_{g}", f"bv_{i}_{g}")
                  for g in groups]
        mlp = [(f"{n}_{i}", f"b{n.lower()}_{i}") for n in ("P", "G") if f"{n}_{i}" in blocks]
        if arch.shared_norm:
            sites.append((f"g_{i}", f"c_{i}", heads + mlp))
        else:
            sites.append((f"g_{i}", f"c_{i}", heads))
            if mlp:
                sites.append((f"n_{i}", f"cn_{i}", mlp))
    out = []
    for gain, bias, readers in sites:
        out.append((gain, bias if arch.norm_bias else None, [m for m, _ in readers],
                    [b for _, b in readers]))
    return out


def _fold_gain(blocks: dict, p: dict, inverse: bool) -> None:
    """g -> g / c (c = the folded gain; 1 where folded), readers' columns times c, the bias
    over c: the norm gain rescaling with the gain's own entries."""
    c = np.asarray(p["c"], dtype=float).reshape(-1, 1)
    c = 1 / c if inverse else c
    blocks[p["gain"]] = blocks[p["gain"]] / c
    if p.get("bias"):
        blocks[p["bias"]] = blocks[p["bias"]] / c
    for m in p["readers"]:
        blocks[m] = blocks[m] * c.T


def _bias_into_readers(blocks: dict, p: dict, inverse: bool) -> None:
    """c -> c - e, every reader's bias b -> b + M e (a layernorm bias moved into the readers)."""
    e = np.asarray(p["e"], dtype=float).reshape(-1, 1) * (-1 if inverse else 1)
    blocks[p["bias"]] = blocks[p["bias"]] - e
    for m, b in zip(p["readers"], p["reader_biases"]):
        blocks[b] = blocks[b] + blocks[m].dot(e)


def _fold_final(blocks: dict, p: dict, inverse: bool) -> None:
    c = np.asarray(p["c"], dtype=float)
    c = 1 / c if inverse else c
    blocks["f"] = blocks["f"] / c[:, None]
    if "cf" in blocks:
        blocks["cf"] = blocks["cf"] / c[:, None]
    blocks["L"] = blocks["L"] * c[None, :]


def _shared_qk_balance(blocks: dict, p: dict, inverse: bool) -> None:
    """qn_i -> c qn_i, kn_i -> kn_i / c per coordinate (one c per rotated pair)."""
    i, c = p["layer"], np.asarray(p["c"], dtype=float).reshape(-1, 1)
    c = 1 / c if inverse else c
    blocks[f"qn_{i}"] = blocks[f"qn_{i}"] * c
    blocks[f"kn_{i}"] = blocks[f"kn_{i}"] / c


def _stream_sites(arch: Architecture, blocks: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """The residual stream's writers (through their rows) and readers with the gain in front of
    each (the registry's `catalogue.stream.stream_blocks`), the logits L behind f untied."""
    from .catalogue.stream import stream_blocks  # noqa: PLC0415

    writers, readers = stream_blocks(arch, blocks)
    if not arch.tied and "L" in blocks:
        readers = readers + [("L", "f" if arch.final_norm else None)]
    return writers, readers


def rotate_stream(arch: Architecture, out: dict, move: dict) -> dict:
    """Stream rotations behind norms (rmsnorm(G Z) = G rmsnorm(Z), G orthogonal; layernorm too
    when G 1 = 1): every writer G times itself, E -> E G^T, every reader R behind a gain D ->
    R D G^T D^-1, and with norm biases each norm's bias c -> D G D^-1 c (the registry's
    families `stream rotations behind norms` and `stream rotations with norm biases`,
    `catalogue.stream.stream_rotation_tangents`, at a finite G)."""
    G = np.asarray(move["G"], dtype=float)
    writers, readers = _stream_sites(arch, out)
    for name in writers:
        out[name] = G.dot(out[name])
    out["E"] = out["E"].dot(G.T)
    for name, gain in readers:
        if gain is None:
            out[name] = out[name].dot(G.T)
        else:
            D = out[gain].reshape(-1)
            out[name] = (out[name] * D[None, :]).dot(G.T) / D[None, :]
    if arch.norm_bias:        # `stream rotations with norm biases`: each bias c -> D G D^-1 c
        for gain in dict.fromkeys(g for _, g in readers if g is not None):
            kind, sep, layer = gain.partition("_")
            bias = {"g": "c", "n": "cn", "f": "cf"}[kind] + sep + layer
            if bias in out:
                D = out[gain].reshape(-1, 1)
                out[bias] = D * G.dot(out[bias] / D)
    return out


def permute_groups(arch: Architecture, out: dict, move: dict) -> dict:
    """Group permutation (kv_heads): group g of the result is group perm[g] of the input, with
    its shared Q_g, bq_g, W_g (V_g), bv_g, qn_g and the per-head blocks of its heads in order."""
    i, perm, old = move["layer"], move["perm"], dict(out)
    heads = {g: actions.group_heads(arch, i, g) for g in range(1, len(perm) + 1)}
    for g, src in enumerate(perm, start=1):
        for name in ("Q", "W", "V", "bq", "bv", "qn"):
            if f"{name}_{i}_{src}" in old:
                out[f"{name}_{i}_{g}"] = old[f"{name}_{i}_{src}"]
        for h, s in zip(heads[g], heads[src]):
            for name in ("K", "O", "bk", "kn"):
                if f"{name}_{i}_{s}" in old:
                    out[f"{name}_{i}_{h}"] = old[f"{name}_{i}_{s}"]
    return out


def _add_constants(blocks: dict, p: dict, inverse: bool) -> None:
    """M -> M + x 1^T (`rows`: a constant per row) or M + 1 x^T (`cols`: a constant per column):
    the layernorm mean directions of readers, and the stream's shifts along 1 by writers."""
    sign = -1.0 if inverse else 1.0
    for name, x in p.get("rows", {}).items():
        blocks[name] = blocks[name] + sign * np.asarray(x, dtype=float)[:, None]
    for name, x in p.get("cols", {}).items():
        blocks[name] = blocks[name] + sign * np.asarray(x, dtype=float)[None, :]


def _trade_output_biases(blocks: dict, p: dict, inverse: bool) -> None:
    """Parallel output bias trade: bo_i -> bo_i + x, bu_i -> bu_i - x (layer i's attention and
    MLP write to the same output: only bo_i + bu_i reaches the stream)."""
    i, x = p["layer"], np.asarray(p["x"], dtype=float).reshape(-1, 1) * (-1 if inverse else 1)
    blocks[f"bo_{i}"] = blocks[f"bo_{i}"] + x
    blocks[f"bu_{i}"] = blocks[f"bu_{i}"] - x


def _bias_free_shift(blocks: dict, p: dict, inverse: bool) -> None:
    """A layernorm's bias beside readers without biases, at a finite element (the registry's
    family, `catalogue.norms.bias_free_mean_tangents`, "9''"): the readers see R (g * n + c) with
    1^T n = 0, so what they compute is R D on 1^⊥ (D = diag g) and the constant R c. With
    u = 1/g, c -> c' = c + delta and every reader R -> R (I - delta u^T / t), t = u^T c' != 0,
    keeps both: R' D n = R D n - R delta (1^T n) / t, R' c' = R c' - R delta = R c. The inverse
    is R (I + delta u^T / s), s = u^T c (Sherman-Morrison). A move made at s = 0 (c on the
    hyperplane u^T c = 0, where R -> R + x u^T is itself a symmetry; `degenerate` in the move)
    leaves the readers as they are on the way back, which undoes it exactly since R delta = 0
    there (`_fix_bias_free` sees to that); so does the inverse when s is exactly 0."""
    u = 1 / blocks[p["gain"]].reshape(-1)
    delta = np.asarray(p["delta"], dtype=float).reshape(-1)
    c = blocks[p["bias"]].reshape(-1)
    new = c - delta if inverse else c + delta
    t = float(u.dot(new))           # u^T c' forward, u^T c inverse
    blocks[p["bias"]] = new.reshape(-1, 1)
    if inverse and (p.get("degenerate") or t == 0.0):
        return
    for m in p["readers"]:
        step = np.outer(blocks[m].dot(delta), u) / t
        blocks[m] = blocks[m] + step if inverse else blocks[m] - step


def _bias_free_means(blocks: dict, p: dict, inverse: bool) -> None:
    """R -> R + x u^T (u = 1/g) for readers without biases of a layernorm whose bias has
    u^T c = 0: they read R (g * n + c) with 1^T n = 0, and x u^T (g * n + c) = x (1^T n + u^T c)
    = 0. A symmetry only there (`_fix_bias_free` uses it at that degenerate point alone)."""
    u = 1 / blocks[p["gain"]].reshape(-1)
    for m, x in p["x"].items():
        x = np.asarray(x, dtype=float).reshape(-1) * (-1 if inverse else 1)
        blocks[m] = blocks[m] + np.outer(x, u)


def _post_norm_shift(blocks: dict, p: dict, inverse: bool) -> None:
    """Post-norm bias shift (the registry's `post-norm bias shifts`, at a finite e): the norm's
    bias c -> c - e moves every reader's output by -R e, which b_R -> b_R + R e takes back, and
    the stream the next sub-layer's output is added to by -e, which that sub-layer's output
    bias (`back`) -> back + e takes back before the next norm."""
    e = np.asarray(p["e"], dtype=float).reshape(-1, 1) * (-1 if inverse else 1)
    blocks[p["bias"]] = blocks[p["bias"]] - e
    blocks[p["back"]] = blocks[p["back"]] + e
    for m, rb in zip(p["readers"], p["reader_biases"]):
        blocks[rb] = blocks[rb] + blocks[m].dot(e)


def _inverse_perm(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for pos, src in enumerate(perm, start=1):
        inv[src - 1] = pos
    return inv


def _act(arch: Architecture, blocks: dict, move: Move, inverse: bool) -> None:
    """Apply one move (or its inverse) to `blocks` in place."""
    p, kind = move.params, move.kind
    local = {"fold gain": _fold_gain, "bias into readers": _bias_into_readers,
             "add constants": _add_constants, "reader means": _reader_means,
             "fold final gain": _fold_final, "shared qk balance": _shared_qk_balance,
             "embedding means": _add_constants, "embedding shift": _add_constants,
             "token type shift": _add_constants, "output bias trade": _trade_output_biases,
             "bias-free readers": _bias_free_shift, "bias-free means": _bias_free_means,
             "post-norm bias shift": _post_norm_shift,
             "post-norm reader means": _reader_means, "post-norm write means": _add_constants}
    if kind in local:
        local[kind](blocks, p, inverse)
        return
    q = dict(p)
    if kind == "stream rotation":
        q["G"] = p["G"].T if inverse else p["G"]
        blocks.update(rotate_stream(arch, blocks, q))
        return
    if kind in ("key GL", "value GL"):
        q["G"] = np.linalg.inv(p["G"]) if inverse else p["G"]
        act = actions.key_gl if kind == "key GL" else actions.value_gl
    elif kind in ("head permutation", "group permutation", "neuron permutation"):
        q["perm"] = _inverse_perm(p["perm"]) if inverse else p["perm"]
        act = {"head permutation": actions.permute_heads, "group permutation": permute_groups,
               "neuron permutation": actions.permute_neurons}[kind]
    elif kind == "neuron rescaling":
        q["c"] = 1 / p["c"] if inverse else p["c"]
        if "cg" in p:
            q["cg"] = 1 / p["cg"] if inverse else p["cg"]
        act = actions.rescale_neurons
    elif kind == "query bias shift":
        q["e"] = -p["e"] if inverse else p["e"]
        act = actions.shift_query_bias
    elif kind == "value bias shift":
        q["e"] = -p["e"] if inverse else p["e"]
        act = actions.shift_value_bias
    else:  # pragma: no cover - every kind above
        raise KeyError(kind)
    blocks.update(act(arch, blocks, q))


def apply_moves(arch: Architecture, blocks: dict, moves: list[Move], *, inverse: bool = False
                ) -> dict:
    """The blocks moved by `moves` in order (inverse: their inverses in reverse order); a copy."""
    out = dict(blocks)
    for move in (reversed(moves) if inverse else moves):
        _act(arch, out, move, inverse)
    return out


# ------------------------------------------------------------------ the rules


def _sign_of_largest(row: np.ndarray) -> float:
    """+1 or -1: the sign that makes the entry of largest magnitude of `row` positive."""
    k = int(np.argmax(np.abs(row)))
    return -1.0 if row[k] < 0 else 1.0


def _balanced(Mq: np.ndarray, Mk: np.ndarray, tol: float = 1e-12):
    """G with G Mq and G^{-T} Mk in balanced SVD form (both S^1/2 times orthonormal rows,
    singular values descending, the largest entry of each row of G Mq positive), or None when
    Mq^T Mk has rank below Mq's rows (within tol of its largest singular value)."""
    a = Mq.shape[0]
    if a == 0:
        return None
    Qq, Rq = np.linalg.qr(Mq.T)       # Mq^T = Qq Rq (n1 x a, a x a)
    Qk, Rk = np.linalg.qr(Mk.T)
    X, S, Yt = np.linalg.svd(Rq.dot(Rk.T))
    if S[-1] <= tol * max(S[0], np.finfo(float).tiny):
        return None
    G = (np.sqrt(S)[:, None] * X.T).dot(np.linalg.inv(Rq.T))
    new_q = G.dot(Mq)
    signs = np.array([_sign_of_largest(r) for r in new_q])
    return signs[:, None] * G


def _group_heads(arch: Architecture, i: int) -> dict[int, list[int]]:
    return {g: actions.group_heads(arch, i, g) for g in range(1, arch.kv_counts[i - 1] + 1)}


def _with_bias(blocks: dict, m: str, b: str) -> np.ndarray:
    return np.hstack([blocks[m], blocks[b]]) if b in blocks else blocks[m]


def _add(form: CanonicalForm, arch: Architecture, kind: str, **params) -> None:
    move = Move(kind, params)
    _act(arch, form.blocks, move, inverse=False)
    form.moves.append(move)


def _fold_norms(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    b = form.blocks
    if arch.norm == "none" or arch.post_norm:
        return
    if "norm gain rescaling" in names or "gain and bias rescaling" in names:
        for gain, bias, readers, reader_biases in _pre_norm_sites(arch, b):
            c = b[gain].reshape(-1).copy()
            zero = c == 0
            if zero.any():
                form.notes.append(f"{gain}: {int(zero.sum())} zero gain entries left unfolded")
            c[zero] = 1.0
            _add(form, arch, "fold gain", gain=gain, bias=bias, readers=readers, c=c)
            if bias is not None and "layernorm bias into readers' biases" in names \
                    and all(rb in b for rb in reader_biases):
                _add(form, arch, "bias into readers", bias=bias, readers=readers,
                     reader_biases=reader_biases, e=b[bias].reshape(-1).copy())
    if names & {"final norm gain", "final norm gain and bias"} and "L" in b:
        c = b["f"].reshape(-1).copy()
        c[c == 0] = 1.0
        _add(form, arch, "fold final gain", c=c)


def _reader_mean_sites(arch: Architecture, blocks: dict) -> list[tuple]:
    """(gain, bias, readers, their biases) of every pre-norm layernorm with a bias whose readers
    all have a bias (`layernorm means with reader biases`)."""
    if "layernorm means with reader biases" not in set(quotiented(arch)):
        return []
    return [(gain, bias, readers, rbs) for gain, bias, readers, rbs in _pre_norm_sites(arch, blocks)
            if bias is not None and all(rb in blocks for rb in rbs)]


def _reader_means(blocks: dict, p: dict, inverse: bool) -> None:
    """Layernorm mean directions with reader biases: a reader sees R (g * n + c) + b_R with
    1^T n = 0, so R -> R + x (1/g)^T, b_R -> b_R - x (1/g)^T c leaves it unchanged."""
    sign = -1.0 if inverse else 1.0
    inv_g = 1 / blocks[p["gain"]].reshape(-1)
    shift = float(inv_g.dot(blocks[p["bias"]].reshape(-1)))
    for (name, x), rb in zip(p["x"].items(), p["reader_biases"]):
        x = sign * np.asarray(x, dtype=float)
        blocks[name] = blocks[name] + x[:, None] * inv_g[None, :]
        blocks[rb] = blocks[rb] - (x * shift)[:, None]


def _fix_means(arch: Architecture, form: CanonicalForm) -> None:
    """Layernorm mean directions: every reader of a layernorm (gain 1, bias 0 after step 1)
    with its rows centred (`layernorm means with reader biases`); every writer of a stream read
    only through layernorms with its columns centred, an untied E with its rows (`stream shifts
    behind layernorm`)."""
    if arch.norm != "layernorm" or arch.post_norm:
        return
    b = form.blocks
    for gain, bias, readers, rbs in _reader_mean_sites(arch, b):
        if np.any(b[gain] != 1.0) or np.any(b[bias] != 0.0):
            form.notes.append(f"{gain}: readers' means left (a gain not 1 or a bias not 0)")
            continue
        _add(form, arch, "reader means", gain=gain, bias=bias, reader_biases=rbs,
             x={name: -b[name].mean(axis=1) for name in readers})
    if "stream shifts behind layernorm" in set(quotiented(arch)):
        rows = {"E": -b["E"].mean(axis=1)} if not arch.tied else {}
        cols = {name: -b[name].mean(axis=0) for name in _stream_sites(arch, b)[0]}
        _add(form, arch, "add constants", rows=rows, cols=cols)


def _fix_embedding(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    """The input stream E^T X + T + Ty^T Y (BERT: read only through the embedding norm):
    every row of E and Ty and every column of T centred (`embedding norm means`: the layernorm
    drops a multiple of 1 in each token's input); then Ty's mean over the types moved into E
    (`token types beside the embedding`: every token has one type), then E's mean over the
    vocabulary into every column of T (`embedding shift into positions`: every token has one
    position). So E and Ty have mean 0 over their rows, and T carries the constant."""
    b = form.blocks
    if "embedding norm means" in names:
        rows = {n: -b[n].mean(axis=1) for n in ("E", "Ty") if n in b}
        cols = {"T": -b["T"].mean(axis=0)} if "T" in b else {}
        _add(form, arch, "embedding means", rows=rows, cols=cols)
    if "token types beside the embedding" in names:
        y = b["Ty"].mean(axis=0)
        _add(form, arch, "token type shift", cols={"E": y, "Ty": -y})
    if "embedding shift into positions" in names:
        x = b["E"].mean(axis=0)
        _add(form, arch, "embedding shift", cols={"E": -x}, rows={"T": x})


def _post_norm_sites(arch: Architecture, blocks: dict) -> list[tuple]:
    """(gain, bias or None, readers, back or None) of every norm of a post-norm network, the
    embedding norm first (the registry's `catalogue.norms.post_norm_sites`)."""
    if not arch.post_norm:
        return []
    from .catalogue.norms import post_norm_sites as sites  # noqa: PLC0415

    return sites(arch, blocks)


def _post_norm_biased(blocks: dict, bias: str | None, readers: list[str]) -> list[tuple]:
    """(reader, its bias) of the readers whose means the registry moves: those with a bias,
    every reader where the norm has none (then its bias is None)."""
    from .catalogue.base import reader_bias  # noqa: PLC0415

    pairs = [(m, reader_bias(blocks, m)) for m in readers]
    return [(m, rb) for m, rb in pairs if rb is not None or bias is None]


def _fix_post_norm(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    """Post-norm blocks (BERT), in three steps, each reading only what the earlier fixed:
    (a) every norm bias with a next sub-layer and readers that all have biases set to 0: c
    moved into the readers' biases (b_R + R c) and into that sub-layer's output bias (back + c)
    (`post-norm bias shifts`); (b) every reader R of a norm with gain g made orthogonal to
    u = 1/g row by row, R -> R - (R u) u^T / |u|^2, its bias taking back what that changes
    (b_R + (R u) (u^T c) / |u|^2, 0 where (a) set c to 0) (`post-norm readers' means`);
    (c) every writer of a layer (the heads' outputs O_h, bo_i, U_i, bu_i) with its columns
    centred (`post-norm write means`: the norm after it drops 1)."""
    b = form.blocks
    sites = _post_norm_sites(arch, b)
    if "post-norm bias shifts" in names:
        from .catalogue.base import reader_bias  # noqa: PLC0415

        for _, bias, readers, back in sites:
            rbs = [reader_bias(b, m) for m in readers]
            if bias is None or back is None or not readers or None in rbs:
                continue
            _add(form, arch, "post-norm bias shift", bias=bias, readers=list(readers),
                 reader_biases=rbs, back=back, e=b[bias].reshape(-1).copy())
    if "post-norm readers' means" in names:
        for gain, bias, readers, _ in sites:
            pairs = _post_norm_biased(b, bias, readers)
            if not pairs or bias is None:      # BERT's norms all have biases
                continue
            g = b[gain].reshape(-1)
            if np.any(g == 0):
                form.notes.append(f"{gain}: a zero gain entry; its readers' means left as they are")
                continue
            u = 1 / g
            _add(form, arch, "post-norm reader means", gain=gain, bias=bias,
                 reader_biases=[rb for _, rb in pairs],
                 x={m: -b[m].dot(u) / u.dot(u) for m, _ in pairs})
    if "post-norm write means" in names:
        from .catalogue.base import layer_writers  # noqa: PLC0415

        cols = {name: -b[name].mean(axis=0) for i in range(1, arch.n_layers + 1)
                for name in layer_writers(arch, b, i)}
        _add(form, arch, "post-norm write means", cols=cols)


def _bias_free_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str, list[str]]]:
    """(gain, bias, readers) of every layernorm with a reader without a bias (the registry's
    sites of `layernorm bias beside bias-free readers`: a pre-norm, or the final norm before
    untied logits)."""
    if "layernorm bias beside bias-free readers" not in set(quotiented(arch)):
        return []
    from .catalogue.norms import bias_free_sites as sites  # noqa: PLC0415

    return sites(arch, blocks)


def _fix_bias_free(arch: Architecture, form: CanonicalForm) -> None:
    """A layernorm's bias beside bias-free readers (gain 1 after step 1): the bias set to 1
    (all ones) and every reader R to R P + (R c) 1^T / d (P = I - 1 1^T / d), which keeps what
    it reads on 1^⊥ and its constant R c (`_bias_free_shift` with delta = 1 - c, t = d)."""
    b = form.blocks
    for gain, bias, readers in _bias_free_sites(arch, b):
        g, c = b[gain].reshape(-1), b[bias].reshape(-1)
        if np.any(g != 1.0):
            form.notes.append(f"{bias}: beside bias-free readers, left as it is (a gain not 1)")
            continue
        delta = 1.0 - c
        if abs(c.sum()) <= 1e-12 * np.sqrt(c.size) * max(np.linalg.norm(c), 1e-300):
            # u^T c = 0 (an untrained checkpoint's zero bias): R -> R + x u^T is a symmetry
            # here, and the move below would drop R delta. First R delta -> 0 by it (the rule
            # is unchanged: R P + (R c) 1^T / d reads the same), so every move undoes exactly.
            form.notes.append(f"{bias}: mean 0 beside bias-free readers (a degenerate point: "
                              "the readers' means are free there too)")
            _add(form, arch, "bias-free means", gain=gain, readers=list(readers),
                 x={m: -b[m].dot(delta) / delta.sum() for m in readers})
            _add(form, arch, "bias-free readers", gain=gain, bias=bias, readers=list(readers),
                 delta=delta, degenerate=True)
            continue
        _add(form, arch, "bias-free readers", gain=gain, bias=bias, readers=list(readers),
             delta=delta)


def _fix_stream(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    """The stream's basis behind RMSNorms (gains folded first): the principal axes of the
    embedding and the untied logits, E^T E + L^T L = V diag(l) V^T with l descending, G = V^T,
    each axis turned so that the entry of largest magnitude of its column of [E; L] V is
    positive."""
    b = form.blocks
    if "stream rotations behind norms" not in names or arch.norm != "rmsnorm":
        return
    writers, readers = _stream_sites(arch, b)
    gains = {g for _, g in readers if g is not None}
    if any(np.any(b[g] != 1.0) for g in gains):
        form.notes.append("stream basis left as it is: a norm gain is not 1 after folding")
        return
    ends = np.vstack([b["E"]] + ([b["L"]] if "L" in b and not arch.tied else []))
    l, V = np.linalg.eigh(ends.T.dot(ends))
    l, V = l[::-1], V[:, ::-1]
    if np.any(np.diff(l) >= -1e-10 * max(l[0], np.finfo(float).tiny)):
        form.notes.append("stream basis: repeated principal axes of [E; L] (ties within 1e-10); "
                          "their order and rotation are as the eigensolver left them")
    signs = np.array([_sign_of_largest(col) for col in ends.dot(V).T])
    _add(form, arch, "stream rotation", G=(V * signs[None, :]).T)


def _helmert(d: int) -> np.ndarray:
    """The Helmert basis of 1's complement in R^d (d x d-1, orthonormal columns): column k is
    (1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1)), k ones."""
    H = np.zeros((d, d - 1))
    for k in range(1, d):
        H[:k, k - 1] = 1.0
        H[k, k - 1] = -float(k)
        H[:, k - 1] /= np.sqrt(k * (k + 1.0))
    return H


def _fix_stream_biased(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    """The stream's basis behind layernorms with biases (`stream rotations with norm biases`:
    G orthogonal with G 1 = 1), every gain folded to 1 first: with P = I - 1 1^T / d, the
    principal axes V of (E P)^T E P + (L P)^T L P on 1's complement (eigenvalues descending,
    each axis turned so that the largest entry of its column of [E P; L P] V is positive) are
    sent to the Helmert basis H of that complement: G = 1 1^T / d + H V^T."""
    b = form.blocks
    if "stream rotations with norm biases" not in names:
        return
    _, readers = _stream_sites(arch, b)
    if any(np.any(b[g] != 1.0) for g in {g for _, g in readers if g is not None}):
        form.notes.append("stream basis left as it is: a norm gain is not 1 after folding")
        return
    d = b["E"].shape[1]
    H = _helmert(d)
    ends = np.vstack([b["E"], b["L"]]).dot(H)                # [E P; L P] in H's coordinates
    l, W = np.linalg.eigh(ends.T.dot(ends))
    l, W = l[::-1], W[:, ::-1]
    if np.any(np.diff(l) >= -1e-10 * max(l[0], np.finfo(float).tiny)):
        form.notes.append("stream basis: repeated principal axes of [E; L] on 1's complement "
                          "(ties within 1e-10); their order and rotation are as the eigensolver "
                          "left them")
    signs = np.array([_sign_of_largest(col) for col in ends.dot(W).T])
    V = H.dot(W * signs[None, :])
    _add(form, arch, "stream rotation", G=np.full((d, d), 1.0 / d) + H.dot(V.T))


def _fix_biases(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    b = form.blocks
    for i in range(1, arch.n_layers + 1):
        R = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
        for g in range(1, arch.kv_counts[i - 1] + 1):
            key = "group" if arch.kv_heads is not None else "head"
            bq = f"bq_{i}_{g}"
            if bq in b and ("softmax query bias" in names
                            or ("softmax query bias on unrotated coordinates" in names and R)):
                e = -b[bq].reshape(-1).copy()
                e[:2 * R] = 0.0
                _add(form, arch, "query bias shift", layer=i, **{key: g}, e=e)
            bv = f"bv_{i}_{g}"
            if bv in b and f"bo_{i}" in b and "value bias beside output bias" in names:
                _add(form, arch, "value bias shift", layer=i, **{key: g},
                     e=-b[bv].reshape(-1).copy())
        if "parallel output bias trade" in names and f"bo_{i}" in b and f"bu_{i}" in b:
            _add(form, arch, "output bias trade", layer=i, x=b[f"bu_{i}"].reshape(-1).copy())


def _rotary_G(Mq: np.ndarray, Mk: np.ndarray, R: int, form: CanonicalForm, where: str):
    """The rotary commutant element: per rotated pair s Rot(phi) (balanced, the largest entry of
    the pair's Q row turned real positive), the balanced SVD on the unrotated coordinates."""
    a = Mq.shape[0]
    G = np.eye(a)
    for f in range(R):
        rows = slice(2 * f, 2 * f + 2)
        nq, nk = np.linalg.norm(Mq[rows]), np.linalg.norm(Mk[rows])
        if nq == 0 or nk == 0:
            form.notes.append(f"{where}: rotated pair {f + 1} is zero; left as it is")
            continue
        s = np.sqrt(nk / nq)
        z = Mq[2 * f] + 1j * Mq[2 * f + 1]
        k = int(np.argmax(np.abs(z)))
        phi = -np.angle(z[k])
        x, y = s * np.cos(phi), s * np.sin(phi)
        G[rows, rows] = [[x, -y], [y, x]]
    if a > 2 * R:
        sub = _balanced(Mq[2 * R:], Mk[2 * R:])
        if sub is None:
            form.notes.append(f"{where}: the unrotated coordinates' QK form is rank-deficient; "
                              "left as they are")
        else:
            G[2 * R:, 2 * R:] = sub
    return G


def _fix_heads(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    b = form.blocks
    key = "group" if arch.kv_heads is not None else "head"
    for i in range(1, arch.n_layers + 1):
        R = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
        for g, heads in _group_heads(arch, i).items():
            where = f"layer {i} group {g}" if arch.kv_heads is not None else f"layer {i} head {g}"
            Mq = _with_bias(b, f"Q_{i}_{g}", f"bq_{i}_{g}")
            Mk = np.hstack([_with_bias(b, f"K_{i}_{h}", f"bk_{i}_{h}") for h in heads])
            G = None
            if R and "rotary commutant on (Q, K)" in names:
                G = _rotary_G(Mq, Mk, R, form, where)
            elif not R and "per-head GL(a) on (Q, K)" in names:
                G = _balanced(Mq, Mk)
                if G is None:
                    form.notes.append(f"{where}: rank-deficient QK form; its GL(a) left unfixed")
            if G is not None:
                _add(form, arch, "key GL", layer=i, **{key: g}, G=G)
            if "per-head GL(v) on (W, O)" in names and f"W_{i}_{g}" in b:
                Mw = _with_bias(b, f"W_{i}_{g}", f"bv_{i}_{g}")
                Mo = np.vstack([b[f"O_{i}_{h}"] for h in heads]).T
                G = _balanced(Mw, Mo)
                if G is None:
                    form.notes.append(f"{where}: rank-deficient OV form; its GL(v) left unfixed")
                else:
                    _add(form, arch, "value GL", layer=i, **{key: g}, G=G)
        if "shared QK-norm gain balance" in names:
            qn, kn = b[f"qn_{i}"].reshape(-1), b[f"kn_{i}"].reshape(-1)
            c = np.ones_like(qn)
            pairs = [(2 * f, 2 * f + 2) for f in range(R)] + [(j, j + 1) for j in range(2 * R, qn.size)]
            for lo, hi in pairs:
                nq, nk = np.linalg.norm(qn[lo:hi]), np.linalg.norm(kn[lo:hi])
                if nq > 0 and nk > 0:
                    c[lo:hi] = np.sqrt(nk / nq) * _sign_of_largest(qn[lo:hi])
            _add(form, arch, "shared qk balance", layer=i, c=c)


def _head_key(b: dict, i: int, h: int, g: int) -> tuple[float, float]:
    """(-||O_h W_g||_F^2, -||K_h^T Q_g||_F^2): heads sort by their OV, then QK, norms."""
    O, W = b[f"O_{i}_{h}"], b[f"W_{i}_{g}"]
    K, Q = b[f"K_{i}_{h}"], b[f"Q_{i}_{g}"]
    return (-float(np.trace(W.dot(W.T).dot(O.T.dot(O)))),
            -float(np.trace(Q.dot(Q.T).dot(K.dot(K.T)))))


def _sort_heads(arch: Architecture, form: CanonicalForm) -> None:
    b = form.blocks
    for i in range(1, arch.n_layers + 1):
        if f"W_{i}_1" not in b:
            continue
        groups = _group_heads(arch, i)

        def head_key(h: int, g: int, i: int = i) -> tuple[float, float]:
            return _head_key(b, i, h, g)

        perm = list(range(1, arch.head_counts[i - 1] + 1))
        if arch.kv_heads is None:     # every head its own group: all the layer's heads sort
            perm = sorted(perm, key=lambda h: head_key(h, h))
        for g, heads in (groups.items() if arch.kv_heads is not None else ()):
            order = sorted(heads, key=lambda h: head_key(h, g))
            for pos, h in zip(heads, order):
                perm[pos - 1] = h
        if perm != sorted(perm):
            _add(form, arch, "head permutation", layer=i, perm=perm)
        if arch.kv_heads is not None and len(groups) > 1:
            keys = {g: min(head_key(h, g) for h in heads) for g, heads in groups.items()}
            order = sorted(groups, key=lambda g: keys[g])
            if order != sorted(order):
                _add(form, arch, "group permutation", layer=i, perm=order)


def _norms(M: np.ndarray, axis: int) -> np.ndarray:
    return np.sqrt((M * M).sum(axis=axis))


def _fix_neurons(arch: Architecture, form: CanonicalForm, names: set[str]) -> None:
    b = form.blocks
    for i in range(1, arch.n_layers + 1):
        if arch.mlp_widths[i - 1] == 0:
            continue
        where = f"layer {i} MLP"
        gated = arch.mlp_kind == "gated"
        if "MLP neuron rescaling" in names:
            params = {}
            if gated and arch.activation in ("square", "relu"):
                gn = _norms(_with_bias(b, f"G_{i}", f"bg_{i}"), 1)
                cg = np.where(gn > 0, 1 / np.where(gn > 0, gn, 1), 1.0)
                if arch.activation == "square":
                    cg = cg * np.array([_sign_of_largest(r) for r in b[f"G_{i}"]])
                params["cg"] = cg
                _add(form, arch, "neuron rescaling", layer=i, c=np.ones_like(cg), cg=cg)
            pn = _norms(_with_bias(b, f"P_{i}", f"bp_{i}"), 1)
            un = _norms(b[f"U_{i}"], 0)
            ok = (pn > 0) & (un > 0)
            if not ok.all():
                form.notes.append(f"{where}: {int((~ok).sum())} zero neurons left unscaled")
            power = 2 if (not gated and arch.activation == "square") else 1
            ratio = np.where(ok, un / np.where(ok, pn, 1), 1.0)
            c = ratio ** (1 / (1 + power))
            if gated or arch.activation == "square":   # c < 0 is a symmetry there too
                c = c * np.array([_sign_of_largest(r) for r in b[f"P_{i}"]])
            _add(form, arch, "neuron rescaling", layer=i, c=c)
        key = _norms(_with_bias(b, f"P_{i}", f"bp_{i}"), 1) * _norms(b[f"U_{i}"], 0)
        if gated:
            key = key * _norms(_with_bias(b, f"G_{i}", f"bg_{i}"), 1)
        order = list(np.lexsort((b[f"U_{i}"][0], -key)) + 1)
        if order != sorted(order):
            _add(form, arch, "neuron permutation", layer=i, perm=[int(j) for j in order])


def canonical_form(arch: Architecture, blocks: dict, *, copy: bool = True,
                   after_step=None) -> CanonicalForm:
    """The canonical representative of `blocks` (numpy or torch float64 blocks of `arch`) under
    the families of `QUOTIENTED` and `DISCRETE` that apply to it (module docstring).

    copy=False makes `blocks` itself (float64 CPU arrays or tensors) the form's dict, its
    entries replaced as they move: no second copy of a large checkpoint's weights.
    `after_step()`, if given, is called after each step (models.canonical hands the memory of
    the replaced blocks back to the system there)."""
    def array(v):
        v = v.detach().cpu().numpy() if hasattr(v, "detach") else v
        return np.array(v, dtype=np.float64) if copy else np.asarray(v, dtype=np.float64)

    if copy:
        b = {k: array(v) for k, v in blocks.items()}
    else:
        b = blocks
        for k in list(b):
            b[k] = array(b[k])
    form = CanonicalForm(b, quotiented=quotiented(arch), not_quotiented=not_quotiented(arch),
                         discrete=discrete(arch))
    names = set(form.quotiented)
    steps = (lambda: _fold_norms(arch, form, names), lambda: _fix_bias_free(arch, form),
             lambda: _fix_embedding(arch, form, names), lambda: _fix_post_norm(arch, form, names),
             lambda: _fix_stream(arch, form, names), lambda: _fix_means(arch, form),
             lambda: _fix_stream_biased(arch, form, names), lambda: _fix_biases(arch, form, names),
             lambda: _fix_heads(arch, form, names), lambda: _sort_heads(arch, form),
             lambda: _fix_neurons(arch, form, names))
    for step in steps:
        step()
        if after_step is not None:
            after_step()
    return form


# ------------------------------------------------------------------ random elements (for checks)


def _random_commutant(rng: np.random.Generator, a: int, R: int) -> np.ndarray:
    G = np.zeros((a, a))
    for f in range(R):
        x, y = rng.normal(size=2)
        G[2 * f:2 * f + 2, 2 * f:2 * f + 2] = [[x, -y], [y, x]]
    if a > 2 * R:
        G[2 * R:, 2 * R:] = rng.normal(size=(a - 2 * R, a - 2 * R)) + 2 * np.eye(a - 2 * R)
    return G


def random_group_element(arch: Architecture, blocks: dict, seed: int = 0) -> list[Move]:
    """A random element of the group `canonical_form` quotients by for `arch`, as moves (every
    quotiented family and every discrete one that applies, each with random parameters)."""
    rng = np.random.default_rng(seed)
    names = set(quotiented(arch))
    b = {k: np.asarray(v.detach().cpu() if hasattr(v, "detach") else v) for k, v in blocks.items()}
    moves: list[Move] = []
    key = "group" if arch.kv_heads is not None else "head"

    def scales(n: int, signs: bool = True) -> np.ndarray:
        c = np.exp(rng.uniform(-0.7, 0.7, size=n))
        return c * rng.choice([-1.0, 1.0], size=n) if signs else c

    if arch.norm != "none" and not arch.post_norm and names & {"norm gain rescaling",
                                                              "gain and bias rescaling"}:
        for gain, bias, readers, reader_biases in _pre_norm_sites(arch, b):
            n = b[gain].size
            moves.append(Move("fold gain", dict(gain=gain, bias=bias, readers=readers,
                                                c=scales(n))))
            if bias is not None and "layernorm bias into readers' biases" in names \
                    and all(rb in b for rb in reader_biases):
                moves.append(Move("bias into readers", dict(bias=bias, readers=readers,
                                                            reader_biases=reader_biases,
                                                            e=rng.normal(size=n))))
    if names & {"final norm gain", "final norm gain and bias"} and "L" in b:
        moves.append(Move("fold final gain", dict(c=scales(b["f"].size))))
    if arch.norm == "layernorm" and not arch.post_norm:
        for gain, bias, readers, rbs in _reader_mean_sites(arch, b):
            moves.append(Move("reader means", dict(gain=gain, bias=bias, reader_biases=rbs, x={
                name: rng.normal(size=b[name].shape[0]) for name in readers})))
        if "stream shifts behind layernorm" in names:
            cols = {name: rng.normal(size=b[name].shape[1]) for name in _stream_sites(arch, b)[0]}
            rows = {} if arch.tied else {"E": rng.normal(size=b["E"].shape[0])}
            moves.append(Move("add constants", dict(rows=rows, cols=cols)))
    if names & {"embedding norm means", "token types beside the embedding",
                 "embedding shift into positions"}:
        if "embedding norm means" in names:
            moves.append(Move("embedding means", dict(
                rows={n: rng.normal(size=b[n].shape[0]) for n in ("E", "Ty") if n in b},
                cols={"T": rng.normal(size=b["T"].shape[1])} if "T" in b else {})))
        if "token types beside the embedding" in names:
            y = rng.normal(size=b["E"].shape[1])
            moves.append(Move("token type shift", dict(cols={"E": y, "Ty": -y})))
        if "embedding shift into positions" in names:
            x = rng.normal(size=b["E"].shape[1])
            moves.append(Move("embedding shift", dict(cols={"E": x}, rows={"T": -x})))
    if arch.post_norm:
        from .catalogue.base import layer_writers, reader_bias  # noqa: PLC0415

        for gain, bias, readers, back in _post_norm_sites(arch, b):
            rbs = [reader_bias(b, m) for m in readers]
            if ("post-norm bias shifts" in names and bias is not None and back is not None
                    and readers and None not in rbs):
                moves.append(Move("post-norm bias shift", dict(
                    bias=bias, readers=list(readers), reader_biases=rbs, back=back,
                    e=rng.normal(size=b[bias].size))))
            pairs = _post_norm_biased(b, bias, readers)
            if "post-norm readers' means" in names and pairs and bias is not None:
                moves.append(Move("post-norm reader means", dict(
                    gain=gain, bias=bias, reader_biases=[rb for _, rb in pairs],
                    x={m: rng.normal(size=b[m].shape[0]) for m, _ in pairs})))
        if "post-norm write means" in names:
            moves.append(Move("post-norm write means", dict(cols={
                name: rng.normal(size=b[name].shape[1]) for i in range(1, arch.n_layers + 1)
                for name in layer_writers(arch, b, i)})))
    if "parallel output bias trade" in names:
        moves += [Move("output bias trade", dict(layer=i, x=rng.normal(size=b[f"bo_{i}"].size)))
                  for i in range(1, arch.n_layers + 1) if f"bo_{i}" in b and f"bu_{i}" in b]
    free = []
    for gain, bias, readers in _bias_free_sites(arch, b):   # first: on the blocks as given
        u, c = 1 / b[gain].reshape(-1), b[bias].reshape(-1)
        for _ in range(100):       # t = u^T (c + delta) well away from 0 (R / t stays tame)
            delta = rng.normal(size=c.size)
            if abs(u.dot(c + delta)) > 0.5 * np.linalg.norm(u):
                break
        free.append(Move("bias-free readers", dict(gain=gain, bias=bias, readers=list(readers),
                                                   delta=delta)))
    moves[:0] = free
    if "stream rotations with norm biases" in names:    # G orthogonal, G 1 = 1
        d = b["E"].shape[1]
        H = _helmert(d)
        Q, _ = np.linalg.qr(rng.normal(size=(d - 1, d - 1)))
        moves.insert(0, Move("stream rotation", dict(G=np.full((d, d), 1.0 / d) + H.dot(Q).dot(H.T))))
    if "stream rotations behind norms" in names and arch.norm == "rmsnorm":
        G, _ = np.linalg.qr(rng.normal(size=(b["E"].shape[1],) * 2))
        moves.insert(0, Move("stream rotation", dict(G=G)))
    for i in range(1, arch.n_layers + 1):
        R = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
        groups = _group_heads(arch, i)
        for g in groups:
            a, where = b[f"Q_{i}_{g}"].shape[0], {"layer": i, key: g}
            if f"bq_{i}_{g}" in b and ("softmax query bias" in names or
                                       ("softmax query bias on unrotated coordinates" in names and R)):
                e = rng.normal(size=a)
                e[:2 * R] = 0
                moves.append(Move("query bias shift", dict(where, e=e)))
            if f"bv_{i}_{g}" in b and f"bo_{i}" in b and "value bias beside output bias" in names:
                moves.append(Move("value bias shift", dict(where, e=rng.normal(size=b[f"bv_{i}_{g}"].size))))
            if R and "rotary commutant on (Q, K)" in names:
                moves.append(Move("key GL", dict(where, G=_random_commutant(rng, a, R))))
            elif not R and "per-head GL(a) on (Q, K)" in names:
                moves.append(Move("key GL", dict(where, G=_random_commutant(rng, a, 0))))
            if "per-head GL(v) on (W, O)" in names and f"W_{i}_{g}" in b:
                v = b[f"W_{i}_{g}"].shape[0]
                moves.append(Move("value GL", dict(where, G=_random_commutant(rng, v, 0))))
        if "shared QK-norm gain balance" in names:
            n = b[f"qn_{i}"].size
            c = scales(n)
            c[1:2 * R:2] = c[0:2 * R:2]
            moves.append(Move("shared qk balance", dict(layer=i, c=c)))
        if f"W_{i}_1" in b:
            perm = list(range(1, arch.head_counts[i - 1] + 1))
            for heads in (groups.values() if arch.kv_heads is not None else [perm[:]]):
                for pos, h in zip(heads, rng.permutation(heads)):
                    perm[pos - 1] = int(h)
            moves.append(Move("head permutation", dict(layer=i, perm=perm)))
            if arch.kv_heads is not None and len(groups) > 1:
                moves.append(Move("group permutation",
                                  dict(layer=i, perm=[int(g) for g in rng.permutation(list(groups)) ])))
        m = arch.mlp_widths[i - 1]
        if m:
            gated = arch.mlp_kind == "gated"
            if "MLP neuron rescaling" in names:
                params = dict(layer=i, c=scales(m, signs=gated or arch.activation == "square"))
                if gated and arch.activation in ("square", "relu"):
                    params["cg"] = scales(m, signs=arch.activation == "square")
                moves.append(Move("neuron rescaling", params))
            moves.append(Move("neuron permutation",
                              dict(layer=i, perm=[int(j) + 1 for j in rng.permutation(m)])))
    return moves


# ------------------------------------------------------------------ alignment (for merging)


def _procrustes(target: np.ndarray, source: np.ndarray, R: int) -> np.ndarray:
    """The orthogonal G (a rotation on each of the first R coordinate pairs, any orthogonal
    block on the rest, nothing across) minimising ||G source - target||_F."""
    a = target.shape[0]
    G = np.eye(a)
    for f in range(R):
        M = target[2 * f:2 * f + 2].dot(source[2 * f:2 * f + 2].T)
        theta = np.arctan2(M[1, 0] - M[0, 1], M[0, 0] + M[1, 1])
        c, s = np.cos(theta), np.sin(theta)
        G[2 * f:2 * f + 2, 2 * f:2 * f + 2] = [[c, -s], [s, c]]
    if a > 2 * R:
        U, _, Vt = np.linalg.svd(target[2 * R:].dot(source[2 * R:].T))
        G[2 * R:, 2 * R:] = U.dot(Vt)
    return G


def _cost(target: dict, source: dict, names_t: list[str], names_s: list[str]) -> float:
    return float(sum(((target[n] - source[m]) ** 2).sum()
                     for n, m in zip(names_t, names_s) if n in target and m in source))


def align_moves(arch: Architecture, target: dict, source: dict) -> list[Move]:
    """Moves of the group left on canonical forms (permutations, and the orthogonal part of the
    QK and OV gauges that keeps a balanced form balanced) bringing the canonical blocks
    `source` close to the canonical blocks `target`: groups, heads within groups and MLP
    neurons matched by linear assignment on squared distances (scipy's
    linear_sum_assignment), then per group an orthogonal Procrustes fit of QK and of OV
    (rotations per rotated pair under rotary positions). Exact for source = g target; for
    two unrelated networks a heuristic (one pass, not a global optimum)."""
    from scipy.optimize import linear_sum_assignment  # noqa: PLC0415

    b = {k: np.array(v, dtype=float) for k, v in source.items()}
    t = target
    moves: list[Move] = []
    names = set(quotiented(arch))
    key = "group" if arch.kv_heads is not None else "head"

    def add(kind: str, **params) -> None:
        move = Move(kind, params)
        _act(arch, b, move, inverse=False)
        moves.append(move)

    for i in range(1, arch.n_layers + 1):
        R = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
        groups = _group_heads(arch, i)
        if f"W_{i}_1" in t:
            shared = ("Q", "W", "V", "bq", "bv", "qn")
            per_head = ("K", "O", "bk", "kn")
            if arch.kv_heads is not None and len(groups) > 1:
                gs = list(groups)
                cost = np.array([[_cost(t, b, [f"{n}_{i}_{g}" for n in shared],
                                        [f"{n}_{i}_{s}" for n in shared])
                                  + sum(_cost(t, b, [f"{n}_{i}_{h}" for n in per_head],
                                              [f"{n}_{i}_{k}" for n in per_head])
                                        for h, k in zip(groups[g], groups[s]))
                                  for s in gs] for g in gs])
                _, cols = linear_sum_assignment(cost)
                perm = [gs[c] for c in cols]
                if perm != gs:
                    add("group permutation", layer=i, perm=perm)
            perm = list(range(1, arch.head_counts[i - 1] + 1))
            for heads in (groups.values() if arch.kv_heads is not None else [perm[:]]):
                names_of = per_head if arch.kv_heads is not None else shared + per_head
                cost = np.array([[_cost(t, b, [f"{n}_{i}_{h}" for n in names_of],
                                        [f"{n}_{i}_{k}" for n in names_of]) for k in heads]
                                 for h in heads])
                _, cols = linear_sum_assignment(cost)
                for pos, c in zip(heads, cols):
                    perm[pos - 1] = heads[c]
            if perm != sorted(perm):
                add("head permutation", layer=i, perm=perm)
        for g, heads in groups.items():
            where = {"layer": i, key: g}
            if (R and "rotary commutant on (Q, K)" in names) or \
                    (not R and "per-head GL(a) on (Q, K)" in names):
                X_t = np.hstack([_with_bias(t, f"Q_{i}_{g}", f"bq_{i}_{g}")] +
                                [_with_bias(t, f"K_{i}_{h}", f"bk_{i}_{h}") for h in heads])
                X_s = np.hstack([_with_bias(b, f"Q_{i}_{g}", f"bq_{i}_{g}")] +
                                [_with_bias(b, f"K_{i}_{h}", f"bk_{i}_{h}") for h in heads])
                add("key GL", **where, G=_procrustes(X_t, X_s, R))
            if "per-head GL(v) on (W, O)" in names and f"W_{i}_{g}" in t:
                X_t = np.hstack([_with_bias(t, f"W_{i}_{g}", f"bv_{i}_{g}")] +
                                [t[f"O_{i}_{h}"].T for h in heads])
                X_s = np.hstack([_with_bias(b, f"W_{i}_{g}", f"bv_{i}_{g}")] +
                                [b[f"O_{i}_{h}"].T for h in heads])
                add("value GL", **where, G=_procrustes(X_t, X_s, 0))
        if arch.mlp_widths[i - 1]:
            def rows(blocks: dict, i: int = i) -> np.ndarray:
                parts = [blocks[f"U_{i}"].T] + [blocks[n] for n in (f"P_{i}", f"G_{i}", f"bp_{i}",
                                                                     f"bg_{i}") if n in blocks]
                return np.hstack(parts)
            A, B = rows(t), rows(b)
            cost = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A.dot(B.T)
            _, cols = linear_sum_assignment(cost)
            perm = [int(c) + 1 for c in cols]
            if perm != sorted(perm):
                add("neuron permutation", layer=i, perm=perm)
    return moves
