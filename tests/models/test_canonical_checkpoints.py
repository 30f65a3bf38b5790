"""`canonical` and `same-function` on checkpoints as save_pretrained writes them (docs/canonical.md):
for every converted family the canonical checkpoint loads with from_pretrained, in the file's
dtype, and gives the original's outputs through transformers' own forward; a moved copy (a
random group element) has the same canonical checkpoint; canonical(canonical) = canonical;
same-function says same / different / undecided as it should; --align writes B in A's gauge;
bad input is one line, exit 2, and nothing is written half-way."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from neuromanifold.cli import main
from neuromanifold.errors import ComputationError, InputError
from neuromanifold.models import canonical as M
from neuromanifold.models.writeback import write_blocks
from neuromanifold.symmetries import canonical as C

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "convert_table.py"
    spec = importlib.util.spec_from_file_location("convert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _script()
FAMILY_CASES = {
    "gpt2": lambda: CASES.gpt2_case(0), "llama": lambda: CASES.rotary_case("llama", 0),
    "mistral": lambda: CASES.rotary_case("mistral", 2), "qwen2": lambda: CASES.rotary_case("qwen2", 1),
    "qwen3": lambda: CASES.rotary_case("qwen3", 0), "gpt_neox": lambda: CASES.neox_case(0),
    "gemma": lambda: CASES.gemma_case(1), "bert": lambda: CASES.bert_case(1),
    "falcon": lambda: CASES.falcon_case(2), "phi3": lambda: CASES.phi3_case(0),
}


def _cli(capsys, *args):
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _state(folder: Path) -> dict:
    return safetensors_torch.load_file(str(folder / "model.safetensors"))


def _state_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k] - b[k]).abs().max() / max(a[k].abs().max(), b[k].abs().max(), 1e-300))
               for k in a)


def _moved_copy(folder: Path, target: Path, seed: int) -> None:
    """The checkpoint moved by a random element of the group canonical quotients by."""
    M.moved_copy(folder, target, seed=seed)


def _forward(folder: Path, family: str, ids):
    model = M._pretrained(folder, family, "logits")
    return M._float64_forward(model, ids, "hidden" if family == "bert" else "logits")


@pytest.fixture(scope="module", params=sorted(FAMILY_CASES))
def saved(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    model = FAMILY_CASES[family]()[0]
    model.save_pretrained(root / "original")
    (root / "original" / "tokenizer_config.json").write_text("{}\n")
    result = M.canonical(root / "original", root / "canonical")
    return family, root, result


def test_the_canonical_checkpoint_gives_the_originals_outputs(saved):
    """Loaded by transformers (from_pretrained, float64 forward): the same outputs to 1e-10;
    the same config and dtype; canonical.json says what was done; side files copied."""
    family, root, result = saved
    ids = M._sequences(transformers.AutoConfig.from_pretrained(root / "original"), 3)
    a, b = _forward(root / "original", family, ids), _forward(root / "canonical", family, ids)
    assert float((a - b).abs().max() / a.abs().max()) < 1e-10
    assert result.check_difference < 1e-10 and result.dtype == "float64"
    before = json.loads((root / "original" / "config.json").read_text())
    after = json.loads((root / "canonical" / "config.json").read_text())
    skip = set(M._SKIP_FIELDS)
    assert {k: v for k, v in before.items() if k not in skip} == \
        {k: v for k, v in after.items() if k not in skip}
    assert all(t.dtype == torch.float64 for t in _state(root / "canonical").values())
    document = json.loads((root / "canonical" / "canonical.json").read_text())
    assert document["check"]["passed"] and document["family"] == family
    assert "MLP neuron permutation" in document["quotiented"]
    assert document["copied"] == ["tokenizer_config.json"]
    assert _state_diff(_state(root / "original"), _state(root / "canonical")) > 1e-3
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_moved_copies_have_the_same_canonical_checkpoint(saved):
    family, root, _ = saved
    _moved_copy(root / "original", root / "moved", seed=11)
    M.canonical(root / "moved", root / "moved-canonical")
    assert _state_diff(_state(root / "original"), _state(root / "moved")) > 1e-3
    assert _state_diff(_state(root / "canonical"), _state(root / "moved-canonical")) < 1e-10
    M.canonical(root / "canonical", root / "twice")
    assert _state_diff(_state(root / "canonical"), _state(root / "twice")) < 1e-10


def test_same_function_and_align(saved):
    """A moved copy: same (and --align brings it back onto A); a perturbed copy: different."""
    family, root, _ = saved
    if not (root / "moved").exists():
        _moved_copy(root / "original", root / "moved", seed=11)
    same = M.same_function(root / "original", root / "moved", align=root / "aligned")
    assert same.verdict == "same" and same.same is True and same.max_difference < 1e-8
    assert same.aligned["before"] > 1e-3 and same.aligned["after"] < 1e-8
    assert _state_diff(_state(root / "original"), _state(root / "aligned")) < 1e-8
    loaded = M.load(root / "original")
    with torch.no_grad():
        for p in loaded.model.parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1),
                                      dtype=p.dtype))
    loaded.model.save_pretrained(root / "perturbed")
    other = M.same_function(root / "original", root / "perturbed")
    assert other.verdict == "different" and other.same is False
    assert other.max_difference > 1e-5 and other.output_difference > 1e-8


def test_a_float32_checkpoint_stays_float32(tmp_path, capsys):
    model = FAMILY_CASES["gpt2"]()[0].to(torch.float32)
    model.save_pretrained(tmp_path / "f32")
    code, out, _ = _cli(capsys, "canonical", tmp_path / "f32", "-o", tmp_path / "c32", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["dtype"] == "float32" and document["check"]["tolerance"] == 1e-4
    assert document["check"]["relative_difference"] < 1e-5
    assert all(t.dtype == torch.float32 for t in _state(tmp_path / "c32").values())


def test_a_symmetry_not_quotiented_is_undecided_not_different(tmp_path, capsys):
    """The tiny GPT-2 has a vocabulary (11) below its width (12): its tied logits E (f * n + cf)
    ignore cf's component in the kernel of E, a symmetry of this toy that no registry family
    lists and the canonical form does not fix. A copy of the canonical checkpoint with cf moved
    along that kernel computes the same function, has another canonical form, and
    same-function says undecided (exit 1), never different."""
    model = FAMILY_CASES["gpt2"]()[0]
    model.save_pretrained(tmp_path / "a")
    M.canonical(tmp_path / "a", tmp_path / "c")
    loaded = M.load(tmp_path / "c")
    arch, blocks = M._native_network(loaded)
    b = {k: v.numpy().copy() for k, v in blocks.items()}
    assert b["E"].shape[0] < b["E"].shape[1]
    k = np.linalg.svd(b["E"])[2][-1].reshape(-1, 1)        # E k = 0
    assert np.abs(b["E"].dot(k)).max() < 1e-12
    b["cf"] = b["cf"] + k
    write_blocks(loaded.model, arch, b)
    loaded.model.save_pretrained(tmp_path / "shifted")
    code, out, _ = _cli(capsys, "same-function", tmp_path / "c", tmp_path / "shifted", "--json")
    document = json.loads(out)
    assert code == 1 and document["verdict"] == "undecided" and document["same"] is None
    assert document["output_difference"] < 1e-10 < document["max_difference"]


def test_a_live_model(tmp_path):
    model = FAMILY_CASES["llama"]()[0]
    result = M.canonical(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    a = M._float64_forward(model, ids, "logits")
    b = M._float64_forward(result.model.to(torch.float64), ids, "logits")
    assert float((a - b).abs().max() / a.abs().max()) < 1e-10
    assert result.out is None and not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    FAMILY_CASES["gpt2"]()[0].save_pretrained(root / "gpt2")
    CASES.gpt2_case(1)[0].save_pretrained(root / "gpt2-other")
    FAMILY_CASES["llama"]()[0].save_pretrained(root / "llama")
    config = transformers.OPTConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                    ffn_dim=8, vocab_size=11, word_embed_proj_dim=8)
    transformers.OPTForCausalLM(config).save_pretrained(root / "opt")
    (root / "notes.txt").write_text("not a checkpoint\n")
    (root / "exists").mkdir()
    return root


def _nothing_new(root: Path, before: set) -> bool:
    return {p.name for p in root.iterdir()} == before


@pytest.mark.parametrize("args, words", [
    (("same-function", "gpt2", "gpt2-other"), "A's config"),
    (("same-function", "gpt2", "llama"), "A's family"),
    (("canonical", "opt", "-o", "out"), "converted family"),
    (("canonical", "notes.txt", "-o", "out"), "notes.txt"),
    (("canonical", "gpt2", "-o", "exists"), "--force"),
    (("canonical", "gpt2", "-o", "missing/out"), "existing folder"),
    (("same-function", "gpt2", "gpt2", "--align", "exists"), "--force"),
])
def test_bad_input_is_one_line_and_writes_nothing(two, args, words, capsys, monkeypatch):
    monkeypatch.chdir(two)
    before = {p.name for p in two.iterdir()}
    code, out, err = _cli(capsys, *args)
    assert code == 2 and out == "" and words in err and len(err.strip().splitlines()) == 1
    assert _nothing_new(two, before) and not list((two / "exists").iterdir())


def test_force_replaces_and_a_failed_check_writes_nothing(two, capsys, monkeypatch):
    monkeypatch.chdir(two)
    (two / "exists" / "old.txt").write_text("old\n")
    code, _, _ = _cli(capsys, "canonical", "gpt2", "-o", "exists", "--force")
    assert code == 0 and (two / "exists" / "canonical.json").exists()
    assert not (two / "exists" / "old.txt").exists()
    real = C.canonical_form

    def broken(arch, blocks, **kw):
        form = real(arch, blocks, **kw)
        form.blocks["U_1"] = form.blocks["U_1"] * 1.01     # a move that is not a symmetry
        return form

    monkeypatch.setattr(M.forms, "canonical_form", broken)
    before = {p.name for p in two.iterdir()}
    code, out, err = _cli(capsys, "canonical", "gpt2", "-o", "broken")
    assert code == 1 and "nothing was written" in err and "--debug" in err
    assert _nothing_new(two, before)
    with pytest.raises(ComputationError):
        M.canonical(FAMILY_CASES["gpt2"]()[0])


def test_the_python_api_refuses_what_is_not_a_checkpoint():
    with pytest.raises(InputError, match="PreTrainedModel"):
        M.canonical(torch.nn.Linear(2, 2))
    with pytest.raises(InputError, match="source"):
        M.same_function(3, 4)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_an_overflowing_embedding_is_the_overflow_refusal(family, tmp_path, capsys):
    """An embedding scaled by 1e300 (issue 38, item 8, for the commands that came after it):
    the norm's second moment is inf, the normalised stream 0, and `canonical` and
    `same-function` stopped in an eigen-solver (LinAlgError, exit 1). Now both give the
    overflow refusal naming the checkpoint, one line, exit 2, and nothing is written."""
    torch.manual_seed(5)
    if family == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=4, n_head=2, n_layer=1, vocab_size=7, n_inner=3, n_positions=4))
        table = lambda m: m.transformer.wte.weight  # noqa: E731
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=4, num_attention_heads=2, num_key_value_heads=1, intermediate_size=3,
            num_hidden_layers=1, vocab_size=7, max_position_embeddings=8))
        table = lambda m: m.model.embed_tokens.weight  # noqa: E731
    model = model.eval().double()
    with torch.no_grad():
        table(model).mul_(1e300)
    model.save_pretrained(tmp_path / "big")
    big = tmp_path / "big"
    for args in (["canonical", big, "-o", tmp_path / "out"], ["same-function", big, big],
                 ["same-function", big, big, "--align", tmp_path / "aligned"]):
        code, out, err = _cli(capsys, *args)
        assert code == 2 and out == "", err
        assert err.count("neuromanifold: error:") == 1 and "overflow" in err and str(big) in err
        assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big"]


@pytest.mark.parametrize("family", ["gpt_neox", "bert", "falcon"])
def test_an_untrained_checkpoints_moved_copy_is_the_same_function(family, tmp_path):
    """Norm gains 1 and biases 0, as a checkpoint straight from its config: a moved copy is
    "same" and --align brings it back. Blocks that are exactly 0 in one form and round-off in
    the other (the query bias, a bias beside bias-free readers) are measured against the
    largest entry (BLOCK_SCALE_FLOOR), not their own zero scale, which read 1.0."""
    model = FAMILY_CASES[family]()[0]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name:
                p.zero_()
            elif "norm" in name or "ln" in name.split(".")[-2]:
                p.fill_(1.0)
    model.save_pretrained(tmp_path / "a")
    _moved_copy(tmp_path / "a", tmp_path / "b", seed=5)
    result = M.same_function(tmp_path / "a", tmp_path / "b", align=tmp_path / "aligned")
    assert result.verdict == "same", (result.max_difference, result.where)
    assert result.aligned["after"] < 1e-8
    assert M._block_difference({"x": np.zeros(3), "y": np.ones(3)},
                               {"x": np.full(3, 1e-17), "y": np.ones(3)})[0] < 1e-8
    assert M._block_difference({"x": np.zeros(3), "y": np.ones(3)},
                               {"x": np.full(3, 1e-5), "y": np.ones(3)})[0] > 1e-8
