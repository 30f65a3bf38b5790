"""The front door of the API and CLI (issue 25): broadcasting, choices, spellings, reprs, tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import neuromanifold
from neuromanifold import Architecture, InputError
from neuromanifold.cli.app import main

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------- architectures: broadcasting

def test_scalar_keys_broadcast_over_layers():
    """keys=2 for a three-layer network is keys=(2, 2, 2); heads, values and mlp likewise."""
    arch = Architecture((5, 3, 3, 5), 2, 3)
    assert arch.keys == (2, 2, 2) and arch == Architecture((5, 3, 3, 5), (2, 2, 2), 3)
    block = Architecture((4, 4, 4), 3, 2, heads=2, values=3, mlp=5, residual=True)
    assert (block.heads, block.values, block.mlp) == ((2, 2), (3, 3), (5, 5))
    assert block.n_params == Architecture((4, 4, 4), (3, 3), 2, heads=(2, 2), values=(3, 3),
                                          mlp=(5, 5), residual=True).n_params


def test_missing_tokens_is_one_clear_line():
    """Architecture((3, 2, 3), (2, 2)) names the missing tokens and the fix (no bare TypeError)."""
    with pytest.raises(TypeError, match=r"^`tokens` must be given .*; got None\. Pass e\.g\. "
                       r"Architecture\(\(3, 2, 3\), keys=2, tokens=3\)\.$") as info:
        Architecture((3, 2, 3), (2, 2))
    assert isinstance(info.value, InputError)
    with pytest.raises(TypeError, match=r"^`keys` must be given"):
        Architecture((3, 2, 3))


def test_a_bool_is_not_a_scalar_key():
    """True is refused as keys, not broadcast as 1."""
    with pytest.raises(TypeError, match=r"`keys` must be a sequence of integers; got True"):
        Architecture((3, 3, 3), True, 3)


def test_wrong_length_still_refused_with_the_scalar_fix():
    """Three key widths for two layers: refused, and the fix mentions the one-width spelling."""
    with pytest.raises(ValueError, match=r"`keys` must be one key width per layer \(2 for widths "
                       r"\[3, 3, 3\]\); got \[2, 2, 2\]\. Pass 2 comma-separated key widths, e\.g\. "
                       r"2,2, or one width for every layer\."):
        Architecture((3, 3, 3), (2, 2, 2), 3)


# ---------------------------------------------------------------- choices ignore case

def test_choices_ignore_case_in_python():
    """attention='Softmax', activation='ReLU', norm='LayerNorm' are the lower-case choices."""
    arch = Architecture((3, 3), 2, 3, "Softmax", heads=2, mlp=2, activation="ReLU",
                        norm=" LayerNorm ")
    assert (arch.attention, arch.activation, arch.norm) == ("softmax", "relu", "layernorm")
    with pytest.raises(ValueError, match=r"`attention` must be one of 'lightning', 'softmax'; "
                       r"got 'Relu'\. Use for example 'lightning'\."):
        Architecture((3, 3), 2, 3, "Relu")


def test_method_and_device_ignore_case():
    """neuromanifold_dim(method='Certified', device='CPU') is the certified CPU computation."""
    from neuromanifold import neuromanifold_dim

    r = neuromanifold_dim(Architecture((3, 3, 3), 2, 3), method="Certified", device="CPU")
    assert (r.method, r.status, r.dimension) == ("certified", "certified", 23)


def test_grid_choices_ignore_case(tmp_path):
    """A grid file may write attention = ["Softmax"]: the item is the softmax one."""
    from neuromanifold.sweeps.grid import load_grid

    path = tmp_path / "g.toml"
    path.write_text('[[grid]]\nwidths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\n'
                    'attention = ["Softmax"]\nmethod = ["Numerical"]\n')
    (item,) = load_grid(str(path)).items
    assert (item["attention"], item["method"]) == ("softmax", "numerical")


# ---------------------------------------------------------------- CLI consistency

def test_cli_scalar_keys_and_case(capsys):
    """dim --keys 2 broadcasts over both layers and --attention Lightning is lightning: Eq. 14, 23."""
    code, out, _ = run(capsys, "dim", "--widths", "3,3,3", "--keys", "2", "--attention",
                       "Lightning", "--method", "Certified")
    assert code == 0
    assert "keys=2,2" in out and "attention=lightning" in out and "23  [certified" in out


def test_cli_space_separated_list_hint(capsys):
    """`dim --widths 3 2 3` says to write 3,2,3 (template line, exit 2, nothing on stdout)."""
    code, out, err = run(capsys, "dim", "--widths", "3", "2", "3", "--keys", "2,2")
    assert (code, out) == (2, "")
    assert err == ("neuromanifold: error: `widths` must be one comma-separated list; got '3 2 3'. "
                   "Pass --widths 3,2,3 (commas, no spaces).\n")


def test_cli_other_extra_arguments_keep_the_parser_message(capsys):
    """An extra word that is not a spaced list keeps the parser's own message."""
    code, _, err = run(capsys, "dim", "--widths", "3,3", "--keys", "2", "extra")
    assert code == 2 and "unexpected extra argument" in err and "comma-separated" not in err


def test_cli_version(capsys):
    """--version prints the package version and exits 0."""
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"neuromanifold {neuromanifold.__version__}\n"


def test_cli_help_shows_debug_version_and_no_bool_metavar(capsys):
    """The root help lists --version and --debug; no help shows a `<bool>` metavar."""
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--version" in out and "--debug" in out and "<bool>" not in out
    code, out, _ = run(capsys, "heads", "--help")
    assert code == 0 and "<bool>" not in out and "--force" in out


@pytest.mark.parametrize("command", ["dim", "figure3", "heads", "classify", "fiber", "figure1",
                                     "sweep", "report", "rank", "count"])
def test_every_command_help_has_an_example(capsys, command):
    """Each command's help ends with an example that calls that command."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "Example: neuromanifold " + command in " ".join(out.replace("│", " ").split())


def test_heads_takes_keys_and_values_like_dim(capsys, tmp_path):
    """heads --keys/--values (dim's spelling) and the hidden old --key/--value give the same rows."""
    new = run(capsys, "heads", "--widths", "2,2", "--keys", "1", "--values", "2", "--max-heads",
              "1", "--out", str(tmp_path / "a"), "--json")
    old = run(capsys, "heads", "--widths", "2,2", "--key", "1", "--value", "2", "--max-heads",
              "1", "--out", str(tmp_path / "b"), "--json")
    import json

    rows_new, rows_old = json.loads(new[1]), json.loads(old[1])
    for rows in (rows_new, rows_old):
        for row in rows:
            row.pop("seconds", None)
    assert new[0] == old[0] == 0 and rows_new == rows_old
    # one head, d = d' = 2, a = 1, v = 2: r (2 d - r) + v (d + d' - v) - 1 = 3 + 4 - 1 = 6
    assert (rows_new[0]["heads"], rows_new[0]["lightning"]) == (1, 6)
    assert "--key is now spelled --keys" in old[2] and "now spelled" not in new[2]
    code, out, _ = run(capsys, "heads", "--help")
    assert "--keys" in out and "--key " not in out and "--value " not in out


def test_heads_old_and_new_spelling_together_refused(capsys, tmp_path):
    """--key with --keys is bad input (exit 2, template line), nothing written."""
    code, out, err = run(capsys, "heads", "--keys", "2", "--key", "3", "--out", str(tmp_path / "h"))
    assert (code, out) == (2, "")
    assert err == ("neuromanifold: error: `key` must be left out when --keys is given (it is the old "
                   "spelling of --keys); got 3. Pass only --keys 2.\n")
    assert not (tmp_path / "h").exists()


def test_help_stays_light():
    """`neuromanifold --help` imports neither pandas, torch nor matplotlib."""
    code = ("import sys\nfrom neuromanifold.cli.app import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src")}).stdout
    assert out.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------- the top-level namespace

def test_dir_shows_only_public_names():
    """dir(neuromanifold) has no TYPE_CHECKING, annotations or import_module."""
    names = dir(neuromanifold)
    assert not {"TYPE_CHECKING", "annotations", "import_module"} & set(names)
    assert set(neuromanifold.__all__) <= set(names)


def test_names_the_docs_use_are_in_all():
    """Every name the docs import from neuromanifold, or document at the top level, is in __all__."""
    import re

    texts = [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]]
    used = set()
    for text in texts:
        for group in re.findall(r"from neuromanifold import (\([\w\s,]+\)|[\w, ]+)", text):
            used |= {n.strip(" \n()") for n in group.split(",") if n.strip(" \n()")}
    assert {"random_fiber_point", "act_keys", "Architecture", "neuromanifold_dim"} <= (
        used | set(neuromanifold.__all__))
    assert used <= set(neuromanifold.__all__), used - set(neuromanifold.__all__)
    for name in ("random_fiber_point", "act_keys", "apply_witness", "canonical_form"):
        assert name in neuromanifold.__all__ and callable(getattr(neuromanifold, name))
