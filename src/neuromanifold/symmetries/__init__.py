"""Symmetries of the parametrisation: one registry of families (`registry`), their tangent
constructions for networks with heads, values, residuals, MLPs and norms (`catalogue`) and for the
paper's model (`paper`), in float and over F_p alike."""
