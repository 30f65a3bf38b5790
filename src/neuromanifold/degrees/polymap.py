"""A polynomial network's map over F_p polynomials: the one block forward, run on object arrays.

Math: for a polynomial network (lightning attention, square or no MLP, no norm) every output
entry of phi_W(X) is a polynomial with integer coefficients in the parameters W and the input
entries X. `core.blocks.block_forward` is run unchanged on numpy object arrays whose entries are
python-flint `nmod_mpoly` (polynomials over F_p) or python ints, so no second copy of the map
exists; the paper's single-head model is the block network with one head per layer.

Two uses:
- `network_map`: W symbolic (the free parameters as variables, the others fixed residues), X a
  list of N fixed input sequences over F_p: the polynomial map F_p^n -> F_p^{N d_l t}.
- `function_coefficients`: W fixed residues, X symbolic: the coefficients of phi_W in the input
  monomials, that is the point phi_W of the function space itself (no evaluation involved).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..core.architecture import Architecture
from ..core.blocks import block_forward, block_layout
from ..core.checks import bad_value


def object_array(shape: tuple[int, ...], entries: Sequence) -> np.ndarray:
    """A numpy object array of `shape` holding `entries` in row-major order, one object each.

    (np.array would iterate python-flint polynomials as sequences; this never does.)
    """
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i, value in enumerate(entries):
        flat[i] = value
    return out


def check_polynomial(arch: Architecture) -> Architecture:
    """`arch` unchanged if its map is polynomial; else the one-line bad-input error."""
    if not isinstance(arch, Architecture):
        raise TypeError(f"`arch` must be an Architecture; got {type(arch).__name__}. "
                        "Build one with neuromanifold.Architecture(widths, keys, tokens).")
    if arch.positions == "rope":
        raise bad_value("positions", "'none' or 'learned' for a degree (rotary rotations have "
                        "rational, not integer, entries; the degree engine works with integer "
                        "polynomials)", arch.positions, "Use --positions none or learned.")
    if arch.vocab is not None:
        raise bad_value("vocab", "left out for a degree (the degree engine takes continuous "
                        "inputs, not token ids)", arch.vocab, "Drop --vocab.")
    if not arch.is_polynomial:
        name, got, fix = (("attention", arch.attention, "Use --attention lightning.")
                          if arch.attention != "lightning" else
                          ("norm", arch.norm, "Use --norm none.") if arch.norm != "none" else
                          ("activation", arch.activation, "Use --activation square."))
        raise bad_value(name, "polynomial (lightning attention, square or no MLP, no norm): the "
                        "neuromanifold of any other network is not algebraic and has no degree",
                        got, fix)
    return arch


def blocks_from_flat(arch: Architecture, values: Sequence) -> dict[str, np.ndarray]:
    """Named blocks (object arrays) from a flat sequence of n_params entries in layout order."""
    return {name: object_array(shape, values[offset: offset + shape[0] * shape[1]])
            for name, shape, offset in block_layout(arch)}


def forward_objects(arch: Architecture, values: Sequence, inputs: np.ndarray) -> list:
    """phi_W(X_1..X_N) flattened in the order (n, d_l, t), over whatever ring the entries live in.

    `values`: n_params entries (ints, nmod_mpoly); `inputs`: object array (N, d_0, t).
    """
    out = block_forward(arch, blocks_from_flat(arch, values), inputs)
    return list(np.asarray(out).reshape(-1))


def network_map(arch: Architecture, inputs: np.ndarray,
                poll: Callable[[], None] | None = None) -> Callable[[Sequence], list]:
    """The polynomial map W -> (phi_W(X_1), ..., phi_W(X_N)) at fixed inputs (N, d_0, t).

    With `poll` (e.g. a deadline's check, which raises), the N inputs are run one at a time and
    `poll()` is called before each: a symbolic forward is a chain of C calls on polynomials
    that no signal interrupts, so the time limit is enforced between inputs.
    """
    if poll is None:
        return lambda values: forward_objects(arch, values, inputs)

    def F(values: Sequence) -> list:
        out: list = []
        for n in range(inputs.shape[0]):
            poll()
            out += forward_objects(arch, values, inputs[n:n + 1])
        return out
    return F


def coefficient_polynomials(arch: Architecture, weights: Sequence[int], p: int) -> list:
    """phi_W(X) for fixed residues W and symbolic X: its d_l t output entries as nmod_mpoly in
    the d_0 t input entries (a python int where no input monomial survived)."""
    import flint  # noqa: PLC0415 - python-flint is the exact-arithmetic dependency

    d0, t = arch.widths[0], arch.tokens
    ctx = flint.nmod_mpoly_ctx.get(("x", d0 * t), modulus=p)
    X = object_array((1, d0, t), ctx.gens())
    return forward_objects(arch, [int(w) % p for w in weights], X)


def function_coefficients(arch: Architecture, weights: Sequence[int], p: int) -> dict:
    """{(output entry (k, i), input monomial): coefficient mod p} of phi_W for fixed residues W.

    Math: phi_W(X)_{ki} = sum_m c_{k,i,m}(W) X^m; the vector c(W) is phi_W as a point of the
    space of polynomial maps, so linear algebra on c needs no random inputs.
    """
    coefficients = {}
    for index, poly in enumerate(coefficient_polynomials(arch, weights, p)):
        if isinstance(poly, int):  # a zero output (no input monomial survived)
            continue
        for monomial, c in poly.to_dict().items():
            if int(c):
                coefficients[(index, monomial)] = int(c)
    return coefficients
