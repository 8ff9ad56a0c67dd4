"""Fixtures shared by the whole suite: where the repo, the bundled examples and the corpus live."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "examples"
# The shared corpus of real HLO modules sits next to the checkout: <repo>/../shared/corpus.
CORPUS_DIR = (REPO_ROOT / ".." / "shared" / "corpus").resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES_DIR


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The corpus folder; skips (saying where it looked) only when it is absent. CI has it."""
    if not (CORPUS_DIR / "index.csv").is_file():
        pytest.skip(f"corpus not found: expected {CORPUS_DIR}/index.csv (../shared/corpus next to the repo)")
    return CORPUS_DIR


@pytest.fixture(scope="session")
def corpus_index(corpus_dir: Path) -> list[dict[str, str]]:
    """Rows of index.csv (XLA's parse result and cost numbers per module), as strings."""
    with open(corpus_dir / "index.csv", newline="") as f:
        return list(csv.DictReader(f))
