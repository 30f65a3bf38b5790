"""Block network weight files: .npz archives of named blocks (never unpickled).

Keys (docs/blocks.md): `Q_i_h`, `K_i_h` (layer i, head h), `V_i_h` or `W_i_h` and `O_i_h`
(value and output projection), `P_i`, `U_i` (the MLP after layer i), `g_i`, `n_i` (norm gains
before the attention and the MLP). Widths, keys, heads, value widths and MLP widths are read off
the shapes; the residual flag, the activation and the norm kind are not in the file and are
passed by the caller.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import bad_value
from .weightfiles import _load_arrays

_HEAD = re.compile(r"^([QKVWO])_([1-9][0-9]*)_([1-9][0-9]*)$")
_LAYER = re.compile(r"^([PUgn])_([1-9][0-9]*)$")


def is_block_file(path: str | Path) -> bool:
    """True when the archive names its blocks per head (Q_1_1, ...), as block files do."""
    return any(_HEAD.match(k) for k in _load_arrays(Path(path), "weights"))


def read_block_weights(path: str | Path, *, tokens: int = 3, attention: str = "lightning",
                       residual: bool = False, activation: str = "square", norm: str = "none",
                       name: str = "weights") -> tuple[Architecture, dict[str, np.ndarray]]:
    """(architecture, named float64 blocks) of a block weight file; every name and shape checked."""
    from ..geometry.block_fibers import check_block_weights  # noqa: PLC0415

    arrays = _load_arrays(Path(path), name)
    heads: dict[int, set[int]] = {}
    for key, value in arrays.items():
        match = _HEAD.match(key) or _LAYER.match(key)
        if not match:
            raise bad_value(name, "arrays named Q_i_h, K_i_h, V_i_h (or W_i_h, O_i_h), P_i, U_i, g_i, "
                            "n_i", key, f"Rename or remove the array {key!r} (docs/blocks.md).")
        if value.dtype.kind not in "iuf" or value.ndim != 2 or not np.all(np.isfinite(value)):
            raise bad_value(f"{name}:{key}", "a finite 2-D array of real numbers",
                            f"{value.ndim}-D array of dtype {value.dtype}", "Save a float or integer matrix.")
        if _HEAD.match(key):
            heads.setdefault(int(match.group(2)), set()).add(int(match.group(3)))
    if not heads:
        raise bad_value(name, "a block file with Q_1_1, K_1_1 at least", sorted(arrays),
                        "Save the blocks named as in docs/blocks.md.")
    n_layers = max(heads)
    widths, keys, head_counts, values, mlp = [], [], [], [], []
    for i in range(1, n_layers + 1):
        hs = heads.get(i, set())
        if hs != set(range(1, len(hs) + 1)) or not hs:
            raise bad_value(name, f"heads 1..H of layer {i}", sorted(hs), f"Save Q_{i}_1, K_{i}_1, ... for layer {i}.")
        for need in (f"Q_{i}_1", f"K_{i}_1"):
            if need not in arrays:
                raise bad_value(name, f"a block {need}", sorted(arrays), f"Add {need}.")
        factored = f"W_{i}_1" in arrays
        out_block = arrays.get(f"O_{i}_1" if factored else f"V_{i}_1")
        if out_block is None:
            raise bad_value(name, f"a value block V_{i}_1 or W_{i}_1 and O_{i}_1", sorted(arrays),
                            "Add the value blocks of every head.")
        if not widths:
            widths.append(arrays[f"Q_{i}_1"].shape[1])
        widths.append(out_block.shape[0])
        keys.append(arrays[f"Q_{i}_1"].shape[0])
        head_counts.append(len(hs))
        values.append(arrays[f"W_{i}_1"].shape[0] if factored else None)
        mlp.append(arrays[f"P_{i}"].shape[0] if f"P_{i}" in arrays else 0)
    if len({v is None for v in values}) > 1:
        raise bad_value(name, "value widths in every layer or in none", values,
                        "Save W_i_h, O_i_h in every layer, or V_i_h in every layer.")
    if any(k[0] in "gn" for k in arrays) and norm == "none":
        raise bad_value("norm", "layernorm or rmsnorm for a file with norm gains g_i", norm,
                        "Pass --norm layernorm or --norm rmsnorm.")
    arch = Architecture(tuple(widths), tuple(keys), tokens, attention, heads=tuple(head_counts),
                        values=None if values[0] is None else tuple(values), residual=residual,
                        mlp=tuple(mlp), activation=activation, norm=norm)
    blocks = {k: v.astype(np.float64) for k, v in arrays.items()}
    check_block_weights(arch, blocks, name)
    return arch, blocks


def write_block_weights(path: str | Path, blocks: dict[str, np.ndarray]) -> Path:
    """Save named blocks as an .npz readable by `read_block_weights` (refuses to overwrite)."""
    path = Path(path)
    if path.exists():
        raise bad_value("path", "a new file", str(path), "Pick another file name or delete the old one.")
    with path.open("wb") as fh:
        np.savez(fh, **{k: np.asarray(v, dtype=np.float64) for k, v in blocks.items()})
    return path
