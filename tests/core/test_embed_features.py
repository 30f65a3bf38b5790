"""Decoder features of issue 21, slice B: learned and rotary positions (docs/decoder_features.md)."""

import hashlib
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import block_forward, block_layout, random_block_weights
from neuromanifold.core.tokens import TokenInputs, one_hot
from neuromanifold.core.positions import pair_rotation, pythagorean_triples, rotary_fractions
from neuromanifold.dimension.api import neuromanifold_dim
from neuromanifold.dimension.fp_dual import forward_dual_mod_p
from neuromanifold.errors import InputError
from neuromanifold.symmetries.registry import family

P = 2147483629


def _quiet(arch, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method=method, **kw)


def test_pythagorean_angles_in_the_issues_order():
    """Primitive triples by hypotenuse: (3,4,5), (5,12,13), (8,15,17), ...; cos = x/z, sin = y/z."""
    assert pythagorean_triples(6) == ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25),
                                      (20, 21, 29), (12, 35, 37))
    assert pair_rotation(2) == (Fraction(5, 13), Fraction(12, 13))
    assert len({x / z for x, _, z in pythagorean_triples(40)}) == 40   # distinct angles


def test_rotary_matrices_are_exact_powers_of_orthogonal_rotations():
    """R^i is orthogonal with rational entries, R^i = R^1 ... R^1, and fixes unrotated coordinates."""
    Rs = [np.array(M, dtype=object) for M in rotary_fractions(5, 2, 4)]
    eye = np.array([[Fraction(int(r == c)) for c in range(5)] for r in range(5)], dtype=object)
    assert (Rs[0] == eye).all()
    for i in range(1, 4):
        assert (Rs[i].dot(Rs[i].T) == eye).all()
        assert (Rs[i] == Rs[i - 1].dot(Rs[1])).all()
    assert Rs[3][4, 4] == 1 and Rs[1][0, 0] == Fraction(3, 5) and Rs[1][1, 0] == Fraction(4, 5)


@pytest.mark.parametrize("kwargs, says", [
    (dict(positions="rope", rope_pairs=3), "at most a_i // 2 = 2"),
    (dict(rope_pairs=1), "given only with positions 'rope'"),
    (dict(positions="spiral"), "`positions` must be one of"),
    (dict(positions="rope", rope_pairs=(1, 1)), "one entry per layer"),
    (dict(positions="rope", rope_pairs=-1), "rope_pairs"),
])
def test_bad_position_options_are_one_line_errors(kwargs, says):
    with pytest.raises(InputError, match=says) as err:
        Architecture((4, 4), 4, 3, **kwargs)
    assert "\n" not in str(err.value)


def test_position_fields_layout_and_parameters():
    """Learned positions add T (d_0 x t) first; rope adds no parameter; the default pairs are one
    spelling; only non-default fields are listed; repr evaluates back."""
    base = Architecture((4, 4, 4), 4, 3, heads=2)
    learned = Architecture((4, 4, 4), 4, 3, heads=2, positions="learned")
    rope = Architecture((4, 4, 4), 4, 3, heads=2, positions="rope", rope_pairs=(2, 2))
    partial = Architecture((4, 4, 4), (4, 2), 3, positions="rope", rope_pairs=(1, 0))
    assert block_layout(learned)[0] == ("T", (4, 3), 0)
    assert learned.n_params == base.n_params + 12 and rope.n_params == base.n_params
    assert rope.rope_pairs is None and rope.rotated_pairs == (2, 2)
    assert partial.rotated_pairs == (1, 0) and partial.is_block
    assert Architecture((3, 3), 2, 3, positions="rope").is_block
    assert "positions" not in base.to_dict() and partial.to_dict()["rope_pairs"] == [1, 0]
    assert str(partial).endswith("positions=rope rope_pairs=1,0")
    assert eval(repr(partial)) == partial                              # noqa: S307
    # rope adds no parameter: the same draws as without it
    w0, w1 = random_block_weights(base, 5), random_block_weights(rope, 5)
    assert all(torch.equal(w0[k], w1[k]) for k in w0)


def test_existing_draws_stay_bit_identical():
    """The seeded draws of networks without the new fields are those of main (hashes recorded
    before the fields were added)."""
    archs = {
        "5429f225ac2871e6": Architecture((3, 3, 3), 2, 3, heads=2),
        "3d70ef0bfc7b739a": Architecture((4, 4), 2, 3, values=2, residual=True, mlp=3,
                                         norm="layernorm"),
        "f52c039a682f4c95": Architecture((3, 3), 2, 2, attention="softmax", heads=2, mlp=2,
                                         activation="gelu", norm="rmsnorm", residual=True),
        "9ba02b94634d856d": Architecture((5, 3, 5), (2, 1), 3, attention="softmax",
                                         temperature=4.0, heads=(2, 1)),
    }
    for digest, arch in archs.items():
        w = random_block_weights(arch, 3)
        got = hashlib.sha256(b"".join(w[n].numpy().tobytes() for n, _, _ in block_layout(arch)))
        assert got.hexdigest()[:16] == digest


@pytest.mark.parametrize("arch", [
    Architecture((5, 5), 5, 3, heads=2, residual=True, mlp=3, positions="rope", rope_pairs=1),
    Architecture((4, 4, 4), (4, 2), 3, positions="rope"),
    Architecture((4, 4), 3, 3, heads=2, residual=True, mlp=3, positions="learned"),
    Architecture((3, 3), 2, 2, vocab=4, positions="learned"),
    Architecture((3, 3), 2, 3, vocab=4, tied=True, residual=True, mlp=2, positions="rope"),
    Architecture((3, 3), 2, 2, heads=2, residual=True, mlp=2, parallel=True, positions="rope"),
])
def test_one_map_in_four_arithmetics_agrees_with_positions(arch):
    """block_forward with rotary or learned positions, embeddings and logits: exact Fractions,
    float64 (to rounding), the F_p dual (the rationals reduced mod p) and arb balls compute the
    same values."""
    import flint

    from neuromanifold.dimension.ball_dual import ball_block_forward

    gen = torch.Generator().manual_seed(11)
    blocks = {n: torch.randint(-2, 3, s, generator=gen).to(torch.float64)
              for n, s, _ in block_layout(arch)}
    X = torch.randint(-2, 3, (2, arch.widths[0], arch.tokens), generator=gen).to(torch.float64)
    if arch.vocab is not None:
        X = one_hot(torch.randint(0, arch.vocab, (2, arch.tokens), generator=gen), arch.vocab)
    as_fraction = np.frompyfunc(lambda v: Fraction(int(v)), 1, 1)
    exact = block_forward(arch, {n: as_fraction(b.numpy()) for n, b in blocks.items()},
                          as_fraction(X.numpy()))
    floats = block_forward(arch, blocks, X).numpy()
    assert np.abs(exact.astype(float) - floats).max() <= 1e-12 * max(1.0, np.abs(floats).max())
    fp = forward_dual_mod_p(arch, {n: b.to(torch.int64).remainder(P) for n, b in blocks.items()},
                            X.to(torch.int64).remainder(P), P).x
    assert all(int(f) == e.numerator % P * pow(e.denominator, -1, P) % P
               for f, e in zip(fp.flatten().tolist(), exact.flat))
    flint.ctx.prec = 128
    balls, _ = ball_block_forward(arch, blocks, X, [0])
    assert all((b - flint.arb(e.numerator) / e.denominator).contains(0)
               for b, e in zip(balls.flat, exact.flat))


@pytest.mark.parametrize("arch, dim", [
    (Architecture((4, 4), 4, 3, positions="rope"), 43),
    (Architecture((4, 4), 4, 3, positions="rope", rope_pairs=1), 41),
    (Architecture((4, 4), 4, 3, positions="learned"), 43),
    (Architecture((3, 3, 3), (2, 2), 3, positions="rope"), None),
])
def test_exact_rank_equals_numerical_rank_with_positions(arch, dim):
    """Polynomial networks with rational rotations or learned positions: the exact rank over F_p
    equals the float64 rank, and both meet the symmetry upper bound (certified)."""
    numerical, exact = _quiet(arch, "numerical"), _quiet(arch, "certified")
    assert exact.dimension == numerical.dimension and exact.status == "certified"
    assert numerical.status == "settled"
    if dim is not None:
        assert exact.dimension == dim


def test_rotary_breaks_key_gl_to_the_commutant_and_certifies_softmax():
    """(Q, K) keep 2 R + (a - 2 R)^2 symmetry directions per head under rotary positions
    (incremental ranks of the registry), and the softmax network is certified by balls."""
    for pairs, count in ((None, 4), (1, 6), (0, 16)):
        arch = Architecture((4, 4), 4, 3, "softmax", positions="rope", rope_pairs=pairs)
        r = _quiet(arch, "certified")
        key = "rotary commutant on (Q, K)" if pairs != 0 else "per-head GL(a) on (Q, K)"
        assert r.symmetries[key] == count == family(key).count(arch)
        assert r.status == "certified" and r.dimension == arch.n_params - count
    one_token = Architecture((4, 4), 4, 1, positions="rope")   # R^0 = I: nothing rotates
    assert family("per-head GL(a) on (Q, K)").count(one_token) == 16


def test_rope_leaves_head_mixing_and_the_ambient_bound_out():
    """Head mixing (A_g -= e A_h) and the one-layer ambient bound assume a position-free score:
    neither is used with rotary positions (a wrong upper bound would certify a wrong value)."""
    from neuromanifold.core.formulas import ambient_bound, block_formula
    from neuromanifold.symmetries.registry import family_tangents

    arch = Architecture((3, 3), 3, 3, heads=2, positions="rope")
    assert ambient_bound(arch) is None and not block_formula(arch).hypotheses_hold
    tangents = dict(family_tangents(arch, random_block_weights(arch, 0)))
    assert tangents["head mixing"] == [] and tangents["per-head GL(a) on (Q, K)"] == []
    r = _quiet(arch, "certified")
    assert r.status == "certified" and r.dimension == arch.n_params - 2 * 3 - 2


def test_docs_tables_are_recomputed():
    """The tables of docs/decoder_features.md (positions) are what scripts/embed_table.py computes."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "embed_table.py"
    spec = importlib.util.spec_from_file_location("embed_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert table.tables() == table.page_block()
    assert table.vocab_tables() == table.page_block(table.VOCAB_BEGIN, table.VOCAB_END)
    assert table.norm_tables() == table.page_block(table.NORM_BEGIN, table.NORM_END)


@pytest.mark.parametrize("kwargs, says", [
    (dict(vocab=1), "`vocab` must be an integer >= 2"),
    (dict(tied=True), "used with a vocabulary"),
    (dict(vocab=3, tied=True, widths=(3, 4)), "d_l = d_0"),
])
def test_bad_vocabulary_options_are_one_line_errors(kwargs, says):
    kwargs = {"widths": (3, 3), **kwargs}
    with pytest.raises(InputError, match=says) as err:
        Architecture(keys=2, tokens=2, **kwargs)
    assert "\n" not in str(err.value)


def test_vocabulary_layout_parameters_and_widths():
    """E (V x d_0) first, T after it, L (V x d_l) last unless tied; inputs and outputs are V wide."""
    untied = Architecture((3, 4), 2, 2, vocab=5, positions="learned")
    tied = Architecture((3, 3), 2, 2, vocab=5, tied=True)
    names = [n for n, _, _ in block_layout(untied)]
    assert names[:2] == ["E", "T"] and names[-1] == "L"
    assert block_layout(untied)[-1][1] == (5, 4) and "L" not in dict((n, 0) for n, _, _ in block_layout(tied))
    assert untied.n_params == 15 + 6 + Architecture((3, 4), 2, 2).n_params + 20
    assert (untied.input_width, untied.output_width, untied.n_sequences) == (5, 5, 25)
    assert str(tied).endswith("vocab=5 tied") and eval(repr(tied)) == tied   # noqa: S307
    assert tied.to_dict()["vocab"] == 5 and tied.to_dict()["tied"]


def test_first_token_sequences_cover_every_id_and_large_vocabularies_reach_the_bound():
    """Every token id occurs in the first sequences (a token in none would leave its row of E out
    of the Jacobian: V = 40, t = 3 read d_0 = 4 below the bound before), and the engines start
    with them."""
    from neuromanifold.core.tokens import covering_count

    arch = Architecture((4, 4), 4, 3, vocab=40, residual=True, positions="rope")
    ids = TokenInputs(arch, torch.Generator().manual_seed(0)).take_ids(covering_count(arch))
    assert torch.bincount(ids.flatten(), minlength=40).min() >= 2
    for method in ("numerical", "certified"):
        r = _quiet(arch, method)
        assert (r.dimension, r.upper_bound) == (347, 347) and r.status in ("settled", "certified")


def test_token_inputs_are_distinct_and_say_when_used_up():
    gen = torch.Generator().manual_seed(0)
    tokens = TokenInputs(Architecture((3, 3), 2, 2, vocab=4), gen)
    first, rest = tokens.take_ids(10), tokens.take_ids(100)
    seqs = {tuple(r) for r in torch.cat([first, rest]).tolist()}
    assert len(seqs) == 16 and rest.shape == (6, 2) and tokens.exhausted
    assert "every one of the V^t = 4^2 = 16" in tokens.note() and "small vocabulary" in tokens.note()
    X = one_hot(first, 4)
    assert X.shape == (10, 4, 2) and torch.equal(X.sum(dim=1), torch.ones(10, 2, dtype=X.dtype))


@pytest.mark.parametrize("kwargs, dim, stream", [
    (dict(vocab=5), 29, 18),                                    # GL(3) x GL(3)
    (dict(vocab=5, tied=True), 23, 9),                          # one GL(3)
    (dict(vocab=5, residual=True), 38, 9),                      # GL(3) of the stream
    (dict(vocab=5, residual=True, tied=True), 29, 3),           # O(3)
])
def test_embeddings_exact_equals_numerical_and_the_stream_families(kwargs, dim, stream):
    """Lightning with token ids: the exact rank over F_p (every sequence used) equals the float64
    rank, meets the bound (certified), and the stream family's count is GL or O(d)."""
    arch = Architecture((3, 3), 3, 2, **kwargs)
    numerical, exact = _quiet(arch, "numerical"), _quiet(arch, "certified")
    assert numerical.dimension == exact.dimension == dim and exact.status == "certified"
    assert exact.symmetries["stream basis at the embedding and logits"] == stream
    assert any("every one of the V^t = 5^2 = 25" in n for n in numerical.notes)


def test_small_vocabulary_is_a_measured_lower_bound_and_says_so():
    """V = 3 <= d_0 + 2: no certificate from the catalogue, and the notes say why."""
    r = _quiet(Architecture((3, 3), 3, 2, vocab=3), "certified")
    assert (r.dimension, r.status) == (15, "lower-bound")
    assert any("small vocabulary" in n for n in r.notes)
    with pytest.raises(InputError, match="at most V"):
        _quiet(Architecture((3, 3), 3, 2, vocab=3), "numerical", samples=10)


@pytest.mark.parametrize("kwargs, says", [
    (dict(qk_norm=True), "`qk_norm` must be used with a norm kind"),
    (dict(final_norm=True), "`final_norm` must be used with a norm kind"),
    (dict(parallel=True, residual=True), "`parallel` must be used with residual paths and an MLP"),
    (dict(parallel=True, mlp=2), "`parallel` must be used with residual paths and an MLP"),
])
def test_bad_norm_and_parallel_options_are_one_line_errors(kwargs, says):
    with pytest.raises(InputError, match=says) as err:
        Architecture((3, 3), 2, 2, **kwargs)
    assert "\n" not in str(err.value)


def test_norm_blocks_layout_and_gains():
    """qn/kn follow Q/K, f follows the last layer and precedes L; all three are gains near 1."""
    arch = Architecture((3, 3), 2, 2, heads=2, norm="rmsnorm", qk_norm=True, final_norm=True,
                        vocab=4)
    names = [n for n, _, _ in block_layout(arch)]
    assert names[:6] == ["E", "g_1", "Q_1_1", "qn_1_1", "K_1_1", "kn_1_1"]
    assert names[-2:] == ["f", "L"] and dict((n, s) for n, s, _ in block_layout(arch))["f"] == (3, 1)
    w = random_block_weights(arch, 0)
    assert all(float((w[n] - 1).abs().max()) < 1.5 for n in names if n[0] in "qkf")
    assert str(arch).endswith("qk_norm final_norm") and eval(repr(arch)) == arch  # noqa: S307


def test_parallel_block_is_z_plus_attention_plus_mlp():
    """A parallel layer is Z + att(Z) + mlp(Z), the MLP reading the layer's input."""
    par = Architecture((3, 3), 2, 2, residual=True, mlp=2, parallel=True)
    att = Architecture((3, 3), 2, 2, residual=True)
    w = random_block_weights(par, 1)
    X = torch.randn(2, 3, 2, dtype=torch.float64)
    mlp = w["U_1"] @ (w["P_1"] @ X) ** 2
    attention = block_forward(att, {k: w[k] for k in ("Q_1_1", "K_1_1", "V_1_1")}, X)
    assert torch.allclose(block_forward(par, w, X), attention + mlp, atol=1e-12)


def test_qk_norm_float_rank_below_the_bound_is_never_settled():
    """QK-norm: only eps breaks scaling a head's queries, so the float rank (50) misses
    directions the balls prove (52 = the bound): numerical says ambiguous, certified proves."""
    arch = Architecture((4, 4), 4, 2, "softmax", norm="rmsnorm", qk_norm=True)
    numerical, certified = _quiet(arch, "numerical"), _quiet(arch, "certified")
    assert (numerical.dimension, numerical.status) == (50, "ambiguous")
    assert any("QK-norm" in n for n in numerical.notes)
    assert (certified.dimension, certified.status) == (52, "certified")
    assert certified.symmetries["QK-norm gain balance"] == 4 == family("QK-norm gain balance").count(arch)
    assert certified.symmetries["per-head GL(a) on (Q, K)"] == 0


def test_parallel_exact_equals_numerical_and_one_token_basis_changes_are_left_out():
    arch = Architecture((4, 4), 4, 2, residual=True, mlp=2, parallel=True)
    assert _quiet(arch, "numerical").dimension == _quiet(arch, "certified").dimension == 45
    one_token = Architecture((3, 3, 3), 2, 1, "softmax", residual=True, mlp=2, parallel=True)
    r = _quiet(one_token, "certified")
    assert r.symmetries["one-token basis changes"] == 0 and r.status in ("certified", "lower-bound")
    assert r.dimension <= r.upper_bound


KERNEL_ARCHS = [
    Architecture((4, 4, 4), (4, 2), 3, heads=(2, 1), positions="rope", rope_pairs=(1, 1)),
    Architecture((3, 3), 3, 2, vocab=4, positions="learned"),
    Architecture((3, 3, 3), 2, 2, vocab=4, tied=True, positions="learned", mlp=(2, 0)),
    Architecture((3, 3), 3, 2, "softmax", vocab=4, residual=True, mlp=2, values=2),
    Architecture((3, 3), 3, 2, vocab=4, tied=True, residual=True, heads=2),
    Architecture((4, 4), 4, 2, "softmax", norm="rmsnorm", qk_norm=True, positions="rope",
                 rope_pairs=1, heads=2),
    Architecture((3, 3), 3, 2, norm="rmsnorm", residual=True, vocab=4, final_norm=True, mlp=2,
                 parallel=True),
    Architecture((3, 3), 3, 2, "softmax", norm="layernorm", residual=True, vocab=4, tied=True,
                 final_norm=True, mlp=2, positions="learned"),
    Architecture((3, 3), 3, 2, norm="layernorm", residual=True, vocab=4, final_norm=True,
                 positions="rope"),
    Architecture((3, 3, 3), 3, 2, norm="layernorm", vocab=4, final_norm=True),
]


@pytest.mark.parametrize("arch", KERNEL_ARCHS, ids=str)
def test_every_family_tangent_is_in_the_jacobian_kernel(arch):
    """The registry's tangents (new families included) are kernel vectors of the float Jacobian
    at a random point of networks with the new features (the soundness of every upper bound)."""
    from neuromanifold.core.blocks import flatten_blocks
    from neuromanifold.core.tokens import input_stream
    from neuromanifold.dimension.jacobians import block_jacobian
    from neuromanifold.symmetries.registry import tangent_rows

    blocks = random_block_weights(arch, 2)
    X = input_stream(arch, torch.Generator().manual_seed(3))(6)
    J = block_jacobian(arch, flatten_blocks(arch, blocks), X)
    T, counts = tangent_rows(arch, blocks)
    assert T.shape[0] > 0
    image = (J @ T.T).abs().max() / (J.abs().max() * max(1.0, float(T.abs().max())))
    assert float(image) < 1e-10, counts


def test_stream_families_behind_norms_certify():
    """Stream rotations (O(3)) close the tied rmsnorm bound; stream shifts close a layernorm one;
    a final norm with tied logits leaves the rotations out."""
    tied = _quiet(Architecture((3, 3), 3, 2, norm="rmsnorm", residual=True, vocab=5, tied=True),
                  "certified")
    assert (tied.dimension, tied.status) == (29, "certified")
    assert tied.symmetries["stream rotations behind norms"] == 3
    final = _quiet(Architecture((3, 3), 3, 2, norm="rmsnorm", residual=True, vocab=5, tied=True,
                                final_norm=True), "certified")
    assert final.symmetries["stream rotations behind norms"] == 0 and final.status == "certified"
    shifts = _quiet(Architecture((3, 3), 3, 2, norm="layernorm", residual=True, mlp=2,
                                 final_norm=True), "certified")
    assert (shifts.dimension, shifts.status) == (16, "certified")
    assert shifts.symmetries["stream shifts behind layernorm"] > 0


def test_engines_without_the_features_refuse_them_in_one_line():
    """The degree engine (integer polynomials, continuous inputs) refuses what it cannot
    compute, never computing something else. (The rank at given weights and the fiber
    comparison take token inputs: tests/cli/test_rank*.py, tests/geometry.)"""
    from neuromanifold.degrees.polymap import check_polynomial

    rope, vocab = Architecture((3, 3), 2, 2, positions="rope"), Architecture((3, 3), 2, 2, vocab=3)
    for call, says in [(lambda: check_polynomial(rope), "positions"),
                       (lambda: check_polynomial(vocab), "vocab")]:
        with pytest.raises(InputError, match=says) as err:
            call()
        assert "\n" not in str(err.value)
