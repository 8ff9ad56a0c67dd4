"""CI's scripts follow the README and the layout: `.ci/run` runs the README's test command with the
development corpus required, and the oldest-jax job copies every source folder the build reads."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    (line,) = [line for line in (REPO / "README.md").read_text().splitlines() if "-m pytest" in line]
    return line.strip()


def test_ci_runs_the_readme_test_command_with_the_corpus_required() -> None:
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    command = readme_test_command()
    assert command == "python3 -m pip install -e '.[test]' && python3 -m pytest -q"
    assert command in lines
    assert "export HLOFLOPS_REQUIRE_CORPUS=1" in lines[:lines.index(command)]


def test_the_oldest_jax_job_copies_what_the_build_reads() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    needed = {"pyproject.toml", project["project"]["readme"]} | {p.split("/")[0] for p in packages}
    (copy,) = re.findall(r"^.*\bcp -r (.+?) \"\$work/src/\"$", (REPO / ".ci" / "oldest_jax.sh").read_text(), re.M)
    assert set(copy.split()) == needed
