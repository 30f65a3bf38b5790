"""Checkpoints as transformers writes them, read as the native network at their own weights
(docs/checkpoints.md): every converted family saved by save_pretrained and read back equals
transformers' own float64 forward; sharded, .bin, float32, base-model, live-model and cached
checkpoints read the same weights; every bad input is one line naming the file, exit code 2,
and nothing written."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from neuromanifold.cli import main
from neuromanifold.errors import InputError
from neuromanifold.io.checkpoints import find_checkpoint, safetensors_header
from neuromanifold.models.checkpoint import analyse_checkpoint, checkpoint_rank, load_checkpoint
from neuromanifold.models.convert import CONVERTED, from_transformers, hidden_state, logits

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

# Relative tolerance of the forward equality (float64 round-off over a few layers: ~1e-15).
RELATIVE = 1e-10


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "convert_table.py"
    spec = importlib.util.spec_from_file_location("convert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _script()
# One tiny seeded model per converted family, sizes distinct across families (tied and untied,
# grouped and not, partial and full rotary, parallel and sequential blocks).
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


def _relative(expected: torch.Tensor, got: torch.Tensor) -> float:
    return ((expected - got).abs().max() / expected.abs().max()).item()


def _float64_forward(model):
    """transformers' forward in float64 throughout (its rotary tables and RMSNorm statistics
    are float32 by design; scripts/convert_table.py's `float64_model`)."""
    if any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        CASES.float64_model(model)
    return model


def _files(root: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*")}


def _cli(capsys, *args):
    capsys.readouterr()   # what the test printed before (save_pretrained's progress bars)
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_converted_family_has_a_case():
    """The checkpoint tests cover exactly the converter's families."""
    assert sorted(FAMILY_CASES) == sorted(CONVERTED)


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_saved_checkpoint_forward_equals_transformers(family, tmp_path):
    """save_pretrained, then load_checkpoint: the native logits (BERT: last hidden state) and
    the native last hidden state (output='hidden') equal transformers' own float64 forward on
    the same token ids to relative 1e-10; the blocks are the converter's, bit for bit."""
    case = FAMILY_CASES[family]()
    model, arch, blocks, ids = case[:4]
    model.save_pretrained(tmp_path / "saved")
    _float64_forward(model)
    if family == "bert":
        type_ids = case[4]
        ckpt = load_checkpoint(tmp_path / "saved", arch.tokens, output="hidden")
        with torch.no_grad():
            expected = model(input_ids=ids, token_type_ids=type_ids).last_hidden_state
        native = hidden_state(ckpt.arch, ckpt.blocks, ids, type_ids)
        assert _relative(expected.transpose(1, 2), native) < RELATIVE
        with pytest.raises(InputError, match="--hidden-state"):
            load_checkpoint(tmp_path / "saved", arch.tokens)
    else:
        ckpt = load_checkpoint(tmp_path / "saved", arch.tokens)
        hidden = load_checkpoint(tmp_path / "saved", arch.tokens, output="hidden")
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
            base = model.base_model(ids).last_hidden_state
        assert _relative(out.logits.transpose(1, 2), logits(ckpt.arch, ckpt.blocks, ids)) < RELATIVE
        assert _relative(base.transpose(1, 2), hidden_state(hidden.arch, hidden.blocks, ids)) < RELATIVE
        assert hidden.arch.hidden_output and "L" not in hidden.blocks
        assert hidden.n_params == sum(p.numel() for p in model.base_model.parameters()) - (
            (model.config.n_positions - arch.tokens) * arch.widths[0] if family == "gpt2" else 0)
    assert ckpt.arch == arch and ckpt.n_params == arch.n_params and ckpt.family == family
    assert ckpt.dtype == "float64" and ckpt.layout == "safetensors" and ckpt.step is None
    assert sorted(ckpt.blocks) == sorted(blocks)
    assert all(torch.equal(ckpt.blocks[k], blocks[k]) for k in blocks)


def _same_blocks(a, b) -> bool:
    """Two checkpoints (or block dicts) hold the same blocks, bit for bit."""
    a, b = getattr(a, "blocks", a), getattr(b, "blocks", b)
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_sharded_safetensors_read_the_same_weights(tmp_path):
    """A model saved in shards of 1 KB (an index and several files) reads the weights of the
    single file, and from a checkpoint-<step> folder the step."""
    model, arch, _, _ = CASES.rotary_case("llama", 0)
    model.save_pretrained(tmp_path / "one")
    model.save_pretrained(tmp_path / "run" / "checkpoint-120", max_shard_size="1KB")
    shards = list((tmp_path / "run" / "checkpoint-120").glob("model-*.safetensors"))
    assert len(shards) > 2
    single = load_checkpoint(tmp_path / "one", arch.tokens)
    sharded = load_checkpoint(tmp_path / "run" / "checkpoint-120", arch.tokens)
    assert sharded.layout == "sharded safetensors" and sharded.step == 120
    assert len(sharded.files) == len(shards) and _same_blocks(single, sharded)


def _save_bin(model, folder: Path, shards: int = 1) -> None:
    """pytorch_model.bin as transformers 4's save_pretrained(safe_serialization=False) wrote
    it (transformers 5 writes safetensors only): the state dict, or shards and their index."""
    folder.mkdir(parents=True)
    model.config.save_pretrained(folder)
    state = model.state_dict()
    if shards == 1:
        torch.save(state, folder / "pytorch_model.bin")
        return
    names = sorted(state)
    weight_map = {}
    for s in range(shards):
        file = f"pytorch_model-{s + 1:05d}-of-{shards:05d}.bin"
        part = {n: state[n] for n in names[s::shards]}
        torch.save(part, folder / file)
        weight_map.update({n: file for n in part})
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {},
                                                                     "weight_map": weight_map}))


@pytest.mark.parametrize("case, shards", [(lambda: CASES.gpt2_case(1), 1),
                                          (lambda: CASES.neox_case(1), 3)])
def test_pytorch_bin_reads_the_same_weights(case, shards, tmp_path):
    """pytorch_model.bin (torch.load with weights_only=True), single and sharded with its
    index, reads the weights the safetensors file holds."""
    model, arch, _, _ = case()
    model.save_pretrained(tmp_path / "safe")
    _save_bin(model, tmp_path / "bin", shards)
    from_bin = load_checkpoint(tmp_path / "bin", arch.tokens)
    assert from_bin.layout == ("pytorch" if shards == 1 else "sharded pytorch")
    assert _same_blocks(from_bin, load_checkpoint(tmp_path / "safe", arch.tokens))


@pytest.mark.parametrize("dtype, coarser", [(torch.float32, torch.float16),
                                           (torch.bfloat16, None)])
def test_narrow_checkpoints_are_read_exactly(dtype, coarser, tmp_path):
    """A float32 or bfloat16 checkpoint: its dtype is said, and every block is the stored value
    itself in float64 (no rounding: float32 -> float64 is exact)."""
    model, arch, _, _ = CASES.phi3_case(1)
    model = model.to(dtype)
    model.save_pretrained(tmp_path / "narrow")
    ckpt = load_checkpoint(tmp_path / "narrow", arch.tokens)
    _, blocks = from_transformers(model, arch.tokens)       # the converter on the live model
    assert ckpt.dtype == str(dtype).removeprefix("torch.") and _same_blocks(ckpt, blocks)
    assert all(b.dtype == torch.float64 and torch.equal(b, b.to(dtype).double())
               for b in ckpt.blocks.values())
    if coarser is not None:   # float32 values off the coarser grid show they were kept
        assert not all(torch.equal(b, b.to(coarser).double()) for b in ckpt.blocks.values())


def test_base_model_checkpoints(tmp_path):
    """A base model's checkpoint (GPT2Model: tied, so its logits exist; LlamaModel untied: only
    its last hidden state) reads the same weights as the causal-LM checkpoint."""
    gpt2, arch, _, _ = CASES.gpt2_case(0)
    gpt2.base_model.save_pretrained(tmp_path / "gpt2_base")
    gpt2.save_pretrained(tmp_path / "gpt2_lm")
    assert _same_blocks(load_checkpoint(tmp_path / "gpt2_base", arch.tokens),
                        load_checkpoint(tmp_path / "gpt2_lm", arch.tokens))
    llama, arch, _, _ = CASES.rotary_case("llama", 0)
    llama.base_model.save_pretrained(tmp_path / "llama_base")
    llama.save_pretrained(tmp_path / "llama_lm")
    with pytest.raises(InputError, match="--hidden-state") as info:
        load_checkpoint(tmp_path / "llama_base", arch.tokens)
    assert "lm_head.weight" in str(info.value)
    assert _same_blocks(load_checkpoint(tmp_path / "llama_base", arch.tokens, output="hidden"),
                        load_checkpoint(tmp_path / "llama_lm", arch.tokens, output="hidden"))


def test_live_model_reads_as_its_saved_checkpoint(tmp_path):
    """A live transformers model gives the blocks of its saved checkpoint; a module that is no
    transformers model is refused in one line pointing to functional_dim."""
    model, arch, _, _ = CASES.falcon_case(0)
    model.save_pretrained(tmp_path / "saved")
    live = load_checkpoint(model, arch.tokens)
    assert live.layout == "live model" and live.source == "live FalconForCausalLM"
    assert _same_blocks(live, load_checkpoint(tmp_path / "saved", arch.tokens))
    with pytest.raises(InputError, match="functional_dim") as info:
        load_checkpoint(torch.nn.Linear(3, 2), 3)
    assert "\n" not in str(info.value)


def _cache(root: Path, name: str, model, revision: str = "0123abcd") -> Path:
    repo = root / ("models--" + name.replace("/", "--"))
    model.save_pretrained(repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def test_cached_hub_name_is_read_from_the_local_cache(tmp_path, monkeypatch, capsys):
    """'org/tiny' is read from HF_HUB_CACHE (refs/main's snapshot), then from HF_HOME/hub;
    a name not there is one line saying to download it first."""
    model, arch, blocks, _ = CASES.gpt2_case(2)
    snapshot = _cache(tmp_path / "hub", "org/tiny-gpt2", model)
    _cache(tmp_path / "hub", "org/tiny-gpt2", CASES.gpt2_case(0)[0], "stale")  # not refs/main
    (tmp_path / "hub" / "models--org--tiny-gpt2" / "refs" / "main").write_text("0123abcd\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ckpt = load_checkpoint("org/tiny-gpt2", arch.tokens)
    assert ckpt.files == (str(snapshot / "model.safetensors"),) and ckpt.step is None
    assert all(torch.equal(ckpt.blocks[k], blocks[k]) for k in blocks)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert find_checkpoint("org/tiny-gpt2").folder == snapshot
    before = _files(tmp_path)
    code, out, err = _cli(capsys, "rank", "org/other", "--tokens", 2)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "huggingface-cli download org/other" in err and str(tmp_path / "hub") in err
    assert _files(tmp_path) == before


@pytest.fixture
def gpt2_dir(tmp_path):
    """A tiny random GPT-2 (d = 4, 2 heads, 1 layer, vocabulary 7, 4 positions) in float32, as
    save_pretrained writes it, in a checkpoint-<step> folder."""
    config = transformers.GPT2Config(n_embd=4, n_head=2, n_layer=1, vocab_size=7, n_inner=3,
                                     n_positions=4)
    torch.manual_seed(5)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    folder = tmp_path / "run" / "checkpoint-40"
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("scale", [1e300, 1e160])
def test_an_overflowing_embedding_is_refused_not_ranked(scale, tmp_path, capsys):
    """An embedding scaled by 1e300 (or 1e160: its square overflows): the final layernorm's
    variance is inf, the normalised stream 0 and the Jacobian finite zeros; without the check of
    every intermediate value this printed `ambiguous` with rank 0 (exit 1). Now: the overflow
    refusal, one line naming the checkpoint, exit 2, before any progress line."""
    config = transformers.GPT2Config(n_embd=4, n_head=2, n_layer=1, vocab_size=7, n_inner=3,
                                     n_positions=4)
    torch.manual_seed(5)
    model = transformers.GPT2LMHeadModel(config).eval().double()
    with torch.no_grad():
        model.transformer.wte.weight.mul_(scale)
    model.save_pretrained(tmp_path / "big")
    code, out, err = _cli(capsys, "rank", tmp_path / "big", "--tokens", 2)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "overflow" in err and str(tmp_path / "big") in err


def test_rank_json_on_a_checkpoint(gpt2_dir, capsys):
    """`rank PATH --json` on a tiny GPT-2 checkpoint: the read_as record and the bounds, the
    upper bound at the point equal to the rank (a generic point: it closes), which equals
    the generic dimension of the architecture and the Python call's."""
    code, out, _ = _cli(capsys, "rank", gpt2_dir, "--tokens", 2, "--json")
    assert code == 0
    d = json.loads(out)
    assert {"n_params", "lower_bound", "upper_bound", "status"} <= set(d)
    assert d["read_as"]["step"] == 40 and d["read_as"]["dtype"] == "float32"
    assert d["read_as"]["family"] == "gpt2" and d["read_as"]["n_params"] == d["n_params"] == 171
    assert d["status"] in ("settled", "certified") and d["rank"] == d["upper_bound"]
    assert d["generic_dimension"] == d["rank"]
    again = checkpoint_rank(gpt2_dir, 2, generic=False)
    assert (again.rank, again.upper_bound, again.n_params) == (d["rank"], d["upper_bound"], 171)


# every one of the V^t = 49 sequences is given, so functional_dim's "N fixed" warning is moot
@pytest.mark.filterwarnings("ignore::neuromanifold.dimension.result.AmbiguousRankWarning")
def test_rank_of_a_checkpoint_equals_functional_dim_of_the_model(gpt2_dir):
    """An independent path: transformers' own module differentiated by `functional_dim` on all
    49 token sequences has the rank the native network has at the loaded weights (the position
    rows past t add zero columns)."""
    from neuromanifold.models.functional import functional_dim

    model = transformers.GPT2LMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager")

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).logits

    ids = torch.cartesian_prod(torch.arange(7), torch.arange(7))
    theirs = functional_dim(Logits(), ids, piecewise=False)
    ours = checkpoint_rank(gpt2_dir, 2, method="numerical", generic=False)
    assert theirs.dimension == ours.rank == ours.float_rank


def _broken(kind: str, folder: Path) -> str:
    """Break the checkpoint in `folder` one way; the text the refusal must contain."""
    weights = folder / "model.safetensors"
    config = json.loads((folder / "config.json").read_text())
    if kind == "missing folder":
        return str(folder / "nowhere")
    if kind == "no weights":
        weights.unlink()
        return "without weights"
    if kind == "no config":
        (folder / "config.json").unlink()
        return "config.json"
    if kind == "run folder":
        return "pass one of them (e.g. " + str(folder)
    if kind == "truncated":
        weights.write_bytes(weights.read_bytes()[:-7])
        return "truncated"
    if kind == "truncated header":
        weights.write_bytes(weights.read_bytes()[:5])
        return "truncated"
    if kind == "damaged offsets":   # the same size, one tensor's range shifted: a mutant header
        raw = weights.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        name = next(k for k in header if k != "__metadata__")
        begin, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [begin, end - 4]
        text = json.dumps(header, separators=(",", ":")).encode()
        assert len(text) <= n
        text = text.ljust(n)      # the same length: the same file size
        weights.write_bytes(raw[:8] + text + raw[8 + n:])
        return name
    if kind in ("nan", "inf"):
        tensors = safetensors_torch.load_file(weights)
        tensors["transformer.h.0.mlp.c_fc.weight"][1, 2] = math.nan if kind == "nan" else math.inf
        safetensors_torch.save_file(tensors, weights)
        return "transformer.h.0.mlp.c_fc.weight"
    if kind == "integer":
        tensors = safetensors_torch.load_file(weights)
        tensors["transformer.ln_f.bias"] = tensors["transformer.ln_f.bias"].to(torch.int32)
        safetensors_torch.save_file(tensors, weights)
        return "transformer.ln_f.bias"
    if kind == "shape":
        config["vocab_size"] = 8
        (folder / "config.json").write_text(json.dumps(config))
        return "transformer.wte.weight: (8, 4)"
    if kind == "extra layer":
        config["n_layer"] = 2
        (folder / "config.json").write_text(json.dumps(config))
        return "transformer.h.1."
    if kind in ("unknown type", "unconverted type"):
        config["model_type"] = "t5" if kind == "unknown type" else "mamba"
        (folder / "config.json").write_text(json.dumps(config))
        return "gpt2, llama, mistral"
    if kind == "missing shard":
        weights.unlink()
        index = {"metadata": {}, "weight_map": {"transformer.wte.weight": "model-00001-of-00002.safetensors",
                                                "transformer.wpe.weight": "model-00002-of-00002.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        tensors = safetensors_torch.load_file(folder.parent / "keep.safetensors")
        safetensors_torch.save_file(tensors, folder / "model-00001-of-00002.safetensors")
        return "model-00002-of-00002.safetensors"
    if kind == "truncated bin":
        tensors = safetensors_torch.load_file(weights)
        weights.unlink()
        torch.save(tensors, folder / "pytorch_model.bin")
        raw = (folder / "pytorch_model.bin").read_bytes()
        (folder / "pytorch_model.bin").write_bytes(raw[: len(raw) // 2])
        return "pytorch_model.bin"
    raise AssertionError(kind)


BROKEN = ("missing folder", "no weights", "no config", "run folder", "truncated", "truncated header",
          "damaged offsets", "nan", "inf", "integer", "shape", "extra layer", "unknown type",
          "unconverted type", "missing shard", "truncated bin")


@pytest.mark.parametrize("kind", BROKEN)
def test_bad_checkpoints_are_one_line_naming_the_file(kind, gpt2_dir, capsys):
    """Each bad checkpoint: exit code 2, one line on stderr naming the file (and the tensor or
    the converted families where they are the point), nothing on stdout, nothing written."""
    (gpt2_dir.parent / "keep.safetensors").write_bytes((gpt2_dir / "model.safetensors").read_bytes())
    expected = _broken(kind, gpt2_dir)
    source = {"missing folder": expected, "run folder": gpt2_dir.parent}.get(kind, gpt2_dir)
    before = _files(gpt2_dir.parent)
    code, out, err = _cli(capsys, "rank", source, "--tokens", 2, "--json")
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("neuromanifold: error: ")
    assert expected in err
    assert str(gpt2_dir) in err
    assert _files(gpt2_dir.parent) == before


def test_header_check_passes_what_save_pretrained_writes(gpt2_dir):
    """The header check accepts the real file (the mutants above are refused)."""
    header = safetensors_header(gpt2_dir / "model.safetensors")
    assert header["transformer.wte.weight"]["shape"] == [7, 4]


@pytest.mark.parametrize("option", [("--attention", "softmax"), ("--causal",), ("--vocab", "7"),
                                    ("--norm", "layernorm"), ("--positions", "none")])
def test_architecture_options_are_refused_for_a_checkpoint(option, gpt2_dir, capsys):
    """A checkpoint's config says its architecture: --attention, --causal, ... are one line
    (even when typed with their default values)."""
    code, out, err = _cli(capsys, "rank", gpt2_dir, "--tokens", 2, *option)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"Drop {option[0]}" in err and "config.json says the architecture" in err


def test_checkpoint_options_are_refused_for_a_weight_file(tmp_path, capsys):
    """--hidden-state and --inputs read checkpoints; a weight file (PATH or --weights) refuses
    them in one line, and reads as before otherwise."""
    from neuromanifold import Architecture, random_weights, write_weights

    path = write_weights(tmp_path / "w.npz", random_weights(Architecture((3, 3), 2, 3), 1))
    code, _, err = _cli(capsys, "rank", path, "--hidden-state")
    assert code == 2 and "Drop --hidden-state" in err and err.count("\n") == 1
    code, _, err = _cli(capsys, "rank", "--weights", path, "--inputs", tmp_path / "ids.npy")
    assert code == 2 and "Drop --inputs" in err
    code, out, _ = _cli(capsys, "rank", path, "--json", "--no-generic")
    assert code == 0 and json.loads(out)["read_as"]["format"] == "paper"
    code, _, err = _cli(capsys, "rank", path, "--weights", path)
    assert code == 2 and "once" in err
    code, _, err = _cli(capsys, "rank", "--tokens", "2")
    assert code == 2 and "neither PATH nor --weights" in err and err.count("\n") == 1


@pytest.mark.parametrize("ids, suffix, words", [
    (np.zeros((3, 5), dtype=np.int64), ".npy", "shape (3, 5)"),
    (np.zeros((3, 2), dtype=np.float64), ".npy", "integer token ids"),
    (np.full((3, 2), 7, dtype=np.int64), ".npy", "[0, 7)"),
    (np.full((2, 2), -1, dtype=np.int32), ".pt", "[0, 7)"),
    (None, ".npy", "no such file"),
    (np.zeros((3, 2), dtype=np.int64), ".csv", ".npy or .pt"),
])
def test_bad_inputs_are_one_line(ids, suffix, words, gpt2_dir, capsys):
    """--inputs: shape (N, t), integers, ids inside the vocabulary, a readable .npy/.pt."""
    path = gpt2_dir.parent / f"ids{suffix}"
    if ids is not None:
        if suffix == ".pt":
            torch.save(torch.from_numpy(ids), path)
        else:
            np.save(path, ids) if suffix == ".npy" else path.write_text("0,1\n")
    code, out, err = _cli(capsys, "rank", gpt2_dir, "--tokens", 2, "--inputs", path)
    assert (code, out) == (2, "") and err.count("\n") == 1 and words in err, err


@pytest.mark.filterwarnings("ignore::neuromanifold.dimension.result.AmbiguousRankWarning")
def test_inputs_give_the_batch_rank_of_the_models_own_jacobian(gpt2_dir, capsys):
    """--inputs: the batch functional dimension on the user's ids is the rank of transformers'
    own module differentiated by `functional_dim` on the same ids (an independent path), and the
    rank on generic inputs stays beside it."""
    from neuromanifold.models.functional import functional_dim

    ids = np.array([[0, 1], [6, 2], [3, 3], [5, 0]])
    np.save(gpt2_dir.parent / "ids.npy", ids)
    code, out, err = _cli(capsys, "rank", gpt2_dir, "--tokens", 2, "--inputs",
                          gpt2_dir.parent / "ids.npy", "--method", "numerical", "--no-generic",
                          "--json")
    d = json.loads(out)
    model = transformers.GPT2LMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager")

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(input_ids=x).logits

    theirs = functional_dim(Logits(), torch.from_numpy(ids), piecewise=False)
    assert d["batch"]["n_samples"] == 4 and d["batch"]["float_rank"] == theirs.dimension
    assert theirs.dimension < d["float_rank"]   # 4 sequences see fewer directions than all 49


def test_inputs_reach_the_engine_as_long_ids(gpt2_dir, monkeypatch):
    """Valid token ids go to the analysis as a LongTensor of shape (N, t)."""
    ckpt = load_checkpoint(gpt2_dir, 2)
    ids = np.array([[0, 1], [6, 2], [3, 3]], dtype=np.int32)
    seen = {}

    def engine(arch, blocks, *, inputs=None, **kw):
        seen.update(arch=arch, inputs=inputs, kw=kw)
        return "result"

    monkeypatch.setattr("neuromanifold.dimension.local.local_geometry", engine)
    assert analyse_checkpoint(ckpt, inputs=ids, seed=3) == "result"
    assert seen["inputs"].dtype == torch.long and seen["inputs"].tolist() == ids.tolist()
    assert seen["arch"] == ckpt.arch and seen["kw"] == {"seed": 3}


def test_tokens_beyond_the_positions_or_window_are_refused(gpt2_dir, tmp_path):
    """t above GPT-2's n_positions, or above a sliding window (Mistral), is one line."""
    with pytest.raises(InputError, match="n_positions = 4") as info:
        load_checkpoint(gpt2_dir, 5)
    assert str(gpt2_dir / "config.json") in str(info.value)
    model, arch, _, _ = CASES.rotary_case("mistral", 1)
    model.config.sliding_window = 3
    model.save_pretrained(tmp_path / "mistral")
    assert load_checkpoint(tmp_path / "mistral", 3).arch.tokens == 3
    with pytest.raises(InputError, match="sliding window"):
        load_checkpoint(tmp_path / "mistral", 4)


def test_reading_is_refused_before_it_would_exceed_memory(gpt2_dir, monkeypatch, capsys):
    """The float64 reading is estimated from the headers before any tensor is read: over the
    budget it is one line (exit 2) with the estimate."""
    from neuromanifold.models.checkpoint import reading_estimate
    from neuromanifold.io.checkpoints import find_checkpoint as find

    estimate = reading_estimate(find(gpt2_dir))
    entries = 7 * 4 + 4 * 4 + 2 * 4 + (4 * 12 + 12) + (4 * 4 + 4) + 2 * 4 + (4 * 3 + 3) + (3 * 4 + 4) + 2 * 4
    assert estimate.parts["float64 model"] == 8 * entries
    monkeypatch.setattr("neuromanifold.dimension.memory.available_memory", lambda: 2 ** 20)
    code, out, err = _cli(capsys, "rank", gpt2_dir, "--tokens", 2)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "reading the checkpoint" in err


def test_an_untied_head_in_a_tied_checkpoint_is_noted(tmp_path):
    """A tied config whose file carries a different lm_head: the embedding is read for both
    (as transformers does), and the notes say so."""
    model, arch, _, ids = CASES.gpt2_case(1)
    state = model.state_dict()
    state["lm_head.weight"] = state["lm_head.weight"] + 1.0
    (tmp_path / "c").mkdir()
    model.config.save_pretrained(tmp_path / "c")
    torch.save(state, tmp_path / "c" / "pytorch_model.bin")
    ckpt = load_checkpoint(tmp_path / "c", arch.tokens)
    assert any("lm_head.weight in the file differs" in n for n in ckpt.notes)
    with torch.no_grad():
        expected = model(ids).logits.transpose(1, 2)
    assert _relative(expected, logits(ckpt.arch, ckpt.blocks, ids)) < RELATIVE


def test_generic_checkpoint_rank_equals_count_validate(tmp_path):
    """A random checkpoint of count --validate's shrunk Llama (216 parameters, tied): its rank
    at the point, certified, is the count --validate certifies (182), and the bracket closes."""
    from neuromanifold.models import certify, hf

    shipped = hf.shipped_config("llama")
    small, _ = certify.shrunk_config(shipped)
    fields = {k: v for k, v in small.items() if k not in ("model_type", "architectures",
                                                           "torch_dtype", "dtype", "_source")}
    config = transformers.AutoConfig.for_model("llama", **fields)
    model = CASES.random_model(transformers.LlamaForCausalLM, config, seed=3)
    model.save_pretrained(tmp_path / "small")
    validated = certify.validate(shipped)
    result = checkpoint_rank(tmp_path / "small", certify.SHRINK["tokens"], method="certified",
                             generic=False)
    assert (validated["n_params"], validated["certified"], validated["status"]) == (216, 182, "certified")
    assert (result.n_params, result.rank, result.status) == (216, 182, "certified")
    assert result.lower_bound == result.upper_bound == 182


def test_heads_and_old_buffers_no_output_reads_are_skipped_and_named(tmp_path):
    """A BertForMaskedLM checkpoint ('bert.' names, a 'cls.' head) reads as BertModel's last
    hidden state, the head named in the notes; an old GPT-2 file's attention-mask buffers
    (h.0.attn.bias, h.0.attn.masked_bias) are skipped the same way."""
    model, arch, blocks, ids, type_ids = CASES.bert_case(0)
    masked = transformers.BertForMaskedLM(model.config).to(torch.float64)
    masked.bert.load_state_dict(model.state_dict(), strict=False)
    masked.save_pretrained(tmp_path / "mlm")
    ckpt = load_checkpoint(tmp_path / "mlm", arch.tokens, output="hidden")
    assert _same_blocks(ckpt, blocks) and any("cls.predictions" in n for n in ckpt.notes)
    gpt2, arch, blocks, _ = CASES.gpt2_case(2)
    state = {k: v for k, v in gpt2.state_dict().items() if k != "lm_head.weight"}
    t = gpt2.config.n_positions
    state["transformer.h.0.attn.bias"] = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
    state["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    (tmp_path / "old").mkdir()
    gpt2.config.save_pretrained(tmp_path / "old")
    safetensors_torch.save_file(state, tmp_path / "old" / "model.safetensors")
    ckpt = load_checkpoint(tmp_path / "old", arch.tokens)
    assert _same_blocks(ckpt, blocks) and "transformer.h.0.attn.masked_bias" in ckpt.notes[0]


def test_reading_files_imports_no_transformers(gpt2_dir):
    """io.checkpoints finds and reads a checkpoint (headers, tensors, NaN checks) without
    importing transformers."""
    import subprocess
    import sys

    code = ("import sys; from neuromanifold.io.checkpoints import find_checkpoint, read_state_dict;"
            f" s = read_state_dict(find_checkpoint({str(gpt2_dir)!r})); "
            "print(len(s.tensors), s.dtypes, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["16", "('float32',)", "False"], out.stderr[-2000:]


def test_rank_hidden_state_of_a_checkpoint(gpt2_dir, capsys):
    """`rank PATH --hidden-state`: the base model's last hidden state (no logits map; the
    embedding read at the input only), its parameters those of the logits network here (tied)."""
    code, out, _ = _cli(capsys, "rank", gpt2_dir, "--tokens", 2, "--hidden-state", "--json",
                        "--method", "numerical", "--no-generic")
    d = json.loads(out)
    assert code == 0 and d["read_as"]["output"] == "hidden" and d["n_params"] == 171
    assert d["architecture"]["hidden_output"] is True and d["rank"] <= d["upper_bound"]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PROBE = settings(max_examples=60, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROBE
@given(cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(min_value=0, max_value=10_000),
       byte=st.integers(min_value=0, max_value=255))
def test_any_damaged_safetensors_file_is_read_or_refused_in_one_line(cut, flip, byte, tmp_path_factory):
    """A real file cut short and one byte changed: its tensors, or one line naming the file;
    never another exception (the header is checked before safetensors reads the data)."""
    from neuromanifold.io.checkpoints import read_state_dict

    folder = tmp_path_factory.mktemp("damaged")
    torch.manual_seed(0)
    safetensors_torch.save_file({"a.weight": torch.randn(3, 5), "b.bias": torch.randn(7)},
                                folder / "model.safetensors")
    (folder / "config.json").write_text("{}")
    raw = bytearray((folder / "model.safetensors").read_bytes())
    raw = raw[:len(raw) - cut % (len(raw) + 1)]
    if raw:
        raw[flip % len(raw)] = byte
    (folder / "model.safetensors").write_bytes(bytes(raw))
    try:
        state = read_state_dict(find_checkpoint(folder))
    except InputError as exc:
        assert "\n" not in str(exc) and str(folder / "model.safetensors") in str(exc)
    else:
        assert sorted(t.numel() for t in state.tensors.values()) == [7, 15]   # a name may change
