"""Replay the version-1 rules on a version-2 eq14_map store: which cause left each item uncertified.

Usage: PYTHONPATH=src python benchmarks/eq14_causes.py eq14_map.sqlite [-v]

For every lightning item with some a_i = 1 (version 1 certified all others), at the same F_p point
(seed 0): the version-1 upper bound (old symmetrised hidden-block count, no read-out symmetry),
the bound with the corrected count only, and whether the first six rounds of the recorded rank
history (version 1 stopped there) fell short. Prints the count per cause (-v: every item). For
items whose bound was wrong, version 1 sized N by that bound, so "also stopped early" is
approximate there; the early-stop-only items are exact replays.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import sys


def old_block(a: int, m: int, symmetric: bool) -> int:
    """The version-1 count of the hidden block (too high when symmetric and a >= 2)."""
    r = min(a, m)
    bound = r * (2 * m - r)
    return min(bound, m * (m + 1) // 2) if symmetric else bound


def bound_without_readout(arch, weights, p: int, use_old_count: bool) -> int:
    """n_params - rank_p(known + hidden tangents), the bound before the read-out symmetry."""
    import torch

    import neuromanifold.dimension.modular as mod
    from neuromanifold.symmetries.paper import symmetry_tangents
    from neuromanifold.dimension.exact import staircase_boundaries

    new_block = mod.hidden_block_rank
    mod.hidden_block_rank = old_block if use_old_count else new_block
    try:
        known, _ = symmetry_tangents(arch, weights)
        T = torch.cat([known % p, mod.hidden_symmetry_tangents(arch, weights, p)[0]])
    finally:
        mod.hidden_block_rank = new_block
    return arch.n_params - mod.staircase_rank_mod_p(T, staircase_boundaries(arch), p)[0]


def main() -> None:
    from neuromanifold import Architecture
    from neuromanifold.core.seeds import seeded_generator
    from neuromanifold.dimension.fp import DEFAULT_PRIME as P
    from neuromanifold.dimension.modular import random_weights_mod_p

    conn = sqlite3.connect(sys.argv[1])
    counts: collections.Counter = collections.Counter()
    query = ("SELECT widths, keys, tokens, dimension, result_json FROM results "
             "WHERE attention = 'lightning' AND status = 'certified' AND seed = 0")
    for w, k, t, dim, js in conn.execute(query):
        arch = Architecture(tuple(map(int, w.split(","))), tuple(map(int, k.split(","))), t)
        if 1 not in arch.keys:
            continue
        history = json.loads(js)["rank_history"]
        W = random_weights_mod_p(arch, P, seeded_generator(0, "exact"))
        u_old = bound_without_readout(arch, W, P, True)
        u_mid = bound_without_readout(arch, W, P, False)
        if max(r for _, r in history[:6]) == u_old:
            continue  # version 1 certified it
        causes = []
        if len(history) > 6 and history[5][1] < dim:
            causes.append("early stop")
        if u_old > u_mid:
            causes.append("hidden block count")
        if u_mid > dim:
            causes.append("read-out symmetry")
        key = " + ".join(causes) or "unexplained"
        counts[key] += 1
        if "-v" in sys.argv:
            print(f"{key}: widths {w}, keys {k}", flush=True)
    print(f"{sum(counts.values())} items version 1 left uncertified: {dict(counts)}")


if __name__ == "__main__":
    main()
