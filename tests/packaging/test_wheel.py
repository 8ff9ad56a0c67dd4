"""The wheel as a user gets it: built from this checkout, installed into a fresh venv (no system
site-packages; lark, networkx and numpy come from the package index), it installs exactly two
top-level names, `hloflops` and `hloparse`, and from a project directory holding its own
`analysis.py` / `analysis/` both the API and the `hloflops` command give seed 000's numbers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hloflops
from tests.packaging.hostile_dir import SEED000, SEED000_FLOPS, api_command, hostile_path, make_hostile_project

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "analysis", "hloparse")  # what the build reads

pytestmark = pytest.mark.slow


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this checkout's PYTHONPATH (the venv's install must answer)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources (a build writes build/ and *.egg-info beside them)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)], cwd=source,
        env=clean_env())
    (built,) = out.glob("hloflops-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", str(root)], cwd=root.parent, env=clean_env())
    run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=root.parent, env=clean_env())
    return root


def package_dir(directory: Path) -> str:
    """Where a package directory of the tree lands in the wheel: analysis/hloflops/x -> hloflops/x."""
    parts = directory.relative_to(REPO).parts
    return "/".join(parts[1:] if parts[0] == "analysis" else parts)


def test_the_wheel_installs_two_top_level_names(wheel: Path) -> None:
    assert wheel.name.startswith(f"hloflops-{hloflops.__version__}-"), wheel.name  # pyproject reads __version__
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = {name for name in top if name.endswith(".dist-info")}
    assert top - dist_info == {"hloflops", "hloparse"}, sorted(top)
    # every package of the tree is in it (pyproject lists them by hand), and the grammar file
    expected = {package_dir(init.parent) for init in (REPO / "analysis").rglob("__init__.py")}
    expected |= {package_dir(init.parent) for init in (REPO / "hloparse").rglob("__init__.py")}
    present = {name.rsplit("/", 1)[0] for name in names if name.endswith("/__init__.py")}
    assert expected <= present, sorted(expected - present)
    assert "hloparse/hlo.lark" in names
    (info,) = dist_info
    top_level = [n for n in names if n == f"{info}/top_level.txt"]
    if top_level:  # setuptools writes it: the names an installer puts on sys.path
        with zipfile.ZipFile(wheel) as archive:
            assert set(archive.read(top_level[0]).decode().split()) == {"hloflops", "hloparse"}


def test_the_venv_has_no_system_packages(venv: Path) -> None:
    """The fresh venv sees none of this machine's packages: jax is absent, and its hloflops is the
    wheel's, in its own site-packages."""
    py = str(venv / "bin" / "python")
    out = run([py, "-c", "import hloflops, importlib.util as u; print(hloflops.__file__); print(u.find_spec('jax'))"],
              cwd=venv, env=clean_env())
    where, jax_spec = out.split()
    assert where.startswith(str(venv)) and jax_spec == "None", out


def test_from_a_project_with_its_own_analysis(venv: Path, tmp_path: Path) -> None:
    project = make_hostile_project(tmp_path)
    env = clean_env(PYTHONPATH=hostile_path(project))
    out = run([str(venv / "bin" / "python"), "-c", api_command()], cwd=project, env=env)
    assert out.strip() == str(SEED000_FLOPS)
    summary = run([str(venv / "bin" / "hloflops"), str(SEED000)], cwd=project, env=env)
    assert f"{SEED000_FLOPS:,}" in summary and "jit_train_step" in summary, summary
    version = run([str(venv / "bin" / "hloflops"), "--version"], cwd=project, env=env)
    assert version == f"hloflops {hloflops.__version__}\n"
