"""The catalogue split by feature (issue 39) keeps the registry's order and every tangent."""

import hashlib
import json
from pathlib import Path

import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.dimension.fp_dual import fp_ops, random_blocks_mod_p
from neuromanifold.models import certify
from neuromanifold.symmetries import catalogue
from neuromanifold.symmetries.registry import FAMILIES, families_for, tangent_rows

P = 2147483629
CONFIGS = Path(__file__).resolve().parents[2] / "src/neuromanifold/models/configs"

# Networks on which every registry family applies at least once (checked below).
NETWORKS = [
    Architecture((3, 5, 3), (2, 2), 3, heads=(2, 3), values=(2, 2), mlp=(3, 2)),
    Architecture((5, 5, 5), 2, 2, "softmax", heads=2, residual=True, mlp=3, norm="layernorm"),
    Architecture((3, 3), 3, 3, heads=3),
    Architecture((4, 4), 2, 1, "softmax", heads=2, residual=True, mlp=3),
    Architecture((3, 4, 3), (2, 2), 3, norm="rmsnorm", heads=(2, 2), mlp=(2, 2)),
    Architecture((3, 3, 3), 2, 3),
    Architecture((4, 4, 4), 2, 3, "softmax", heads=2, mlp=3, norm="layernorm"),
    Architecture((4, 4, 4), 4, 3, heads=2, mlp=2, activation="relu"),
    Architecture((4, 4, 4), 2, 3, heads=2, residual=True, bias=True, mlp_bias=True, mlp=3,
                 causal=True),
    Architecture((4, 4), 2, 1, "softmax", heads=2, residual=True, mlp=2, values=2),
    Architecture((4, 4, 4), 2, 3, heads=2, bias=True, mlp=3, mlp_bias=True, positions="learned",
                 vocab=6),
    Architecture((4, 4, 4), 2, 3, heads=2, mlp=3, vocab=6, tied=True),
    Architecture((4, 4, 4), 2, 3, heads=2, mlp=3, vocab=6),
    Architecture((4, 4, 4), 2, 3, "softmax", heads=2, bias=True, mlp=3),
    Architecture((4, 4, 4), 4, 3, "softmax", heads=2, bias=True, positions="rope", rope_pairs=1,
                 mlp=3),
    Architecture((4, 4, 4), 2, 3, heads=4, kv_heads=2, mlp=3),
    Architecture((4, 4, 4), 2, 3, heads=4, kv_heads=2, values=2, mlp=3),
    Architecture((4, 4, 4), 2, 3, "softmax", heads=2, residual=True, norm="layernorm",
                 qk_norm=True, mlp=3, vocab=6, final_norm=True),
    Architecture((4, 4, 4), 2, 3, heads=2, residual=True, norm="rmsnorm", qk_norm=True, mlp=3),
    Architecture((4, 4, 4), 2, 3, "softmax", heads=2, norm="layernorm", mlp=3, vocab=6,
                 final_norm=True),
    Architecture((4, 4, 4), 2, 3, "softmax", heads=2, residual=True, parallel=True, bias=True,
                 mlp=3, vocab=6),
]

# sha256 of the stacked F_p tangents and counts of NETWORKS and the shrunk shipped configs,
# computed with the single-file catalogue.py of 720e566 before the split.
BEFORE_SPLIT = "619bffaf28f5fdc0f7493441c903330b30710030a3cef118cadc42b3197a908c"


def _networks() -> list[Architecture]:
    nets = list(NETWORKS)
    for path in sorted(CONFIGS.glob("*.json")):
        config = certify.shrunk_config(json.loads(path.read_text()))[0]
        for output in ("logits", "hidden"):
            if output == "logits" and config["model_type"] == "bert":
                continue  # BertModel has no logits
            nets.append(certify.native_network(config, 3, output))
    return nets


def test_stacked_tangents_are_byte_identical_to_the_single_file_catalogue():
    """Every family's tangents, in the registry's order, equal those of the catalogue before its
    split by feature (one hash over 40 networks covering all 51 families, exact over F_p)."""
    nets = _networks()
    assert {f.name for arch in nets for f in families_for(arch)} == {f.name for f in FAMILIES}
    digest = hashlib.sha256()
    for arch in nets:
        residues = random_blocks_mod_p(arch, P, torch.Generator().manual_seed(1))
        rows, counts = tangent_rows(arch, residues, fp_ops(P))
        digest.update(repr(arch).encode())
        digest.update(repr(counts).encode())
        digest.update(rows.numpy().tobytes())
    assert digest.hexdigest() == BEFORE_SPLIT


def test_every_family_construction_lives_in_a_feature_module():
    """Each registry family's construction is defined in one of the catalogue's feature modules
    (attention, heads, norms, mlps, stream, decoder), and the package re-exports it."""
    features = {"attention", "heads", "norms", "mlps", "stream", "decoder"}
    for fam in FAMILIES:
        if fam.build is None:
            continue
        module = fam.build.__module__.rsplit(".", 1)[-1]
        assert module in features, (fam.name, fam.build.__module__)
        assert getattr(catalogue, fam.build.__name__) is fam.build
