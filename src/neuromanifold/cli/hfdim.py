"""`neuromanifold dim --hf-config CONFIG.json --shrink ...`: measured dimension of a shrunk
Hugging Face model (docs/models.md)."""

from __future__ import annotations

import time
from typing import Optional

import typer

from ..core.checks import bad_value
from .common import EXIT_AMBIGUOUS, err, print_json


# The sizes --shrink may set (`shrink_sizes`): a size it leaves out is the config's own.
SHRINK_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab")


def parse_shrink(text: Optional[str]) -> dict:
    """'layers=2,heads=4' -> {'layers': 2, 'heads': 4}; keys from SHRINK_KEYS (not tokens)."""
    allowed = SHRINK_KEYS
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, _, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if key not in allowed or not value.strip().isdigit() or int(value) < 1:
            raise bad_value("shrink", f"comma-separated key=value with keys {', '.join(allowed)} "
                            "and positive whole values", part,
                            "Pass e.g. --shrink layers=2,heads=2,head_dim=2,intermediate=3.")
        if key in out:
            raise bad_value("shrink", "each key at most once", text,
                            f"Give {key}= once (it was given {out[key]} and {int(value)}).")
        out[key] = int(value)
    return out


def shrink_sizes(spec, given: dict) -> tuple[dict, list[str]]:
    """(the sizes measured, what changed from the config's own and why) for `--shrink` keys
    `given`: every size the config has is kept unless `given` changes it; the sizes that follow
    from a change (hidden = heads x head_dim where the config has it so, or where the family's
    heads split the hidden width; the key/value heads keeping the config's query heads per
    group) change with it, and say so."""
    own = {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads,
           "kv_heads": spec.kv_heads, "head_dim": spec.head_dim,
           "intermediate": spec.intermediate, "vocab": spec.vocab}
    sizes = {**own, **given}
    why = {k: "given by --shrink" for k in given}
    split = spec.model_type in ("gpt2", "bert")   # head_dim = hidden / heads in these families
    if split:
        if "hidden" in given and "head_dim" not in given:
            if sizes["hidden"] % sizes["heads"]:
                raise bad_value("shrink", f"a hidden width divisible by the heads "
                                f"({sizes['heads']}) in {spec.model_type}", given,
                                "Pass hidden and heads with hidden = heads x head_dim.")
            sizes["head_dim"] = sizes["hidden"] // sizes["heads"]
            why["head_dim"] = f"hidden / heads ({spec.model_type}'s heads split the hidden width)"
        elif "hidden" in given and sizes["hidden"] != sizes["heads"] * sizes["head_dim"]:
            raise bad_value("shrink", f"hidden = heads x head_dim in {spec.model_type}", given,
                            "Leave one of hidden, heads, head_dim out.")
    changed_heads = sizes["heads"] != own["heads"] or sizes["head_dim"] != own["head_dim"]
    if "hidden" not in given and changed_heads and (
            split or own["hidden"] == own["heads"] * own["head_dim"]):
        sizes["hidden"] = sizes["heads"] * sizes["head_dim"]
        why["hidden"] = ("heads x head_dim (" + (f"{spec.model_type}'s heads split the hidden "
                         "width)" if split else "as in the config)"))
    if "kv_heads" not in given and sizes["heads"] != own["heads"]:
        per_group = own["heads"] // own["kv_heads"]
        if sizes["heads"] % per_group:
            raise bad_value("shrink", f"kv_heads given where heads={sizes['heads']} does not keep "
                            f"the config's {per_group} query heads per key/value head", given,
                            f"Add kv_heads= (a divisor of {sizes['heads']}).")
        sizes["kv_heads"] = sizes["heads"] // per_group
        why["kv_heads"] = f"the config's {per_group} query head{'s' if per_group > 1 else ''} per key/value head kept"
    if sizes["heads"] % sizes["kv_heads"]:
        raise bad_value("shrink", f"kv_heads dividing heads ({sizes['heads']})", given,
                        "Pass kv_heads= a divisor of heads.")
    if spec.rope and sizes["head_dim"] % 2:
        raise bad_value("shrink", "an even head_dim under rotary embeddings", given,
                        "Pass head_dim=2 or 4.")
    changes = [f"{k} {own[k]:,} -> {sizes[k]:,} ({why.get(k, 'given by --shrink')})"
               for k in SHRINK_KEYS if sizes[k] != own[k]]
    return sizes, changes


# Options of `dim` that a shrunk Hugging Face model does not use, with their defaults: given
# with --hf-config they are refused rather than silently ignored.
NOT_WITH_HF = {"method": "auto", "attention": "lightning", "temperature": 1.0, "samples": None,
               "prime": None, "precision": None, "engine": "verified", "heads": None, "values": None, "residual": False,
               "mlp": None, "activation": "square", "norm": "none", "causal": False,
               "positions": "none", "rope-pairs": None, "kv-heads": None, "bias": False,
               "mlp-bias": False, "mlp-kind": "plain", "vocab": None, "tied": False,
               "qk-norm": False, "final-norm": False, "parallel": False}


def check_hf_options(**given) -> None:
    """Refuse any option of NOT_WITH_HF given a value other than its default."""
    for name, default in NOT_WITH_HF.items():
        value = given[name]
        if (value.lower() if isinstance(value, str) else value) != default:
            raise bad_value(name, "left out with --hf-config (the shrunk model's architecture "
                            "comes from the config; its rank is numerical)", value,
                            f"Drop --{name}; to change the shrunk sizes use --shrink.")


def hf_dim(hf_config, shrink, widths, keys, tokens, seed, device, as_json,
           max_memory=None) -> None:
    """Measure a config shrunk: its native network (`certify.native_network`, float64
    throughout), last hidden state, numerical rank, against the rules' count of the same
    shrunk model. Without --shrink the shrink is `count --validate`'s (`certify.SHRINK`,
    `FAMILY_SHRINK`, vocabulary hidden + 3), where the count is certified; with --shrink every
    size it leaves out is the config's own (`shrink_sizes`)."""
    import warnings  # noqa: PLC0415
    from dataclasses import replace  # noqa: PLC0415

    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415
    from ..dimension.memory import check_memory  # noqa: PLC0415
    from ..models import certify, hf  # noqa: PLC0415

    if hf_config is None or widths is not None or keys is not None:
        raise bad_value("hf-config", "given (with --shrink) instead of --widths/--keys",
                        hf_config, "Pass --hf-config CONFIG.json --shrink layers=2 and no --widths.")
    given = parse_shrink(shrink)
    source = str(hf_config)
    cfg = hf.check_config(hf.load_config(hf_config), source)
    spec = hf.read_config(cfg, source=source)
    hf.check_covered(spec, source)
    mt = spec.model_type
    if given:
        sizes, changes = shrink_sizes(spec, given)
        why_shrunk = "--shrink; every other size is the config's own"
    else:
        default = {**certify.SHRINK, **certify.FAMILY_SHRINK.get(mt, {})}
        default.pop("tokens")
        small_cfg, _ = certify.shrunk_config(cfg, **default, tokens=tokens)
        small = hf.read_config(small_cfg, source="shrunk config")
        sizes = {k: getattr(small, k) for k in ("layers", "hidden", "heads", "kv_heads",
                                                 "head_dim", "intermediate", "vocab")}
        own = {k: getattr(spec, k) for k in sizes}
        changes = [f"{k} {own[k]:,} -> {sizes[k]:,}" for k in SHRINK_KEYS if sizes[k] != own[k]]
        why_shrunk = ("the default shrink, count --validate's, where the count is certified "
                      "(vocabulary hidden + 3)")
    small = replace(spec, **sizes, positions=tokens if spec.positions else 0)
    check_memory(hf.measure_estimate(small, tokens), max_memory)
    small_cfg, notes = certify.shrunk_config(
        cfg, layers=sizes["layers"], heads=sizes["heads"], head_dim=sizes["head_dim"],
        intermediate=sizes["intermediate"], tokens=tokens, vocab=sizes["vocab"],
        hidden=sizes["hidden"], kv_heads=sizes["kv_heads"], any_vocab=True)
    arch = certify.native_network(small_cfg, tokens, "hidden")
    counted = certify.rules_count(hf.read_config(small_cfg, source="shrunk config"), "hidden",
                                  arch.tied)
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    t0 = time.perf_counter()
    with warnings.catch_warnings():   # the status below says what a warning would
        warnings.simplefilter("ignore")
        result = neuromanifold_dim(arch, method="numerical", seed=seed, device=device,
                                   max_memory=max_memory, progress=progress)
    seconds = time.perf_counter() - t0
    settled = result.status == "settled"
    verified = settled and result.dimension == counted["count"] and \
        arch.n_params == counted["n_params"]
    finding = None
    if arch.n_params != counted["n_params"]:
        finding = (f"parameter count differs: the network has {arch.n_params}, the rules count "
                   f"{counted['n_params']}")
    elif result.status == "lower-bound":
        finding = (f"the measured rank is only a lower bound ({result.lower_bound} <= dim <= "
                   f"{result.upper_bound}); the count {counted['count']} is neither verified nor "
                   "refuted")
    elif not settled:
        finding = f"the measured rank is {result.status}; nothing is verified"
    elif result.dimension != counted["count"]:
        diff = counted["count"] - result.dimension
        finding = (f"measured {result.dimension} vs counted {counted['count']}: "
                   + (f"{diff} redundant directions the rules miss" if diff > 0 else
                      f"{-diff} counted symmetry directions are not in the kernel"))
    out = {"model_type": mt, "model_class": hf.MODEL_CLASSES[mt],
           "counted_output": hf.COUNTED_OUTPUT, "shrunk": sizes, "tokens": tokens,
           "changed": changes, "why_shrunk": why_shrunk, "notes": notes,
           "network": "the converted native network (models.convert), float64 throughout",
           "architecture": str(arch), "n_params": arch.n_params, "counted": counted["count"],
           "measured": result.dimension, "measured_status": result.status,
           "verified": verified, "finding": finding, "seconds": seconds,
           "result": result.to_dict()}
    if as_json:
        print_json(out)
    else:
        gap = (f"singular-value gap {result.gap:.1f} decades, " if result.gap is not None else "")
        bounds = (f"{result.lower_bound} <= dim <= {result.upper_bound}, "
                  if result.status != "settled" and result.lower_bound is not None else "")
        lines = [("model class", f"{out['model_class']} shrunk: " + " ".join(
                     f"{k}={sizes[k]}" for k in SHRINK_KEYS) + f" tokens={tokens}"),
                 ("sizes changed", (", ".join(changes) + f" [{why_shrunk}]") if changes
                  else "none: the config's own sizes")]
        lines += [("note", n) for n in notes]
        lines += [("counted output", out["counted_output"]),
                  ("measured on", out["network"]),
                  ("parameters", str(arch.n_params)),
                  ("dimension", f"{result.dimension}  [numerical, {result.status}: {bounds}{gap}"
                                f"N = {result.n_samples}]"),
                  ("symmetry count", f"{counted['count']} (" + ("agrees" if verified else
                                                             f"UNVERIFIED: {finding}") + ")"),
                  ("seconds", f"{seconds:.1f}")]
        width = max(len(k) for k, _ in lines)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in lines))
    if not settled:
        raise typer.Exit(EXIT_AMBIGUOUS)
