"""Plans: what an engine will do for a network, decided from the architecture alone.

Each engine (numerical, exact, certified, Dask) states its plan before it computes anything: the
route it takes, the first number of samples N it draws, and its predicted peak memory
(`dimension.memory`, which models each route's allocations). The plan is made without importing
torch, so a refusal is quick. `Plan.check` compares the peak with the budget (one line,
`ResourceError`, exit 2); an engine handed a checked plan does not estimate or check again.

    plan = numerical_plan(arch, samples)     # route, N, peak: arithmetic on the architecture
    plan.check(max_memory)                   # refuses before any large allocation
    numerical_dim(arch, ..., plan=plan)      # runs the plan's route

The first N is the engine's own rule evaluated on the predicted upper bound; the engine draws
N from the bound it computes (the same for the paper's model, where the tangents are independent;
for other networks the ambient bound can lower it), so the predicted N is the one the peak is
estimated at, not a promise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..core.architecture import Architecture
from .memory import (BALL_DEFAULT_PRECISION, LOCAL_WORKERS, MemoryEstimate,
                     certified_softmax_estimate, check_memory, dask_client_estimate,
                     dask_worker_estimate, eliminates, exact_estimate, local_cluster_estimate,
                     numerical_estimate)


@dataclass(frozen=True)
class Plan:
    """What an engine will run: `engine` (numerical, dask, exact or certified), `route` (the
    engine's way of reading the rank, e.g. "full" or "eliminate" for the numerical engine),
    `samples` (the first N, or the N the caller fixed), `estimate` (the predicted peak, with its
    parts) and whether `check` has compared it with a budget."""

    engine: str
    route: str
    samples: int
    estimate: MemoryEstimate
    checked: bool = False

    def check(self, max_memory: object | None = None, skip: Callable[[], bool] | None = None
              ) -> Plan:
        """This plan, checked: `ResourceError` when its peak exceeds the budget (`max_memory`,
        default 80% of the available memory) unless `skip()` waives it (a GPU run)."""
        check_memory(self.estimate, max_memory, skip)
        return replace(self, checked=True)

    def describe(self, arch: Architecture | None = None) -> str:
        """One line: engine, route, N and the predicted peak; with `arch`, the work of the
        first pass (the Jacobian of N samples in every parameter, through every layer)."""
        text = f"plan: {self.engine} ({self.route}), N = {self.samples}; {self.estimate.describe()}"
        if arch is not None:
            text += (f"; first pass: the Jacobian of {self.samples} samples x {arch.n_params} "
                     f"parameters through {arch.n_layers} layers")
        return text


def numerical_plan(arch: Architecture, samples: int | None = None, *, route: str = "auto",
                   backend: str = "local", scheduler: str | None = None,
                   min_samples: int | None = None) -> Plan:
    """The numerical engine's plan. Route "auto" resolves to "eliminate" where the last value
    matrix is eliminated (`memory.eliminates`: a gauge applies and the free columns reach
    `ELIMINATE_MIN_COLUMNS`), else "full"; on Dask it is "full" and the peak is this machine's:
    the client, with the workers of a LocalCluster when no scheduler address is given."""
    if backend == "dask":
        estimate = (local_cluster_estimate(arch, LOCAL_WORKERS, samples) if scheduler is None
                    else dask_client_estimate(arch))
        return Plan("dask", "full", dask_worker_estimate(arch, samples).samples, estimate)
    if route == "auto":
        route = "eliminate" if eliminates(arch) else "full"
    estimate = numerical_estimate(arch, samples, min_samples, route=route)
    return Plan("numerical", route, estimate.samples, estimate)


def checked_numerical_plan(arch: Architecture, samples: int | None, max_memory: object | None,
                           device: str = "cpu", backend: str = "local", route: str = "auto",
                           scheduler: str | None = None, min_samples: int | None = None) -> Plan:
    """`numerical_plan`, its host peak checked against the budget. A run on `cuda` is checked
    against the GPU's free memory instead, once the device is resolved
    (`numerical.check_gpu_memory`), and `auto` waives the host check where a GPU will take the
    work. On Dask the peak is this machine's (remote workers check their own: `dask_rank`)."""
    plan = numerical_plan(arch, samples, route=route, backend=backend, scheduler=scheduler,
                          min_samples=min_samples)
    if backend == "dask":
        return plan.check(max_memory)
    if str(device) == "cuda":
        return plan
    return plan.check(max_memory, skip=lambda: str(device) == "auto" and cuda_available())


def cuda_available() -> bool:
    """Whether torch sees a GPU (imports torch: asked only when a plan is over budget)."""
    import torch  # noqa: PLC0415

    return torch.cuda.is_available()


def exact_plan(arch: Architecture, certify: bool = True, samples: int | None = None) -> Plan:
    """The exact engine's plan: the reverse pass mod p for the paper's model, forward-mode duals
    over F_p (`fp_dual`) for the other polynomial networks."""
    estimate = exact_estimate(arch, certify, samples)
    route = "forward-dual" if arch.is_block else "reverse"
    return Plan("exact", route, estimate.samples, estimate)


def certified_plan(arch: Architecture, samples: int | None = None,
                   precision: int = BALL_DEFAULT_PRECISION) -> Plan:
    """The certified engine's plan for non-polynomial networks: the float Jacobian that selects
    an r x r block, then that block in arb balls (`ball_dual`)."""
    estimate = certified_softmax_estimate(arch, samples, precision)
    return Plan("certified", "ball", estimate.samples, estimate)
