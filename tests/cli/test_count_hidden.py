"""`count` for the families counted through the registry: the last hidden state's count line
beside the logits', and `--validate --hidden-state` certifying the shrunk hidden-state network
(docs/models.md#families-counted-through-the-registry)."""

import json
import os

import pytest

from neuromanifold.cli import main

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_count_prints_the_hidden_state_count(capsys):
    assert main(["count", "--model-type", "phi3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("hidden state"))
    assert "3,712,584,704 of 3,722,578,944 parameters" in line
    assert "'stream rotations behind norms', 'final norm gain'" in line
    assert main(["count", "--model-type", "qwen3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["hidden"]["count"], out["hidden"]["output"], out["count"]) == (
        592_234_752, "hidden", 592_234_752)
    assert main(["count", "--model-type", "gpt_neox"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("hidden state"))
    assert "44,255,098 of 44,670,976 parameters" in line     # layernorm biases: counted too
    assert "'final norm gain and bias', 'stream rotations with norm biases'" in line


def test_hidden_state_validation_is_opt_in(capsys):
    assert main(["count", "--model-type", "qwen3", "--hidden-state"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--validate" in err


def test_count_validate_hidden_state_qwen3(capsys):
    """Shrunk Qwen3: the logits (224 parameters) and the hidden state (224: tied, E read once)
    both certified 192 = the registry's count."""
    pytest.importorskip("transformers")
    assert main(["count", "--model-type", "qwen3", "--validate", "--hidden-state"]) == 0
    out = capsys.readouterr().out
    assert "shrunk qwen3 (native, logits, tied)" in out and "shrunk qwen3 (native, hidden)" in out
    assert out.count("verdict          verified: certified == counted") == 2
