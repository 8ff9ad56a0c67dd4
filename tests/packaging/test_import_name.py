"""One import name: `import hloflops` gives the whole public API, stays cheap, and nothing of ours
imports the generic name `analysis` (the source directory's name), so a user's own `analysis.py`
or `analysis/` cannot shadow it. The wheel itself is checked in test_wheel.py; these run on the
checkout as installed for development (editable, or PYTHONPATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import hloparse
import hloflops
from tests.packaging.hostile_dir import SEED000, SEED000_FLOPS, api_command, hostile_path, make_hostile_project

REPO = Path(__file__).resolve().parents[2]
API = {"analyze", "compare", "count", "Report", "MFU", "Comparison"}


def run_python(code: str, *, cwd: Path, pythonpath: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=120)


def test_the_public_api_and_the_parser_from_one_import() -> None:
    assert API <= set(hloflops.__all__)
    assert set(hloparse.__all__) <= set(hloflops.__all__), "every parser entry point is hloflops.<name> too"
    for name in hloflops.__all__:
        getattr(hloflops, name)
    for name in hloparse.__all__:
        assert getattr(hloflops, name) is getattr(hloparse, name), name  # the same objects, not copies
    assert hloflops.parse(SEED000.read_text()).name == hloflops.load(SEED000).name


def test_import_is_cheap() -> None:
    """`import hloflops` loads neither the parser (lark), networkx, numpy nor jax: PEP 562 names."""
    code = ("import sys, hloflops; heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'lark', 'networkx', 'numpy', 'jax', 'hloparse'}); print(heavy)")
    done = run_python(code, cwd=REPO, pythonpath="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_project_with_its_own_analysis_module(tmp_path: Path) -> None:
    """From a directory holding a hostile analysis.py (and analysis/ on its path), the API and the
    CLI give seed 000's numbers."""
    project = make_hostile_project(tmp_path)
    done = run_python(api_command(), cwd=project, pythonpath=hostile_path(project))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == str(SEED000_FLOPS)
    # `python -m hloflops` puts the current directory (the project, with its analysis.py) first on sys.path
    path = os.pathsep.join(p for p in (hostile_path(project), os.environ.get("PYTHONPATH", "")) if p)
    cli = subprocess.run([sys.executable, "-m", "hloflops", str(SEED000), "--json"], cwd=project,
                         env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f'"flops": {SEED000_FLOPS}' in cli.stdout
    # and the user's own module is still theirs to import
    theirs = run_python("import hloflops, analysis", cwd=project, pythonpath=hostile_path(project))
    assert "shadowed" in theirs.stderr


def test_nothing_of_ours_is_imported_as_analysis() -> None:
    """After analyze, the text summary, JSON, HTML and the batch imports, sys.modules holds no
    `analysis` (the directory is installed as `hloflops`)."""
    code = f"""
import sys, hloflops
from hloflops.cli import main
main([{str(SEED000)!r}])
main([{str(SEED000)!r}, "--json", "--rows"])
hloflops.analyze({str(SEED000)!r}).to_html()
import hloflops.batch.run, hloflops.batch.run_command, hloflops.xla.compare, hloflops.report.diff
print(sorted(m for m in sys.modules if m == "analysis" or m.startswith("analysis.")))
"""
    done = run_python(code, cwd=REPO, pythonpath="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


IMPORTS_ANALYSIS = re.compile(r"^\s*(?:from\s+analysis(?:\.|\s)|import\s+analysis\b)|import_module\([\"']analysis\b",
                              re.MULTILINE)


def test_no_source_imports_the_name_analysis() -> None:
    """A grep of every Python file of the repo, examples and benchmarks included (subprocess code
    in strings too: the pattern reads lines, not the syntax tree)."""
    offenders = []
    for path in REPO.rglob("*.py"):
        if any(part.startswith(".") or part in ("build", "dist") for part in path.relative_to(REPO).parts):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {m.group(0).strip()}" for m in IMPORTS_ANALYSIS.finditer(text)]
    assert offenders == []
    assert IMPORTS_ANALYSIS.search("from analysis.api import analyze") and IMPORTS_ANALYSIS.search("import analysis")
