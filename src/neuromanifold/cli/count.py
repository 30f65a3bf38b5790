"""`neuromanifold count`: symmetry-aware parameter count of a Hugging Face config (docs/models.md)."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import bad_value, check_seed
from .common import EXIT_AMBIGUOUS, err, print_json


def spec_from_options(config: Optional[str], model_type: Optional[str]):
    """The Spec of a config.json path, or of a shipped config (exactly one of the two)."""
    from ..models import hf  # noqa: PLC0415

    if (config is None) == (model_type is None):
        raise bad_value("config", "a config.json path or --model-type (exactly one)",
                        f"config={config!r}, model_type={model_type!r}",
                        "Pass e.g. `count path/config.json` or `count --model-type gpt2`.")
    if model_type is not None:
        return hf.read_config(hf.shipped_config(model_type.lower()), source=f"{model_type} config")
    return hf.read_config(hf.load_config(config), source=str(config))


def _table(result: dict) -> str:
    lines = [f"model class      {result['model_class']} ({result['model_type']}); counted output: "
             f"{result['counted_output']}"]
    spec = result["spec"]
    lines.append("architecture     " + " ".join(f"{k}={spec[k]}" for k in (
        "hidden", "heads", "kv_heads", "head_dim", "intermediate", "layers", "vocab", "positions")))
    lines.append("parameters per layer:")
    lines += [f"  {k:<28} {v:>14,}" for k, v in result["parameters"]["layer"].items()]
    lines.append(f"  {'layer total':<28} {result['parameters_per_layer']:>14,}")
    lines.append("parameters once:")
    once = {**result["parameters"]["embeddings"], **result["parameters"]["final"]}
    lines += [f"  {k:<28} {v:>14,}" for k, v in once.items()]
    lines.append("continuous symmetries (dimension per layer / in total):")
    for r in result["symmetries"]:
        lines.append(f"  {r['rule']:<58} {r['per_layer']:>8,} / {r['total']:>12,}")
        lines.append(f"      why: {r['why']}")
    built = result.get("model_class_parameters")
    same = ("not checked: transformers is not installed" if built is None
            else "equal" if built == result["n_params"] else f"DIFFERENT: {built:,}")
    lines.append(f"parameters       {result['n_params']:,} ({result['model_class']} built on the "
                 f"meta device: {same})")
    lines.append(f"symmetry dims    {result['symmetry_total']:,} (attention: "
                 f"{result['attention_redundancy']:,})")
    lines.append(f"count            {result['count']:,}  [{result['label']}: {result['label_why']}]")
    lines.append(f"rules            {result['docs']}")
    return "\n".join(lines)


def count_command(
    config: Optional[str] = typer.Argument(None, help="A model's config.json."),
    model_type: Optional[str] = typer.Option(None, "--model-type",
                                             help="A shipped config: gpt2, llama, mistral, qwen2 or bert."),
    validate: bool = typer.Option(False, "--validate", help="Measure a shrunk random model of the "
                                  "same family with functional_dim and compare with the count."),
    tokens: Optional[int] = typer.Option(None, help="Sequence length of the shrunk model's inputs "
                                         "(--validate; default 4)."),
    seed: Optional[int] = typer.Option(None, help="Random seed of the shrunk model's weights and "
                                       "inputs (--validate; default 0)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Parameters, continuous symmetries and the symmetry-aware count of a transformer config."""
    from ..models import hf  # noqa: PLC0415

    if seed is not None:
        check_seed(seed)
    for name, value in (("tokens", tokens), ("seed", seed)):
        if value is not None and not validate:
            raise bad_value(name, "given only with --validate (the count itself draws nothing)",
                            value, f"Add --validate to measure a shrunk model, or drop --{name}.")
    tokens = hf.SHRINK_DEFAULTS["tokens"] if tokens is None else tokens
    seed = 0 if seed is None else seed
    spec = spec_from_options(config, model_type)
    if validate:
        hf.plan_validation(spec, tokens=tokens)  # refuse sizes that cannot be measured, first
    result = hf.count(spec)
    result["model_class_parameters"] = hf.model_parameters(spec) if hf.have_transformers() else None
    check = None
    if validate:
        progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
        check = hf.validate(spec, seed=seed, tokens=tokens, progress=progress)
        result["validation"] = check
    if as_json:
        print_json(result)
    else:
        print(_table(result))
        if check is not None:
            shape = " ".join(f"{k}={check['shrunk'][k]}" for k in (
                "hidden", "heads", "kv_heads", "intermediate", "layers", "vocab"))
            print(f"validation       shrunk {check['model_class']}: {shape} "
                  f"tokens={check['tokens']}: parameters {check['n_params']}, counted "
                  f"{check['counted']}, measured {check['measured']} ({check['measured_status']}, "
                  f"{check['jacobian_mode']}), {check['seconds']:.1f} s")
            print("verdict          " + ("rules verified: measured == counted" if check["verified"]
                                          else f"UNVERIFIED: {check['finding']}"))
    if check is not None and not check["verified"]:
        raise typer.Exit(EXIT_AMBIGUOUS)
