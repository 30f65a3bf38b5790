"""The forward-equality table of docs/models.md#the-converter: native vs transformers forwards.

Run `PYTHONPATH=src python scripts/convert_table.py` to print the table, or with `--write` to
replace the block between the markers of docs/models.md; tests/models/test_convert.py recomputes
it and compares with the page. For each converted family and a few tiny seeded configs: a
float64 transformers model with every parameter moved off its initial value, converted by
`neuromanifold.models.convert.from_transformers`, and the largest |difference| of the logits and
of the last hidden state on the same token ids (written as "< 1e-13" or "< 1e-04", so that the
page does not depend on the last bits of a platform's round-off).

transformers computes the softmax of its Llama-style eager attention, the rotary tables and the
RMSNorm statistics in float32 by design; `float64_model` replaces them by the same formulas in
float64 (an explicit eager attention registered as "float64_eager"), so that the comparison is
at float64 round-off. The column "transformers' float32 paths" measures the unpatched model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from neuromanifold.models.convert import from_transformers, hidden_state, logits
from neuromanifold.models.float64 import float64_model
from neuromanifold.models.float64 import register as _register

sys.path.insert(0, str(Path(__file__).resolve().parent))  # doc_blocks, run or loaded by path
from doc_blocks import print_or_write, read_block  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "models.md"
BEGIN, END = "<!-- convert_table: begin -->", "<!-- convert_table: end -->"

GPT2_SIZES = [dict(n_embd=12, n_head=3, n_layer=2, vocab_size=11, n_inner=10),
              dict(n_embd=8, n_head=2, n_layer=1, vocab_size=17, n_inner=None),
              dict(n_embd=6, n_head=1, n_layer=3, vocab_size=5, n_inner=7,
                   activation_function="gelu")]
ROTARY_FAMILIES = {"llama": ("LlamaConfig", "LlamaForCausalLM",
                             dict(attention_bias=True, mlp_bias=True)),
                   "mistral": ("MistralConfig", "MistralForCausalLM", {}),
                   "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
                   "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {})}
ROTARY_SIZES = [dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                     num_hidden_layers=2, intermediate_size=10, vocab_size=13, theta=500.0),
                dict(hidden_size=8, num_attention_heads=2, num_key_value_heads=2, head_dim=4,
                     num_hidden_layers=1, intermediate_size=6, vocab_size=9, theta=10000.0),
                dict(hidden_size=12, num_attention_heads=3, num_key_value_heads=1, head_dim=4,
                     num_hidden_layers=2, intermediate_size=5, vocab_size=7, theta=1e6)]


NEOX_SIZES = [dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=2, intermediate_size=10,
                   vocab_size=13, factor=0.5, use_parallel_residual=True),
              dict(hidden_size=12, num_attention_heads=3, num_hidden_layers=1, intermediate_size=7,
                   vocab_size=9, factor=1.0, use_parallel_residual=False)]


GEMMA_SIZES = [dict(hidden_size=12, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                    num_hidden_layers=2, intermediate_size=10, vocab_size=13),
               dict(hidden_size=8, num_attention_heads=2, num_key_value_heads=2, head_dim=6,
                    num_hidden_layers=1, intermediate_size=5, vocab_size=11)]


BERT_SIZES = [dict(hidden_size=4, num_attention_heads=2, num_hidden_layers=1, intermediate_size=5,
                   vocab_size=7),
              dict(hidden_size=8, num_attention_heads=2, num_hidden_layers=2, intermediate_size=12,
                   vocab_size=11),
              dict(hidden_size=6, num_attention_heads=3, num_hidden_layers=2, intermediate_size=7,
                   vocab_size=9)]


def random_model(cls, config, seed: int, attention: str = "float64_eager"):
    """A float64 model in eval mode, float64 eager attention (`attention`: Falcon's own eager
    class, float64 in float64 models), every parameter moved off its initial value by
    0.3 N(0, 1) (LayerNorm ones and zeros are not generic)."""
    _register()
    config._attn_implementation = attention
    torch.manual_seed(seed)
    model = cls(config).to(torch.float64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def differences(model, arch, blocks, ids) -> tuple[float, float]:
    """max |logits - native logits|, max |last hidden state - native hidden state|."""
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        native_logits, native_hidden = logits(arch, blocks, ids), hidden_state(arch, blocks, ids)
    return ((out.logits.transpose(1, 2) - native_logits).abs().max().item(),
            (out.hidden_states[-1].transpose(1, 2) - native_hidden).abs().max().item())


def gpt2_case(size: int):
    """(model, arch, blocks, ids) of GPT2_SIZES[size] on t = 3 + size tokens."""
    import transformers  # noqa: PLC0415

    config = transformers.GPT2Config(n_positions=8, **GPT2_SIZES[size])
    model = random_model(transformers.GPT2LMHeadModel, config, seed=size)
    t = 3 + size
    arch, blocks = from_transformers(model, t)
    ids = torch.randint(0, config.vocab_size, (4, t), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def rotary_case(family: str, size: int):
    """(model, arch, blocks, ids) of a Llama-style family at ROTARY_SIZES[size], t = 4 + size."""
    import transformers  # noqa: PLC0415

    config_name, model_name, extra = ROTARY_FAMILIES[family]
    sizes = dict(ROTARY_SIZES[size])
    theta = sizes.pop("theta")
    config = getattr(transformers, config_name)(
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        rms_norm_eps=1e-5 * (size + 1), tie_word_embeddings=size == 1, **sizes, **extra)
    model = random_model(getattr(transformers, model_name), config, seed=10 + size)
    t = 4 + size
    arch, blocks = from_transformers(model, t)
    ids = torch.randint(0, config.vocab_size, (3, t), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def neox_case(size: int):
    """(model, arch, blocks, ids) of GPT-NeoX at NEOX_SIZES[size] (partial rotary and parallel
    blocks at size 0), t = 5."""
    import transformers  # noqa: PLC0415

    sizes = dict(NEOX_SIZES[size])
    factor = sizes.pop("factor")
    config = transformers.GPTNeoXConfig(rope_parameters={
        "rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": factor}, **sizes)
    model = random_model(transformers.GPTNeoXForCausalLM, config, seed=20 + size)
    arch, blocks = from_transformers(model, 5)
    ids = torch.randint(0, config.vocab_size, (3, 5), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def gemma_case(size: int):
    """(model, arch, blocks, ids) of Gemma at GEMMA_SIZES[size]: (1 + w) gains, sqrt(d) embedding
    scale, GeGLU (tanh), tied logits; t = 4 + size."""
    import transformers  # noqa: PLC0415

    config = transformers.GemmaConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0 * (size + 1)},
        **GEMMA_SIZES[size])
    model = random_model(transformers.GemmaForCausalLM, config, seed=30 + size)
    t = 4 + size
    arch, blocks = from_transformers(model, t)
    ids = torch.randint(0, config.vocab_size, (3, t), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def bert_case(size: int):
    """(model, arch, blocks, ids, type_ids) of BertModel at BERT_SIZES[size] (no pooler; 2 token
    types, eps 1e-12), t = 3 + size."""
    import transformers  # noqa: PLC0415

    config = transformers.BertConfig(max_position_embeddings=8, type_vocab_size=2,
                                     **BERT_SIZES[size])
    model = random_model(lambda c: transformers.BertModel(c, add_pooling_layer=False), config,
                         seed=40 + size)
    t = 3 + size
    arch, blocks = from_transformers(model, t)
    gen = torch.Generator().manual_seed(size)
    ids = torch.randint(0, config.vocab_size, (4, t), generator=gen)
    return model, arch, blocks, ids, torch.randint(0, 2, (4, t), generator=gen)


def bert_difference(model, arch, blocks, ids, type_ids) -> float:
    """max |last hidden state - native hidden state| (BertModel has no logits)."""
    with torch.no_grad():
        out = model(input_ids=ids, token_type_ids=type_ids).last_hidden_state
        return (out.transpose(1, 2) - hidden_state(arch, blocks, ids, type_ids)).abs().max().item()


# Falcon: multi-query parallel blocks with one shared layernorm (the 7B layout), per-head
# sequential blocks with biases, the new decoder architecture (groups, two norms; one norm).
FALCON_SIZES = [dict(hidden_size=12, num_attention_heads=3, num_hidden_layers=2, vocab_size=13,
                     ffn_hidden_size=10),
                dict(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, vocab_size=9,
                     ffn_hidden_size=6, multi_query=False, parallel_attn=False, bias=True,
                     tie_word_embeddings=False),
                dict(hidden_size=16, num_attention_heads=4, num_kv_heads=2, num_hidden_layers=2,
                     vocab_size=11, ffn_hidden_size=7, new_decoder_architecture=True, bias=True),
                dict(hidden_size=8, num_attention_heads=2, num_kv_heads=1, num_hidden_layers=1,
                     vocab_size=7, ffn_hidden_size=5, new_decoder_architecture=True,
                     num_ln_in_parallel_attn=1)]
# Phi-3: partial rotary (half of each head) with groups, full rotary with tied logits.
PHI3_SIZES = [dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=10, vocab_size=13, factor=0.5),
              dict(hidden_size=12, num_attention_heads=3, num_key_value_heads=3, num_hidden_layers=1,
                   intermediate_size=7, vocab_size=9, factor=1.0, tie_word_embeddings=True)]


def falcon_case(size: int):
    """(model, arch, blocks, ids) of Falcon at FALCON_SIZES[size], t = 4 + size."""
    import transformers  # noqa: PLC0415

    config = transformers.FalconConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 500.0 * (size + 1)},
        layer_norm_epsilon=1e-5 * (size + 1), **FALCON_SIZES[size])
    model = random_model(transformers.FalconForCausalLM, config, seed=40 + size, attention="eager")
    t = 4 + size
    arch, blocks = from_transformers(model, t)
    ids = torch.randint(0, config.vocab_size, (3, t), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def phi3_case(size: int):
    """(model, arch, blocks, ids) of Phi-3 at PHI3_SIZES[size] (partial rotary at size 0), t = 5."""
    import transformers  # noqa: PLC0415

    sizes = dict(PHI3_SIZES[size])
    factor = sizes.pop("factor")
    config = transformers.Phi3Config(rope_parameters={
        "rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": factor},
        rms_norm_eps=1e-5 * (size + 1), pad_token_id=None, eos_token_id=2, **sizes)
    model = random_model(transformers.Phi3ForCausalLM, config, seed=50 + size)
    arch, blocks = from_transformers(model, 5)
    ids = torch.randint(0, config.vocab_size, (3, 5), generator=torch.Generator().manual_seed(size))
    return model, arch, blocks, ids


def _bound(x: float) -> str:
    """Coarse on purpose: the page must not depend on a platform's last bits."""
    for bound in (1e-13, 1e-4):
        if x < bound:
            return f"< {bound:.0e}"
    return f"{x:.1e}"


def table() -> str:
    """The markdown table: one row per family and size."""
    rows = ["| family | native network | parameters | t | max abs diff, logits | max abs diff, "
            "last hidden state | transformers' float32 paths, logits |",
            "|---|---|---|---|---|---|---|"]
    cases = [("gpt2", gpt2_case(s)) for s in range(len(GPT2_SIZES))]
    cases += [(f, rotary_case(f, s)) for f in sorted(ROTARY_FAMILIES) for s in range(len(ROTARY_SIZES))]
    cases += [("gpt_neox", neox_case(s)) for s in range(len(NEOX_SIZES))]
    cases += [("gemma", gemma_case(s)) for s in range(len(GEMMA_SIZES))]
    cases += [("falcon", falcon_case(s)) for s in range(len(FALCON_SIZES))]
    cases += [("phi3", phi3_case(s)) for s in range(len(PHI3_SIZES))]
    for family, (model, arch, blocks, ids) in cases:
        raw = "n/a (float64)"
        if family != "gpt2":
            with torch.no_grad():
                raw = _bound((model(ids).logits.transpose(1, 2) - logits(arch, blocks, ids)).abs().max().item())
            float64_model(model)
        dl, dh = differences(model, arch, blocks, ids)
        rows.append(f"| {family} | `{arch}` | {arch.n_params} | {arch.tokens} | {_bound(dl)} | "
                    f"{_bound(dh)} | {raw} |")
    for size in range(len(BERT_SIZES)):
        model, arch, blocks, ids, type_ids = bert_case(size)
        dh = bert_difference(model, arch, blocks, ids, type_ids)
        rows.append(f"| bert | `{arch}` | {arch.n_params} | {arch.tokens} | n/a (BertModel: "
                    f"no logits) | {_bound(dh)} | n/a (float64) |")
    return "\n".join(rows)


def page_block() -> str:
    return read_block(PAGE, BEGIN, END)


def main() -> None:
    print_or_write(PAGE, BEGIN, END, table(), sys.argv)


if __name__ == "__main__":
    main()
