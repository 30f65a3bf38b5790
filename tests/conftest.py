"""Shared helpers for the tests (no fixtures with hidden state)."""

from __future__ import annotations


def random_matrix(*shape: int, seed: int):
    """A float64 tensor of standard normals from its own seeded generator (the tests' one source
    of random matrices; network inputs come from `neuromanifold.random_inputs`)."""
    import torch

    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def signed_rows(R):
    """R with rows signed so that its diagonal is non-negative (a QR factor is unique up to these
    signs when the matrix has full column rank)."""
    import torch

    s = torch.sign(torch.diagonal(R))
    return R * torch.where(s == 0, torch.ones_like(s), s)[:, None]
