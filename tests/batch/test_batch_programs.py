"""'compiled N' means recompiled: real jax dumps where two functions share a module name (two
programs, two lines) and one function is compiled for several shapes (one program, compiled N
times); a database written before the program columns stays readable. And `hloflops DIR` without
`--db` writes nothing into the current directory: the database is in the per-user cache."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hloflops.batch.cache_dir import default_db_path, user_cache_dir
from hloflops.batch.db import ResultsDB
from hloflops.batch.programs import op_names, programs, recompiled_lines, strip_primitive_params
from hloflops.batch.run import run_batch
from hloflops.batch.summary import format_summary
from tests.conftest import SOURCE_PATH

ROOT = Path(__file__).resolve().parents[2]
REMAT_SCAN = ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo"

# Two different functions both jitted as `jit_f` (closures of two factories), then the first one
# again for two more shapes; a `train_step` with and without remat (same name, two programs).
SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp

    def make_sine():
        def f(x):
            return jnp.sin(x) * 2
        return f

    def make_matmul():
        def f(x):
            return x @ x.T
        return f

    def make_step(remat):
        def loss(w, x):
            layer = lambda w, x: jnp.tanh(x @ w)
            if remat:
                layer = jax.checkpoint(layer)
            return layer(w, layer(w, x)).sum()
        def train_step(w, x):
            return w - 0.1 * jax.grad(loss)(w, x)
        return train_step

    sine = jax.jit(make_sine())
    sine(jnp.ones((4, 4)))
    jax.jit(make_matmul())(jnp.ones((4, 4)))
    sine(jnp.ones((3, 3)))
    sine(jnp.ones((5, 5)))
    jnp.ones((1,))  # jit_broadcast_in_dim again: XLA makes this one a bitcast and drops its op_name
    jax.jit(make_step(False))(jnp.ones((8, 8)), jnp.ones((2, 8)))
    jax.jit(make_step(True))(jnp.ones((8, 8)), jnp.ones((2, 8)))
""")


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("jax")
    where = tmp_path_factory.mktemp("programs")
    (where / "script.py").write_text(SCRIPT)
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={where / 'dump'} --xla_dump_hlo_as_text",
           "JAX_PLATFORMS": "cpu", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    subprocess.run([sys.executable, str(where / "script.py")], env=env, check=True, timeout=300,
                   capture_output=True)
    return where / "dump"


def _summary_rows(dump: Path, db: Path) -> tuple[str, list[list[str]]]:
    summary = run_batch([dump], db=db, processes=1, progress=False)
    assert summary.failed == 0
    text = format_summary(summary, sort="name", top=100, paths=False)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Modules by name")) + 2
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return text, [line.split() for line in lines[start:end]]


def test_shared_names_are_two_programs_and_shapes_are_recompilations(dump: Path, tmp_path: Path) -> None:
    text, rows = _summary_rows(dump, tmp_path / "db.sqlite")
    compiled = {}
    for r in rows:  # the `compiled` column is the 4th, the module the last
        compiled.setdefault(r[-1], []).append(int(r[3]))
    # sine: 3 shapes of one program; matmul: another program of the same name, once
    assert compiled["jit_f#1"] == [3], text  # one line per program (issue 33), its compilations counted
    assert compiled["jit_f#2"] == [1], text
    assert "jit_f" not in compiled
    # train_step with and without remat: two programs, each compiled once
    assert compiled["jit_train_step#1"] == [1] and compiled["jit_train_step#2"] == [1], text
    # every jnp.ones is one program, also where the optimized text lost the op (the f32[1] one)
    assert "jit_broadcast_in_dim" in compiled and len(set(compiled["jit_broadcast_in_dim"])) == 1, text
    assert len(compiled["jit_broadcast_in_dim"]) == 1 and compiled["jit_broadcast_in_dim"][0] >= 6, text
    # the closing section names the recompiled program with each shape it was compiled for
    line = next(line for line in text.splitlines() if line.strip().startswith("jit_f#1 "))
    assert "3 times: (f32[4,4]) -> f32[4,4]; (f32[3,3]) -> f32[3,3]; (f32[5,5]) -> f32[5,5]" in line
    assert not any(line.strip().startswith(("jit_f#2 ", "jit_train_step")) for line in
                   text.split("Compiled more than once", 1)[1].splitlines())


def test_fingerprints_are_stored_and_shape_free(dump: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    run_batch([dump], db=db, processes=1, progress=False)
    with ResultsDB(db) as results:
        rows = [r for r in results.module_rows() if r["module_name"] == "jit_f"]
    by_id = {int(re.search(r"module_(\d+)", r["path"]).group(1)): r for r in rows}
    first, matmul, *again = [by_id[k] for k in sorted(by_id)]
    assert len(again) == 2 and all(r["program_fingerprint"] == first["program_fingerprint"] for r in again)
    assert matmul["program_fingerprint"] != first["program_fingerprint"]
    assert re.fullmatch(r"[0-9a-f]{16}", first["program_fingerprint"])
    assert {r["entry_signature"] for r in again} == {"(f32[3,3]) -> f32[3,3]", "(f32[5,5]) -> f32[5,5]"}


def test_recompiled_signatures_fit_the_width() -> None:
    rows = [{"path": f"/d/module_{i:04d}.jit_g.cpu_after_optimizations.txt", "module_name": "jit_g",
             "program_fingerprint": "aa", "status": "ok", "entry_signature": f"(f32[{i}]) -> f32[{i}]"}
            for i in range(1, 40)]
    _title, full = recompiled_lines(rows)
    assert full.count("f32[") == 78 and "more" not in full
    _title, fitted = recompiled_lines(rows, width=80)
    assert len(fitted) <= 80 and fitted.startswith("  jit_g  39 times: (f32[1]) -> f32[1]; ")
    assert re.search(r"; \+(\d+) more$", fitted)


def test_the_same_program_in_two_dumps_is_two_runs() -> None:
    rows = [{"path": f"/runs/{d}/module_0001.jit_f.cpu_after_optimizations.txt", "module_name": "jit_f",
             "program_fingerprint": "aa", "status": "ok"} for d in ("a", "b")]
    assert {p.label for p in programs(rows).values()} == {"jit_f"}
    assert all(p.compiled == 1 for p in programs(rows).values())


def test_older_jax_primitive_parameters_are_not_part_of_the_program() -> None:
    old = "jit(f)/broadcast_in_dim[shape=(3, 3) broadcast_dimensions=()]"
    assert strip_primitive_params(old) == "jit(f)/broadcast_in_dim"
    nested = "jit(f)/dot_general[dimension_numbers=(([1], [0]), ([], [])) precision=None]/x"
    assert strip_primitive_params(nested) == "jit(f)/dot_general/x"
    assert strip_primitive_params("state[1][0]") == "state[1][0]"  # a pytree path, not parameters
    assert strip_primitive_params("inputs['ids']") == "inputs['ids']"
    assert strip_primitive_params("a[b=[c]]/d[1]") == "a/d[1]"  # nested: the whole parameter list goes
    hostile = "[" * 100_000 + "="  # unbalanced, from a file: one pass, not one scan per bracket
    assert strip_primitive_params(hostile) == hostile


# The reading of op_names before it was made fast: one regular expression that starts with `\b`.
_WORD_BOUNDARY_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_PIECES = st.sampled_from(['op_name="', "op_name=", 'xop_name="', '_op_name="', '\u00e9op_name="', '"', "\\", '\\"',
                           "a", " ", "/", "=", "[", "]", "\n", ", ", "{", "}", "\u00e9", "1"])


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_op_names_are_what_the_word_boundary_expression_finds(text: str) -> None:
    assert op_names(text) == _WORD_BOUNDARY_OP_NAME.findall(text)


def test_op_names_of_corpus_modules(corpus_dir: Path) -> None:
    for path in sorted(corpus_dir.rglob("*.hlo")):  # every module: ~5 s
        text = path.read_text(errors="replace")
        assert op_names(text) == _WORD_BOUNDARY_OP_NAME.findall(text), path


def test_database_from_before_the_program_columns_stays_readable(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    (tmp_path / "m").mkdir()
    module = tmp_path / "m" / "a.hlo"
    module.write_text(REMAT_SCAN.read_text())
    run_batch([module], db=db, processes=1, progress=False)
    with sqlite3.connect(db) as conn:  # what an older hloflops wrote: no program columns
        conn.execute("ALTER TABLE modules DROP COLUMN program_fingerprint")
        conn.execute("ALTER TABLE modules DROP COLUMN entry_signature")
        conn.execute("UPDATE modules SET engine_version = 'older'")
    with ResultsDB(db) as results:  # opening adds the columns, empty
        (row,) = results.module_rows()
    assert row["program_fingerprint"] is None and row["status"] == "ok" and row["flops"] > 0
    assert programs([row])[row["path"]].compiled == 1  # grouped by name alone
    summary = run_batch([module], db=db, processes=1, progress=False)  # the rerun fills them in
    assert summary.analyzed == 1 and summary.rows[0]["program_fingerprint"] is not None


@pytest.mark.parametrize("platform,env,expected", [
    ("linux", {"HOME": "/h"}, "/h/.cache/hloflops"),
    ("linux", {"HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/x/hloflops"),
    ("freebsd14", {"HOME": "/h", "XDG_CACHE_HOME": "relative"}, "/h/.cache/hloflops"),
    ("darwin", {"HOME": "/h"}, "/h/Library/Caches/hloflops"),
    ("win32", {"USERPROFILE": "/u", "LOCALAPPDATA": "/l"}, "/l/hloflops/Cache"),
    ("win32", {"USERPROFILE": "/u"}, "/u/AppData/Local/hloflops/Cache"),
    ("darwin", {"HOME": "/h", "HLOFLOPS_CACHE_DIR": "/mine"}, "/mine"),
])
def test_cache_directory_by_platform(platform: str, env: dict[str, str], expected: str) -> None:
    assert user_cache_dir(env, platform) == Path(expected)
    assert default_db_path(env, platform) == Path(expected) / "batch.sqlite"


@pytest.mark.parametrize("variable", ["XDG_CACHE_HOME", "HLOFLOPS_CACHE_DIR"])
def test_no_database_in_the_current_directory(tmp_path: Path, variable: str) -> None:
    cwd, home, cache = tmp_path / "cwd", tmp_path / "home", tmp_path / "cache"
    for d in (cwd, home, cache):
        d.mkdir()
    (cwd / "m").mkdir()
    (cwd / "m" / "a.hlo").write_text(REMAT_SCAN.read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "HLOFLOPS_CACHE_DIR")}
    env.update({"HOME": str(home), variable: str(cache), "PYTHONPATH": SOURCE_PATH})
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", "m", "--no-progress", "-j", "1"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["m"] and sorted(p.name for p in (cwd / "m").iterdir()) == ["a.hlo"]
    where = Path(re.search(r"-> (\S+) \(run 1\)", proc.stdout).group(1))
    expected = cache / "hloflops" / "batch.sqlite" if variable == "XDG_CACHE_HOME" else cache / "batch.sqlite"
    assert where == expected and where.is_file() and not list(home.iterdir())
    with ResultsDB(where) as results:
        assert [r["module_name"] for r in results.module_rows()] == ["jit_train_step"]


def test_run_without_db_leaves_nothing_behind(tmp_path: Path) -> None:
    """`hloflops run` without --db analyses into a temporary database, removed with the dump."""
    pytest.importorskip("jax")
    cwd, home, cache, tmp = tmp_path / "cwd", tmp_path / "home", tmp_path / "cache", tmp_path / "tmp"
    for d in (cwd, home, cache, tmp):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "HLOFLOPS_CACHE_DIR")}
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp), "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": SOURCE_PATH})
    script = "import jax, jax.numpy as jnp; jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((4, 4)))"
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", "run", "--no-progress", "-j", "1", "--",
                           sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "a temporary database (--db PATH keeps one)" in proc.stdout and "Top module: jit__lambda " in proc.stdout
    assert not list(cwd.iterdir()) and not list(cache.iterdir()) and not list(tmp.iterdir())


def test_tables_fold_the_files_of_one_program():
    """issue 33: one row per program, its heaviest file, the compilations counted."""
    from hloflops.batch.summary import fold_programs, modules_table
    from hloflops.batch.programs import programs

    def row(path, flops, fingerprint, name="jit_step"):
        return {"path": path, "status": "ok", "module_name": name, "program_fingerprint": fingerprint,
                "flops": flops, "ratio": 2.0, "xla_flops": flops / 2, "n_loops": 1, "n_unknown_trip_counts": 0,
                "n_uncounted": 0, "remat_flops": 0, "entry_signature": "(f32[2]) -> f32[]", "seconds": 0.1}

    rows = [row("d/module_0001.jit_step.txt", 10, "a"), row("d/module_0002.jit_step.txt", 30, "a"),
            row("d/module_0003.jit_step.txt", 20, "b"), row("e/module_0001.jit_step.txt", 5, "a")]
    counts = programs(rows)
    folded = fold_programs(sorted(rows, key=lambda r: -r["flops"]), counts)
    assert [r["path"] for r in folded] == ["d/module_0002.jit_step.txt", "d/module_0003.jit_step.txt",
                                           "e/module_0001.jit_step.txt"]
    table = modules_table(folded, counts, paths=False)
    compiled = [line.split()[3] for line in table[1:]]
    assert compiled == ["2", "1", "1"]
