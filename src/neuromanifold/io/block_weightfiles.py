"""Block network weight files: .npz archives of named blocks (never unpickled).

Keys (docs/blocks.md): `Q_i_h`, `K_i_h` (layer i, head h), `V_i_h` or `W_i_h` and `O_i_h`
(value and output projection), `P_i`, `U_i` (the MLP after layer i), `g_i`, `n_i` (norm gains
before the attention and the MLP). Widths, keys, heads, value widths and MLP widths are read off
the shapes; the residual flag, the activation and the norm kind are not in the file and are
passed by the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import bad_value
from .weightfiles import _load_arrays

_HEAD = re.compile(r"^([QKVWO])_([1-9][0-9]*)_([1-9][0-9]*)$")
_LAYER = re.compile(r"^([PUgn])_([1-9][0-9]*)$")


def is_block_file(path: str | Path, name: str = "weights") -> bool:
    """True when the archive names its blocks per head (Q_1_1, ...), as block files do; errors
    name the input `name`."""
    return any(_HEAD.match(k) for k in _load_arrays(Path(path), name))


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


@dataclass(frozen=True)
class NetworkFile:
    """A weight file read as one network: its architecture, its point, and how it was read.

    `point` is `LayerWeights` for the paper's model, or named float64 blocks for a block network;
    `reading` says which architecture was used and where each option came from (a flag, the
    file's shapes, or the format), for the first line of `rank` and `fiber` and their JSON."""

    arch: Architecture
    point: object
    format: str          # "paper" (Q_i, K_i, V_i or A_i, V_i) or "block" (Q_i_h, ...)
    reading: str

    def to_dict(self) -> dict:
        return {"format": self.format, "architecture": str(self.arch), "reading": self.reading}


def read_network_file(path: str | Path, *, tokens: int = 3, attention: str = "lightning",
                      residual: bool | None = None, activation: str | None = None,
                      norm: str | None = None, name: str = "weights") -> NetworkFile:
    """Read a paper-format or block weight file as the network the options name; never drop one.

    Options not stored in a file are taken from the caller (`None`: not given):
      residual    required for a block file whose widths are all equal (its shapes fit a
                  residual and a plain network alike); no residual where the widths differ.
      activation  required for a block file with an MLP (P_i, U_i); refused without one.
      norm        required for a file with norm gains (g_i, n_i); refused without them.
    A paper-format file (Q_i, K_i, V_i: one head, no MLP, no gains) given `residual=True` is
    read as the one-head block network with residual paths (Q_i_1 = Q_i, K_i_1 = K_i,
    V_i_1 = V_i); `activation` and `norm` are refused for it (it has no MLP and no gains).
    """
    from .weightfiles import read_weights  # noqa: PLC0415

    if not is_block_file(path, name):
        for option, value, why in (("activation", activation, "no MLP (P_i, U_i)"),
                                   ("norm", None if norm == "none" else norm, "no norm gains (g_i, n_i)")):
            if value is not None:
                raise bad_value(option, f"left out for a file in the paper's format (Q_i, K_i, V_i: "
                                f"{why})", value, f"Drop --{option}, or save a block file with "
                                "those blocks (docs/blocks.md).")
        data = read_weights(path, tokens=tokens, attention=attention, name=name)
        if not residual:
            flag = "--no-residual" if residual is False else "the paper's format"
            return NetworkFile(data.arch, data.layer_weights, "paper",
                               f"the paper's model: no residual ({flag}), one head, no MLP, no norm")
        w = data.layer_weights
        blocks = {}
        for i, (Q, K, V) in enumerate(zip(w.Q, w.K, w.V), start=1):
            blocks.update({f"Q_{i}_1": Q.numpy(), f"K_{i}_1": K.numpy(), f"V_{i}_1": V.numpy()})
        arch = Architecture(data.arch.widths, data.arch.keys, tokens, attention,
                            heads=(1,) * data.arch.n_layers, residual=True)
        return NetworkFile(arch, blocks, "block", "one-head block network with residual paths "
                           "(--residual on a file in the paper's format), no MLP, no norm")
    arrays = _load_arrays(Path(path), name)
    has_mlp = any(_LAYER.match(k) and k[0] in "PU" for k in arrays)
    has_gains = any(_LAYER.match(k) and k[0] in "gn" for k in arrays)
    if not has_mlp and activation is not None:
        raise bad_value("activation", "left out for a block file without an MLP (no P_i, U_i)",
                        activation, "Drop --activation.")
    if not has_gains and norm not in (None, "none"):
        raise bad_value("norm", "left out for a block file without norm gains (no g_i, n_i)",
                        norm, "Drop --norm, or save the gains g_i, n_i in the file.")
    arch, blocks = read_block_weights(path, tokens=tokens, attention=attention, residual=False,
                                      activation=activation or "square", norm=norm or "none",
                                      name=name)
    if residual is None and len(set(arch.widths)) == 1:
        raise bad_value("residual", f"given (--residual or --no-residual) for a block file whose "
                        f"widths are all equal ({','.join(map(str, arch.widths))}): its shapes fit "
                        "a residual and a plain network alike", "neither flag",
                        "Pass --residual or --no-residual.")
    if has_mlp and activation is None:
        raise bad_value("activation", "given for a block file with an MLP (P_i, U_i): the file "
                        "does not store it", "no --activation",
                        "Pass --activation square, relu, gelu or tanh.")
    if residual:
        arch = replace(arch, residual=True)
    parts = [("residual (--residual)" if residual else
              "no residual (--no-residual)" if residual is False else
              "no residual (the widths differ, so none is possible)")]
    parts.append(f"MLP activation {activation} (--activation)" if has_mlp else "no MLP")
    parts.append(f"norm {arch.norm} (--norm)" if has_gains else "no norm")
    if not arch.is_block:  # one head, plain, no MLP, no norm: the paper's model exactly
        import torch  # noqa: PLC0415

        from ..core.parameters import LayerWeights  # noqa: PLC0415

        layers = range(1, arch.n_layers + 1)
        point = LayerWeights(*(tuple(torch.from_numpy(blocks[f"{m}_{i}_1"]) for i in layers)
                               for m in "QKV"))
        return NetworkFile(arch, point, "paper", "the paper's model (a one-head block file): "
                           + ", ".join(parts))
    return NetworkFile(arch, blocks, "block", "block network: " + ", ".join(parts))
