"""The tangent constructions of the symmetry families of networks with heads, value widths,
residuals, MLPs and norms (the paper's model is their one-head instance), one function per family.
Which family applies where, its proof and its count are in `symmetries.registry`, which stacks
the tangents in the order listed below.

Every family gives directions along which the network function does not change (so they lie in
the kernel of the Jacobian), in a fixed order (docs/blocks.md); families overlap, so results
report each family's *incremental* rank (what it adds to the families before it):

  1. per-head GL(a) on (Q, K):   Q -> G Q, K -> G^{-T} K                      (every attention)
  2. per-head GL(v) on (W, O):   W -> G W, O -> O G^{-1}                      (value widths given)
  3. per-head rescaling:         Q -> c Q, value -> value / c                 (lightning)
  4. head mixing:                V_h -> V_h + e V_g, A_g -> A_g - e A_h       (lightning, a_i >= d_{i-1},
                                                                               v_i >= min(d_{i-1}, d_i))
  5. between-layer GL(d):        producer -> G producer, consumers -> . G^{-1} (no residual, no norm)
  6. MLP neuron rescaling:       row j of P times c, column j of U times c^-2 (square; c^-1 relu)
  7. unseen directions:          a producer's output along the readers' kernel, or a reader's
                                 columns along what no producer reaches     (no residual; with a
                                 norm only the readers' half, through the norm)
  8. norm gain rescaling:        g_k -> c g_k, column k of every consumer / c  (with a norm)
  9. layernorm mean directions:  a reader R of g * N(Z) -> R + x (1/g)^T, as 1^T N(Z)/g = 0 (layernorm)
 10. layernorm shifts:           a producer M -> M + 1 x^T, as layernorm ignores 1 (layernorm,
                                 no residual: every reader of M's output is behind a norm)
 11. one-token softmax:         every Q, K entry when the softmax has one token (t = 1); then
                                 also V_1 -> V_1 + E, V_h -> V_h - E (unfactored values), or
                                 GL(H v) on the heads' W stacked and O side by side (value widths)
 12. norm rotations:             producer -> G producer, readers R -> R D G^-1 D^-1 (D = diag(g))
                                 for orthogonal G (fixing 1 for layernorm)    (norm, no residual)
 13. one-token basis changes:    V_i -> B (I + V_i) - I, MLP i -> conjugated by B (P B^-1, B U),
                                 V_{i+1} -> (I + V_{i+1}) B^-1 - I for B in GL(d) (softmax,
                                 t = 1, residual, no norm; with value widths H v < d only the
                                 B the heads can follow; NOTE: [One-token basis changes])

The decoder options add families with their own constructions below (docs/decoder_features.md):
the rotary commutant (1', per key/value group), grouped key sums (14), the softmax query bias
(15), the value bias beside the output bias (16), output biases into the readers' biases (17,
sequential and parallel blocks), the input stream's shift into layer 1's biases (17'), an untied
embedding's shift into the positions (17''), the stream's basis, rotations and shifts with
embeddings, QK-norm and final-norm gains, layernorm shifts and norm rotations at the ends of
a stream without a residual (10', 12'), and with layernorm biases the mean directions taken back
by the readers' biases (9') and each norm's bias shifted into them (17''''), a norm's bias
beside bias-free readers (9''), the final gain with its bias (8'') and a parallel block's two
output biases traded (17''''').

The tangents are computed with an `ops` object (float torch, or residues mod p), so the same
code serves the numerical split and the exact upper bound.

NOTE: [Catalogue families beyond polynomials] Every family is a symmetry of the network for
every attention, activation and norm it is used with, so the certified upper bound of
non-polynomial blocks (`dimension.ball_dual`) uses them all:
  1, 2 the scores read Q, K only through Q^T K, the values W, O only through O W;
  3, 4 lightning only (scores linear in Q); the norm only changes the input the heads read;
  5, 7 no residual, no norm: the stream is written by rows and read by columns of linear maps
       (the activation acts after P, softmax after Q and K), so G and G^-1 (or a kernel) cancel;
       with a norm, 7's readers see D C M h / s (see `_unseen`), and the kernel is taken there;
  6    square (c^-2) and relu (c^-1: relu is positively homogeneous, and the tangent is taken
       at c = 1); gelu and tanh have no such scaling, so the family is left out for them;
  8    g * N(Z) is read only as R diag(g) N(Z) by linear readers R;
  9    layernorm's N(Z) has zero mean over features, so R diag(g) N(Z) is unchanged when
       R diag(g) gains x 1^T. The tangent x (1/g)^T is rational; times prod_j g_j it is the
       integer polynomial column k = x prod_{j != k} g_j, spanning the same line where no
       gain is 0 (rmsnorm has no such direction);
  10   layernorm(Y + 1 y^T) = layernorm(Y); without a residual the stream after a producer is
       read only through the next norm (the network's output is never normed, and `layer_stages`
       lists only boundaries with readers);
  11   a softmax over one token is the constant 1, so the layer is sum_h V_h N(z) (with value
       widths sum_h O_h W_h = [O_1 ... O_H] [W_1; ...; W_H], a product GL(H v) acts on);
  12   for orthogonal G, rmsnorm(G Y) = G rmsnorm(Y), and layernorm too when G 1 = 1; without a
       residual every reader R sees the stream as R D N(Y), so G D^-1 ... cancels. The tangent
       (E M, -R D E D^-1) for antisymmetric E (E 1 = 0 for layernorm) times prod_j g_j is an
       integer polynomial, as in 9;
  13   softmax only (t = 1 makes it constant; lightning's one-token layer is cubic in z), no
       norm (N(B z) != B N(z)), any activation (B acts outside the MLP's P and U); the
       tangents are rational (one-sided inverses) and, with narrow value widths, taken in the
       kernel of a matrix checked to have full rank, as in 7.
  10', 12' as 10 and 12, at the input stream (read only through layer 1's norm without a
       residual) and at the last one (read only by a final norm, or by untied logits alone);
  17', 17'' identities of the map for every attention and activation (17': no norm, every
       reader of the shifted stream adds its bias after reading).
The relu rescaling and every other tangent lie in the Jacobian's kernel wherever the map is
differentiable, which is all the bound needs (docs/certified_softmax.md).

The constructions live by feature, as the registry lists them: `attention` (scores),
`heads` (value maps and heads), `norms`, `mlps`, `stream` (between layers and at the ends) and
`decoder` (biases, positions, token types); `base` holds the arithmetic and the lookups they share.
"""

from .attention import key_gl_tangents, one_token_tangents, rotary_commutant_tangents  # noqa: F401
from .base import FLOAT_OPS, TangentOps  # noqa: F401
from .decoder import (  # noqa: F401
    bias_shift_tangents,
    embedding_position_tangents,
    input_kernel_shift_tangents,
    input_shift_tangents,
    parallel_output_bias_tangents,
    query_bias_tangents,
    token_type_tangents,
    unrotated_query_bias_tangents,
    value_bias_tangents,
)
from .heads import (  # noqa: F401
    gqa_head_mixing_tangents,
    head_mixing_tangents,
    head_rescaling_tangents,
    key_sum_tangents,
    value_gl_tangents,
)
from .mlps import neuron_rescaling_tangents  # noqa: F401
from .norms import (  # noqa: F401
    bias_free_mean_tangents,
    embedding_norm_tangents,
    final_gain_bias_tangents,
    final_gain_tangents,
    gain_bias_rescaling_tangents,
    gain_rescaling_tangents,
    layernorm_shift_tangents,
    mean_direction_tangents,
    norm_bias_mean_tangents,
    norm_bias_shift_tangents,
    norm_rotation_tangents,
    post_norm_bias_tangents,
    post_norm_reader_tangents,
    post_norm_write_tangents,
    qk_gain_tangents,
    qk_layernorm_shift_tangents,
    qk_norm_rescaling_tangents,
    shared_qk_gain_tangents,
)
from .stream import (  # noqa: F401
    basis_change_tangents,
    between_layer_tangents,
    biased_unseen_tangents,
    end_rotation_tangents,
    end_shift_tangents,
    stream_basis_tangents,
    stream_rotation_tangents,
    stream_shift_tangents,
    unseen_tangents,
)
