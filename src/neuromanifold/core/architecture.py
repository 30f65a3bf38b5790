"""The architecture of a deep self-attention network (MATH.md sections 1, 2, 5)."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import ATTENTION_KINDS, bad_value, check_choice, check_int, check_int_tuple, check_positive_float
from .limits import check_sizes


@dataclass(frozen=True)
class Architecture:
    """A stack of l self-attention layers acting on t tokens.

    Math: layer i maps Z in R^{d_{i-1} x t} to V_i Z S(Z^T Q_i^T K_i Z) in R^{d_i x t}, where
    Q_i, K_i in R^{a_i x d_{i-1}}, V_i in R^{d_i x d_{i-1}} and S is the identity (lightning,
    Eq. 1) or exp(./temperature) normalised over the aggregated token j (softmax, Eq. 15).

    Notation (paper -> here): d = (d_0, ..., d_l) -> `widths`, a = (a_1, ..., a_l) -> `keys`,
    t -> `tokens`.

    Example:
        >>> arch = Architecture(widths=(3, 3, 3), keys=(2, 2), tokens=3)
        >>> arch.n_params == 2 * (2 * 2 * 3 + 3 * 3)
        True
    """

    widths: tuple[int, ...]
    keys: tuple[int, ...]
    tokens: int
    attention: str = "lightning"
    temperature: float = 1.0

    def __post_init__(self) -> None:
        widths = check_int_tuple("widths", self.widths, min_length=2, example="5,3,3,5")
        keys = check_int_tuple("keys", self.keys, min_length=1, example="2,2,2")
        if len(keys) != len(widths) - 1:
            raise bad_value(
                "keys", f"one key width per layer ({len(widths) - 1} for widths {list(widths)})",
                list(keys), f"Pass {len(widths) - 1} comma-separated key widths, e.g. "
                f"{','.join(['2'] * (len(widths) - 1))}.")
        tokens = check_int("tokens", self.tokens, minimum=1, fix="Pass t >= 1, e.g. 3.")
        check_sizes(widths, keys, tokens)
        attention = check_choice("attention", self.attention, ATTENTION_KINDS)
        temperature = check_positive_float("temperature", self.temperature)
        if attention == "lightning" and temperature != 1.0:
            raise bad_value("temperature", "1 for lightning attention (it scales softmax logits only)",
                            temperature, "Drop the temperature, or use attention 'softmax'.")
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "attention", attention)
        object.__setattr__(self, "temperature", temperature)

    @property
    def n_layers(self) -> int:
        """l, the number of attention layers."""
        return len(self.keys)

    @property
    def n_params(self) -> int:
        """Math: sum_i (2 a_i d_{i-1} + d_i d_{i-1}) (MATH.md section 2)."""
        return sum(2 * a * d_in + d_out * d_in
                   for a, d_in, d_out in zip(self.keys, self.widths[:-1], self.widths[1:]))

    @property
    def is_polynomial(self) -> bool:
        """True for lightning networks: polynomial maps with integer coefficients."""
        return self.attention == "lightning"

    def layer_shapes(self) -> list[dict[str, tuple[int, int]]]:
        """Shapes of (Q_i, K_i, V_i) for each layer i = 1..l."""
        return [{"Q": (a, d_in), "K": (a, d_in), "V": (d_out, d_in)}
                for a, d_in, d_out in zip(self.keys, self.widths[:-1], self.widths[1:])]

    def param_layout(self) -> list[tuple[str, tuple[int, int], int]]:
        """(name, shape, offset) of every block of the flat parameter vector, in order.

        The order is Q_1, K_1, V_1, Q_2, K_2, V_2, ...; each block is flattened row-major.
        """
        layout, offset = [], 0
        for i, shapes in enumerate(self.layer_shapes(), start=1):
            for name in ("Q", "K", "V"):
                shape = shapes[name]
                layout.append((f"{name}_{i}", shape, offset))
                offset += shape[0] * shape[1]
        return layout

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        out = {"widths": list(self.widths), "keys": list(self.keys), "tokens": self.tokens,
               "attention": self.attention}
        if self.attention == "softmax":
            out["temperature"] = self.temperature
        return out

    def __str__(self) -> str:
        text = (f"{self.attention} widths={','.join(map(str, self.widths))} "
                f"keys={','.join(map(str, self.keys))} tokens={self.tokens}")
        if self.attention == "softmax" and self.temperature != 1.0:
            text += f" temperature={self.temperature:g}"
        return text
