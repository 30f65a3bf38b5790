"""`dim` with the position options of issue 21 (slice B): spellings and one-line refusals."""

import json

import pytest

from neuromanifold.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dim_with_rotary_positions_is_certified(capsys):
    code, out, _ = run(capsys, "dim", "--widths", "4,4", "--keys", "4", "--positions", "rope",
                       "--rope-pairs", "1", "--json")
    d = json.loads(out)
    assert code == 0 and (d["dimension"], d["status"], d["n_params"]) == (41, "certified", 48)
    assert d["architecture"]["positions"] == "rope" and d["architecture"]["rope_pairs"] == [1]


def test_dim_with_learned_positions(capsys):
    code, out, _ = run(capsys, "dim", "--widths", "4,4", "--keys", "4", "--positions", "learned",
                       "--method", "numerical", "--json")
    d = json.loads(out)
    assert code == 0 and (d["dimension"], d["n_params"]) == (43, 60)


@pytest.mark.parametrize("args, says", [
    (["--positions", "rope", "--rope-pairs", "3"], "at most a_i // 2"),
    (["--rope-pairs", "1"], "given only with positions 'rope'"),
    (["--positions", "spiral"], "`positions` must be one of"),
    (["--positions", "rope", "--rope-pairs", "x"], "comma-separated"),
    (["--positions", "rope", "--hf-config", "c.json"], "--positions"),
    (["--vocab", "1"], "`vocab` must be an integer >= 2"),
    (["--tied"], "used with a vocabulary"),
    (["--vocab", "3", "--tied", "--widths", "4,3"], "d_l = d_0"),
])
def test_bad_position_options_exit_2_in_one_line(capsys, args, says):
    code, out, err = run(capsys, "dim", "--widths", "4,4", "--keys", "4", *args)
    assert code == 2 and out == "" and says in err and err.strip().count("\n") == 0


def test_dim_with_a_vocabulary_says_every_sequence_was_used(capsys):
    code, out, _ = run(capsys, "dim", "--widths", "3,3", "--keys", "3", "--tokens", "2",
                       "--vocab", "5", "--tied", "--residual", "--json")
    d = json.loads(out)
    assert code == 0 and (d["dimension"], d["status"], d["n_params"]) == (29, "certified", 42)
    assert d["architecture"]["vocab"] == 5 and d["architecture"]["tied"] is True
    assert any("every one of the V^t" in n for n in d["notes"])
