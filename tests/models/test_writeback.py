"""write_blocks, the inverse of from_transformers: for every converted family (and each of
Falcon's fused layouts) perturbed native blocks written into the model read back exactly, the
model's own forward then equals the native one, the parameters keep their dtype, a misplaced
block is caught by the block-by-block comparison, and a missing or misshapen block is refused
by name before anything is written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from neuromanifold.errors import InputError
from neuromanifold.models import writeback
from neuromanifold.models.certify import native_network
from neuromanifold.models.convert import CONVERTED, from_transformers, hidden_state, logits
from neuromanifold.models.writeback import write_blocks

transformers = pytest.importorskip("transformers")

RELATIVE = 1e-10


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "convert_table.py"
    spec = importlib.util.spec_from_file_location("convert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _script()
# tests/models/test_checkpoints.py's cases (one per family), and Falcon's other layouts:
# multi-query with a shared norm (0), per-head with biases, sequential, untied (1), new decoder
# architecture with one norm (3); llama's case has attention and MLP biases, qwen2's its q/k/v
# biases and tied logits; gemma at size 0 has gains where g - 1 rounds.
FAMILY_CASES = {
    "gpt2": lambda: CASES.gpt2_case(0),
    "llama": lambda: CASES.rotary_case("llama", 0),
    "mistral": lambda: CASES.rotary_case("mistral", 2),
    "qwen2": lambda: CASES.rotary_case("qwen2", 1),
    "qwen3": lambda: CASES.rotary_case("qwen3", 0),
    "gpt_neox": lambda: CASES.neox_case(0),
    "gemma": lambda: CASES.gemma_case(1),
    "bert": lambda: CASES.bert_case(1),
    "falcon": lambda: CASES.falcon_case(2),
    "phi3": lambda: CASES.phi3_case(0),
}
EXTRA_CASES = {
    "falcon_multi_query": lambda: CASES.falcon_case(0),
    "falcon_per_head_bias": lambda: CASES.falcon_case(1),
    "falcon_new_one_norm": lambda: CASES.falcon_case(3),
    "gpt_neox_sequential": lambda: CASES.neox_case(1),
    "gemma_grouped": lambda: CASES.gemma_case(0),
    "phi3_tied": lambda: CASES.phi3_case(1),
}
ALL_CASES = {**FAMILY_CASES, **EXTRA_CASES}
GAIN = re.compile(r"(g|n)_\d+|f")


def _perturbed(blocks: dict, seed: int = 7) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + 0.1 * torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in blocks.items()}


def _expected(model, blocks: dict, dtype=torch.float64) -> dict:
    """What from_transformers reads after writing `blocks` into parameters of `dtype`: the blocks
    rounded to it; Gemma stores gain - 1 (rounded), read as that + 1."""
    gemma = model.config.model_type == "gemma"
    return {k: ((v - 1).to(dtype).double() + 1 if gemma and GAIN.fullmatch(k)
                else v.to(dtype).double()) for k, v in blocks.items()}


def _same(a: dict, b: dict) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def _relative(expected: torch.Tensor, got: torch.Tensor) -> float:
    return ((expected - got).abs().max() / expected.abs().max()).item()


def _parameters(model) -> dict:
    return {k: p.detach().clone() for k, p in model.named_parameters()}


def test_every_converted_family_has_a_case():
    assert sorted(FAMILY_CASES) == sorted(CONVERTED)


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_round_trip_and_forward(name):
    """Perturbed blocks written back read back bit for bit (every block compared), and the
    model's own float64 forward equals the native forward of the perturbed blocks."""
    case = ALL_CASES[name]()
    model, arch, blocks, ids = case[:4]
    positions = next((m.weight for n, m in model.named_modules()
                      if n.endswith(("wpe", "position_embeddings"))), None)
    beyond = None if positions is None else positions[arch.tokens:].detach().clone()
    perturbed = _perturbed(blocks)
    write_blocks(model, arch, perturbed)
    read_arch, read = from_transformers(model, arch.tokens)
    assert read_arch == arch and _same(read, _expected(model, perturbed))
    if beyond is not None:            # learned positions: only the first t rows are written
        assert torch.equal(positions[arch.tokens:], beyond)
    if arch.tied and hasattr(model, "lm_head"):
        assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        CASES.float64_model(model)
    with torch.no_grad():
        if arch.hidden_output:
            type_ids = case[4]
            got = model(input_ids=ids, token_type_ids=type_ids).last_hidden_state.transpose(1, 2)
            native = hidden_state(arch, perturbed, ids, type_ids)
        else:
            got, native = model(ids).logits.transpose(1, 2), logits(arch, perturbed, ids)
    assert _relative(native, got) < RELATIVE


@pytest.mark.parametrize("name", ["gpt2", "gemma", "falcon_per_head_bias", "phi3", "bert"])
def test_float32_model_keeps_its_dtype(name):
    """Written into a float32 model the blocks are rounded to float32; no parameter changes
    dtype or device; numpy blocks are accepted."""
    model, arch, blocks = ALL_CASES[name]()[:3]
    model = model.to(torch.float32)
    perturbed = _perturbed(blocks)
    write_blocks(model, arch, {k: v.numpy() for k, v in perturbed.items()})
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    assert _same(from_transformers(model, arch.tokens)[1], _expected(model, perturbed, torch.float32))


@pytest.mark.parametrize("name", ["gpt2", "llama", "falcon_multi_query", "gpt_neox", "bert"])
def test_a_misplaced_block_does_not_round_trip(name):
    """The comparison sees every block: native Q and K of one head swapped (same shape, so
    accepted) read back as swapped, unequal to the blocks meant."""
    model, arch, blocks = ALL_CASES[name]()[:3]
    perturbed = _perturbed(blocks)
    swapped = dict(perturbed, Q_1_1=perturbed["K_1_1"], K_1_1=perturbed["Q_1_1"])
    write_blocks(model, arch, swapped)
    read = from_transformers(model, arch.tokens)[1]
    assert not _same(read, _expected(model, perturbed)) and _same(read, _expected(model, swapped))


def test_a_writer_without_the_rotary_permutation_is_caught(monkeypatch):
    """A writer that forgot to un-permute the rotary rows fails the round trip."""
    model, arch, blocks = ALL_CASES["llama"]()[:3]
    monkeypatch.setattr(writeback, "rotary_permutation", lambda a, pairs: list(range(a)))
    perturbed = _perturbed(blocks)
    write_blocks(model, arch, perturbed)
    read = from_transformers(model, arch.tokens)[1]
    assert not _same(read, perturbed)
    assert {k for k in read if not torch.equal(read[k], perturbed[k])} == {
        k for k in read if k.startswith(("Q_", "K_", "bq_", "bk_"))}


@pytest.mark.parametrize("name", ["gpt2", "qwen3", "falcon", "bert"])
def test_missing_misshapen_or_unknown_blocks_are_refused_by_name(name):
    """Refused in one line naming the block, and nothing written."""
    model, arch, blocks = ALL_CASES[name]()[:3]
    before = _parameters(model)
    perturbed = _perturbed(blocks)
    last = sorted(perturbed)[-1]
    missing = {k: v for k, v in perturbed.items() if k != last}
    with pytest.raises(InputError, match=re.escape(f"blocks['{last}']") + ".*missing"):
        write_blocks(model, arch, missing)
    with pytest.raises(ValueError, match=re.escape("blocks['K_1_1']") + ".*shape"):
        write_blocks(model, arch, dict(perturbed, K_1_1=perturbed["K_1_1"].T))
    with pytest.raises(InputError, match=re.escape("blocks['extra']")):
        write_blocks(model, arch, dict(perturbed, extra=torch.zeros(1, 1)))
    with pytest.raises(InputError, match=re.escape("blocks['E']") + ".*finite"):
        write_blocks(model, arch, dict(perturbed, E=perturbed["E"] * float("nan")))
    after = _parameters(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_wrong_arch_is_refused():
    model, arch, blocks = ALL_CASES["gpt2"]()[:3]
    other = CASES.rotary_case("llama", 0)[1]
    with pytest.raises(InputError, match="`arch`"):
        write_blocks(model, other, blocks)


def test_base_models():
    """GPT2Model (tied: the converter reads it directly) and LlamaModel (untied: the 'hidden'
    network of certify.native_network, blocks without L) take the blocks the causal LM reads."""
    gpt2, arch, blocks, ids = CASES.gpt2_case(0)
    perturbed = _perturbed(blocks)
    write_blocks(gpt2.base_model, arch, perturbed)
    assert _same(from_transformers(gpt2, arch.tokens)[1], perturbed)
    llama, arch, blocks, ids = CASES.rotary_case("llama", 0)
    hidden = native_network(llama.config.to_dict(), arch.tokens, "hidden")
    perturbed = _perturbed({k: v for k, v in blocks.items() if k != "L"})
    write_blocks(llama.base_model, hidden, perturbed)
    read = from_transformers(llama, arch.tokens)[1]
    assert torch.equal(read.pop("L"), blocks["L"]) and _same(read, perturbed)
    CASES.float64_model(llama)
    with torch.no_grad():
        got = llama.base_model(ids).last_hidden_state.transpose(1, 2)
    assert _relative(hidden_state(hidden, perturbed, ids), got) < RELATIVE
    with pytest.raises(InputError, match="lm_head"):   # the logits network needs L's place
        write_blocks(llama.base_model, arch, dict(perturbed, L=blocks["L"]))


def test_bert_inside_a_head_model():
    """A model holding `.bert` (BertForMaskedLM) takes BertModel's blocks."""
    model, arch, blocks = CASES.bert_case(0)[:3]
    masked = transformers.BertForMaskedLM(model.config).to(torch.float64).eval()
    perturbed = _perturbed(blocks)
    write_blocks(masked, arch, perturbed)
    assert _same(from_transformers(masked, arch.tokens)[1], perturbed)
