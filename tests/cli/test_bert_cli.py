"""`dim` with BERT's options (--post-norm, --embed-norm, --token-types, --hidden-output):
a certified shrunk BERT and one-line refusals (exit 2)."""

import json

import pytest

from neuromanifold.cli import main

BERT = ["--widths", "4,4", "--keys", "2", "--tokens", "3", "--attention", "softmax", "--heads",
        "2", "--values", "2", "--residual", "--mlp", "3", "--activation", "gelu", "--norm",
        "layernorm", "--bias", "--mlp-bias", "--positions", "learned", "--vocab", "6",
        "--norm-bias", "--norm-eps", "1e-12", "--post-norm", "--embed-norm", "--token-types", "2",
        "--hidden-output"]


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dim_of_a_bert_network_is_certified(capsys):
    code, out, _ = run(capsys, "dim", *BERT, "--method", "certified", "--json")
    d = json.loads(out)
    assert code == 0 and d["status"] == "certified" and d["lower_bound"] == d["upper_bound"]
    arch = d["architecture"]
    assert (arch["post_norm"], arch["embed_norm"], arch["token_types"], arch["hidden_output"]) \
        == (True, True, 2, True)


@pytest.mark.parametrize("args, says", [
    (["--post-norm"], "`post_norm` must be used with residual paths and a norm"),
    (["--norm", "layernorm", "--embed-norm"], "`embed_norm` must be used with a vocabulary"),
    (["--token-types", "2"], "`token_types` must be used with a vocabulary"),
    (["--vocab", "5", "--token-types", "1"], "`token_types` must be"),
    (["--vocab", "5", "--tied", "--hidden-output"], "`hidden_output` must be used with an untied"),
])
def test_bert_options_refused_in_one_line(capsys, args, says):
    code, _, err = run(capsys, "dim", "--widths", "4,4", "--keys", "2", *args)
    assert code == 2 and says in err and err.count("\n") == 1
