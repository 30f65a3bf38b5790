"""neuromanifold: geometry of the function spaces of self-attention networks.

Implements Henry, Marchetti, Kohn, "Geometry of Lightning Self-Attention: Identifiability and
Dimension" (ICLR 2025), with exact and certified dimensions. The public API is re-exported here.
"""

from .architecture import Architecture
from .checks import AmbiguousRankError, NeuromanifoldError
from .dimension import DimensionResult, neuromanifold_dim, numerical_dim
from .fibers import (FiberResult, apply_witness, canonical_form, random_fiber_point,
                     same_function)
from .formulas import FormulaValue, effective_width, eq7, eq14, eq16, expected_dim
from .geometry import LayerClassification, classify_layer
from .maps import forward, forward_attention, forward_closed_form, forward_virtual
from .parameters import (AttentionWeights, LayerWeights, VirtualWeights, flatten, random_inputs,
                         random_weights, unflatten)
from .symmetries import act_between_layers, act_keys, act_rescale, symmetry_tangents
from .weightfiles import WeightFile, read_weights, write_weights

__all__ = [
    "Architecture", "AmbiguousRankError", "NeuromanifoldError", "DimensionResult",
    "neuromanifold_dim", "numerical_dim", "FormulaValue", "effective_width", "eq7", "eq14", "eq16",
    "expected_dim", "forward", "forward_attention", "forward_closed_form", "forward_virtual",
    "AttentionWeights", "LayerWeights", "VirtualWeights", "flatten", "random_inputs",
    "random_weights", "unflatten", "act_between_layers", "act_keys", "act_rescale",
    "symmetry_tangents", "FiberResult", "apply_witness", "canonical_form", "random_fiber_point",
    "same_function", "LayerClassification", "classify_layer", "WeightFile", "read_weights",
    "write_weights",
]
