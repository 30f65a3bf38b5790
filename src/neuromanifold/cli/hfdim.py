"""`neuromanifold dim --hf-config CONFIG.json --shrink ...`: measured dimension of a shrunk
Hugging Face model (docs/models.md)."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import bad_value
from .common import EXIT_AMBIGUOUS, err, print_json


def parse_shrink(text: Optional[str]) -> dict:
    """'layers=2,heads=4' -> {'layers': 2, 'heads': 4}; keys from SHRINK_DEFAULTS (not tokens)."""
    from ..models.hf import SHRINK_DEFAULTS  # noqa: PLC0415

    allowed = [k for k in SHRINK_DEFAULTS if k != "tokens"]
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, _, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if key not in allowed or not value.strip().isdigit():
            raise bad_value("shrink", f"comma-separated key=value with keys {', '.join(allowed)}",
                            part, "Pass e.g. --shrink layers=2,heads=4,head_dim=2.")
        if key in out:
            raise bad_value("shrink", "each key at most once", text,
                            f"Give {key}= once (it was given {out[key]} and {int(value)}).")
        out[key] = int(value)
    return out


# Options of `dim` that a shrunk Hugging Face model does not use, with their defaults: given
# with --hf-config they are refused rather than silently ignored.
NOT_WITH_HF = {"method": "auto", "attention": "lightning", "temperature": 1.0, "samples": None,
               "prime": None, "precision": None, "heads": None, "values": None, "residual": False,
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
    from ..models import hf  # noqa: PLC0415

    if hf_config is None or widths is not None or keys is not None:
        raise bad_value("hf-config", "given (with --shrink) instead of --widths/--keys",
                        hf_config, "Pass --hf-config CONFIG.json --shrink layers=2 and no --widths.")
    sizes = parse_shrink(shrink)
    spec = hf.read_config(hf.load_config(hf_config), source=str(hf_config))
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    check = hf.validate(spec, seed=seed, device=device, progress=progress, tokens=tokens,
                        max_memory=max_memory, **sizes)
    result = check["result"]
    if as_json:
        print_json(check)
    else:
        lines = [("model class", f"{check['model_class']} shrunk: " + " ".join(
                     f"{k}={check['shrunk'][k]}" for k in ("hidden", "heads", "kv_heads", "head_dim",
                                                           "intermediate", "layers", "vocab"))
                  + f" tokens={check['tokens']}"),
                 ("counted output", check["counted_output"]),
                 ("parameters", str(check["n_params"])),
                 ("dimension", f"{check['measured']}  [numerical, {check['measured_status']}: "
                               + (f"{result['lower_bound']} <= dim <= {result['upper_bound']}, "
                                  if result["lower_bound"] is not None else "")
                               + f"singular-value gap {result['gap']:.1f} decades, N = "
                               f"{result['n_samples']}, Jacobian mode {check['jacobian_mode']}]"),
                 ("symmetry count", f"{check['counted']} (" + ("agrees" if check["verified"] else
                                                              f"UNVERIFIED: {check['finding']}") + ")"),
                 ("seconds", f"{check['seconds']:.1f}")]
        width = max(len(k) for k, _ in lines)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in lines))
    if check["measured_status"] != "settled":
        raise typer.Exit(EXIT_AMBIGUOUS)
