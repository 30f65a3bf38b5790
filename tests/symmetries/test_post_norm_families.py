"""The post-norm families (BERT: post-norm blocks, an embedding norm, token types; docs/
decoder_features.md#post-norm-blocks-bert): every tangent lies in the Jacobian's kernel, each
family's proved generic count equals its own tangent rank (float; mod p on the certified path's
residues), the guards keep every other family away from these networks, and a shrunk BERT
converted from transformers reads `certified` at BERT's eps 1e-12 with the families' count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import flatten_blocks, random_block_weights
from neuromanifold.dimension.fp_dual import fp_ops, random_blocks_mod_p
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.errors import InputError
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.core.tokens import input_stream
from neuromanifold.dimension.fp import rank_mod_p
from neuromanifold.symmetries.registry import families_for, family, tangent_rows

POST_NORM = ("post-norm bias shifts", "post-norm readers' means", "post-norm write means",
             "embedding norm means", "token types beside the embedding")
BERT = dict(attention="softmax", temperature=2 ** 0.5, heads=2, values=2, residual=True,
            activation="gelu", norm="layernorm", bias=True, mlp_bias=True, positions="learned",
            vocab=7, norm_bias=True, post_norm=True, embed_norm=True, token_types=2,
            hidden_output=True)
NETWORKS = [
    dict(widths=(4, 4), keys=2, tokens=3, mlp=5, norm_eps=1e-3, **BERT),
    dict(widths=(4, 4, 4), keys=2, tokens=3, mlp=5, norm_eps=1e-3, **BERT),
    # without norm biases and MLP biases, one token type table, tanh: fewer families apply
    dict(widths=(4, 4), keys=2, tokens=3, mlp=3, attention="softmax", heads=2, values=2,
         residual=True, activation="tanh", norm="layernorm", positions="learned", vocab=6,
         post_norm=True, embed_norm=True, token_types=3, hidden_output=True),
    # transformers' grouping, a gated MLP in layer 1 only, logits, no embedding norm
    dict(widths=(4, 4, 4), keys=2, tokens=3, attention="softmax", heads=2, kv_heads=1, values=2,
         residual=True, mlp=(3, 0), mlp_kind="gated", activation="silu",
         norm="layernorm", bias=True, mlp_bias=True, norm_bias=True, post_norm=True, vocab=6),
    # lightning, unfactored values with biases, causal, no vocabulary
    dict(widths=(3, 3, 3), keys=2, tokens=3, residual=True, norm="layernorm", norm_bias=True,
         bias=True, mlp=2, mlp_bias=True, causal=True, post_norm=True),
]


def _rows(arch, blocks):
    rows, counts = tangent_rows(arch, blocks)
    out, offset = {}, 0
    for name, n in counts:
        out[name] = rows[offset: offset + n]
        offset += n
    return rows, out


@pytest.mark.parametrize("options", NETWORKS)
def test_post_norm_tangents_are_in_the_kernel_and_counts_are_their_ranks(options):
    arch = Architecture(**options)
    blocks = random_block_weights(arch, seed=1)
    X = input_stream(arch, seeded_generator(1, "inputs"))(40)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    rows, by_family = _rows(arch, blocks)
    assert (J @ rows.T).abs().max() < 1e-12 * J.abs().max() * rows.abs().max()
    built = [name for name in POST_NORM if by_family.get(name, torch.zeros(0)).shape[0]]
    assert built == [name for name in POST_NORM if family(name).applies(arch)]
    for name in built:
        assert torch.linalg.matrix_rank(by_family[name]).item() == family(name).count(arch), name
    # mod p, at the certified path's random residues
    p = 2147483629
    point = random_blocks_mod_p(arch, p, seeded_generator(0, "certified-upper"))
    rows_p, counts = tangent_rows(arch, point, fp_ops(p))
    offset = 0
    for name, n in counts:
        if name in built:
            block = rows_p[offset: offset + n].remainder(p).numpy()
            assert rank_mod_p(block, p) == family(name).count(arch), name
        offset += n


def test_guards_keep_unproved_families_off_bert_networks():
    """Only families acting inside a sub-layer, the embedding's moves and the post-norm families
    reach a network with BERT's options: pre-norm constructions (norm gains, stream changes,
    layernorm means of readers behind pre-norms) never do."""
    arch = Architecture(**NETWORKS[1])
    names = {f.name for f in families_for(arch)}
    assert names == {"per-head GL(a) on (Q, K)", "per-head GL(v) on (W, O)", "softmax query bias",
                     "value bias beside output bias", "embedding shift into positions", *POST_NORM}
    # post-norm without an embedding norm or token types: the embedding's norm families are off
    plain = Architecture(widths=(4, 4), keys=2, tokens=3, attention="softmax", residual=True,
                         mlp=3, norm="layernorm", post_norm=True, activation="gelu")
    assert {f.name for f in families_for(plain)} == {"per-head GL(a) on (Q, K)",
                                                      "post-norm readers' means",
                                                      "post-norm write means"}


def test_tied_logits_keep_the_embedding_families_off():
    """Tied logits read E: moving its rows (the embedding norm's means, the token types' move)
    would change them, so neither family applies."""
    arch = Architecture(widths=(4, 4), keys=2, tokens=3, attention="softmax", residual=True,
                        mlp=3, norm="layernorm", post_norm=True, vocab=6, tied=True,
                        embed_norm=True, token_types=2)
    names = {f.name for f in families_for(arch)}
    assert not names & {"embedding norm means", "token types beside the embedding"}
    assert "post-norm readers' means" in names


@pytest.mark.parametrize("options, word", [
    (dict(post_norm=True), "post_norm"),
    (dict(embed_norm=True, norm="layernorm", residual=True), "embed_norm"),
    (dict(token_types=2), "token_types"),
    (dict(hidden_output=True), "hidden_output"),
    (dict(token_types=1, vocab=5), "token_types"),
])
def test_bert_options_refused_in_one_line(options, word):
    with pytest.raises(InputError, match=word) as info:
        Architecture(widths=(4, 4), keys=2, tokens=3, **options)
    assert "\n" not in str(info.value)


def test_default_draws_unchanged_by_the_new_fields():
    arch = Architecture(widths=(4, 4), keys=2, tokens=3, residual=True, norm="layernorm", mlp=3,
                        vocab=5)
    post = Architecture(widths=(4, 4), keys=2, tokens=3, residual=True, norm="layernorm", mlp=3,
                        vocab=5, post_norm=True)
    a, b = random_block_weights(arch, 3), random_block_weights(post, 3)
    assert all(torch.equal(a[k], b[k]) for k in a)


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "bert_table.py"
    spec = importlib.util.spec_from_file_location("bert_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shrunk_bert_is_certified_at_its_eps_with_the_families_count():
    """A BertModel converted from transformers (hidden 4, 2 heads, 1 and 2 layers, V = 7 above
    hidden + 2, 2 token types, t = 3, eps 1e-12): the certified path proves the dimension, and it
    equals the parameters less the families' rank; the float reading, which misses the
    eps-limited directions (one per norm), is not settled. The page's table is this one."""
    pytest.importorskip("transformers")
    script = _script()
    rows = [script.row(size) for size in range(len(script.SIZES))]
    for (_, values), norms in zip(rows, (3, 5)):
        assert values["status"] == "certified"
        assert values["lower"] == values["upper"] == values["count"]
        assert values["float_status"] != "settled"
        assert values["float_rank"] == values["count"] - norms   # one eps direction per norm
    assert [v["count"] for _, v in rows] == [123, 208]
    assert script.table([text for text, _ in rows]) == script.page_block()


def test_rank_at_the_converted_berts_own_weights_is_certified():
    """At the transformers model's own weights (not a random point): the ball path proves the
    rank 123 = the families' count, where float64 alone reads 120 (the eps-limited directions)."""
    pytest.importorskip("transformers")
    from neuromanifold import rank_at_point

    _, arch, blocks = _script().shrunk_bert(0)
    point = rank_at_point(arch, blocks, method="certified")
    assert (point.status, point.lower_bound, point.upper_bound) == ("certified", 123, 123)
