"""Shared material for the batch tests: a real XLA dump directory made by running jax with
`XLA_FLAGS=--xla_dump_to`, mixed with bad files, and fake per-file functions.

The dump is made once per test session (a jax subprocess takes a few seconds) and copied into
each test's own directory, so tests can add, change and remove files freely.
"""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

_JAX_PROGRAM = textwrap.dedent(
    """
    import jax, jax.numpy as jnp

    @jax.jit
    def looped(x):  # a while loop XLA counts once
        return jax.lax.fori_loop(0, 7, lambda i, c: jnp.tanh(c @ c), x)

    @jax.jit
    def scanned(w, xs):
        def step(c, x):
            c = jnp.sin(c @ w + x)
            return c, c.sum()
        return jax.lax.scan(step, jnp.zeros((4, 16)), xs)

    @jax.jit
    def plain(a, b):
        return (a @ b).sum()

    looped(jnp.ones((8, 8)))
    scanned(jnp.ones((16, 16)), jnp.ones((5, 4, 16)))
    plain(jnp.ones((3, 5)), jnp.ones((5, 2)))
    """
)

_cache: dict[str, Path] = {}


def _make_dump() -> Path:
    if "dump" not in _cache:
        out = Path(tempfile.mkdtemp(prefix="hloflops-batch-dump-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={out}", JAX_PLATFORMS="cpu")
        subprocess.run([sys.executable, "-c", _JAX_PROGRAM], env=env, check=True, timeout=300)
        _cache["dump"] = out
    return _cache["dump"]


def after_optimization_texts(directory: Path) -> list[Path]:
    """What XLA dumped as after-optimizations text, found with a plain glob (not our discovery)."""
    return sorted(p for p in directory.rglob("module_*after_optimizations.txt"))


# name -> (content, expected status); the content is bytes, or a callable(path) that makes the file
def bad_files(good_text: str) -> dict[str, tuple[Any, str]]:
    return {
        "corrupt.hlo": (b"HloModule broken\n\nENTRY main {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] add(p\n}\n",
                        "parse_error"),
        "truncated.hlo": (good_text[: len(good_text) // 2].encode(), "parse_error"),
        "empty.hlo": (b"", "parse_error"),
        "binary.hlo": (bytes(range(256)) * 4, "read_error"),
        "truncated.hlo.gz": (gzip.compress(good_text.encode())[:40], "read_error"),
        "dangling.hlo": (lambda p: os.symlink(p.parent / "does-not-exist", p), "read_error"),
        "pipe.hlo": (lambda p: os.mkfifo(p), "read_error"),
    }


def make_mixed_dir(root: Path) -> dict[str, Any]:
    """A copy of the real dump plus bad files and a gzipped good module; returns what was put where."""
    dump = root / "dump"
    shutil.copytree(_make_dump(), dump)
    good = after_optimization_texts(dump)
    assert len(good) >= 3, f"jax dumped too little: {sorted(os.listdir(dump))}"
    good_text = max(good, key=lambda p: p.stat().st_size).read_text()
    bad_dir = root / "bad"
    bad_dir.mkdir()
    expected_bad: dict[Path, str] = {}
    for name, (content, status) in bad_files(good_text).items():
        path = bad_dir / name
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
        expected_bad[path] = status
    zipped = root / "plain" / "zipped.hlo.gz"
    zipped.parent.mkdir()
    zipped.write_bytes(gzip.compress(good_text.encode()))
    # Not readable by its owner; root reads it anyway, so the expectation depends on who runs the test.
    locked = bad_dir / "locked.hlo"
    locked.write_text(good_text)
    locked.chmod(0)
    expected_bad[locked] = "ok" if os.access(locked, os.R_OK) else "read_error"
    return {"dump": dump, "good": good, "gz": zipped, "good_text": good_text, "bad": expected_bad}


# ---- fake per-file functions (module level, so workers can import them) ------------------------
def fake_ok(path: str, data: bytes, options: Any) -> dict[str, Any]:
    """A successful record whose numbers come from the bytes, some beyond SQLite's int64."""
    n = len(data)
    return {
        "status": "ok",
        "module_name": Path(path).name,
        "flops": n * 10**20 + 1,
        "transcendentals": n,
        "bytes_accessed": 2 * n,
        "model_flops": n * 10**20,
        "remat_flops": 1,
        "xla_flops": float(n),
        "xla_transcendentals": float(n),
        "xla_bytes_accessed": float(2 * n),
        "loops": [{"name": "while.1", "trip_count": None, "source": "unknown", "executions": 1}],
        "uncounted": [],
    }


def fake_by_content(path: str, data: bytes, options: Any) -> dict[str, Any]:
    """Hangs, crashes, raises or succeeds, as the file says."""
    if data.startswith(b"HANG"):
        time.sleep(3600)
    if data.startswith(b"CRASH"):
        os._exit(7)
    if data.startswith(b"SEGV"):
        import faulthandler
        import signal

        faulthandler.disable()  # pytest's handler would print the worker's stack on the way down
        os.kill(os.getpid(), signal.SIGSEGV)
    if data.startswith(b"RAISE"):
        raise RuntimeError("the fake engine broke")
    return fake_ok(path, data, options)


# The fakes are engines of their own: their rows are cached under their version, not the real
# engine's (which changes whenever the engine's sources do).
def _fake_engine_version() -> str:
    return "fake-engine-1"


fake_ok.engine_version = _fake_engine_version
fake_by_content.engine_version = _fake_engine_version


# The batch database as schema version 1 wrote it (before the communication, range and formula
# columns): tests open it with today's code to check that it gains the new columns.
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE modules (path TEXT PRIMARY KEY, content_hash TEXT, size_bytes INTEGER, stage TEXT, module_name TEXT,
    status TEXT NOT NULL, error TEXT, flops, transcendentals, bytes_accessed, model_flops, remat_flops,
    xla_flops REAL, xla_transcendentals REAL, xla_bytes_accessed REAL, ratio REAL, n_loops INTEGER,
    n_unknown_trip_counts INTEGER, n_uncounted INTEGER, loops TEXT, uncounted TEXT, engine_version TEXT NOT NULL,
    run_id INTEGER, seconds REAL, finished_at TEXT);
"""
OLD_ROW = "INSERT INTO modules (path, status, flops, engine_version) VALUES ('old.hlo', 'ok', 7, 'old');"


def schema_1_database(path: Path, *statements: str) -> Path:
    """A database file at `path` as schema version 1 wrote it, with `statements` run after."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_1 + "\n".join(statements))
    conn.commit()
    conn.close()
    return path
