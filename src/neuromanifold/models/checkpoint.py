"""A trained checkpoint as the native network at its own weights (docs/checkpoints.md).

`load_checkpoint(source, t)` reads a `save_pretrained` folder, a model in the local Hugging Face
cache or a live transformers model, and returns the native `Architecture` of its function on
t tokens (the language-model head's logits, or with output="hidden" the base model's last
hidden state, as `count --validate --hidden-state` has it) with its weights as the named float64
blocks of `core.blocks`: transformers' model class is built from the config on the meta device
(no memory, no initialisation), the file's tensors are assigned to it in float64 (every
float32, float16 or bfloat16 value is a float64 value exactly) and the converter
(`convert.from_transformers`) reads them off. `checkpoint_rank` runs the analysis at that
point; `analyse_checkpoint` is its one call of the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from ..core.architecture import Architecture
from ..core.checks import bad_type, bad_value, check_choice, check_int
from ..errors import ComputationError, InputError
from ..dimension.memory import BASE_BYTES, MemoryEstimate, check_memory
from ..io.checkpoints import (CheckpointFiles, find_checkpoint, read_config_file, read_state_dict,
                              stored_size)
from . import certify, hf
from .convert import CONVERTED, from_transformers

OUTPUTS = certify.OUTPUTS
# Tensors a checkpoint may carry that no converted output reads: buffers older versions saved
# (GPT-2's attention masks, rotary frequency tables) and the heads of BERT checkpoints.
_NOT_READ = re.compile(r"(^|\.)(attn\.(masked_)?bias|rotary_emb\.inv_freq)$|^(bert\.)?(cls|pooler)\.")
_CONFIG_ONLY = ("model_type", "architectures", "auto_map", "torch_dtype", "dtype",
                "transformers_version")


@dataclass
class Checkpoint:
    """A checkpoint read as the native network: where it came from, its family and config, the
    native architecture on t tokens and its weights as float64 blocks (`core.blocks`), the
    output ('logits' or 'hidden'), the parameters of that network, the dtype of the stored
    weights and the training step in the folder's name (None when there is none)."""

    source: str
    family: str
    config: dict
    arch: Architecture
    blocks: dict
    output: str
    n_params: int
    dtype: str
    step: int | None = None
    layout: str | None = None        # io.checkpoints.LAYOUTS, or "live model"
    files: tuple[str, ...] = ()
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """Everything but the blocks, as JSON values (`rank --json` prints it as `read_as`)."""
        return {"source": self.source, "family": self.family, "layout": self.layout,
                "files": list(self.files), "output": self.output,
                "architecture": str(self.arch), "tokens": self.arch.tokens,
                "n_params": self.n_params, "dtype": self.dtype, "step": self.step,
                "notes": list(self.notes), "config": self.config}

    def __repr__(self) -> str:
        step = "" if self.step is None else f" step {self.step}"
        return (f"<Checkpoint {self.family}{step} ({self.output}, {self.n_params} parameters, "
                f"{self.dtype}): {self.source}>")


def load_checkpoint(source, tokens: int, *, output: str = "logits") -> Checkpoint:
    """The checkpoint `source` as the native network on `tokens` tokens at its weights.

    `source`: a folder as `save_pretrained` writes it (or a file in it), a hub name found in
    the local Hugging Face cache, or a live transformers model (a `PreTrainedModel`). The
    native forward equals the model's own float64 forward on the same token ids to float64
    round-off (tests/models/test_checkpoints.py, every converted family). Refused in one line
    naming the file: see `io.checkpoints`, a model type that is not converted, shapes that
    disagree with the config, t above the model's positions or its sliding window.

    Example:
        >>> ckpt = load_checkpoint("path/to/checkpoint-500", 4)     # doctest: +SKIP
        >>> (ckpt.step, ckpt.arch.n_params == ckpt.n_params)         # doctest: +SKIP
        (500, True)
    """
    tokens = check_int("tokens", tokens, minimum=1, fix="Pass t >= 1, e.g. --tokens 4.")
    output = check_choice("output", output, OUTPUTS)
    if isinstance(source, torch.nn.Module):
        return _from_live_model(source, tokens, output)
    if not isinstance(source, (str, Path)):
        raise bad_type("source", "a checkpoint folder, a cached hub name or a transformers model",
                       type(source).__name__, "Pass the folder save_pretrained wrote.")
    files = find_checkpoint(source)
    config = read_config_file(files)
    arch = checkpoint_network(config, tokens, output, files.config_path)
    hf.require_transformers("reading a checkpoint")
    check_memory(reading_estimate(files))
    state = read_state_dict(files)
    model, notes = model_at(config, state, files, output)
    blocks = _converted(model, tokens, output, arch, files.config_path)
    return Checkpoint(source=str(source), family=config["model_type"], config=config,
                      arch=arch, blocks=blocks, output=output, n_params=arch.n_params,
                      dtype="+".join(state.dtypes) or "none", step=files.step,
                      layout=files.layout, files=tuple(str(f) for f in files.weight_files),
                      notes=notes)


def reading_estimate(files: CheckpointFiles) -> MemoryEstimate:
    """Peak bytes of reading a checkpoint: the stored tensors, their float64 copies in the
    model and the float64 blocks the converter makes of them, and the process."""
    entries, size = stored_size(files)
    return MemoryEstimate(f"reading the checkpoint {files.folder}",
                          size + 16 * entries + BASE_BYTES,
                          parts={"stored tensors": size, "float64 model": 8 * entries,
                                 "float64 blocks": 8 * entries, "process": BASE_BYTES},
                          advice="Read a smaller checkpoint (this reads every weight in float64)")


def checkpoint_network(config: dict, tokens: int, output: str, where) -> Architecture:
    """The native network of a checkpoint's config (`certify.native_network`), every refusal
    naming the config file."""
    mt = config.get("model_type")
    if mt not in CONVERTED:
        raise bad_value(f"{where}: model_type", "a converted family (" + ", ".join(CONVERTED) + ")",
                        mt, "Other families are not converted yet (docs/models.md#the-converter-"
                        "transformers-models-as-native-networks).")
    if mt == "bert" and output == "logits":
        raise bad_value(f"{where}: model_type", "a model with a language-model head for the "
                        "logits (BertModel's output is its last hidden state)", mt,
                        "Pass --hidden-state (output='hidden').")
    try:
        cfg = hf.check_config(config, str(where))
        window = certify.sliding_window(cfg)
        if window is not None and tokens > window:
            raise bad_value("tokens", f"at most the sliding window ({window}) of {where}",
                            tokens, "Pass fewer tokens: a window shorter than t has no native "
                            "counterpart.")
        return certify.native_network(cfg, tokens, output)
    except InputError as exc:
        text = str(exc)
        raise InputError(text if str(where) in text else f"{where}: {text}") from None


def _transformers_model(config: dict, where):
    """transformers' model class of `config` on the meta device: the causal-LM class, or
    BertModel without its pooler."""
    import transformers  # noqa: PLC0415

    mt = config["model_type"]
    fields = {k: v for k, v in config.items() if k not in _CONFIG_ONLY}
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()   # its notes on token ids of tiny vocabularies
    try:
        cfg = transformers.AutoConfig.for_model(mt, **fields)
        with torch.device("meta"):
            if mt == "bert":
                return transformers.BertModel(cfg, add_pooling_layer=False)
            return transformers.AutoModelForCausalLM.from_config(cfg)
    except (TypeError, ValueError, KeyError) as exc:  # transformers' checks of the fields
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise bad_value(f"{where}", f"fields that transformers accepts for {mt}", first,
                        "Fix or remove the field it names, as in the published config.json."
                        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def _model_key(name: str, keys, prefix: str) -> str | None:
    """The model's name for a stored tensor: as stored, or with the base model's prefix added
    (a base model's checkpoint) or dropped (BERT heads' checkpoints)."""
    if name in keys:
        return name
    if f"{prefix}.{name}" in keys:
        return f"{prefix}.{name}"
    if name.startswith(prefix + ".") and name[len(prefix) + 1:] in keys:
        return name[len(prefix) + 1:]
    return None


def _renamings(model) -> list:
    """transformers' own renamings of stored tensor names for this model class (transformers 5
    reads GPT-NeoX's stored embed_out as lm_head); none in versions without them."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping  # noqa: PLC0415
    except ImportError:  # pragma: no cover - transformers 4
        return []
    return [t for t in get_model_conversion_mapping(model) if type(t).__name__ == "WeightRenaming"]


def _renamed(name: str, renamings: list) -> str:
    for rule in renamings:
        name = rule.rename_source_key(name)[0]
    return name


def model_at(config: dict, state, files: CheckpointFiles, output: str, *, float64: bool = True):
    """transformers' model of `config` holding the checkpoint's tensors in float64 (assigned, no
    copy of an initialisation), and notes on what was not read. float64=False assigns them as
    stored (no copy): the checks alone, for a caller that loads the weights its own way."""
    model = _transformers_model(config, files.config_path)
    expected = model.state_dict()
    prefix = model.base_model_prefix
    ignore = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None)
                                      or ())]
    assigned, skipped = {}, []
    renamings = _renamings(model)
    for name, tensor in state.tensors.items():
        key = _model_key(_renamed(name, renamings), expected, prefix)
        if key is None:
            if _NOT_READ.search(name) or any(p.search(name) for p in ignore):
                skipped.append(name)
                continue
            raise bad_value(str(state.files[name]), f"tensors of the model {files.config_path.name} "
                            f"describes ({config['model_type']})", f"tensor {name}, which it has "
                            "not", "Use the config.json saved with these weights.")
        if not tensor.is_floating_point():
            raise bad_value(str(state.files[name]), f"floating-point weights (tensor {name})",
                            f"dtype {str(tensor.dtype).removeprefix('torch.')}",
                            "Write the checkpoint again (save_pretrained); quantised "
                            "checkpoints are not read.")
        want = tuple(expected[key].shape)
        if tuple(tensor.shape) != want:
            raise bad_value(str(state.files[name]), f"weights of the shapes "
                            f"{files.config_path.name} gives (tensor {name}: {want})",
                            f"shape {tuple(tensor.shape)}", "Use the config.json saved with "
                            "these weights.")
        assigned[key] = tensor.to(torch.float64) if float64 else tensor
    model.load_state_dict(assigned, strict=False, assign=True)
    model.tie_weights()
    notes = [f"not read (no converted output uses them): {', '.join(skipped)}"] if skipped else []
    tied = getattr(model, "_tied_weights_keys", None)
    for target, source in (tied.items() if isinstance(tied, dict) else ()):
        if target in assigned and source in assigned and \
                not torch.equal(assigned[target], assigned[source]):
            notes.append(f"{target} in the file differs from {source}; the config ties them, so "
                         f"{source} is read for both, as transformers does")
    base = {f"{prefix}.{n}" for n, _ in model.base_model.named_parameters()}
    for name, p in model.named_parameters():
        if not p.is_meta:
            continue
        if name in base or output == "logits":
            fix = ("Write the checkpoint again (save_pretrained)." if name in base else
                   "A base model's checkpoint has no logits: pass --hidden-state "
                   "(output='hidden') for its last hidden state.")
            raise bad_value(str(files.weight_files[0]), f"a checkpoint holding tensor {name} "
                            f"(the model {files.config_path.name} describes has it)",
                            "no such tensor", fix)
        # a head the hidden state does not read: zeros, never used
        setattr(_owner(model, name), name.rsplit(".", 1)[-1],
                torch.nn.Parameter(torch.zeros(p.shape, dtype=torch.float64)))
    return model.eval(), notes


def _owner(model, name: str):
    obj = model
    for part in name.split(".")[:-1]:
        obj = getattr(obj, part)
    return obj


def convert_model(model, tokens: int, output: str) -> tuple[Architecture, dict]:
    """(native architecture, float64 blocks on the CPU) of a loaded model for `output`."""
    config = model.config
    if output == "hidden" and config.model_type != "bert":
        arch = certify.native_network(config.to_dict(), tokens, "hidden")
        head = getattr(model, "lm_head", None) or getattr(model, "embed_out", None)
        if head is None:   # a base model: the converter reads it under its own attribute
            model = SimpleNamespace(config=config, **{model.base_model_prefix: model},
                                    lm_head=SimpleNamespace(weight=torch.zeros(1, 1)))
        _, blocks = from_transformers(model, tokens)
        blocks.pop("L", None)
    else:
        arch, blocks = from_transformers(model, tokens)
    return arch, {k: v.detach().to("cpu", torch.float64) for k, v in blocks.items()}


def _converted(model, tokens: int, output: str, arch: Architecture, where) -> dict:
    """The blocks of `model`, whose converted architecture must be `arch` (the same config read
    as a dict before the weights, and as transformers' object now): a difference is the
    converter's fault, not the caller's (exit code 1)."""
    read, blocks = convert_model(model, tokens, output)
    if read != arch:
        raise ComputationError(f"{where} converts to two networks: {arch} from its fields, "
                               f"{read} from transformers' config object; please report it")
    return blocks


def _from_live_model(model, tokens: int, output: str) -> Checkpoint:
    """A live transformers model (any device, any dtype), its weights read as they are."""
    config = getattr(model, "config", None)
    mt = getattr(config, "model_type", None)
    if not hf.have_transformers() or not is_pretrained(model):
        raise bad_type("source", "a transformers PreTrainedModel (or a checkpoint folder)",
                       type(model).__name__, "For any other module use functional_dim(module, "
                       "inputs).")
    where = f"{type(model).__name__}.config"
    arch = checkpoint_network(config.to_dict(), tokens, output, where)
    for name, p in model.named_parameters():
        if p.is_meta:
            raise bad_value("source", "a model with its weights (not on the meta device)",
                            f"parameter {name} on meta", "Load the weights first.")
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise bad_value("source", f"finite weights (parameter {name})",
                            "NaN or infinite entries", "Fix the weights.")
    blocks = _converted(model, tokens, output, arch, where)
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    return Checkpoint(source=f"live {type(model).__name__}", family=mt, config=config.to_dict(),
                      arch=arch, blocks=blocks, output=output, n_params=arch.n_params,
                      dtype="+".join(dtypes), layout="live model")


def is_pretrained(model) -> bool:
    from transformers import PreTrainedModel  # noqa: PLC0415

    return isinstance(model, PreTrainedModel)


def check_inputs(inputs, checkpoint: Checkpoint) -> torch.Tensor:
    """Token ids (N, t) of the checkpoint's vocabulary as a LongTensor (one line otherwise)."""
    import numpy as np  # noqa: PLC0415

    arch = checkpoint.arch
    if isinstance(inputs, np.ndarray):
        if not (np.issubdtype(inputs.dtype, np.integer) or inputs.dtype == np.bool_):
            raise bad_value("inputs", "integer token ids", f"dtype {inputs.dtype}",
                            "Save the ids as integers (np.int64).")
        inputs = torch.from_numpy(np.ascontiguousarray(inputs))
    if not isinstance(inputs, torch.Tensor):
        raise bad_type("inputs", "token ids as a tensor or array of shape (N, t)",
                       type(inputs).__name__, "Pass a LongTensor of shape (N, t).")
    if inputs.is_floating_point() or inputs.is_complex() or inputs.dtype == torch.bool:
        raise bad_value("inputs", "integer token ids", f"dtype {inputs.dtype}",
                        "Save the ids as integers (torch.long).")
    if inputs.ndim != 2 or inputs.shape[1] != arch.tokens or inputs.shape[0] < 1:
        raise bad_value("inputs", f"token ids of shape (N, t) with t = {arch.tokens} (--tokens)",
                        f"shape {tuple(inputs.shape)}", f"Save N sequences of {arch.tokens} "
                        "ids, or pass --tokens to match them.")
    low, high = int(inputs.min()), int(inputs.max())
    if low < 0 or high >= arch.vocab:
        raise bad_value("inputs", f"token ids in [0, {arch.vocab}) (the vocabulary)",
                        f"ids from {low} to {high}", "Keep the ids inside the model's vocabulary.")
    return inputs.to("cpu", torch.long)


def analyse_checkpoint(checkpoint: Checkpoint, *, inputs=None, **kw):
    """The analysis at the checkpoint's weights: the one call of the engine
    (`dimension.local.local_geometry`: the bracket, the profile, the families and parts, and with
    token ids `inputs` the batch functional dimension on them)."""
    from ..dimension.local import local_geometry  # noqa: PLC0415

    if inputs is not None:
        inputs = check_inputs(inputs, checkpoint)
    try:
        return local_geometry(checkpoint.arch, checkpoint.blocks, inputs=inputs, **kw)
    except InputError as exc:   # the weights are the checkpoint's: name it, not `blocks`
        text = str(exc)
        if text.startswith("`blocks"):
            raise InputError(f"{checkpoint.source}: {text}") from None
        raise


def checkpoint_rank(source, tokens: int, *, output: str = "logits", inputs=None, **kw):
    """`load_checkpoint(source, tokens, output=output)` analysed at its weights
    (`analyse_checkpoint`; keywords go to the engine: method, samples, seed, generic, ...)."""
    return analyse_checkpoint(load_checkpoint(source, tokens, output=output), inputs=inputs, **kw)
