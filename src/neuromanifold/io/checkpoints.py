"""Find and read a checkpoint's files as `save_pretrained` writes them, without transformers
(docs/checkpoints.md).

A checkpoint is a folder holding config.json and its weights in one of four layouts, looked
for in this order (transformers' own):
  model.safetensors                  one safetensors file
  model.safetensors.index.json       sharded safetensors: {"weight_map": {tensor: shard}}
  pytorch_model.bin                  torch.save of a state dict (read with weights_only=True)
  pytorch_model.bin.index.json       sharded .bin files, the same index
A source that is not a local path ("gpt2", "org/name") is looked up in the local Hugging Face
cache (HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
~/.cache/huggingface/hub): models--org--name/snapshots/<revision>/, the revision named by
refs/main. Nothing is downloaded: a name with no local copy is refused with the command that
downloads it.

Every refusal is one line naming the file and what is wrong (an `InputError`, exit code 2):
a missing or truncated weight file (the safetensors header is checked against the file's
size before anything is read), a folder without weights, a shard named in the index that is
missing, a floating-point tensor with NaN or infinite entries (integer tensors are read as
stored: `models.checkpoint` refuses one where the model has a weight).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..core.checks import bad_value
from ..errors import InputError

LAYOUTS = (("model.safetensors", "safetensors"),
           ("model.safetensors.index.json", "sharded safetensors"),
           ("pytorch_model.bin", "pytorch"),
           ("pytorch_model.bin.index.json", "sharded pytorch"))
# Bytes per entry of the safetensors dtypes (the format's own names).
_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
             "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4,
             "U64": 8}
# A safetensors header above this is no header save_pretrained writes (the format's own cap).
MAX_HEADER_BYTES = 100_000_000
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_STEP = re.compile(r"(?:checkpoint|step|ckpt)[-_]?([0-9]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class CheckpointFiles:
    """Where a checkpoint's config and weights are: the folder, the layout (`LAYOUTS`), the
    weight files in reading order, and, for a cache name, the name and the snapshot read."""

    folder: Path
    layout: str
    weight_files: tuple[Path, ...]
    index: Path | None = None
    weight_map: dict = field(default_factory=dict)   # tensor -> shard file (sharded layouts)
    cache_name: str | None = None

    @property
    def config_path(self) -> Path:
        return self.folder / "config.json"

    @property
    def step(self) -> int | None:
        """The training step in the folder's name (`checkpoint-500`, `step_20`), or None."""
        if self.cache_name is not None:
            return None
        match = _STEP.search(self.folder.name)
        return int(match.group(1)) if match else None


def _refuse(path: Path | str, requirement: str, got: object, fix: str) -> InputError:
    """The house template, named by the file: "`<file>` must be <requirement>; got <got>. <fix>"."""
    return bad_value(str(path), requirement, got, fix)


def cache_dirs() -> list[Path]:
    """The Hugging Face cache folder huggingface_hub would use (its own precedence), first."""
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"]).expanduser()]
    if os.environ.get("HF_HOME"):
        return [Path(os.environ["HF_HOME"]).expanduser() / "hub"]
    if os.environ.get("XDG_CACHE_HOME"):
        return [Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"]
    return [Path("~/.cache/huggingface/hub").expanduser()]


def is_hub_name(source: str) -> bool:
    """Whether `source` reads as a hub name ("gpt2", "org/name") rather than a path.

    Example:
        >>> [is_hub_name(s) for s in ("gpt2", "org/name", "run/ckpt/x", "./gpt2", "w.npz")]
        [True, True, False, False, False]
    """
    return bool(_HUB_NAME.match(source)) and not source.endswith((".npz", ".json", ".bin",
                                                                   ".safetensors", ".pt"))


def cached_snapshot(name: str) -> Path:
    """The snapshot folder of `name` in the local cache (refs/main's revision; the only
    snapshot when refs/main is absent), or one line saying to download it first."""
    folder_name = "models--" + name.replace("/", "--")
    looked = []
    for root in cache_dirs():
        repo = root / folder_name
        looked.append(str(root))
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            revision = ref.read_text().strip()
            snapshot = snapshots / revision
            if re.fullmatch(r"[A-Za-z0-9._-]+", revision) and revision not in (".", "..") \
                    and snapshot.is_dir():
                return snapshot
            raise _refuse(ref, f"the revision of a snapshot under {snapshots}", revision,
                          f"Download the model again: huggingface-cli download {name}.")
        found = sorted(p for p in snapshots.iterdir() if p.is_dir())
        if len(found) == 1:
            return found[0]
        if found:
            raise _refuse(snapshots, "one snapshot, or refs/main naming one", f"{len(found)} "
                          "snapshots and no refs/main", "Pass the snapshot folder you mean as "
                          "the path.")
    raise bad_value(name, "a local folder, or a model in the local Hugging Face cache (looked in "
                    + ", ".join(looked) + ")", "no such local folder and no copy in the cache",
                    f"Download it first (huggingface-cli download {name}), or pass the folder "
                    "save_pretrained wrote.")


def find_checkpoint(source: str | Path) -> CheckpointFiles:
    """The files of the checkpoint `source` names: a folder (or a file in it), or a cache name
    (`cached_snapshot`) when no such path exists and it reads as one (`is_hub_name`)."""
    text = str(source)
    path = Path(text).expanduser()
    cache_name = None
    if not path.exists():
        if isinstance(source, str) and is_hub_name(text):
            path, cache_name = cached_snapshot(text), text
        else:
            raise _refuse(path, "an existing checkpoint folder (config.json and its weights) or a "
                          "hub name in the local cache", "no such file or folder",
                          "Check the path, or pass the folder save_pretrained wrote.")
    given = path
    if path.is_file():
        path = path.parent
    if not (path / "config.json").is_file():
        inside = sorted((p for p in path.iterdir() if p.is_dir() and _STEP.search(p.name)
                         and (p / "config.json").is_file()), key=lambda p: int(_STEP.search(p.name).group(1)))
        fix = (f"It holds {len(inside)} checkpoint folders of a run: pass one of them (e.g. "
               f"{inside[-1]})." if inside else "Pass the folder save_pretrained wrote, which "
               "holds config.json.")
        raise _refuse(path / "config.json", "the checkpoint's config (save_pretrained writes it "
                      "beside the weights)", "no such file" if given == path else
                      f"no such file beside {given}", fix)
    for filename, layout in LAYOUTS:
        candidate = path / filename
        if not (candidate.exists() or candidate.is_symlink()):
            continue
        if not candidate.is_file():   # a broken link of an interrupted download
            raise _refuse(candidate, "a weight file", "a broken link or not a file",
                          "Write or download the checkpoint again.")
        if filename.endswith(".index.json"):
            return _sharded(path, candidate, layout, cache_name)
        return CheckpointFiles(path, layout, (candidate,), cache_name=cache_name)
    raise _refuse(path, "a checkpoint folder with weights (" + ", ".join(f for f, _ in LAYOUTS)
                  + ")", "a folder without weights", "Save the model with save_pretrained into "
                  "this folder, or pass the folder that holds its weights.")


def _sharded(folder: Path, index: Path, layout: str, cache_name: str | None) -> CheckpointFiles:
    """The shards an index names, each checked to exist."""
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(index, "a readable JSON index", type(exc).__name__,
                      "Write the checkpoint again (save_pretrained).") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise _refuse(index, "an index with a \"weight_map\" of tensor names to shard files",
                      "no such map", "Write the checkpoint again (save_pretrained).")
    shards = []
    for shard in dict.fromkeys(weight_map.values()):
        file = folder / shard
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise _refuse(index, "shard names inside the checkpoint folder", shard,
                          "Write the checkpoint again (save_pretrained).")
        if not file.is_file():
            raise _refuse(file, f"a shard of the checkpoint (named in {index.name})",
                          "a missing file", "Copy or download every shard the index names.")
        shards.append(file)
    return CheckpointFiles(folder, layout, tuple(shards), index=index,
                           weight_map=dict(weight_map), cache_name=cache_name)


def read_config_file(files: CheckpointFiles) -> dict:
    """config.json as a dict (one line naming the file if it cannot be read or parsed)."""
    path = files.config_path
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _refuse(path, "a readable JSON config", _first_line(exc),
                      "Write the checkpoint again (save_pretrained).") from None
    if not isinstance(config, dict):
        raise _refuse(path, "a JSON object (the model's config)", type(config).__name__,
                      "Write the checkpoint again (save_pretrained).")
    return config


def safetensors_header(path: Path) -> dict:
    """The header of a safetensors file, checked against the file's size: every tensor's byte
    range lies in the file and has the size its dtype and shape need. Reads the header only."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _refuse(path, "a safetensors file (8 bytes of header length, a JSON header, "
                          "the data)", f"{size} bytes", "The file is truncated: write or "
                          "download it again.")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise _refuse(path, f"a safetensors file whose header fits in it ({size} bytes)",
                          f"a header of {n} bytes", "The file is truncated or not safetensors: "
                          "write or download it again.")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise _refuse(path, "a safetensors file with a JSON header", "an unreadable header",
                      "The file is damaged: write or download it again.")
    data_bytes = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(entry, dict) and entry.get("dtype") in _ITEMSIZE
              and isinstance(entry.get("shape"), list)
              and all(isinstance(s, int) and s >= 0 for s in entry["shape"])
              and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2)
        if not ok:
            raise _refuse(path, "a safetensors header entry with dtype, shape and data_offsets",
                          f"tensor {name}: {entry!r:.80}", "The file is damaged: write or "
                          "download it again.")
        begin, end = entry["data_offsets"]
        need = math.prod(entry["shape"]) * _ITEMSIZE[entry["dtype"]]
        if end > data_bytes:
            raise _refuse(path, f"a complete safetensors file (tensor {name} ends at byte "
                          f"{end} of the data)", f"{data_bytes} bytes of data",
                          "The file is truncated: write or download it again.")
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end
                and end - begin == need):
            raise _refuse(path, f"tensor {name} stored in {need} bytes ({entry['dtype']}, shape "
                          f"{tuple(entry['shape'])})", f"offsets {begin}..{end}",
                          "The file is damaged: write or download it again.")
    return header


@dataclass(frozen=True)
class StateDict:
    """The tensors of a checkpoint as stored (their file dtypes), the file of each, and the
    dtypes found (e.g. ('float32',))."""

    tensors: dict
    files: dict          # tensor name -> the file it came from
    dtypes: tuple[str, ...]


def read_state_dict(files: CheckpointFiles) -> StateDict:
    """Every tensor of the checkpoint's weight files, checked: floating point, finite, and,
    for a sharded layout, each tensor in the shard its index names."""
    import torch  # noqa: PLC0415

    tensors, origin = {}, {}
    for file in files.weight_files:
        part = (_read_safetensors(file) if "safetensors" in files.layout else _read_pytorch(file))
        for name, tensor in part.items():
            if files.weight_map and files.weight_map.get(name, file.name) != file.name:
                continue   # the index says another shard holds it
            tensors[name], origin[name] = tensor, file
    for name, shard in files.weight_map.items():
        if name not in tensors:
            raise _refuse(files.folder / shard, f"a shard holding tensor {name} (its index, "
                          f"{files.index.name}, says so)", "no such tensor",
                          "Write the checkpoint again (save_pretrained).")
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            continue   # integer buffers (position ids) are no weights
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            bad = int((~finite).sum())
            raise _refuse(origin[name], f"finite weights (tensor {name})",
                          f"{bad} NaN or infinite entr{'y' if bad == 1 else 'ies'} of "
                          f"{tensor.numel()}", "Use a checkpoint from before the training "
                          "diverged, or fix the weights.")
    dtypes = tuple(sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()
                           if t.is_floating_point()}))
    return StateDict(tensors, origin, dtypes)


def _read_safetensors(file: Path) -> dict:
    """A safetensors file, its header checked first (`safetensors_header`)."""
    from safetensors import SafetensorError  # noqa: PLC0415
    from safetensors.torch import load_file  # noqa: PLC0415

    safetensors_header(file)
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise _refuse(file, "a readable safetensors file", _first_line(exc),
                      "Write or download it again.") from None


def _read_pytorch(file: Path) -> dict:
    """A pytorch_model.bin: torch.load with weights_only=True (no code runs), a dict of
    tensors."""
    import pickle  # noqa: PLC0415

    import torch  # noqa: PLC0415

    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        raise _refuse(file, "a readable PyTorch weight file (torch.save of a state dict)",
                      _first_line(exc), "The file is truncated or damaged: write or download "
                      "it again.") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                             for k, v in data.items()):
        raise _refuse(file, "a state dict (tensor names to tensors)", type(data).__name__,
                      "Save model.state_dict() (save_pretrained does).")
    return data


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


TOKEN_SUFFIXES = (".npy", ".pt")


def read_token_ids(path: str | Path, name: str = "inputs"):
    """Token ids from a .npy file (numpy.load, no pickles) or a .pt file (torch.load with
    weights_only=True, one tensor), as stored; their shape and range are checked against the
    model by the caller (`models.checkpoint.check_inputs`)."""
    import numpy as np  # noqa: PLC0415

    path = Path(path)
    if path.suffix not in TOKEN_SUFFIXES:
        raise bad_value(name, "a .npy or .pt file of token ids (N, t)", str(path),
                        "Save the ids with numpy.save or torch.save.")
    if not path.is_file():
        raise _refuse(path, f"an existing file of token ids (--{name})", "no such file",
                      "Check the path.")
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        import torch  # noqa: PLC0415

        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the caller's bad input
        raise _refuse(path, f"a readable {path.suffix} file of token ids", _first_line(exc),
                      "Save the ids again (numpy.save or torch.save of one tensor).") from None
    if not isinstance(data, torch.Tensor):
        raise _refuse(path, "one tensor of token ids (N, t)", type(data).__name__,
                      "Save the tensor itself: torch.save(ids, path).")
    return data


def stored_size(files: CheckpointFiles) -> tuple[int, int]:
    """(entries, bytes) of the checkpoint's weight files, before any is read: the entries from
    the safetensors headers, or for .bin files an upper bound (their bytes / 2: no stored
    float is narrower than float16 but the rare float8)."""
    entries = size = 0
    for file in files.weight_files:
        size += file.stat().st_size
        if "safetensors" in files.layout:
            header = safetensors_header(file)
            entries += sum(math.prod(e["shape"]) for k, e in header.items() if k != "__metadata__")
        else:
            entries += file.stat().st_size // 2
    return entries, size
