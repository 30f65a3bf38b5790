"""The last hidden state as a counted output of the families counted through the registry
(docs/models.md#families-counted-through-the-registry): the native hidden-state network
(`certify.native_network(..., "hidden")`: `hidden_output`, the embedding untied, no logits map;
tests/models/test_convert.py checks it equals transformers' base model): its full-size count
and a shrunk copy certified against the registry's count."""

import pytest

from neuromanifold.errors import InputError
from neuromanifold.models import certify, hf

def test_outputs_are_refused_in_one_line():
    config = hf.shipped_config("qwen3")
    with pytest.raises(InputError, match="'logits' or 'hidden'") as info:
        certify.native_network(config, 3, "both")
    assert "\n" not in str(info.value)
    small, _ = certify.shrunk_config(hf.shipped_config("bert"))
    assert certify.native_network(small, 3, "hidden").hidden_output
    with pytest.raises(InputError, match="no logits"):
        certify.native_network(small, 3, "logits")


def test_full_size_hidden_state_counts():
    """Qwen3-0.6B (tied): the hidden state has the logits' parameters and families; Phi-3-mini
    (untied): L's V d parameters and the families 'final norm gain' (d) and 'stream rotations
    behind norms' (d (d - 1) / 2) are the logits' only; Falcon and GPT-NeoX counted too."""
    expected = {"qwen3": (596_049_920, 592_234_752), "phi3": (3_722_578_944, 3_712_584_704)}
    for mt, (n, count) in expected.items():
        size = certify.full_size(hf.shipped_config(mt), output="hidden", check=True)
        assert (size["n_params"], size["count"], size["output"]) == (n, count, "hidden")
        names = {r["rule"] for r in size["rules"]}
        assert not names & {"final norm gain", "stream rotations behind norms"}
        if hf.have_transformers():
            assert size["model_class_parameters"] == n
    d, V = 3072, 32064
    logits = certify.full_size(hf.shipped_config("phi3"))
    hidden = certify.full_size(hf.shipped_config("phi3"), output="hidden")
    assert hidden["n_params"] == logits["n_params"] - V * d
    assert hidden["symmetry"] == logits["symmetry"] - d - d * (d - 1) // 2
    # layernorm biases, counted through their families: Falcon-7b (tied) has V = 65,024 more
    # in the hidden state (the all-ones part of each row of E, read once, by a layernorm)
    for mt, (n, count) in {"falcon": (6_921_720_704, 6_920_504_704),
                           "gpt_neox": (44_670_976, 44_255_098)}.items():
        size = certify.full_size(hf.shipped_config(mt), output="hidden", check=True)
        assert (size["n_params"], size["count"]) == (n, count)
    falcon = certify.full_size(hf.shipped_config("falcon"))
    assert falcon["count"] - 6_920_504_704 == 65_024


@pytest.mark.parametrize("model_type, expected", [("qwen3", (224, 192)), ("phi3", (248, 202)),
                                                   ("mistral", (216, 182))])
def test_shrunk_hidden_state_is_certified_at_the_registry_count(model_type, expected):
    """The shrunk hidden-state network (no logits) certified equal to the registry's count and,
    for a family with rules (mistral: untied, the logits' 244 parameters and 200 less L's 28
    and the logits' 4 + 6 families), to the rules' hidden-state count."""
    v = certify.validate(hf.shipped_config(model_type), output="hidden")
    assert v["output"] == "hidden" and not v["tied"]
    assert (v["n_params"], v["counted"]) == expected
    assert (v["certified"], v["status"], v["verified"]) == (expected[1], "certified", True)
    assert v["registry"]["count"] == expected[1]
