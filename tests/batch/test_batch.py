"""Batch analysis on a real XLA dump directory mixed with corrupt, truncated, empty and unreadable
files: every good file has its row with the same numbers as `analyze()`, every bad file its error,
nothing raises; reruns skip unchanged files; timeouts and crashed workers are recorded."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import sqlite3
import sys
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from hloflops.api import analyze
from hloflops.batch.run import cli_main, format_summary, run_batch
from hloflops.batch.db import ResultsDB, comparable_rows, export
from hloflops.batch.pool import Job, run_local
from hloflops.batch.worker import WorkerOptions
from tests.support.batch_fixtures import fake_by_content, fake_ok, make_mixed_dir


@pytest.fixture()
def mixed(tmp_path: Path) -> dict:
    return make_mixed_dir(tmp_path / "in")


def _rows(db: Path) -> dict[str, dict]:
    with ResultsDB(db) as results:
        return {r["path"]: r for r in results.module_rows()}


def test_dump_dir_with_bad_files(mixed: dict, tmp_path: Path) -> None:
    db = tmp_path / "out.sqlite"
    summary = run_batch([mixed["dump"].parent], db=db, processes=2, timeout_s=120, progress=False)
    rows = _rows(db)

    # Only module texts: one after-optimizations text per dumped module, the gzip, the bad files.
    expected_paths = {str(p) for p in mixed["good"]} | {str(mixed["gz"])} | {str(p) for p in mixed["bad"]}
    assert set(rows) == expected_paths
    assert summary.files == len(expected_paths) and summary.analyzed == summary.files and summary.cached == 0
    assert not any("buffer-assignment" in p or "before_optimizations" in p for p in rows)

    for path in mixed["good"]:
        row = rows[str(path)]
        assert row["status"] == "ok", row["error"]
        report = analyze(path)
        assert row["module_name"] == report.module_name
        assert row["stage"] == "cpu_after_optimizations"
        assert row["flops"] == report.flops and isinstance(row["flops"], int)
        assert row["transcendentals"] == report.transcendentals
        assert row["bytes_accessed"] == report.bytes_accessed
        assert row["model_flops"] == report.model_flops
        assert row["remat_flops"] == report.remat_flops
        assert row["xla_flops"] == report.xla_estimate["flops"]
        assert row["n_loops"] == len(report.loops)
        assert row["n_uncounted"] == len(report.uncounted)
        assert [lp["trip_count"] for lp in json.loads(row["loops"])] == [lp.trip_count for lp in report.loops]
        assert row["error"] is None and len(row["content_hash"]) == 64
    # The jax program has a 7-trip fori_loop and a 5-step scan: their modules show XLA's undercount.
    looped = [rows[str(p)] for p in mixed["good"] if ".jit_looped." in p.name]
    assert len(looped) == 1 and looped[0]["ratio"] > 1 and looped[0]["n_loops"] == 1
    assert json.loads(looped[0]["loops"])[0]["trip_count"] == 7

    gz_row = rows[str(mixed["gz"])]
    biggest = max(mixed["good"], key=lambda p: p.stat().st_size)
    assert gz_row["status"] == "ok" and gz_row["flops"] == rows[str(biggest)]["flops"]

    for path, status in mixed["bad"].items():
        row = rows[str(path)]
        assert row["status"] == status, (path.name, row)
        if status != "ok":
            assert row["error"] and "\n" not in row["error"]
            assert row["flops"] is None
    assert rows[str(mixed["dump"].parent / "bad" / "pipe.hlo")]["error"].startswith("cannot read: not a regular file")
    assert "not UTF-8" in rows[str(mixed["dump"].parent / "bad" / "binary.hlo")]["error"]
    assert "gzip" in rows[str(mixed["dump"].parent / "bad" / "truncated.hlo.gz")]["error"]

    n_bad = sum(1 for s in mixed["bad"].values() if s != "ok")
    assert summary.failed == n_bad and summary.exit_code == 1
    text = format_summary(summary)
    assert "Worst XLA undercount first" in text and "Failed files" in text
    # worst undercount first: the table's ratios never increase
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Worst XLA undercount")) + 2
    table = lines[start : lines.index("", start)]
    ratios = [float(line.split()[0][:-1]) for line in table if line.split()[0] != "-"]
    # one line per program (issue 33): the files of one program (the same name and fingerprint in
    # one directory) are folded into one line
    assert len(mixed["good"]) + 1 + (mixed["bad"][mixed["dump"].parent / "bad" / "locked.hlo"] == "ok") == len(
        [r for r in rows.values() if r["status"] == "ok"])
    from hloflops.batch.programs import programs
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert len(table) == len({(os.path.dirname(p), prog.label) for p, prog in programs(ok).items()}) < len(ok)
    assert ratios and ratios == sorted(ratios, reverse=True)


def test_rerun_skips_unchanged_and_redoes_changed(mixed: dict, tmp_path: Path) -> None:
    db = tmp_path / "out.sqlite"
    first = run_batch([mixed["dump"]], db=db, processes=2, progress=False)
    before = _rows(db)
    assert first.analyzed == first.files and first.cached == 0

    second = run_batch([mixed["dump"]], db=db, processes=2, progress=False)
    assert second.analyzed == 0 and second.cached == second.files
    after = _rows(db)
    assert after == before  # untouched, run ids and timestamps included

    # a changed file is analysed again; so is one whose row came from another engine version
    changed = mixed["good"][0]
    changed.write_text(changed.read_text() + "\n")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE modules SET engine_version='0.0.1+old' WHERE path=?", (str(mixed["good"][1]),))
    third = run_batch([mixed["dump"]], db=db, processes=2, progress=False)
    assert third.analyzed == 2 and third.cached == third.files - 2
    redone = {p for p, r in _rows(db).items() if r["run_id"] == third.run_id}
    assert redone == {str(changed), str(mixed["good"][1])}
    with ResultsDB(db) as results:
        runs = results.runs()
    assert [(r["analyzed"], r["cached"]) for r in runs] == [(first.files, 0), (0, first.files), (2, first.files - 2)]


def test_timeouts_and_crashes_are_recorded(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    contents = {
        "hang.hlo": b"HANG",
        "crash.hlo": b"CRASH",
        "segv.hlo": b"SEGV",
        "raise.hlo": b"RAISE",
        **{f"ok{i}.hlo": b"HloModule m%d\n" % i for i in range(6)},
    }
    for name, data in contents.items():
        (src / name).write_bytes(data)
    db = tmp_path / "out.sqlite"
    summary = run_batch([src], db=db, processes=2, timeout_s=3, worker_fn=fake_by_content, progress=False)
    rows = {Path(p).name: r for p, r in _rows(db).items()}
    assert set(rows) == set(contents)
    assert rows["hang.hlo"]["status"] == "timeout" and "3 s" in rows["hang.hlo"]["error"]
    assert rows["crash.hlo"]["status"] == "crashed" and "exit code 7" in rows["crash.hlo"]["error"]
    assert rows["segv.hlo"]["status"] == "crashed" and "SIGSEGV" in rows["segv.hlo"]["error"]
    assert rows["raise.hlo"]["status"] == "error" and "the fake engine broke" in rows["raise.hlo"]["error"]
    for i in range(6):
        assert rows[f"ok{i}.hlo"]["status"] == "ok"
    assert summary.failed == 4 and summary.exit_code == 1

    # A rerun retries timeouts and crashes (they may pass with another limit), not the rest.
    again = run_batch([src], db=db, processes=2, timeout_s=3, worker_fn=fake_by_content, progress=False)
    redone = {Path(p).name for p, r in _rows(db).items() if r["run_id"] == again.run_id}
    assert redone == {"hang.hlo", "crash.hlo", "segv.hlo"}


def test_exact_counts_beyond_int64_and_exports(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        (src / f"m{i}.hlo").write_bytes(b"x" * (i + 1))
    (src / "bad.hlo").write_bytes(b"RAISE")
    db = tmp_path / "out.sqlite"
    run_batch([src], db=db, processes=1, worker_fn=fake_by_content, progress=False)
    rows = _rows(db)
    flops = {Path(p).name: r["flops"] for p, r in rows.items()}
    assert flops["m2.hlo"] == 3 * 10**20 + 1  # > 2**63, stored without rounding
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT typeof(flops) FROM modules WHERE path LIKE '%m2.hlo'").fetchone()[0] == "text"

    with ResultsDB(db) as results:
        assert export(results, tmp_path / "out.csv") == 4
        assert export(results, tmp_path / "out.jsonl") == 4
    with open(tmp_path / "out.csv", newline="") as f:
        by_name = {Path(r["path"]).name: r for r in csv.DictReader(f)}
    assert int(by_name["m2.hlo"]["flops"]) == 3 * 10**20 + 1 and by_name["bad.hlo"]["status"] == "error"
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    by_name = {Path(r["path"]).name: r for r in lines}
    assert by_name["m2.hlo"]["flops"] == 3 * 10**20 + 1
    assert by_name["m0.hlo"]["loops"] == [{"executions": 1, "name": "while.1", "source": "unknown",
                                           "trip_count": None}]


def test_parquet_export(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.hlo").write_bytes(b"aaaa")
    db = tmp_path / "out.sqlite"
    run_batch([src], db=db, processes=1, worker_fn=fake_ok, progress=False)
    with ResultsDB(db) as results:
        export(results, tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert len(table) == 1
    assert table[0]["flops"] == str(4 * 10**20 + 1)  # beyond int64: kept as its decimal digits
    assert table[0]["transcendentals"] == 4 and table[0]["status"] == "ok"


def test_scope_rows(mixed: dict, tmp_path: Path) -> None:
    db = tmp_path / "out.sqlite"
    run_batch([mixed["dump"]], db=db, processes=1, scopes=True, scope_depth=None, progress=False)
    with ResultsDB(db) as results:
        scopes = results.scope_rows()
    for path in mixed["good"]:
        mine = [s for s in scopes if s["path"] == str(path)]
        report = analyze(path)
        assert {s["scope"]: s["flops"] for s in mine} == {g.key: g.total.flops for g in report.by_scope()}
        assert sum(s["flops"] for s in mine) == report.flops


def test_cli(mixed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.sqlite"
    out = io.StringIO()
    with redirect_stdout(out):
        status = cli_main(["batch", str(mixed["dump"].parent), "--db", str(db), "-j", "2", "--no-progress",
                           "--export", str(tmp_path / "rows.csv")])
    assert status == 1  # the bad files failed
    assert "Worst XLA undercount first" in out.getvalue()
    assert (tmp_path / "rows.csv").read_text().count("\n") == len(_rows(db)) + 1
    # export only, from an existing database
    assert cli_main(["--db", str(db), "--export", str(tmp_path / "rows.jsonl")]) == 0
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == len(_rows(db))
    # only good files: exit status 0
    with redirect_stdout(io.StringIO()):
        assert cli_main([str(mixed["dump"]), "--db", str(tmp_path / "good.sqlite"), "--no-progress"]) == 0
    assert cli_main(["--db", str(tmp_path / "missing.sqlite"), "--export", str(tmp_path / "x.csv")]) == 2
    assert cli_main(["batch"]) == 2
    assert list(comparable_rows([{"path": "p", "run_id": 3, "seconds": 1.0, "finished_at": "t"}])) == [{"path": "p"}]


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_every_start_method_survives_hangs_and_crashes(start_method: str) -> None:
    # fork is used when this process has no threads; with jax imported (as in the full test suite)
    # a forkserver; spawn where neither exists. Each must kill a stuck worker and outlive a dead one.
    if start_method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{start_method} does not exist on this platform")
    jobs = [Job(f"/in/{name}", data) for name, data in
            [("hang", b"HANG"), ("crash", b"CRASH"), ("a", b"aa"), ("b", b"bbb"), ("c", b"c")]]
    records: dict[str, dict] = {}
    run_local(jobs, fn=fake_by_content, options=WorkerOptions(), processes=2, timeout_s=2,
              start_method=start_method, on_done=lambda job, record: records.__setitem__(job.path, record))
    assert records["/in/hang"]["status"] == "timeout"
    assert records["/in/crash"]["status"] == "crashed" and "exit code 7" in records["/in/crash"]["error"]
    assert {p: r["transcendentals"] for p, r in records.items() if r["status"] == "ok"} == {
        "/in/a": 2, "/in/b": 3, "/in/c": 1}


def test_start_method_follows_threads_in_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    from hloflops.batch import pool as batch_pool

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(batch_pool, "_parent_has_threads", lambda: False)
    assert batch_pool._mp_context().get_start_method() == "fork"
    monkeypatch.setattr(batch_pool, "_parent_has_threads", lambda: True)
    assert batch_pool._mp_context().get_start_method() == "forkserver"
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "jax", object())
    assert batch_pool._parent_has_threads()


def _pid_and_memory(path: str, data: bytes, options: WorkerOptions) -> dict:
    """The real analysis, and which worker process did it."""
    from hloflops.batch.worker import analyze_file

    return {**analyze_file(path, data, options), "pid": os.getpid()}


def test_a_worker_retires_after_its_share_of_bytes_and_every_file_is_still_recorded(examples_dir: Path) -> None:
    """The engine's objects hold cycles that the collector hardly ever reaches: a worker kept every
    module it analysed. It retires once it has analysed `retire_after` bytes (a fresh one takes over),
    so its memory stays bounded; the records are those of a worker that never retires."""
    module = (examples_dir / "fsdp_train_step.after_optimizations.hlo").read_bytes()
    jobs = [Job(f"/in/m{i}.hlo", module) for i in range(7)]
    runs: dict[int | None, dict[str, dict]] = {}
    for retire_after in (None, 2 * len(module)):
        records: dict[str, dict] = {}
        run_local(jobs, fn=_pid_and_memory, options=WorkerOptions(), processes=1, retire_after=retire_after,
                  start_method="fork", on_done=lambda job, record: records.__setitem__(job.path, record))
        runs[retire_after] = records
    retiring = runs[2 * len(module)]
    files_per_worker = Counter(r["pid"] for r in retiring.values())
    assert sorted(files_per_worker.values()) == [1, 2, 2, 2]  # 2, 2, 2, then the seventh file
    assert len(set(r["pid"] for r in runs[None].values())) == 1
    strip = ("pid", "seconds")
    assert [{k: v for k, v in r.items() if k not in strip} for r in retiring.values()] == [
        {k: v for k, v in r.items() if k not in strip} for r in runs[None].values()]
    assert all(r["status"] == "ok" for r in retiring.values()) and set(retiring) == {j.path for j in jobs}
