"""A batch run killed midway (SIGKILL, no chance to clean up) and rerun ends with the same database
as an uninterrupted run, and the rerun does not redo the files the killed run had finished."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from hloflops.batch.db import ResultsDB, comparable_rows

REPO = Path(__file__).resolve().parents[2]
COPIES = 24
MAX_EXAMPLE_BYTES = 150_000  # leave out the two slowest examples: many small files, not a few big ones


def _make_input(root: Path) -> int:
    examples = sorted(p for p in (REPO / "examples").glob("*.hlo") if p.stat().st_size <= MAX_EXAMPLE_BYTES)
    assert len(examples) >= 6, "the bundled examples are missing"
    for k in range(COPIES):
        target = root / f"copy_{k:02d}"
        target.mkdir(parents=True)
        for example in examples:
            shutil.copyfile(example, target / example.name)
    return COPIES * len(examples)


def _snapshot_engine(root: Path) -> Path:
    """A private copy of the engine's sources, so that edits to the working tree while the test runs
    cannot change the engine version between the runs being compared."""
    for directory, package in (("hloparse", "hloparse"), ("analysis/hloflops", "hloflops")):
        shutil.copytree(REPO / directory, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")  # the version is part of the engine's
    return root


def _cli(directory: Path, db: Path) -> list[str]:
    return [sys.executable, "-m", "hloflops.batch.run", str(directory), "--db", str(db),
            "-j", "2", "--no-progress", "-q"]


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM modules").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_killed_batch_resumes_to_the_same_database(tmp_path: Path) -> None:
    src = tmp_path / "in"
    n_files = _make_input(src)
    engine = _snapshot_engine(tmp_path / "engine")
    env = dict(os.environ, PYTHONPATH=str(engine))

    full_db = tmp_path / "full.sqlite"
    done = subprocess.run(_cli(src, full_db), cwd=engine, env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with ResultsDB(full_db) as results:
        full_rows = results.module_rows()
    assert len(full_rows) == n_files and all(r["status"] == "ok" for r in full_rows)

    db = tmp_path / "killed.sqlite"
    proc = subprocess.Popen(_cli(src, db), cwd=engine, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    deadline = started + 300
    while _count(db) < n_files // 3:
        assert proc.poll() is None, "the batch finished before it could be killed: make the input bigger"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # the parent only: its workers must not outlive it
    print(f"killed after {time.monotonic() - started:.1f} s")
    proc.wait(timeout=30)
    limit = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < limit:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "worker processes outlived the killed batch"

    with ResultsDB(db) as results:
        survived = {r["path"]: r for r in results.module_rows()}
        (killed_run,) = results.runs()
    assert n_files // 3 <= len(survived) < n_files, "not killed midway"
    assert killed_run["finished_at"] is None  # it never got to say it finished

    rerun = subprocess.run(_cli(src, db), cwd=engine, env=env, timeout=600, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    with ResultsDB(db) as results:
        final_rows = results.module_rows()
        runs = results.runs()

    # The same database as the uninterrupted run, apart from when/which run wrote each row.
    assert list(comparable_rows(final_rows)) == list(comparable_rows(full_rows))
    # Nothing the killed run finished was redone: those rows are untouched, and the rerun's own
    # bookkeeping says it analysed exactly the rest.
    final_by_path = {r["path"]: r for r in final_rows}
    for path, row in survived.items():
        assert final_by_path[path] == row
    assert runs[1]["cached"] == len(survived)
    assert runs[1]["analyzed"] == n_files - len(survived)
    assert {r["path"] for r in final_rows if r["run_id"] == runs[1]["run_id"]} == set(final_by_path) - set(survived)
