"""Shell completion of the command line (issue 39 item 7): typer's scripts and its env-var protocol.

Every test runs in a temporary HOME (or none is written): no test touches the user's shell files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from neuromanifold.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = list(typer.main.get_command(app).commands)  # in the order of --help
BASH = shutil.which("bash")


def _env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a run: this checkout's source first, HOME a temporary folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_NEUROMANIFOLD", "_TYPER", "COMP_"))}
    env.update(PYTHONPATH=str(ROOT / "src"), HOME=str(home), **extra)
    return env


def _neuromanifold(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuromanifold", *args], env=_env(home, **extra),
                          capture_output=True, text=True, timeout=120, cwd=home)


def _complete(home: Path, shell: str, words: str) -> list[str]:
    """The answer to a completion request for the command line `words`, as `shell`'s script asks."""
    extra = {"_NEUROMANIFOLD_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": words}
    if shell == "bash":
        extra.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - (not words.endswith(" "))))
    if shell == "fish":
        extra["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    done = _neuromanifold(home, **extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_root_help_offers_completion(tmp_path):
    """`neuromanifold --help` lists --install-completion and --show-completion."""
    done = _neuromanifold(tmp_path, "--help")
    assert done.returncode == 0
    assert "--install-completion" in done.stdout and "--show-completion" in done.stdout


@pytest.mark.parametrize("shell, line", [
    ("bash", "complete -o default -F _neuromanifold_completion neuromanifold"),
    ("zsh", "compdef _neuromanifold_completion neuromanifold"),
    ("fish", "complete --command neuromanifold --no-files"),
])
def test_source_protocol_prints_each_shells_script(tmp_path, shell, line):
    """`_NEUROMANIFOLD_COMPLETE=source_SHELL neuromanifold` (the way docs/cli.md names a shell)
    prints that shell's script, which asks `neuromanifold` itself, and writes nothing."""
    done = _neuromanifold(tmp_path, _NEUROMANIFOLD_COMPLETE=f"source_{shell}")
    assert done.returncode == 0, done.stderr
    assert line in done.stdout and f"_NEUROMANIFOLD_COMPLETE=complete_{shell}" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_bash_request_returns_every_command(tmp_path):
    """A bash request after `neuromanifold ` answers the commands, one a line, in --help's order."""
    assert _complete(tmp_path, "bash", "neuromanifold ") == COMMANDS


def test_requests_complete_prefixes_and_options(tmp_path):
    """`neuromanifold fi` -> the three commands starting with fi (zsh and fish with their
    descriptions); `neuromanifold dim --wi` -> --widths; `count --model-t` -> --model-type."""
    wanted = [c for c in COMMANDS if c.startswith("fi")]
    assert wanted == ["figure3", "fiber", "figure1"]
    assert _complete(tmp_path, "bash", "neuromanifold fi") == wanted
    fish = _complete(tmp_path, "fish", "neuromanifold fi")
    assert [line.split("\t")[0] for line in fish] == wanted and "Figure 3" in fish[0]
    zsh = "\n".join(_complete(tmp_path, "zsh", "neuromanifold fi"))
    assert zsh.startswith("_arguments") and all(f'"{c}":' in zsh for c in wanted)
    assert _complete(tmp_path, "bash", "neuromanifold dim --wi") == ["--widths"]
    assert _complete(tmp_path, "bash", "neuromanifold count --model-t") == ["--model-type"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_show_completion_detects_bash_and_the_script_completes_in_bash(tmp_path):
    """Run from bash, `--show-completion` prints the bash script (the shell detected, nothing
    written); sourced in a bash whose PATH finds this checkout's `neuromanifold`, its function
    fills COMPREPLY with the commands starting with `fi`."""
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c",
                           f"'{sys.executable}' -m neuromanifold --show-completion; true"],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert "complete -o default -F _neuromanifold_completion neuromanifold" in script
    assert list(tmp_path.iterdir()) == []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "neuromanifold"
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' -m neuromanifold \"$@\"\n")
    wrapper.chmod(0o755)
    (tmp_path / "completion.sh").write_text(script + "\n")
    test = ("source ./completion.sh; COMP_WORDS=(neuromanifold fi); COMP_CWORD=1; "
            "_neuromanifold_completion neuromanifold; printf '%s\\n' \"${COMPREPLY[@]}\"")
    env = _env(tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c", test], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["figure3", "fiber", "figure1"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_install_completion_writes_only_under_home(tmp_path):
    """`--install-completion` from bash writes ~/.bash_completions/neuromanifold.sh and one
    `source` line in ~/.bashrc, under the (temporary) HOME and nowhere else."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the user's own line\n")
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c",
                           f"'{sys.executable}' -m neuromanifold --install-completion; true"],
                          env=_env(home), capture_output=True, text=True, timeout=120, cwd=home)
    assert done.returncode == 0, done.stderr
    script = home / ".bash_completions" / "neuromanifold.sh"
    assert "bash completion installed in" in done.stdout and str(script) in done.stdout
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == [
        ".bash_completions", ".bash_completions/neuromanifold.sh", ".bashrc"]
    lines = [line for line in (home / ".bashrc").read_text().splitlines() if line]
    assert lines == ["# the user's own line", f"source '{script}'"]
    assert "_NEUROMANIFOLD_COMPLETE=complete_bash" in script.read_text()


def test_a_tab_skips_value_coercion_and_callbacks(tmp_path):
    """A completion request imports no pydantic (typer's value coercion, skipped for resilient
    parsing: NOTE [a Tab without pydantic] in cli/app.py) and runs no option callback:
    `neuromanifold --version <Tab>` answers the commands, not the version."""
    code = ("import sys\nfrom neuromanifold.cli import main\ntry:\n    main([])\n"
            "except SystemExit as exc:\n    print('exit', exc.code)\n"
            "print('pydantic' in sys.modules)")
    words = "neuromanifold count --"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path, _NEUROMANIFOLD_COMPLETE="complete_bash",
                                   COMP_WORDS=words, COMP_CWORD="2"), cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["exit 0", "False"], done.stderr
    assert "--model-type" in lines and "--validate" in lines
    assert _complete(tmp_path, "bash", "neuromanifold --version ") == COMMANDS


def test_a_command_still_coerces_its_values(capsys):
    """Outside a completion request the values are coerced as before: `--tokens x` is refused."""
    from neuromanifold.cli.app import main

    assert main(["dim", "--widths", "3,3", "--keys", "2", "--tokens", "x"]) == 2
    assert "tokens" in capsys.readouterr().err
