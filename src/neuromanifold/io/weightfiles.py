"""Reading network weights from .npz files (never unpickled) and inferring the architecture.

File format: one array per block, named `Q_i, K_i, V_i` (i = 1..l), or `A_i, V_i` in place of
`Q_i, K_i` (A_i = Q_i^T K_i). Shapes (docs/math/notation.md): Q_i, K_i in R^{a_i x d_{i-1}},
V_i in R^{d_i x d_{i-1}}, A_i in R^{d_{i-1} x d_{i-1}}. A layer given by A_i gets a_i = d_{i-1}
and the exact factorisation Q_i = I, K_i = A_i (integer entries stay integers).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.checks import bad_value, check_weights_type
from ..core.finite import largest_entry, require_finite
from ..errors import ResourceError
from ..core.parameters import AttentionWeights, LayerWeights

_NAME = re.compile(r"^([QKVA])_([1-9][0-9]*)$")
# Every member name either reader accepts: the paper's model (_NAME) or a block network
# (per-head Q_i_h, K_i_h, V_i_h, W_i_h, O_i_h; per-layer P_i, U_i, g_i, n_i: docs/blocks.md).
# Each reader then checks the names of its own format.
_MEMBER = re.compile(r"^(?:[QKVA]_[1-9][0-9]*|[QKVWO]_[1-9][0-9]*_[1-9][0-9]*|[PUgn]_[1-9][0-9]*)$")

# What a weight file may hold (checked from the .npy headers before any data is read).
MAX_SIDE = 2_000                  # rows or columns of one matrix
MAX_ENTRIES = 4_000_000           # entries of one matrix
MAX_TOTAL_BYTES = 64 * 2 ** 20    # all matrices together


@dataclass(frozen=True)
class WeightFile:
    """The weights read from one file: architecture, per-layer weights, and (A_i, V_i)."""

    path: str
    arch: Architecture
    layer_weights: LayerWeights
    attention_weights: AttentionWeights
    given_as_attention: tuple[bool, ...]


def _fail(name: str, requirement: str, got: object, fix: str) -> ValueError:
    return bad_value(name, requirement, got, fix)


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype]:
    """(shape, dtype) declared by the .npy header of one archive member, without its data."""
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    return shape, dtype


def _check_members(path: Path, name: str, zf: zipfile.ZipFile) -> None:
    """Refuse, before any data is read, members that are not 2-D numeric .npy arrays within the
    limits (MAX_SIDE per axis, MAX_ENTRIES per array, MAX_TOTAL_BYTES in all)."""
    total = 0
    for info in zf.infolist():
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if not info.filename.endswith(".npy") or not _MEMBER.match(key):
            raise _fail(name, "arrays named Q_i, K_i, V_i or A_i, V_i (i = 1..l), or the block "
                        "names Q_i_h, K_i_h, V_i_h, W_i_h, O_i_h, P_i, U_i, g_i, n_i, in an .npz archive",
                        f"{path}: member {info.filename!r}",
                        "Save only the blocks, with numpy.savez(path, Q_1=..., K_1=..., V_1=...).")
        member = f"{name}:{key}"
        try:
            shape, dtype = _member_header(zf, info)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError, TypeError):
            raise _fail(member, "a .npy array (numpy.savez)", f"{path}: member {info.filename!r} "
                        "with no readable array header", "Save the blocks with numpy.savez.") from None
        if dtype.hasobject or dtype.kind not in "iuf":
            raise _fail(member, "a 2-D array of real numbers (float or integer dtype, no pickled objects)",
                        f"{path}: dtype {dtype}", "Save a float or integer matrix.")
        if len(shape) != 2:
            raise _fail(member, "a 2-D array of real numbers", f"{path}: shape {tuple(shape)}",
                        "Save a matrix (2-D array).")
        entries = shape[0] * shape[1]
        if max(shape) > MAX_SIDE or entries > MAX_ENTRIES:
            raise ResourceError(
                f"`{member}` must have at most {MAX_SIDE} rows and columns and {MAX_ENTRIES} entries; "
                f"got shape {tuple(shape)} in {path}. Pass a smaller network.")
        total += entries * dtype.itemsize
        if total > MAX_TOTAL_BYTES:
            raise ResourceError(
                f"`{name}` must hold at most {MAX_TOTAL_BYTES // 2 ** 20} MiB of arrays; got more "
                f"({total / 2 ** 20:.0f} MiB up to member {key}) in {path}. Pass a smaller network.")


def _load_arrays(path: Path, name: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise _fail(name, "an existing .npz file", str(path), "Check the path, or save one with numpy.savez.")
    try:
        with zipfile.ZipFile(path) as zf:
            _check_members(path, name, zf)
    except (zipfile.BadZipFile, OSError, EOFError):
        raise _fail(name, "a readable .npz archive of numeric arrays (never unpickled)", str(path),
                    "Save the blocks with numpy.savez(path, Q_1=..., K_1=..., V_1=...).") from None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        raise _fail(name, "an .npz archive of numeric arrays whose data matches their headers",
                    str(path), "Save plain float or integer arrays with numpy.savez.") from None


def read_weights(path: str | Path, *, tokens: int = 3, attention: str = "lightning",
                 name: str = "weights") -> WeightFile:
    """Read `Q_i, K_i, V_i` (or `A_i, V_i`) arrays from an .npz file; infer widths and keys.

    Raises the template InputError for a missing, unreadable, pickled, misnamed, non-numeric,
    non-finite or shape-inconsistent file, and ResourceError (before reading any data) for a
    matrix over MAX_SIDE x MAX_SIDE or MAX_ENTRIES, or over MAX_TOTAL_BYTES in all.
    """
    path = Path(path)
    arrays = _load_arrays(path, name)
    blocks: dict[int, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        match = _NAME.match(key)
        if not match:
            raise _fail(name, "arrays named Q_i, K_i, V_i or A_i, V_i (i = 1..l)", key,
                        f"Rename or remove the array {key!r} in {path}.")
        if value.dtype.kind not in "iuf" or value.ndim != 2:
            raise _fail(f"{name}:{key}", "a 2-D array of real numbers",
                        f"{value.ndim}-D array of dtype {value.dtype}", "Save a float or integer matrix.")
        if not np.all(np.isfinite(value)):
            raise _fail(f"{name}:{key}", "finite", "an array with nan or inf", "Replace the non-finite entries.")
        blocks.setdefault(int(match.group(2)), {})[match.group(1)] = value.astype(np.float64)
    if not blocks:
        raise _fail(name, "a file with at least one layer", "no arrays", "Save Q_1, K_1, V_1 at least.")
    n_layers = max(blocks)
    widths: list[int] = []
    keys: list[int] = []
    Qs, Ks, Vs, As, given_A = [], [], [], [], []
    for i in range(1, n_layers + 1):
        layer = blocks.get(i, {})
        has_qk = "Q" in layer or "K" in layer
        if "V" not in layer or ("A" in layer) == has_qk or (has_qk and not ("Q" in layer and "K" in layer)):
            raise _fail(name, f"layer {i} given as Q_{i}, K_{i}, V_{i} or as A_{i}, V_{i}",
                        sorted(f"{k}_{i}" for k in layer), f"Save exactly one of these forms for layer {i}.")
        V = layer["V"]
        d_in = V.shape[1]
        if widths and widths[-1] != d_in:
            raise _fail(f"{name}:V_{i}", f"of shape (d_{i}, {widths[-1]}) (d_{i - 1} = rows of V_{i - 1})",
                        V.shape, f"Make V_{i} have {widths[-1]} columns.")
        if "A" in layer:
            A = layer["A"]
            if A.shape != (d_in, d_in):
                raise _fail(f"{name}:A_{i}", f"of shape ({d_in}, {d_in}) (d_{i - 1} x d_{i - 1})", A.shape,
                            f"Make A_{i} square of size d_{i - 1} = {d_in}.")
            Q, K = np.eye(d_in), A
            given_A.append(True)
        else:
            Q, K = layer["Q"], layer["K"]
            if Q.shape != K.shape or Q.shape[1] != d_in:
                raise _fail(f"{name}:Q_{i},K_{i}", f"both of shape (a_{i}, {d_in})",
                            f"{Q.shape} and {K.shape}", f"Give Q_{i} and K_{i} the same shape (a_{i}, d_{i - 1}).")
            with np.errstate(over="ignore", invalid="ignore"):
                A = Q.T @ K
            require_finite(A, f"products A_{i} = Q_{i}^T K_{i}", input_name=f"{name}:Q_{i},K_{i}",
                           largest=largest_entry([Q, K]))
            given_A.append(False)
        if not widths:
            widths.append(d_in)
        widths.append(V.shape[0])
        keys.append(Q.shape[0])
        Qs.append(torch.from_numpy(np.ascontiguousarray(Q)))
        Ks.append(torch.from_numpy(np.ascontiguousarray(K)))
        Vs.append(torch.from_numpy(V))
        As.append(torch.from_numpy(np.ascontiguousarray(A)))
    arch = Architecture(tuple(widths), tuple(keys), tokens, attention)
    return WeightFile(str(path), arch, LayerWeights(tuple(Qs), tuple(Ks), tuple(Vs)),
                      AttentionWeights(tuple(As), tuple(Vs)), tuple(given_A))


def write_weights(path: str | Path, weights: LayerWeights | AttentionWeights) -> Path:
    """Save weights as an .npz file readable by `read_weights` (refuses to overwrite)."""
    check_weights_type("weights", weights, (LayerWeights, AttentionWeights))
    path = Path(path)
    if path.exists():
        raise _fail("path", "a new file", str(path), "Pick another file name or delete the old one.")
    arrays = {}
    for i in range(weights.n_layers):
        if isinstance(weights, LayerWeights):
            arrays[f"Q_{i + 1}"] = weights.Q[i].numpy()
            arrays[f"K_{i + 1}"] = weights.K[i].numpy()
        else:
            arrays[f"A_{i + 1}"] = weights.A[i].numpy()
        arrays[f"V_{i + 1}"] = weights.V[i].numpy()
    with path.open("wb") as fh:
        np.savez(fh, **arrays)
    return path
