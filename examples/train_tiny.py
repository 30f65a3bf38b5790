#!/usr/bin/env python3
"""Train a tiny GPT-2 and a tiny Llama on modular addition, checkpointing, then track them.

Usage: `python examples/train_tiny.py --out DIR` (from a clone: `PYTHONPATH=src python ...`).

The task is generated here (no download): every sequence is `a b = c` with c = (a + b) mod P,
token ids 0..P-1 for the digits and P for "=", and the loss is the cross-entropy of the last
token given the first three (the model reads 4 tokens; the prediction at "=" is scored). Each
model is transformers' own class (GPT2LMHeadModel, LlamaForCausalLM) from a tiny config, a few
thousand parameters, trained in float32 with a plain torch loop (AdamW, full batch: all P^2
pairs) and saved with `save_pretrained` into DIR/<model>/checkpoint-<step>/ every `--every`
steps, step 0 included, as transformers' Trainer lays out a run. Then `neuromanifold track`
runs on each run folder (`track_run`, the one call into the analysis) and writes
DIR/<model>/track.csv and DIR/<model>/track.png. docs/tracking.md shows and reads the figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

MODULUS = 5          # P: digits 0..P-1, "=" is token P
SEQUENCE = 4         # a, b, =, c
INIT = 0.2


def modular_addition(modulus: int = MODULUS) -> torch.Tensor:
    """All P^2 sequences (a, b, P, (a + b) mod P), shape (P^2, 4), int64."""
    a, b = torch.meshgrid(torch.arange(modulus), torch.arange(modulus), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    return torch.stack([a, b, torch.full_like(a, modulus), (a + b) % modulus], dim=1)


def tiny_model(name: str, *, modulus: int = MODULUS, width: int = 8, seed: int = 0):
    """A tiny transformers model of the family `name` ('gpt2' or 'llama'), float32, no dropout."""
    import transformers  # noqa: PLC0415

    vocab = modulus + 1
    if name == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab, n_positions=SEQUENCE, n_embd=width, n_layer=1, n_head=2,
            n_inner=2 * width, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=None, eos_token_id=None, initializer_range=INIT)
        cls = transformers.GPT2LMHeadModel
    elif name == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=width, intermediate_size=width, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, head_dim=width // 2,
            max_position_embeddings=SEQUENCE, tie_word_embeddings=False, initializer_range=INIT)
        cls = transformers.LlamaForCausalLM
    else:
        raise ValueError(f"`name` must be 'gpt2' or 'llama'; got {name!r}. Pass one of them.")
    config._attn_implementation = "eager"   # the attention written out, as our maps do
    torch.manual_seed(seed)
    return cls(config).float()


def train(model, data: torch.Tensor, out_dir: Path, *, steps: int, every: int,
          lr: float = 3e-3, weight_decay: float = 0.1, log=print) -> list[tuple[int, float]]:
    """AdamW on the last token's cross-entropy, saving `out_dir/checkpoint-<step>/` at step 0,
    every `every` steps and at the last step. Returns (step, loss) at each save."""
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    inputs, target = data[:, :-1], data[:, -1]
    losses = []

    def loss_now() -> torch.Tensor:
        logits = model(inputs).logits[:, -1, :]
        return torch.nn.functional.cross_entropy(logits, target)

    for step in range(steps + 1):
        loss = loss_now()
        if step % every == 0 or step == steps:
            model.save_pretrained(out_dir / f"checkpoint-{step}")
            losses.append((step, loss.item()))
            log(f"  step {step:>4}: loss {loss.item():.4f}")
        if step == steps:
            break
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return losses


def track_run(run_dir: Path, *, tokens: int = SEQUENCE - 1, method: str = "auto",
              seed: int = 0) -> int:
    """`neuromanifold track RUN_DIR --tokens t --out track.csv --figure track.png`; its exit
    code. The one call of the script into the analysis."""
    from neuromanifold.cli.app import main  # noqa: PLC0415

    return main(["track", str(run_dir), "--tokens", str(tokens), "--method", method,
                 "--seed", str(seed), "--out", str(run_dir / "track.csv"),
                 "--figure", str(run_dir / "track.png"), "--force"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Folder for the runs.")
    parser.add_argument("--steps", type=int, default=300, help="Training steps (default 300).")
    parser.add_argument("--every", type=int, default=50, help="Checkpoint every k steps.")
    parser.add_argument("--width", type=int, default=8, help="Model width (default 8: GPT-2 "
                        "696, Llama 504 parameters; 12: 1428 and 1044; 16: 2416 and 1776).")
    parser.add_argument("--models", default="gpt2,llama", help="Comma-separated: gpt2, llama.")
    parser.add_argument("--tokens", type=int, default=SEQUENCE - 1,
                        help="Tokens t the function is analysed on (default 3: a b =).")
    parser.add_argument("--method", default="auto", help="track's --method (default auto).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-track", action="store_true", help="Train and save only.")
    args = parser.parse_args(argv)
    import transformers  # noqa: PLC0415

    transformers.utils.logging.disable_progress_bar()   # no "Writing model shards" bars
    if args.steps < 1 or args.every < 1:
        parser.error("--steps and --every must be positive integers; pass e.g. --steps 300 "
                     "--every 50")
    names = args.models.split(",")
    if not set(names) <= {"gpt2", "llama"}:
        parser.error(f"--models must name gpt2 and/or llama; got {args.models!r}")
    data = modular_addition()
    codes = []
    for name in names:
        if (args.out / name).exists() and any((args.out / name).glob("checkpoint-*")):
            parser.error(f"{args.out / name} already holds checkpoints; pass another --out")
    for name in names:
        run_dir = args.out / name
        model = tiny_model(name, width=args.width, seed=args.seed)
        n = sum(p.numel() for p in model.parameters())
        print(f"{name}: {n} parameters, modular addition mod {MODULUS}, {args.steps} steps, "
              f"checkpoints every {args.every} in {run_dir}", flush=True)
        t0 = time.perf_counter()
        train(model, data, run_dir, steps=args.steps, every=args.every)
        print(f"{name}: trained in {time.perf_counter() - t0:.1f} s", flush=True)
        if not args.no_track:
            code = track_run(run_dir, tokens=args.tokens, method=args.method, seed=args.seed)
            print(f"{name}: track exit code {code}", flush=True)
            codes.append(code)
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
