"""Seeded randomness: one independent stream per (user seed, purpose).

Every random draw in the package comes from a stream named by its purpose ('weights',
'inputs', 'exact', 'fiber-witness', ...). Streams of different purposes never coincide,
whatever the seeds (hand-made offsets such as seed + 7 would make the inputs of seed s the
weights of seed s + 7).
"""

from __future__ import annotations

import hashlib
import math


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


# NOTE: [torch's integer draws without torch]
# torch's CPU generator is the 32-bit Mersenne Twister MT19937, seeded by init_genrand with the
# seed mod 2^32 (ATen's mt19937 engine); `torch.randint(0, n, shape, dtype=int64)` fills the
# tensor in C order, each entry `random() % n` from one 32-bit output when n < 2^28 and
# `random64() % n`, random64 = (first output << 32) | second, otherwise (ATen's
# DistributionsHelper.h, uniform_int_from_to_distribution). numpy's MT19937 bit generator,
# given the same init_genrand state, yields the same 32-bit outputs (`random_raw`), so
# `ResidueStream` reproduces those draws exactly: the F_p path of a small network runs on numpy
# without importing torch (1-2 s of start-up) and prints what the torch path prints.
# tests/core/test_seeds.py compares the two streams.

_MT_STATE = 624
_TORCH_RANDOM64_FROM = 2 ** 28


class ResidueStream:
    """Integer draws equal to those of `torch.Generator().manual_seed(seed)`, from numpy.

    `randint(n, shape)` returns what `torch.randint(0, n, shape, generator=g, dtype=torch.int64)`
    would, as an int64 numpy array, and advances the stream the same way (NOTE above).

    Example:
        >>> ResidueStream(5).randint(101, (2, 3)).shape
        (2, 3)
    """

    def __init__(self, seed: int):
        import numpy as np  # noqa: PLC0415

        key = [int(seed) & 0xFFFFFFFF]
        for i in range(1, _MT_STATE):   # init_genrand (Matsumoto and Nishimura, mt19937ar.c)
            key.append((1812433253 * (key[-1] ^ (key[-1] >> 30)) + i) & 0xFFFFFFFF)
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937",
                            "state": {"key": np.array(key, dtype=np.uint32), "pos": _MT_STATE}}

    def randint(self, n: int, shape: tuple[int, ...]):
        """Uniform integers in [0, n) of `shape` (int64), as torch.randint(0, n, shape) draws them."""
        import numpy as np  # noqa: PLC0415

        size = math.prod(shape)
        if n < _TORCH_RANDOM64_FROM:
            raw = self._bits.random_raw(size)
        else:
            pairs = self._bits.random_raw(2 * size)
            raw = (pairs[0::2] << np.uint64(32)) | pairs[1::2]
        return (raw % np.uint64(n)).astype(np.int64).reshape(shape)


def seeded_residues(seed: int, purpose: str) -> ResidueStream:
    """The integer draws of `seeded_generator(seed, purpose)`, without torch (`ResidueStream`)."""
    return ResidueStream(purpose_seed(seed, purpose))
