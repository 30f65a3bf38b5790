"""transformers' own forward at float64 round-off: its eager attention, rotary tables and
RMSNorm statistics are float32 by design; these replace them by the same formulas in float64.

`register()` adds an explicit eager attention ("float64_eager": softmax in the model's dtype,
never fused) to transformers' attention interface; `float64_model(model)` recomputes a rotary
model's tables and every RMSNorm in float64 (transformers' formulas, Gemma's (1 + w) included).
Used where two forwards are compared at float64 round-off: the converter's table
(scripts/convert_table.py) and the canonical checkpoint's check (`models.canonical`).
"""

from __future__ import annotations

import types

import torch

ATTENTION = "float64_eager"


def float64_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):  # noqa: ARG001 (transformers' signature)
    """transformers' eager attention in float64 throughout; explicit, never fused."""
    n = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(n, dim=1), value.repeat_interleave(n, dim=1)
    w = query @ key.transpose(2, 3) * scaling
    if attention_mask is not None:
        w = w + attention_mask[:, :, :, : key.shape[-2]]
    return (torch.softmax(w, dim=-1) @ value).transpose(1, 2).contiguous(), w


def register() -> None:
    from transformers import AttentionInterface  # noqa: PLC0415
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS  # noqa: PLC0415
    AttentionInterface.register(ATTENTION, float64_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


def attention_for(model_type: str) -> str:
    """The attention implementation that computes in float64: Falcon's own eager class (float64
    in a float64 model), the explicit one above for every other family."""
    return "eager" if model_type == "falcon" else ATTENTION


def float64_model(model) -> None:
    """The rotary tables (where the model has them) and RMSNorm statistics of `model` in
    float64 (transformers' formulas; it computes them in float32)."""
    rot = next((m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")), None)
    if rot is not None:
        params = getattr(model.config, "rope_parameters", None) or {}
        base = params.get("rope_theta", getattr(model.config, "rope_theta", 10000.0))
        dim = 2 * rot.inv_freq.numel()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

        def rotary(self, x, position_ids):  # noqa: ARG001 (replaces a method)
            freqs = position_ids[..., None].double() * inv.to(x.device)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

        rot.forward = types.MethodType(rotary, rot)

    def rms(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def gemma_rms(self, x):                     # Gemma's norm scales by (1 + w)
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * (1.0 + self.weight)

    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm"):
            mod.forward = types.MethodType(rms if hasattr(mod, "variance_epsilon") else gemma_rms, mod)
