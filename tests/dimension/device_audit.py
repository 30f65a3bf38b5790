"""A CPU stand-in for a CUDA run: every tensor carries the device it would live on, and mixing
devices is recorded (helpers for tests/dimension/test_cuda.py).

`DeviceAudit` is a `TorchFunctionMode`. The computation really runs on the CPU, but each tensor
made by a torch call is labelled with the device the call asked for: `device="cuda"` in a
factory, `.to("cuda")`, `.cuda()`, or the label of its inputs. `tensor.device` reads the label,
so code that places new tensors `device=x.device` is followed.

What a CUDA run refuses is recorded in `mixed`: an operation whose tensor inputs carry different
labels (0-dim tensors and index tensors excepted, as torch allows them), a CPU generator drawing
a cuda tensor, `.numpy()` of a cuda tensor, and a random draw from torch's global generator (on
a GPU the CUDA generator would draw other samples than the CPU's). Host reads of cuda values
(`.item()`, `float(x)`, `.tolist()`, ...) are counted in `syncs`, by call site, and
`torch.linalg` calls on cuda tensors in `linalg`, by (name, shape, cuSOLVER driver asked for;
the CPU run drops the driver).

Tensors made where the mode cannot see (inside `torch.func` transforms, or the parameters of an
`nn.Module`, whose `.to` swaps their data) carry no label; they count as the device given as
`unlabelled` (the tests pass "cuda", so a tensor made on the CPU that meets one is reported) and
pick up a label when combined with a labelled tensor. This proves plumbing, not numerics: which
tensors would share a device, never what a GPU kernel returns.
"""

from __future__ import annotations

import collections
import traceback

import torch
from torch.overrides import TorchFunctionMode

_LABEL = "_audit_device"
_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.eye, torch.arange,
              torch.linspace, torch.randn, torch.rand, torch.randint, torch.randperm,
              torch.tensor, torch.as_tensor}
_LIKE = {torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.randn_like,
         torch.rand_like}
_NEW = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
_RANDOM = {torch.randn, torch.rand, torch.randint, torch.randperm, torch.randn_like,
           torch.rand_like}
_SYNCS = {"item", "tolist", "__float__", "__int__", "__bool__", "__index__"}


def _name(func) -> str:
    return getattr(func, "__name__", None) or repr(func)


def _device_of(value) -> str | None:
    """'cuda' or 'cpu' for a device-like value, None for anything else."""
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "meta"):
        return value.split(":")[0]
    return None


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def label(tensor: torch.Tensor, default: str | None = None) -> str | None:
    """The device `tensor` would live on, `default` when unknown."""
    return getattr(tensor, _LABEL, default)


class DeviceAudit(TorchFunctionMode):
    """Label tensors with their would-be device and record mixing (module docstring)."""

    def __init__(self, unlabelled: str | None = None) -> None:
        super().__init__()
        self.unlabelled = unlabelled
        self.mixed: list[str] = []
        self.syncs: collections.Counter = collections.Counter()
        self.linalg: collections.Counter = collections.Counter()

    def _where(self) -> str:
        stack = [f for f in traceback.extract_stack() if "torch" not in f.filename
                 and not f.filename.endswith("device_audit.py")]
        ours = [f for f in stack if "neuromanifold" in f.filename] or stack or [None]
        f = ours[-1]
        return "?" if f is None else f"{f.filename.split('src/')[-1]}:{f.lineno}"

    def _mark(self, out, device: str | None):
        if device is not None:
            for t in _tensors(out):
                try:
                    setattr(t, _LABEL, device)
                except (AttributeError, RuntimeError):  # functorch wrappers refuse attributes
                    pass
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = _name(func)
        if name == "__get__" and args and isinstance(args[0], torch.Tensor):
            prop = getattr(getattr(func, "__self__", None), "__name__", "")
            dev = label(args[0], self.unlabelled)
            if prop in ("device", "is_cuda") and dev is not None:
                return torch.device(dev) if prop == "device" else dev == "cuda"
            return self._mark(func(*args, **kwargs), label(args[0]))  # x.T, x.mT, ...
        if name in ("to", "cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
            return self._move(func, name, args, kwargs)
        wanted = _device_of(kwargs.get("device"))
        if func in _FACTORIES or func in _LIKE or name in _NEW:
            if func in _RANDOM and kwargs.get("generator") is None:
                self.mixed.append(f"{self._where()}: {name} draws from torch's global generator "
                                  "(on a GPU, CUDA's: other samples than on the CPU)")
            if wanted == "cuda":
                kwargs["device"] = "cpu"
                gen = kwargs.get("generator")
                if gen is not None and gen.device.type == "cpu":
                    self.mixed.append(f"{self._where()}: {name} draws a cuda tensor from a CPU "
                                      "generator")
            if wanted is None and func in _FACTORIES:
                wanted = "cpu"
            elif wanted is None:  # *_like and new_*: the device of the tensor they follow
                wanted = label(args[0])
            return self._mark(func(*args, **kwargs), wanted)
        tensors = [t for t in _tensors((args, kwargs))]
        if name in _SYNCS or name == "numpy":
            if tensors and label(tensors[0], self.unlabelled) == "cuda":
                if name == "numpy":
                    self.mixed.append(f"{self._where()}: .numpy() of a cuda tensor")
                self.syncs[self._where()] += 1
            return func(*args, **kwargs)
        checked = tensors
        if name in ("__getitem__", "__setitem__"):  # index tensors may stay on the CPU
            checked = [args[0]] + ([args[2]] if name == "__setitem__"
                                   and isinstance(args[2], torch.Tensor) else [])
        devices = {label(t, self.unlabelled) for t in checked
                   if label(t, self.unlabelled) is not None and t.dim() > 0}
        if len(devices) > 1:
            shapes = [(tuple(t.shape), label(t)) for t in checked]
            self.mixed.append(f"{self._where()}: {name} mixes {sorted(devices)} {shapes}")
        driver = kwargs.pop("driver", None)  # cuSOLVER's choice: the CPU accepts none
        if "cuda" in devices and getattr(func, "__module__", "") in ("torch.linalg", "torch._C._linalg"):
            self.linalg[(name, tuple(tensors[0].shape), driver)] += 1
        out = func(*args, **kwargs)
        dev = ("cuda" if "cuda" in devices else devices.pop()) if devices else None
        if dev is None:  # only 0-dim or unlabelled inputs: follow any label there is
            dev = next((label(t) for t in checked if label(t) is not None), None)
        return self._mark(out, dev)

    def _move(self, func, name, args, kwargs):
        source = args[0]
        if name in ("cuda", "cpu"):
            return self._mark(source.view_as(source), name)
        dev = _device_of(kwargs.get("device"))
        rest = list(args[1:])
        for i, value in enumerate(rest):
            if _device_of(value) is not None:
                dev = _device_of(value)
                rest[i] = "cpu"
            elif isinstance(value, torch.Tensor):  # x.to(other): other's device and dtype
                dev = label(value)
        if "device" in kwargs:
            kwargs["device"] = "cpu"
        out = func(source, *rest, **kwargs)
        dev = dev if dev is not None else label(source)
        if out is source and dev != label(source):  # a real move makes a new tensor
            out = source.view_as(source)
        return self._mark(out, dev)
