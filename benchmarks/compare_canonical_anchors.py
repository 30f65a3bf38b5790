"""Side by side: TransformerLens's weight processing, a weight-matching permutation alignment (as
git re-basin describes it), and neuromanifold's canonical form / same-function --align, on tiny
random GPT-2 and Llama checkpoints (docs/canonical.md, "Side by side with TransformerLens and
weight matching").

Run (in a venv holding transformer-lens beside this project; nothing is downloaded):
    HF_HUB_OFFLINE=1 python benchmarks/compare_canonical_anchors.py [--json OUT]

Where transformer_lens does not import, one line says so and the script exits 0.

Models: GPT-2 (n_embd 16, 2 layers, 4 heads, MLP 24, vocab 50, 16 positions, tied embeddings) and
Llama (hidden 16, 2 layers, 4 query heads in 2 key/value groups, head_dim 4, gated MLP 24, vocab
50, untied), built from transformers' config classes in float64, every parameter moved off its
initial value by 0.3 N(0, 1) (seeded), saved with save_pretrained beside a word-level tokenizer
made here (TransformerBridge wants one; no hub call).

1. TransformerLens: `TransformerBridge.boot_transformers(folder, hf_model=..., dtype=float64)`,
   then `enable_compatibility_mode(...)` with each weight-processing option alone and in the
   combinations named; its logits on 4 random sequences of 12 tokens against transformers'
   float64 eager forward of the original (max |difference| / max |original logits|), raw and
   with each position's mean over the vocabulary subtracted from both (center_unembed moves
   every logit of a position by one constant). What it changed is read off the processed
   transformers model (TransformerBridge writes the processed weights into it). The last
   column: the same processing of A and of g.A (g a random element of the group
   neuromanifold's canonical form quotients by), their largest relative parameter difference:
   0 where the processing is constant on the orbit.
2. Weight matching (Ainsworth et al. 2022, "Git Re-Basin", section 3.2), written here: per
   layer, the MLP neuron permutation maximising sum_j <w_A_j, w_B_pi(j)> over each neuron's
   input rows, biases and output column (one linear assignment per layer: with the residual
   basis held fixed the layers' permutations do not interact, so the alternating passes of
   the paper reach their fixed point in one); a second row also matches key/value groups and
   heads the same way. B is A with heads and neurons permuted, or A moved by a random element
   of the whole group (`random_group_element` + `apply_moves`, written back with
   `write_blocks`). Distances are same-function's: the largest over blocks of
   max |a - b| / max(max |a|, max |b|) on the native blocks.
3. neuromanifold: `canonical(A, out)` (its check: relative logit difference of the written
   checkpoint, transformers' float64 forward, its own 4 seeded sequences) and
   `same_function(A, B, align=out)` (before/after distances, the check of the aligned
   checkpoint against B); what stays unquotiented (`not_quotiented`).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

VOCAB = 50
SEED = 0


def _versions() -> dict:
    from importlib.metadata import version  # noqa: PLC0415

    return {name: version(name) for name in ("transformer-lens", "transformers", "torch",
                                             "neuromanifold")}


# ------------------------------------------------------------------ models


def build(family: str, seed: int):
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=4, n_inner=24,
                                         vocab_size=VOCAB, n_positions=16, bos_token_id=1,
                                         eos_token_id=2, attn_implementation="eager")
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(hidden_size=16, intermediate_size=24,
                                          num_attention_heads=4, num_key_value_heads=2,
                                          head_dim=4, num_hidden_layers=2, vocab_size=VOCAB,
                                          max_position_embeddings=16, tie_word_embeddings=False,
                                          bos_token_id=1, eos_token_id=2, pad_token_id=3,
                                          attn_implementation="eager")
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).to(torch.float64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def save(model, folder: Path) -> Path:
    import transformers  # noqa: PLC0415
    from tokenizers import Tokenizer, models  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    word = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=word, bos_token="t1",
                                                     eos_token="t2", unk_token="t0",
                                                     pad_token="t3")
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
    return folder


def forward(model, ids):
    import torch  # noqa: PLC0415

    with torch.no_grad():
        return model(ids).logits.detach()


def relative(ref, out) -> float:
    return float((out - ref).abs().max() / ref.abs().max())


def centred(x):
    return x - x.mean(-1, keepdim=True)


def native(model):
    from neuromanifold.models import canonical as M  # noqa: PLC0415
    from neuromanifold.models.convert import from_transformers  # noqa: PLC0415

    arch, blocks = from_transformers(model, M._context(model.config))
    return arch, {k: v.detach().numpy().copy() for k, v in blocks.items()}


def written(model, arch, blocks: dict):
    from neuromanifold.models.writeback import write_blocks  # noqa: PLC0415

    out = copy.deepcopy(model)
    write_blocks(out, arch, blocks)
    return out


def moved(model, seed: int, permutations_only: bool):
    """(model moved, its native blocks): A moved by a random element of the group (or of its
    head, group and neuron permutations only)."""
    from neuromanifold.symmetries import canonical as C  # noqa: PLC0415

    arch, blocks = native(model)
    moves = C.random_group_element(arch, blocks, seed)
    if arch.kv_heads is None:
        # random_group_element permutes heads within key/value groups and the groups; without
        # kv_heads every head is its own group and it leaves head order as it is: add one
        rng = np.random.default_rng(seed)
        moves += [C.Move("head permutation",
                         {"layer": i, "perm": [int(h) + 1 for h in rng.permutation(H)]})
                  for i, H in enumerate(arch.head_counts, start=1)]
    if permutations_only:
        moves = [m for m in moves if m.kind.endswith("permutation")]
    b = C.apply_moves(arch, blocks, moves)
    return written(model, arch, b), b


def block_distance(a: dict, b: dict) -> float:
    from neuromanifold.models import canonical as M  # noqa: PLC0415

    return M._block_difference(a, b)[0]


# ------------------------------------------------------------------ TransformerLens


TL_OPTIONS = ("fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases",
              "refactor_factored_attn_matrices")
TL_RUNS = [
    ("no option (all five False)", {}),
    ("fold_ln", {"fold_ln": True}),
    ("center_writing_weights", {"center_writing_weights": True}),
    ("center_unembed", {"center_unembed": True}),
    ("fold_value_biases", {"fold_value_biases": True}),
    ("refactor_factored_attn_matrices", {"refactor_factored_attn_matrices": True}),
    ("fold_ln + center_writing_weights + fold_value_biases, center_unembed=False",
     {"fold_ln": True, "center_writing_weights": True, "fold_value_biases": True}),
    ("enable_compatibility_mode() defaults (the first four True)",
     {"fold_ln": True, "center_writing_weights": True, "center_unembed": True,
      "fold_value_biases": True}),
]


def tl_process(folder: Path, model, options: dict):
    """The transformers model inside a TransformerBridge after its weight processing, and the
    bridge's logits function; None and the refusal where TransformerLens refuses."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from transformer_lens.model_bridge import TransformerBridge  # noqa: PLC0415

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=copy.deepcopy(model),
                                                 dtype=torch.float64, device="cpu",
                                                 tokenizer=tokenizer)
    kwargs = {name: bool(options.get(name, False)) for name in TL_OPTIONS}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bridge.enable_compatibility_mode(disable_warnings=True, **kwargs)
    except (AssertionError, ValueError, RuntimeError, NotImplementedError) as error:
        return None, None, f"refused: {type(error).__name__}: {str(error).splitlines()[0]}"

    def logits(ids):
        with torch.no_grad():
            return bridge(ids, return_type="logits").detach()
    return bridge, logits, ""


def _zero(x, scale: float = 1.0, tol: float = 1e-5) -> bool:
    return float(np.abs(x).max()) <= tol * max(scale, 1e-300)


def _svd_form(X: np.ndarray, Y: np.ndarray) -> bool:
    """X^T X and Y^T Y both diagonal: the columns of each factor mutually orthogonal, as in an
    SVD form (balanced, S^1/2 on both sides, or TransformerLens's OV form W_V = U S, W_O = V^T)."""
    def diagonal(S: np.ndarray) -> bool:
        return _zero(S - np.diag(np.diag(S)), float(np.abs(S).max()))
    return diagonal(X.T.dot(X)) and diagonal(Y.T.dot(Y))


def tl_features(family: str, bridge) -> dict:
    """What the processed bridge's parameters show (its state dict, TransformerLens's names:
    for GPT-2, q/k/v as [out, in], o and the MLP as transformers' Conv1D [in, out]; for Llama
    every map [out, in])."""
    p = {k: v.detach().numpy().astype(np.float64) for k, v in bridge.state_dict().items()}
    L = bridge.cfg.n_layers
    gpt2 = family == "gpt2"

    def centred(name: str, axis: int) -> bool:
        return _zero(p[name].mean(axis), np.abs(p[name]).max())

    f = {}
    norms = [f"blocks.{i}.{n}" for i in range(L) for n in ("ln1", "ln2")] + ["ln_final"]
    f["norm gains = 1"] = all(_zero(p[f"{n}.weight"] - 1) for n in norms)
    if gpt2:
        f["layernorm biases = 0"] = all(_zero(p[f"{n}.bias"]) for n in norms)
    readers = [(f"blocks.{i}.attn.{m}.weight", 1) for i in range(L) for m in "qkv"]
    readers += [(f"blocks.{i}.mlp.in.weight", 0 if gpt2 else 1) for i in range(L)]
    readers += [(f"blocks.{i}.mlp.gate.weight", 1) for i in range(L) if not gpt2]
    readers += [("unembed.weight", 1)]
    f["readers centred"] = all(centred(n, ax) for n, ax in readers)
    writers = [("embed.weight", 1)] + ([("pos_embed.weight", 1)] if gpt2 else [])
    writers += [(f"blocks.{i}.{m}.weight", 1 if gpt2 else 0) for i in range(L)
                for m in ("attn.o", "mlp.out")]
    f["writers centred"] = all(centred(n, ax) for n, ax in writers)
    f["unembed centred"] = centred("unembed.weight", 0)
    if gpt2:
        f["value biases = 0"] = all(_zero(p[f"blocks.{i}.attn.v.bias"]) for i in range(L))
        f["unembed bias != 0"] = not _zero(p["unembed.bias"])
        H = bridge.cfg.n_heads
        dh = p["blocks.0.attn.q.weight"].shape[0] // H
        qk = ov = True
        for i in range(L):
            a = f"blocks.{i}.attn"
            for h in range(H):
                s = slice(h * dh, (h + 1) * dh)
                Qh = np.vstack([p[f"{a}.q.weight"][s].T, p[f"{a}.q.bias"][None, s]])
                Kh = np.vstack([p[f"{a}.k.weight"][s].T, p[f"{a}.k.bias"][None, s]])
                qk &= _svd_form(Qh, Kh)
                ov &= _svd_form(p[f"{a}.v.weight"][s].T, p[f"{a}.o.weight"][s].T)
        f["QK gauge (SVD form)"] = qk
        f["OV gauge (SVD form)"] = ov
    return f


def tl_rows(family: str, model, folder: Path, moved_model, moved_folder: Path, ids) -> list:
    ref = forward(model, ids)
    rows = []
    for label, options in TL_RUNS:
        bridge, logits, refused = tl_process(folder, model, options)
        if bridge is None:
            rows.append({"family": family, "run": label, "refused": refused})
            continue
        out = logits(ids)
        other, _, _ = tl_process(moved_folder, moved_model, options)
        pa, pb = bridge.state_dict(), other.state_dict()
        orbit = block_distance({k: v.detach().numpy() for k, v in pa.items()},
                               {k: pb[k].detach().numpy() for k in pa})
        rows.append({"family": family, "run": label, "dtype": str(out.dtype),
                     "raw": relative(ref, out), "vocab_centred": relative(centred(ref), centred(out)),
                     "orbit_distance": orbit, "features": tl_features(family, bridge)})
    return rows


# ------------------------------------------------------------------ weight matching


def _group_heads(arch, i: int) -> dict:
    groups: dict = {}
    for h in range(1, arch.head_counts[i - 1] + 1):
        groups.setdefault(arch.group_of(i, h), []).append(h)
    return groups


SHARED = ("Q", "bq", "W", "V", "bv")     # native names per key/value group
PER_HEAD = ("K", "bk", "O")


def _vec(blocks: dict, names) -> np.ndarray:
    return np.concatenate([blocks[n].ravel() for n in names if n in blocks])


def _assign(A: np.ndarray, B: np.ndarray) -> list[int]:
    """pi maximising sum_j <A_j, B_pi(j)> (rows)."""
    from scipy.optimize import linear_sum_assignment  # noqa: PLC0415

    _, cols = linear_sum_assignment(A.dot(B.T), maximize=True)
    return [int(c) for c in cols]


def weight_matching(arch, target: dict, source: dict, heads: bool) -> dict:
    """`source` with its MLP neurons (and, with `heads`, its key/value groups and heads)
    permuted to match `target` by weight matching."""
    b = {k: v.copy() for k, v in source.items()}
    for i in range(1, arch.n_layers + 1):
        if arch.mlp_widths[i - 1]:
            def rows(x: dict, i: int = i) -> np.ndarray:
                return np.hstack([x[n] for n in (f"P_{i}", f"G_{i}", f"bp_{i}", f"bg_{i}")
                                  if n in x] + [x[f"U_{i}"].T])
            pi = _assign(rows(target), rows(b))
            for n in (f"P_{i}", f"G_{i}", f"bp_{i}", f"bg_{i}"):
                if n in b:
                    b[n] = b[n][pi]
            b[f"U_{i}"] = b[f"U_{i}"][:, pi]
        if heads:
            groups = _group_heads(arch, i)
            gs = list(groups)

            def group_vec(x: dict, g, i: int = i, groups: dict = groups) -> np.ndarray:
                return np.concatenate([_vec(x, [f"{n}_{i}_{g}" for n in SHARED])] +
                                      [_vec(x, [f"{n}_{i}_{h}" for n in PER_HEAD])
                                       for h in groups[g]])
            gpi = _assign(np.array([group_vec(target, g) for g in gs]),
                          np.array([group_vec(b, g) for g in gs]))
            new = dict(b)
            for g, c in zip(gs, gpi):
                s = gs[c]
                for n in SHARED:
                    if f"{n}_{i}_{s}" in b:
                        new[f"{n}_{i}_{g}"] = b[f"{n}_{i}_{s}"]
                for h, k in zip(groups[g], groups[s]):
                    for n in PER_HEAD:
                        if f"{n}_{i}_{k}" in b:
                            new[f"{n}_{i}_{h}"] = b[f"{n}_{i}_{k}"]
            b = new
            new = dict(b)
            for hs in groups.values():
                hpi = _assign(np.array([_vec(target, [f"{n}_{i}_{h}" for n in PER_HEAD]) for h in hs]),
                              np.array([_vec(b, [f"{n}_{i}_{h}" for n in PER_HEAD]) for h in hs]))
                for h, c in zip(hs, hpi):
                    for n in PER_HEAD:
                        if f"{n}_{i}_{hs[c]}" in b:
                            new[f"{n}_{i}_{h}"] = b[f"{n}_{i}_{hs[c]}"]
            b = new
    return b


def alignment_rows(family: str, model, root: Path, ids) -> list:
    from neuromanifold.models import canonical as M  # noqa: PLC0415

    arch, a = native(model)
    rows = []
    for kind, perms in (("heads and neurons permuted", True), ("random group element", False)):
        b_model, b = moved(model, seed=SEED + 7, permutations_only=perms)
        folder_b = save(b_model, root / f"B-{'perm' if perms else 'group'}")
        b_logits = forward(b_model, ids)
        before = block_distance(a, b)
        for label, heads in (("weight matching: MLP neurons", False),
                             ("weight matching: MLP neurons + groups/heads", True)):
            aligned = weight_matching(arch, a, b, heads)
            rows.append({"family": family, "B": kind, "method": label, "before": before,
                         "after": block_distance(a, aligned),
                         "logits_vs_B": relative(b_logits, forward(written(b_model, arch, aligned), ids))})
        same = M.same_function(root / "A", folder_b, align=root / f"aligned-{'perm' if perms else 'group'}")
        rows.append({"family": family, "B": kind, "method": "neuromanifold same-function --align",
                     "before": same.aligned["before"], "after": same.aligned["after"],
                     "logits_vs_B": same.aligned["check"], "verdict": same.verdict,
                     "canonical_distance": same.max_difference})
    return rows


def canonical_row(family: str, root: Path, model_moved_folder: Path) -> dict:
    from neuromanifold.models import canonical as M  # noqa: PLC0415

    result = M.canonical(root / "A", root / "A-canonical")
    other = M.canonical(model_moved_folder, root / "gA-canonical")
    import safetensors.torch as st  # noqa: PLC0415

    sa = st.load_file(str(root / "A-canonical" / "model.safetensors"))
    sb = st.load_file(str(root / "gA-canonical" / "model.safetensors"))
    orbit = block_distance({k: v.numpy() for k, v in sa.items()}, {k: sb[k].numpy() for k in sa})
    return {"family": family, "check": result.check_difference, "other_check": other.check_difference,
            "orbit_distance": orbit, "not_quotiented": list(result.not_quotiented),
            "moves": result.moves}


# ------------------------------------------------------------------ report


FEATURES = ("norm gains = 1", "layernorm biases = 0", "readers centred", "writers centred",
            "unembed centred", "value biases = 0", "QK gauge (SVD form)",
            "OV gauge (SVD form)", "unembed bias != 0")


def _mark(features: dict, name: str) -> str:
    if name not in features:
        return "n/a"
    return "yes" if features[name] else "no"


def markdown(report: dict) -> str:
    v = report["versions"]
    lines = [f"transformer-lens {v['transformer-lens']}, transformers {v['transformers']}, "
             f"torch {v['torch']}, neuromanifold {v['neuromanifold']}", "",
             "TransformerLens (TransformerBridge.enable_compatibility_mode; relative logit "
             "difference from transformers' float64 forward of the original; orbit: TL(A) vs "
             "TL(g.A), largest relative parameter difference)", "",
             "| model | options | " + " | ".join(FEATURES) + " | logits raw | logits, vocab mean "
             "removed | orbit |", "|" + " --- |" * (len(FEATURES) + 5)]
    for r in report["transformer_lens"]:
        if "refused" in r:
            lines.append(f"| {r['family']} | {r['run']} | " + " | ".join("-" for _ in FEATURES)
                         + f" | {r['refused']} | | |")
            continue
        f = r["features"]
        lines.append(f"| {r['family']} | {r['run']} | " + " | ".join(_mark(f, n) for n in FEATURES)
                     + f" | {r['raw']:.1e} | {r['vocab_centred']:.1e} | {r['orbit_distance']:.2f} |")
    lines += ["", "Alignment of B to A (distances: largest relative block difference on the "
              "native blocks, same-function's measure; logits: the aligned model against B's, "
              "relative)", "",
              "| model | B | method | distance before | distance after | logits vs B |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in report["alignment"]:
        lines.append(f"| {r['family']} | {r['B']} | {r['method']} | {r['before']:.2f} | "
                     f"{r['after']:.1e} | {r['logits_vs_B']:.1e} |")
    lines += ["", "neuromanifold canonical (check: relative logit difference of the written "
              "checkpoint; orbit: canonical(A) vs canonical(g.A))", "",
              "| model | check | orbit | not quotiented |", "| --- | --- | --- | --- |"]
    for r in report["canonical"]:
        lines.append(f"| {r['family']} | {r['check']:.1e} | {r['orbit_distance']:.1e} | "
                     f"{', '.join(r['not_quotiented']) or '-'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="Also write the numbers here.")
    parser.add_argument("--families", default="gpt2,llama")
    args = parser.parse_args()
    try:
        import transformer_lens  # noqa: F401, PLC0415
    except ImportError:
        print("compare_canonical_anchors: transformer_lens is not installed; nothing to compare")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    logging.getLogger().setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    report = {"versions": _versions(), "transformer_lens": [], "alignment": [], "canonical": []}
    ids = torch.randint(0, VOCAB, (4, 12), generator=torch.Generator().manual_seed(SEED))
    with tempfile.TemporaryDirectory(prefix="anchors-") as tmp:
        for family in args.families.split(","):
            root = Path(tmp) / family
            model = build(family, SEED)
            save(model, root / "A")
            g_model, _ = moved(model, seed=SEED + 3, permutations_only=False)
            save(g_model, root / "gA")
            print(f"{family}: TransformerLens", file=sys.stderr)
            report["transformer_lens"] += tl_rows(family, model, root / "A", g_model, root / "gA", ids)
            print(f"{family}: alignment", file=sys.stderr)
            report["alignment"] += alignment_rows(family, model, root, ids)
            print(f"{family}: canonical", file=sys.stderr)
            report["canonical"].append(canonical_row(family, root, root / "gA"))
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
