"""`neuromanifold canonical` on GPT-2 small (124M parameters, random weights from its config):
wall time and peak memory, against the goals of docs/canonical.md (2 minutes on 2 cores, peak
memory at most twice the checkpoint's size in float64).

Run: .venv/bin/python benchmarks/bench_canonical.py [--family gpt2|llama] [--layers N] [--keep DIR]

The checkpoint is built from transformers' own config class (GPT2Config() is GPT-2 small; no
download), initialised by transformers, saved in float32 by save_pretrained into a temporary
folder, and canonicalised by the command line in a child process, whose peak resident memory
(`ru_maxrss` of the child) and wall time are printed beside the goals. The machine and its load
decide the time: report `uptime` with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="gpt2", choices=("gpt2", "llama"))
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="Build the checkpoint here and "
                        "keep it (and the canonical one beside it).")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-canonical-"))
    source, out = root / f"{args.family}-random", root / f"{args.family}-canonical"
    n = build(args.family, args.layers, source)
    size64 = 8 * n
    exe = Path(sys.executable).with_name("neuromanifold")
    start = time.perf_counter()
    run = subprocess.run([str(exe), "canonical", str(source), "-o", str(out), "--force"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(run.stdout.strip())
    if run.returncode:
        print(run.stderr.strip(), file=sys.stderr)
        raise SystemExit(run.returncode)
    print(f"{args.family}: {n:,} parameters; float64 size {size64 / 2**30:.2f} GiB")
    print(f"wall {wall:.1f} s (goal <= 120 s on 2 cores); peak RSS {peak / 2**30:.2f} GiB "
          f"= {peak / size64:.2f} x the float64 size (goal <= 2); load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
