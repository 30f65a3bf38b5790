"""Canonical forms of native blocks (docs/canonical.md): for every converted family's tiny seeded
network, the canonical form computes the same function, is constant on orbits of the group it
quotients by (random elements of every quotiented and discrete family), is idempotent, its
moves invert, a perturbation outside the group changes it, and broken rules are caught."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from neuromanifold.models.convert import hidden_state, logits
from neuromanifold.symmetries import canonical as C

pytest.importorskip("transformers")


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "convert_table.py"
    spec = importlib.util.spec_from_file_location("convert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _script()
FAMILY_CASES = {
    "gpt2": lambda: CASES.gpt2_case(0), "gpt2-gelu": lambda: CASES.gpt2_case(2),
    "llama": lambda: CASES.rotary_case("llama", 0), "mistral": lambda: CASES.rotary_case("mistral", 2),
    "qwen2": lambda: CASES.rotary_case("qwen2", 1), "qwen3": lambda: CASES.rotary_case("qwen3", 0),
    "gpt_neox": lambda: CASES.neox_case(0), "gpt_neox-seq": lambda: CASES.neox_case(1),
    "gemma": lambda: CASES.gemma_case(0), "bert": lambda: CASES.bert_case(1),
    "bert-small": lambda: CASES.bert_case(0), "bert-3heads": lambda: CASES.bert_case(2),
    "falcon-mq": lambda: CASES.falcon_case(0), "falcon-bias": lambda: CASES.falcon_case(1),
    "falcon-new": lambda: CASES.falcon_case(2), "falcon-one-norm": lambda: CASES.falcon_case(3),
    "phi3": lambda: CASES.phi3_case(0), "phi3-tied": lambda: CASES.phi3_case(1),
}
# The registry family each move kind of `random_group_element` draws from.
KIND_FAMILIES = {
    "fold gain": {"norm gain rescaling", "gain and bias rescaling"},
    "bias into readers": {"layernorm bias into readers' biases"},
    "fold final gain": {"final norm gain", "final norm gain and bias"},
    "query bias shift": {"softmax query bias", "softmax query bias on unrotated coordinates"},
    "value bias shift": {"value bias beside output bias"},
    "key GL": {"per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)"},
    "value GL": {"per-head GL(v) on (W, O)"},
    "shared qk balance": {"shared QK-norm gain balance"},
    "neuron rescaling": {"MLP neuron rescaling"},
    "stream rotation": {"stream rotations behind norms", "stream rotations with norm biases"},
    "reader means": {"layernorm means with reader biases"},
    "add constants": {"stream shifts behind layernorm"},
    "embedding means": {"embedding norm means"},
    "token type shift": {"token types beside the embedding"},
    "embedding shift": {"embedding shift into positions"},
    "output bias trade": {"parallel output bias trade"},
    "bias-free readers": {"layernorm bias beside bias-free readers"},
    "post-norm bias shift": {"post-norm bias shifts"},
    "post-norm reader means": {"post-norm readers' means"},
    "post-norm write means": {"post-norm write means"},
}
TOL = 1e-10


@pytest.fixture(scope="module", params=sorted(FAMILY_CASES))
def case(request):
    made = FAMILY_CASES[request.param]()
    arch, blocks, ids = made[1], {k: v.numpy() for k, v in made[2].items()}, made[3]
    if len(made) > 4:            # BERT: token ids with their type ids (both types occur)
        ids = (ids, made[4])
    return request.param, arch, blocks, ids, C.canonical_form(arch, blocks)


def _out(arch, blocks, ids):
    t = {k: torch.as_tensor(v) for k, v in blocks.items()}
    if isinstance(ids, tuple):
        return hidden_state(arch, t, *ids)
    return hidden_state(arch, t, ids) if arch.hidden_output else logits(arch, t, ids)


def _diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max(float(np.abs(a[k] - b[k]).max()
                     / max(np.abs(a[k]).max(), np.abs(b[k]).max(), 1e-300)) for k in a)


def test_the_canonical_form_computes_the_same_function(case):
    _, arch, blocks, ids, form = case
    f0, f1 = _out(arch, blocks, ids), _out(arch, form.blocks, ids)
    assert float((f0 - f1).abs().max() / f0.abs().max()) < 1e-12
    assert form.moves


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_group_elements_leave_it_unchanged(case, seed):
    """g x has the canonical form of x, to 1e-10, for a random element g of every quotiented
    family and every discrete one (heads, groups, neurons); g x is the same function."""
    _, arch, blocks, ids, form = case
    moves = C.random_group_element(arch, blocks, seed)
    moved = C.apply_moves(arch, blocks, moves)
    assert _diff(blocks, moved) > 1e-3                           # g really moves the weights
    f0, f1 = _out(arch, blocks, ids), _out(arch, moved, ids)
    assert float((f0 - f1).abs().max() / f0.abs().max()) < 1e-11
    if _degenerate(form):
        return
    assert _diff(form.blocks, C.canonical_form(arch, moved).blocks) < TOL


def _degenerate(form) -> bool:
    """A head whose QK form has rank below its width (gpt2-gelu: one head of width a = d, its
    readers centred to rank d - 1) has more symmetries than its group: the form says so and is
    not claimed unique there."""
    notes = [n for n in form.notes if "rank-deficient" in n]
    return bool(notes) and all("left unfixed" in n or "left as" in n for n in notes)


def test_only_the_degenerate_case_is_degenerate(case):
    name, _, _, _, form = case
    assert _degenerate(form) == (name == "gpt2-gelu")


def test_the_random_element_covers_every_quotiented_family(case):
    """The invariance test is not vacuous: every family the form quotients by, and the head and
    neuron permutations, are drawn."""
    _, arch, blocks, _, form = case
    kinds = {m.kind for m in C.random_group_element(arch, blocks, 0)}
    drawn = set().union(*(KIND_FAMILIES.get(k, set()) for k in kinds))
    assert set(form.quotiented) <= drawn
    assert "neuron permutation" in kinds and "head permutation" in kinds
    assert not set(form.quotiented) & set(form.not_quotiented)


def test_idempotent_and_invertible(case):
    _, arch, blocks, _, form = case
    assert _diff(form.blocks, C.canonical_form(arch, form.blocks).blocks) < TOL
    assert _diff(blocks, C.apply_moves(arch, form.blocks, form.moves, inverse=True)) < 1e-12


def test_a_perturbation_outside_the_group_changes_it(case):
    _, arch, blocks, _, form = case
    rng = np.random.default_rng(7)
    bumped = {k: v + 1e-3 * rng.normal(size=v.shape) for k, v in blocks.items()}
    assert _diff(form.blocks, C.canonical_form(arch, bumped).blocks) > 1e-5


def test_alignment_recovers_the_weights_of_a_moved_copy(case):
    """align_moves on the canonical forms of x and g x, then x's moves undone: x again."""
    _, arch, blocks, _, form = case
    if _degenerate(form):
        return
    moved = C.apply_moves(arch, blocks, C.random_group_element(arch, blocks, 3))
    other = C.canonical_form(arch, moved)
    matched = C.apply_moves(arch, other.blocks, C.align_moves(arch, form.blocks, other.blocks))
    assert _diff(blocks, C.apply_moves(arch, matched, form.moves, inverse=True)) < 1e-9


def test_alignment_undoes_a_permutation_that_sorting_would_not(case):
    """Two canonical forms that differ by a head and neuron permutation plus noise: the
    assignment finds the permutation (the distance after alignment is the noise's)."""
    _, arch, _, _, form = case
    rng = np.random.default_rng(5)
    moves = [m for m in C.random_group_element(arch, form.blocks, 4) if "permutation" in m.kind]
    other = C.apply_moves(arch, form.blocks, moves)
    other = {k: v + 1e-6 * rng.normal(size=v.shape) for k, v in other.items()}
    aligned = C.apply_moves(arch, other, C.align_moves(arch, form.blocks, other))
    assert max(float(np.abs(form.blocks[k] - aligned[k]).max()) for k in aligned) < 1e-4
    assert max(float(np.abs(form.blocks[k] - other[k]).max()) for k in other) > 1e-2


MUTANTS = {"no signs": "gpt2", "no balance": "gpt2", "no phase": "mistral", "no sort": "llama",
           "no stream": "phi3", "no embedding means": "bert", "no token types": "bert",
           "no positions shift": "bert", "no trade": "gpt_neox", "no bias-free": "falcon-mq",
           "no final bias-free": "gpt_neox", "no post-norm bias shift": "bert",
           "no post-norm reader means": "bert", "no post-norm write means": "bert",
           "no biased stream": "gpt_neox", "no biased stream, sequential": "gpt_neox-seq",
           "no helmert signs": "falcon-bias"}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_broken_rules_are_caught(mutant, monkeypatch):
    """Mutants of the rules: the invariance test fails for them (on the family they break)."""
    made = FAMILY_CASES[MUTANTS[mutant]]()
    arch, blocks = made[1], {k: v.numpy() for k, v in made[2].items()}
    real_add = C._add

    def without(kind, keep=lambda params: False):
        def add(form, arch, k, **params):
            if k != kind or keep(params):
                real_add(form, arch, k, **params)
        monkeypatch.setattr(C, "_add", add)

    if mutant == "no signs":
        monkeypatch.setattr(C, "_sign_of_largest", lambda row: 1.0)
    elif mutant == "no balance":
        monkeypatch.setattr(C, "_balanced", lambda Mq, Mk, tol=1e-12: np.eye(Mq.shape[0]))
    elif mutant == "no phase":
        real = np.angle
        monkeypatch.setattr(C.np, "angle", lambda z: 0.0 * real(z))
    elif mutant == "no sort":
        monkeypatch.setattr(C, "_fix_neurons", lambda arch, form, names: None)
    elif mutant == "no stream":
        monkeypatch.setattr(C, "_fix_stream", lambda arch, form, names: None)
    elif mutant == "no embedding means":
        without("embedding means")
    elif mutant == "no token types":
        without("token type shift")
    elif mutant == "no positions shift":
        without("embedding shift")
    elif mutant == "no trade":
        without("output bias trade")
    elif mutant == "no bias-free":         # the pre-norms' sites (Falcon's bias-free readers)
        without("bias-free readers")
    elif mutant.startswith("no biased stream"):
        monkeypatch.setattr(C, "_fix_stream_biased", lambda arch, form, names: None)
    elif mutant == "no helmert signs":     # the biased stream's axes with the eigensolver's signs
        real_fix, real_sign, inside = C._fix_stream_biased, C._sign_of_largest, []

        def unsigned(arch, form, names):
            inside.append(True)
            try:
                real_fix(arch, form, names)
            finally:
                inside.pop()
        monkeypatch.setattr(C, "_fix_stream_biased", unsigned)
        monkeypatch.setattr(C, "_sign_of_largest", lambda row: 1.0 if inside else real_sign(row))
    elif mutant == "no final bias-free":   # only the final norm's site (NeoX's untied logits)
        without("bias-free readers", keep=lambda params: params["bias"] != "cf")
    else:
        without(mutant.removeprefix("no "))
    form = C.canonical_form(arch, blocks)
    worst = max(_diff(form.blocks, C.canonical_form(
        arch, C.apply_moves(arch, blocks, C.random_group_element(arch, blocks, s))).blocks)
        for s in range(2))
    assert worst > 1e-6


def test_not_quotiented_names_the_registry_families_left():
    made = FAMILY_CASES["mistral"]()
    assert C.not_quotiented(made[1]) == ()
    assert "stream rotations behind norms" in C.quotiented(made[1])
    made = FAMILY_CASES["gpt2"]()
    assert {"stream shifts behind layernorm", "layernorm means with reader biases"} <= set(
        C.quotiented(made[1]))
    made = FAMILY_CASES["falcon-mq"]()
    assert C.not_quotiented(made[1]) == ()
    assert "layernorm bias beside bias-free readers" in C.quotiented(made[1])
    for name in ("gpt_neox", "gpt_neox-seq", "falcon-bias", "bert"):
        assert C.not_quotiented(FAMILY_CASES[name]()[1]) == (), name
    made = FAMILY_CASES["gpt_neox"]()
    assert {"stream rotations with norm biases", "parallel output bias trade"} <= set(
        C.quotiented(made[1]))
    made = FAMILY_CASES["bert"]()
    assert {"embedding shift into positions", "token types beside the embedding",
            "embedding norm means"} <= set(C.quotiented(made[1]))


def test_a_family_without_tangents_is_not_listed():
    """GPT-2 (tied logits, every norm's readers with biases) has no site of `layernorm bias
    beside bias-free readers`: the registry builds no tangent of it there (count 0), so it is
    neither quotiented nor left."""
    from neuromanifold.symmetries.registry import family, family_tangents  # noqa: PLC0415

    made = FAMILY_CASES["gpt2"]()
    name = "layernorm bias beside bias-free readers"
    assert family(name).applies(made[1]) and family(name).count(made[1]) == 0
    assert dict(family_tangents(made[1], made[2]))[name] == []
    assert name not in C.quotiented(made[1]) + C.not_quotiented(made[1])


def test_the_docs_family_table_is_the_codes():
    """docs/canonical.md's family table is what scripts/canonical_table.py prints now."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "canonical_table.py"
    spec = importlib.util.spec_from_file_location("canonical_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from doc_blocks import read_block  # noqa: PLC0415 (the script put its folder on the path)

    assert read_block(module.PAGE, module.BEGIN, module.END) == module.table()


@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "bert", "falcon-bias", "phi3-tied"])
def test_swapping_two_heads_of_a_network_without_groups_keeps_it(name):
    """Heads of a layer without key/value groups are each their own group: the sort runs across
    all of them (found by the TransformerLens comparison: a swap of GPT-2's heads 1 and 2 moved
    its canonical form by 1.4)."""
    made = FAMILY_CASES[name]()
    arch, blocks = made[1], {k: v.numpy() for k, v in made[2].items()}
    assert arch.kv_heads is None and arch.head_counts[0] > 1
    perm = list(range(1, arch.head_counts[0] + 1))
    perm[0], perm[1] = 2, 1
    swapped = C.apply_moves(arch, blocks, [C.Move("head permutation", {"layer": 1, "perm": perm})])
    assert _diff(blocks, swapped) > 1e-3
    assert _diff(C.canonical_form(arch, blocks).blocks,
                 C.canonical_form(arch, swapped).blocks) < TOL


@pytest.mark.parametrize("name", ["falcon-mq", "gpt_neox"])
def test_a_bias_of_mean_zero_beside_bias_free_readers(name):
    """u^T c = 0 (u = 1/g; an untrained checkpoint's zero bias) is a degenerate point of the
    bias-free family: the readers' means are free there too. The form says so, is still constant
    on the orbit, keeps the function, and its moves undo exactly (the readers' means are moved
    first, so that the bias-free move drops nothing)."""
    made = FAMILY_CASES[name]()
    arch, blocks, ids = made[1], {k: v.numpy().copy() for k, v in made[2].items()}, made[3]
    sites = C._bias_free_sites(arch, blocks)
    assert sites
    for gain, bias, _ in sites:
        g, c = blocks[gain], blocks[bias]
        blocks[bias] = c - g * float((c / g).sum()) / g.size
    form = C.canonical_form(arch, blocks)
    assert sum("degenerate point" in n for n in form.notes) == len(sites)
    f0, f1 = _out(arch, blocks, ids), _out(arch, form.blocks, ids)
    assert float((f0 - f1).abs().max() / f0.abs().max()) < 1e-12
    assert _diff(blocks, C.apply_moves(arch, form.blocks, form.moves, inverse=True)) < 1e-12
    assert _diff(form.blocks, C.canonical_form(arch, form.blocks).blocks) < TOL
    for seed in range(2):
        moved = C.apply_moves(arch, blocks, C.random_group_element(arch, blocks, seed))
        assert _diff(form.blocks, C.canonical_form(arch, moved).blocks) < TOL
