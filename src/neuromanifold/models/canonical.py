"""Canonical checkpoints and the same-function test (docs/canonical.md).

`canonical(source, out)` reads a checkpoint (a `save_pretrained` folder, a model in the local
Hugging Face cache, or a live transformers model) of a converted family, moves its weights to
the canonical representative of their orbit (`symmetries.canonical.canonical_form`, on the
native blocks of its whole context), writes them back into transformers' own model
(`writeback.write_blocks`) in the checkpoint's dtype, and checks itself: transformers' forward
of the result, in float64, against the original's on seeded random token sequences; a relative
difference above the dtype's tolerance is an error (`ComputationError`, exit code 1), never a
warning. With `out` the checkpoint is written to a hidden folder beside `out`, checked there
(loaded again by `from_pretrained`) and only then moved into place, with a `canonical.json`
saying what was quotiented, what was not, and the check.

`same_function(a, b)` canonicalises both and compares the canonical blocks; where they differ,
the outputs on random sequences decide "different" (a witness) or "undecided" (equal outputs,
different canonical forms: a symmetry the canonical form does not quotient may relate them).
With `align`, B is moved into A's gauge (`symmetries.canonical.align_moves` then A's moves
undone) and written as a checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import math
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..core.blocks import ARRAYS, FINITE
from ..core.checks import bad_type, bad_value, check_choice, check_int
from ..core.finite import largest_entry, require_finite
from ..errors import ComputationError, InputError
from ..symmetries import canonical as forms
from . import certify, hf
from .checkpoint import model_at, checkpoint_network, is_pretrained
from .convert import from_transformers, hidden_state, logits
from .float64 import attention_for, float64_model, register
from .writeback import write_blocks

# Relative logit difference a canonical checkpoint may show against its original, by the dtype
# it is stored in (its weights are rounded to that dtype after the move).
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 5e-2, "bfloat16": 5e-2}
# Canonical blocks of two checkpoints of one function agree to this relative difference.
SAME_TOLERANCE = {"float64": 1e-8, "float32": 1e-4, "float16": 5e-2, "bfloat16": 5e-2}
CHECK_SEQUENCES = 4
_SKIP_FIELDS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures",
                "_attn_implementation_autoset", "_commit_hash", "attn_implementation",
                "_attn_implementation", "output_hidden_states", "use_cache")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json", "config.json")


@dataclass
class Loaded:
    """A checkpoint as transformers' model holding its weights in float64, with where it came
    from, its dtype as stored, and the folder of its other files (tokenizer, ...) if any."""

    model: object
    family: str
    source: str
    dtype: str
    folder: Path | None
    output: str
    notes: list = field(default_factory=list)


def _context(config) -> int:
    """Tokens of the native network canonicalised: the whole position table where positions are
    learned (every row is a parameter), else 8 (the weights do not depend on t; at least 2, so
    that the rotary families are those of sequences)."""
    for name in ("n_positions", "max_position_embeddings"):
        if getattr(config, name, None):
            if config.model_type in ("gpt2", "bert"):
                return int(getattr(config, name))
            window = certify.sliding_window(config.to_dict())
            return max(2, min(8, int(getattr(config, name)), window or 8))
    return 8


def load(source, output: str = "logits") -> Loaded:
    """`source` as transformers' model with its weights in float64 (a live model is copied)."""
    output = check_choice("output", output, certify.OUTPUTS)
    hf.require_transformers("canonical forms of checkpoints")
    if isinstance(source, torch.nn.Module):
        if not is_pretrained(source):
            raise bad_type("source", "a transformers PreTrainedModel or a checkpoint folder",
                           type(source).__name__, "Pass the model or the folder "
                           "save_pretrained wrote.")
        mt = getattr(source.config, "model_type", None)
        checkpoint_network(source.config.to_dict(), 2, output if mt != "bert" else "hidden",
                f"{type(source).__name__}.config")
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in source.parameters()})
        model = copy.deepcopy(source).to("cpu", torch.float64).eval()
        return Loaded(model, mt, f"live {type(source).__name__}", _widest(dtypes), None,
                      "hidden" if mt == "bert" else output)
    if not isinstance(source, (str, Path)):
        raise bad_type("source", "a checkpoint folder, a cached hub name or a transformers model",
                       type(source).__name__, "Pass the folder save_pretrained wrote.")
    from ..io.checkpoints import find_checkpoint, read_config_file, read_state_dict  # noqa: PLC0415
    from .checkpoint import reading_estimate  # noqa: PLC0415
    from ..dimension.memory import check_memory  # noqa: PLC0415

    files = find_checkpoint(source)
    config = read_config_file(files)
    mt = config.get("model_type")
    output = "hidden" if mt == "bert" else output
    checkpoint_network(config, 2, output, files.config_path)
    check_memory(reading_estimate(files))
    state = read_state_dict(files)
    checked, notes = model_at(config, state, files, output, float64=False)   # its checks only
    dtype = _widest(list(state.dtypes))
    del checked, state
    release()
    model = _to_float64(_pretrained(files.folder, mt, output, dtype))
    return Loaded(model, mt, str(source), dtype, files.folder, output, notes)


def _to_float64(model):
    """`model.to(torch.float64)` (an exact cast of every weight), one weight at a time with the
    freed memory handed back, after each is copied out of the file that transformers maps: the
    mapped pages stay resident until the last weight is off them, and beside the float64 copies
    they made transformers' own float64 load take 1.4 x the float64 size (GPT-2 small)."""
    weights = list(model.parameters())
    if all(p.dtype == torch.float64 for p in weights):
        return model.to(torch.float64)   # a float64 file: read as it is mapped, as before
    for p in weights:
        p.data = p.data.clone()
    release()
    for p in weights:
        p.data = p.data.to(torch.float64)
        _trim()
    return model.to(torch.float64)   # the buffers


def _pretrained(folder: Path, family: str, output: str, dtype: str = "float64"):
    """transformers' own loading of the checked folder, in float64 (or `dtype`), with the
    attention that computes in float64: the causal-LM class, or the base model (BERT, or a
    hidden state)."""
    import transformers  # noqa: PLC0415

    register()
    quiet()
    kw = dict(dtype=getattr(torch, dtype), attn_implementation=attention_for(family))
    if family == "bert":
        return transformers.BertModel.from_pretrained(folder, add_pooling_layer=False, **kw).eval()
    if output == "hidden":   # the base model: the function kept is its last hidden state
        return transformers.AutoModel.from_pretrained(folder, **kw).eval()
    return transformers.AutoModelForCausalLM.from_pretrained(folder, **kw).eval()


def quiet() -> None:
    """transformers' progress bars and notes off (stderr carries this tool's own progress)."""
    import transformers  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def release() -> None:
    """Free what is garbage now and hand the freed heap back to the system (glibc's malloc_trim
    where there is one): the next phase's float64 copy then fits where the last one was."""
    gc.collect()
    _trim()


def _trim() -> None:
    """The freed heap handed back to the system (glibc's malloc_trim, where there is one)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes  # noqa: PLC0415

        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _widest(dtypes: list[str]) -> str:
    order = ("float64", "float32", "bfloat16", "float16")
    known = [d for d in order if d in dtypes]
    return known[0] if known else "float32"


class _ReadOnce(torch.nn.Module):
    """A model's list of layers that the converter reads once, in order: each layer's weights
    are freed when the next is asked for (their float64 copies are in the blocks by then), so
    that the model in its stored dtype and the float64 blocks do not stand side by side."""

    def __init__(self, layers):
        super().__init__()
        self.layers_ = list(layers)

    def __len__(self) -> int:
        return len(self.layers_)

    def __getitem__(self, i):
        return self.layers_[i]

    def __iter__(self):
        for layer in self.layers_:
            yield layer
            for p in layer.parameters():
                p.data = torch.empty(0, dtype=p.dtype)
            _trim()   # the next layer's float64 copies then fit where this one was


def _read_once(model) -> None:
    """`model`'s layer list (GPT-2's and Falcon's h, the rotary families' and NeoX's layers,
    BERT's encoder.layer) as `_ReadOnce`: the model is spent by the conversion that follows."""
    base = getattr(model, model.base_model_prefix, model)
    for owner, name in ((base, "h"), (base, "layers"), (getattr(base, "encoder", None), "layer")):
        if isinstance(getattr(owner, name, None), torch.nn.ModuleList):
            setattr(owner, name, _ReadOnce(getattr(owner, name)))
            return


def _native_network(loaded: Loaded, *, spend: bool = False):
    """(arch, float64 blocks) of the loaded model; with `spend`, the model's layers are freed as
    they are read, where it can be read again from its folder (the blocks are copies; a view
    would keep its weight's memory, never lose it)."""
    if spend and loaded.folder is not None:
        _read_once(loaded.model)
    t = _context(loaded.model.config)
    arch = certify.native_network(loaded.model.config.to_dict(), t, loaded.output)
    if loaded.output == "hidden" and loaded.family != "bert":
        from .checkpoint import convert_model  # noqa: PLC0415

        _, blocks = convert_model(loaded.model, t, "hidden")
    else:
        _, blocks = from_transformers(loaded.model, t)
    return arch, blocks


def _require_finite(arch, blocks: dict, ids: torch.Tensor, source: str) -> None:
    """Refuse (InputError naming the checkpoint) weights whose native float64 forward overflows
    anywhere: a norm turns an overflow into finite zeros (an embedding scaled by 1e300 gives a
    variance of inf and a normalised stream of 0), which the canonical form's eigen-solvers
    met as a LinAlgError (exit 1) instead of the overflow refusal (issue 38, item 8)."""
    try:
        with torch.no_grad():
            _outputs(arch, blocks, ids, FINITE)
    except OverflowError as exc:
        try:
            require_finite(math.nan, f"intermediate values ({exc})", input_name="blocks",
                           largest=largest_entry([torch.as_tensor(v) for v in blocks.values()]))
        except InputError as refusal:
            raise InputError(f"{source}: {refusal}") from None


def _sequences(config, seed: int, n: int = CHECK_SEQUENCES) -> torch.Tensor:
    t = min(16, _context(config) if config.model_type not in ("gpt2", "bert") else
            int(getattr(config, "n_positions", None) or config.max_position_embeddings))
    t = max(t, 2)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (n, t), generator=gen)


def _float64_forward(model, ids: torch.Tensor, output: str) -> torch.Tensor:
    """transformers' own forward of `model` (float64) at float64 round-off: its output
    (logits, or the last hidden state) on token ids; BERT's with the type ids ids mod
    type_vocab_size, so that every token type is read."""
    register()
    float64_model(model)
    model.config._attn_implementation = attention_for(model.config.model_type)
    with torch.no_grad():
        if model.config.model_type == "bert":     # every token type occurs (a rule on ids)
            types = ids % max(int(getattr(model.config, "type_vocab_size", 1) or 1), 1)
            return model(ids, token_type_ids=types).last_hidden_state
        if output == "hidden":
            return model.base_model(ids).last_hidden_state
        return model(ids).logits


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-300))


@dataclass
class CanonicalResult:
    """What `canonical` did: the canonical model (transformers', in the stored dtype), the
    check's relative difference and tolerance, the families quotiented and not, notes."""

    model: object
    family: str
    source: str
    dtype: str
    check_difference: float
    tolerance: float
    quotiented: tuple
    not_quotiented: tuple
    moves: int
    notes: list
    out: str | None = None
    discrete: tuple = ()

    def to_dict(self) -> dict:
        return {"source": self.source, "family": self.family, "dtype": self.dtype,
                "out": self.out, "check": {"relative_difference": self.check_difference,
                                           "tolerance": self.tolerance,
                                           "sequences": CHECK_SEQUENCES,
                                           "passed": self.check_difference <= self.tolerance},
                "quotiented": list(self.quotiented) + list(self.discrete),
                "not_quotiented": list(self.not_quotiented), "moves": self.moves,
                "notes": list(self.notes)}


def _check_out(out: Path, force: bool) -> Path:
    out = Path(out)
    if out.exists() and not force:
        raise bad_value("out", "a path that does not exist yet", str(out),
                        "Pass another -o folder, or --force to replace it.")
    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder (or a path that does not exist)", f"{out} (a file)",
                        "Pass a folder name.")
    if not out.parent.exists():
        raise bad_value("out", "a path in an existing folder", str(out),
                        f"Create the folder {out.parent} first.")
    if not os.access(out.parent, os.W_OK):
        raise bad_value("out", "a path in a writable folder", str(out),
                        "Pass a folder you can write to.")
    return out


@contextlib.contextmanager
def _staged_folder(out: Path):
    """A hidden folder beside `out`, moved into place (replacing `out`) only if the block
    succeeds; removed otherwise."""
    temp = out.with_name(f".{out.name}.partial-{uuid.uuid4().hex[:8]}")
    temp.mkdir()
    try:
        yield temp
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(out, old)
    os.replace(temp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _copy_side_files(folder: Path | None, target: Path) -> list[str]:
    """The source folder's other files (tokenizer, generation config, ...), copied as they are."""
    copied = []
    if folder is None:
        return copied
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name not in _WEIGHT_FILES and not p.name.startswith(".") \
                and not p.name.endswith((".safetensors", ".bin")) and not (target / p.name).exists():
            shutil.copy2(p, target / p.name)
            copied.append(p.name)
    return copied


def _to_dtype(model, dtype: str):
    return model.to(getattr(torch, dtype))


def _rounded(blocks: dict, dtype: str) -> None:
    """The matrices of `blocks` rounded to the stored `dtype` in place of their float64 arrays,
    before the model they are written into is read again: half the memory (or a quarter) beside
    it. Each is what `write_blocks`' copy into a parameter of that dtype makes of it (one
    rounding, the same cast: a matrix is copied, transposed or permuted, never shifted); the
    columns (biases, gains: Gemma's is written as gain - 1) stay float64, and so does a matrix
    that does not fit the dtype (write_blocks meets it as before)."""
    if dtype == "float64":
        return
    freed = 0
    for name, value in blocks.items():
        if value.ndim == 2 and value.shape[1] > 1:
            narrow = torch.as_tensor(value).to(getattr(torch, dtype))
            if bool(torch.isfinite(narrow).all()):
                blocks[name] = narrow
                freed += value.nbytes
        del value
        if freed > 1 << 26:   # every 64 MiB of float64 arrays freed, handed back
            _trim()
            freed = 0


def _as_stored(loaded: Loaded, model):
    """`model`, or where it was dropped (None), the checkpoint read again from its folder in
    its stored dtype (every weight as the float64 load cast back to it: the same values), for
    the canonical blocks to be written into."""
    if model is not None:
        return model
    return _to_dtype(_pretrained(loaded.folder, loaded.family, loaded.output, loaded.dtype),
                     loaded.dtype)


def _save_checked(holder: list, loaded: Loaded, out: Path, ids, expected, tolerance: float,
                  document: dict):
    """Save `model` (stored dtype) into a staged folder, load it again with from_pretrained in
    float64, compare its output with `expected`; move it into place only if within tolerance.
    (the difference, the model as loaded again, in the stored dtype). `holder` holds the one
    reference to the model, so that it is freed before the folder is loaded again."""
    with _staged_folder(out) as temp:
        model = holder.pop()
        model.save_pretrained(temp)
        cls = type(model)
        del model
        release()
        copied = _copy_side_files(loaded.folder, temp)
        register()
        quiet()
        kw = {"add_pooling_layer": False} if loaded.family == "bert" else {}
        again = _to_float64(cls.from_pretrained(temp, dtype=getattr(torch, loaded.dtype),
                                                attn_implementation=attention_for(loaded.family),
                                                **kw).eval())
        difference = _relative(expected, _float64_forward(again, ids, loaded.output))
        document["check"]["relative_difference"] = difference
        document["check"]["passed"] = difference <= tolerance
        document["copied"] = copied
        if difference > tolerance:
            raise ComputationError(f"canonical: the checkpoint written for {loaded.source} gives "
                                   f"outputs {difference:.2e} (relative) from the original's, "
                                   f"above the tolerance {tolerance:.0e} for {loaded.dtype}; "
                                   "nothing was written; please report it (--debug)")
        (temp / "canonical.json").write_text(json.dumps(document, indent=2) + "\n",
                                             encoding="utf-8")
    return difference, _to_dtype(again, loaded.dtype)


def canonical(source, out=None, *, force: bool = False, output: str = "logits", seed: int = 0,
              tolerance: float | None = None, progress=None) -> CanonicalResult:
    """The canonical checkpoint of `source` (module docstring); written to `out` when given.

    Example:
        >>> result = canonical("runs/gpt2", "runs/gpt2-canonical")    # doctest: +SKIP
        >>> result.check_difference < result.tolerance                 # doctest: +SKIP
        True
    """
    say = progress or (lambda _message: None)
    if out is not None:
        out = _check_out(out, force)
    seed = check_int("seed", seed, minimum=0, fix="Pass a seed >= 0.")
    loaded = load(source, output)
    tol = TOLERANCE[loaded.dtype] if tolerance is None else float(tolerance)
    model = loaded.model
    quiet()
    ids = _sequences(model.config, seed)
    say(f"canonical: {loaded.source}: {loaded.family}, {sum(p.numel() for p in model.parameters())} "
        f"parameters ({loaded.dtype}); the original's outputs on {len(ids)} sequences")
    expected = _float64_forward(model, ids, loaded.output)
    # memory: one float64 copy of the weights at a time (the blocks, moved in place), beside
    # the model in its stored dtype while the blocks are read from it and written into it
    model = _to_dtype(model, loaded.dtype)
    release()
    arch, blocks = _native_network(loaded, spend=True)
    if loaded.folder is not None:   # read again after the form (_as_stored): the float64 blocks,
        model = loaded.model = None  # the check's forward and the moves' copies (E: 0.29 GiB)
        release()                    # do not stand beside it
    _require_finite(arch, blocks, ids, loaded.source)
    release()
    say(f"canonical: the canonical form of {len(blocks)} blocks")
    form = forms.canonical_form(arch, blocks, copy=False, after_step=_trim)
    del blocks
    release()
    _rounded(form.blocks, loaded.dtype)
    release()
    model = _as_stored(loaded, model)
    write_blocks(model, arch, form.blocks)
    moves, notes = len(form.moves), list(loaded.notes) + form.notes
    result = CanonicalResult(None, loaded.family, loaded.source, loaded.dtype, float("nan"), tol,
                             form.quotiented, form.not_quotiented, moves, notes,
                             None if out is None else str(out), form.discrete)
    del form
    release()
    document = result.to_dict()
    if out is not None:
        say(f"canonical: writing {out} and checking it through from_pretrained")
        loaded.model = None   # the check loads the written folder: one model in memory at a time
        holder = [model]
        del model
        result.check_difference, model = _save_checked(holder, loaded, out, ids, expected, tol,
                                                       document)
    else:
        check = copy.deepcopy(model).to(torch.float64)
        result.check_difference = _relative(expected, _float64_forward(check, ids, loaded.output))
        del check
        if result.check_difference > tol:
            raise ComputationError(f"canonical: the canonical model of {loaded.source} gives "
                                   f"outputs {result.check_difference:.2e} (relative) from the "
                                   f"original's, above the tolerance {tol:.0e}; please report it")
    result.model = model
    return result


def moved_copy(source, out, *, seed: int = 0, dtype: str | None = None,
               force: bool = False) -> None:
    """`source` moved by a random element of the group `canonical` quotients by
    (`symmetries.canonical.random_group_element` with `seed`), saved to `out` by
    save_pretrained in the stored dtype (or `dtype`): other weights of the same function (up to
    that dtype's rounding, which the random gauges amplify: GPT-2 small's float32 copy is 4.6e-2
    off in its logits; float64 keeps it), for checking `canonical` and `same_function`."""
    out = _check_out(out, force)
    loaded = load(source)
    arch, blocks = _native_network(loaded)
    blocks = {k: v.numpy() for k, v in blocks.items()}
    moved = forms.apply_moves(arch, blocks, forms.random_group_element(arch, blocks, seed))
    del blocks
    write_blocks(loaded.model, arch, moved)
    del moved
    _to_dtype(loaded.model, dtype or loaded.dtype).save_pretrained(out)


# ------------------------------------------------------------------ same function


def _config_fields(model) -> dict:
    return {k: v for k, v in model.config.to_dict().items() if k not in _SKIP_FIELDS}


def _check_same_config(a: Loaded, b: Loaded) -> None:
    fa, fb = _config_fields(a.model), _config_fields(b.model)
    if a.family != b.family:
        raise bad_value("B", f"a checkpoint of A's family ({a.family})", b.family,
                        "Compare two checkpoints of the same config.")
    differ = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
    if differ:
        k = differ[0]
        raise bad_value("B", f"a checkpoint of A's config ({k} = {fa.get(k)!r})",
                        f"{k} = {fb.get(k)!r}" + (f" and {len(differ) - 1} more fields differ"
                                                  if len(differ) > 1 else ""),
                        "Compare two checkpoints of the same config.")


# A block is compared on the larger of its own scale and this fraction of the largest entry of
# either block set. A block that is exactly 0 in one form and round-off in the other (an
# untrained checkpoint's zero biases after a move: 1e-17 to 1e-13 of the largest entry, the
# moves' conditioning times the unit round-off) is then not "different" by 1.0; a block whose
# real content is 1e-4 of the largest entry still counts its whole difference, and what can
# hide is an absolute difference below SAME_TOLERANCE * 1e-4 = 1e-12 of the largest entry.
BLOCK_SCALE_FLOOR = 1e-4


def _block_difference(a: dict, b: dict) -> tuple[float, str]:
    """The largest relative difference of two block sets (per block: max |a - b| over the
    larger of max |a|, max |b| and BLOCK_SCALE_FLOOR times the largest entry of either set;
    0 for two zero sets), and the block where it is."""
    arrays = {k: (np.asarray(a[k]), np.asarray(b[k])) for k in a}   # torch blocks as numpy views
    top = max((float(max(np.abs(x).max(), np.abs(y).max())) for x, y in arrays.values()
               if x.size), default=0.0)
    worst, where = 0.0, ""
    for k, (x, y) in arrays.items():
        if not x.size:
            continue
        scale = max(float(np.abs(x).max()), float(np.abs(y).max()), BLOCK_SCALE_FLOOR * top)
        d = float(np.abs(x - y).max()) / scale if scale > 0 else 0.0
        if d > worst:
            worst, where = d, k
    return worst, where


@dataclass
class SameFunction:
    verdict: str                 # "same", "different" or "undecided"
    max_difference: float
    where: str
    output_difference: float
    tolerance: float
    not_quotiented: tuple
    aligned: dict | None = None

    @property
    def same(self) -> bool | None:
        return {"same": True, "different": False}.get(self.verdict)

    def to_dict(self) -> dict:
        return {"same": self.same, "verdict": self.verdict, "max_difference": self.max_difference,
                "largest_in": self.where, "output_difference": self.output_difference,
                "tolerance": self.tolerance, "not_quotiented": list(self.not_quotiented),
                "aligned": self.aligned}


def _outputs(arch, blocks: dict, ids: torch.Tensor, arithmetic=ARRAYS) -> torch.Tensor:
    """The native float64 output on token ids (N, n): the network on n tokens (the first n
    columns of a learned position table)."""
    from dataclasses import replace  # noqa: PLC0415

    n = ids.shape[1]
    t = {k: torch.as_tensor(v) for k, v in blocks.items()}
    if "T" in t:
        t["T"] = t["T"][:, :n]
    arch = replace(arch, tokens=n)
    if arch.hidden_output:
        return hidden_state(arch, t, ids, arithmetic=arithmetic)
    return logits(arch, t, ids, arithmetic=arithmetic)


def same_function(a, b, *, tolerance: float | None = None, align=None, force: bool = False,
                  output: str = "logits", seed: int = 0, progress=None) -> SameFunction:
    """Whether checkpoints `a` and `b` of one config compute the same function up to the group
    (module docstring); with `align`, B moved into A's gauge is written there.

    Memory: one float64 copy of each checkpoint's weights (the blocks, canonicalised in place),
    read from its model in its stored dtype; A's model is then dropped, and B's too where it
    can be read again from its folder for --align (`_as_stored`). The outputs and distances
    that need the original blocks are taken before."""
    say = progress or (lambda _message: None)
    if align is not None:
        align = _check_out(align, force)
    A = load(a, output)
    _to_dtype(A.model, A.dtype)
    release()
    arch, blocks_a = _native_network(A, spend=True)   # the model's config is all that is left
    release()
    B = load(b, output)
    _check_same_config(A, B)
    dtype = _widest([A.dtype, B.dtype])
    tol = SAME_TOLERANCE[dtype] if tolerance is None else float(tolerance)
    ids = _sequences(A.model.config, seed, 8)
    A.model = None
    _require_finite(arch, blocks_a, ids, A.source)
    expected = _float64_forward(B.model, ids, B.output) if align is not None else None
    _to_dtype(B.model, B.dtype)
    release()
    _, blocks_b = _native_network(B, spend=True)
    if B.folder is not None:
        B.model = None
    release()
    _require_finite(arch, blocks_b, ids, B.source)
    out_difference = _relative(_outputs(arch, blocks_a, ids), _outputs(arch, blocks_b, ids))
    before = _block_difference(blocks_a, blocks_b)[0] if align is not None else None
    say("same-function: canonical forms of A and B")
    form_a = forms.canonical_form(arch, blocks_a, copy=False, after_step=_trim)
    form_b = forms.canonical_form(arch, blocks_b, copy=False, after_step=_trim)
    difference, where = _block_difference(form_a.blocks, form_b.blocks)
    if difference <= tol:
        verdict = "same"
    elif out_difference > tol:
        verdict = "different"
    else:
        verdict = "undecided"
    result = SameFunction(verdict, difference, where, out_difference, tol, form_a.not_quotiented)
    if align is not None:
        say(f"same-function: B moved into A's gauge, written to {align}")
        matched = forms.align_moves(arch, form_a.blocks, form_b.blocks)
        aligned = forms.apply_moves(arch, forms.apply_moves(arch, form_b.blocks, matched),
                                    form_a.moves, inverse=True)
        del form_b, blocks_b
        original_a = forms.apply_moves(arch, form_a.blocks, form_a.moves, inverse=True)
        after, _ = _block_difference(original_a, aligned)
        del form_a, blocks_a, original_a
        model = _as_stored(B, B.model)
        B.model = None
        write_blocks(model, arch, aligned)
        del aligned
        holder = [model]
        del model
        document = {"source": B.source, "aligned_to": A.source,
                    "relative_difference_to_A": {"before": before, "after": after},
                    "check": {"tolerance": TOLERANCE[B.dtype], "sequences": len(ids)},
                    "not_quotiented": list(result.not_quotiented)}
        release()
        _save_checked(holder, B, align, ids, expected, TOLERANCE[B.dtype], document)
        result.aligned = {"out": str(align), "before": before, "after": after,
                          "check": document["check"]["relative_difference"]}
    return result
