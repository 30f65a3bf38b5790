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
    (["--qk-norm"], "`qk_norm` must be used with a norm kind"),
    (["--final-norm"], "`final_norm` must be used with a norm kind"),
    (["--parallel", "--residual"], "`parallel` must be used with residual paths and an MLP"),
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


@pytest.mark.filterwarnings("ignore::neuromanifold.dimension.result.AmbiguousRankWarning")
def test_dim_with_qk_norm_final_norm_and_parallel(capsys):
    code, out, _ = run(capsys, "dim", "--widths", "4,4", "--keys", "4", "--tokens", "2",
                       "--norm", "rmsnorm", "--qk-norm", "--final-norm", "--residual", "--mlp",
                       "2", "--parallel", "--method", "numerical", "--json")
    d = json.loads(out)
    assert d["architecture"]["qk_norm"] and d["architecture"]["final_norm"]
    assert d["architecture"]["parallel"] and d["n_params"] == 4 + 16 + 4 + 16 + 4 + 16 + 4 + 8 + 8 + 4
    assert code in (0, 1) and d["status"] in ("settled", "ambiguous")


def test_grid_files_take_the_decoder_options(tmp_path):
    """Sweep grids multiply out positions, vocab and the flags; keys name only non-defaults."""
    from neuromanifold.sweeps.grid import item_architecture, item_key, load_grid

    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[3, 3]]\nkeys = [[3]]\ntokens = [2]\npositions = ["none", "rope"]\n'
                    'rope_pairs = [[1]]\nvocab = [5]\ntied = [false, true]\n')
    items = load_grid(str(grid)).items
    keys = {item_key(i, 0) for i in items}
    assert ("lightning;widths=3,3;keys=3;tokens=2;method=auto;positions=rope;rope_pairs=1;vocab=5;"
            "tied=true;seed=0;v=2") in keys
    assert len(items) == 2 and all(item_architecture(i).vocab == 5 for i in items)
