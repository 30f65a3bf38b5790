"""Token-id inputs of networks with a vocabulary: a finite input set (docs/decoder_features.md).

With `vocab=V` an input is a sequence of t token ids, fed to the map as one-hot columns
(V x t); there are V^t of them, so the dimension is the rank of the Jacobian stacked over all
V^t sequences, and N never needs to pass V^t. `TokenInputs` hands out distinct sequences: first
a few in which every token id occurs (a token in no sequence would leave its row of E out of the
Jacobian), then the others in a seeded random order (a random permutation while V^t <= 2^22;
beyond, uniform draws with the repeats skipped), and says when every one has been used.
"""

from __future__ import annotations

import torch

from .architecture import Architecture
from .formulas import covering_count  # noqa: F401  (torch-free, for the plans; re-exported)

# Up to this many sequences the order is one random permutation of all of them.
PERMUTED_SEQUENCES = 2 ** 22


def covering_sequences(arch: Architecture, gen: torch.Generator) -> list[tuple[int, ...]]:
    """Distinct sequences in which every token id occurs at least twice: two seeded random
    permutations of the vocabulary cut into sequences of t (the last one filled with random
    ids). A token that occurs in no sequence leaves its row of E out of the Jacobian, so the
    engines start with these (`covering_count` of them)."""
    V, t = arch.input_symbols, arch.tokens    # with token types: the (token, type) pairs
    out, seen = [], set()
    for _ in range(2):
        ids = torch.randperm(V, generator=gen).tolist()
        ids += torch.randint(0, V, ((-V) % t,), generator=gen).tolist()
        for k in range(0, len(ids), t):
            row = tuple(ids[k: k + t])
            if row not in seen:
                seen.add(row)
                out.append(row)
    return out


class TokenInputs:
    """Distinct one-hot token sequences of `arch` (vocab V, t tokens), drawn from `gen`: first
    the `covering_sequences`, then the others in a random order. With token types the symbols
    are the V T_types pairs, c = type V + token (`symbol_inputs`)."""

    def __init__(self, arch: Architecture, gen: torch.Generator):
        self.vocab, self.tokens, self.width = arch.input_symbols, arch.tokens, arch.widths[0]
        self.arch = arch
        self._label = "V^t" if arch.token_types is None else "(V T)^t"
        self.total = arch.n_sequences
        self.gen = gen
        self.used = 0
        self._cover = covering_sequences(arch, gen)
        self._seen: set[tuple[int, ...]] = set(self._cover)
        self._order = (torch.randperm(self.total, generator=gen) if self.total <= PERMUTED_SEQUENCES
                       else None)
        self._next = 0   # position in the permutation

    @property
    def exhausted(self) -> bool:
        """True once every one of the V^t sequences has been handed out."""
        return self.used >= self.total

    def _index_ids(self, index: int) -> tuple[int, ...]:
        return tuple((index // self.vocab ** k) % self.vocab for k in range(self.tokens))

    def take_ids(self, n: int) -> torch.Tensor:
        """The next min(n, V^t - used) distinct sequences of ids, shape (n, t)."""
        n = min(n, self.total - self.used)
        rows = []
        while len(rows) < n and self.used + len(rows) < len(self._cover):
            rows.append(self._cover[self.used + len(rows)])
        while len(rows) < n:
            if self._order is not None:
                row = self._index_ids(int(self._order[self._next]))
                self._next += 1
                if row in self._seen:      # a covering sequence, already handed out
                    continue
            else:
                row = tuple(torch.randint(0, self.vocab, (self.tokens,), generator=self.gen).tolist())
                if row in self._seen:
                    continue
                self._seen.add(row)
            rows.append(row)
        self.used += n
        return torch.tensor(rows, dtype=torch.int64).reshape(n, self.tokens)

    def take(self, n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The next distinct sequences as one-hot inputs, shape (n, V, t) ((n, V + T_types, t)
        with token types)."""
        return symbol_inputs(self.arch, self.take_ids(n), dtype)

    def note(self) -> str:
        """What the inputs were, for a result's notes."""
        small = ""
        if self.vocab <= self.width + 2 or self.tokens <= 1:
            small = (f"; a small vocabulary or sequence (V = {self.vocab} <= d_0 + 2 = "
                     f"{self.width + 2}, or t = 1): the {self.total} sequences are few, the "
                     "embeddings span at most V directions of the stream, and no generic "
                     "count of the stream's symmetries applies: the rank is measured, not a "
                     "closed form")
        if self.exhausted:
            return (f"finite inputs: every one of the {self._label} = {self.vocab}^{self.tokens} = "
                    f"{self.total} token sequences used (the rank is over the whole input set)"
                    + small)
        return (f"finite inputs: {self.used} of the {self._label} = {self.vocab}^{self.tokens} = {self.total} "
                "token sequences used, distinct, every token id in at least two of them, the "
                "rest in a seeded random order" + small)


def one_hot(ids: torch.Tensor, vocab: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Sequences of ids (n, t) as one-hot columns (n, V, t)."""
    return torch.nn.functional.one_hot(ids, vocab).transpose(-1, -2).to(dtype).contiguous()


def symbol_inputs(arch: Architecture, symbols: torch.Tensor,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """One-hot inputs (n, input_width, t) of symbol sequences (n, t): token ids (n, V, t), or,
    with token types, symbols c = type V + token as the token's one-hot rows (V) stacked on its
    type's (T_types)."""
    if arch.token_types is None:
        return one_hot(symbols, arch.vocab, dtype)
    return pair_inputs(symbols % arch.vocab, symbols // arch.vocab, arch.vocab, arch.token_types,
                       dtype)


def pair_inputs(ids: torch.Tensor, types: torch.Tensor, vocab: int, token_types: int,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Token ids and type ids (n, t) as stacked one-hot columns (n, V + T_types, t)."""
    return torch.cat([one_hot(ids, vocab, dtype), one_hot(types, token_types, dtype)], dim=-2)


def input_stream(arch: Architecture, gen: torch.Generator, dtype: torch.dtype = torch.float64):
    """n -> the next n inputs of `arch`: N(0, 1) sequences (n, d_0, t) drawn from `gen` exactly as
    the engines always have, or distinct one-hot token sequences with a vocabulary (then fewer
    than n once the V^t sequences run out). The stream's `tokens` is the `TokenInputs` or None."""
    if arch.vocab is None:
        def draw(n: int) -> torch.Tensor:
            return torch.randn((n, arch.widths[0], arch.tokens), generator=gen, dtype=dtype)
        draw.tokens = None
        return draw
    tokens = TokenInputs(arch, gen)

    def take(n: int) -> torch.Tensor:
        return tokens.take(n, dtype)
    take.tokens = tokens
    return take
