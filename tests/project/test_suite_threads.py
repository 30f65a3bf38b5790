"""The test command runs on two pytest-xdist workers (README, .ci/run); each computes with one
thread (tests/conftest.py), set before torch was imported, so two workers of two threads do not
spin in each other's way on two cores."""

from __future__ import annotations

import os

import pytest


def test_an_xdist_worker_computes_with_one_thread():
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("one process (no -n): torch keeps its own thread count")
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
