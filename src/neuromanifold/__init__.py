"""neuromanifold: geometry of the function spaces of self-attention networks.

Dimensions (numerical, exact over F_p, certified), fibers and symmetries, and singular points of
the neuromanifolds of lightning and softmax self-attention networks. The public API is listed in
`__all__`; names are imported on first use, so `import neuromanifold` stays light (no torch,
python-flint, dask or matplotlib until a computation needs them).
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING

__version__ = "0.2.0.dev0"

# public name -> module (relative to this package) that defines it
_EXPORTS = {
    "Architecture": "core.architecture",
    "LayerWeights": "core.parameters",
    "AttentionWeights": "core.parameters",
    "VirtualWeights": "core.parameters",
    "random_weights": "core.parameters",
    "random_inputs": "core.parameters",
    "forward": "core.maps",
    "symmetry_tangents": "symmetries.paper",
    "expected_dim": "core.formulas",
    "FormulaValue": "core.formulas",
    "neuromanifold_dim": "dimension.api",
    "DimensionProblem": "dimension.api",
    "solve": "dimension.api",
    "DimensionResult": "dimension.result",
    "rank_at_point": "dimension.point",
    "functional_dim": "models.functional",
    "load_checkpoint": "models.checkpoint",
    "checkpoint_rank": "models.checkpoint",
    "Checkpoint": "models.checkpoint",
    "degree": "degrees.network",
    "image_degree": "degrees.engine",
    "DegreeResult": "degrees.engine",
    "implicit_equations": "degrees.equations",
    "structured_degree": "degrees.structure",
    "ed_degree": "degrees.ed",
    "image_ed_degree": "degrees.ed",
    "EDDegreeResult": "degrees.ed",
    "same_function": "geometry.fibers",
    "FiberResult": "geometry.fibers",
    "classify_layer": "geometry.classify",
    "read_weights": "io.weightfiles",
    "write_weights": "io.weightfiles",
    "results_frame": "sweeps.frames",
    "PointRank": "dimension.point",
    "NeuromanifoldError": "errors",
    "InputError": "errors",
    "AmbiguousRankError": "errors",
    "ComputationError": "errors",
}
# Names the README of 0.1 documented at the top level; public too (docs/api.md, the tutorial).
_COMPATIBLE = {
    "numerical_dim": "dimension.numerical",
    "flatten": "core.parameters",
    "unflatten": "core.parameters",
    "forward_attention": "core.maps",
    "forward_closed_form": "core.maps",
    "forward_virtual": "core.maps",
    "act_between_layers": "symmetries.paper",
    "act_keys": "symmetries.paper",
    "act_rescale": "symmetries.paper",
    "effective_width": "core.formulas",
    "eq7": "core.formulas",
    "eq14": "core.formulas",
    "eq16": "core.formulas",
    "apply_witness": "geometry.fibers",
    "canonical_form": "geometry.fibers",
    "random_fiber_point": "geometry.fibers",
    "LayerClassification": "geometry.classify",
    "WeightFile": "io.weightfiles",
}

__all__ = sorted(_EXPORTS | _COMPATIBLE)


def __getattr__(name: str):
    module = _EXPORTS.get(name) or _COMPATIBLE.get(name)
    if module is None:
        raise AttributeError(f"module 'neuromanifold' has no attribute {name!r}")
    value = getattr(_import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's own dunders (no helpers, no loaded submodules)."""
    return sorted(set(__all__) | {"__version__", "__all__", "__doc__", "__name__", "__file__",
                                  "__path__", "__spec__"})


del annotations  # the `from __future__` feature object is no public name

if _TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .core.architecture import Architecture
    from .core.formulas import FormulaValue, expected_dim
    from .core.maps import forward
    from .core.parameters import (AttentionWeights, LayerWeights, VirtualWeights, random_inputs,
                                  random_weights)
    from .symmetries.paper import symmetry_tangents
    from .dimension.api import DimensionProblem, neuromanifold_dim, solve
    from .dimension.point import rank_at_point
    from .dimension.result import DimensionResult
    from .models.checkpoint import Checkpoint, checkpoint_rank, load_checkpoint
    from .models.functional import functional_dim
    from .degrees.engine import DegreeResult, image_degree
    from .degrees.ed import EDDegreeResult, ed_degree, image_ed_degree
    from .degrees.equations import implicit_equations
    from .degrees.network import degree
    from .degrees.structure import structured_degree
    from .errors import AmbiguousRankError, ComputationError, InputError, NeuromanifoldError
    from .geometry.classify import classify_layer
    from .geometry.fibers import FiberResult, same_function
    from .dimension.point import PointRank
    from .sweeps.frames import results_frame
    from .io.weightfiles import read_weights, write_weights
