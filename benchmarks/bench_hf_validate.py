"""Measured vs counted functional dimension of shrunk Hugging Face models, with the time taken.

For each shipped config (or those named), build the shrunk random model (count --validate),
measure it with functional_dim and print parameters, counted, measured, status and seconds; then
the full-size counts. Timings depend on the machine's load.

Run: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_hf_validate.py [gpt2 llama ...] [--tokens 4]
"""

import argparse
import time
import warnings

import torch

from neuromanifold.models import hf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=list(hf.MODEL_TYPES))
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'model':<8} {'class':<13} {'params':>7} {'counted':>8} {'measured':>8} "
          f"{'status':<10} {'seconds':>8}  verdict")
    for name in args.models:
        spec = hf.read_config(hf.shipped_config(name))
        v = hf.validate(spec, seed=args.seed, tokens=args.tokens)
        verdict = "verified" if v["verified"] else f"FINDING: {v['finding']}"
        print(f"{name:<8} {v['model_class']:<13} {v['n_params']:>7} {v['counted']:>8} "
              f"{v['measured']:>8} {v['measured_status']:<10} {v['seconds']:>8.1f}  {verdict}",
              flush=True)
    print("\nfull size (estimates):")
    print(f"{'model':<8} {'parameters':>14} {'symmetry dims':>14} {'attention':>12} {'count':>14}")
    for name in args.models:
        t0 = time.perf_counter()
        c = hf.count(hf.read_config(hf.shipped_config(name)))
        print(f"{name:<8} {c['n_params']:>14,} {c['symmetry_total']:>14,} "
              f"{c['attention_redundancy']:>12,} {c['count']:>14,}  ({time.perf_counter() - t0:.3f} s)")


if __name__ == "__main__":
    main()
