"""transformers models as native networks: the native forward equals the transformers forward
(logits and last hidden state) on the same weights and token ids, to float64 round-off. The
harness (float64 eager attention, random generic models) is scripts/convert_table.py's, which
also writes the page's table."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from neuromanifold.core.blocks import block_forward
from neuromanifold.core.tokens import one_hot
from neuromanifold.errors import InputError
from neuromanifold.models.certify import native_network
from neuromanifold.models.convert import from_config, logits, rotary_permutation

transformers = pytest.importorskip("transformers")

# Tolerance of the equality: float64 round-off over a few layers (measured up to ~4e-15).
ROUND_OFF = 1e-12


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "convert_table.py"
    spec = importlib.util.spec_from_file_location("convert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _script()


@pytest.mark.parametrize("size", range(len(CASES.GPT2_SIZES)))
def test_gpt2_forward_equals_transformers(size):
    model, arch, blocks, ids = CASES.gpt2_case(size)
    positions_unused = (model.config.n_positions - arch.tokens) * model.config.n_embd
    assert arch.n_params == sum(p.numel() for p in model.parameters()) - positions_unused
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


@pytest.mark.parametrize("family", sorted(CASES.ROTARY_FAMILIES))
@pytest.mark.parametrize("size", range(len(CASES.ROTARY_SIZES)))
def test_rotary_families_forward_equals_transformers(family, size):
    model, arch, blocks, ids = CASES.rotary_case(family, size)
    assert arch.n_params == sum(p.numel() for p in model.parameters())
    sizes = CASES.ROTARY_SIZES[size]
    assert (arch.kv_heads is not None) == (sizes["num_key_value_heads"] < sizes["num_attention_heads"])
    with torch.no_grad():
        float32_paths = (model(ids).logits.transpose(1, 2) - logits(arch, blocks, ids)).abs().max()
    assert float32_paths < 1e-4      # transformers' own float32 rotary tables, softmax and norms
    CASES.float64_model(model)
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


@pytest.mark.parametrize("size", range(len(CASES.NEOX_SIZES)))
def test_gpt_neox_forward_equals_transformers(size):
    """Partial rotary (half of each head) with parallel blocks, full rotary sequential."""
    model, arch, blocks, ids = CASES.neox_case(size)
    assert arch.n_params == sum(p.numel() for p in model.parameters())
    assert arch.parallel == (size == 0) and (arch.rope_pairs is not None) == (size == 0)
    CASES.float64_model(model)
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


@pytest.mark.parametrize("size", range(len(CASES.GEMMA_SIZES)))
def test_gemma_forward_equals_transformers(size):
    """(1 + w) gains (the native gain is 1 + w), the sqrt(d) embedding scale, GeGLU (tanh)."""
    model, arch, blocks, ids = CASES.gemma_case(size)
    assert arch.n_params == sum(p.numel() for p in model.parameters())
    assert arch.tied and arch.activation == "gelu_tanh" and arch.embed_scale > 1
    CASES.float64_model(model)
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


@pytest.mark.parametrize("size", range(len(CASES.BERT_SIZES)))
def test_bert_forward_equals_transformers(size):
    """Post-norm blocks, the embedding norm, token types (random type ids), eps 1e-12, erf GELU:
    BertModel's last hidden state (no pooler)."""
    model, arch, blocks, ids, type_ids = CASES.bert_case(size)
    positions_unused = (model.config.max_position_embeddings - arch.tokens) * arch.widths[0]
    assert arch.n_params == sum(p.numel() for p in model.parameters()) - positions_unused
    assert (arch.post_norm, arch.embed_norm, arch.token_types, arch.hidden_output,
            arch.norm_eps, arch.activation) == (True, True, 2, True, 1e-12, "gelu")
    assert type_ids.min() == 0 and type_ids.max() == 1
    assert CASES.bert_difference(model, arch, blocks, ids, type_ids) < ROUND_OFF


def test_bert_refusals_are_one_line():
    config = {"model_type": "bert", "hidden_size": 4, "num_attention_heads": 2,
              "num_hidden_layers": 1, "intermediate_size": 4, "vocab_size": 7,
              "max_position_embeddings": 8}
    for change, word in (({"position_embedding_type": "relative_key"}, "position"),
                         ({"is_decoder": True}, "position"), ({}, "tokens")):
        with pytest.raises(InputError, match=word) as info:
            from_config({**config, **change}, 3 if change else 9)
        assert "\n" not in str(info.value)
    arch = from_config(config, 3)
    with pytest.raises(InputError, match="hidden_state"):
        logits(arch, {}, torch.zeros((1, 3), dtype=torch.int64))


@pytest.mark.parametrize("size", range(len(CASES.FALCON_SIZES)))
def test_falcon_forward_equals_transformers(size):
    """Multi-query parallel blocks reading one layernorm (shared_norm), per-head sequential
    blocks with biases, the new decoder architecture with groups and two norms or one."""
    model, arch, blocks, ids = CASES.falcon_case(size)
    assert arch.n_params == sum(p.numel() for p in model.parameters())
    assert arch.shared_norm == (size in (0, 3)) and arch.parallel == (size != 1)
    assert (arch.kv_heads is not None) == (size != 1) and not any(name.startswith("n_") for name in blocks) == arch.shared_norm
    CASES.float64_model(model)
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


@pytest.mark.parametrize("size", range(len(CASES.PHI3_SIZES)))
def test_phi3_forward_equals_transformers(size):
    """Fused qkv_proj and gate_up_proj unfused; partial rotary at size 0."""
    model, arch, blocks, ids = CASES.phi3_case(size)
    assert arch.n_params == sum(p.numel() for p in model.parameters())
    assert (arch.rope_pairs is not None) == (size == 0) and not arch.bias
    CASES.float64_model(model)
    assert max(CASES.differences(model, arch, blocks, ids)) < ROUND_OFF


def test_qwen3_shares_one_qk_norm_gain_per_layer():
    model, arch, blocks, ids = CASES.rotary_case("qwen3", 1)
    assert arch.qk_norm and arch.qk_norm_shared and not arch.bias
    assert {"qn_1", "kn_1"} <= set(blocks) and not any(k.startswith("qn_1_") for k in blocks)


def test_docs_table_is_recomputed():
    assert CASES.table() == CASES.page_block()


def test_rotary_permutation_pairs_f_with_f_plus_r():
    assert rotary_permutation(6, 3) == [0, 3, 1, 4, 2, 5]
    assert rotary_permutation(6, 2) == [0, 2, 1, 3, 4, 5]


@pytest.mark.parametrize("change, word", [
    ({"model_type": "t5"}, "model_type"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}}, "rope"),
    ({"model_type": "olmo2"}, "model_type"),
    ({"model_type": "phi3", "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope"),
    ({"model_type": "falcon", "alibi": True}, "alibi"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "parallel_attn": False},
     "parallel_attn"),
])
def test_unconverted_configs_are_one_line(change, word):
    config = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
              "num_hidden_layers": 1, "intermediate_size": 4, "vocab_size": 9, **change}
    with pytest.raises(InputError, match=word) as info:
        from_config(config, 3)
    assert "\n" not in str(info.value)


def test_from_config_reads_a_plain_dict():
    arch = from_config({"model_type": "qwen2", "hidden_size": 8, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "num_hidden_layers": 1, "intermediate_size": 4,
                        "vocab_size": 11, "rope_theta": 1e6, "rms_norm_eps": 1e-6}, 3)
    assert (arch.bias, arch.out_bias, arch.kv_heads, arch.rope_base) == (True, False, (1,), 1e6)
    # E, L; gains g, n, f; 2 query heads and 1 key/value group with biases; o_proj; MLP
    assert arch.n_params == 2 * 11 * 8 + 3 * 8 + 2 * (4 * 8 + 4) + 2 * (4 * 8 + 4) + 8 * 8 \
        + 3 * 4 * 8


def test_dim_of_a_converted_network_brackets_its_float_rank():
    """`dim` runs on a converted GPT-2 (norm biases, learned positions, tied logits): the float
    rank lies in the certified path's bracket, which is certified only where the bound closes."""
    import warnings

    from neuromanifold.dimension.api import neuromanifold_dim

    arch = from_config({"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1,
                        "vocab_size": 7, "n_inner": 4, "n_positions": 8}, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numerical = neuromanifold_dim(arch, method="numerical")
        certified = neuromanifold_dim(arch, method="certified")
    assert certified.lower_bound <= numerical.dimension <= certified.upper_bound <= arch.n_params
    assert certified.status != "certified" or certified.dimension == numerical.dimension


def test_from_config_reads_falcon_and_qwen3_dicts():
    """Falcon-7B's layout (multi-query, one layernorm per parallel block) and Qwen3's shared
    QK-norm gains, from plain dicts (no transformers)."""
    falcon = from_config({"model_type": "falcon", "hidden_size": 8, "num_attention_heads": 2,
                          "num_hidden_layers": 1, "vocab_size": 11, "ffn_hidden_size": 4}, 3)
    assert (falcon.shared_norm, falcon.parallel, falcon.kv_heads) == (True, True, (1,))
    # E (tied); g, c, f, cf; 2 query heads, 1 key/value group; o columns; MLP (no biases)
    assert falcon.n_params == 11 * 8 + 4 * 8 + 2 * 4 * 8 + 2 * 4 * 8 + 8 * 8 + 2 * 4 * 8
    qwen3 = from_config({"model_type": "qwen3", "hidden_size": 8, "num_attention_heads": 2,
                         "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 1,
                         "intermediate_size": 4, "vocab_size": 11}, 3)
    assert (qwen3.qk_norm_shared, qwen3.bias) == (True, False)
    layout = [name for name, _, _ in qwen3.param_layout()]
    assert "qn_1" in layout and "kn_1" in layout and "n_1" in layout


TINY = {"falcon": {"model_type": "falcon", "hidden_size": 4, "num_attention_heads": 2,
                   "num_hidden_layers": 1, "vocab_size": 6, "ffn_hidden_size": 4},
        "qwen3": {"model_type": "qwen3", "hidden_size": 4, "num_attention_heads": 2,
                  "num_key_value_heads": 1, "head_dim": 2, "num_hidden_layers": 1,
                  "intermediate_size": 3, "vocab_size": 6, "tie_word_embeddings": True},
        "phi3": {"model_type": "phi3", "hidden_size": 4, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "num_hidden_layers": 1, "intermediate_size": 3,
                 "vocab_size": 6, "tie_word_embeddings": True}}


@pytest.mark.parametrize("family, expected", [("qwen3", (124, 108, "certified")),
                                              ("phi3", (120, 103, "certified")),
                                              ("falcon", (120, 81, "lower-bound"))])
def test_tiny_converted_networks_read_honestly(family, expected):
    """Tiny converted Qwen3 and Phi-3 certify at their float rank; tiny Falcon's bound stays open
    above the float rank (lower-bound): at vocabulary 6 (hidden + 2) its shrink leaves
    directions of its own beside the layernorm-bias families."""
    import warnings

    from neuromanifold.dimension.api import neuromanifold_dim

    arch = from_config(TINY[family], 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numerical = neuromanifold_dim(arch, method="numerical")
        certified = neuromanifold_dim(arch, method="certified")
    assert (arch.n_params, numerical.dimension, certified.status) == expected
    assert certified.lower_bound <= numerical.dimension <= certified.upper_bound


def test_published_neox_names_convert_as_transformers_reads_them():
    """Pythia's config.json says rotary_pct and rotary_emb_base: the raw dict converts to the
    network transformers' own config object gives (partial rotary 0.25, the published base)."""
    import transformers

    raw = {"model_type": "gpt_neox", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 11,
           "rotary_pct": 0.25, "rotary_emb_base": 500, "use_parallel_residual": True, "hidden_act": "gelu",
           "tie_word_embeddings": False}
    from_raw = from_config(raw, 3)
    from_object = from_config(transformers.GPTNeoXConfig(**{k: v for k, v in raw.items()
                                                           if k != "model_type"}), 3)
    assert from_raw == from_object
    assert from_raw.rope_pairs == (1,) and from_raw.rope_base == 500.0


HIDDEN_CASES = ([("qwen3", s) for s in range(len(CASES.ROTARY_SIZES))]
                + [("gpt_neox", s) for s in range(len(CASES.NEOX_SIZES))]
                + [("falcon", s) for s in range(len(CASES.FALCON_SIZES))]
                + [("phi3", s) for s in range(len(CASES.PHI3_SIZES))])


@pytest.mark.parametrize("family, size", HIDDEN_CASES)
def test_hidden_state_network_equals_the_base_model(family, size):
    """The families counted through the registry, tied and untied: the base model's
    last_hidden_state (after its final norm) is the native network with `hidden_output` and an
    untied embedding (`certify.native_network(config, t, "hidden")`), on the same blocks less L,
    with the base model's parameter count."""
    case = {"qwen3": lambda s: CASES.rotary_case("qwen3", s), "gpt_neox": CASES.neox_case,
            "falcon": CASES.falcon_case, "phi3": CASES.phi3_case}[family]
    model, arch, blocks, ids = case(size)
    CASES.float64_model(model)
    hidden = native_network(model.config, arch.tokens, "hidden")
    assert hidden == replace(arch, hidden_output=True, tied=False)
    assert hidden.n_params == sum(p.numel() for p in model.base_model.parameters())
    with torch.no_grad():
        expected = model.base_model(ids).last_hidden_state.transpose(1, 2)
        native = block_forward(hidden, {k: v for k, v in blocks.items() if k != "L"},
                               one_hot(ids.long(), arch.vocab))
    assert (expected - native).abs().max() < ROUND_OFF
