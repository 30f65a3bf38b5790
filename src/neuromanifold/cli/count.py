"""`neuromanifold count`: symmetry-aware parameter count of a Hugging Face config (docs/models.md)."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import bad_value, check_int, check_seed
from ..core.limits import MAX_TOKENS
from ..models.families import COUNTING_RULES, FAMILIES, listed
from .common import EXIT_AMBIGUOUS, METHOD, NETWORK, OUTPUT, print_json, stderr_progress


def config_from_options(config: Optional[str], model_type: Optional[str]) -> tuple[dict, str]:
    """(the config dict, its source) of a config.json path or a shipped config (exactly one)."""
    from ..models import hf  # noqa: PLC0415

    if (config is None) == (model_type is None):
        raise bad_value("config", "a config.json path or --model-type (exactly one)",
                        f"config={config!r}, model_type={model_type!r}",
                        "Pass e.g. `count path/config.json` or `count --model-type gpt2`.")
    if model_type is not None:
        return hf.shipped_config(model_type.lower()), f"{model_type} config"
    return hf.load_config(config), str(config)


def _class_check(result: dict) -> str:
    """Whether the model class built on the meta device has the result's n_params."""
    built = result.get("model_class_parameters")
    if built is None:
        return ("not checked: transformers is not installed" if result.get("checked")
                else "not built; --check builds it")
    return "equal" if built == result["n_params"] else f"DIFFERENT: {built:,}"


def _parameters_line(result: dict, model_class: str) -> str:
    """n_params (from the config's fields), and whether `model_class` built on the meta device
    has as many (with --check or --validate)."""
    return (f"parameters       {result['n_params']:,} (from the config's fields; {model_class} "
            f"on the meta device: {_class_check(result)})")


def _check_differs(result: dict) -> bool:
    """True where transformers' class was built and has a different parameter count (the
    formulas do not describe it: an internal failure, exit 1)."""
    rows = [result] + ([result["hidden"]] if isinstance(result.get("hidden"), dict) else [])
    return any(r.get("model_class_parameters") not in (None, r.get("n_params")) for r in rows
               if r.get("n_params") is not None)


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
    lines.append(_parameters_line(result, result["model_class"]))
    lines.append(f"symmetry dims    {result['symmetry_total']:,} (attention: "
                 f"{result['attention_redundancy']:,})")
    lines.append(f"count            {result['count']:,}  [{result['label']}: {result['label_why']}]")
    if result.get("evidence"):
        lines.append(f"evidence         {result['evidence']}")
    logits = result.get("logits")
    if logits is not None:
        changes = ", ".join(f"{r['rule']}: {r['total']:,}" for r in logits.get("changes", []))
        lines.append("logits count     " + (
            f"{logits['count']:,} of {logits['n_params']:,} parameters ("
            + (changes or "tied logits: the same families as the hidden state") + ")"
            if logits["count"] is not None else f"not counted: {logits['why']}"))
    lines += [f"note             {note}" for note in result.get("notes", [])]
    lines.append(f"rules            {result['docs']}")
    return "\n".join(lines)


def _registry_table(result: dict) -> str:
    """The count of a family counted through the converter and the registry (`full_size`)."""
    lines = [f"model type       {result['model_type']}: the converted native network on "
             f"{result['tokens']} tokens; counted output: {result['output']}",
             f"architecture     {result['architecture']}",
             "continuous symmetries (registry families, in total):"]
    for r in result["rules"]:
        lines.append(f"  {r['rule']:<40} {r['total']:>14,}  {r['how']}")
        if r.get("why"):
            lines.append(f"      why: {r['why']}")
    lines.append(_parameters_line(result, "transformers' causal-LM class"))
    lines.append(f"symmetry dims    {result['symmetry']:,}")
    lines.append("count            " + (
        f"{result['count']:,}  [estimate: parameters minus the families; an upper bound on the "
        "functional dimension where they are independent, checked on shrunk models "
        "(count --validate), not at this size]" if result["count"] is not None
        else f"not counted: {result['why']}"))
    if result.get("evidence") and result["count"] is not None:
        lines.append(f"evidence         {result['evidence']}")
    hidden = result.get("hidden")
    if hidden is not None:
        lines.append(_hidden_line(result, hidden))
    lines += [f"note             {note}" for note in result.get("notes", [])]
    lines.append("rules            docs/models.md#families-counted-through-the-registry")
    return "\n".join(lines)


def _hidden_line(logits: dict, hidden: dict) -> str:
    """The count of the last hidden state (`full_size(..., output="hidden")`) beside the
    logits': the parameters and families the logits add."""
    if hidden["count"] is None:
        return f"hidden state     not counted: {hidden['why']}"
    names = {r["rule"] for r in hidden["rules"]}
    dropped = [r["rule"] for r in logits["rules"] if r["rule"] not in names]
    extra = logits["n_params"] - hidden["n_params"]
    return (f"hidden state     {hidden['count']:,} of {hidden['n_params']:,} parameters "
            f"(transformers' base-model class on the meta device: {_class_check(hidden)}; "
            + ("the logits' parameters and families: tied logits add none" if not extra
               and not dropped else
               f"the logits add {extra:,} parameters (L) and the families "
               + ", ".join(f"'{n}'" for n in dropped) + ", symmetries of the logits only")
            + ")")


def _validation_lines(check: dict) -> list[str]:
    lines = [f"validation       shrunk {check['model_type']} (native, {check['output']}"
             f"{', tied' if check['tied'] else ''}): {check['architecture']}"]
    rules = check["rules"]
    counted = ("not counted" if check["counted"] is None else f"{check['counted']}")
    lines.append(f"                 parameters {check['n_params']}, counted {counted} "
                 f"({'registry families' if rules.get('source') == 'registry' else 'rules'}), "
                 f"{check['registry']['count']} (registry: n_params - its families), certified "
                 + (f"{check['certified']}" if check["status"] == "certified" else
                    f"{check['lower_bound']} <= dim <= {check['upper_bound']}")
                 + f" ({check['status']}), {check['seconds']:.1f} s")
    if check["counted"] is None and rules.get("why"):
        lines.append(f"                 rules: {rules['why']}")
    for note in check["notes"]:
        lines.append(f"                 note: {note}")
    for row in check.get("independence", []):
        lines.append(f"independence     hidden {row['hidden']}, head_dim {row['head_dim']}, "
                     f"{row['layers']} layers: tangent rank over F_p {row['tangent_rank']}, counted "
                     f"{row['counted_symmetry']}: "
                     + ("independent" if row["independent"] else "NOT shown independent")
                     + f" ({row['seconds']:.1f} s)")
    from ..models.certify import window_dropped  # noqa: PLC0415

    lines.append("verdict          " + (("verified: certified == counted" + (
        " (of the model without its sliding window: see the note)"
        if window_dropped(check["notes"]) else "")) if check["verified"] else check["finding"]))
    return lines


def count_command(
    config: Optional[str] = typer.Argument(None, help="A model's config.json."),
    model_type: Optional[str] = typer.Option(
        None, "--model-type", help=f"A shipped config: {listed(FAMILIES)}.",
        rich_help_panel=NETWORK),
    validate: bool = typer.Option(False, "--validate", help="Certify a shrunk model of the same "
                                  "family (converted to the native network, ball arithmetic) and "
                                  "compare with the count.", rich_help_panel=METHOD),
    numerical: bool = typer.Option(False, "--numerical", help="With --validate: also measure the "
                                   "shrunk transformers model with functional_dim (float64, a "
                                   "cross-check, not a proof).", rich_help_panel=METHOD),
    tokens: Optional[int] = typer.Option(None, help="Sequence length of the shrunk model's inputs "
                                         "(--validate; default 3).", rich_help_panel=METHOD),
    seed: Optional[int] = typer.Option(None, help="Random seed of the shrunk model's weights and "
                                       "inputs (--validate; default 0).",
                                       rich_help_panel=METHOD),
    hidden_state: bool = typer.Option(False, "--hidden-state", help="With --validate: also "
                                      "certify the shrunk model's last hidden state (the base "
                                      "model's output, no logits) and compare with its count; "
                                      "about doubles the time.", rich_help_panel=METHOD),
    real_width: bool = typer.Option(False, "--real-width", help="With --validate: also check "
                                    "the families' independence over F_p at the config's own "
                                    "head width (2 layers; seconds to minutes).",
                                    rich_help_panel=METHOD),
    check_class: bool = typer.Option(False, "--check", help="Also build transformers' model "
                                     "class on the meta device and check that it has the "
                                     "parameters counted from the config (imports "
                                     "transformers; --validate does it too).",
                                     rich_help_panel=METHOD),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Parameters, continuous symmetries and the symmetry-aware count of a transformer config."""
    from ..models import certify, hf  # noqa: PLC0415

    if seed is not None:
        check_seed(seed)
    for name, value in (("tokens", tokens), ("seed", seed), ("numerical", numerical or None),
                        ("hidden-state", hidden_state or None),
                        ("real-width", real_width or None)):
        if value is not None and not validate:
            raise bad_value(name, "given only with --validate (the count itself draws nothing)",
                            value, f"Add --validate to certify a shrunk model, or drop --{name}.")
    if tokens is not None:   # before any progress line: bad input is one line
        # on one token every softmax weight is 1: no query or key is read, and the counting
        # rules (which assume t >= 2, Theorem 3.4) do not describe the shrunk model
        why = "Pass --tokens 2 or more (on one token no query or key is read)."
        tokens = check_int("tokens", tokens, minimum=2, fix=why)
        if tokens > MAX_TOKENS:
            raise bad_value("tokens", f"at most {MAX_TOKENS:,}", tokens,
                            "Pass a few tokens (the shrunk model is certified on them).")
    tokens = certify.SHRINK["tokens"] if tokens is None else tokens
    seed = 0 if seed is None else seed
    cfg, source = config_from_options(config, model_type)
    mt = cfg.get("model_type")
    ruled = isinstance(mt, str) and mt in COUNTING_RULES
    if not ruled and not (isinstance(mt, str) and mt in FAMILIES):
        raise bad_value(f"{source}: model_type", f"one of {listed(FAMILIES)} (counting rules, or "
                        "the converter and the symmetry registry)", mt,
                        "See docs/models.md#supported-families.")
    if numerical and not ruled:
        raise bad_value("numerical", "given only for the families with counting rules ("
                        f"{listed(COUNTING_RULES)}; it measures transformers' base model)",
                        mt, "Drop --numerical: --validate certifies the shrunk converted network.")
    cfg = hf.check_config(cfg, source)
    check_class = check_class or validate
    # Progress on stderr for every phase of a --validate (seconds to minutes; stdout, --json
    # included, carries only the result); a plain count is arithmetic and says nothing.
    say = stderr_progress("count") if validate else (lambda _msg: None)
    say(f"counting {mt} from the config" + (" (and transformers' model class on the meta "
                                             "device)" if check_class else ""))
    result: dict = {"model_type": mt}
    if not ruled:
        result.update(certify.full_size(cfg, check=check_class))
        result["hidden"] = certify.full_size(cfg, output="hidden", check=check_class)
        result["hidden"]["checked"] = check_class
    if ruled:
        spec = hf.read_config(cfg, source=source)
        result = hf.count(spec)
        tied = bool(cfg.get("tie_word_embeddings", mt in ("gpt2", "gemma")))
        result["logits"] = certify.rules_count(spec, "logits", tied)
        result["model_class_parameters"] = (hf.model_parameters(spec) if check_class
                                            and hf.have_transformers() else None)
        result["notes"] = certify.window_notes(cfg, None, "rules")
    result["checked"] = check_class
    result["evidence"] = certify.real_width_evidence(cfg)
    check = None
    if validate:
        progress = say
        say("validation: certifying the dimension of a shrunk model")
        check = certify.validate(cfg, seed=seed, tokens=tokens, progress=progress)
        if ruled or check["rules"].get("count") is not None:
            ladder = certify.quick_ladder(cfg) + ((certify.real_width_size(cfg),) if real_width
                                                  else ())
            say("independence of the counted families at " + ", ".join(
                f"{layers} layers x {heads} heads of width {head_dim}"
                for layers, heads, head_dim, _ in ladder) + " (tangent ranks over F_p)")
            check["independence"] = certify.independence(cfg, seed=seed, ladder=ladder,
                                                         progress=progress)
        if ruled:
            if numerical:
                say("numerical cross-check: functional_dim of the shrunk transformers model")
                check["numerical"] = {k: v for k, v in hf.validate(
                    spec, seed=seed, tokens=4, progress=progress).items()
                    if k in ("n_params", "counted", "measured", "measured_status", "verified",
                             "finding", "seconds")}
        result["validation"] = check
        if hidden_state and check["output"] != "hidden":
            say("validation of the hidden-state network")
            result["validation_hidden"] = certify.validate(cfg, seed=seed, tokens=tokens,
                                                           progress=progress, output="hidden")
    if as_json:
        print_json(result)
    else:
        if ruled:
            print(_table(result))
        else:
            print(_registry_table(result))
        if check is not None:
            print("\n".join(_validation_lines(check)))
            num = check.get("numerical")
            if num is not None:
                print(f"numerical        functional_dim of the shrunk transformers model (hidden "
                      f"state): {num['measured']} ({num['measured_status']}) vs counted "
                      f"{num['counted']}, {num['seconds']:.1f} s (a cross-check, not a proof)")
            if "validation_hidden" in result:
                print("\n".join(_validation_lines(result["validation_hidden"])))
    checks = [c for c in (check, result.get("validation_hidden")) if c is not None]
    if any(not c["verified"] for c in checks) or _check_differs(result):
        raise typer.Exit(EXIT_AMBIGUOUS)
