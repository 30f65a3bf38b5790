"""Dimension engines: a problem and its routes (api), the numerical, exact and certified engines, their plans (memory) and the result vocabulary."""
