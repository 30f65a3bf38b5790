"""`--device cuda` without a GPU: the numerical paths keep every tensor on the device asked for,
read ranks with the precise cuSOLVER driver, and budget the GPU's memory (tests/dimension/device_audit.py
labels each tensor with the device it would live on). With a GPU, cuda and cpu agree."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

from device_audit import DeviceAudit, label
from neuromanifold import Architecture, neuromanifold_dim, numerical_dim
from neuromanifold.dimension import memory
from neuromanifold.errors import ResourceError
from neuromanifold.models.functional import functional_dim

GIB = 2 ** 30


def fake_gpu(monkeypatch, free_bytes: int) -> None:
    """torch.cuda answers as for one visible GPU with `free_bytes` free (nothing else of CUDA is
    touched: the audit keeps the tensors on the CPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free_bytes, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "audited GPU")


def test_audit_records_what_a_cuda_run_refuses():
    """The audit itself: a CPU tensor meeting a cuda one, a CPU generator drawing a cuda tensor,
    .numpy() of a cuda tensor and an unseeded draw are recorded; CPU index tensors and 0-dim
    tensors are not."""
    audit = DeviceAudit()
    with audit:
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(3, 5, generator=gen, dtype=torch.float64).to(torch.device("cuda"))
        y = torch.zeros(5, 7, dtype=torch.float64, device=x.device)
        x @ y
        x[torch.tensor([0, 2])] * torch.tensor(2.0)
        assert len(audit.mixed) == 0 and label(x @ y) == "cuda" and x.is_cuda
        x @ torch.eye(5, dtype=torch.float64)
        torch.randn(3, generator=gen, device="cuda")
        x.numpy()
        float(x.sum())
        torch.rand(3, 4, device=x.device)
    assert [m.split(": ", 1)[1][:12] for m in audit.mixed] == [
        "matmul mixes", "randn draws ", ".numpy() of ", "rand draws f"]
    assert sum(audit.syncs.values()) == 2


CASES = {
    # softmax gauge, last value matrix eliminated (sketched rows, M's factor)
    "eliminate": (Architecture((6, 5, 4), (2, 3), 4, "softmax"), {"route": "eliminate"}),
    # softmax gauge, the whole free-column Jacobian
    "gauge": (Architecture((7, 5, 3), (2, 4), 3, "softmax"), {"route": "full"}),
    # lightning: dense tangents, Householder split (geqrf, ormqr)
    "dense": (Architecture((5, 3, 4), (2, 2), 3, "lightning"), {}),
    # softmax with a_1 > d_0: no gauge, dependent tangents and read-out tangents (SVDs)
    "readout": (Architecture((4, 5, 3), (7, 2), 3, "softmax"), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_numerical_dim_keeps_every_tensor_on_the_device(case, monkeypatch):
    """numerical_dim(device='cuda') mixes no devices, reads every rank SVD with cuSOLVER's
    gesvd, and gives the CPU's rank and status."""
    arch, options = CASES[case]
    cpu = numerical_dim(arch, seed=5, **options)
    fake_gpu(monkeypatch, 70 * GIB)
    audit, said = DeviceAudit(unlabelled="cuda"), []
    with audit:
        gpu = numerical_dim(arch, seed=5, device="cuda", progress=said.append, **options)
    assert audit.mixed == [] and said[0] == "computing on cuda: audited GPU"
    svds = {key: n for key, n in audit.linalg.items() if key[0].startswith("linalg_svd")}
    assert svds and {driver for _, _, driver in svds} == {"gesvd"}
    assert (gpu.dimension, gpu.status, gpu.device) == (cpu.dimension, cpu.status, "cuda")


@pytest.mark.parametrize("arch", [
    Architecture((4, 4, 4), (2, 3), 3, "softmax", heads=(2, 1)),
    Architecture((5, 5, 5), (2, 2), 2, "softmax", residual=True, mlp=(3, 4), activation="gelu",
                 norm="layernorm")], ids=["heads", "residual-mlp-norm"])
def test_block_networks_keep_every_tensor_on_the_device(arch, monkeypatch):
    """The block path on 'cuda' mixes no devices and gives the CPU's rank and status."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = neuromanifold_dim(arch, method="numerical", seed=2)
        fake_gpu(monkeypatch, 70 * GIB)
        audit = DeviceAudit(unlabelled="cuda")
        with audit:
            gpu = neuromanifold_dim(arch, method="numerical", seed=2, device="cuda")
    assert audit.mixed == []
    assert {driver for name, _, driver in audit.linalg if name.startswith("linalg_svd")} == {"gesvd"}
    assert (gpu.dimension, gpu.status, gpu.device) == (cpu.dimension, cpu.status, "cuda")


def test_functional_dim_keeps_every_tensor_on_the_device(monkeypatch):
    """functional_dim(device='cuda') of a small MLP mixes no devices and matches the CPU."""
    def model():
        torch.manual_seed(11)
        return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))

    def inputs(n, g):
        return torch.randn(n, 3, generator=g, dtype=torch.float64)

    cpu = functional_dim(model(), inputs, seed=4)
    fake_gpu(monkeypatch, 70 * GIB)
    audit = DeviceAudit(unlabelled="cuda")
    with audit:
        gpu = functional_dim(model(), inputs, seed=4, device="cuda")
    assert audit.mixed == []
    assert (gpu.dimension, gpu.status, gpu.device) == (cpu.dimension, cpu.status, "cuda")


def test_cuda_run_budgets_the_gpu_memory(monkeypatch):
    """A cuda run whose estimate exceeds 80% of the GPU's free memory is refused before any
    tensor is made (exit 2), naming the GPU; --max-memory then budgets the GPU, a fraction of
    its free memory included."""
    arch = Architecture((128, 128, 128), (16, 16), 16, "softmax")
    estimate = memory.on_gpu(memory.numerical_estimate(arch))
    fake_gpu(monkeypatch, int(estimate.peak / 0.8) - 2 ** 20)
    audit = DeviceAudit()
    with audit, pytest.raises(ResourceError, match=r"free on cuda \(audited GPU\)"):
        numerical_dim(arch, device="cuda")
    assert audit.linalg == {} and audit.syncs == {}
    with pytest.raises(ResourceError, match="--max-memory"):
        numerical_dim(arch, device="cuda", max_memory="1G")
    fake_gpu(monkeypatch, 4 * estimate.peak)
    with pytest.raises(ResourceError, match="on the GPU"):
        numerical_dim(arch, device="cuda", max_memory="0.2")
    with pytest.raises(ResourceError, match="on the GPU"):
        neuromanifold_dim(arch, device="cuda", max_memory="0.2")


def test_gpu_estimate_is_the_host_estimate_less_the_process():
    """on_gpu keeps every tensor of the estimate and drops the host process (torch itself)."""
    arch = Architecture((96, 80, 72), (12, 10), 9, "softmax")
    host = memory.numerical_estimate(arch)
    gpu = memory.on_gpu(host)
    assert gpu.peak == host.peak - host.parts["torch"] and "torch" not in gpu.parts
    assert "--device cuda" in host.advice and "--device cuda" not in gpu.advice


def test_certified_figure3_refuses_cuda():
    """figure3 with method 'certified' refuses device 'cuda' (its proofs run on the CPU) instead
    of ignoring it, as `dim --method certified` does."""
    from neuromanifold.experiments.figure3 import figure3

    with pytest.raises(ValueError, match="`device` must be 'cpu' \\(or 'auto'\\) for the certified"):
        figure3("softmax", [3, 4], method="certified", device="cuda")


_WITHOUT_FLINT = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "flint":
            raise ImportError("no flint here")
sys.meta_path.insert(0, Refuse())
from neuromanifold.cli import main
sys.argv = ["neuromanifold", "dim", "--widths", "9,8,7", "--keys", "3,2", "--tokens", "4",
            "--attention", "softmax"]
main()
"""


def test_auto_numerical_answer_needs_no_flint():
    """`dim` (method auto) of a softmax network whose numerical gap is wide answers without the
    exact-arithmetic library, as on a GPU machine where it is not installed; it is imported only
    for a proof."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_FLINT], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "[numerical, settled" in proc.stdout and "not escalated" in proc.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch,options", [CASES["eliminate"], CASES["dense"], CASES["readout"],
                                          (Architecture((24, 20, 18), (4, 3), 5, "softmax"), {})])
def test_cuda_and_cpu_agree_on_a_gpu(arch, options):
    """On a real GPU: the same seeded network gives the same rank and status on cuda and cpu
    (same random draws, moved to the GPU)."""
    cpu = numerical_dim(arch, seed=7, **options)
    gpu = numerical_dim(arch, seed=7, device="cuda", **options)
    assert (gpu.dimension, gpu.status, gpu.n_samples) == (cpu.dimension, cpu.status, cpu.n_samples)
    assert gpu.device.startswith("cuda") and abs(gpu.gap - cpu.gap) < 1.0
