"""The batch database's communication columns: comm_bytes_per_device and devices, filled from
the analysis, and added to a database written before they existed."""

from __future__ import annotations

import shutil
from pathlib import Path

from hloflops.api import analyze
from hloflops.batch.db import ResultsDB
from hloflops.batch.run import run_batch
from tests.support.batch_fixtures import OLD_ROW, schema_1_database

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "tests" / "data" / "allreduce_loop.hlo"


def test_columns_hold_the_analysis(tmp_path: Path) -> None:
    shutil.copy(LOOP, tmp_path / "loop.hlo")
    db = tmp_path / "out.sqlite"
    run_batch([tmp_path / "loop.hlo"], db=db, processes=1, timeout_s=120, progress=False)
    with ResultsDB(db) as results:
        (row,) = results.module_rows()
    report = analyze(LOOP)
    assert row["status"] == "ok", row["error"]
    assert row["comm_bytes_per_device"] == report.communication_bytes == 10 * (2 * 7 * 16384 // 8)
    assert row["devices"] == report.devices == 8


def test_an_older_database_gains_the_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    schema_1_database(db, OLD_ROW)
    shutil.copy(LOOP, tmp_path / "loop.hlo")
    run_batch([tmp_path / "loop.hlo"], db=db, processes=1, timeout_s=120, progress=False)
    with ResultsDB(db) as results:
        rows = {r["path"]: r for r in results.module_rows()}
    assert rows["old.hlo"]["flops"] == 7 and rows["old.hlo"]["comm_bytes_per_device"] is None
    assert rows[str(tmp_path / "loop.hlo")]["comm_bytes_per_device"] == 10 * (2 * 7 * 16384 // 8)
