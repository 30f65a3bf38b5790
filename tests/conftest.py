"""Shared helpers for the tests (no fixtures with hidden state), and the session's garbage
collector kept cheap.

A full collection walks every object the collector tracks: with torch, transformers and
distributed imported that is 400,000-600,000 objects, 0.25-0.4 s of CPU each time. The code
under test calls `gc.collect()` itself (`models.canonical.release`, 4-10 times a command), so
tests/models/test_canonical_checkpoints.py spent most of its time in the collector (370 s of
its 509 s in one loaded full run). What is still alive after the collection and after each
test's teardown is collected once and then frozen (`gc.freeze`: left out of later collections,
still freed as usual when its last reference goes); a collection then walks only what the
current test has made.
"""

from __future__ import annotations

import gc
import os

import pytest

# Under pytest-xdist (`-n 2`) each worker computes with one thread, set before torch is imported
# and inherited by the commands the tests start: two workers of two threads each on two cores
# spin in each other's way (a small LAPACK call slowed 30 times in one loaded run).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_name] = "1"


def _freeze() -> None:
    gc.collect()   # garbage now is collected first: only what is still alive is frozen
    gc.freeze()


def pytest_collection_finish(session) -> None:
    _freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    _freeze()
    return result


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
