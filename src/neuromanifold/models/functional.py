"""`functional_dim`: the functional dimension of any PyTorch module (docs/models.md).

The functional dimension of a module at generic parameters theta is the rank of the Jacobian of
theta -> (module_theta(x_1), ..., module_theta(x_N)) for enough inputs x_n. It is computed in
float64 and read by the one rank rule of `core.rank` (largest singular-value gap), exactly as
`neuromanifold_dim(method="numerical")` reads it for the paper's networks. The Jacobian is not
rescaled column by column: a parameter the output ignores keeps a round-off column and cannot be
promoted to a direction.

Jacobian modes, tried in order until one works (the result records which one was used):
  forward                 torch.func.jvp under vmap, one column per parameter;
  forward, math attention the same with the fused attention kernels switched off
                          (scaled_dot_product_attention on its math backend, the
                          nn.MultiheadAttention fast path disabled);
  reverse, math attention torch.func.vjp under vmap, one row per output coordinate;
  reverse, looped         torch.autograd.grad one output coordinate at a time (no vmap).

Piecewise modules (relu and its kin, max pooling; `piecewise_parts`) make the map analytic only
inside each activation region, so a rank below the upper bound is reported as a lower bound
(status `lower-bound`), as `dim` does for relu blocks: one verdict rule (`dimension.verdict`, NOTE:
[relu ranks depend on the point]) decides both.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable

import torch

from ..core.checks import bad_type, bad_value, check_bool, check_int, check_min_gap, check_seed
from ..core.formulas import FormulaValue
from ..core.seeds import seeded_generator
from ..dimension.growth import default_max_samples, first_target, grow_by_half, grow_samples
from ..dimension.jacobians import KernelSplit
from ..dimension.numerical import resolve_device, say_device
from ..core.rank import MIN_GAP_DECADES, numerical_rank, rank_rule, singular_values
from ..dimension.result import AmbiguousRankWarning, DimensionResult, Progress
from ..dimension.verdict import numerical_verdict, unsettled_message
from ..errors import ComputationError, ResourceError

# Bytes one chunk of Jacobian columns (or rows) may use for its outputs.
_CHUNK_BYTES = 256 * 2 ** 20
MODES = ("forward", "forward, math attention", "reverse, math attention", "reverse, looped")
# Samples compared by the freshness test of a callable's draws (`_check_batch`).
_FRESH_PREFIX = 4
# What a failing autodiff transform raises on an unsupported kernel (not bad input).
_TRANSFORM_ERRORS = (RuntimeError, NotImplementedError)
# What a module's own forward raises on inputs of the wrong shape or kind.
_FORWARD_ERRORS = (RuntimeError, ValueError, IndexError, TypeError)


# Module classes whose map is only piecewise analytic (piecewise linear or polynomial, or analytic
# pieces glued at a kink): relu and its relatives, hard clamps and shrinks, the exponential
# linear units and max pooling. Tanhshrink, GELU, SiLU, Mish, Softplus are analytic.
_PIECEWISE_TORCH = tuple(getattr(torch.nn, name) for name in (
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "Hardtanh", "Hardswish", "Hardsigmoid",
    "Hardshrink", "Softshrink", "Threshold", "ELU", "CELU", "SELU", "Softsign",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "FractionalMaxPool2d", "FractionalMaxPool3d") if hasattr(torch.nn, name))
# transformers.activations classes that are piecewise (relu squared, clipped GELU, xIELU's
# x > 0 switch), matched by name and module so that transformers is never imported here.
_PIECEWISE_TRANSFORMERS = ("ReLUSquaredActivation", "ClippedGELUActivation", "XIELUActivation")
# Piecewise functions a module may hold as an attribute (nn.TransformerEncoderLayer and
# nn.TransformerDecoderLayer keep `activation = F.relu` by default).
_F = torch.nn.functional
_PIECEWISE_FUNCTIONS = {f: f.__name__ for f in (
    _F.relu, torch.relu, _F.relu6, _F.leaky_relu, _F.hardtanh, _F.hardswish, _F.hardsigmoid,
    _F.hardshrink, _F.softshrink, _F.threshold, _F.elu, _F.celu, _F.selu, _F.softsign)}
# Attribute names under which norm modules keep their epsilon (torch.nn: eps; transformers'
# RMSNorm classes: variance_epsilon).
_EPSILON_ATTRS = ("eps", "variance_epsilon", "epsilon")
# Norm epsilons below this can hide directions below float64 round-off (NOTE: [model constants
# that hide directions]).
EPSILON_VISIBLE = 1e-6


def piecewise_parts(module: torch.nn.Module) -> list[str]:
    """Names of the piecewise-analytic parts found in `module.modules()` (sorted, no repeats).

    Found: instances of the torch.nn activation and max-pooling classes listed in
    `_PIECEWISE_TORCH`, transformers' ReLUSquaredActivation, ClippedGELUActivation and
    XIELUActivation, and submodules holding a piecewise function as an attribute (such as
    nn.TransformerEncoderLayer's default `activation = F.relu`). Not found: functions called
    inside `forward` (torch.nn.functional.relu, torch.relu, clamp, max, abs); pass
    `piecewise=True` to `functional_dim` for those.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4))
        >>> piecewise_parts(net), piecewise_parts(torch.nn.Tanh())
        (['ReLU'], [])
    """
    found = set()
    for m in module.modules():
        kind = type(m)
        if isinstance(m, _PIECEWISE_TORCH) or (kind.__name__ in _PIECEWISE_TRANSFORMERS and
                                               kind.__module__.startswith("transformers")):
            found.add(kind.__name__)
        for attr, value in vars(m).items():
            if callable(value) and not isinstance(value, torch.nn.Module):
                try:
                    name = _PIECEWISE_FUNCTIONS.get(value)
                except TypeError:  # unhashable callables
                    name = None
                if name is not None:
                    found.add(f"{kind.__name__}.{attr} ({name})")
    return sorted(found)


def norm_epsilons(module: torch.nn.Module) -> dict[str, float]:
    """The positive float constants `eps` / `variance_epsilon` / `epsilon` of the submodules of
    `module` (norm layers), by qualified submodule name.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4, eps=1e-12))
        >>> norm_epsilons(net)
        {'1': 1e-12}
    """
    found = {}
    for name, m in module.named_modules():
        for attr in _EPSILON_ATTRS:
            value = getattr(m, attr, None)
            if isinstance(value, float) and value > 0:
                found[name or type(m).__name__] = value
                break
    return found


def _none(n_params: int) -> FormulaValue:
    return FormulaValue("no closed form", n_params, False, "a network of the paper's family",
                        "none", "parameter count")


@contextlib.contextmanager
def math_attention():
    """Switch off fused attention kernels: SDPA on its math backend, no MHA fast path."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

    mha = getattr(torch.backends, "mha", None)
    previous = mha.get_fastpath_enabled() if mha is not None else None
    if mha is not None:
        mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(previous)


def _prepare(batch, dev: torch.device, name: str = "inputs") -> tuple:
    """Inputs as a tuple of tensors on `dev`, floating ones in float64."""
    out = []
    for x in (tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)):
        if not isinstance(x, torch.Tensor):
            raise bad_type(name, "a tensor, a tuple of tensors, or a callable inputs(n, generator) "
                           "returning them", type(x).__name__,
                           "Pass torch tensors with the batch along the first axis.")
        out.append(x.to(dev, torch.float64) if x.is_floating_point() else x.to(dev))
    return tuple(out)


def _output_tensor(out) -> tuple[torch.Tensor, str]:
    """The tensor whose entries are the outputs: the output itself, or its first entry."""
    if isinstance(out, torch.Tensor):
        return out, "the output tensor"
    if isinstance(out, dict) and out:  # includes transformers' ModelOutput
        key = next(iter(out))
        return _output_tensor(out[key])[0], f"output '{key}'"
    if isinstance(out, (tuple, list)) and out:
        return _output_tensor(out[0])[0], "the first output"
    raise bad_type("module", "a module whose forward returns a tensor (or a tuple or dict whose "
                   "first entry is one)", type(out).__name__,
                   "Wrap the module so that forward returns the tensor to be counted.")


def _select(module: torch.nn.Module, params) -> dict[str, torch.Tensor]:
    named = dict(module.named_parameters())
    if not named:
        raise bad_value("module", "a module with at least one parameter",
                        type(module).__name__, "Pass a module with trainable weights.")
    if params is None:
        return named
    if isinstance(params, str):
        params = [params]
    names = list(params)
    unknown = [n for n in names if n not in named]
    if unknown or not names:
        raise bad_value("params", "names from module.named_parameters()", unknown or names,
                        f"Choose among {', '.join(list(named)[:6])}{', ...' if len(named) > 6 else ''}.")
    return {n: named[n] for n in dict.fromkeys(names)}


def _check_parameters(chosen: dict[str, torch.Tensor]) -> None:
    """Refuse parameters the float64 Jacobian cannot read: complex (their imaginary parts would
    be dropped by the float64 copy), integer (not differentiable), or on the meta device (no
    values)."""
    for name, p in chosen.items():
        if p.is_meta:
            raise bad_value("module", "a module whose parameters hold values (not on the meta "
                            "device)", f"parameter {name!r} on the meta device",
                            "Materialise the weights first, e.g. module.to_empty(device='cpu') "
                            "and initialise them, or load a checkpoint.")
        if p.is_complex():
            raise bad_value("module", "a module with real floating-point parameters",
                            f"complex parameter {name!r} ({p.dtype})", "Write the module with "
                            "real and imaginary parts as separate real parameters (each one a "
                            "real parameter here), or pass params= naming the real ones.")
        if not p.is_floating_point():
            raise bad_value("params", "floating-point parameters (integer ones have no derivative)",
                            f"integer parameter {name!r} ({p.dtype})",
                            "Pass params= naming only the floating-point parameters.")


def _check_batch(batch: tuple, n: int | None, drawn: list) -> None:
    """Refuse a batch that is empty, not of `n` samples (a callable's answer to inputs(n, g)),
    not fresh (equal to an earlier draw, or one sample repeated), or not finite."""
    first = batch[0]
    length = first.shape[0] if first.ndim else 1
    if length == 0:
        raise bad_value("inputs", "a batch of at least one sample", "an empty batch (0 samples)",
                        "Pass at least one sample along the first axis.")
    for x in batch:
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise bad_value("inputs", "finite numbers", "a batch with nan or inf entries",
                            "Replace the non-finite entries of the inputs.")
    if n is None:
        return
    if length != n:
        raise bad_value("inputs", "a callable returning n samples (along the first axis) when "
                        "called as inputs(n, generator)", f"{length} samples for n = {n}",
                        "Return n fresh samples drawn with the generator passed in.")
    if first.ndim:
        # Stale draws: one sample repeated, or the prefix of an earlier batch again (a fixed
        # tensor sliced to n). Compared over at least _FRESH_PREFIX samples, so that inputs from
        # a small discrete set repeat by chance with probability <= (1/8)^4 or so.
        flat = first.reshape(length, -1)
        repeated = length >= _FRESH_PREFIX and bool((flat == flat[:1]).all())
        earlier = any(min(len(d), length) >= _FRESH_PREFIX and d.shape[1:] == flat.shape[1:]
                      and torch.equal(d[:min(len(d), length)], flat[:min(len(d), length)])
                      for d in drawn)
        if earlier or repeated:
            raise bad_value("inputs", "a callable returning fresh samples on every call",
                            "the same samples again" if earlier else
                            f"one sample repeated {length} times",
                            "Draw new samples from the generator passed in on each call, e.g. "
                            "torch.randn(n, ..., generator=generator).")
        drawn.append(flat)


def _check_jacobian_memory(n: int, rows_per_sample: int, n_params: int) -> None:
    """Refuse, with the estimate, N samples whose Jacobian rows do not fit in memory (80% of
    the available memory): the rows, their stacked copy and the triangular factor."""
    from ..dimension.memory import available_memory, format_bytes, resolve_budget  # noqa: PLC0415

    rows = n * rows_per_sample
    peak = 2 * rows * n_params * 8 + min(rows, n_params) * n_params * 8
    budget = resolve_budget(None, available_memory())
    if peak > budget:
        raise ResourceError(
            f"`samples` must give a Jacobian that fits in memory; got {n} samples: {rows} rows x "
            f"{n_params} parameters, about {format_bytes(peak)} peak against "
            f"{format_bytes(budget)} (80% of the available memory). Pass a smaller samples "
            f"(about {max(1, n * budget // peak)} fits).")


def _rescaled_rank(model, chosen, fixed, theta, batch: tuple, mode: str, split,
                   min_gap: float) -> tuple[float, int] | None:
    """(RMS of the floating inputs, rank at the same inputs scaled to RMS 1), or None when the
    inputs are already of order one (RMS within a factor 4 of 1) or have no floating part.

    A rank below the bound at huge (or tiny) inputs can come from saturated units (tanh'(x)
    underflows to 0 at |x| > 20), which the gap rule cannot see; a higher rank at the same
    inputs rescaled proves the first reading is not the module's generic rank."""
    floats = [x for x in batch if x.is_floating_point()]
    if not floats:
        return None
    values = torch.cat([x.reshape(-1) for x in floats])
    top = float(values.abs().max()) if values.numel() else 0.0
    rms = top * float(torch.sqrt(torch.mean((values / top) ** 2))) if top > 0 else 0.0
    if not 0.25 <= rms <= 4.0 and rms > 0 and math.isfinite(rms):
        scaled = tuple(x / rms if x.is_floating_point() else x for x in batch)
        f = _Map(model, chosen, fixed, scaled)
        try:
            J = _jacobian(f, theta, f(theta).numel(), mode)
        except _TRANSFORM_ERRORS:
            return None
        if not bool(torch.isfinite(J).all()):
            return None
        if split is not None:
            J = split.reduce(J)[0]
        nr = numerical_rank(singular_values(J), *J.shape)
        return rms, nr.rank if nr.is_settled(min_gap) else 0
    return None


class _Map:
    """theta (flat, float64) -> flattened output of the module on a fixed batch."""

    def __init__(self, module, chosen: dict, fixed: dict, batch: tuple):
        self.module, self.fixed, self.batch = module, fixed, batch
        self.names = list(chosen)
        self.shapes = [chosen[n].shape for n in self.names]
        self.sizes = [chosen[n].numel() for n in self.names]

    def unflatten(self, theta: torch.Tensor) -> dict:
        out, offset = dict(self.fixed), 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes):
            out[name] = theta[offset: offset + size].reshape(shape)
            offset += size
        return out

    def __call__(self, theta: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(self.module, self.unflatten(theta), self.batch)
        return _output_tensor(out)[0].reshape(-1)


def _jacobian(f: _Map, theta: torch.Tensor, n_rows: int, mode: str) -> torch.Tensor:
    """J (n_rows, P) of f at theta by `mode` (one of MODES)."""
    from torch.func import jvp, vjp, vmap  # noqa: PLC0415

    n = theta.shape[0]
    guard = contextlib.nullcontext() if mode == "forward" else math_attention()
    with guard:
        if mode.startswith("forward"):
            chunk = max(1, min(n, _CHUNK_BYTES // max(1, 8 * n_rows * 4)))
            eye = torch.eye(n, dtype=theta.dtype, device=theta.device)
            column = lambda v: jvp(f, (theta,), (v,))[1]  # noqa: E731
            return torch.cat([vmap(column)(eye[s: s + chunk]) for s in range(0, n, chunk)]).T
        if mode == "reverse, math attention":
            _, pull = vjp(f, theta)
            chunk = max(1, min(n_rows, _CHUNK_BYTES // max(1, 8 * n * 4)))
            eye = torch.eye(n_rows, dtype=theta.dtype, device=theta.device)
            return torch.cat([vmap(lambda u: pull(u)[0])(eye[s: s + chunk])
                              for s in range(0, n_rows, chunk)])
        leaf = theta.detach().requires_grad_(True)
        y = f(leaf)
        rows = [torch.autograd.grad(y[k], leaf, retain_graph=True, allow_unused=True)[0]
                for k in range(n_rows)]
        return torch.stack([torch.zeros_like(leaf) if r is None else r for r in rows]).detach()


def functional_dim(module: torch.nn.Module, inputs, *, params=None, samples: int | None = None,
                   seed: int = 0, device: str = "cpu",
                   symmetry_tangents: Callable | None = None,
                   min_gap: float = MIN_GAP_DECADES, max_samples: int | None = None,
                   piecewise: bool | None = None,
                   progress: Progress | None = None) -> DimensionResult:
    """Functional dimension of `module`: the float64 rank of d(outputs)/d(parameters).

    Args:
        module: a torch.nn.Module. A float64 copy is used in eval mode (no dropout); the module
            passed in is left unchanged. Buffers are kept as constants.
        inputs: a batch (a tensor or a tuple of tensors, the batch along axis 0), used as given;
            or a callable `inputs(n, generator)` returning n fresh samples, in which case N grows
            until the rank saturates.
        params: names from `module.named_parameters()` to vary (default: all); the others
            are held fixed.
        samples: the first N for a callable `inputs` (fixed if given, else grown).
        seed: seeds the generator handed to `inputs`.
        device: `cpu`, `cuda` or `auto`.
        symmetry_tangents: optional callable `symmetry_tangents(named) -> (k, P)` tensor of
            tangent vectors at the parameters `named` (name -> tensor, in `params` order);
            the rank is then read on their complement and n_params - k is the upper bound.
        min_gap: decades of singular-value gap needed to settle the rank.
        max_samples: cap on N when it grows (default 8 times the first N, at least 64); a rank
            still below the bound there, every reading clear, is status `stopped`.
        piecewise: whether the map is only piecewise analytic. None (default) looks for
            piecewise parts in `module.modules()` (`piecewise_parts`: nn.ReLU and its kin,
            max pooling, ...); True treats the module as piecewise even if none is found (say,
            torch.nn.functional.relu, clamp or max called inside forward, which cannot be seen
            from outside); False is the caller's assertion that the map is analytic.

    Returns a `DimensionResult` (method `numerical`); its notes say which output was counted
    and which Jacobian mode worked. Status `settled` when the gap is clear and the rank
    saturated in N (the rule of `dimension.verdict`, as for `dim`); for a piecewise module a
    clear rank below the upper bound is status `lower-bound` instead (lower_bound = the rank,
    upper_bound = n_params, or n_params minus the symmetry tangents' rank): the rank is constant
    only within one activation region, so at one point it only bounds the dimension from below
    (NOTE: [relu ranks depend on the point] in `dimension.verdict`). A piecewise rank that
    meets the upper bound stays `settled`.

    Example:
        >>> import torch
        >>> lin = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2, bias=False))
        >>> r = functional_dim(lin, lambda n, g: torch.randn(n, 3, generator=g, dtype=torch.float64))
        >>> (r.n_params, r.dimension, r.status)
        (12, 8, 'settled')
    """
    import copy  # noqa: PLC0415

    if not isinstance(module, torch.nn.Module):
        raise bad_type("module", "a torch.nn.Module", type(module).__name__,
                       "Pass the model object itself (e.g. an nn.Module built from its config).")
    seed = check_seed(seed)
    min_gap = check_min_gap(min_gap)
    if max_samples is not None:
        max_samples = check_int("max_samples", max_samples, minimum=1,
                                fix="Pass max_samples=64, or leave it out.")
    piecewise = check_bool("piecewise", piecewise, allow_none=True,
                           fix="Pass None to detect piecewise activations, True or False to assert it.")
    dev = resolve_device(device)
    say = progress or (lambda _msg: None)
    parts = piecewise_parts(module)
    say_device(dev, say)
    t_start = time.perf_counter()
    _check_parameters(_select(module, params))  # bad names and kinds fail before the copy
    model = copy.deepcopy(module).to(dev, torch.float64).eval()
    chosen = _select(model, params)
    fixed = {n: p.detach() for n, p in model.named_parameters() if n not in chosen}
    fixed.update(dict(model.named_buffers()))
    theta = torch.cat([p.detach().reshape(-1) for p in chosen.values()])
    n_params = theta.shape[0]
    grow = callable(inputs) and not isinstance(inputs, torch.Tensor)
    gen = seeded_generator(seed, "functional-inputs")
    if samples is not None:
        if not grow:
            raise bad_value("samples", "left out when `inputs` is a fixed batch", samples,
                            "Drop samples, or pass inputs as a callable inputs(n, generator).")
        samples = check_int("samples", samples, minimum=1, fix="Pass N >= 1, e.g. 8.")

    drawn: list[torch.Tensor] = []  # the first tensor of every batch drawn so far

    def draw(n: int) -> tuple:
        batch = _prepare(inputs(n, gen) if grow else inputs, dev)
        _check_batch(batch, n if grow else None, drawn)
        return batch

    def call(batch: tuple):
        try:
            with torch.no_grad():
                return _output_tensor(model(*batch))
        except _FORWARD_ERRORS as exc:
            shapes = ", ".join(str(tuple(x.shape)) for x in batch)
            raise bad_value("inputs", "a batch the module's forward accepts", f"shapes {shapes}",
                            f"Match the module's expected input shape ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}).") from exc

    probe = draw(1 if grow else 0)
    probe_out, output_name = call(probe)
    batch_len = probe[0].shape[0] if probe[0].ndim else 1
    rows_per_sample = max(1, probe_out.numel() // max(1, batch_len))

    split = None
    upper = n_params
    if symmetry_tangents is not None:
        named = {n: theta_part for n, theta_part in _Map(model, chosen, fixed, ()).unflatten(theta).items()
                 if n in chosen}
        tangents = torch.as_tensor(symmetry_tangents(named), dtype=torch.float64, device=dev)
        if tangents.ndim != 2 or tangents.shape[1] != n_params:
            raise bad_value("symmetry_tangents", f"a callable returning a (k, {n_params}) tensor",
                            f"shape {tuple(tangents.shape)}",
                            "Return one tangent vector per row, in the order of the parameters.")
        if not bool(torch.isfinite(tangents).all()):
            raise bad_value("symmetry_tangents", "a callable returning finite tangent vectors",
                            "a tensor with nan or inf", "Return finite tangents at these "
                            "parameters (or leave symmetry_tangents out).")
        split = KernelSplit.from_tangents(tangents)
        upper = n_params - split.rank

    if grow:
        target = samples or first_target(upper, rows_per_sample)
        max_samples = max_samples or default_max_samples(target)
        _check_jacobian_memory(target, rows_per_sample, n_params)
        batches: list[tuple] = []
    else:
        target = batch_len
        batches = [probe]
    state = {"mode": None, "R": None, "jacobian": 0.0, "rank": 0.0, "leak": 0.0}
    failures: list[str] = []

    def add(n_done: int, n_target: int) -> None:
        n_new = n_target - n_done
        batch = draw(n_new) if grow else probe
        if grow:
            batches.append(batch)
        # wrong shapes from a callable: one line, not an autodiff error
        n_rows = call(batch)[0].numel() if grow else probe_out.numel()
        f = _Map(model, chosen, fixed, batch)
        t0 = time.perf_counter()
        J = None
        for mode in (MODES if state["mode"] is None else (state["mode"],)):
            try:
                J = _jacobian(f, theta, n_rows, mode)
            except _TRANSFORM_ERRORS as exc:
                failures.append(f"{mode}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                say(f"Jacobian mode '{mode}' failed; trying the next")
                continue
            state["mode"] = mode
            break
        if J is None:
            raise ComputationError("no Jacobian mode works on this module: " + " | ".join(failures))
        if not bool(torch.isfinite(J).all()):  # finite inputs (checked): overflow
            top = max(float(x.abs().max()) for x in batch if x.is_floating_point() and x.numel()) \
                if any(x.is_floating_point() for x in batch) else 0.0
            raise bad_value("inputs", "inputs at which the module's Jacobian stays finite in "
                            "float64", f"inf or nan entries (largest |input| {top:.1e}, "
                            f"largest |parameter| {float(theta.abs().max()):.1e})",
                            "Rescale the inputs (or the parameters) to order one.")
        if split is not None:
            J, block_leak = split.reduce(J)
            state["leak"] = max(state["leak"], block_leak)
        R = state["R"]
        stacked = J if R is None else torch.cat([R, J])
        state["R"] = (torch.linalg.qr(stacked, mode="r").R if stacked.shape[0] > stacked.shape[1]
                      else stacked)
        state["jacobian"] += time.perf_counter() - t0
        state["n"] = n_target
        say(f"N = {n_target}: Jacobian rows computed ({state['mode']})")

    def measure():
        t1 = time.perf_counter()
        R = state["R"]
        sv = singular_values(R)
        state["rank"] += time.perf_counter() - t1
        n_total_rows = state["n"] * rows_per_sample
        nr = numerical_rank(sv, max(n_total_rows, R.shape[0]), R.shape[1])
        say(f"N = {state['n']}: numerical rank {nr.rank} (gap {nr.gap:.1f} decades)")
        return nr

    # One sample more is a batch here (min_batch 1), as this path has always grown N: the N
    # sequence decides the inputs drawn, hence every rank and gap reported so far.
    grown = grow_samples(
        target, add, measure, rank_of=lambda nr: nr.rank, upper=upper,
        fixed=not grow or samples is not None, next_target=grow_by_half,
        clear=lambda nr: nr.is_settled(min_gap), max_samples=max_samples, min_batch=1, say=say)
    nr, n_done, history, mode_used = grown.measurement, grown.n_done, grown.history, state["mode"]
    t_jac, t_rank, leak = state["jacobian"], state["rank"], state["leak"]

    notes = [f"counted output: {output_name} of {type(module).__name__} "
             f"({rows_per_sample} numbers per sample), float64, eval mode",
             f"Jacobian mode: {mode_used}"]
    notes += [f"Jacobian mode failed: {msg}" for msg in failures]
    if split is not None:
        notes.append(f"rank read on the complement of {split.rank} symmetry tangents "
                     f"(their Jacobian image: {leak:.1e} of the total)")

    def rescaled() -> str | None:
        every = tuple(torch.cat(parts_) for parts_ in zip(*batches)) if grow else probe
        scaled = _rescaled_rank(model, chosen, fixed, theta, every, mode_used, split, min_gap)
        if scaled is None or scaled[1] <= nr.rank:
            return None
        return (f"inputs of RMS {scaled[0]:.1e} saturate the module numerically: the same "
                f"inputs scaled to RMS 1 give rank {scaled[1]} > {nr.rank}, so rank "
                f"{nr.rank} is not settled (pass inputs of order one)")

    def tiny_epsilon() -> str | None:
        tiny = {name: eps for name, eps in norm_epsilons(model).items() if eps < EPSILON_VISIBLE}
        if not tiny:
            return None
        # NOTE: [model constants that hide directions]
        # A norm y = g * x / sqrt(mean(x^2) + eps) (or its centred form) is invariant under
        # x -> c x up to eps: N(c x) with eps equals N(x) with eps / c^2. So a rescaling of a
        # norm's input (a direction of the weights that write it) moves the outputs by O(eps)
        # only, and its singular value is proportional to eps (measured on shrunk BERT: sigma
        # 4.0e-13 at eps 1e-12 and 4.0e-10 at eps 1e-9, against 6.3e-4 for the smallest real
        # direction). Below about 1e-6 such values are indistinguishable from round-off, and a
        # clean-looking gap can fall below them: shrunk BERT (eps 1e-12) reads 908 with a
        # 6.7-decade gap while its dimension is 913 (913 settled at eps = 1e-3). A rank below
        # the upper bound is therefore never settled when such a constant is present.
        shown = ", ".join(f"{name} ({eps:.0e})" for name, eps in list(tiny.items())[:3])
        return (f"norm epsilon below {EPSILON_VISIBLE:.0e} in {len(tiny)} module(s): {shown}"
                f"{', ...' if len(tiny) > 3 else ''}: directions that only epsilon breaks (a "
                "rescaling of a norm's input) have singular values proportional to epsilon, "
                f"at or below float64 round-off, so rank {nr.rank} < {upper} is not settled; "
                "measure a copy with a larger epsilon (e.g. 1e-3) to see them")

    is_piecewise = bool(parts) if piecewise is None else piecewise
    what = ", ".join(parts) if piecewise is None else \
        "piecewise=True given" + (f"; found {', '.join(parts)}" if parts else ", none found")
    # A clear rank below the upper bound at one point of a piecewise map is a lower bound:
    # `verdict`'s rule (NOTE: [relu ranks depend on the point]).
    status, verdict_notes = numerical_verdict(
        nr, nr.rank, upper, min_gap, grown.reason, grown.detail, n_samples=n_done, leak=leak,
        late_checks=[rescaled, tiny_epsilon],
        bound_name="parameter count" if split is None else "symmetry bound",
        fixed_hint=("leave samples out to grow N" if grow else
                    "pass inputs as a callable to grow N"),
        piecewise=what if is_piecewise else None,
        piecewise_hint="try other parameter points or more samples, or pass piecewise=False if "
                       "the map is analytic")
    notes += verdict_notes
    if piecewise is False and parts:
        notes.append(f"piecewise=False: the caller asserts the map is analytic ({', '.join(parts)} "
                     "found)")
    message = unsettled_message(type(module).__name__, nr.rank, status, notes)
    if message:
        warnings.warn(message, AmbiguousRankWarning, stacklevel=2)
    return DimensionResult(
        architecture={"module": type(module).__name__, "params": len(chosen),
                      "jacobian_mode": mode_used, "piecewise": is_piecewise},
        n_params=n_params, dimension=nr.rank, method="numerical", status=status,
        formula=_none(n_params), conjecture=_none(n_params), upper_bound=upper, gap=nr.gap,
        lower_bound=nr.rank if status == "lower-bound" else None,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), seconds={"jacobian": t_jac, "rank": t_rank,
                                          "total": time.perf_counter() - t_start},
        rank_rule=rank_rule(min_gap), rank_history=history, notes=notes)
