"""The SQLite database a batch run writes: one row per module file, optional per-scope rows, and
one row per run. Exports to CSV, JSON lines and Parquet.

Durability: the database is in WAL mode and every finished file is committed on its own, so a
killed run loses at most the files that were still being analysed. A re-run skips a file when
its row already holds the same content hash and engine version (and was not a timeout or a
crashed worker, which may succeed with another limit or on another machine).

Exact counts can exceed SQLite's 64-bit integers (a big training step with its loops multiplied
out); those columns are declared without a type, so SQLite stores each value as it is given
(an INTEGER when it fits, else its decimal TEXT) instead of rounding it to a REAL.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from hloflops.report.format import csv_cell

SCHEMA_VERSION = "1"
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# Statuses a module row can have. Only "ok" rows carry counts.
OK = "ok"
PARSE_ERROR = "parse_error"  # hloparse.HloParseError: the text is not HLO we can read
READ_ERROR = "read_error"  # not readable, not a regular file, bad gzip, not UTF-8
ANALYSIS_ERROR = "error"  # the text parsed but the analysis raised: an engine bug worth reporting
TIMEOUT = "timeout"  # exceeded the per-file time limit; the worker was killed
CRASHED = "crashed"  # the worker process died (segfault, out of memory, os._exit)
MEMORY = "memory"  # the worker hit its memory limit (--memory-limit) on this file
# A failure that may not happen again with the same bytes (a larger limit, another machine) is
# retried by a rerun; the rest are properties of the file's content. Files that could not be read
# at all have no content hash, so they are always retried.
RETRYABLE = frozenset({TIMEOUT, CRASHED, MEMORY})

EXACT_COLUMNS = ("flops", "transcendentals", "bytes_accessed", "model_flops", "remat_flops", "comm_bytes_per_device",
                 "flops_low", "flops_high")
# formula: where a trip count is unknown, the totals in the unknown counts (Report.to_dict()'s
# *_formula, formula_symbols, formula_bounds and formula_notes keys, hloflops.report.formulas)
JSON_COLUMNS = ("loops", "uncounted", "formula")
# Columns that describe when/how a row was made rather than what the module costs; a rerun that
# changes only these has reproduced the same result.
VOLATILE_COLUMNS = ("run_id", "seconds", "finished_at")

MODULE_COLUMNS = (
    "path",
    "content_hash",
    "size_bytes",
    "stage",
    "module_name",
    "status",
    "error",
    *EXACT_COLUMNS,
    "xla_flops",
    "xla_transcendentals",
    "xla_bytes_accessed",
    "ratio",
    "n_loops",
    "n_unknown_trip_counts",
    "n_uncounted",
    "devices",
    "program_fingerprint",
    "entry_signature",
    "exact",
    "range_reason",
    *JSON_COLUMNS,
    "engine_version",
    *VOLATILE_COLUMNS,
)
SCOPE_COLUMNS = ("path", "scope", "flops", "transcendentals", "bytes_accessed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    engine_version TEXT NOT NULL,
    argv TEXT NOT NULL,
    files INTEGER,
    analyzed INTEGER,
    cached INTEGER,
    failed INTEGER
);
CREATE TABLE IF NOT EXISTS modules (
    path TEXT PRIMARY KEY,
    content_hash TEXT,
    size_bytes INTEGER,
    stage TEXT,
    module_name TEXT,
    status TEXT NOT NULL,
    error TEXT,
    flops,
    transcendentals,
    bytes_accessed,
    model_flops,
    remat_flops,
    xla_flops REAL,
    xla_transcendentals REAL,
    xla_bytes_accessed REAL,
    ratio REAL,
    n_loops INTEGER,
    n_unknown_trip_counts INTEGER,
    n_uncounted INTEGER,
    loops TEXT,
    uncounted TEXT,
    engine_version TEXT NOT NULL,
    run_id INTEGER,
    seconds REAL,
    finished_at TEXT,
    comm_bytes_per_device,
    devices INTEGER,
    program_fingerprint TEXT,
    entry_signature TEXT,
    flops_low,
    flops_high,
    exact INTEGER,
    range_reason TEXT,
    formula TEXT
);
CREATE INDEX IF NOT EXISTS modules_by_hash ON modules (content_hash, engine_version);
CREATE TABLE IF NOT EXISTS scopes (
    path TEXT NOT NULL,
    scope TEXT NOT NULL,
    flops,
    transcendentals,
    bytes_accessed,
    PRIMARY KEY (path, scope)
);
"""


# Columns added after the first schema: (name, declared type), for _add_missing_columns.
_ADDED_COLUMNS = (("comm_bytes_per_device", ""), ("devices", "INTEGER"), ("program_fingerprint", "TEXT"),
                  ("entry_signature", "TEXT"), ("flops_low", ""), ("flops_high", ""), ("exact", "INTEGER"),
                  ("range_reason", "TEXT"), ("formula", "TEXT"))


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _to_sql_int(value: Any) -> Any:
    """An exact count as SQLite can hold it without rounding."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return str(value)
    return value


def _from_sql_int(value: Any) -> Any:
    return int(value) if isinstance(value, str) else value


def ratio_of(flops: Any, xla_flops: Any) -> float | None:
    """exact / XLA; None where XLA's number is missing or not positive (custom-calls make it -1)."""
    if not isinstance(flops, int) or not isinstance(xla_flops, (int, float)) or xla_flops <= 0:
        return None
    return flops / xla_flops


def row_from_result(
    result: Mapping[str, Any],
    *,
    path: str,
    content_hash: str | None,
    size_bytes: int,
    stage: str | None,
    engine_version: str,
    run_id: int,
) -> dict[str, Any]:
    """A `modules` row from what the per-file worker returned (see `hloflops.batch.worker`)."""
    loops = result.get("loops")
    uncounted = result.get("uncounted")
    row: dict[str, Any] = {
        "path": path,
        "content_hash": content_hash,
        "size_bytes": size_bytes,
        "stage": stage,
        "module_name": result.get("module_name"),
        "status": result["status"],
        "error": result.get("error"),
        "xla_flops": result.get("xla_flops"),
        "xla_transcendentals": result.get("xla_transcendentals"),
        "xla_bytes_accessed": result.get("xla_bytes_accessed"),
        "ratio": ratio_of(result.get("flops"), result.get("xla_flops")),
        "n_loops": len(loops) if loops is not None else None,
        "n_unknown_trip_counts": sum(1 for lp in loops if lp.get("trip_count") is None) if loops is not None else None,
        "n_uncounted": len(uncounted) if uncounted is not None else None,
        "devices": result.get("devices"),
        "program_fingerprint": result.get("program_fingerprint"),
        "entry_signature": result.get("entry_signature"),
        # flops_low..flops_high: the range where the program decides conditionals at run time
        # (range_reason says which); exact 1 only where every count is known and resolved
        "exact": None if result.get("exact") is None else int(bool(result["exact"])),
        "range_reason": result.get("range_reason"),
        "loops": json.dumps(loops, sort_keys=True) if loops is not None else None,
        "uncounted": json.dumps(uncounted, sort_keys=True) if uncounted is not None else None,
        "formula": json.dumps(result["formula"], sort_keys=True) if result.get("formula") is not None else None,
        "engine_version": result.get("engine_version") or engine_version,
        "run_id": run_id,
        "seconds": result.get("seconds"),
        "finished_at": utc_now(),
    }
    for column in EXACT_COLUMNS:
        row[column] = result.get(column)
    return row


class DatabaseUnusable(RuntimeError):
    """The --db path cannot hold hloflops results: a usage error, found before anything is written."""


def check_database(path: str | Path) -> None:
    """Raise DatabaseUnusable unless `path` is an hloflops database we may write, or a new (or
    empty) file in a writable directory. Opened read-only: another program's SQLite file gets
    no tables added, a corrupt one no journal."""
    path = Path(path)
    if path.is_dir():
        raise DatabaseUnusable(f"{path}: is a directory, not a database file")
    if not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        existing = next((p for p in [parent, *parent.parents] if p.exists()), Path("."))
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise DatabaseUnusable(f"{path}: cannot create the database here ({existing} is not writable)")
        return
    if not path.is_file():
        raise DatabaseUnusable(f"{path}: not a regular file")
    if not os.access(path, os.R_OK | os.W_OK) or not path.stat().st_mode & 0o222:  # (root ignores the bits)
        raise DatabaseUnusable(f"{path}: database file is not readable and writable")
    if path.stat().st_size == 0:
        return  # an empty file is a new SQLite database
    # A header that says WAL makes even a read-only open create `-wal` and `-shm` beside the
    # file (one random 4 kB "database" in ~200 does): a file we refuse must be left as we found it.
    absent = [c for c in (Path(f"{path}-wal"), Path(f"{path}-shm")) if not c.exists()]
    try:
        tables, found = _tables_and_schema(path)
        if found is None or "modules" not in tables:  # (an older hloflops database may lack later tables)
            raise DatabaseUnusable(f"{path}: an SQLite database, but not an hloflops batch database "
                                   f"(tables: {', '.join(sorted(tables)) or 'none'}); choose another --db")
    except DatabaseUnusable:
        for companion in absent:
            companion.unlink(missing_ok=True)
        raise


def _tables_and_schema(path: Path) -> tuple[set[str], Any]:
    """The tables of an SQLite file and its hloflops schema version (None without one), read
    through a read-only connection; DatabaseUnusable if SQLite cannot read it."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            found = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
                if "meta" in tables else None
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise DatabaseUnusable(f"{path}: not a usable SQLite database ({e})") from None
    return tables, found


class ResultsDB:
    """One batch database. Not shared between threads; the batch parent process owns it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        check_database(self.path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=60.0)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL keeps every committed transaction across a killed process (only a
        # power cut can lose the last ones), at a fraction of FULL's fsyncs.
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)
        self._add_missing_columns()
        found = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found is None:
            self.conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        elif found[0] != SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: batch database schema {found[0]}, this hloflops writes {SCHEMA_VERSION}")
        self.conn.commit()

    def _add_missing_columns(self) -> None:
        """Columns newer than a database's file (a CREATE TABLE IF NOT EXISTS leaves an old table
        as it is): added empty, so its rows stay readable; the next run fills them in, since the
        engine version changed with them."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(modules)")}
        for column, declared in _ADDED_COLUMNS:
            if column not in have:
                self.conn.execute(f"ALTER TABLE modules ADD COLUMN {column} {declared}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------------------------
    def begin_run(self, argv: Sequence[str], engine_version: str) -> int:
        cur = self.conn.execute(
            "INSERT INTO runs (started_at, engine_version, argv) VALUES (?, ?, ?)",
            (utc_now(), engine_version, json.dumps(list(argv))),
        )
        self.conn.commit()
        return int(cur.lastrowid)

    def end_run(self, run_id: int, *, files: int, analyzed: int, cached: int, failed: int) -> None:
        self.conn.execute(
            "UPDATE runs SET finished_at=?, files=?, analyzed=?, cached=?, failed=? WHERE run_id=?",
            (utc_now(), files, analyzed, cached, failed, run_id),
        )
        self.conn.commit()

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id")]

    # -- modules ----------------------------------------------------------------------------
    def is_cached(self, path: str, content_hash: str, engine_version: str) -> bool:
        found = self.conn.execute(
            "SELECT content_hash, engine_version, status FROM modules WHERE path=?", (path,)
        ).fetchone()
        return (
            found is not None
            and found["content_hash"] == content_hash
            and found["engine_version"] == engine_version
            and found["status"] not in RETRYABLE
        )

    def write(self, row: Mapping[str, Any], scopes: Iterable[Mapping[str, Any]] | None = None) -> None:
        """Replace the row of `row["path"]` (and its scope rows) and commit."""
        values = [_to_sql_int(row.get(c)) if c in EXACT_COLUMNS else row.get(c) for c in MODULE_COLUMNS]
        with self.conn:  # one transaction per file: committed on exit
            self.conn.execute(
                f"INSERT OR REPLACE INTO modules ({', '.join(MODULE_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(MODULE_COLUMNS))})",
                values,
            )
            self.conn.execute("DELETE FROM scopes WHERE path=?", (row["path"],))
            if scopes:
                self.conn.executemany(
                    "INSERT OR REPLACE INTO scopes VALUES (?, ?, ?, ?, ?)",
                    [
                        (
                            row["path"],
                            s["scope"],
                            _to_sql_int(s["flops"]),
                            _to_sql_int(s["transcendentals"]),
                            _to_sql_int(s["bytes_accessed"]),
                        )
                        for s in scopes
                    ],
                )

    def module_rows(self, paths: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Rows as Python values (exact counts as ints), ordered by path."""
        rows = [_decode_row(dict(r)) for r in self.conn.execute("SELECT * FROM modules ORDER BY path")]
        if paths is not None:
            wanted = set(paths)
            rows = [r for r in rows if r["path"] in wanted]
        return rows

    def scope_rows(self) -> list[dict[str, Any]]:
        return [_decode_row(dict(r)) for r in self.conn.execute("SELECT * FROM scopes ORDER BY path, scope")]


def _decode_row(row: dict[str, Any]) -> dict[str, Any]:
    for column in EXACT_COLUMNS:
        if column in row:
            row[column] = _from_sql_int(row[column])
    return row


# -- exports ----------------------------------------------------------------------------------
EXPORT_FORMATS = ("csv", "jsonl", "parquet")


def export_format_for(path: str | Path) -> str:
    name = str(path).lower()
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise ValueError(f"{path}: cannot tell the export format from the name (use .csv, .jsonl or .parquet)")


def export(db: ResultsDB, out: str | Path, *, table: str = "modules", fmt: str | None = None) -> int:
    """Write `table` ("modules" or "scopes") to `out`; returns the number of rows written."""
    fmt = fmt or export_format_for(out)
    if table == "modules":
        rows, columns = db.module_rows(), MODULE_COLUMNS
    elif table == "scopes":
        rows, columns = db.scope_rows(), SCOPE_COLUMNS
    else:
        raise ValueError(f"unknown table {table!r}")
    if fmt == "csv":
        _write_csv(rows, columns, out)
    elif fmt == "jsonl":
        _write_jsonl(rows, columns, out)
    elif fmt == "parquet":
        _write_parquet(rows, columns, out)
    else:
        raise ValueError(f"unknown export format {fmt!r} (one of {', '.join(EXPORT_FORMATS)})")
    return len(rows)


def _write_csv(rows: list[dict[str, Any]], columns: Sequence[str], out: str | Path) -> None:
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({c: csv_cell(row.get(c)) for c in columns})  # no formula a spreadsheet would run


def _json_ready(row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    out = {c: row.get(c) for c in columns}
    for column in JSON_COLUMNS:
        if column in out and out[column] is not None:
            out[column] = json.loads(out[column])
    return out


def _write_jsonl(rows: list[dict[str, Any]], columns: Sequence[str], out: str | Path) -> None:
    with open(out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(_json_ready(row, columns), sort_keys=False) + "\n")


def _write_parquet(rows: list[dict[str, Any]], columns: Sequence[str], out: str | Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # optional dependency
        raise RuntimeError("Parquet export needs pyarrow: python3 -m pip install pyarrow") from e
    arrays = {}
    for column in columns:
        values = [row.get(column) for row in rows]
        if column in EXACT_COLUMNS or column == "size_bytes":
            ints = [v for v in values if v is not None]
            if all(INT64_MIN <= v <= INT64_MAX for v in ints):
                arrays[column] = pa.array(values, type=pa.int64())
            else:  # exact beyond int64: keep every digit as a decimal string
                arrays[column] = pa.array([None if v is None else str(v) for v in values], type=pa.string())
        elif column in ("xla_flops", "xla_transcendentals", "xla_bytes_accessed", "ratio", "seconds"):
            arrays[column] = pa.array(values, type=pa.float64())
        elif column in ("n_loops", "n_unknown_trip_counts", "n_uncounted", "run_id", "devices", "exact"):
            arrays[column] = pa.array(values, type=pa.int64())
        else:
            arrays[column] = pa.array(values, type=pa.string())
    pq.write_table(pa.table(arrays), str(out))


def comparable_rows(rows: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows without the columns that record when/how they were made (for comparing two runs)."""
    for row in rows:
        yield {k: v for k, v in row.items() if k not in VOLATILE_COLUMNS}
