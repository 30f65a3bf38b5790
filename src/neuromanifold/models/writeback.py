"""Native blocks written back into a transformers model: the inverse of
`convert.from_transformers`.

`write_blocks(model, arch, blocks)` copies each named block into the model's own parameters in
place (each keeps its dtype and device), so that `from_transformers(model, arch.tokens)` reads
the same blocks again (to the parameters' precision). The correspondence is convert.py's (its
module docstring and family functions), read backwards: native Q is the key projection, K the
query projection, rotary rows un-permuted, Conv1D weights transposed back, Gemma's stored
weight gain - 1, T the first t rows of a learned position table (the others untouched), tied
models' E shared with the lm_head. Every name and shape is checked before anything is written;
the writes go slice by slice (no copy of a full parameter).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..core.architecture import Architecture
from ..core.checks import bad_type, bad_value
from .convert import FAMILY_BLOCKS, CONVERTED, bert_config, from_config, rotary_permutation


def write_blocks(model, arch: Architecture, blocks: dict) -> None:
    """Write native `blocks` (name -> torch tensor or numpy array, the names and shapes that
    `from_transformers(model, arch.tokens)` returns) into `model`'s parameters, in place.

    `arch` is the model's converted architecture (`from_transformers`' or, for a base model,
    the 'hidden' network of `certify.native_network`, whose blocks have no L). A missing,
    unknown or wrongly shaped block is refused, naming it, before anything is written."""
    config = getattr(model, "config", None)
    mt = getattr(config, "model_type", None)
    if mt not in CONVERTED:
        raise bad_value("model", f"a transformers model of a converted family "
                        f"({', '.join(CONVERTED)})", mt if mt else type(model).__name__,
                        "Pass a model that from_transformers converts.")
    if not isinstance(blocks, dict):
        raise bad_type("blocks", "a dict of named blocks (name -> tensor)", type(blocks).__name__,
                       "Pass the blocks dict of from_transformers, modified.")
    _check_arch(model, arch)
    with torch.no_grad():   # the plan's views of the parameters, then the writes
        plan = _bert_plan(model, arch) if mt == "bert" else _plan(model, arch)
        values = _checked(plan, blocks)
        for (_, _, write), value in zip(plan, values):
            write(value)


def _check_arch(model, arch: Architecture) -> None:
    tokens = getattr(arch, "tokens", None)
    if not isinstance(arch, Architecture) or not isinstance(tokens, int):
        raise bad_type("arch", "the native Architecture of the model", type(arch).__name__,
                       "Pass the arch that from_transformers returned with the blocks.")
    cfg = model.config.to_dict()
    if model.config.model_type == "bert":
        allowed = [bert_config(cfg, tokens)]
    else:
        native = from_config(model.config, tokens)
        allowed = [native, replace(native, hidden_output=True, tied=False)]
    if arch not in allowed:
        raise bad_value("arch", f"the model's converted network on {tokens} tokens "
                        f"({allowed[0]})", str(arch),
                        "Pass the arch that from_transformers returned for this model.")


def _checked(plan: list, blocks: dict) -> list[torch.Tensor]:
    """The blocks in plan order as tensors, every name present, known and of its shape."""
    wanted = {name for name, _, _ in plan}
    unknown = sorted(set(blocks) - wanted, key=str)
    if unknown:
        raise bad_value(f"blocks[{unknown[0]!r}]", "a block of the model's converted network",
                        "a block with no place in the model" + (
                            f" (also: {', '.join(map(str, unknown[1:]))})" if unknown[1:] else ""),
                        "Pass exactly the block names from_transformers returns for this arch.")
    values = []
    for name, shape, _ in plan:
        if name not in blocks:
            raise bad_value(f"blocks[{name!r}]", f"present (shape {shape})", "missing",
                            "Pass every block from_transformers returns for this arch.")
        value = blocks[name]
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            raise bad_type(f"blocks[{name!r}]", "a torch tensor or numpy array",
                           type(value).__name__, "Pass float64 tensors as from_transformers does.")
        if tuple(value.shape) != shape:
            raise bad_value(f"blocks[{name!r}]", f"of shape {shape}", tuple(value.shape),
                            "Pass the block with the shape from_transformers gives it.")
        if not (value.is_floating_point() and _finite(value)):
            raise bad_value(f"blocks[{name!r}]", "finite floating-point values",
                            f"dtype {value.dtype}" if not value.is_floating_point()
                            else "non-finite entries", "Pass finite float64 blocks.")
        values.append(value)
    return values


def _finite(value: torch.Tensor) -> bool:
    """All entries finite, checked in chunks of rows (torch.isfinite of a whole block makes a
    full-size temporary: E of GPT-2 is 300 MB in float64)."""
    rows = max(1, (1 << 20) // max(1, value[0].numel())) if value.dim() else 1
    chunks = value.split(rows) if value.dim() else (value,)
    return all(bool(torch.isfinite(c).all()) for c in chunks)


# Plan entries: (block name, native shape, write(value)); each write copies into a view.

def _same(name: str, view: torch.Tensor):
    return name, tuple(view.shape), view.copy_


def _transposed(name: str, view: torch.Tensor):
    """A Conv1D slice (in, out) of the native (out, in) block, or a position table's rows."""
    return name, tuple(view.T.shape), lambda v: view.copy_(v.T)


def _column(name: str, view: torch.Tensor, offset: float = 0.0):
    """A 1-D parameter (slice) as a native (n, 1) column; Gemma's gains: weight = gain - 1."""
    if offset:
        return name, (view.shape[0], 1), lambda v: view.copy_(v.reshape(-1).to(torch.float64) - offset)
    return name, (view.shape[0], 1), lambda v: view.copy_(v.reshape(-1))


def _permuted(name: str, view: torch.Tensor, inverse: torch.Tensor):
    """Rotary rows: native row r is the model's row perm[r], so the model's row j is native
    row inverse[j] (one head's rows: a small copy)."""
    shape = tuple(view.shape) if view.dim() == 2 else (view.shape[0], 1)
    return name, shape, lambda v: view.copy_(v[inverse].reshape(view.shape))


def _rows(name: str, view: torch.Tensor, inverse: torch.Tensor | None):
    """A head's rows of a weight (a matrix) or bias (a column), rotary-permuted with `inverse`."""
    if inverse is not None:
        return _permuted(name, view, inverse)
    return _same(name, view) if view.dim() == 2 else _column(name, view)


def _inverse(arch: Architecture, i: int) -> torch.Tensor:
    perm = torch.tensor(rotary_permutation(arch.keys[i - 1], arch.rotated_pairs[i - 1]))
    return torch.argsort(perm)


def _head(i: int, h: int, name: str) -> str:
    return f"{name}_{i}_{h}"


def _plan(model, arch: Architecture) -> list:
    mt = model.config.model_type
    base = (getattr(model, "transformer", None) or getattr(model, "model", None)
            or getattr(model, "gpt_neox", None) or model)
    lm_head = getattr(model, "lm_head", None) or getattr(model, "embed_out", None)
    plan: list = []
    if mt in FAMILY_BLOCKS:
        {"falcon": _falcon, "qwen3": _qwen3, "phi3": _phi3}[mt](arch, base, plan)
    elif arch.positions == "learned":
        plan.append(_same("E", base.wte.weight))
        plan.append(_transposed("T", base.wpe.weight[:arch.tokens]))
        for i, layer in enumerate(base.h, start=1):
            _gpt2_layer(arch, plan, i, layer)
        plan += [_column("f", base.ln_f.weight), _column("cf", base.ln_f.bias)]
    elif hasattr(base, "embed_in"):
        plan.append(_same("E", base.embed_in.weight))
        for i, layer in enumerate(base.layers, start=1):
            _neox_layer(arch, plan, i, layer)
        plan += [_column("f", base.final_layer_norm.weight),
                 _column("cf", base.final_layer_norm.bias)]
    else:
        offset = 1.0 if mt == "gemma" else 0.0
        plan.append(_same("E", base.embed_tokens.weight))
        for i, layer in enumerate(base.layers, start=1):
            _rotary_layer(arch, plan, i, layer.self_attn.q_proj, layer.self_attn.k_proj,
                          layer.self_attn.v_proj, layer, offset)
            _rotary_mlp(arch, plan, i, layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)
        plan.append(_column("f", base.norm.weight, offset))
    if not arch.tied and not arch.hidden_output:
        if lm_head is None:
            raise bad_value("model", "a causal-LM model (its lm_head is untied)",
                            type(model).__name__, "Pass the ...ForCausalLM class, or the "
                            "'hidden' arch (certify.native_network) and blocks without L.")
        plan.append(_same("L", lm_head.weight))
    return plan


def _gpt2_layer(arch: Architecture, plan: list, i: int, layer) -> None:
    """c_attn.weight (d, 3d) holds [q | k | v] columns; native Q = key (j = 1), K = query."""
    d, a, H = arch.widths[0], arch.keys[0], arch.head_counts[0]
    att, mlp = layer.attn, layer.mlp
    plan += [_column(f"g_{i}", layer.ln_1.weight), _column(f"c_{i}", layer.ln_1.bias)]
    for h in range(1, H + 1):
        for name, bname, j in (("Q", "bq", 1), ("K", "bk", 0), ("W", "bv", 2)):
            cols = slice(j * d + (h - 1) * a, j * d + h * a)
            plan.append(_transposed(_head(i, h, name), att.c_attn.weight[:, cols]))
            plan.append(_column(_head(i, h, bname), att.c_attn.bias[cols]))
        plan.append(_transposed(_head(i, h, "O"), att.c_proj.weight[(h - 1) * a:h * a]))
    plan.append(_column(f"bo_{i}", att.c_proj.bias))
    plan += [_column(f"n_{i}", layer.ln_2.weight), _column(f"cn_{i}", layer.ln_2.bias),
             _transposed(f"P_{i}", mlp.c_fc.weight), _column(f"bp_{i}", mlp.c_fc.bias),
             _transposed(f"U_{i}", mlp.c_proj.weight), _column(f"bu_{i}", mlp.c_proj.bias)]


def _neox_layer(arch: Architecture, plan: list, i: int, layer) -> None:
    """query_key_value rows: [q_h, k_h, v_h] per head, a rows each."""
    a, H = arch.keys[0], arch.head_counts[0]
    inverse = _inverse(arch, i)
    att, mlp = layer.attention, layer.mlp
    qkv = att.query_key_value
    plan += [_column(f"g_{i}", layer.input_layernorm.weight),
             _column(f"c_{i}", layer.input_layernorm.bias)]
    for h in range(1, H + 1):
        for name, bname, j in (("Q", "bq", 1), ("K", "bk", 0), ("W", "bv", 2)):
            rows = slice(((h - 1) * 3 + j) * a, ((h - 1) * 3 + j + 1) * a)
            for n, p in ((name, qkv.weight), (bname, qkv.bias if arch.bias else None)):
                if p is not None:
                    plan.append(_rows(_head(i, h, n), p[rows], None if name == "W" else inverse))
        plan.append(_same(_head(i, h, "O"), att.dense.weight[:, (h - 1) * a:h * a]))
    if arch.bias:
        plan.append(_column(f"bo_{i}", att.dense.bias))
    plan += [_column(f"n_{i}", layer.post_attention_layernorm.weight),
             _column(f"cn_{i}", layer.post_attention_layernorm.bias),
             _same(f"P_{i}", mlp.dense_h_to_4h.weight), _column(f"bp_{i}", mlp.dense_h_to_4h.bias),
             _same(f"U_{i}", mlp.dense_4h_to_h.weight), _column(f"bu_{i}", mlp.dense_4h_to_h.bias)]


def _bias_of(p, arch_bias: bool, where: str):
    """A projection's bias parameter, or None without biases."""
    if not arch_bias:
        return None
    if p is None:
        raise bad_value("model", "q/k/v biases as its config says", "missing",
                        f"Check the model's attention_bias ({where}).")
    return p


def _rotary_layer(arch: Architecture, plan: list, i: int, q, k, v, layer, offset: float) -> None:
    """Llama-style attention; q, k, v: (weight, bias) sources as `_Linear`s or nn.Linear."""
    a, H, G = arch.keys[0], arch.head_counts[0], arch.kv_counts[0]
    inverse = _inverse(arch, i)
    att = layer.self_attn
    plan.append(_column(f"g_{i}", layer.input_layernorm.weight, offset))
    for name, bname, proj, n, permute in (("K", "bk", q, H, True), ("Q", "bq", k, G, True),
                                          ("W", "bv", v, G, False)):
        bias = _bias_of(proj.bias, arch.bias, f"layer {i}")
        for h in range(1, n + 1):
            rows = slice((h - 1) * a, h * a)
            for bn, p in ((name, proj.weight), (bname, bias)):
                if p is not None:
                    plan.append(_rows(_head(i, h, bn), p[rows], inverse if permute else None))
    for h in range(1, H + 1):
        plan.append(_same(_head(i, h, "O"), att.o_proj.weight[:, (h - 1) * a:h * a]))
    if arch.bias and arch.out_bias:
        plan.append(_column(f"bo_{i}", att.o_proj.bias))
    plan.append(_column(f"n_{i}", layer.post_attention_layernorm.weight, offset))


def _rotary_mlp(arch: Architecture, plan: list, i: int, gate, up, down) -> None:
    for name, bname, proj in (("G", "bg", gate), ("P", "bp", up), ("U", "bu", down)):
        plan.append(_same(f"{name}_{i}", proj.weight))
        if arch.mlp_bias:
            plan.append(_column(f"{bname}_{i}", proj.bias))


class _Linear:
    """Rows of a fused weight as a linear map without bias (Phi-3's qkv_proj, gate_up_proj)."""

    def __init__(self, weight: torch.Tensor):
        self.weight, self.bias = weight, None


def _phi3(arch: Architecture, base, plan: list) -> None:
    H, G, a, m = arch.head_counts[0], arch.kv_counts[0], arch.keys[0], arch.mlp_widths[0]
    plan.append(_same("E", base.embed_tokens.weight))
    for i, layer in enumerate(base.layers, start=1):
        qkv, gate_up = layer.self_attn.qkv_proj.weight, layer.mlp.gate_up_proj.weight
        _rotary_layer(arch, plan, i, _Linear(qkv[:H * a]), _Linear(qkv[H * a:(H + G) * a]),
                      _Linear(qkv[(H + G) * a:]), layer, 0.0)
        _rotary_mlp(arch, plan, i, _Linear(gate_up[:m]), _Linear(gate_up[m:]), layer.mlp.down_proj)
    plan.append(_column("f", base.norm.weight))


def _qwen3(arch: Architecture, base, plan: list) -> None:
    """Llama's layers and the shared QK-norm gains: native qn_i is k_norm, kn_i is q_norm."""
    plan.append(_same("E", base.embed_tokens.weight))
    for i, layer in enumerate(base.layers, start=1):
        att = layer.self_attn
        _rotary_layer(arch, plan, i, att.q_proj, att.k_proj, att.v_proj, layer, 0.0)
        _rotary_mlp(arch, plan, i, layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)
        inverse = _inverse(arch, i)
        plan.append(_permuted(f"qn_{i}", att.k_norm.weight, inverse))
        plan.append(_permuted(f"kn_{i}", att.q_norm.weight, inverse))
    plan.append(_column("f", base.norm.weight))


def _falcon_rows(arch: Architecture, new: bool) -> list[tuple[str, int, int]]:
    """(native matrix name, head, first fused row) of every a-row block of query_key_value:
    [q_1..q_H, k, v] (multi-query), [q_h, k_h, v_h] per head, or per group [its queries, k_g,
    v_g] (new decoder architecture); native K = query, Q = key."""
    H, G, a = arch.head_counts[0], arch.kv_counts[0], arch.keys[0]
    if new:
        n = H // G
        return ([("K", h, ((h - 1) // n * (n + 2) + (h - 1) % n) * a) for h in range(1, H + 1)]
                + [(name, g, ((g - 1) * (n + 2) + n + j) * a)
                   for g in range(1, G + 1) for name, j in (("Q", 0), ("W", 1))])
    if G == 1:
        return ([("K", h, (h - 1) * a) for h in range(1, H + 1)]
                + [("Q", 1, H * a), ("W", 1, (H + 1) * a)])
    return [(name, h, ((h - 1) * 3 + j) * a) for h in range(1, H + 1)
            for name, j in (("K", 0), ("Q", 1), ("W", 2))]


def _falcon(arch: Architecture, base, plan: list) -> None:
    a = arch.keys[0]
    plan.append(_same("E", base.word_embeddings.weight))
    for i, layer in enumerate(base.h, start=1):
        att, mlp = layer.self_attention, layer.mlp
        inverse = _inverse(arch, i)
        qkv = att.query_key_value
        for name, h, start in _falcon_rows(arch, bool(layer.config.new_decoder_architecture)):
            rows = slice(start, start + a)
            bname = {"Q": "bq", "K": "bk", "W": "bv"}[name]
            for n, p in ((name, qkv.weight), (bname, qkv.bias if arch.bias else None)):
                if p is None:
                    continue
                plan.append(_rows(_head(i, h, n), p[rows], None if name == "W" else inverse))
        for h in range(1, arch.head_counts[0] + 1):
            plan.append(_same(_head(i, h, "O"), att.dense.weight[:, (h - 1) * a:h * a]))
        if arch.bias:
            plan.append(_column(f"bo_{i}", att.dense.bias))
        first, second = ((layer.ln_attn, layer.ln_mlp) if hasattr(layer, "ln_attn") else
                         (layer.input_layernorm, getattr(layer, "post_attention_layernorm", None)))
        plan += [_column(f"g_{i}", first.weight), _column(f"c_{i}", first.bias)]
        if not arch.shared_norm:
            plan += [_column(f"n_{i}", second.weight), _column(f"cn_{i}", second.bias)]
        plan += [_same(f"P_{i}", mlp.dense_h_to_4h.weight), _same(f"U_{i}", mlp.dense_4h_to_h.weight)]
        if arch.mlp_bias:
            plan += [_column(f"bp_{i}", mlp.dense_h_to_4h.bias),
                     _column(f"bu_{i}", mlp.dense_4h_to_h.bias)]
    plan += [_column("f", base.ln_f.weight), _column("cf", base.ln_f.bias)]


def _bert_plan(model, arch: Architecture) -> list:
    """BertModel (or a model holding `.bert`): `convert._bert_from_transformers` backwards."""
    base = getattr(model, "bert", None) or model
    emb = base.embeddings
    a, H = arch.keys[0], arch.head_counts[0]
    plan = [_same("E", emb.word_embeddings.weight),
            _transposed("T", emb.position_embeddings.weight[:arch.tokens])]
    if arch.token_types is not None:
        plan.append(_same("Ty", emb.token_type_embeddings.weight))
    plan += [_column("ge", emb.LayerNorm.weight), _column("ce", emb.LayerNorm.bias)]
    for i, layer in enumerate(base.encoder.layer, start=1):
        att, out = layer.attention.self, layer.attention.output
        for h in range(1, H + 1):
            rows = slice((h - 1) * a, h * a)
            for name, bname, proj in (("Q", "bq", att.key), ("K", "bk", att.query),
                                      ("W", "bv", att.value)):
                plan += [_same(_head(i, h, name), proj.weight[rows]),
                         _column(_head(i, h, bname), proj.bias[rows])]
            plan.append(_same(_head(i, h, "O"), out.dense.weight[:, rows]))
        plan += [_column(f"bo_{i}", out.dense.bias),
                 _column(f"g_{i}", out.LayerNorm.weight), _column(f"c_{i}", out.LayerNorm.bias),
                 _same(f"P_{i}", layer.intermediate.dense.weight),
                 _column(f"bp_{i}", layer.intermediate.dense.bias),
                 _same(f"U_{i}", layer.output.dense.weight),
                 _column(f"bu_{i}", layer.output.dense.bias),
                 _column(f"n_{i}", layer.output.LayerNorm.weight),
                 _column(f"cn_{i}", layer.output.LayerNorm.bias)]
    return plan
