"""One sweep item: the store row of its computation (runs in a worker process)."""

from __future__ import annotations

import json
import time
import warnings

from .grid import item_architecture
from ..errors import ResourceError

# ---------------------------------------------------------------- one item (runs in a worker)

def compute_item(item: dict) -> dict:
    """The store row of one grid item. Never raises: a failure is a row with status `error`."""
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415  (workers import torch lazily)

    t0 = time.perf_counter()
    row = _base_row(item)
    try:
        arch = item_architecture(item)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = neuromanifold_dim(arch, method=item["method"], seed=item["seed"],
                                       max_memory=item.get("max_memory"))
    except ResourceError as exc:  # over the item's memory budget: refused before allocating
        row.update(status="refused", message=str(exc), seconds=time.perf_counter() - t0)
        return row
    except Exception as exc:  # noqa: BLE001  (recorded, the sweep goes on)
        row.update(status="error", message=f"{type(exc).__name__}: {exc}",
                   seconds=time.perf_counter() - t0)
        return row
    data = result.to_dict()
    row.update(dimension=result.dimension, status=result.status, method_used=result.method,
               sv_gap=data.get("gap"), n_samples=result.n_samples,
               seconds=result.seconds.get("total", time.perf_counter() - t0),
               message="; ".join(result.notes), result_json=json.dumps(data, default=str))
    return row


def _base_row(item: dict) -> dict:
    """Row fields known before computing: the item, its parameter count and closed forms."""
    from ..core.formulas import block_formula  # noqa: PLC0415
    from ..core.formulas import effective_width, expected_dim  # noqa: PLC0415

    arch = item_architecture(item)
    if arch.is_block:
        formula = conj = block_formula(arch)
    else:
        formula, conj = expected_dim(arch), effective_width(arch)
    return {"item_key": item["key"], "widths": ",".join(map(str, arch.widths)),
            "keys": ",".join(map(str, arch.keys)), "tokens": arch.tokens,
            "attention": arch.attention, "method": item["method"], "temperature": arch.temperature,
            "seed": item["seed"], "n_params": arch.n_params, "dimension": None,
            "formula_name": formula.name, "formula": formula.value,
            "hypotheses_hold": int(formula.hypotheses_hold), "conjecture": conj.value,
            "conjecture_hypotheses_hold": int(conj.hypotheses_hold), "status": None,
            "method_used": None, "sv_gap": None, "n_samples": None, "seconds": None,
            "message": "", "result_json": None, "finished_at": None, **block_columns(arch)}


def block_columns(arch) -> dict:
    """The store's transformer-block columns of an architecture (the paper's model included)."""
    return {"heads": ",".join(map(str, arch.head_counts)),
            "value_widths": None if arch.values is None else ",".join(map(str, arch.values)),
            "residual": int(arch.residual), "mlp": ",".join(map(str, arch.mlp_widths)),
            "activation": arch.activation, "norm": arch.norm, **decoder_columns(arch)}


def decoder_columns(arch) -> dict:
    """The store's decoder-feature columns of an architecture (docs/decoder_features.md): flags
    as 0/1, per-layer lists as text ('2,2'), `rope_pairs` the pairs rotated (None without rotary
    positions), `kv_heads` the key/value groups (the heads where none are grouped)."""
    return {"causal": int(arch.causal), "positions": arch.positions,
            "rope_pairs": (",".join(map(str, arch.rotated_pairs)) if arch.positions == "rope"
                           else None),
            "kv_heads": ",".join(map(str, arch.kv_counts)), "bias": int(arch.bias),
            "mlp_bias": int(arch.mlp_bias), "mlp_kind": arch.mlp_kind, "vocab": arch.vocab,
            "tied": int(arch.tied), "qk_norm": int(arch.qk_norm),
            "final_norm": int(arch.final_norm), "parallel": int(arch.parallel)}


def timeout_row(item: dict, timeout: float) -> dict:
    """The row recorded for an item that ran past the timeout (its worker was killed)."""
    row = _base_row(item)
    row.update(status="timeout", seconds=float(timeout),
               message=f"exceeded the timeout of {timeout:g} s; the process computing it was killed")
    return row


def error_row(item: dict, message: str, seconds: float | None = None) -> dict:
    """The row recorded for an item whose computation failed outside `compute_item`."""
    row = _base_row(item)
    row.update(status="error", message=message, seconds=seconds)
    return row
