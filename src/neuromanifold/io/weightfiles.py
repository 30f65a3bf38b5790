"""Network weights in .npz files (never unpickled): one reader for every network.

Two spellings of the same parameters, one archive format (every member a 2-D numeric .npy array,
checked from its header before any data is read):
- the paper's model: `Q_i, K_i, V_i` (i = 1..l), or `A_i, V_i` in place of `Q_i, K_i`
  (A_i = Q_i^T K_i). Shapes (docs/math/notation.md): Q_i, K_i in R^{a_i x d_{i-1}},
  V_i in R^{d_i x d_{i-1}}, A_i in R^{d_{i-1} x d_{i-1}}. A layer given by A_i gets a_i = d_{i-1}
  and the exact factorisation Q_i = I, K_i = A_i (integer entries stay integers).
- any network (docs/blocks.md): `Q_i_h`, `K_i_h` (layer i, head h), `V_i_h` or `W_i_h` and
  `O_i_h` (value and output projection), `P_i`, `U_i` (the MLP after layer i), `g_i`, `n_i` (norm
  gains before the attention and the MLP). The paper's names are the one-head spelling:
  `Q_i` is `Q_i_1` of a network with one head, no MLP and no norm.
Widths, keys, heads, value widths and MLP widths are read off the shapes; the residual flag, the
activation and the norm kind are not in a file and come from the caller (`read_network_file`
says which options it used and refuses a file whose shapes fit two readings).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.blocks import check_block_weights
from ..core.checks import bad_value, check_weights_type
from ..core.finite import largest_entry, require_finite
from ..errors import ResourceError
from ..core.parameters import AttentionWeights, LayerWeights

_NAME = re.compile(r"^([QKVA])_([1-9][0-9]*)$")
# Every member name either reader accepts: the paper's model (_NAME) or a block network
# (per-head Q_i_h, K_i_h, V_i_h, W_i_h, O_i_h; per-layer P_i, U_i, g_i, n_i: docs/blocks.md;
# the decoder blocks bq_i_h, bk_i_g, bv_i_g, G_i, bo_i, bg_i, bp_i, bu_i:
# docs/decoder_features.md). Each reader then checks the names of its own format.
# The embedding blocks E, T, L, f and the QK-norm gains qn_i_h, kn_i_g likewise.
_MEMBER = re.compile(r"^(?:[QKVA]_[1-9][0-9]*|(?:[QKVWO]|b[qkv]|qn|kn)_[1-9][0-9]*_[1-9][0-9]*"
                     r"|(?:[PUgnG]|b[gpuo])_[1-9][0-9]*|[ETLf])$")

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
    names = [info.filename for info in zf.infolist()]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:   # numpy would read one of them silently (the last one written)
        raise _fail(name, "an .npz archive whose members have distinct names",
                    f"{path}: member {repeated[0]!r} stored {names.count(repeated[0])} times",
                    "Save each block once, with numpy.savez(path, Q_1=..., K_1=..., V_1=...).")
    for info in zf.infolist():
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if not info.filename.endswith(".npy") or not _MEMBER.match(key):
            raise _fail(name, "arrays named Q_i, K_i, V_i or A_i, V_i (i = 1..l), or the block "
                        "names Q_i_h, K_i_h, V_i_h, W_i_h, O_i_h, P_i, U_i, g_i, n_i (and the decoder "
                        "blocks G_i, bq_i_h, bk_i_g, bv_i_g, bo_i, bg_i, bp_i, bu_i, qn_i_h, kn_i_g, "
                        "E, T, L, f), in an .npz archive",
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


# ------------------------------------------------------------------ named blocks (any network)

_HEAD = re.compile(r"^([QKVWO]|b[qkv]|qn|kn)_([1-9][0-9]*)_([1-9][0-9]*)$")
# G_i, bg_i, bp_i, bu_i, bo_i: a gated MLP's gate and the biases (docs/decoder_features.md).
_LAYER = re.compile(r"^([PUgnG]|b[gpuo])_([1-9][0-9]*)$")
# The whole network's blocks: token embedding E, learned positions T, untied logits L, final
# norm gain f (docs/decoder_features.md).
_GLOBAL = re.compile(r"^([ETLf])$")


def _is_gain(key: str) -> bool:
    """Norm gains, which need a norm kind: g_i, n_i, qn_i_h, kn_i_g and f."""
    return key == "f" or key.startswith(("qn_", "kn_")) or bool(
        (m := _LAYER.match(key)) and m.group(1) in "gn")


def is_block_file(path: str | Path, name: str = "weights") -> bool:
    """True when the archive names its blocks per head (Q_1_1, ...), as block files do; errors
    name the input `name`."""
    return any(_HEAD.match(k) for k in _load_arrays(Path(path), name))


def read_block_weights(path: str | Path, *, tokens: int = 3, attention: str = "lightning",
                       residual: bool = False, activation: str = "square", norm: str = "none",
                       causal: bool = False, positions: str = "none",
                       rope_pairs: int | tuple[int, ...] | None = None, parallel: bool = False,
                       name: str = "weights") -> tuple[Architecture, dict[str, np.ndarray]]:
    """(architecture, named float64 blocks) of a block weight file; every name and shape checked.

    Decoder blocks (docs/decoder_features.md) are read from their names: fewer Q_i_g than K_i_h
    (transformers' grouping) make grouped key/value heads, bo_i biases, bp_i MLP biases, G_i a gated MLP,
    qn_i_h QK-norm, f a final norm, E a vocabulary (tied logits without L), T learned positions;
    what no block stores comes from the caller: a causal mask (`causal`), rotary positions
    (`positions='rope'`, `rope_pairs`) and parallel blocks (`parallel`)."""
    arrays = _load_arrays(Path(path), name)
    heads: dict[int, set[int]] = {}
    groups: dict[int, set[int]] = {}
    for key, value in arrays.items():
        match = _HEAD.match(key) or _LAYER.match(key) or _GLOBAL.match(key)
        if not match:
            raise bad_value(name, "arrays named Q_i_h, K_i_h, V_i_h (or W_i_h, O_i_h), P_i, U_i, g_i, "
                            "n_i (and the decoder blocks G_i, bq_i_g, bk_i_h, bv_i_g, bo_i, bg_i, "
                            "bp_i, bu_i, qn_i_g, kn_i_h, E, T, L, f)", key,
                            f"Rename or remove the array {key!r} (docs/blocks.md, "
                            "docs/decoder_features.md).")
        if value.dtype.kind not in "iuf" or value.ndim != 2 or not np.all(np.isfinite(value)):
            raise bad_value(f"{name}:{key}", "a finite 2-D array of real numbers",
                            f"{value.ndim}-D array of dtype {value.dtype}", "Save a float or integer matrix.")
        if _HEAD.match(key) and key[0] == "K":   # transformers' grouping: K_i_h per head
            heads.setdefault(int(match.group(2)), set()).add(int(match.group(3)))
        if _HEAD.match(key) and key[0] == "Q":   # Q_i_g per key/value group
            groups.setdefault(int(match.group(2)), set()).add(int(match.group(3)))
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
    if any(_is_gain(k) for k in arrays) and norm == "none":
        raise bad_value("norm", "layernorm or rmsnorm for a file with norm gains (g_i, n_i, qn_i_h, "
                        "kn_i_g or f)", norm, "Pass --norm layernorm or --norm rmsnorm.")
    vocab = arrays["E"].shape[0] if "E" in arrays else None
    if "L" in arrays and vocab is None:
        raise bad_value(name, "a block E (the token embedding) beside the logits L", sorted(arrays),
                        "Add E of shape (V, d_0), or remove L.")
    tied = vocab is not None and "L" not in arrays
    if tied and widths[0] != widths[-1]:
        raise bad_value(name, f"a block L of shape ({vocab}, {widths[-1]}) (logits tied to E need "
                        f"d_l = d_0; the widths are {widths})", sorted(arrays),
                        f"Add L of shape ({vocab}, {widths[-1]}).")
    if "T" in arrays and positions == "rope":
        raise bad_value("positions", "'learned' or left out for a file with learned positions T",
                        positions, "Drop --positions rope (T makes them learned).")
    if positions == "learned" and "T" not in arrays:
        raise bad_value(name, f"a block T of shape ({widths[0]}, {tokens}) for --positions learned",
                        sorted(arrays), "Add T, or drop --positions learned.")
    kv = tuple(len(groups.get(i, ())) for i in range(1, n_layers + 1))
    arch = Architecture(tuple(widths), tuple(keys), tokens, attention, heads=tuple(head_counts),
                        values=None if values[0] is None else tuple(values), residual=residual,
                        mlp=tuple(mlp), activation=activation, norm=norm, causal=causal,
                        positions="learned" if "T" in arrays else positions, rope_pairs=rope_pairs,
                        kv_heads=None if kv == tuple(head_counts) else kv,
                        bias=any(k.startswith("bo_") for k in arrays),
                        mlp_bias=any(k.startswith("bp_") for k in arrays),
                        mlp_kind="gated" if any(k.startswith("G_") for k in arrays) else "plain",
                        vocab=vocab, tied=tied, qk_norm=any(k.startswith("qn_") for k in arrays),
                        final_norm="f" in arrays, parallel=parallel)
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
                      norm: str | None = None, causal: bool = False, positions: str = "none",
                      rope_pairs: int | tuple[int, ...] | None = None, parallel: bool = False,
                      name: str = "weights") -> NetworkFile:
    """Read a paper-format or block weight file as the network the options name; never drop one.

    Options not stored in a file are taken from the caller (`None`: not given):
      residual    required for a block file whose widths are all equal (its shapes fit a
                  residual and a plain network alike); no residual where the widths differ.
      activation  required for a block file with an MLP (P_i, U_i); refused without one.
      norm        required for a file with norm gains (g_i, n_i); refused without them.
    A paper-format file (Q_i, K_i, V_i: one head, no MLP, no gains) given `residual=True` is
    read as the one-head block network with residual paths (Q_i_1 = Q_i, K_i_1 = K_i,
    V_i_1 = V_i); `activation` and `norm` are refused for it (it has no MLP and no gains).
      causal      a causal mask (not stored in any file); a paper-format file is then read as the
                  one-head block network with the mask.
      positions   'rope' (with `rope_pairs`) reads the file with rotary positions, which no block
                  stores (a paper-format file as the one-head block network); learned positions
                  come from a block T, and 'learned' without one is refused.
      parallel    parallel attention and MLP blocks (not stored; needs residual and an MLP).
    The other decoder features are read off the blocks (`read_block_weights`).
    """
    if not is_block_file(path, name):
        for option, value, why in (("activation", activation, "no MLP (P_i, U_i)"),
                                   ("norm", None if norm == "none" else norm, "no norm gains (g_i, n_i)")):
            if value is not None:
                raise bad_value(option, f"left out for a file in the paper's format (Q_i, K_i, V_i: "
                                f"{why})", value, f"Drop --{option}, or save a block file with "
                                "those blocks (docs/blocks.md).")
        if positions == "learned" or parallel:
            what = "--positions learned (a block T)" if positions == "learned" else "--parallel"
            raise bad_value("positions" if positions == "learned" else "parallel",
                            "left out for a file in the paper's format (Q_i, K_i, V_i: no T, no MLP)",
                            what, "Drop it, or save a block file with those blocks "
                            "(docs/decoder_features.md).")
        data = read_weights(path, tokens=tokens, attention=attention, name=name)
        rope = positions == "rope"
        if not residual and not causal and not rope:
            flag = "--no-residual" if residual is False else "the paper's format"
            return NetworkFile(data.arch, data.layer_weights, "paper",
                               f"the paper's model: no residual ({flag}), one head, no MLP, no norm")
        w = data.layer_weights
        blocks = {}
        for i, (Q, K, V) in enumerate(zip(w.Q, w.K, w.V), start=1):
            blocks.update({f"Q_{i}_1": Q.numpy(), f"K_{i}_1": K.numpy(), f"V_{i}_1": V.numpy()})
        arch = Architecture(data.arch.widths, data.arch.keys, tokens, attention,
                            heads=(1,) * data.arch.n_layers, residual=bool(residual), causal=causal,
                            positions=positions, rope_pairs=rope_pairs)
        what = " and ".join(w for w, on in (("residual paths (--residual)", residual),
                                              ("a causal mask (--causal)", causal),
                                              ("rotary positions (--positions rope)", rope)) if on)
        return NetworkFile(arch, blocks, "block", f"one-head block network with {what} on a file "
                           "in the paper's format, no MLP, no norm")
    arrays = _load_arrays(Path(path), name)
    has_mlp = any(_LAYER.match(k) and k[0] in "PU" for k in arrays)
    has_gains = any(_is_gain(k) for k in arrays)
    if not has_mlp and activation is not None:
        raise bad_value("activation", "left out for a block file without an MLP (no P_i, U_i)",
                        activation, "Drop --activation.")
    if not has_gains and norm not in (None, "none"):
        raise bad_value("norm", "left out for a block file without norm gains (no g_i, n_i, "
                        "qn_i_h, kn_i_g, f)", norm, "Drop --norm, or save the gains in the file.")
    arch, blocks = read_block_weights(path, tokens=tokens, attention=attention,
                                      residual=bool(residual) and parallel,
                                      activation=activation or "square", norm=norm or "none",
                                      causal=causal, positions=positions, rope_pairs=rope_pairs,
                                      parallel=parallel, name=name)
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
    parts += [part for part, on in (("a causal mask (--causal)", arch.causal),
                                    ("learned positions (T)", arch.positions == "learned"),
                                    (f"rotary positions on pairs {arch.rotated_pairs} (--positions "
                                     "rope)", arch.positions == "rope"),
                                    (f"vocabulary {arch.vocab} (E), "
                                     + ("tied logits (no L)" if arch.tied else "untied logits (L)"),
                                     arch.vocab is not None),
                                    ("QK-norm (qn, kn)", arch.qk_norm),
                                    ("a final norm (f)", arch.final_norm),
                                    ("parallel blocks (--parallel)", arch.parallel),
                                    (f"key/value groups {arch.kv_heads} (from the Q blocks)",
                                     arch.kv_heads is not None),
                                    ("biases (from the bias blocks)", arch.bias),
                                    ("MLP biases", arch.mlp_bias),
                                    ("a gated MLP (G_i)", arch.mlp_kind == "gated")) if on]
    if not arch.is_block:  # one head, plain, no MLP, no norm: the paper's model exactly
        layers = range(1, arch.n_layers + 1)
        point = LayerWeights(*(tuple(torch.from_numpy(blocks[f"{m}_{i}_1"]) for i in layers)
                               for m in "QKV"))
        return NetworkFile(arch, point, "paper", "the paper's model (a one-head block file): "
                           + ", ".join(parts))
    return NetworkFile(arch, blocks, "block", "block network: " + ", ".join(parts))
