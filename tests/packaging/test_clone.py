"""A clone as someone who finds the project meets it: `git clone` of this checkout's committed HEAD
into a folder named `hloflops` (git's default name) with nothing beside it (no development corpus),
installed editable (`pip install -e`, as the README says) into a fresh venv whose lark, networkx and
numpy come from the package index. From the folder above the clone, where the clone itself is a directory
named `hloflops` on sys.path, `import hloflops`, `python -m hloflops` and the `hloflops` command
give seed 000's numbers from the clone's sources.

Under the old layout (setuptools mapping `analysis/` to the name `hloflops` through an editable
import hook) the same commands failed: the hook is asked only after sys.path, so the clone folder
was imported as a namespace package and `hloflops.analyze` raised AttributeError."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.packaging.hostile_dir import SEED000, SEED000_FLOPS
from tests.packaging.test_wheel import clean_env, run

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`<tmp>/hloflops`: the committed HEAD (uncommitted changes are not in it), nothing beside it."""
    if not (REPO / ".git").exists():  # an unpacked archive: nothing to clone (CI's checkout is a git one)
        pytest.skip(f"{REPO} is not a git checkout")
    parent = tmp_path_factory.mktemp("parent")
    run(["git", "clone", "--quiet", str(REPO), str(parent / "hloflops")], cwd=parent, env=clean_env())
    assert sorted(p.name for p in parent.iterdir()) == ["hloflops"]  # no shared/ corpus beside it
    return parent / "hloflops"


@pytest.fixture(scope="module")
def venv(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", str(root)], cwd=root.parent, env=clean_env())
    run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(clone)], cwd=clone, env=clean_env())
    return root


def test_editable_clone_imports_from_the_folder_above_it(clone: Path, venv: Path) -> None:
    parent, py = clone.parent, str(venv / "bin" / "python")
    seed = SEED000.relative_to(REPO)  # the clone's copy, named as the user in `parent` would
    env = clean_env()
    code = f"import hloflops; print(hloflops.analyze({str(Path('hloflops') / seed)!r}).flops)"
    assert run([py, "-c", code], cwd=parent, env=env).strip() == str(SEED000_FLOPS)
    where = run([py, "-c", "import hloflops, hloparse; print(hloflops.__file__); print(hloparse.__file__)"],
                cwd=parent, env=env).split()
    assert where == [str(clone / "analysis" / "hloflops" / "__init__.py"), str(clone / "hloparse" / "__init__.py")]
    # `python -m` puts the working directory, which holds the clone, first on sys.path
    as_module = run([py, "-m", "hloflops", str(Path("hloflops") / seed), "--json"], cwd=parent, env=env)
    assert f'"flops": {SEED000_FLOPS}' in as_module
    summary = run([str(venv / "bin" / "hloflops"), str(Path("hloflops") / seed)], cwd=parent, env=env)
    assert f"{SEED000_FLOPS:,}" in summary and "jit_train_step" in summary, summary

