"""`count` on hostile and windowed configs (issue 38 items 4, 5, 9; issue 39): every field it
reads checked per family before the rules, the converter or transformers see it; sliding
windows said, refused or noted; the parameter table from the config without transformers, and
the class built on the meta device agreeing with it for every shipped config."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from neuromanifold.cli import main
from neuromanifold.models import certify, hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command line run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _names(mt: str) -> tuple[str, str, str]:
    """(hidden, heads, layers) field names of a family."""
    return ("n_embd", "n_head", "n_layer") if mt == "gpt2" else (
        "hidden_size", "num_attention_heads", "num_hidden_layers")


def _cases():
    """(family, field, value; None: the field removed) of the probe, for every shipped family."""
    rows = []
    for mt in hf.SHIPPED:
        hidden, heads, layers = _names(mt)
        rows += [(mt, hidden, None), (mt, hidden, "1024"), (mt, heads, 0), (mt, layers, 1e9),
                 (mt, hidden, 1e40), (mt, "tie_word_embeddings", "false")]
        if mt not in ("gpt2", "bert"):
            rows += [(mt, "rope_scaling", "linear"), (mt, "rope_theta", "1e4")]
    rows += [("falcon", "multi_query", "no"), ("falcon", "parallel_attn", 1),
             ("falcon", "num_kv_heads", 3), ("falcon", "ffn_hidden_size", -1),
             ("gpt_neox", "rotary_pct", "0.25"), ("gpt_neox", "use_parallel_residual", "yes"),
             ("phi3", "rope_parameters", [1]), ("qwen3", "head_dim", 0),
             ("mistral", "sliding_window", -5), ("mistral", "sliding_window", 0),
             ("phi3", "sliding_window", "2"), ("gpt2", "activation_function", ["gelu"]),
             ("bert", "type_vocab_size", 0), ("llama", "rope_scaling", {"rope_type": 3})]
    return rows


@pytest.mark.parametrize("mt, field, value", _cases())
def test_count_refuses_a_bad_field_in_one_line_naming_it(tmp_path, mt, field, value):
    """Missing, quoted, zero, huge or mistyped fields of every family: exit 2, one line in the
    house template naming `<file>: <field>` (never a KeyError, TypeError, ZeroDivisionError,
    MemoryError, AttributeError or transformers' own dataclass text), nothing on stdout."""
    cfg = hf.shipped_config(mt)
    if value is None:
        cfg.pop(field)
    else:
        cfg[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = run_cli(["count", str(path)])
    lines = err.strip().splitlines()
    assert (code, out, len(lines)) == (2, "", 1), err
    head = field.split(".")[0]
    assert f"`{path}: {head}" in lines[0] and " must be " in lines[0], lines[0]
    assert "Traceback" not in err and "widths" not in lines[0]


def test_sliding_windows_are_said_refused_or_noted(tmp_path):
    """A window at least t tokens wide changes nothing on t tokens (noted); a narrower one is
    counted on t = window tokens (plain count, no --tokens needed) or dropped with a note
    (--validate); a window the family does not use is noted as ignored."""
    def write(mt, **fields):
        path = tmp_path / f"{mt}-{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({**hf.shipped_config(mt), **fields}))
        return str(path)

    code, out, err = run_cli(["count", write("phi3", sliding_window=2)])
    assert code == 0, err
    assert "the converted native network on 2 tokens" in out
    assert "sliding_window 2 is narrower than the 3 tokens counted by default: counted on t = 2" in out
    code, out, _ = run_cli(["count", "--model-type", "phi3"])
    assert "sliding_window 2047 >= t = 3 tokens: it changes nothing on 3 tokens" in out
    code, out, _ = run_cli(["count", "--model-type", "qwen2"])
    assert "sliding_window 131072 is ignored: use_sliding_window is not true" in out
    code, out, _ = run_cli(["count", write("llama", sliding_window=5)])
    assert "sliding_window 5 is ignored: transformers' llama class has no sliding window" in out
    code, out, err = run_cli(["count", write("mistral", sliding_window=1), "--validate"])
    assert code == 0, err
    assert "each token attends only to itself" in out and "the window is dropped" in out
    assert "--tokens 1" not in out   # advice that led to `not verified`, exit 1 (issue 38 audit)
    assert "verified: certified == counted (of the model without its sliding window" in out
    code, out, err = run_cli(["count", write("mistral", sliding_window=-5), "--validate"])
    assert code == 2 and "sliding_window` must be a whole number from 1" in err


def test_a_window_of_one_token_is_counted_without_it_and_tokens_below_two_refused(tmp_path):
    """Audit of issue 38 item 5: a window of 1 is narrower than every t >= 2 (each token
    attends to itself alone). Plain `count` of a phi3 config with it was refused with advice to
    pass fewer tokens (an option plain count lacks), and `count --validate` advised --tokens 1,
    which certified nothing (exit 1). Now the window is dropped with a note saying what it
    removes, and --tokens below 2 is refused in one line before any progress line."""
    path = tmp_path / "phi3.json"
    path.write_text(json.dumps({**hf.shipped_config("phi3"), "sliding_window": 1}))
    code, out, err = run_cli(["count", str(path)])
    assert code == 0, err
    assert "the converted native network on 3 tokens" in out
    assert "sliding_window 1: each token attends only to itself" in out
    assert "the window is dropped" in out and "what is counted is the model without it" in out
    for tokens in ("1", "0", "100001"):
        code, out, err = run_cli(["count", "--model-type", "mistral", "--validate",
                                  "--tokens", tokens])
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert err.startswith("neuromanifold: error: `tokens` must be")


def test_numerical_is_refused_for_the_registry_families(capsys):
    """`count --validate --numerical` measures transformers' base model of the families with
    counting rules; for the others it was silently ignored: refused in one line."""
    assert main(["count", "--model-type", "falcon", "--validate", "--numerical"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`numerical` must be given only for the families" in err


@pytest.mark.parametrize("model_type", ["llama", "phi3"])
def test_count_does_not_import_transformers(model_type):
    """The parameter table comes from the config's fields: `count` imports no transformers
    (the check that its class has as many parameters is behind --check / --validate)."""
    code = ("import sys\nfrom neuromanifold.cli import main\n"
            f"assert main(['count', '--model-type', '{model_type}']) == 0\n"
            "assert 'transformers' not in sys.modules, 'transformers imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "not built; --check builds it" in done.stdout


@pytest.mark.parametrize("model_type", hf.SHIPPED)
def test_check_builds_the_class_with_the_counted_parameters(model_type, capsys):
    """For every shipped config, `count --check` builds transformers' class on the meta device
    and it has exactly the parameters counted from the config's fields (both outputs of the
    families counted through the registry)."""
    pytest.importorskip("transformers")
    assert main(["count", "--model-type", model_type, "--check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = [out] + ([out["hidden"]] if "hidden" in out else [])
    for row in rows:
        assert row["model_class_parameters"] == row["n_params"] > 0
    if model_type not in hf.MODEL_TYPES:   # the registry path reads the config alone
        assert certify.full_size(hf.shipped_config(model_type))["model_class_parameters"] is None


@pytest.mark.parametrize("model_type", ["llama", "mistral"])
def test_hf_config_default_shrink_settles_at_the_validated_count(model_type, capsys):
    """`dim --hf-config` of a shipped RMSNorm config, default shrink (count --validate's:
    hidden 4, vocabulary 7), measured on the native float64 network: settled at 182 = the
    rules' count of the shrunk hidden state (it was ambiguous, 4-decade gaps, float32 paths)."""
    path = str(hf.__file__).replace("hf.py", f"configs/{model_type}.json")
    assert main(["dim", "--hf-config", path]) == 0
    out = capsys.readouterr().out
    assert "dimension       182  [numerical, settled" in out and "182 (agrees)" in out
    assert "hidden 4" not in out.split("sizes changed")[0] and "hidden=4 " in out


def test_hf_config_shrink_keeps_the_config_sizes(tmp_path, capsys):
    """--shrink set to a tiny config's own sizes measures that config: 4 heads on 1 key/value
    head stay so (688 parameters, = count), nothing is changed."""
    cfg = {**hf.shipped_config("llama"), "hidden_size": 8, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 2, "intermediate_size": 5,
           "num_hidden_layers": 2, "vocab_size": 11, "rope_scaling": None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["dim", "--hf-config", str(path), "--shrink",
                 "layers=2,heads=4,head_dim=2,intermediate=5,vocab=11"]) == 0
    out = capsys.readouterr().out
    assert "kv_heads=1" in out and "none: the config's own sizes" in out
    assert "parameters      688" in out
    assert hf.count(hf.read_config(cfg))["n_params"] == 688
