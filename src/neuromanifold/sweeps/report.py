"""Reports of a sweep store: one CSV row per result, and figures of measured vs closed form.

The store is opened read-only; existing output files are never overwritten unless `force`.
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from pathlib import Path

from ..core.formulas import NO_FORMULA, general
from ..core.checks import bad_value
from ..core.limits import check_output_folder
from ..dimension.result import SETTLED_STATUSES
from ..io.outputs import staged_files
from .store import read_results

CSV_COLUMNS = (
    "widths", "keys", "tokens", "attention", "method", "n_params", "dimension", "formula",
    "hypotheses_hold", "status", "seconds", "formula_name", "difference", "conjecture",
    "conjecture_hypotheses_hold", "conjecture_difference", "method_used", "sv_gap", "n_samples",
    "seed", "temperature", "heads", "value_widths", "residual", "mlp", "activation", "norm",
    "message", "item_key", "general", "general_difference", "causal", "positions", "rope_pairs",
    "kv_heads", "bias", "mlp_bias", "mlp_kind", "vocab", "tied", "qk_norm", "final_norm",
    "parallel", "feature")
REPORT_FILES = ("results.csv", "measured_vs_formula.png", "difference_heatmap.png",
                "measured_vs_general.png")
# Written beside them when the store has decoder-feature rows (docs/decoder_features.md).
FEATURE_FILE = "feature_deficit.png"


def feature_of(r: dict) -> str:
    """The decoder features of a store row, e.g. 'causal', 'rope pairs 1', 'kv_heads 1,1',
    'gated mlp + mlp bias'; 'none' for a row without any (docs/decoder_features.md)."""
    keys = str(r.get("keys") or "").split(",")
    parts = []
    if r.get("causal"):
        parts.append("causal")
    positions = r.get("positions") or "none"
    if positions == "rope":
        full = ",".join(str(int(a) // 2) for a in keys if a)
        pairs = r.get("rope_pairs")
        parts.append("rope" if not pairs or pairs == full else f"rope pairs {pairs}")
    elif positions != "none":
        parts.append(f"{positions} positions")
    if r.get("kv_heads") and r.get("heads") and r["kv_heads"] != r["heads"]:
        parts.append(f"kv_heads {r['kv_heads']}")
    for flag, name in (("bias", "bias"), ("mlp_bias", "mlp bias"), ("qk_norm", "qk-norm"),
                       ("final_norm", "final norm"), ("parallel", "parallel")):
        if r.get(flag):
            parts.append(name)
    if (r.get("mlp_kind") or "plain") != "plain":
        parts.append(f"{r['mlp_kind']} mlp")
    if r.get("vocab"):
        parts.append(f"vocab {r['vocab']}" + (" tied" if r.get("tied") else ""))
    return " + ".join(parts) or "none"


def feature_deficits(rows: list[dict]) -> dict:
    """Per base network (every column but the decoder features, as a label): {feature: (n_params
    - dimension, status)} of its rows; the deficit is exact for settled and certified rows and an
    upper bound for lower-bound rows (the dimension is at least the value); other rows are left
    out."""
    out: dict = defaultdict(dict)
    for r in rows:
        if r["dimension"] is None or (r["status"] not in SETTLED_STATUSES
                                      and r["status"] != "lower-bound"):
            continue
        base = (f"{r['attention']} d={r['widths']} a={r['keys']} t={r['tokens']}"
                + (f" h={r['heads']}" if r.get("heads") and set(str(r["heads"]).split(",")) != {"1"}
                   else "")
                + (" res" if r.get("residual") else "")
                + (f" mlp={r['mlp']} {r['activation']}" if r.get("mlp") and
                   set(str(r["mlp"]).split(",")) != {"0"} else "")
                + (f" {r['norm']}" if (r.get("norm") or "none") != "none" else ""))
        out[base][feature_of(r)] = (int(r["n_params"]) - int(r["dimension"]), r["status"])
    return dict(out)


def _general_value(r: dict) -> int | None:
    """The `general` closed form (a conjecture) of a row of the paper's lightning model, computed
    from its architecture; block networks and softmax have none."""
    def only(text, digit: str) -> bool:  # every entry of a stored list such as "1,1" is `digit`
        return all(x in ("", digit) for x in str(text or "").split(","))

    plain = (only(r.get("heads"), "1") and not r.get("value_widths") and not r.get("residual")
             and only(r.get("mlp"), "0") and (r.get("norm") or "none") == "none"
             and feature_of(r) == "none")
    if r["attention"] != "lightning" or not plain:
        return None
    from ..core.architecture import Architecture  # noqa: PLC0415

    def ints(text) -> tuple[int, ...]:
        return tuple(int(x) for x in str(text).split(","))

    return general(Architecture(ints(r["widths"]), ints(r["keys"]), int(r["tokens"]))).value


def _int_list(text: object, min_length: int) -> bool:
    parts = str(text).split(",") if isinstance(text, str) else []
    return len(parts) >= min_length and all(p.strip().isdigit() and int(p) >= 1 for p in parts)


def _whole(value: object, minimum: int | None = None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        (minimum is None or value >= minimum)


def row_damage(r: dict) -> str | None:
    """What makes the store row `r` unreadable for a report (None when it reads): every column
    the CSV and the figures compute with must hold what `sweep` writes there."""
    if not isinstance(r.get("item_key"), str) or not r["item_key"].strip():
        return "empty item_key"
    if not _int_list(r.get("widths"), 2):
        return f"widths {r.get('widths')!r}"
    if not _int_list(r.get("keys"), 1) or len(str(r["keys"]).split(",")) != \
            len(str(r["widths"]).split(",")) - 1:
        return f"keys {r.get('keys')!r}"
    if not _whole(r.get("tokens"), 1):
        return f"tokens {r.get('tokens')!r}"
    if r.get("attention") not in ("lightning", "softmax"):
        return f"attention {r.get('attention')!r}"
    if not isinstance(r.get("status"), str) or not isinstance(r.get("method"), str):
        return f"status {r.get('status')!r}"
    for column in ("dimension", "n_params", "formula", "conjecture", "n_samples", "seed"):
        value = r.get(column)
        if value is not None and not _whole(value):
            return f"{column} {value!r}"
    for column in ("sv_gap", "seconds"):  # copied into the CSV: text there was passed on
        value = r.get(column)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{column} {value!r}"
    if r["dimension"] is not None and r.get("formula_name") != NO_FORMULA and \
            (r.get("formula") is None or r.get("conjecture") is None):
        return "formula missing"
    return None


def readable_rows(rows: list[dict], db: object) -> tuple[list[dict], dict[str, int]]:
    """(rows that read, {first damage: count} of the others); a store with none that reads is
    refused in one line naming `db`."""
    good, damaged = [], {}
    for r in rows:
        damage = row_damage(r)
        if damage is None:
            good.append(r)
        else:
            kind = damage.split(" ")[0]
            damaged[kind] = damaged.get(kind, 0) + 1
    if rows and not good:
        raise bad_value("db", "a sweep store with at least one readable row", str(db),
                        f"All {len(rows)} rows are damaged ("
                        + ", ".join(f"{n} with a bad {k}" for k, n in damaged.items())
                        + "); rerun the sweep into a new --db.")
    return good, damaged


def report_rows(rows: list[dict]) -> list[dict]:
    """Store rows -> CSV rows: `difference` = dimension - formula (empty when no dimension)."""
    out = []
    for r in rows:
        dim = r["dimension"]
        row = {c: r.get(c) for c in CSV_COLUMNS if c in r}
        row["hypotheses_hold"] = bool(r["hypotheses_hold"])
        row["conjecture_hypotheses_hold"] = bool(r["conjecture_hypotheses_hold"])
        # A block network with no closed form has nothing to compare with (docs/blocks.md).
        no_formula = r["formula_name"] == NO_FORMULA
        if no_formula:  # the store holds the parameter count there: not a closed form's value
            row["formula"] = row["conjecture"] = None
        row["difference"] = None if dim is None or no_formula else dim - r["formula"]
        row["conjecture_difference"] = None if dim is None or no_formula else dim - r["conjecture"]
        row["general"] = _general_value(r)
        row["general_difference"] = (None if dim is None or row["general"] is None
                                     else dim - row["general"])
        row["feature"] = feature_of(r)
        out.append({c: row.get(c) for c in CSV_COLUMNS})
    return out


def axis_value(row: dict, axis: str) -> int | None:
    """The value of a grid axis (d0.., a1.., h1.., t) for a CSV row; None when the row has no
    such axis. `h` are the heads per layer (1 for the paper's model)."""
    widths = [int(v) for v in str(row["widths"]).split(",")]
    keys = [int(v) for v in str(row["keys"]).split(",")]
    if axis == "t":
        return int(row["tokens"])
    index = int(axis[1:])
    if axis[0] == "d":
        return widths[index] if index < len(widths) else None
    if axis[0] == "h":
        heads = [int(v) for v in str(row.get("heads") or "").split(",") if v] or [1] * len(keys)
        return heads[index - 1] if 1 <= index <= len(heads) else None
    return keys[index - 1] if 1 <= index <= len(keys) else None


def _axes(layers: int) -> list[str]:
    """Every heat-map axis of an l = `layers` network."""
    return ([f"d{i}" for i in range(layers + 1)] + [f"a{i}" for i in range(1, layers + 1)]
            + [f"h{i}" for i in range(1, layers + 1)] + ["t"])


def _check_axis(name: str, axis: str, layers: int) -> str:
    axis = axis.strip().lower()
    valid = _axes(layers)
    if axis not in valid:
        raise bad_value(name, f"a grid axis of an l = {layers} network ({', '.join(valid)})", axis,
                        "Pass e.g. --heat-x d1 --heat-y d0.")
    return axis


def _comparable(row: dict) -> bool:
    """A measured dimension (settled or certified) with a closed form to compare it with."""
    return row["status"] in SETTLED_STATUSES and row["difference"] is not None


def _n_layers(row: dict) -> int:
    return len(str(row["keys"]).split(","))


def choose_heat_axes(rows: list[dict]) -> tuple[int, str, str] | None:
    """(l, x, y) for the heat map of these CSV rows: l = 2 with x = d1, y = d0 where those rows
    exist (the paper's maps), else the l with the most comparable rows and its two axes that take
    the most values (heads first, then keys, widths, tokens); None when no row is comparable or
    no two axes vary."""
    comparable = [r for r in rows if _comparable(r)]
    if any(_n_layers(r) == 2 for r in comparable):
        return 2, "d1", "d0"
    counts: dict[int, int] = defaultdict(int)
    for r in comparable:
        counts[_n_layers(r)] += 1
    if not counts:
        return None
    layers = max(counts, key=lambda l: (counts[l], -l))
    members = [r for r in comparable if _n_layers(r) == layers]
    order = ([f"h{i}" for i in range(1, layers + 1)] + [f"a{i}" for i in range(1, layers + 1)]
             + [f"d{i}" for i in range(layers + 1)] + ["t"])
    spread = {axis: len({axis_value(r, axis) for r in members}) for axis in order}
    varying = sorted((a for a in order if spread[a] > 1), key=lambda a: -spread[a])
    return (layers, varying[0], varying[1]) if len(varying) >= 2 else None


def heat_note(rows: list[dict], layers: int) -> str:
    """Why a heat map of l = `layers` networks is empty, and which layer counts would fill it."""
    comparable = [r for r in rows if _comparable(r)]
    found = sorted({_n_layers(r) for r in comparable})
    if not comparable:
        return ("no settled or certified result with a closed form in this store (lower bounds "
                "and networks without a closed form are not compared)")
    return (f"no settled or certified result with a closed form has l = {layers} and these axes; "
            f"such results have l = {', '.join(map(str, found))} (pass --heat-layers "
            f"{found[0]})")


def parse_fix(text: str | None, layers: int) -> dict[str, int]:
    """'a1=2,a2=2' -> {'a1': 2, 'a2': 2}: axes held fixed in the heat map."""
    if not text:
        return {}
    fixed = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise bad_value("heat-fix", "comma-separated axis=value pairs", text,
                            "Pass e.g. --heat-fix a1=2,a2=2.")
        fixed[_check_axis("heat-fix", name, layers)] = int(value)
    return fixed




def heatmap_cells(rows: list[dict], x: str, y: str, layers: int,
                  fixed: dict[str, int] | None = None) -> dict[str, dict]:
    """Per attention kind: mean (dimension - formula) over the rows of each (x, y) cell.

    Only settled or certified rows with l = `layers` and the `fixed` axis values take part (a
    lower bound or an ambiguous rank is not a measured dimension); every other
    axis is averaged over. `hold` per cell is 'all', 'some' or 'none' (formula hypotheses hold).
    """
    fixed = fixed or {}
    groups: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if not _comparable(r) or _n_layers(r) != layers:
            continue
        if any(axis_value(r, k) != v for k, v in fixed.items()):
            continue
        groups[r["attention"]][(axis_value(r, x), axis_value(r, y))].append(r)
    out = {}
    for attention, cells in sorted(groups.items()):
        xs = sorted({k[0] for k in cells})
        ys = sorted({k[1] for k in cells})
        mean, hold, count = {}, {}, {}
        for key, members in cells.items():
            diffs = [m["difference"] for m in members]
            mean[key] = sum(diffs) / len(diffs)
            flags = [m["hypotheses_hold"] for m in members]
            hold[key] = "all" if all(flags) else ("some" if any(flags) else "none")
            count[key] = len(members)
        out[attention] = {"xs": xs, "ys": ys, "mean": mean, "hold": hold, "count": count}
    return out


def write_report(db: str | os.PathLike, out: str | os.PathLike, *, force: bool = False,
                 heat_x: str | None = None, heat_y: str | None = None,
                 heat_layers: int | None = None, heat_fix: str | None = None) -> dict:
    """Write results.csv and the figures for the sweep store `db` into folder `out`.

    Rows with damaged values (text in an integer column, NULL widths, an empty key) are skipped
    and counted (`row_damage`); a store with no readable row is refused.
    The heat map's axes default to `choose_heat_axes` (d1 against d0 at l = 2 where the store
    has such results); given ones are used as they are, and an empty map says why (`heat_note`).
    Returns {'rows': n, 'files': [paths], 'heatmap_rows': n used by the heat map, 'heat_layers',
    'heat_x', 'heat_y', 'heatmap_note': why the map is empty, or None, 'damaged_rows': n skipped,
    'damage': {column: n}}.
    """
    from ..experiments.plots import (plot_difference_heatmap, plot_feature_deficit,  # noqa: PLC0415
                                     plot_measured_vs_formula, plot_measured_vs_general)

    chosen = heat_x is None and heat_y is None and heat_layers is None
    heat_layers = 2 if heat_layers is None else heat_layers
    if isinstance(heat_layers, bool) or not isinstance(heat_layers, int) or heat_layers < 1:
        raise bad_value("heat-layers", "an integer l >= 1", heat_layers, "Pass e.g. --heat-layers 2.")
    heat_x = _check_axis("heat-x", "d1" if heat_x is None else heat_x, heat_layers)
    heat_y = _check_axis("heat-y", "d0" if heat_y is None else heat_y, heat_layers)
    if heat_x == heat_y:
        raise bad_value("heat-y", "an axis other than --heat-x", heat_y, "Pass e.g. --heat-x d1 --heat-y d0.")
    fixed = parse_fix(heat_fix, heat_layers)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    stored, damaged = readable_rows(read_results(db), db)
    features = any(feature_of(r) != "none" for r in stored)
    paths = [out / name for name in REPORT_FILES + ((FEATURE_FILE,) if features else ())]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise bad_value("out", "a folder without earlier report files", ", ".join(existing),
                        "Pass another --out folder, or --force to overwrite.")
    check_output_folder("out", out)
    rows = report_rows(stored)
    if not rows:
        raise bad_value("db", "a sweep store with at least one result", str(db),
                        "Run `neuromanifold sweep GRID --db` first.")
    out.mkdir(parents=True, exist_ok=True)
    if chosen and not fixed:
        heat_layers, heat_x, heat_y = choose_heat_axes(rows) or (heat_layers, heat_x, heat_y)
    cells = heatmap_cells(rows, heat_x, heat_y, heat_layers, fixed)
    note = None if cells else heat_note(rows, heat_layers)
    fix_text = ", ".join(f"{k} = {v}" for k, v in fixed.items())
    with staged_files(paths) as temps:
        with temps[0].open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
            writer.writeheader()
            for r in rows:
                writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
        plot_measured_vs_formula(rows, temps[1])
        plot_difference_heatmap(cells, temps[2], heat_x, heat_y,
                                f"l = {heat_layers}" + (f", {fix_text}" if fix_text else ""),
                                empty=note)
        plot_measured_vs_general(rows, temps[3])
        if features:
            plot_feature_deficit(feature_deficits(stored), temps[4])
    return {"rows": len(rows), "files": [str(p) for p in paths],
            "heatmap_rows": sum(sum(c["count"].values()) for c in cells.values()),
            "heat_layers": heat_layers, "heat_x": heat_x, "heat_y": heat_y, "heatmap_note": note,
            "damaged_rows": sum(damaged.values()), "damage": damaged}
