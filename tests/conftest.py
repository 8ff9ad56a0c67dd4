"""Fixtures shared by the whole suite: where the repo, the bundled examples and the corpus live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.corpus import CORPUS_DIR, index_rows, require_corpus  # noqa: F401  (CORPUS_DIR: kept importable here)

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "examples"
# PYTHONPATH for a child process that must import this tree's hloflops and hloparse (pyproject's
# pytest pythonpath): the repo root alone would give whatever hloflops is installed.
SOURCE_PATH = os.pathsep.join([str(REPO_ROOT / "analysis"), str(REPO_ROOT)])


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES_DIR


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The development corpus (<repo>/../shared/corpus): every test that reads it takes it here.
    Without it the test is skipped with a reason saying how to get it; CI (HLOFLOPS_REQUIRE_CORPUS=1)
    fails it instead (tests/support/corpus.py)."""
    return require_corpus()


@pytest.fixture(scope="session")
def corpus_index(corpus_dir: Path) -> list[dict[str, str]]:
    """Rows of index.csv (XLA's parse result and cost numbers per module), as strings."""
    return index_rows()
