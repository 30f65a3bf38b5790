"""transformers models as native networks: an `Architecture` and its named weight blocks
(docs/models.md#the-converter-transformers-models-as-native-networks).

`from_config` reads a config (a dict, a config.json path or a transformers config object) into
the native `Architecture` of the same network on t tokens; `from_transformers` adds the
model's own weights as the named blocks of `core.blocks` (docs/blocks.md), so that
`core.blocks.block_forward` computes the model's logits (`hidden_state`: its last hidden
state) on the same token ids, to float64 round-off (tests/models/test_convert.py measures it).

The correspondence, per layer and head (transformers names -> native blocks):
- the native scores are S_ji = q_j^T k_i with the softmax over the aggregated token j, so the
  native Q (and bq) is transformers' key projection (k_proj, its bias) and the native K (bk)
  its query projection (q_proj); each head's value rows are W_i_h (bv_i_h), its output columns
  O_i_h, the output bias bo_i; grouped key/value heads are `kv_heads` (Q_i_g, W_i_g per group);
- the attention scale 1 / sqrt(head_dim) is the softmax temperature sqrt(head_dim);
- rotary positions: transformers rotates coordinate f with f + R ("rotate_half", R the rotated
  pairs), the native map rotates the pairs (2f, 2f + 1); the converter permutes the rows of the
  query and key maps (and their biases) by the same permutation, which keeps every score, and
  the angles are the model's own (`rope_base`: theta_f = base^(-(f - 1) / R));
- norms: gains g_i (input_layernorm / ln_1), n_i (post_attention_layernorm / ln_2), f (the final
  norm), layernorm biases c_i, cn_i, cf (`norm_bias`), the model's epsilon (`norm_eps`);
- MLPs: P_i (c_fc / up_proj), G_i (gate_proj), U_i (c_proj / down_proj), biases bp, bg, bu;
- E the token embedding, T the first t rows of a learned position table (transposed), L the
  untied lm_head (tied models reuse E).

Falcon's fused query_key_value, Phi-3's qkv_proj and gate_up_proj are split into these maps;
Falcon's one layernorm per parallel block is `shared_norm`, Qwen3's QK-norm gains shared by the
heads `qk_norm_shared` (q_norm -> kn_i, k_norm -> qn_i); bert is BertModel's last hidden state
of (token id, type id) sequences (post-norm blocks, an embedding norm, token types,
`hidden_output`).

Families: `CONVERTED` (others: one line naming these). transformers is imported
by nothing here: `from_transformers` reads the module it is given.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..core.architecture import Architecture
from ..core.blocks import ARRAYS, block_forward
from ..core.checks import bad_value, check_int
from ..core.tokens import one_hot, pair_inputs
from .families import FAMILIES
from .hf import load_config

CONVERTED = FAMILIES   # every family converts (`families`, the one list)
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu"}


def _config_dict(config) -> dict:
    if isinstance(config, dict):
        return config
    if hasattr(config, "to_dict"):
        return config.to_dict()
    return load_config(config)


def _get(cfg: dict, name: str, default=None):
    value = cfg.get(name)
    return default if value is None else value


def _activation(cfg: dict, name: str) -> str:
    act = _get(cfg, name, "gelu_new")
    if act not in _ACTIVATIONS:
        raise bad_value(f"config: {name}", f"one of {', '.join(_ACTIVATIONS)}", act,
                        "Other activations have no native counterpart yet.")
    return _ACTIVATIONS[act]


def _rope_pairs(cfg: dict, a: int) -> int:
    """R, the rotated pairs of a head of width a: half of int(a * partial_rotary_factor)."""
    params = cfg.get("rope_parameters") or {}
    # GPT-NeoX's published configs say rotary_pct (transformers' default for it: 0.25)
    default = cfg.get("rotary_pct", 0.25 if cfg.get("model_type") == "gpt_neox" else 1.0)
    factor = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", default))
    dim = int(a * factor)
    if dim % 2:
        raise bad_value("config: partial_rotary_factor", "an even rotary width", dim,
                        "Use a factor giving an even number of rotated coordinates.")
    return dim // 2


def _rope_base(cfg: dict) -> float:
    """The rotary base of a config (transformers 5: rope_parameters; older: rope_theta); any
    scaling other than the default is refused."""
    params = cfg.get("rope_parameters") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    scaling = cfg.get("rope_scaling")
    scaled = scaling.get("rope_type", scaling.get("type")) if scaling else "default"
    if kind != "default" or scaled != "default":
        field = "rope_parameters" if kind != "default" else "rope_scaling"
        raise bad_value(f"config: {field}", "the default rotary frequencies",
                        kind if kind != "default" else scaled,
                        "Scaled rotary frequencies (llama3, yarn, ...) are not converted yet.")
    return float(params.get("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000.0))))


def from_config(config, tokens: int) -> Architecture:
    """The native `Architecture` of a transformers config on `tokens` tokens, with logits.

    `config`: a dict as in config.json, a path to one, or a transformers config object. Refused
    in one line: an unconverted model type, options with no native counterpart (scaled rotary
    frequencies, a sliding window shorter than t, layer-scaled attention), t above the model's
    positions.
    """
    cfg = _config_dict(config)
    tokens = check_int("tokens", tokens, minimum=1, fix="Pass t >= 1, e.g. 4.")
    mt = cfg.get("model_type")
    if mt not in CONVERTED:
        raise bad_value("config: model_type", f"one of {', '.join(CONVERTED)}", mt,
                        "Only these families convert (docs/models.md#the-converter-transformers-models-as-native-networks).")
    if mt == "bert":
        return bert_config(cfg, tokens)
    if mt in _FAMILY_CONFIGS:
        return _FAMILY_CONFIGS[mt](cfg, tokens)
    if mt == "gpt2":
        d, H, l = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
        if _get(cfg, "scale_attn_by_inverse_layer_idx", False) or not _get(cfg, "scale_attn_weights", True):
            raise bad_value("config: scale_attn_weights", "the standard 1/sqrt(head_dim) scale",
                            "layer-scaled or unscaled attention", "Use GPT-2's defaults.")
        if tokens > cfg.get("n_positions", tokens):
            raise bad_value("tokens", f"at most n_positions = {cfg['n_positions']}", tokens,
                            "Pass fewer tokens.")
        a = d // H
        return Architecture(
            widths=(d,) * (l + 1), keys=a, tokens=tokens, attention="softmax",
            temperature=math.sqrt(a), heads=H, values=a, residual=True,
            mlp=_get(cfg, "n_inner", 4 * d), activation=_activation(cfg, "activation_function"),
            norm="layernorm", causal=True, positions="learned", bias=True, mlp_bias=True,
            vocab=cfg["vocab_size"], tied=_get(cfg, "tie_word_embeddings", True), final_norm=True,
            norm_bias=True, norm_eps=_get(cfg, "layer_norm_epsilon", 1e-5))
    d, H, l = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    if mt == "gpt_neox":
        a = d // H
        return Architecture(
            widths=(d,) * (l + 1), keys=a, tokens=tokens, attention="softmax",
            temperature=math.sqrt(a), heads=H, values=a, residual=True,
            mlp=cfg["intermediate_size"], activation=_activation(cfg, "hidden_act"),
            norm="layernorm", causal=True, positions="rope", rope_pairs=_rope_pairs(cfg, a),
            bias=bool(_get(cfg, "attention_bias", True)), mlp_bias=True, vocab=cfg["vocab_size"],
            tied=bool(_get(cfg, "tie_word_embeddings", False)), final_norm=True, norm_bias=True,
            norm_eps=_get(cfg, "layer_norm_eps", 1e-5), rope_base=_rope_base(cfg),
            parallel=bool(_get(cfg, "use_parallel_residual", True)))
    G = _get(cfg, "num_key_value_heads", H)
    a = _get(cfg, "head_dim", d // H)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", mt == "mistral") else None
    if window is not None and tokens > window:
        raise bad_value("tokens", f"at most the sliding window ({window})", tokens,
                        "Pass fewer tokens (a window shorter than t has no native counterpart).")
    bias = mt == "qwen2" or bool(_get(cfg, "attention_bias", False))
    gemma = mt == "gemma"
    return Architecture(
        widths=(d,) * (l + 1), keys=a, tokens=tokens, attention="softmax",
        temperature=math.sqrt(a), heads=H, values=a, residual=True, mlp=cfg["intermediate_size"],
        activation=_activation(cfg, "hidden_act"), norm="rmsnorm", causal=True, positions="rope",
        embed_scale=_gemma_scale(d) if gemma else 1.0,
        kv_heads=G if G < H else None, bias=bias, out_bias=mt != "qwen2",
        mlp_bias=mt == "llama" and bool(_get(cfg, "mlp_bias", False)), mlp_kind="gated",
        vocab=cfg["vocab_size"], tied=bool(_get(cfg, "tie_word_embeddings", gemma)),
        final_norm=True, norm_eps=_get(cfg, "rms_norm_eps", 1e-6), rope_base=_rope_base(cfg))


def _gemma_scale(d: int) -> float:
    """Gemma's embedding scale sqrt(d) as transformers stores it: a float32 tensor."""
    return float(torch.tensor(d ** 0.5, dtype=torch.float32))


def rotary_permutation(a: int, pairs: int) -> list[int]:
    """Rows of a head's queries/keys in native order: native row 2f is transformers' row f,
    2f + 1 is f + R (rotate_half pairs f with f + R); rows from 2R on stay."""
    return [f + R for f in range(pairs) for R in (0, pairs)] + list(range(2 * pairs, a))


def _gain(norm, offset: float) -> torch.Tensor:
    """A norm's gain column: its weight plus `offset` (1 for Gemma's (1 + w) norms)."""
    return _column(norm.weight) + offset


def _column(v: torch.Tensor) -> torch.Tensor:
    return v.detach().to(torch.float64, copy=True).reshape(-1, 1)


def _matrix(w: torch.Tensor) -> torch.Tensor:
    """A float64 copy of a weight (one copy: a float32 embedding of GPT-2 is 300 MB in float64)."""
    return w.detach().to(torch.float64, copy=True)


def from_transformers(model, tokens: int) -> tuple[Architecture, dict[str, torch.Tensor]]:
    """(the native Architecture, its named float64 blocks) of a transformers model on t tokens.

    `model`: a causal-LM class (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
    Qwen2ForCausalLM, ..., FalconForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM) or, for tied embeddings, the base model (GPT2Model, ...). The blocks are
    the model's own weights (permuted rows under rotary positions, see the module docstring).
    """
    if model.config.model_type == "bert":
        return _bert_from_transformers(model, tokens)
    arch = from_config(model.config, tokens)
    base = (getattr(model, "transformer", None) or getattr(model, "model", None)
            or getattr(model, "gpt_neox", None) or model)
    lm_head = getattr(model, "lm_head", None) or getattr(model, "embed_out", None)
    if not arch.tied and lm_head is None:
        raise bad_value("model", "a causal-LM model (its lm_head is untied)", type(model).__name__,
                        "Pass the ...ForCausalLM class.")
    blocks: dict[str, torch.Tensor] = {}
    t = tokens
    if model.config.model_type in FAMILY_BLOCKS:
        blocks.update(FAMILY_BLOCKS[model.config.model_type](arch, base))
    elif arch.positions == "learned":
        blocks["E"] = _matrix(base.wte.weight)
        blocks["T"] = _matrix(base.wpe.weight[:t]).T.contiguous()
        for i, layer in enumerate(base.h, start=1):
            _gpt2_layer(arch, blocks, i, layer)
        blocks["f"], blocks["cf"] = _column(base.ln_f.weight), _column(base.ln_f.bias)
    elif hasattr(base, "embed_in"):
        blocks["E"] = _matrix(base.embed_in.weight)
        for i, layer in enumerate(base.layers, start=1):
            _neox_layer(arch, blocks, i, layer)
        blocks["f"] = _column(base.final_layer_norm.weight)
        blocks["cf"] = _column(base.final_layer_norm.bias)
    else:
        blocks["E"] = _matrix(base.embed_tokens.weight)
        offset = 1.0 if model.config.model_type == "gemma" else 0.0
        for i, layer in enumerate(base.layers, start=1):
            _rotary_layer(arch, blocks, i, layer, offset)
        blocks["f"] = _gain(base.norm, offset)
    if not arch.tied:
        blocks["L"] = _matrix(lm_head.weight)
    return arch, blocks


def _gpt2_layer(arch: Architecture, blocks: dict, i: int, layer) -> None:
    """GPT-2's Conv1D weights are (in, out): transposed into native (out, in) blocks."""
    d, a, H = arch.widths[0], arch.keys[0], arch.head_counts[0]
    att, mlp = layer.attn, layer.mlp
    W, b = _matrix(att.c_attn.weight).T, att.c_attn.bias.detach().to(torch.float64)
    proj = _matrix(att.c_proj.weight).T
    blocks[f"g_{i}"], blocks[f"c_{i}"] = _column(layer.ln_1.weight), _column(layer.ln_1.bias)
    for h in range(1, H + 1):
        rows = slice((h - 1) * a, h * a)
        q, k, v = (W[j * d:(j + 1) * d][rows] for j in range(3))
        bq, bk, bv = (b[j * d:(j + 1) * d][rows] for j in range(3))
        blocks[f"Q_{i}_{h}"], blocks[f"bq_{i}_{h}"] = k.clone(), _column(bk)   # native Q = key
        blocks[f"K_{i}_{h}"], blocks[f"bk_{i}_{h}"] = q.clone(), _column(bq)   # native K = query
        blocks[f"W_{i}_{h}"], blocks[f"bv_{i}_{h}"] = v.clone(), _column(bv)
        blocks[f"O_{i}_{h}"] = proj[:, rows].clone()
    blocks[f"bo_{i}"] = _column(att.c_proj.bias)
    blocks[f"n_{i}"], blocks[f"cn_{i}"] = _column(layer.ln_2.weight), _column(layer.ln_2.bias)
    blocks[f"P_{i}"], blocks[f"bp_{i}"] = _matrix(mlp.c_fc.weight).T.contiguous(), _column(mlp.c_fc.bias)
    blocks[f"U_{i}"], blocks[f"bu_{i}"] = _matrix(mlp.c_proj.weight).T.contiguous(), _column(mlp.c_proj.bias)


def _neox_layer(arch: Architecture, blocks: dict, i: int, layer) -> None:
    """GPT-NeoX: query_key_value holds [q_h, k_h, v_h] per head (rows of 3 a), partial rotary
    on the first 2R coordinates of q and k (permuted to native pairs)."""
    a, H = arch.keys[0], arch.head_counts[0]
    perm = torch.tensor(rotary_permutation(a, arch.rotated_pairs[i - 1]))
    att, mlp = layer.attention, layer.mlp
    W = _matrix(att.query_key_value.weight).reshape(H, 3, a, -1)
    b = (None if att.query_key_value.bias is None
         else att.query_key_value.bias.detach().to(torch.float64).reshape(H, 3, a))
    dense = _matrix(att.dense.weight)
    blocks[f"g_{i}"] = _column(layer.input_layernorm.weight)
    blocks[f"c_{i}"] = _column(layer.input_layernorm.bias)
    for h in range(1, H + 1):
        for name, j, rows in (("Q", 1, perm), ("K", 0, perm), ("W", 2, torch.arange(a))):
            blocks[f"{name}_{i}_{h}"] = W[h - 1, j][rows].clone()   # native Q = key (j = 1)
            if arch.bias:
                blocks[f"b{'v' if name == 'W' else name.lower()}_{i}_{h}"] = _column(b[h - 1, j][rows])
        blocks[f"O_{i}_{h}"] = dense[:, (h - 1) * a: h * a].clone()
    if arch.bias:
        blocks[f"bo_{i}"] = _column(att.dense.bias)
    blocks[f"n_{i}"] = _column(layer.post_attention_layernorm.weight)
    blocks[f"cn_{i}"] = _column(layer.post_attention_layernorm.bias)
    blocks[f"P_{i}"], blocks[f"bp_{i}"] = _matrix(mlp.dense_h_to_4h.weight), _column(mlp.dense_h_to_4h.bias)
    blocks[f"U_{i}"], blocks[f"bu_{i}"] = _matrix(mlp.dense_4h_to_h.weight), _column(mlp.dense_4h_to_h.bias)


def _rotary_layer(arch: Architecture, blocks: dict, i: int, layer, offset: float) -> None:
    """Llama-style layers: q/k rows permuted to native pairs, groups as `kv_heads`; Gemma's norms
    scale by (1 + w): the native gain is 1 + w (a translation of the parameters)."""
    a, H, G = arch.keys[0], arch.head_counts[0], arch.kv_counts[0]
    perm = rotary_permutation(a, arch.rotated_pairs[i - 1])
    att, mlp = layer.self_attn, layer.mlp

    def head_rows(proj, n: int, permute: bool):
        w = _matrix(proj.weight)
        bias = None if proj.bias is None else proj.bias.detach().to(torch.float64)
        for h in range(n):
            rows = torch.tensor(perm if permute else list(range(a))) + h * a
            yield h + 1, w[rows].clone(), None if bias is None else _column(bias[rows])

    blocks[f"g_{i}"] = _gain(layer.input_layernorm, offset)
    for name, bname, proj, n, permute in (("K", "bk", att.q_proj, H, True),
                                          ("Q", "bq", att.k_proj, G, True),
                                          ("W", "bv", att.v_proj, G, False)):
        for h, w, b in head_rows(proj, n, permute):
            blocks[f"{name}_{i}_{h}"] = w
            if arch.bias:
                if b is None:
                    raise bad_value("model", "q/k/v biases as its config says", "missing",
                                    "Check the model's attention_bias.")
                blocks[f"{bname}_{i}_{h}"] = b
    o = _matrix(att.o_proj.weight)
    for h in range(1, H + 1):
        blocks[f"O_{i}_{h}"] = o[:, (h - 1) * a: h * a].clone()
    if arch.bias and arch.out_bias:
        blocks[f"bo_{i}"] = _column(att.o_proj.bias)
    blocks[f"n_{i}"] = _gain(layer.post_attention_layernorm, offset)
    for name, bname, proj in (("G", "bg", mlp.gate_proj), ("P", "bp", mlp.up_proj),
                              ("U", "bu", mlp.down_proj)):
        blocks[f"{name}_{i}"] = _matrix(proj.weight)
        if arch.mlp_bias:
            blocks[f"{bname}_{i}"] = _column(proj.bias)


# Falcon, Qwen3, Phi-3: each family's config and blocks in functions of its own.

def _falcon_config(cfg: dict, tokens: int) -> Architecture:
    """Falcon: fused query_key_value, multi-query (one shared key/value head) or, in the new
    decoder architecture, num_kv_heads groups; parallel blocks reading ONE layernorm
    (`shared_norm`), or two in the new architecture's default (ln_attn, ln_mlp); sequential
    blocks without parallel_attn; biases on every linear map with `bias`; rotary positions."""
    d, H, l = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    if _get(cfg, "alibi", False):
        raise bad_value("config: alibi", "False (rotary positions)", True,
                        "ALiBi position biases have no native counterpart yet.")
    new = bool(_get(cfg, "new_decoder_architecture", False))
    if new and not _get(cfg, "parallel_attn", True):
        raise bad_value("config: parallel_attn", "True with new_decoder_architecture", False,
                        "transformers' new Falcon decoder is always parallel; drop parallel_attn.")
    if new:
        G, parallel = _get(cfg, "num_kv_heads", H), True
        shared = _get(cfg, "num_ln_in_parallel_attn", 2) == 1
    else:
        G = 1 if _get(cfg, "multi_query", True) else H
        parallel = shared = bool(_get(cfg, "parallel_attn", True))
    a, bias = d // H, bool(_get(cfg, "bias", False))
    return Architecture(
        widths=(d,) * (l + 1), keys=a, tokens=tokens, attention="softmax",
        temperature=math.sqrt(a), heads=H, values=a, residual=True,
        mlp=_get(cfg, "ffn_hidden_size", 4 * d),
        activation=_activation({"activation": _get(cfg, "activation", "gelu")}, "activation"),
        norm="layernorm", causal=True, positions="rope", kv_heads=G if G < H else None,
        bias=bias, mlp_bias=bias, vocab=cfg["vocab_size"],
        tied=bool(_get(cfg, "tie_word_embeddings", True)), final_norm=True, norm_bias=True,
        norm_eps=_get(cfg, "layer_norm_epsilon", 1e-5), rope_base=_rope_base(cfg),
        parallel=parallel, shared_norm=shared)


def _qwen3_config(cfg: dict, tokens: int) -> Architecture:
    """Qwen3: Llama's network (q/k/v/o biases only with attention_bias) with a QK-norm, RMSNorm
    over head_dim with ONE gain shared by the heads (`qk_norm_shared`), before the rotations."""
    arch = from_config({**cfg, "model_type": "llama", "mlp_bias": False,
                        "head_dim": _get(cfg, "head_dim", 128),    # Qwen3Config's defaults
                        "hidden_act": _get(cfg, "hidden_act", "silu")}, tokens)
    return replace(arch, qk_norm=True, qk_norm_shared=True)


def _phi3_config(cfg: dict, tokens: int) -> Architecture:
    """Phi-3: Llama's network without biases (fused qkv_proj and gate_up_proj), partial rotary
    positions (partial_rotary_factor), a sliding window on every layer where set; longrope
    scaling is refused."""
    window = cfg.get("sliding_window")
    arch = from_config({**cfg, "model_type": "llama", "attention_bias": False, "mlp_bias": False,
                        "use_sliding_window": window is not None,
                        "hidden_act": _get(cfg, "hidden_act", "silu"),   # Phi3Config's defaults
                        "rms_norm_eps": _get(cfg, "rms_norm_eps", 1e-5)}, tokens)
    pairs = _rope_pairs(cfg, arch.keys[0])
    return replace(arch, rope_pairs=pairs)


def _falcon_blocks(arch: Architecture, base) -> dict[str, torch.Tensor]:
    """Falcon's query_key_value holds [q_1..q_H, k, v] (multi-query), [q_h, k_h, v_h] per head
    (neither) or, per group, [its n queries, k_g, v_g] (new decoder architecture)."""
    H, G, a = arch.head_counts[0], arch.kv_counts[0], arch.keys[0]
    blocks = {"E": _matrix(base.word_embeddings.weight)}
    for i, layer in enumerate(base.h, start=1):
        att, mlp = layer.self_attention, layer.mlp
        perm = torch.tensor(rotary_permutation(a, arch.rotated_pairs[i - 1]))
        parts = [_matrix(att.query_key_value.weight)]
        if att.query_key_value.bias is not None:
            parts.append(_matrix(att.query_key_value.bias).reshape(-1, 1))
        fused = torch.cat(parts, dim=1)                     # rows (out) x [weight | bias]
        if layer.config.new_decoder_architecture:
            grouped = fused.reshape(G, H // G + 2, a, -1)
            q, k, v = grouped[:, :-2].reshape(H, a, -1), grouped[:, -2], grouped[:, -1]
        elif G == 1:
            q, k, v = fused[:H * a].reshape(H, a, -1), fused[H * a:H * a + a][None], fused[H * a + a:][None]
        else:
            per_head = fused.reshape(H, 3, a, -1)
            q, k, v = per_head[:, 0], per_head[:, 1], per_head[:, 2]
        for name, bname, rows, n, permute in (("K", "bk", q, H, True), ("Q", "bq", k, G, True),
                                              ("W", "bv", v, G, False)):
            for h in range(1, n + 1):                      # native Q = key, K = query
                m = rows[h - 1][perm] if permute else rows[h - 1]
                blocks[f"{name}_{i}_{h}"] = m[:, :arch.widths[0]].clone()
                if arch.bias:
                    blocks[f"{bname}_{i}_{h}"] = m[:, -1:].clone()
        dense = _matrix(att.dense.weight)
        for h in range(1, H + 1):
            blocks[f"O_{i}_{h}"] = dense[:, (h - 1) * a: h * a].clone()
        if arch.bias:
            blocks[f"bo_{i}"] = _column(att.dense.bias)
        first, second = ((layer.ln_attn, layer.ln_mlp) if hasattr(layer, "ln_attn") else
                         (layer.input_layernorm, getattr(layer, "post_attention_layernorm", None)))
        blocks[f"g_{i}"], blocks[f"c_{i}"] = _column(first.weight), _column(first.bias)
        if not arch.shared_norm:
            blocks[f"n_{i}"], blocks[f"cn_{i}"] = _column(second.weight), _column(second.bias)
        blocks[f"P_{i}"], blocks[f"U_{i}"] = _matrix(mlp.dense_h_to_4h.weight), _matrix(mlp.dense_4h_to_h.weight)
        if arch.mlp_bias:
            blocks[f"bp_{i}"], blocks[f"bu_{i}"] = _column(mlp.dense_h_to_4h.bias), _column(mlp.dense_4h_to_h.bias)
    blocks["f"], blocks["cf"] = _column(base.ln_f.weight), _column(base.ln_f.bias)
    return blocks


def _qwen3_blocks(arch: Architecture, base) -> dict[str, torch.Tensor]:
    """Llama's blocks and the shared QK-norm gains, permuted as the rows they scale: native qn_i
    is k_norm (native Q = key), kn_i is q_norm."""
    blocks = {"E": _matrix(base.embed_tokens.weight)}
    for i, layer in enumerate(base.layers, start=1):
        _rotary_layer(arch, blocks, i, layer, 0.0)
        perm = rotary_permutation(arch.keys[i - 1], arch.rotated_pairs[i - 1])
        blocks[f"qn_{i}"] = _column(layer.self_attn.k_norm.weight)[perm]
        blocks[f"kn_{i}"] = _column(layer.self_attn.q_norm.weight)[perm]
    blocks["f"] = _gain(base.norm, 0.0)
    return blocks


def _phi3_blocks(arch: Architecture, base) -> dict[str, torch.Tensor]:
    """Phi-3's fused maps unfused into Llama's: qkv_proj rows [q (H a); k (G a); v (G a)],
    gate_up_proj rows [gate (m); up (m)]."""
    from types import SimpleNamespace  # noqa: PLC0415

    H, G, a, m = arch.head_counts[0], arch.kv_counts[0], arch.keys[0], arch.mlp_widths[0]
    blocks = {"E": _matrix(base.embed_tokens.weight)}
    for i, layer in enumerate(base.layers, start=1):
        qkv, gate_up = layer.self_attn.qkv_proj.weight, layer.mlp.gate_up_proj.weight

        def linear(w):
            return SimpleNamespace(weight=w, bias=None)

        unfused = SimpleNamespace(
            input_layernorm=layer.input_layernorm,
            post_attention_layernorm=layer.post_attention_layernorm,
            self_attn=SimpleNamespace(q_proj=linear(qkv[:H * a]),
                                      k_proj=linear(qkv[H * a:(H + G) * a]),
                                      v_proj=linear(qkv[(H + G) * a:]),
                                      o_proj=layer.self_attn.o_proj),
            mlp=SimpleNamespace(gate_proj=linear(gate_up[:m]), up_proj=linear(gate_up[m:]),
                                down_proj=layer.mlp.down_proj))
        _rotary_layer(arch, blocks, i, unfused, 0.0)
    blocks["f"] = _gain(base.norm, 0.0)
    return blocks


_FAMILY_CONFIGS = {"falcon": _falcon_config, "qwen3": _qwen3_config, "phi3": _phi3_config}
FAMILY_BLOCKS = {"falcon": _falcon_blocks, "qwen3": _qwen3_blocks, "phi3": _phi3_blocks}


def hidden_state(arch: Architecture, blocks: dict, ids: torch.Tensor,
                 type_ids: torch.Tensor | None = None, *, arithmetic=ARRAYS) -> torch.Tensor:
    """The native last hidden state (N, d_l, t) (after the final norm, before the logits):
    `block_forward` of the same network without its embedding, positions table and logits, on
    the embedded input E^T X (times the embedding scale, + T). A network whose output is its
    hidden state (`hidden_output`: BERT) is `block_forward` itself, on token ids and, with
    token types, type ids (zeros when not given). `arithmetic`: as `block_forward`'s
    (`blocks.FINITE` checks every intermediate value)."""
    if arch.hidden_output:
        return block_forward(arch, blocks, bert_inputs(arch, ids, type_ids), arithmetic=arithmetic)
    X = one_hot(ids.long(), arch.vocab)
    Z = arithmetic.scale(arithmetic.embed(blocks["E"], X), arch.embed_scale)
    if arch.positions == "learned":
        Z = arithmetic.add(Z, blocks["T"])
    body = replace(arch, vocab=None, tied=False, embed_scale=1.0,
                   positions="none" if arch.positions == "learned" else arch.positions)
    return block_forward(body, {k: v for k, v in blocks.items() if k not in ("E", "T", "L")}, Z,
                         arithmetic=arithmetic)


def logits(arch: Architecture, blocks: dict, ids: torch.Tensor, *, arithmetic=ARRAYS) -> torch.Tensor:
    """The native logits (N, V, t) of token ids (N, t): `block_forward` on one-hot inputs."""
    if arch.hidden_output:
        raise bad_value("arch", "a network with logits", "hidden_output (BERT: the last hidden "
                        "state)", "Use hidden_state(arch, blocks, ids, type_ids).")
    return block_forward(arch, blocks, one_hot(ids.long(), arch.vocab), arithmetic=arithmetic)


# BERT (BertModel: post-norm blocks, an embedding norm, token types; the last hidden state).
def bert_config(cfg: dict, tokens: int) -> Architecture:
    """BertModel's native network: its last hidden state (`hidden_output`, no pooler, no logits)
    of (token id, type id) sequences; post-norm blocks, the embedding norm, learned positions."""
    if _get(cfg, "position_embedding_type", "absolute") != "absolute" or _get(cfg, "is_decoder", False):
        raise bad_value("config: position_embedding_type", "absolute positions in an encoder",
                        cfg.get("position_embedding_type"), "Relative positions and BERT as a "
                        "decoder are not converted.")
    if tokens > cfg.get("max_position_embeddings", tokens):
        raise bad_value("tokens", f"at most max_position_embeddings = "
                        f"{cfg['max_position_embeddings']}", tokens, "Pass fewer tokens.")
    d, H, l = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    a = d // H
    types = _get(cfg, "type_vocab_size", 2)
    return Architecture(
        widths=(d,) * (l + 1), keys=a, tokens=tokens, attention="softmax",
        temperature=math.sqrt(a), heads=H, values=a, residual=True, mlp=cfg["intermediate_size"],
        activation=_activation({"hidden_act": _get(cfg, "hidden_act", "gelu")}, "hidden_act"),
        norm="layernorm", bias=True, mlp_bias=True, positions="learned", vocab=cfg["vocab_size"],
        norm_bias=True,
        norm_eps=_get(cfg, "layer_norm_eps", 1e-12), post_norm=True, embed_norm=True,
        token_types=types if types > 1 else None, hidden_output=True)


def _bert_from_transformers(model, tokens: int) -> tuple[Architecture, dict[str, torch.Tensor]]:
    """BertModel (or a model holding one as `.bert`): the embeddings (word, the first t
    positions, token types) and their LayerNorm -> E, T, Ty, ge, ce; per layer the attention
    (key -> Q, query -> K, value -> W per head; attention.output.dense -> O, bo; its LayerNorm ->
    g_i, c_i), the MLP (intermediate.dense -> P, bp; output.dense -> U, bu; its LayerNorm -> n_i,
    cn_i). The output is BertModel's last hidden state, whatever head the model carries."""
    arch = bert_config(model.config.to_dict(), tokens)
    base = getattr(model, "bert", None) or model
    emb = base.embeddings
    blocks: dict[str, torch.Tensor] = {"E": _matrix(emb.word_embeddings.weight),
                                       "T": _matrix(emb.position_embeddings.weight[:tokens]).T.contiguous()}
    if arch.token_types is not None:
        blocks["Ty"] = _matrix(emb.token_type_embeddings.weight)
    blocks["ge"], blocks["ce"] = _column(emb.LayerNorm.weight), _column(emb.LayerNorm.bias)
    for i, layer in enumerate(base.encoder.layer, start=1):
        _bert_layer(arch, blocks, i, layer)
    return arch, blocks


def _bert_layer(arch: Architecture, blocks: dict, i: int, layer) -> None:
    """One BertLayer as native post-norm blocks (the names of `_bert_from_transformers`)."""
    a, H = arch.keys[0], arch.head_counts[0]
    att, out = layer.attention.self, layer.attention.output
    dense = _matrix(out.dense.weight)
    for h in range(1, H + 1):
        rows = slice((h - 1) * a, h * a)
        for name, bname, proj in (("Q", "bq", att.key), ("K", "bk", att.query),
                                  ("W", "bv", att.value)):     # native Q = transformers' key
            blocks[f"{name}_{i}_{h}"] = _matrix(proj.weight)[rows].clone()
            blocks[f"{bname}_{i}_{h}"] = _column(proj.bias[rows])
        blocks[f"O_{i}_{h}"] = dense[:, rows].clone()
    blocks[f"bo_{i}"] = _column(out.dense.bias)
    blocks[f"g_{i}"], blocks[f"c_{i}"] = _column(out.LayerNorm.weight), _column(out.LayerNorm.bias)
    blocks[f"P_{i}"], blocks[f"bp_{i}"] = (_matrix(layer.intermediate.dense.weight),
                                           _column(layer.intermediate.dense.bias))
    blocks[f"U_{i}"], blocks[f"bu_{i}"] = (_matrix(layer.output.dense.weight),
                                           _column(layer.output.dense.bias))
    blocks[f"n_{i}"], blocks[f"cn_{i}"] = (_column(layer.output.LayerNorm.weight),
                                           _column(layer.output.LayerNorm.bias))


def bert_inputs(arch: Architecture, ids: torch.Tensor, type_ids: torch.Tensor | None = None
                ) -> torch.Tensor:
    """Token ids (N, t) and, with token types, type ids (N, t; zeros when not given) as the
    native one-hot input (N, V (+ T_types), t)."""
    if arch.token_types is None:
        return one_hot(ids.long(), arch.vocab)
    types = torch.zeros_like(ids) if type_ids is None else type_ids
    return pair_inputs(ids.long(), types.long(), arch.vocab, arch.token_types)
