"""`neuromanifold canonical` on GPT-2 small (124M parameters, random weights from its config):
wall time and peak memory, against the goals of docs/canonical.md (2 minutes on 2 cores, peak
memory at most twice the checkpoint's size in float64).

Run: .venv/bin/python benchmarks/bench_canonical.py [--family gpt2|llama] [--layers N] [--keep DIR]
     [--same-function]

The checkpoint is built from transformers' own config class (GPT2Config() is GPT-2 small; no
download), initialised by transformers, saved in float32 by save_pretrained into a temporary
folder, and canonicalised by the command line in a child process, whose peak resident memory
(`ru_maxrss` of that child, from `os.wait4`) and wall time are printed beside the goals, and
beside the peak of a child that only imports what the command imports before it reads weights
(torch, transformers, neuromanifold's canonical module, the family's modeling module): the
interpreter's own share, measured. The checkpoints are built in child processes too: a child's
ru_maxrss counts what it shared with its parent between fork and exec, so the parent stays
small. With
--same-function, `neuromanifold same-function A B` is run the same way twice: B is A moved by a
random element of the group the canonical form quotients by (`moved_copy`, saved in float64:
in float32 the random gauges amplify its rounding to 4.6e-2 in the logits; "same"), then A
perturbed off the group (every weight plus 1e-3 times a normal sample; "different"). The
machine and its load decide the time: report `uptime` with it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
IMPORTS = ("import torch, transformers; import neuromanifold.models.canonical; "
           "import transformers.models.{0}.modeling_{0}")


def build(family: str, layers: int | None, folder: Path) -> int:
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    torch.manual_seed(0)
    if family == "gpt2":
        config = transformers.GPT2Config(**({"n_layer": layers} if layers else {}))
        model = transformers.GPT2LMHeadModel(config)
    else:   # a Llama of GPT-2 small's width, untied: grouped heads, rotary, gated MLP
        config = transformers.LlamaConfig(hidden_size=768, intermediate_size=2048,
                                          num_attention_heads=12, num_key_value_heads=4,
                                          num_hidden_layers=layers or 12, vocab_size=32000,
                                          max_position_embeddings=1024, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def perturbed(source: Path, target: Path, seed: int = 1) -> None:
    """`source` with every weight plus 1e-3 times a normal sample: off the group's orbit."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    model = transformers.AutoModelForCausalLM.from_pretrained(source)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    model.save_pretrained(target)


def measured(argv: list[str]) -> tuple[float, int, int, str, str]:
    """(wall seconds, peak RSS in bytes, exit code, stdout, stderr) of one child process: its
    own ru_maxrss (os.wait4), not the largest of every child so far (RUSAGE_CHILDREN)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=ENV)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_maxrss * 1024, child.returncode, out.read(), err.read()


def report(what: str, argv: list[str], size64: int, base: int) -> None:
    wall, peak, code, out, err = measured(argv)
    print(out.strip())
    if code not in (0, 1):   # same-function's undecided is exit 1; anything else is a failure
        print(err.strip(), file=sys.stderr)
        raise SystemExit(code)
    print(f"{what}: wall {wall:.1f} s (goal <= 120 s on 2 cores); peak RSS {peak / 2**30:.2f} "
          f"GiB = {peak / size64:.2f} x the float64 size (goal <= 2); minus the imports' "
          f"{base / 2**30:.2f} GiB: {(peak - base) / 2**30:.2f} GiB = {(peak - base) / size64:.2f} "
          f"x; exit {code}; load {os.getloadavg()[0]:.2f}", flush=True)


def make(what: str, family: str, layers: int | None, source: Path, target: Path) -> None:
    """One checkpoint, in this (child) process: built, moved or perturbed."""
    if what == "build":
        print(build(family, layers, source))
    elif what == "moved":
        from neuromanifold.models.canonical import moved_copy  # noqa: PLC0415

        moved_copy(source, target, seed=11, dtype="float64")   # float32 rounds it off the orbit
    else:
        perturbed(source, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="gpt2", choices=("gpt2", "llama"))
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="Build the checkpoint here and "
                        "keep it (and the canonical one beside it).")
    parser.add_argument("--same-function", action="store_true", help="Also time same-function "
                        "against a moved copy and a perturbed copy.")
    parser.add_argument("--make", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make(args.make[0], args.family, args.layers, Path(args.make[1]), Path(args.make[2]))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-canonical-"))
    source, out = root / f"{args.family}-random", root / f"{args.family}-canonical"

    def child(what: str, target: Path = root) -> str:
        argv = [sys.executable, __file__, "--family", args.family, "--make", what, str(source),
                str(target)] + (["--layers", str(args.layers)] if args.layers else [])
        return subprocess.run(argv, env=ENV, check=True, capture_output=True, text=True).stdout

    n = int(child("build").split()[-1])
    size64 = 8 * n
    print(f"{args.family}: {n:,} parameters; float64 size {size64 / 2**30:.2f} GiB", flush=True)
    exe = str(Path(sys.executable).with_name("neuromanifold"))
    imports = IMPORTS.format(args.family)
    base = measured([sys.executable, "-c", imports])[1]
    print(f"the imports alone ({imports}): peak RSS {base / 2**30:.2f} GiB", flush=True)
    report("canonical", [exe, "canonical", str(source), "-o", str(out), "--force"], size64, base)
    if args.same_function:
        moved, other = root / f"{args.family}-moved", root / f"{args.family}-perturbed"
        child("moved", moved)
        child("perturbed", other)
        for what, b in (("same-function A, moved A", moved), ("same-function A, perturbed A",
                                                                other)):
            report(what, [exe, "same-function", str(source), str(b)], size64, base)


if __name__ == "__main__":
    main()
