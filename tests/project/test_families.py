"""One list of the supported Hugging Face families (issue 39 item 7): `models.families`, which the
help strings, the error messages, the docs pages and the notebooks read (scripts/families_doc.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from neuromanifold.cli.app import main
from neuromanifold.models import convert, hf
from neuromanifold.models.families import COUNTING_RULES, FAMILIES, REGISTRY_COUNTED

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("families_doc", ROOT / "scripts" / "families_doc.py")
families_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(families_doc)

# How prose and help strings spell each family (model_type, or the model's own name).
SPELLINGS = {"gpt2": "gpt2", "gpt-2": "gpt2", "llama": "llama", "mistral": "mistral",
             "qwen2": "qwen2", "bert": "bert", "gemma": "gemma", "gpt_neox": "gpt_neox",
             "gpt-neox": "gpt_neox", "pythia": "gpt_neox", "falcon": "falcon", "qwen3": "qwen3",
             "phi3": "phi3", "phi-3": "phi3"}
_NAME = (r"`?(?<![\w-])(?:" + "|".join(sorted(map(re.escape, SPELLINGS), key=len, reverse=True))
         + r")(?![\w-])`?(?:\s*\([^()]*\))?")
_LIST = re.compile(rf"{_NAME}(?:(?:\s*(?:,|\band\b|\bor\b|\||/)\s*)+{_NAME})+", re.I)
# A row of a dated results table (the README's headline results): what was measured that day.
_DATED_ROW = re.compile(r"^\| \d{4}-\d{2}-\d{2} \|.*$", re.M)
MOST = 7  # a list naming at least this many families must name all of them


def named_lists(text: str) -> list[set[str]]:
    """The families of every list in `text` ("gpt2, llama and bert", "GPT-2 / BERT", ...)."""
    return [{SPELLINGS[re.sub(r"\s*\(.*", "", n, flags=re.S).strip("`").lower()]
             for n in re.findall(_NAME, m.group(0), re.I)} for m in _LIST.finditer(text)]


def incomplete_lists(text: str) -> list[set[str]]:
    """Lists of `text` naming most families but not all, generated lists and dated rows aside."""
    text = families_doc.SPAN.sub("", _DATED_ROW.sub("", text))
    return [names for names in named_lists(text) if MOST <= len(names) < len(FAMILIES)]


def _texts() -> dict[str, str]:
    """Every page, README and notebook markdown cell, by file."""
    out = {}
    for path in families_doc.pages():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "\n\n".join("".join(c["source"]) for c in json.loads(text)["cells"]
                               if c["cell_type"] == "markdown")
        out[path.relative_to(ROOT).as_posix()] = text
    return out


def _help_texts() -> dict[str, str]:
    """The help text of every command and option of the CLI, by `command option`."""
    import typer.main

    from neuromanifold.cli.app import app

    root = typer.main.get_command(app)
    out = {}
    for name, command in root.commands.items():
        out[name] = command.help or ""
        for param in command.params:
            out[f"{name} {param.opts[0] if hasattr(param, 'opts') else param.name}"] = \
                getattr(param, "help", None) or ""
    return out


def test_the_tiers_split_the_families_and_the_old_names_are_them():
    """Counting rules and registry counts split the families; hf's and the converter's names are
    the same tuples; one shipped config per family and no other; a model class per ruled family."""
    assert COUNTING_RULES + REGISTRY_COUNTED == FAMILIES and not set(COUNTING_RULES) & set(REGISTRY_COUNTED)
    assert hf.MODEL_TYPES == COUNTING_RULES and hf.SHIPPED == convert.CONVERTED == FAMILIES
    shipped = sorted(p.stem for p in (ROOT / "src" / "neuromanifold" / "models" / "configs").glob("*.json"))
    assert shipped == sorted(FAMILIES)
    assert all(hf.shipped_config(mt)["model_type"] == mt for mt in FAMILIES)
    assert sorted(hf.MODEL_CLASSES) == sorted(COUNTING_RULES)


def test_generated_table_and_lists_are_current():
    """docs/models.md's table and every inline list equal what scripts/families_doc.py writes."""
    assert families_doc.stale() == []


def test_the_pages_that_name_the_families_read_the_list():
    """The tutorial, the checkpoint page, the count notebook and docs/models.md name the families
    through generated lists of the right tier, and the table has a row per family."""
    texts = _texts()
    tiers = {name: {tier for tier, _ in families_doc.spans(text)} for name, text in texts.items()}
    assert "all" in tiers["docs/tutorial.md"] and "all" in tiers["docs/checkpoints.md"]
    assert "all" in tiers["docs/notebooks/count.ipynb"]
    assert {"rules", "registry"} <= tiers["docs/models.md"]
    table = families_doc.table().splitlines()[2:]
    assert [row.split(" | ")[0].strip("| ") for row in table] == list(FAMILIES)


def test_help_strings_name_the_list():
    """`count --model-type` names every family, `dim --hf-config` those with counting rules."""
    helps = _help_texts()
    assert named_lists(helps["count --model-type"]) == [set(FAMILIES)]
    assert named_lists(helps["dim --hf-config"]) == [set(COUNTING_RULES)]


def test_refusals_name_the_list(capsys, tmp_path):
    """A config of another type is refused by `count` naming every family, and by
    `dim --hf-config` naming those with counting rules (one line, exit 2)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "olmo2", "hidden_size": 8}))
    assert main(["count", str(path)]) == 2
    assert named_lists(capsys.readouterr().err) == [set(FAMILIES)]
    assert main(["dim", "--hf-config", str(path), "--tokens", "3"]) == 2
    assert named_lists(capsys.readouterr().err) == [set(COUNTING_RULES)]


@pytest.mark.parametrize("source", ["docs", "help"])
def test_no_text_lists_most_families_but_not_all(source):
    """No page, notebook or help string lists seven or more families yet not all of them (written
    by hand, a list would miss a family added to the package)."""
    texts = _texts() if source == "docs" else _help_texts()
    found = {name: incomplete_lists(text) for name, text in texts.items()}
    assert {name: lists for name, lists in found.items() if lists} == {}


def test_the_checks_can_fail():
    """A hand-written list of nine, a stale generated list and an unknown tier are each caught."""
    nine = "Reads GPT-2, Llama, Mistral, Qwen2, BERT, Gemma, GPT-NeoX / Pythia, Falcon and Qwen3."
    assert incomplete_lists(nine) == [set(FAMILIES) - {"phi3"}]
    assert incomplete_lists(f"| 2026-11-27 | {nine} |\n") == []   # a dated result stays as measured
    stale = "(<!-- families: all -->gpt2, llama<!-- /families -->)"
    assert families_doc.filled(stale) == f"(<!-- families: all -->{', '.join(FAMILIES)}<!-- /families -->)"
    assert incomplete_lists(stale) == []   # generated: rewritten by the script, not scanned
    with pytest.raises(ValueError, match=r"^`families` tier must be one of all, rules, registry; "
                       r"got 'some'\."):
        families_doc.filled("<!-- families: some --><!-- /families -->")
