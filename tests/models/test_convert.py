"""transformers models as native networks: the native forward equals the transformers forward
(logits and last hidden state) on the same weights and token ids, to float64 round-off. The
harness (float64 eager attention, random generic models) is scripts/convert_table.py's, which
also writes the page's table."""

import importlib.util
from pathlib import Path

import pytest
import torch

from neuromanifold.errors import InputError
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


def test_docs_table_is_recomputed():
    assert CASES.table() == CASES.page_block()


def test_rotary_permutation_pairs_f_with_f_plus_r():
    assert rotary_permutation(6, 3) == [0, 3, 1, 4, 2, 5]
    assert rotary_permutation(6, 2) == [0, 2, 1, 3, 4, 5]


@pytest.mark.parametrize("change, word", [
    ({"model_type": "bert"}, "model_type"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}}, "rope"),
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
