"""Seeded randomness: one independent stream per (user seed, purpose).

Every random draw in the package comes from a stream named by its purpose ('weights',
'inputs', 'exact', 'fiber-witness', ...). Streams of different purposes never coincide,
whatever the seeds (hand-made offsets such as seed + 7 would make the inputs of seed s the
weights of seed s + 7).
"""

from __future__ import annotations

import hashlib


def purpose_seed(seed: int, purpose: str) -> int:
    """A 63-bit integer seed derived from the user seed and a purpose string.

    Example:
        >>> purpose_seed(0, "weights") != purpose_seed(0, "inputs")
        True
    """
    digest = hashlib.blake2b(f"{int(seed)}:{purpose}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def seeded_generator(seed: int, purpose: str):
    """A torch.Generator for one purpose of one user seed."""
    import torch  # noqa: PLC0415

    return torch.Generator().manual_seed(purpose_seed(seed, purpose))


def seeded_rng(seed: int, purpose: str):
    """A numpy Generator for one purpose of one user seed."""
    import numpy as np  # noqa: PLC0415

    return np.random.default_rng(purpose_seed(seed, purpose))
