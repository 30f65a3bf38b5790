"""The exact route of a small network runs without torch (issue 39) and answers what torch did."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.seeds import ResidueStream, purpose_seed, seeded_generator, seeded_residues
from neuromanifold.dimension import exact as exact_module
from neuromanifold.dimension.exact import exact_dim
from neuromanifold.dimension.modular import (all_symmetry_tangents, jacobian_rows_mod_p,
                                             random_residues, random_weights_mod_p,
                                             staircase_rank_mod_p)


@pytest.mark.parametrize("n", [3, 101, 2 ** 28 - 1, 2 ** 28, 2_147_483_629])
def test_residue_stream_draws_what_torch_draws(n):
    """ResidueStream(s).randint(n, shape) equals torch.randint(0, n, shape) from manual_seed(s),
    call after call, on both sides of torch's 2^28 switch to 64-bit draws."""
    for seed in (0, 7, purpose_seed(3, "exact")):
        gen, stream = torch.Generator().manual_seed(seed), ResidueStream(seed)
        for shape in ((3, 5), (7,), (2, 3, 11), ()):
            expected = torch.randint(0, n, shape, generator=gen, dtype=torch.int64).numpy()
            assert np.array_equal(stream.randint(n, shape), expected)


def test_residue_stream_differs_between_seeds():
    """Two seeds give two streams (the check above cannot pass by drawing constants)."""
    a, b = ResidueStream(1).randint(101, (50,)), ResidueStream(2).randint(101, (50,))
    assert not np.array_equal(a, b) and len(set(a.tolist())) > 10


@pytest.mark.parametrize("widths,keys,tokens", [((3, 5, 3), (2, 2), 3), ((5, 4, 3), (2, 3), 3),
                                                ((4, 2, 5), (1, 2), 2), ((6, 3, 2), (1, 1), 4)])
def test_numpy_rows_and_tangents_equal_torch_ones(widths, keys, tokens):
    """Jacobian rows, symmetry tangents (hidden and read-out ones included) and their staircase
    rank over F_p: the numpy arrays hold the integers the torch tensors hold."""
    arch, p = Architecture(widths, keys, tokens), 2_147_483_629
    w_np = random_weights_mod_p(arch, p, seeded_residues(4, "exact"))
    w_t = random_weights_mod_p(arch, p, seeded_generator(4, "exact"))
    assert isinstance(w_np.V[0], np.ndarray) and isinstance(w_t.V[0], torch.Tensor)
    stream, gen = seeded_residues(5, "x"), seeded_generator(5, "x")
    X_np = random_residues((3, widths[0], tokens), p, stream)
    G_np = random_residues((3, 2, widths[-1], tokens), p, stream)
    X_t = random_residues((3, widths[0], tokens), p, gen)
    G_t = random_residues((3, 2, widths[-1], tokens), p, gen)
    rows_np, rows_t = jacobian_rows_mod_p(w_np, X_np, G_np, p), jacobian_rows_mod_p(w_t, X_t, G_t, p)
    assert isinstance(rows_np, np.ndarray) and np.array_equal(rows_np, rows_t.numpy())
    (tan_np, lab_np, skip_np), (tan_t, lab_t, skip_t) = (all_symmetry_tangents(arch, w, p)
                                                         for w in (w_np, w_t))
    assert np.array_equal(tan_np, tan_t.numpy()) and (lab_np, skip_np) == (lab_t, skip_t)
    bounds = exact_module.staircase_boundaries(arch)
    assert staircase_rank_mod_p(tan_np, bounds, p) == staircase_rank_mod_p(tan_t, bounds, p)


@pytest.mark.parametrize("certify", [True, False])
@pytest.mark.parametrize("widths,keys,tokens", [((3, 5, 3), (2, 2), 3), ((4, 2, 5), (1, 2), 2),
                                                ((5, 3), (2,), 4)])
def test_numpy_route_answers_what_torch_route_answers(monkeypatch, widths, keys, tokens, certify):
    """exact_dim on numpy and on torch (NUMPY_MAX_PARAMS forced to 0): the same result, field by
    field, but the seconds."""
    arch = Architecture(widths, keys, tokens)
    assert exact_module.use_numpy(arch)
    on_numpy = exact_dim(arch, certify=certify, seed=3).to_dict()
    monkeypatch.setattr(exact_module, "NUMPY_MAX_PARAMS", 0)
    assert not exact_module.use_numpy(arch)
    on_torch = exact_dim(arch, certify=certify, seed=3).to_dict()
    on_numpy.pop("seconds"), on_torch.pop("seconds")
    assert on_numpy == on_torch


def test_readme_example_imports_no_torch():
    """`dim --widths 3,5,3 --keys 2,2 --tokens 3` (the README's) certifies 23 without torch."""
    code = ("import sys; from neuromanifold.cli import main; "
            "code = main(['dim', '--widths', '3,5,3', '--keys', '2,2', '--tokens', '3']); "
            "print('torch' in sys.modules, code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "23  [certified: 23 <= dim <= 23" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False 0", out.stdout + out.stderr
