"""`count --validate`, certified: a config shrunk, converted to the native network and its
dimension proved (docs/models.md#validation-count-validate).

`shrunk_config` scales a config down without creating directions of its own (vocabulary
above the hidden width + 2, the position table cut to the t tokens used, the head structure
kept); `validate` converts it (`native_network`: the logits, or `output="hidden"` the base
model's last hidden state), certifies its dimension
(`neuromanifold_dim(method="certified")`: a ball-arithmetic lower bound set against
n_params - rank_p(registry tangents)) and compares it with the rules' count of the same shrunk
model (`hf.count`, plus `logits_rules` for the logits the native network outputs), and with the
registry's count. `independence` checks, at sizes growing toward the real one, that the
tangents of every family have rank over F_p equal to the sum of the rules' counts: the evidence
behind the full-size count.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..core.checks import bad_value, check_int, check_seed
from ..errors import InputError
from . import convert, hf

# The shrunk model (docs/models.md#validation-count-validate): 2 layers of 2 heads of width 2
# (hidden 4), MLP width 3, t = 3 tokens, vocabulary hidden + 3 (above hidden + 2).
SHRINK = {"layers": 2, "heads": 2, "head_dim": 2, "intermediate": 3, "tokens": 3}
# Smaller shrinks where the default one takes too long: GPT-NeoX's partial rotary needs heads of
# width 4, so 2 heads give hidden 8 (950 parameters: not certified in 19 minutes); one head of
# width 4 keeps it ungrouped (318 parameters, 265 s).
# Parallel blocks need a larger vocabulary: layer 1's MLP reads the normed token embedding
# alone (rotary positions add nothing to the stream), a function on the V tokens, so a small V
# bounds what it can write and the map loses rank of its own (docs/models.md#validation-count-validate):
# measured beyond every symmetry, Falcon 4 directions at V = 7, 1 at 8, none at 9 and 10;
# GPT-NeoX 15 at 7, 9 at 9, 3 at 11, none at 12 to 30. The last hidden state (no logits reading
# E back) needs more for Falcon: float rank 145 of the registry's 153 at V = 9 (a clean
# 6.7-decade gap), 162 = 162 at V = 12; so 12 for both outputs.
FAMILY_SHRINK = {"gpt_neox": {"heads": 1, "vocab": 12}, "falcon": {"vocab": 12}}
# The quick independence ladder of a family whose shrink needs other sizes (layers, heads,
# head_dim, intermediate): GPT-NeoX's partial rotary needs heads of width 4 (one head at
# hidden 4, two at hidden 8).
FAMILY_LADDER = {"gpt_neox": ((2, 1, 4, 3), (2, 2, 4, 6))}
# Config fields of each size, every spelling the converted families use.
_FIELDS = {"hidden": ("n_embd", "hidden_size"), "heads": ("n_head", "num_attention_heads"),
           "layers": ("n_layer", "num_hidden_layers"),
           "intermediate": ("n_inner", "intermediate_size", "ffn_hidden_size"),
           "positions": ("n_positions", "max_position_embeddings")}
# The field a family reads where its config leaves it out (Falcon's MLP width defaults to
# 4 hidden under `ffn_hidden_size`).
_OWN_NAMES = {("falcon", "intermediate"): "ffn_hidden_size"}
# Old spellings of the rotary fields (Pythia's published configs) and the names read today.
_RENAMED = {"rotary_pct": "partial_rotary_factor", "rotary_emb_base": "rope_theta"}


def _heads(cfg: dict) -> tuple[int, int]:
    """(query heads, key/value heads) of a config; multi-query Falcon has one key/value head."""
    H = next((cfg[k] for k in _FIELDS["heads"] if cfg.get(k) is not None), None)
    if H is None:
        raise bad_value("config: num_attention_heads", "given", "missing",
                        "Add the field, as in the published config.json.")
    G = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") or H
    if cfg.get("multi_query"):
        G = 1
    return H, G


def shrunk_config(config: dict, *, layers: int = SHRINK["layers"], heads: int = SHRINK["heads"],
                  head_dim: int | None = None, intermediate: int = SHRINK["intermediate"],
                  tokens: int = SHRINK["tokens"], vocab: int | None = None,
                  hidden: int | None = None, kv_heads: int | None = None,
                  any_vocab: bool = False) -> tuple[dict, list[str]]:
    """(the config scaled down, notes on what was changed beyond the sizes).

    Kept: the model type and every option (biases, norms, parallel blocks, tied embeddings,
    activations). Heads: grouped stays grouped (H query heads, H / 2 key/value heads, one for
    multi-query), ungrouped stays ungrouped; rotary stays rotary, partial rotary stays partial
    (one rotated pair in a head of width >= 4; `head_dim` defaults to 2, or 4 under partial
    rotary). The vocabulary defaults to hidden + 3 (a
    vocabulary at most hidden + 2 leaves the embedding short of rank and creates directions of
    its own), the position table to the t tokens used. Scaled rotary frequencies are replaced
    by the default ones at the config's base (the rank does not depend on the angles as long as
    they are distinct; the native model has no scaling).

    `hidden` and `kv_heads` (default: heads x head_dim, and the grouping kept as above) and
    `any_vocab` (any vocabulary of at least 2, not only above hidden + 2) let `dim --hf-config`
    keep a config's own sizes (`hf_sizes`)."""
    cfg = dict(config)
    notes = []
    for old, new in _RENAMED.items():
        if old in cfg and new not in cfg:
            cfg[new] = cfg[old]
            notes.append(f"{old} read as {new}")
    factor = cfg.get("partial_rotary_factor")
    partial = factor not in (None, 1, 1.0)
    if head_dim is None:
        head_dim = 4 if partial else SHRINK["head_dim"]
    for name, value in (("layers", layers), ("heads", heads), ("head_dim", head_dim),
                        ("intermediate", intermediate), ("tokens", tokens)):
        check_int(f"shrink {name}", value, minimum=1, fix="Pass a small positive integer.")
    H, G = _heads(cfg)
    d = heads * head_dim if hidden is None else check_int("shrink hidden", hidden, minimum=1)
    V = d + 3 if vocab is None else (
        check_int("shrink vocab", vocab, minimum=2) if any_vocab else
        check_int("shrink vocab", vocab, minimum=d + 3,
                  fix=f"Pass a vocabulary above hidden + 2 = {d + 2}."))
    kv = heads if G == H else (1 if G == 1 else max(1, heads // 2))
    if kv_heads is not None:
        kv = check_int("shrink kv_heads", kv_heads, minimum=1)
        if heads % kv:
            raise bad_value("shrink kv_heads", f"a divisor of the heads ({heads})", kv,
                            "Pass kv_heads dividing heads.")
    sizes = {"hidden": d, "heads": heads, "layers": layers, "intermediate": intermediate,
             "positions": tokens}
    for what, names in _FIELDS.items():
        present = [n for n in names if n in cfg]
        for name in present or [_OWN_NAMES.get((cfg.get("model_type"), what), names[0])]:
            cfg[name] = sizes[what]
    if cfg.get("model_type") == "gpt2":
        cfg["n_ctx"] = tokens
    if "num_kv_heads" in cfg:
        cfg["num_kv_heads"] = kv
    cfg["num_key_value_heads"] = kv
    cfg["head_dim"] = head_dim
    cfg["vocab_size"] = V
    if partial:
        if head_dim < 4:
            raise bad_value("shrink head_dim", "at least 4 for partial rotary embeddings", head_dim,
                            "Pass head_dim=4 (one rotated pair and two unrotated coordinates).")
        cfg["partial_rotary_factor"] = 2 / head_dim
        notes.append(f"partial rotary {factor} shrunk to one rotated pair of {head_dim}")
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) != "default":
        cfg["rope_scaling"] = None
        notes.append(f"rotary scaling {scaling.get('rope_type', scaling.get('type'))!r} replaced "
                     "by the default frequencies at the same base")
    window = sliding_window(cfg)
    if window is not None and window < tokens:
        cfg["sliding_window"] = None
    notes += window_notes(config, tokens, "validate")
    return cfg, notes


def sliding_window(config: dict) -> int | None:
    """The sliding window transformers' class of `config` applies (`sliding_window`: every
    token attends to the window's last tokens, itself included), or None: Mistral and Phi-3
    wherever it is set, Qwen2 and Qwen3 only with `use_sliding_window`, no other family."""
    mt, window = config.get("model_type"), config.get("sliding_window")
    if window is None or mt not in hf.WINDOW_ALWAYS + hf.WINDOW_SWITCHED:
        return None
    if mt in hf.WINDOW_SWITCHED and config.get("use_sliding_window") is not True:
        return None
    return window


def window_notes(config: dict, tokens: int | None, use: str) -> list[str]:
    """What a config's sliding window does to what is computed on `tokens` tokens (`use`:
    'rules', the counting rules, which read no tokens; 'count', the converted network counted
    on `tokens` tokens; 'validate', the shrunk network certified on them; docs/models.md#sliding-windows).
    A window at least t tokens wide changes nothing on t tokens; a narrower one masks scores,
    which the native network has not: it is dropped where it is, and the note says so."""
    given, window = config.get("sliding_window"), sliding_window(config)
    if given is None:
        return []
    if window is None:
        why = ("use_sliding_window is not true" if config.get("model_type") in hf.WINDOW_SWITCHED
               else f"transformers' {config.get('model_type')} class has no sliding window")
        return [f"sliding_window {given} is ignored: {why}, so every token attends to every "
                "token before it"]
    if window == 1:   # no t >= 2 avoids it: each token attends to itself alone
        note = ("sliding_window 1: each token attends only to itself, so no query or key is read "
                "on any sequence of 2 or more tokens; every counted family is still a symmetry "
                "with the window (the count stays an upper bound), but the window removes more")
        if use == "rules":
            return [note]
        done = "counted" if use == "count" else "certified"
        return [f"{note}; the window is dropped: the {'converted' if use == 'count' else 'shrunk'}"
                f" network on t = {tokens} tokens attends to every token (the native network has "
                f"no window), so what is {done} is the model without it"]
    if use == "rules":
        return [f"sliding_window {window}: every counted family is a symmetry with the window "
                f"too (it masks scores, it reads no weight); it changes nothing on at most "
                f"{window} token{'s' if window > 1 else ''}, where count --validate checks the "
                "count"
                + ("" if window >= SHRINK["tokens"] else
                   f" (--tokens {window}: its default {SHRINK['tokens']} tokens drop the window)")]
    if window >= tokens:
        return [f"sliding_window {window} >= t = {tokens} tokens: it changes nothing on "
                f"{tokens} tokens (each token sees all of them)"]
    if use == "count":
        return [f"sliding_window {window} is narrower than the {SHRINK['tokens']} tokens counted "
                f"by default: counted on t = {window} tokens, where it changes nothing (on "
                "longer sequences it masks scores, which the native network does not have)"]
    return [f"sliding_window {window} < t = {tokens} tokens is dropped: the shrunk network "
            "attends to every token (the native network has no window), so what is certified is "
            f"the model without it; pass --tokens {window} to certify where the window changes "
            "nothing"]


def window_dropped(notes: list[str]) -> bool:
    """Whether `window_notes` dropped a sliding window from what was certified."""
    return any(n.startswith("sliding_window") and "is dropped" in n for n in notes)


def shrunk_spec_of(cfg: dict) -> hf.Spec:
    """The counting rules' Spec of a shrunk config (read by `hf.read_config`)."""
    return hf.read_config(cfg, "shrunk config")


def logits_rules(spec: hf.Spec, tied: bool) -> tuple[int, list[dict]] | None:
    """(parameters the logits add, the symmetry families that change) from the last hidden
    state to the logits, or None where no rule is written (docs/models.md, "Logits").

    RMSNorm models: tied logits E h add nothing; untied logits L h add V d parameters and two
    families, the final norm's gain absorbed into L (d) and the rotations of the residual
    stream, which keep every RMSNorm's statistic and which every reader, L among them, absorbs
    (d (d - 1) / 2). LayerNorm models with tied logits (GPT-2): the token table is read at the
    output too, so its rows' all-ones components (V) and the shift of a vector between it and
    the position table (d - 1) stop being symmetries."""
    d, V = spec.hidden, spec.vocab
    if spec.norm == "rmsnorm" and spec.prenorm:
        if tied:
            return 0, []
        return V * d, [{"rule": "final norm gain absorbed into the logits", "total": d},
                       {"rule": "residual-stream rotations (RMSNorm, untied logits)",
                        "total": d * (d - 1) // 2}]
    if spec.norm == "layernorm" and spec.prenorm and tied and spec.positions and not spec.type_vocab:
        return 0, [{"rule": "embeddings: the token table is read by the tied logits",
                    "total": -(V + d - 1)}]
    return None


def rules_count(spec: hf.Spec, output: str, tied: bool) -> dict:
    """The rules' count of `spec` for `output` ('hidden' or 'logits'): n_params, symmetry, count,
    or {'count': None, 'why': ...} where no rule covers it."""
    c = hf.count(spec)
    out = {"n_params": c["n_params"], "symmetry": c["symmetry_total"], "count": c["count"],
           "rules": [{"rule": r["rule"], "total": r["total"]} for r in c["symmetries"]]}
    if output == "hidden":
        return out
    extra = logits_rules(spec, tied)
    if extra is None:
        return {"count": None, "why": f"no logits rule for {spec.model_type} "
                f"({spec.norm}, {'tied' if tied else 'untied'})"}
    params, changes = extra
    sym = c["symmetry_total"] + sum(r["total"] for r in changes)
    return {"n_params": c["n_params"] + params, "symmetry": sym,
            "count": c["n_params"] + params - sym, "rules": out["rules"] + changes,
            "changes": changes}


# Counts of the registry families whose generic count is not proved (`Family.count` is None),
# written here for the converted families' options (docs/models.md, "Families counted through
# the registry"): (count of `arch` or None where no rule is written, why).
def _rotated_everywhere(arch) -> bool:
    return arch.tokens > 1 and all(arch.rotated_pairs)


def _stream_width(arch) -> int | None:
    return arch.widths[0] if arch.residual and len(set(arch.widths)) == 1 else None


_WRITTEN = {
    "per-head GL(a) on (Q, K)": (
        lambda a: 0 if _rotated_everywhere(a) else None,
        "its tangents are built in unrotated layers only; every layer is rotated (the rotary "
        "commutant holds the (Q, K) mixing there)"),
    "MLP neuron rescaling": (
        lambda a: (sum(a.mlp_widths) if a.mlp_kind == "gated"
                   and a.activation not in ("relu", "square") else None),
        "gated MLP: up row j times c, down column j times 1/c (act(gate x) * up x is linear in "
        "up x): the MLP width per layer"),
    "norm gain rescaling": (
        lambda a: ((1 if a.shared_norm else 2) * sum(a.widths[:-1])
                   if a.norm == "rmsnorm" and not a.norm_bias and not a.post_norm
                   and _stream_width(a) else None),
        "each pre-norm RMSNorm feeds only linear layers, which take diag(g): hidden per norm, "
        "two norms per layer (one when the parallel block shares it)"),
    "final norm gain": (
        lambda a: a.widths[-1] if a.final_norm and a.norm == "rmsnorm" else None,
        "untied logits L take the final RMSNorm's gain: hidden"),
    "stream rotations behind norms": (
        lambda a: (d * (d - 1) // 2 if (d := _stream_width(a)) and a.norm == "rmsnorm"
                   else None),
        "x -> R x keeps every RMSNorm's statistic and every reader (the untied logits among "
        "them) absorbs R: hidden (hidden - 1) / 2"),
    # Layernorm biases (Falcon, GPT-NeoX: docs/models.md, "Families counted through the registry").
    "stream rotations with norm biases": (
        lambda a: (((d - 1) * (d - 2) if a.norm == "layernorm" else d * (d - 1)) // 2
                   if (d := _stream_width(a)) else None),
        "x -> R x with R 1 = 1 keeps every layernorm's statistic (RMSNorm's for every R); the "
        "readers absorb R and each norm's bias turns with it: (hidden - 1) (hidden - 2) / 2"),
    "stream shifts behind layernorm": (
        lambda a: _writer_columns(a),
        "every writer of the stream plus 1 x^T (a column of ones), untied E + x 1^T (a row): "
        "one per column of every writer and per token row of E, distinct entries"),
    "gain and bias rescaling": (
        lambda a: (_norm_widths(a) if not a.post_norm and _stream_width(a) else None),
        "each pre-norm's gain and bias entry k times c, column k of its readers / c: hidden per "
        "norm, two norms per layer (one when the parallel block shares it)"),
}


def _writer_columns(arch) -> int:
    """The columns of every block writing the residual stream through its rows (T, the heads'
    value outputs O or unfactored V with their biases bv, bo_i, U_i, bu_i) and, untied, the
    token rows of E."""
    writers = ("T", "O_", "V_", "bo_", "U_", "bu_") + (("bv_",) if arch.values is None else ())
    columns = sum(shape[1] for name, shape, _ in arch.param_layout()
                  if name == "T" or name.startswith(writers[1:]))
    return columns + (arch.vocab if arch.vocab is not None and not arch.tied else 0)


def _norm_widths(arch) -> int:
    """The widths of the pre-norms: g_i and, with an MLP of its own norm, n_i."""
    return sum(d_in + (d_out if m > 0 and not arch.shared_norm else 0) for d_in, d_out, m in
               zip(arch.widths[:-1], arch.widths[1:], arch.mlp_widths))


def _value_mean_overlap(arch, names: set[str]) -> int | None:
    """Directions two counted families share: where a head's value output O_h is onto the stream
    (value width = hidden, one head of width hidden as in the shrunk GPT-NeoX), the mean direction
    of its W_h along x with O_h x = 1 (`layernorm means with reader biases`) is per-head GL(v) by
    x a^T (a^T W_h = (1/g)^T) plus the stream's shifts of O_h's columns and of bo_i and the value
    bias beside the output bias along x: one per such head. None where it is not written
    (key/value groups)."""
    needed = {"layernorm means with reader biases", "per-head GL(v) on (W, O)",
              "stream shifts behind layernorm", "value bias beside output bias"}
    if not needed <= names or arch.values is None:
        return 0
    heads = sum(H for H, v, d in zip(arch.head_counts, arch.values, arch.widths[1:]) if v >= d)
    if heads and arch.kv_heads is not None and arch.kv_heads != arch.head_counts:
        return None
    return heads


def registry_rules(arch) -> dict:
    """The count of the native network `arch` from the symmetry registry: n_params minus, for
    every family the registry splits off (`families_for`), its proved generic count
    (`Family.count`) or, where none is proved, the count written in `_WRITTEN` (named as
    such). `count` is None, with `why`, where a family has neither, or where the registry
    leaves out families for the network's options (layernorm biases off a residual stream of
    pre-norm blocks, `_norm_bias_covered`: `upper` is then n_params minus the families it has,
    an upper bound where they are independent). Directions two counted families share
    (`_value_mean_overlap`) are added back as a negative part."""
    from ..symmetries.registry import families_for  # noqa: PLC0415

    parts, unknown = [], []
    for fam in families_for(arch):
        proved = fam.count(arch)
        if proved is not None:
            parts.append({"rule": fam.name, "total": proved, "how": "proved (registry)"})
            continue
        rule, why = _WRITTEN.get(fam.name, (lambda _a: None, ""))
        value = rule(arch)
        if value is None:
            unknown.append(fam.name)
        else:
            parts.append({"rule": fam.name, "total": value, "how": "written rule", "why": why})
    overlap = _value_mean_overlap(arch, {p["rule"] for p in parts})
    if overlap is None:
        unknown.append("the overlap of the value outputs' means (key/value groups)")
    elif overlap:
        parts.append({"rule": "overlap: a value output onto the stream (means in GL(v), shifts)",
                      "total": -overlap, "how": "written rule",
                      "why": "one mean direction per head whose O_h is onto the stream is already "
                             "among GL(v), the stream's shifts and the value bias beside bo_i"})
    symmetry = sum(p["total"] for p in parts)
    out = {"n_params": arch.n_params, "symmetry": symmetry, "rules": parts,
           "output": "hidden" if arch.hidden_output else "logits", "count": None,
           "source": "registry"}
    if arch.norm_bias and not _norm_bias_covered(arch):   # families missing, not only counts
        out["why"] = ("the registry leaves out some of its norm and stream families for layernorm "
                      "biases (rotations, unseen directions, the final gain)")
        if unknown:
            out["why"] += "; no proved or written count for " + ", ".join(unknown)
        else:
            out["upper"] = arch.n_params - symmetry
            out["why"] += (f": n_params - the families it has = {arch.n_params - symmetry:,} is "
                           "an upper bound where they are independent, not the count")
    elif unknown:
        out["why"] = ("no proved or written count for " + ", ".join(unknown))
    else:
        out["count"] = arch.n_params - symmetry
    return out


def _norm_bias_covered(arch) -> bool:
    """Whether the registry has the layernorm-bias families of `arch`: pre-norm blocks on a
    residual stream (Falcon, GPT-NeoX: gains with biases, means, bias shifts, the final gain
    and bias, rotations and shifts of the stream); not without a residual (the unseen
    directions and rotations through a norm) nor post-norm blocks."""
    return arch.residual and not arch.post_norm and not arch.embed_norm


OUTPUTS = ("logits", "hidden")


def native_network(config: dict, tokens: int, output: str | None = None):
    """The converted native network of `config` on `tokens` tokens with `output`: 'logits'
    (the causal-LM model, `convert.from_config`), 'hidden' (the base model's last hidden state,
    after the final norm: the same network with `hidden_output`, its embedding untied, read at
    the input only, and no logits map; tests/models/test_convert.py checks it equals
    transformers' base model), or None for the converter's own (BERT: hidden, else logits)."""
    arch = convert.from_config(config, tokens)
    if output is None or output == ("hidden" if arch.hidden_output else "logits"):
        return arch
    if output not in OUTPUTS:
        raise bad_value("output", "'logits' or 'hidden'", output, "Pass output='hidden' for the "
                        "last hidden state, 'logits' for the logits.")
    if arch.hidden_output:
        raise bad_value("output", "'hidden' for bert (BertModel has no logits)", output,
                        "Pass output='hidden' or leave it out.")
    return replace(arch, hidden_output=True, tied=False)


def full_size(config: dict, tokens: int = SHRINK["tokens"], output: str | None = None,
              check: bool = False) -> dict:
    """`registry_rules` of the full-size converted network of `config` on `tokens` tokens (the
    layout alone, read from the config's fields: no weights, no transformers) for `output`
    (`native_network`: logits by default, BERT's hidden state); on fewer tokens where a sliding
    window is narrower (`window_notes`, under `notes`). With `check`, the parameters of
    transformers' model class built on the meta device (`model_class_parameters`; None
    without transformers or `check`)."""
    config = hf.check_config(config)
    window = sliding_window(config)
    notes = window_notes(config, tokens, "count")
    if window == 1 and tokens > 1:   # no t >= 2 avoids it: counted without it (the note says)
        config = {**config, "sliding_window": None}
    elif window is not None and window < tokens:
        tokens = window
    arch = native_network(config, tokens, output)
    out = registry_rules(arch)
    out["architecture"] = str(arch)
    out["tied"] = arch.tied
    out["tokens"] = tokens
    out["notes"] = notes
    out["model_class_parameters"] = (model_class_parameters(config, out["output"])
                                     if check and hf.have_transformers() else None)
    return out


def model_class_parameters(config: dict, output: str = "logits") -> int:
    """Parameters of transformers' model class of `config` for `output`: the causal-LM class
    (the logits), or the base model (AutoModel: the last hidden state), built on the meta
    device (no memory, no download); a tied table counted once."""
    import torch  # noqa: PLC0415
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM  # noqa: PLC0415

    fields = {k: v for k, v in config.items()
              if k not in ("model_type", "architectures", "auto_map", "torch_dtype", "dtype",
                           "transformers_version")}
    try:
        cfg = AutoConfig.for_model(config["model_type"], **fields)
        with torch.device("meta"):
            model = (AutoModel if output == "hidden" else AutoModelForCausalLM).from_config(cfg)
    except (TypeError, ValueError, KeyError) as exc:  # transformers' own checks of the fields
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise bad_value("config", f"fields that transformers accepts for {config['model_type']}",
                        first, "Fix or remove the field it names, as in the published "
                        "config.json.") from None
    return sum(p.numel() for p in model.parameters())


def registry_count(arch, families: dict[str, int]) -> dict:
    """The registry's count of `arch`: n_params - the rank over F_p of all its families'
    tangents at the point, which `families` holds family by family in registry order (each the
    rank a family adds to those before it). A proved generic count above what a family adds
    is an overlap with an earlier family (e.g. the all-ones part of an embedding shift, already
    among the embedding norm's means), listed under `overlaps`; summing proved counts instead
    would count those directions twice."""
    from ..symmetries.registry import family  # noqa: PLC0415

    parts, overlaps = [], []
    for name, measured in families.items():
        if not measured:
            continue
        proved = family(name).count(arch)
        parts.append({"family": name, "count": measured, "proved": proved,
                      "measured": measured})
        if proved is not None and proved > measured:
            overlaps.append({"family": name, "proved": proved, "adds": measured})
    return {"count": arch.n_params - sum(p["count"] for p in parts), "families": parts,
            "overlaps": overlaps}


def validate(config: dict, *, seed: int = 0, progress=None, precision: int | None = None,
             output: str | None = None, **shrink) -> dict:
    """Shrink `config`, convert it, certify its dimension and compare with the counts.

    `output`: the network's output (`native_network`: 'logits', 'hidden', or None for the
    converter's own: BERT's hidden state, every other family's logits). `verified` only when
    the dimension is certified and equals the rules' count of the same output; otherwise
    `finding` says why, with the families behind a difference. Refuses (InputError) a model
    type the converter does not know, in one line."""
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415

    seed = check_seed(seed)
    config = hf.check_config(config)
    shrink = {**FAMILY_SHRINK.get(config.get("model_type"), {}), **shrink}
    small_cfg, notes = shrunk_config(config, **shrink)
    tokens = shrink.get("tokens", SHRINK["tokens"])
    arch = native_network(small_cfg, tokens, output)
    t0 = time.perf_counter()
    result = neuromanifold_dim(arch, method="certified", seed=seed, progress=progress,
                               precision=precision)
    seconds = time.perf_counter() - t0
    families = dict(result.symmetries or {})
    output = "hidden" if arch.hidden_output else "logits"
    registry = registry_count(arch, families)
    rules = None
    if small_cfg.get("model_type") in hf.MODEL_TYPES:
        try:
            rules = rules_count(shrunk_spec_of(small_cfg), output, arch.tied)
        except Exception as exc:  # noqa: BLE001 - a rule the shrunk model's options lack
            rules = {"count": None, "why": str(exc)}
    else:
        rules = registry_rules(arch)
    certified = result.status == "certified"
    counted = rules["count"] if rules["count"] is not None else None
    verified = certified and counted is not None and result.dimension == counted
    finding = None
    if not certified:
        finding = (f"not verified: the dimension is not certified ({result.lower_bound} <= dim <= "
                   f"{result.upper_bound}, {result.status})")
        if counted is not None and result.lower_bound == counted:
            finding += (f"; the proved lower bound equals the count {counted}, so dim >= count; "
                        "the upper bound needs families the registry lacks for these options")
    elif counted is None:
        finding = f"not verified: certified {result.dimension}, but {rules['why']}"
    elif result.dimension != counted:
        diff = counted - result.dimension
        missing = [f for f in registry["families"]]
        finding = (f"certified {result.dimension} vs counted {counted}: "
                   + (f"{diff} redundant directions the rules miss (registry families: "
                      + ", ".join(f"{f['family']} {f['measured']}" for f in missing) + ")"
                      if diff > 0 else f"{-diff} counted symmetry directions are not in the kernel"))
    return {"model_type": config.get("model_type"), "output": output, "tied": arch.tied,
            "architecture": str(arch), "shrunk_config": {k: small_cfg[k] for k in small_cfg
                                                         if k in _SHOWN}, "notes": notes,
            "tokens": tokens, "n_params": arch.n_params, "counted": counted,
            "rules": rules, "registry": registry, "certified": result.dimension,
            "status": result.status, "lower_bound": result.lower_bound,
            "upper_bound": result.upper_bound, "verified": verified, "finding": finding,
            "seconds": seconds, "seed": seed}


_SHOWN = ("model_type", "hidden_size", "n_embd", "num_attention_heads", "n_head",
          "num_key_value_heads", "head_dim", "intermediate_size", "n_inner", "num_hidden_layers",
          "n_layer", "vocab_size", "tie_word_embeddings", "partial_rotary_factor")


# Sizes at which `independence` checks the families' tangents, growing toward the real model:
# (layers, heads, head_dim, intermediate). The rank is read family by family
# (`dimension.peel`: the same rank as the dense one, `ball_dual.block_upper_bound`).
LADDER = ((2, 2, 2, 3), (2, 2, 4, 6), (2, 4, 8, 16))
QUICK_LADDER = LADDER[:2]
# The smallest network at the real head width
# (docs/models.md#independence-at-the-real-head-width): 2 layers (the families between layers
# present), MLP width 16, the vocabulary hidden + 3; 2 heads (the key/value grouping kept), one
# where two take too long: the untied logits' stream rotations (hidden (hidden - 1) / 2
# tangents, each touching every block) of Mistral and Phi-3, and Gemma's heads of width 256
# (GL(v): 65,536 tangents a group and layer).
REAL_HEADS = {"mistral": 1, "phi3": 1, "gemma": 1}
REAL_INTERMEDIATE = 16
# The families whose counted symmetry `independence` has shown equal to the tangents' rank at
# `real_width_size` (docs/models.md#independence-at-the-real-head-width, measured by
# scripts/real_width_table.py; tests/models/test_hf.py recomputes Llama's). GPT-2 and BERT
# (whose layernorm families share every head block with GL(a) and GL(v)) are reached by
# eliminating those two families (`dimension.peel`); Falcon peels throughout; GPT-NeoX by
# eliminating its stream rotations with norm biases first (each has a column of its own).
REAL_WIDTH_REACHED = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gpt2", "bert",
                      "falcon", "gpt_neox")


def real_width_size(config: dict) -> tuple[int, int, int, int]:
    """(layers, heads, head_dim, intermediate) of the smallest network `independence` checks
    at `config`'s own head width (`head_dim`, or hidden / heads)."""
    H, _ = _heads(config)
    width = config.get("head_dim") or next(config[k] for k in _FIELDS["hidden"] if k in config) // H
    return 2, REAL_HEADS.get(config.get("model_type"), 2), width, REAL_INTERMEDIATE


def _real_width_network(config: dict) -> str | None:
    """The converted network `independence` checks at the real head width (its description
    without the numbers no tangent reads: the rotary base, the norms' eps, the temperature), or
    None where the config does not shrink or convert."""
    layers, heads, width, inter = real_width_size(config)
    try:
        cfg, _ = shrunk_config(config, layers=layers, heads=heads, head_dim=width,
                               intermediate=inter, tokens=SHRINK["tokens"])
        return " ".join(word for word in str(convert.from_config(cfg, SHRINK["tokens"])).split()
                        if not word.startswith(("rope_base=", "norm_eps=", "temperature=")))
    except InputError:
        return None


def real_width_evidence(config: dict) -> str:
    """What is shown of the counted families' independence for `config` (the line `count`
    prints under the count): at the real head width only where the network checked there is
    the one measured for the shipped config of its family (`REAL_WIDTH_REACHED`)."""
    layers, heads, width, inter = real_width_size(config)
    mt = config.get("model_type")
    small = "independence of the counted families: count --validate checks it over F_p at hidden 4 and 8"
    where = "docs/models.md#independence-at-the-real-head-width"
    if mt not in REAL_WIDTH_REACHED:
        return f"{small}; not shown at the real head width {width} ({where})"
    network = _real_width_network(config)
    if network is None or network != _real_width_network(hf.shipped_config(mt)):
        return (f"{small}, count --validate --real-width at the real head width {width}; "
                f"measured only for the shipped {mt} config ({where})")
    return (f"{small}; certified at the real head width {width} ({layers} layers of {heads} "
            f"head{'s' if heads > 1 else ''}, hidden {heads * width}, MLP width {inter}: "
            f"tangent rank = counted symmetry; count --validate --real-width recomputes it, "
            f"{where}); not at this size")


def quick_ladder(config: dict) -> tuple:
    """The quick independence ladder of `config`'s family (`FAMILY_LADDER`, else QUICK_LADDER)."""
    return FAMILY_LADDER.get(config.get("model_type"), QUICK_LADDER)


def independence(config: dict, *, seed: int = 0, ladder=LADDER, progress=None) -> list[dict]:
    """At each size of `ladder` ((layers, heads, head_dim, intermediate); `real_width_size`
    gives the one at the real head width): the rank over F_p of every registry family's
    tangents at a random point (`peel.catalogue_rank`, the point of
    `ball_dual.block_upper_bound`) against the sum of the rules' counts (the converted
    network's output: logits, BERT's last hidden state). Equal means the counted families are
    independent there: n_params - rank is then the count, an upper bound on the dimension (the
    families being symmetries)."""
    from ..dimension.peel import catalogue_rank  # noqa: PLC0415

    say = progress or (lambda _m: None)
    rows = []
    for layers, heads, head_dim, inter in ladder:
        cfg, _ = shrunk_config(config, layers=layers, heads=heads, head_dim=head_dim,
                               intermediate=inter, tokens=SHRINK["tokens"])
        arch = convert.from_config(cfg, SHRINK["tokens"])
        t0 = time.perf_counter()
        ranked = catalogue_rank(arch, seed)
        rank = ranked.rank
        seconds = time.perf_counter() - t0
        counted = None
        if cfg.get("model_type") in hf.MODEL_TYPES:
            rules = rules_count(shrunk_spec_of(cfg), "hidden" if arch.hidden_output else "logits",
                                arch.tied)
        else:
            rules = registry_rules(arch)
        if rules.get("count") is not None:
            counted = rules.get("symmetry")
        row = {"layers": layers, "heads": heads, "head_dim": head_dim, "hidden": heads * head_dim,
               "n_params": arch.n_params, "tangent_rank": rank, "counted_symmetry": counted,
               "independent": counted is not None and rank == counted, "seconds": seconds,
               "tangents": ranked.rows}
        say(f"independence at hidden {row['hidden']}, head_dim {head_dim}: rank {rank}, "
            f"counted {counted} ({seconds:.1f} s)")
        rows.append(row)
    return rows
