"""The package builds as a wheel and an sdist, and the wheel works in a fresh environment."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: build offline with this environment's setuptools (declared in the test extra).
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    return out


def test_wheel_and_sdist_are_built_with_the_shipped_grids(dist):
    """`python -m build` makes one wheel and one sdist; the wheel carries the grid files."""
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "neuromanifold/sweeps/grids/eq14_map.toml" in names
    assert "neuromanifold/cli/app.py" in names


def test_wheel_runs_dim_in_a_fresh_venv(dist, tmp_path):
    """The wheel installed offline into a new venv runs `neuromanifold dim` from that venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheel = next(dist.glob("*.whl"))
    # Without PYTHONPATH: with src on it, the build's src/neuromanifold.egg-info reads to pip as
    # neuromanifold already installed, and the wheel would silently not be installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                    "--no-deps", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)],
                   check=True, capture_output=True, text=True, env=env)
    # Dependencies come from this environment (offline): a path entry, so that its .pth files,
    # the editable install of the source tree among them, are not processed.
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; "
                                         "print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    (site / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(python), "-c", "import neuromanifold; print(neuromanifold.__file__)"],
                           check=True, capture_output=True, text=True, env=env).stdout
    assert where.startswith(str(venv))
    run = subprocess.run([str(venv / "bin" / "neuromanifold"), "dim", "--widths", "3,4", "--keys", "2",
                          "--json"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert (result["status"], result["dimension"], result["n_params"]) == ("certified", 19, 24)


def test_license_is_a_pep_639_expression_with_its_file(dist):
    """The wheel declares `License-Expression: MIT` (PEP 639, not the deprecated table) and ships
    the LICENSE file, whose holder is CITATION.cff's author."""
    wheel = zipfile.ZipFile(next(dist.glob("*.whl")))
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = wheel.read(info).decode()
    assert "License-Expression: MIT" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert not any(line.startswith("License: ") for line in metadata.splitlines())
    shipped = [n for n in wheel.namelist() if n.endswith("licenses/LICENSE")]
    assert len(shipped) == 1
    text = wheel.read(shipped[0]).decode()
    assert text.startswith("MIT License") and "The neuromanifold contributors" in text
    assert "name: The neuromanifold contributors" in (ROOT / "CITATION.cff").read_text(encoding="utf-8")


def test_package_description_has_no_relative_link(dist):
    """The long description (README.md, read from the package metadata where no repository is
    beside it) links only to absolute URLs: every path into the repository is plain text."""
    import re  # noqa: PLC0415
    import tarfile  # noqa: PLC0415

    wheel = zipfile.ZipFile(next(dist.glob("*.whl")))
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")))
    with tarfile.open(next(dist.glob("*.tar.gz"))) as sdist:
        pkg_info = sdist.extractfile(next(m for m in sdist.getmembers()
                                          if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")))
        descriptions = [metadata.decode(), pkg_info.read().decode()]
    for text in descriptions:
        assert "Description-Content-Type: text/markdown" in text
        body = text.split("\n\n", 1)[1]  # the headers, then the README
        assert "## Quick start" in body
        targets = re.findall(r"\]\(([^)\s]+)\)", body) + re.findall(r"<(?:a|img)\b[^>]*(?:href|src)=\"([^\"]+)\"", body)
        assert targets, "the description links the paper at least"
        relative = [t for t in targets if not re.match(r"^https?://", t)]
        assert not relative, relative
