"""Grid files: TOML lists multiplied out into sweep items, and their canonical keys.

Sweeps over architectures: grid files, the SQLite result store, and the local worker pool.

A grid file is TOML. Its top-level lists are multiplied out (the grid is their product):

    widths    = [[3, 3, 3], [4, 4, 4], [5, 3, 5]]   # d = (d_0 .. d_l); required
    keys      = [[2, 2], [3, 3]]                    # a = (a_1 .. a_l); required
    tokens    = [2, 3]                              # t; required
    attention = ["lightning", "softmax"]            # default ["lightning"]
    method    = ["auto"]                            # default ["auto"]
    temperature = [1.0]                             # softmax only; default [1.0]
    description = "free text"                       # optional, ignored

Transformer-block options (docs/blocks.md), all optional; their defaults give the paper's model:

    heads      = [[1, 1], [2, 2]]                   # heads per layer; default one each
    values     = [[2, 2]]                           # per-head value widths; default unfactored
    residual   = [false, true]                      # default [false]
    mlp        = [[0, 0], [3, 3]]                   # MLP width per layer, 0 = none; default none
    activation = ["square", "relu"]                 # default ["square"]
    norm       = ["none", "layernorm", "rmsnorm"]   # default ["none"]

Decoder features (docs/decoder_features.md), all optional, defaults leave the network unchanged:

    positions  = ["none", "learned", "rope"]        # default ["none"]
    rope_pairs = [[1, 1]]                           # pairs rotated per layer; default all
    vocab      = [5]                                # token ids and logits; default none
    tied = [false, true]; qk_norm = [false]; final_norm = [false]; parallel = [false]
    causal     = [false, true]                      # causal mask; default [false]
    kv_heads   = [[1, 1]]                           # key/value groups per layer; default one per head
    bias = [false, true]; mlp_bias = [false]        # attention and MLP biases; default [false]
    mlp_kind   = ["plain", "gated"]                 # gated MLPs (needs mlp); default ["plain"]

Combinations that do not make an architecture (a list without one entry per layer, a residual
with changing widths, an exact method of a network that is not polynomial) are skipped.

Compact range form, for `widths` and `keys` (alone, or as entries of their lists):

    widths = {layers = [2, 3], range = [2, 6]}      # every (d_0..d_l), l in {2, 3}, 2 <= d_i <= 6
    keys   = {layers = [2], values = [1, 2, 4]}     # every (a_1, a_2) with a_i in {1, 2, 4}

`layers` counts attention layers l (a widths tuple has l + 1 entries, a keys tuple l). A file may
instead hold several `[[grid]]` tables, each of the form above; the grid is then their union.
Combinations whose keys do not have one entry per layer are skipped and counted.
"""

from __future__ import annotations

import itertools
import math
import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..core.architecture import ACTIVATIONS, MLP_KINDS, NORMS, POSITIONS, Architecture
from ..core.checks import ATTENTION_KINDS, METHODS, bad_value
from ..core.limits import MAX_LAYERS, MAX_TOKENS, MAX_WIDTH
from ..errors import InputError

BLOCK_KEYS = ("heads", "values", "residual", "mlp", "activation", "norm")
# Decoder features (docs/decoder_features.md): scalar or per-layer lists, absent = default.
DECODER_KEYS = ("positions", "rope_pairs", "vocab", "tied", "qk_norm", "final_norm", "parallel",
                "causal", "kv_heads", "bias", "mlp_bias", "mlp_kind")
BLOCK_KEYS = BLOCK_KEYS + DECODER_KEYS
GRID_KEYS = ("widths", "keys", "tokens", "attention", "method", "temperature", "description") + BLOCK_KEYS
REQUIRED_GRID_KEYS = ("widths", "keys", "tokens")
# Range forms larger than this are refused (a typo such as range = [2, 60] would never finish).
MAX_GRID_ITEMS = 200_000


# ---------------------------------------------------------------- grid files

@dataclass(frozen=True)
class Grid:
    """The items of a sweep: canonical item dicts (without seed) and how many were skipped.

    Invariant: every item builds a valid Architecture; `n_skipped` counts the combinations of the
    product whose keys did not have one entry per layer; items are distinct.
    """

    items: tuple[dict, ...]
    n_skipped: int
    source: str

    def __len__(self) -> int:
        return len(self.items)


def shipped_grids() -> list[str]:
    """Names of the grids shipped with the package (usable in place of a path)."""
    folder = resources.files("neuromanifold.sweeps") / "grids"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def resolve_grid_path(spec: str | os.PathLike) -> Path:
    """A path to an existing grid file, or the shipped grid of that name (e.g. `eq14_map`)."""
    path = Path(spec)
    if path.is_file():
        return path
    name = str(spec)
    if name in shipped_grids():
        return Path(str(resources.files("neuromanifold.sweeps") / "grids" / f"{name}.toml"))
    raise bad_value("grid", "a TOML grid file or a shipped grid name", str(spec),
                    f"Pass a path to an existing file, or one of: {', '.join(shipped_grids())}.")


def _grid_error(source: str, name: str, requirement: str, got: object, fix: str) -> InputError:
    return InputError(f"`{name}` in grid {source} must be {requirement}; got {got!r}. {fix}")


def _int_tuples(source: str, name: str, value: object, min_length: int, example: str) -> list[tuple]:
    """Expand the `widths` or `keys` entry of a grid (explicit lists and range forms)."""
    entries = [value] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise _grid_error(source, name, "a non-empty list of integer lists or a range table", value,
                          f"Write e.g. {name} = [{example}].")
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            out.extend(_range_tuples(source, name, entry, min_length))
            if len(out) > MAX_GRID_ITEMS:
                raise _grid_error(source, name, f"range forms with at most {MAX_GRID_ITEMS} tuples in all",
                                  f"more than {len(out)}", "Narrow `range` or list fewer `values`.")
            continue
        if (not isinstance(entry, list) or not min_length <= len(entry) <= MAX_LAYERS + 1
                or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_WIDTH
                           for v in entry)):
            raise _grid_error(source, name, f"a list of lists of {min_length} to {MAX_LAYERS + 1} "
                              f"positive integers (each at most {MAX_WIDTH})", entry,
                              f"Write e.g. {name} = [{example}].")
        out.append(tuple(entry))
    return out


def _range_tuples(source: str, name: str, table: dict, min_length: int) -> list[tuple]:
    offset = 1 if name == "widths" else 0
    unknown = sorted(set(table) - {"layers", "range", "values"})
    fix = f"Write e.g. {name} = {{layers = [2, 3], range = [2, 6]}}."
    if unknown or "layers" not in table or ("range" in table) == ("values" in table):
        raise _grid_error(source, name, "a table with `layers` and exactly one of `range`, `values`",
                          table, fix)
    layers = table["layers"]
    if (not isinstance(layers, list) or not layers
            or not all(isinstance(v, int) and not isinstance(v, bool)
                       and v + offset >= min_length and v <= MAX_LAYERS for v in layers)):
        raise _grid_error(source, f"{name}.layers", f"a non-empty list of layer counts 1 <= l <= {MAX_LAYERS}",
                          layers, fix)
    if "range" in table:
        bounds = table["range"]
        if (not isinstance(bounds, list) or len(bounds) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)
                or not 1 <= bounds[0] <= bounds[1] <= MAX_WIDTH):
            raise _grid_error(source, f"{name}.range", f"[low, high] with 1 <= low <= high <= {MAX_WIDTH}",
                              bounds, fix)
        values = list(range(bounds[0], bounds[1] + 1))
    else:
        values = table["values"]
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_WIDTH
                           for v in values)):
            raise _grid_error(source, f"{name}.values", f"a non-empty list of positive integers (each at most {MAX_WIDTH})",
                              values, f"Write e.g. {name} = {{layers = [2], values = [2, 4, 6]}}.")
    # Counted before anything is built: len(values)^(l + offset) tuples per layer count.
    total = sum(len(set(values)) ** (layer + offset) for layer in layers)
    if total > MAX_GRID_ITEMS:
        raise _grid_error(source, name, f"a range form with at most {MAX_GRID_ITEMS} tuples", table,
                          "Narrow `range` or list fewer `values`.")
    return [t for layer in layers for t in itertools.product(sorted(set(values)), repeat=layer + offset)]


def _scalars(source: str, name: str, value: object, kind: type, check, example: str) -> list:
    if not isinstance(value, list) or not value:
        raise _grid_error(source, name, "a non-empty list", value, f"Write e.g. {name} = {example}.")
    if kind is str:  # choices ignore case, as in Python and on the command line
        value = [v.strip().lower() if isinstance(v, str) else v for v in value]
    for v in value:
        ok = isinstance(v, kind) and not isinstance(v, bool)
        if kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok or not check(v):
            raise _grid_error(source, name, "a non-empty list of valid values", value,
                              f"Write e.g. {name} = {example}.")
    return value


def _product(source: str, table: dict) -> tuple[list[dict], int]:
    if not isinstance(table, dict):
        raise _grid_error(source, "grid", "a table of lists", table, "Write [[grid]] tables.")
    unknown = sorted(set(table) - set(GRID_KEYS))
    if unknown:
        raise _grid_error(source, unknown[0], "absent (unknown key)", unknown[0],
                          f"Use only {', '.join(GRID_KEYS)}.")
    missing = [k for k in REQUIRED_GRID_KEYS if k not in table]
    if missing:
        raise _grid_error(source, missing[0], "present", None,
                          f"Add e.g. {missing[0]} = " + {"widths": "[[3, 3, 3]]", "keys": "[[2, 2]]",
                                                         "tokens": "[3]"}[missing[0]] + ".")
    if "description" in table and not isinstance(table["description"], str):
        raise _grid_error(source, "description", "a string", table["description"],
                          'Write description = "...".')
    widths = _int_tuples(source, "widths", table["widths"], 2, "[3, 3, 3], [5, 3, 5]")
    keys = _int_tuples(source, "keys", table["keys"], 1, "[2, 2], [3, 3]")
    tokens = _scalars(source, "tokens", table["tokens"], int, lambda v: 1 <= v <= MAX_TOKENS, "[2, 3]")
    attention = _scalars(source, "attention", table.get("attention", ["lightning"]), str,
                         lambda v: v in ATTENTION_KINDS, '["lightning", "softmax"]')
    method = _scalars(source, "method", table.get("method", ["auto"]), str,
                      lambda v: v in METHODS, '["auto"] (or "numerical", "exact", "certified")')
    temperature = _scalars(source, "temperature", table.get("temperature", [1.0]), float,
                           lambda v: 0 < v < math.inf, "[1.0]")
    # The product, block options included, is counted before it is built (a typo must not
    # fill the memory).
    n_combinations = (len(widths) * len(keys) * len(tokens) * len(attention) * len(method)
                      * len(temperature))
    blocks = _block_options(source, table, n_combinations)
    n_combinations *= len(blocks)
    if n_combinations > MAX_GRID_ITEMS:
        raise _grid_error(source, "grid", f"at most {MAX_GRID_ITEMS} combinations",
                          n_combinations, "Split the grid into several files or narrow its lists.")
    items, skipped, exact_refused = [], 0, 0
    for w, a, t, att, m in itertools.product(widths, keys, tokens, attention, method):
        if len(a) != len(w) - 1:
            skipped += (len(temperature) if att == "softmax" else 1) * len(blocks)
            continue
        for block in blocks:
            for temp in (temperature if att == "softmax" else [1.0]):
                item = {"widths": w, "keys": a, "tokens": t, "attention": att, "method": m,
                        "temperature": float(temp), **block}
                try:
                    arch = item_architecture(item)
                except InputError:
                    skipped += 1
                    continue
                if m in ("exact", "certified") and not arch.is_polynomial:
                    skipped += 1
                    exact_refused += m == "exact"
                    continue
                items.append(item)
    if exact_refused and not any(i["method"] == "exact" for i in items):
        raise _grid_error(source, "method", "a method with an answer for at least one network of "
                          "the table ('exact' has none for softmax networks and other "
                          "non-polynomial ones)", ["exact"],
                          'Write method = ["numerical"] or ["certified"] (ball arithmetic) for '
                          "softmax networks, or add lightning ones.")
    return items, skipped


def _block_options(source: str, table: dict, n_other: int = 1) -> list[dict]:
    """The product of the grid's block options, as dicts holding only non-default values;
    refused before it is built when it times the `n_other` other combinations would pass
    MAX_GRID_ITEMS."""
    def tuples(name):
        if name not in table:
            return [None]
        return _int_tuples(source, name, table[name], 1, "[2, 2]") if name != "mlp" else [
            tuple(v) for v in _scalars(source, name, table[name], list,
                                       lambda v: all(isinstance(x, int) and not isinstance(x, bool)
                                                     and x >= 0 for x in v) and v, "[[0, 0], [3, 3]]")]
    residual = table.get("residual", [False])
    if not isinstance(residual, list) or not residual or not all(isinstance(v, bool) for v in residual):
        raise _grid_error(source, "residual", "a non-empty list of booleans", residual,
                          "Write e.g. residual = [false, true].")
    activation = _scalars(source, "activation", table.get("activation", ["square"]), str,
                          lambda v: v in ACTIVATIONS, '["square", "relu"]')
    norm = _scalars(source, "norm", table.get("norm", ["none"]), str, lambda v: v in NORMS,
                    '["none", "layernorm"]')
    lists = (tuples("heads"), tuples("values"), residual, tuples("mlp"), activation, norm,
             _decoder_options(source, table))
    n_blocks = math.prod(len(x) for x in lists)
    if n_blocks * n_other > MAX_GRID_ITEMS:
        raise _grid_error(source, "grid", f"at most {MAX_GRID_ITEMS} combinations",
                          n_blocks * n_other, "Split the grid into several files or narrow the "
                          "lists of block options (heads, values, mlp, ...).")
    out = []
    for h, v, r, m, act, nm, decoder in itertools.product(*lists):
        if h is not None and set(h) == {1}:
            h = None  # one head per layer is the paper's model
        if m is not None and set(m) == {0}:
            m = None
        if m is None:
            act = "square"  # the activation matters only with an MLP
        option = {"heads": h, "values": v, "residual": r, "mlp": m, "activation": act, "norm": nm,
                  **decoder}
        out.append({k: x for k, x in option.items() if x not in BLOCK_DEFAULTS[k]})
    return out


# Values that leave an item the paper's model (not written into item dicts or keys).
BLOCK_DEFAULTS = {"heads": (None,), "values": (None,), "residual": (False,), "mlp": (None,),
                  "activation": ("square",), "norm": ("none",), "positions": ("none",),
                  "rope_pairs": (None,), "vocab": (None,), "tied": (False,),
                  "qk_norm": (False,), "final_norm": (False,), "parallel": (False,),
                  "causal": (False,), "kv_heads": (None,), "bias": (False,),
                  "mlp_bias": (False,), "mlp_kind": ("plain",)}


def _decoder_options(source: str, table: dict) -> list[dict]:
    """The product of the grid's decoder-feature lists, as dicts of their values."""
    def flags(name):
        value = table.get(name, [False])
        if not isinstance(value, list) or not value or not all(isinstance(v, bool) for v in value):
            raise _grid_error(source, name, "a non-empty list of booleans", value,
                              f"Write e.g. {name} = [false, true].")
        return value
    positions = _scalars(source, "positions", table.get("positions", ["none"]), str,
                         lambda v: v in POSITIONS, '["none", "rope"]')
    pairs = [None] if "rope_pairs" not in table else [tuple(v) for v in _scalars(
        source, "rope_pairs", table["rope_pairs"], list,
        lambda v: v and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v),
        "[[1, 1]]")]
    vocab = [None] if "vocab" not in table else _scalars(
        source, "vocab", table["vocab"], int, lambda v: v >= 2, "[5]")
    kv_heads = [None] if "kv_heads" not in table else _int_tuples(
        source, "kv_heads", table["kv_heads"], 1, "[1, 1]")
    mlp_kind = _scalars(source, "mlp_kind", table.get("mlp_kind", ["plain"]), str,
                        lambda v: v in MLP_KINDS, '["plain", "gated"]')
    return [dict(zip(DECODER_KEYS, combo)) for combo in itertools.product(
        positions, pairs, vocab, flags("tied"), flags("qk_norm"), flags("final_norm"),
        flags("parallel"), flags("causal"), kv_heads, flags("bias"), flags("mlp_bias"), mlp_kind)]


def item_architecture(item: dict) -> Architecture:
    """The Architecture of a grid item (block options absent mean the paper's model)."""
    return Architecture(item["widths"], item["keys"], item["tokens"], item["attention"],
                        item.get("temperature", 1.0), heads=item.get("heads"),
                        values=item.get("values"), residual=item.get("residual", False),
                        mlp=item.get("mlp"), activation=item.get("activation", "square"),
                        norm=item.get("norm", "none"), positions=item.get("positions", "none"),
                        rope_pairs=item.get("rope_pairs"), vocab=item.get("vocab"),
                        tied=item.get("tied", False), qk_norm=item.get("qk_norm", False),
                        final_norm=item.get("final_norm", False),
                        parallel=item.get("parallel", False), causal=item.get("causal", False),
                        kv_heads=item.get("kv_heads"), bias=item.get("bias", False),
                        mlp_bias=item.get("mlp_bias", False),
                        mlp_kind=item.get("mlp_kind", "plain"))


def load_grid(spec: str | os.PathLike) -> Grid:
    """Read and expand a grid file (a path, or a shipped grid name); see the module docstring.

    Combinations whose keys do not have one entry per layer, and exact/certified methods asked of
    softmax networks, are skipped and counted in `n_skipped`. Duplicates are dropped.
    """
    path = resolve_grid_path(spec)
    source = str(spec)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise bad_value("grid", "a valid TOML file", source,
                        f"Fix the TOML syntax ({str(exc).splitlines()[0]}).") from None
    if "grid" in data:
        extra = sorted(set(data) - {"grid", "description"})
        if extra or not isinstance(data["grid"], list):
            raise _grid_error(source, "grid", "a list of [[grid]] tables with no other top-level "
                              "lists", sorted(data), "Put every list inside a [[grid]] table.")
        tables = data["grid"]
    else:
        tables = [data]
    items, skipped, seen = [], 0, set()
    for table in tables:
        new, n_skip = _product(source, table)
        if len(items) + len(new) > MAX_GRID_ITEMS:
            raise _grid_error(source, "grid", f"at most {MAX_GRID_ITEMS} items",
                              f"more than {len(items) + len(new)}", "Split the grid into several files.")
        skipped += n_skip
        for item in new:
            key = item_key(item, 0)
            if key not in seen:
                seen.add(key)
                items.append(item)
    if len(items) > MAX_GRID_ITEMS:
        raise _grid_error(source, "grid", f"at most {MAX_GRID_ITEMS} items", len(items),
                          "Split the grid into several files.")
    if not items:
        raise _grid_error(source, "grid", "at least one item whose keys match its layers",
                          f"0 items ({skipped} skipped)", "Give key lists with one entry per layer.")
    return Grid(tuple(items), skipped, source)


# Version of the dimension methods a row was computed with, part of every item key: bump it when a
# change to the rank paths or the symmetry bound can change a result, so that a sweep into an
# existing store recomputes instead of skipping rows made by the older method.
# v=2: grow N until certified/saturated/capped; corrected hidden block; read-out symmetry.
METHOD_VERSION = 2


def item_key(item: dict, seed: int) -> str:
    """Canonical key of a grid item, e.g. 'lightning;widths=3,3,3;keys=2,2;tokens=3;method=auto;seed=0;v=2'."""
    parts = [item["attention"], "widths=" + ",".join(map(str, item["widths"])),
             "keys=" + ",".join(map(str, item["keys"])), f"tokens={item['tokens']}",
             f"method={item['method']}"]
    if item["attention"] == "softmax":
        parts.append(f"temperature={float(item['temperature'])!r}")
    for name in BLOCK_KEYS:  # only non-default block options: keys of the paper's model unchanged
        value = item.get(name)
        if value is not None and value not in BLOCK_DEFAULTS[name]:
            parts.append(f"{name}=" + (",".join(map(str, value)) if isinstance(value, (tuple, list))
                                       else str(value).lower()))
    parts += [f"seed={seed}", f"v={METHOD_VERSION}"]
    return ";".join(parts)


def estimated_cost(item: dict) -> float:
    """A rough relative cost (for scheduling largest first)."""
    arch = item_architecture(item)
    return arch.n_params ** 2 * arch.n_layers * (4 if item["attention"] == "softmax" else 1)
