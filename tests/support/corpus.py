"""The development corpus, in one place: where it is, and what a test does when it is absent.

The corpus (4,380 real HLO modules and their `index.csv`, about 90 MB; its README says where they
come from) is not in the repository: on the development machine and in CI it lies beside the
checkout, `<repo>/../shared/corpus`. `HLOFLOPS_CORPUS=<folder>` points the tests at a copy
elsewhere. Every test that reads it asks here (tests/conftest.py's `corpus_dir` / `corpus_index`
fixtures call `require_corpus`), so that in a clone without it those tests are skipped with one
reason that says what is missing and how to get it, never a FileNotFoundError; and CI, which sets
`HLOFLOPS_REQUIRE_CORPUS=1` (.ci/run), fails them instead, so nothing there is skipped for want
of the corpus.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = Path(os.environ.get("HLOFLOPS_CORPUS") or REPO_ROOT.parent / "shared" / "corpus").resolve()
REQUIRED = os.environ.get("HLOFLOPS_REQUIRE_CORPUS") == "1"


def have_corpus() -> bool:
    return (CORPUS_DIR / "index.csv").is_file()


def missing_reason() -> str:
    return (f"no development corpus ({CORPUS_DIR}/index.csv is missing; the corpus is not in the repository): "
            "put a copy at ../shared/corpus beside the checkout, or set HLOFLOPS_CORPUS (docs/development.md)")


def require_corpus() -> Path:
    """The corpus folder; without it, skips the calling test (fails it where HLOFLOPS_REQUIRE_CORPUS=1)."""
    if not have_corpus():
        if REQUIRED:
            pytest.fail(f"HLOFLOPS_REQUIRE_CORPUS=1 but {missing_reason()}", pytrace=False)
        pytest.skip(missing_reason())
    return CORPUS_DIR


def index_rows(folder: str = "") -> list[dict[str, str]]:
    """Rows of `<corpus>/<folder>/index.csv`, or [] without the corpus. For building parameters at
    collection time, which must not skip: a test parametrised from them also takes the `corpus_dir`
    fixture, which skips it (or fails it) when the list was empty."""
    index = CORPUS_DIR / folder / "index.csv"
    if not index.is_file():
        return []
    with open(index, newline="") as f:
        return list(csv.DictReader(f))
