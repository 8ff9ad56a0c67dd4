"""A user's project directory that holds its own `analysis` (a module and a package), as the
packaging tests put next to the script that uses hloflops: if anything of ours imported the name
`analysis`, the user's would answer, and it exits the interpreter with "shadowed"."""

from __future__ import annotations

from pathlib import Path

SEED000 = Path(__file__).resolve().parents[2] / "examples" / "seed000_remat_scan.after_optimizations.hlo"
SEED000_FLOPS = 1_269_219  # seed 000's exact FLOPs (README, tests/report/test_seeds.py)

HOSTILE = 'raise SystemExit("shadowed: the user\'s own analysis was imported")\n'


def make_hostile_project(root: Path) -> Path:
    """`root/project` with `analysis.py` and, in `pkg/`, an `analysis/` package (a directory
    package wins over a module beside it, so each gets a directory of its own); both exit."""
    project = root / "project"
    (project / "pkg" / "analysis").mkdir(parents=True)
    (project / "analysis.py").write_text(HOSTILE)
    (project / "pkg" / "analysis" / "__init__.py").write_text(HOSTILE)
    (project / "pkg" / "analysis" / "api.py").write_text(HOSTILE)
    return project


def hostile_path(project: Path) -> str:
    """The PYTHONPATH a user's project gives: its own directory and its package directory first."""
    return f"{project}:{project / 'pkg'}"


def api_command(path: Path = SEED000) -> str:
    return f"import hloflops; print(hloflops.analyze({str(path)!r}).flops)"
