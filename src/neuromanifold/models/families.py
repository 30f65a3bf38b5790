"""The Hugging Face model families the package reads, written once (docs/models.md, "Supported
families").

`FAMILIES` are the `model_type`s the converter turns into native networks (`convert.CONVERTED`),
each with a shipped config.json (models/configs/<type>.json, `hf.SHIPPED`) that `count
--model-type` reads: `count` counts all of them; `rank`, `canonical`, `same-function`,
`track` and the checkpoint readers read their checkpoints. `COUNTING_RULES` are
those with hand-written counting rules (`hf.read_config`, `hf.MODEL_TYPES`): `dim --hf-config`
measures these, and `count --numerical` cross-checks them on transformers' own model;
`count` counts the others (`REGISTRY_COUNTED`) through the symmetry registry on the converted
network (`certify.full_size`).

Help strings and error messages name them through `listed`; the docs hold blocks that
scripts/families_doc.py writes from these tuples, and tests/project/test_families.py fails when
a page, a notebook or a help string lists another set. Nothing is imported here, so the command
line builds its help from these at start-up for free.
"""

from __future__ import annotations

COUNTING_RULES = ("gpt2", "llama", "mistral", "qwen2", "bert", "gemma")
REGISTRY_COUNTED = ("gpt_neox", "falcon", "qwen3", "phi3")
FAMILIES = COUNTING_RULES + REGISTRY_COUNTED


def listed(families: tuple[str, ...] = FAMILIES) -> str:
    """'gpt2, llama, ..., phi3': the families as help strings, messages and docs name them."""
    return ", ".join(families)
