"""The local geometry of a block network at given weights (issue 34): a bracket on the Jacobian
rank there, its spectrum on the complement of the symmetry tangents, the families whose rank
drops, the excess degeneracy over the generic dimension and its attribution to layers, heads,
MLPs and norms, and the same spectrum on the user's own inputs.

Math (docs/local_geometry.md). W are the weights, J = dPhi(W) on N sampled inputs, T the
registry's tangents at W (all in ker dPhi(W)):
  upper   n_params - rank_p T(W) (`point_upper_bound`), T built at the exact dyadic values of
          W reduced mod p (`ball_dual.catalogue_bound`): rank_p <= rank over Q, so it is
          proven; and rank dPhi(W) <= the generic rank (its maximum over W) <= the registry's
          bound at a random point, or the certified generic dimension: `upper_bound` is the
          least of these;
  lower   a non-zero ball determinant of an r x r block of J (`ball.prove_rank`), where the size
          allows: rank J_N(W) <= rank dPhi(W);
  float   the gap rule on the singular values of J Q2 (Q2 an orthonormal complement of the float
          tangents at W), and always the effective dimensions #sigma_i > tol sigma_1;
  families  each family's incremental rank over F_p at W against a random point: a drop is a
          larger stabilizer (a rank-deficient head, a zero gain);
  parts   the rank of each part's own column block J[:, S] at W and at a random point
          (`local_parts`), with the causes detected.
Status (`local_status`, `rank_at_point`'s rule): `certified` (lower == upper), `settled`
(numerical: a clear gap with the float rank equal to the proven upper bound), `ambiguous`
otherwise, with the bracket `lower <= rank <= upper`; `rank` is None unless settled or
certified (a float rank that only meets the proven lower bound is not settled).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..core.architecture import Architecture, block_layout, check_architecture
from ..core.blocks import FINITE, block_forward, check_block_weights, flatten_blocks, random_block_weights
from ..core.checks import bad_value, check_choice, check_int, check_seed
from ..core.display import Tabulated, architecture_text
from ..core.finite import largest_entry, require_finite
from ..core.rank import MIN_GAP_DECADES
from ..core.seeds import seeded_generator
from ..core.tokens import input_stream, symbol_inputs
from ..errors import ComputationError
from ..symmetries.catalogue import FLOAT_OPS
from ..symmetries.registry import tangent_rows
from .ball import DEFAULT_PRECISION, ROW_FACTOR, prove_rank, to_dyadic, to_residues
from .fp import DEFAULT_PRIME
from .jacobians import KernelSplit
from .local_parts import detect_causes, network_parts, spectrum
from .memory import BASE_BYTES, MemoryEstimate, check_memory
from .result import Progress
from .verdict import MAX_KERNEL_IMAGE_CERTIFIED

LOCAL_METHODS = ("auto", "numerical", "certified")
# `auto` proves the lower bound up to this many parameters (`api.ESCALATE_MAX_PARAMS`'s measure:
# past it the ball proof takes far longer than the numerical answer).
PROOF_MAX_PARAMS = 2048
# The generic dimension is computed (`neuromanifold_dim`, auto) up to this many parameters; past
# it the registry count at a random point (a proven upper bound) stands in, so labelled.
GENERIC_MAX_PARAMS = 2000
# Past this many parameters the families' ranks over F_p come from the peeling (`peel`), not from
# one dense tangent matrix ranked prefix by prefix (its cost grows as the cube of the size).
FAMILY_DENSE_MAX_PARAMS = 4000
# The dense route holds J (and two copies) up to this many bytes; past it the Gram route.
DENSE_MAX_BYTES = 1 << 30
# Rows per parameter on the Gram route (the dense route draws `rank_at_point`'s N).
GRAM_ROW_FACTOR = 1.25
GRAM_CHUNK_BYTES = 256 << 20


@dataclass
class LocalGeometry(Tabulated):
    """The local geometry at given weights (module docstring)."""

    architecture: dict
    n_params: int
    lower_bound: int | None
    upper_bound: int
    point_upper_bound: int     # n_params - rank_p T(W) alone (item 1), before the generic bound
    status: str
    rank: int | None
    float_rank: int
    gap: float
    generic_dimension: int | None
    generic_status: str | None
    excess: int | list | None
    profile: list
    families: dict
    parts: list
    batch: dict | None
    tangent_count: int
    registry_count: int
    route: str
    n_samples: int
    seed: int
    notes: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    @property
    def is_settled(self) -> bool:
        return self.status in ("settled", "certified")

    def to_dict(self) -> dict:
        out = _json_safe(asdict(self))
        out["is_settled"] = self.is_settled
        return out

    def deficient_families(self) -> list[str]:
        return [name for name, f in self.families.items() if f["deficient"]]

    def summary_lines(self) -> list[tuple[str, str]]:
        rank = "not settled" if self.rank is None else str(self.rank)
        lo = "?" if self.lower_bound is None else str(self.lower_bound)
        lines = [("architecture", architecture_text(self.architecture)),
                 ("seed", str(self.seed)), ("parameters", str(self.n_params)),
                 ("rank at the point", (f"{rank}  [{self.status}: {lo} <= rank <= "
                                        f"{self.upper_bound}, N = {self.n_samples}, "
                                        f"{self.route} route]")),
                 ("float64 rank", f"{self.float_rank} (gap {self.gap:.1f} decades)"),
                 ("profile", ", ".join(
                     f"{p['tolerance']:g}: {p['effective_dimension'] if p['resolved'] else 'unresolved'}"
                     for p in self.profile))]
        if self.generic_dimension is not None:
            lines.append(("generic dimension", f"{self.generic_dimension}  [{self.generic_status}]"))
        lines.append(("excess", str(self.excess)))
        bad = self.deficient_families()
        if bad:
            lines.append(("deficient families", ", ".join(
                f"{n} ({self.families[n]['rank']} < {self.families[n]['generic_rank']})" for n in bad)))
        for part in self.parts:
            if part["excess"] or part["causes"]:
                causes = f"; {'; '.join(part['causes'])}" if part["causes"] else ""
                text = f"rank {part['rank']} of generic {part['generic_rank']}{causes}"
                lines.append((part["name"], text))
        if self.batch is not None:
            b = self.batch
            lines.append(("on your inputs", (f"float64 rank {b['float_rank']} (gap {b['gap']:.1f} "
                                             f"decades, N = {b['n_samples']})")))
        lines += [("notes", n) for n in self.notes]
        lines.append(("seconds", ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items())))
        return lines

    def _title(self) -> str:
        return f"local geometry: rank {self.rank} ({self.status})"

    def __repr__(self) -> str:
        lo = "?" if self.lower_bound is None else self.lower_bound
        return (f"<LocalGeometry {lo} <= rank <= {self.upper_bound} [{self.status}], excess "
                f"{self.excess}, of {self.n_params} parameters: "
                f"{architecture_text(self.architecture)}>")


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def local_estimate(arch: Architecture, n_samples: int, gram: bool, prove: bool,
                   precision: int = DEFAULT_PRECISION) -> MemoryEstimate:
    """Peak bytes of `local_geometry`: the dense Jacobian with two copies, or the Gram matrix
    with the two copies its projection and eigenvalues take, a chunk of rows, the tangents, and
    for a proof the r x r ball block."""
    P = arch.n_params
    rows = n_samples * arch.tokens * arch.output_width
    parts = {"torch": BASE_BYTES, "tangents": 2 * P * P * 8 // 4}
    if gram:
        parts["Gram matrix and its projections"] = 3 * P * P * 8
        parts["row chunk"] = 2 * GRAM_CHUNK_BYTES
    else:
        parts["Jacobian and its copies"] = 4 * rows * P * 8
    if prove:
        parts["ball block"] = 2 * P * P * (48 + 2 * math.ceil(precision / 64) * 8)
    return MemoryEstimate(f"local geometry of {arch} ({P} parameters, N = {n_samples})",
                          int(sum(parts.values())), parts,
                          "Use a smaller network or fewer tokens", n_samples)


def _user_inputs(arch: Architecture, inputs) -> torch.Tensor:
    """The user's inputs as the map's (N, input_width, t) float64 inputs: token ids (N, t) for a
    vocabulary network, else float sequences (N, d_0, t); refused in the house template."""
    X = torch.as_tensor(np.asarray(inputs) if not isinstance(inputs, torch.Tensor) else inputs)
    if arch.vocab is not None:
        if X.dtype.is_floating_point or X.ndim != 2 or X.shape[1] != arch.tokens:
            raise bad_value("inputs", f"integer token ids of shape (N, {arch.tokens})",
                            f"{X.dtype} of shape {tuple(X.shape)}",
                            f"Pass an (N, {arch.tokens}) array of token ids.")
        top = arch.input_symbols
        if X.numel() and (int(X.min()) < 0 or int(X.max()) >= top):
            raise bad_value("inputs", f"token ids in [0, {top})",
                            f"ids in [{int(X.min())}, {int(X.max())}]",
                            "Pass ids of this model's vocabulary.")
        return symbol_inputs(arch, X.long())
    want = (arch.widths[0], arch.tokens)
    if X.ndim != 3 or tuple(X.shape[1:]) != want:
        raise bad_value("inputs", f"float sequences of shape (N, {want[0]}, {want[1]})",
                        f"shape {tuple(X.shape)}", "Pass inputs of the network's width and tokens.")
    X = X.to(torch.float64)
    require_finite(X, "entries", input_name="inputs")
    return X


def _families(arch: Architecture, residues: dict, seed: int, p: int, notes: list):
    """The families route by size: dense tangent rows with per-family incremental ranks up to
    FAMILY_DENSE_MAX_PARAMS, else the peeling (`peel.peeled_rank`)."""
    if arch.n_params > FAMILY_DENSE_MAX_PARAMS:
        return _families_peeled(arch, residues, seed, p, notes)
    return _families_dense(arch, residues, seed, p, notes)


def _families_peeled(arch: Architecture, residues: dict, seed: int, p: int, notes: list):
    """`_families` for large networks: the rank over F_p of all tangents by the peeling
    (`peel.peeled_rank`), at the weights and at the random point of `block_upper_bound`; each
    family's rank is then its own tangents' rank alone (not incremental), on the columns they
    touch, at both points: a drop is a larger stabilizer of that family at the weights."""
    from .fp_dual import random_blocks_mod_p  # noqa: PLC0415
    from .peel import catalogue_rank, family_entries, peeled_rank  # noqa: PLC0415

    there = catalogue_rank(arch, seed, p)
    point = random_blocks_mod_p(arch, p, seeded_generator(seed, "certified-upper"))
    offsets = {name: offset for name, _, offset in block_layout(arch)}
    alone_there = {f.name: _alone_rank(f, offsets, p) for f in family_entries(arch, point, p)}
    alone_here = {f.name: _alone_rank(f, offsets, p) for f in family_entries(arch, residues, p)}
    families = {}
    for name, count in alone_there.items():
        here = alone_here.get(name, 0)
        families[name] = {"rank": here, "generic_rank": count, "deficient": here < count,
                          "alone": True}
        if here < count:
            notes.append(f"family {name!r}: rank {here} over F_p here (its tangents alone), "
                         f"{count} at a random point: a larger stabilizer at these weights")
    try:
        upper = arch.n_params - peeled_rank(arch, residues, p).rank
    except ComputationError as exc:
        notes.append(f"tangent rank at these weights not available by the peeling ({exc}); "
                     "upper bound n_params")
        upper = arch.n_params
    return upper, families, there.rank


def _alone_rank(fam, offsets: dict[str, int], p: int) -> int:
    """The rank over F_p of one family's tangents (`peel._Family` entries) on the columns they
    touch (`offsets`: each block's first column)."""
    from .fp import rank_mod_p  # noqa: PLC0415

    if not fam.entries:
        return 0
    rows = np.concatenate([r for r, _, _ in fam.entries.values()])
    cols = np.concatenate([pos.astype(np.int64) + offsets[b] for b, (_, pos, _) in fam.entries.items()])
    vals = np.concatenate([v.astype(np.int64) for _, _, v in fam.entries.values()])
    _, ci = np.unique(cols, return_inverse=True)
    M = np.zeros((fam.rows, int(ci.max()) + 1), dtype=np.int64)
    M[rows, ci.reshape(-1)] = vals
    return rank_mod_p(M, p)


def _families_dense(arch: Architecture, residues: dict, seed: int, p: int, notes: list):
    """(upper bound at the point, {family: {rank, generic_rank, deficient}}, the registry's
    tangent count at a random point)."""
    from .ball_dual import catalogue_bound, block_upper_bound  # noqa: PLC0415

    generic_upper, generic = block_upper_bound(arch, seed, p)
    try:
        upper, here = catalogue_bound(arch, residues, p)
    except ComputationError as exc:
        notes.append(f"catalogue tangents not available at these weights ({exc}); upper bound "
                     "n_params")
        return arch.n_params, {}, arch.n_params - generic_upper
    families = {name: {"rank": here.get(name, 0), "generic_rank": count,
                       "deficient": here.get(name, 0) < count}
                for name, count in generic.items() if count or here.get(name, 0)}
    for name, f in families.items():
        if f["deficient"]:
            notes.append(f"family {name!r}: rank {f['rank']} over F_p here, {f['generic_rank']} at "
                         "a random point: a larger stabilizer at these weights")
    return upper, families, arch.n_params - generic_upper


def _generic(arch: Architecture, seed: int, registry_upper: int, progress) -> tuple[int, str, bool]:
    """(generic dimension, how it was obtained, whether it is a proven upper bound)."""
    if arch.n_params <= GENERIC_MAX_PARAMS:
        from .api import neuromanifold_dim  # noqa: PLC0415

        res = neuromanifold_dim(arch, method="auto", seed=seed, progress=progress)
        proven = res.status == "certified"
        if res.status in ("settled", "certified"):
            how = res.method if res.method == res.status else f"{res.method}, {res.status}"
            return res.dimension, f"{how} (neuromanifold_dim auto)", proven
        return registry_upper, (f"registry count at a random point over F_p: a proven upper "
                                f"bound ({res.method} gave {res.dimension}, {res.status})"), True
    return registry_upper, ("registry count at a random point over F_p (block_upper_bound): a "
                            "proven upper bound on the dimension, equal to it where count "
                            "--validate verified the count; not certified here"), True


def local_status(nr, lower: int | None, upper: int, notes: list) -> tuple[str, int | None]:
    """(status, rank) by `rank_at_point`'s rule: `certified` when the proven lower bound meets
    the proven upper bound; `settled` (numerical) when the float64 rank has a clear gap (not
    `is_ambiguous`) and equals the proven upper bound; else `ambiguous` with the bracket
    `lower <= rank <= upper` and `rank` None. A float rank below the upper bound is never
    settled, even when it meets a proven lower bound: near degenerate weights float64 can lose
    directions below round-off with a clear gap (`point.rank_at_point`)."""
    lo = "?" if lower is None else lower
    if lower is not None and lower == upper:
        return "certified", upper
    clear = nr.is_settled(MIN_GAP_DECADES)
    if clear and nr.rank == upper:
        notes.append(f"settled numerically: float64 rank {nr.rank} with a gap of {nr.gap:.1f} "
                     f"decades equals the proven upper bound {upper}")
        return "settled", nr.rank
    if not clear:
        notes.append(f"ambiguous ({lo} <= rank <= {upper}); no clean gap: "
                     + nr.ambiguity_note(MIN_GAP_DECADES))
    else:
        notes.append(f"ambiguous ({lo} <= rank <= {upper}): the float64 rank {nr.rank} (gap "
                     f"{nr.gap:.1f} decades) is below the proven upper bound {upper}, and a float "
                     "rank below a proven upper bound is never settled without a proof that "
                     "closes the bracket")
    return "ambiguous", None


def local_geometry(arch: Architecture, blocks: dict, *, inputs=None, method: str = "auto",
                   seed: int = 0, samples: int | None = None,
                   tolerances=(1e-4, 1e-8, 1e-12), parts: bool = True, generic: bool = True,
                   precision: int | None = None, progress: Progress | None = None,
                   engine: str = "verified") -> LocalGeometry:
    """The local geometry of the block network `arch` at float64 named blocks `blocks`.

    `inputs`: the user's data (token ids (N, t) or float sequences (N, d_0, t)) for the batch
    functional dimension; `method`: auto (prove the lower bound up to PROOF_MAX_PARAMS),
    numerical (no proof) or certified (always prove); `tolerances`: the relative singular values
    of the profile; `engine`: the proof's, `verified` (float64 certificate first) or `ball` (arb
    balls only). See the module docstring for every number.

    Example:
        >>> from neuromanifold import Architecture
        >>> from neuromanifold.core.blocks import random_block_weights
        >>> arch = Architecture((3, 3), 2, 2, "softmax", heads=1, residual=True)
        >>> g = local_geometry(arch, random_block_weights(arch, 1), generic=False)
        >>> g.rank == g.upper_bound == g.n_params - g.tangent_count
        True
    """
    t_start = time.perf_counter()
    check_architecture(arch)
    if not arch.is_block:
        raise bad_value("arch", "a block network (heads, values, residual, MLP or norms)",
                        str(arch), "Use rank_at_point for the paper's model.")
    method = check_choice("method", method, LOCAL_METHODS)
    engine = check_choice("engine", engine, ("verified", "ball"))
    seed = check_seed(seed)
    bits = DEFAULT_PRECISION if precision is None else check_int(
        "precision", precision, minimum=16, fix=f"Pass {DEFAULT_PRECISION} or more.")
    tolerances = tuple(float(t) for t in tolerances)
    if not tolerances or any(not (0 < t < 1) for t in tolerances):
        raise bad_value("tolerances", "relative tolerances in (0, 1)", tolerances,
                        "Pass e.g. (1e-4, 1e-8, 1e-12).")
    check_block_weights(arch, blocks, "blocks")
    blocks = {k: torch.as_tensor(np.asarray(v), dtype=torch.float64).detach().cpu().clone()
              for k, v in blocks.items()}
    for name, t in blocks.items():
        require_finite(t, "entries", input_name=f"blocks:{name}")
    user = None if inputs is None else _user_inputs(arch, inputs)   # refused before any work
    say = progress or (lambda _m: None)
    notes: list[str] = []
    P, per_sample = arch.n_params, arch.output_width * arch.tokens
    dense_n = max(1, math.ceil(ROW_FACTOR * P / per_sample) + 1)
    if samples is not None:
        n = check_int("samples", samples, minimum=1)
    else:
        n = dense_n
    gram = 4 * n * per_sample * P * 8 > DENSE_MAX_BYTES
    if gram and samples is None:
        n = max(1, math.ceil(GRAM_ROW_FACTOR * P / per_sample) + 1)
    prove = method == "certified" or (method == "auto" and P <= PROOF_MAX_PARAMS)
    if prove and gram:
        if method == "certified":
            raise bad_value("method", "numerical or auto for a Jacobian this large",
                            f"certified with {P} parameters", "Pass method='auto'.")
        prove = False
    check_memory(local_estimate(arch, n, gram, prove, bits))
    chunk = max(1, GRAM_CHUNK_BYTES // (per_sample * P * 8))
    seconds: dict[str, float] = {}

    gen = seeded_generator(seed, "point-inputs")
    draw = input_stream(arch, gen)
    X = to_dyadic(draw(n))
    n = X.shape[0]
    try:   # a norm turns an overflow into finite zeros: every intermediate value is checked
        with torch.no_grad():
            block_forward(arch, blocks, X, arithmetic=FINITE)
    except OverflowError as exc:   # before any progress line: bad input is one line
        require_finite(torch.tensor(math.nan), f"intermediate values ({exc})", input_name="blocks",
                       largest=largest_entry(blocks.values()))
    if draw.tokens is not None:
        notes.append(draw.tokens.note())

    # 1. the upper bound at the point and the families (exact over F_p at the dyadic weights)
    t0 = time.perf_counter()
    say(f"symmetry families over F_p at the weights and at a random point ({P} parameters)")
    upper, families, registry_count = _families(
        arch, {k: to_residues(v, DEFAULT_PRIME) for k, v in blocks.items()}, seed, DEFAULT_PRIME, notes)
    seconds["families over F_p"] = time.perf_counter() - t0
    point_upper = upper
    if P - registry_count < upper:
        # rank dPhi(W) <= the generic rank <= the registry's bound at a random point (proven)
        notes.append(f"upper bound at the point n_params - rank_p T(W) = {upper} lowered to the "
                     f"registry's bound {P - registry_count} on the generic dimension (the rank "
                     "at any point is at most the generic rank)")
        upper = P - registry_count

    # 2. the spectrum on the complement of the float tangents
    t0 = time.perf_counter()
    say(f"upper bound at the point {upper}; float Jacobian on N = {n} inputs "
        f"({'Gram' if gram else 'dense'} route)")
    tangents, _ = tangent_rows(arch, blocks, FLOAT_OPS)
    split = KernelSplit.from_tangents(tangents)
    del tangents
    params = flatten_blocks(arch, blocks)
    part_list = network_parts(arch) if parts else []
    try:
        spec = spectrum(arch, params, X, split, part_list, gram=gram, chunk=chunk, progress=say)
    except ComputationError:
        require_finite(torch.tensor(math.nan), "Jacobian entries", input_name="blocks",
                       largest=largest_entry(blocks.values()))
        raise                                       # pragma: no cover - require_finite raised
    # the Gram route reads ||J Q1|| from Q1^T G Q1, whose round-off is eps ||G|| = (eps^1/2 ||J||)^2
    if spec.leak > (math.sqrt(MAX_KERNEL_IMAGE_CERTIFIED) if gram else MAX_KERNEL_IMAGE_CERTIFIED):
        raise ComputationError(f"a symmetry tangent is not in the kernel of the float Jacobian "
                               f"(image {spec.leak:.1e} of the total): a catalogue bug; please "
                               "report it with --debug")
    nr = spec.rank
    notes.append(f"float rank read on the complement of {spec.tangent_rank} float tangents "
                 f"(their Jacobian image: {spec.leak:.1e} of the total), {spec.route_text()}")
    seconds["float spectrum"] = time.perf_counter() - t0

    # 3. the certified lower bound
    lower = None
    if prove:
        from .ball_dual import block_evaluator  # noqa: PLC0415

        t0 = time.perf_counter()
        say(f"float64 rank {nr.rank} (gap {nr.gap:.1f} decades); proving the lower bound")
        J = spec.dense
        evaluate = block_evaluator(arch, blocks, X, engine=engine)
        # a clear gap: prove the float rank; none: try the upper bound first (a float rank
        # below the truth is what an unclear gap can hide), then the float rank
        target = min(upper, nr.rank) if nr.is_settled(MIN_GAP_DECADES) and nr.rank else upper
        ball = prove_rank(J, target, evaluate, precision=bits, progress=say)
        if ball.proved < target and 0 < nr.rank < target:
            ball = prove_rank(J, nr.rank, evaluate, precision=bits, progress=say)
        lower = ball.proved
        notes += ball.notes
        if lower and ball.engine == "verified":
            notes.append(f"lower bound: a {lower} x {lower} matrix W J V (or block of J) is "
                         f"nonsingular, {ball.determinant} (verified float64 arithmetic)")
        elif lower:
            notes.append(f"lower bound: a {lower} x {lower} block of J has determinant "
                         f"{ball.determinant} ({ball.precision}-bit ball arithmetic)")
        if engine == "ball":
            notes.append("engine ball (--engine ball): the lower bound in arb balls only, the "
                         "verified float64 certificate not tried")
        seconds["ball proof"] = time.perf_counter() - t0
    elif method == "auto":
        notes.append(f"no certified lower bound: {P} parameters (auto proves up to "
                     f"{PROOF_MAX_PARAMS}{'' if not gram else ', and only on the dense route'})")
    spec.dense = None

    # generic dimension
    gen_dim, gen_status, gen_proven = None, None, False
    if generic:
        t0 = time.perf_counter()
        gen_dim, gen_status, gen_proven = _generic(arch, seed, P - registry_count, progress)
        seconds["generic dimension"] = time.perf_counter() - t0
    if gen_proven and gen_dim is not None and gen_dim < upper:
        notes.append(f"upper bound {upper} lowered to the certified generic dimension {gen_dim} "
                     "(the rank at any point is at most the generic rank)")
        upper = gen_dim

    status, rank = local_status(nr, lower, upper, notes)
    if rank is None and nr.rank < upper and samples is None:
        notes.append(f"N = {n} inputs fixed in advance (no growth to saturation): a float rank "
                     "below the upper bound may also mean too few samples; pass samples=")
    excess = None
    if gen_dim is not None:
        if rank is not None:
            excess = gen_dim - rank
        else:
            excess = [max(0, gen_dim - upper), None if lower is None else gen_dim - lower]

    # 4. attribution
    part_rows = []
    if parts:
        t0 = time.perf_counter()
        say(f"parts: {len(part_list)} column blocks at the weights and at a random point")
        gblocks = random_block_weights(arch, seed)
        gX = to_dyadic(input_stream(arch, seeded_generator(seed, "local-generic-inputs"))(n))
        gspec = spectrum(arch, flatten_blocks(arch, gblocks), gX, None, part_list, gram=gram,
                         chunk=chunk, progress=say)
        causes = detect_causes(arch, blocks, [("sampled", X)] + ([("given", user)] if user is not None else []))
        for p in part_list:
            here, there = spec.part_ranks[p.name], gspec.part_ranks[p.name]
            part_rows.append({"name": p.name, "kind": p.kind, "n_params": len(p.columns),
                              "rank": here.rank, "generic_rank": there.rank,
                              "excess": there.rank - here.rank,
                              "settled": here.is_settled() and there.is_settled(),
                              "causes": causes.get(p.name, [])})
        seconds["parts"] = time.perf_counter() - t0

    # 5. the batch functional dimension on the user's inputs
    batch = None
    if user is not None:
        t0 = time.perf_counter()
        U = user
        rows = U.shape[0] * per_sample
        b_gram = 4 * rows * P * 8 > DENSE_MAX_BYTES
        check_memory(local_estimate(arch, U.shape[0], b_gram, False))
        bspec = spectrum(arch, params, U, split, [], gram=b_gram, chunk=chunk, progress=say)
        batch = {"n_samples": int(U.shape[0]), "float_rank": bspec.rank.rank, "gap": bspec.rank.gap,
                 "settled": bspec.rank.is_settled(MIN_GAP_DECADES),
                 "profile": bspec.profile(tolerances), "route": bspec.route_text(),
                 "rows": rows}
        if rows < P:
            batch["note"] = f"{rows} Jacobian rows: the rank is at most {rows}"
        seconds["batch"] = time.perf_counter() - t0

    seconds["total"] = time.perf_counter() - t_start
    return LocalGeometry(
        architecture=arch.to_dict(), n_params=P, lower_bound=lower, upper_bound=upper,
        point_upper_bound=point_upper,
        status=status, rank=rank, float_rank=nr.rank, gap=nr.gap, generic_dimension=gen_dim,
        generic_status=gen_status, excess=excess, profile=spec.profile(tolerances),
        families=families, parts=part_rows, batch=batch, tangent_count=spec.tangent_rank,
        registry_count=registry_count, route="gram" if gram else "dense", n_samples=n, seed=seed,
        notes=notes, seconds=seconds)
