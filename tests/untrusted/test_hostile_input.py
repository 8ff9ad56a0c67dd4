"""Issue 12: hostile and unusual input. One test (at least) per row of the issue's table, at
sizes that would hang or exhaust memory before the fix but finish in well under a second now.

Time and memory as the input grows are held to linear by `test_hostile_linearity.py`; acceptance
against XLA's own parser by `test_hostile_xla_acceptance.py`.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hloparse
from hloflops import analyze
from hloparse import HloParseError
from tests.report.test_html import CHROMIUM_FLAGS, REMAT_SCAN, chromium
from tests.conftest import SOURCE_PATH

ROOT = Path(__file__).resolve().parents[2]
HEAD = "HloModule m\n\nENTRY e {\n"


def cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=timeout, env={**os.environ, "PYTHONPATH": SOURCE_PATH})


def cpu(fn) -> float:  # noqa: ANN001
    start = time.process_time()
    try:
        fn()
    except HloParseError:
        pass
    return time.process_time() - start


def one_line_usage_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(lines) <= 2, proc.stderr
    return lines[-1]


# ---- time and memory ----------------------------------------------------------------------------
def test_long_op_name_costs_linear_memory():
    """Was: 50 MB op_name -> 8.3 GB RSS (170 bytes a character, regex backtracking state)."""
    import tracemalloc

    text = HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="' + "a" * 2_000_000 + '"}\n}\n'
    analyze(hloparse.parse(HEAD + "  ROOT c = f32[] constant(1), metadata={op_name=\"a\"}\n}\n"))
    tracemalloc.start()
    try:
        analyze(hloparse.parse(text)).to_dict()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(text), peak / len(text)


def test_unterminated_string_over_many_lines_is_linear():
    """Was: not finished after 400 s for 100,000 lines (a join per line)."""
    text = HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="x\n' + "a\n" * 100_000 + "}\n"
    assert cpu(lambda: hloparse.parse(text)) < 5
    with pytest.raises(HloParseError, match="unterminated string"):
        hloparse.parse(text)


def test_operand_followed_by_many_spaces():
    """Was: over 60 s (`(.*?)\\s+name` backtracking)."""
    text = HEAD + "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(x" + " " * 50_000 + "!)\n}\n"
    assert cpu(lambda: hloparse.parse(text)) < 2  # was ~30 s
    with pytest.raises(HloParseError, match="cannot parse operand"):
        hloparse.parse(text)
    ok = HEAD + "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(f32[] p" + " " * 50_000 + ")\n}\n"
    assert hloparse.parse(ok).entry.root.operands == ("p",)


def test_long_compact_tuple_access_chain():
    """Was: `x#1#1...` 20,000 times over 120 s, 50,000 times 2.4 GB."""
    text = HEAD + "  p = (f32[]) parameter(0)\n  ROOT n = f32[] negate(f32[] p" + "#1" * 50_000 + ")\n}\n"
    assert cpu(lambda: hloparse.parse(text)) < 2
    with pytest.raises(HloParseError, match="compact tuple access chain"):
        hloparse.parse(text)


def test_many_escaped_quotes_in_unterminated_op_name():
    """Was: 50,000 `\\"` inside an unterminated op_name, over 60 s."""
    text = HEAD + '  ROOT c = f32[] constant(1), metadata={op_name="' + '\\"' * 50_000 + "\n}\n"
    assert cpu(lambda: hloparse.parse(text)) < 2
    with pytest.raises(HloParseError):
        hloparse.parse(text)


def test_gzip_bomb_is_refused_streamed(tmp_path):
    """Was: a 3 MB .hlo.gz inflating to 3 GiB inflated whole, MemoryError as an internal error."""
    bomb = tmp_path / "bomb.hlo.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        chunk = b"\0" * (1 << 20)
        for _ in range(300):  # 300 MiB of zeros: ~300 KB compressed, past the 256 MiB floor
            f.write(chunk)
    proc = cli(str(bomb))
    assert "inflates beyond" in one_line_usage_error(proc)
    small = tmp_path / "ok.hlo.gz"
    small.write_bytes(gzip.compress(REMAT_SCAN.read_bytes()))
    assert cli(str(small), "--json").returncode == 0
    from hloflops.batch.worker import decode_module_text

    with pytest.raises(ValueError, match="inflates beyond"):
        decode_module_text(gzip.compress(b"x" * 5000), max_inflated=1000)


# ---- trip counts and depth ------------------------------------------------------------------------
LOOP = """HloModule m

body {
  p = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT a = s32[] add(p, one)
}

cond {
  p = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}

ENTRY e {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body, backend_config={"known_trip_count":{"n":"TRIPS"}}
}
"""


@pytest.mark.parametrize("n, why", [("-1000000", "negative"), ("9" * 4000, "beyond int64")])
def test_negative_or_absurd_known_trip_count_is_unknown(tmp_path, n, why):
    """Was: negative FLOPs, `exact: true`, --strict exits 0 (and a 4,000-digit count OverflowError)."""
    report = analyze(LOOP.replace("TRIPS", n))
    assert not report.is_exact and report.flops >= 0
    (loop,) = report.loops
    assert loop.trip_count is None and why in loop.note
    path = tmp_path / "loop.hlo"
    path.write_text(LOOP.replace("TRIPS", n))
    assert cli(str(path), "--strict").returncode == 1
    assert analyze(LOOP.replace("TRIPS", "5")).loops[0].trip_count == 5


def test_chain_of_600_nested_calls():
    """Was: RecursionError, exit 3. Every walk is iterative; 3,000 levels analyse exactly."""
    n = 3000
    parts = ["HloModule m\n\nc0 {\n  ROOT p = f32[] parameter(0)\n}\n"]
    level = "c{i} {{\n  p = f32[] parameter(0)\n  n = f32[] negate(p)\n  ROOT r = f32[] call(n), to_apply=c{j}\n}}\n"
    parts += [level.format(i=i, j=i - 1) for i in range(1, n)]
    parts.append(f"ENTRY e {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c{n - 1}\n}}\n")
    report = analyze("\n".join(parts))
    assert report.flops == n - 1 and report.is_exact
    assert report.xla_estimate["flops"] == n - 1


# ---- numbers beyond int64 and float ---------------------------------------------------------------
def test_int64_dimensions_give_exact_integers(tmp_path):
    """Was: OverflowError, exit 3. XLA accepts f32[2^63-1, 2^63-1]; the counts are exact ints."""
    big = 2**63 - 1
    text = HEAD + f"  p = f32[{big},{big}] parameter(0)\n  ROOT n = f32[{big},{big}] negate(p)\n}}\n"
    assert analyze(text).flops == big * big
    path = tmp_path / "big.hlo"
    path.write_text(text)
    proc = cli(str(path))
    assert proc.returncode == 0 and f"{big * big:,}" in proc.stdout


def test_100000_dimensions(tmp_path):
    dims = ",".join(["2"] * 100_000)
    path = tmp_path / "rank.hlo"
    path.write_text(HEAD + f"  p = f32[{dims}] parameter(0)\n  ROOT n = f32[{dims}] negate(p)\n}}\n")
    proc = cli(str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert str(2**100_000) in proc.stdout
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize("shape", ["f32[99999999999999999999]", "f32[9223372036854775808]", "f32[\u00b2]"])
def test_dimension_beyond_int64_is_a_parse_error(tmp_path, shape):
    """Was: accepted (XLA rejects a dimension beyond int64)."""
    with pytest.raises(HloParseError):
        hloparse.parse(HEAD + f"  ROOT p = {shape} parameter(0)\n}}\n")
    path = tmp_path / "dim.hlo"
    path.write_text(HEAD + f"  ROOT p = {shape} parameter(0)\n}}\n")
    one_line_usage_error(cli(str(path)))


# ---- output -----------------------------------------------------------------------------------
ESCAPES = HEAD + (
    '  ROOT p = f32[] parameter(0), metadata={op_name="=HYPERLINK(1)/\x1b[2J" '
    'source_file="\x1b[31mred.py" source_line=1}\n}\n')


def test_control_characters_are_escaped_in_text_output(tmp_path):
    """Was: ESC / BEL from a module name, op_name or source_file written raw to the terminal (a module name
    with them is now an error, as in XLA: its message is escaped too)."""
    path = tmp_path / "esc.hlo"
    path.write_text(ESCAPES)
    for args in ((), ("--by", "source"), ("--csv",), ("--csv", "--by", "scope"), ("--json",)):
        proc = cli(str(path), *args)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, args
    assert "\\x1b[31mred.py" in cli(str(path), "--by", "source").stdout
    bad = tmp_path / "bad.hlo"
    bad.write_text(HEAD + "  ROOT p = f32[] parameter(0)\n  \x1b[2J junk\n}\n")
    assert "\x1b" not in cli(str(bad)).stderr
    # A module name with control characters is no name to XLA's parser: an error, printed escaped.
    named = tmp_path / "named.hlo"
    named.write_text(HEAD.replace("HloModule m", "HloModule m\x1b]0;pwned\x07") + "  ROOT p = f32[] parameter(0)\n}\n")
    proc = cli(str(named))
    assert proc.returncode == 2 and "\x1b" not in proc.stderr and "\\x1b]0;pwned\\x07" in proc.stderr, proc.stderr


def test_csv_cells_cannot_run_as_formulas(tmp_path):
    """Was: names starting =, +, -, @ written raw into --csv (spreadsheet formula injection)."""
    text = HEAD + "\n".join([
        "  p = f32[] parameter(0)",
        '  a = f32[] negate(p), metadata={op_name="=cmd|calc/neg"}',
        '  b = f32[] negate(a), metadata={op_name="+1/neg"}',
        '  c = f32[] negate(b), metadata={op_name="@SUM(A1)/neg"}',
        '  ROOT d = f32[] negate(c), metadata={op_name="-2+3/neg"}',
    ]) + "\n}\n"
    path = tmp_path / "f.hlo"
    path.write_text(text)
    for args in (("--csv",), ("--csv", "--by", "scope")):
        out = cli(str(path), *args).stdout
        cells = [cell for row in csv.reader(io.StringIO(out)) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not c[1:].isdigit())], cells
        assert "'=cmd|calc" in cells
    from hloflops.report.format import csv_cell

    assert csv_cell(-5) == -5 and csv_cell("-x") == "'-x" and csv_cell("x") == "x"


def test_html_survives_a_malformed_focus(tmp_path):
    """Was: `#focus=%E0%A4%A` made decodeURIComponent throw and the chart never rendered."""
    browser = chromium()
    page = tmp_path / "report.html"
    assert cli(str(REMAT_SCAN), "--html", str(page)).returncode == 0
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}", "--dump-dom",
                          page.as_uri() + "#focus=%E0%A4%A"], capture_output=True, text=True, timeout=120).stdout
    assert 'class="node"' in dom and "data-rendered-cells" in dom


# ---- the command line ---------------------------------------------------------------------------
def test_version():
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("hloflops ")
    assert cli("batch", "--version").stdout.startswith("hloflops ")


@pytest.mark.parametrize("args, message", [
    (["--top", "-1"], "--top"),
    (["--trip-count", "w=-3"], "trip count"),
    (["--depth", "-2"], "depth"),
])
def test_bad_single_file_option_values(args, message):
    assert message in one_line_usage_error(cli(str(REMAT_SCAN), *args))


@pytest.mark.parametrize("args, message", [
    (["--timeout", "-5"], "--timeout"),
    (["--top", "-1"], "--top"),
    (["--export", "x.xlsx"], "export format"),
    (["--memory-limit", "0"], "--memory-limit"),
    (["--scopes", "-1"], "--scopes"),
])
def test_bad_batch_option_values_rejected_before_any_work(tmp_path, args, message):
    """Was: accepted (the export format was checked after the whole run)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.hlo").write_text(REMAT_SCAN.read_text())
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", "batch", str(tmp_path / "m"), "--db",
                           str(tmp_path / "x.sqlite"), "--no-progress", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "x.sqlite").exists()


def test_directory_without_hlo(tmp_path):
    """Was: exit 0, an empty summary and a stray hloflops-batch.sqlite."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.md").write_text("nothing here")
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", "empty", "--no-progress"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SOURCE_PATH})
    assert "no HLO modules found" in one_line_usage_error(proc)
    assert list(tmp_path.iterdir()) == [tmp_path / "empty"]


def _batch_db(tmp_path: Path, db: Path) -> subprocess.CompletedProcess:
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "a.hlo").write_text(REMAT_SCAN.read_text())
    return cli("batch", str(tmp_path / "m"), "--db", str(db), "--no-progress", "-j", "1")


def test_db_that_is_a_directory_or_corrupt(tmp_path):
    """Was: exit 3 "internal error"."""
    (tmp_path / "dir.sqlite").mkdir()
    assert "is a directory" in one_line_usage_error(_batch_db(tmp_path, tmp_path / "dir.sqlite"))
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\0" + os.urandom(4000))
    before = corrupt.read_bytes()
    one_line_usage_error(_batch_db(tmp_path, corrupt))
    assert corrupt.read_bytes() == before and not Path(str(corrupt) + "-wal").exists()


def test_corrupt_db_whose_header_says_wal_is_left_alone(tmp_path):
    """Was (1 random corrupt file in ~200): refused, but a stray `-wal` and `-shm` left beside it.
    Bytes 18-19 of an SQLite header are the write and read versions; 2 means WAL."""
    corrupt = tmp_path / "corrupt.sqlite"
    header = bytearray(b"SQLite format 3\0" + bytes(range(256)) * 15)
    header[16:20] = b"\x10\x00\x02\x02"  # page size 4096, WAL
    corrupt.write_bytes(bytes(header))
    assert "not" in one_line_usage_error(_batch_db(tmp_path, corrupt))
    assert corrupt.read_bytes() == bytes(header)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.sqlite", "m"]


def test_db_read_only(tmp_path):
    ro = tmp_path / "ro.sqlite"
    assert _batch_db(tmp_path, ro).returncode == 0
    ro.chmod(0o444)
    try:
        assert "not readable and writable" in one_line_usage_error(_batch_db(tmp_path, ro))
    finally:
        ro.chmod(0o644)


def test_db_of_another_program_is_left_alone(tmp_path):
    """Was: tables added to it, then exit 3."""
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    assert "not an hloflops batch database" in one_line_usage_error(_batch_db(tmp_path, other))
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    # export from it is refused the same way
    assert "not an hloflops" in one_line_usage_error(cli("batch", "--db", str(other), "--export",
                                                         str(tmp_path / "x.csv")))


def test_memory_limit_gives_a_memory_row(tmp_path, monkeypatch):
    """A worker over its memory limit gets a `memory` row; the batch goes on."""
    from hloflops.batch import worker
    from hloflops.batch.db import MEMORY
    from hloflops.batch.run import run_batch

    def no_memory(*args, **kwargs):  # noqa: ANN002, ANN003
        raise MemoryError

    monkeypatch.setattr(hloparse, "parse", no_memory)
    assert worker.analyze_file("x.hlo", b"HloModule m")["status"] == MEMORY
    monkeypatch.undo()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.hlo").write_text(REMAT_SCAN.read_text())
    (tmp_path / "m" / "b.hlo").write_text(REMAT_SCAN.read_text().replace("jit_train_step", "other"))
    summary = run_batch([tmp_path / "m"], db=tmp_path / "r.sqlite", processes=1, progress=False,
                        worker_fn=_allocate_a_lot, memory_limit=1 << 30)
    assert summary.status_counts.get(MEMORY) == 1 and summary.status_counts.get("ok") == 1


def _allocate_a_lot(path: str, data: bytes, options) -> dict:  # noqa: ANN001
    from tests.support.batch_fixtures import fake_ok

    if path.endswith("a.hlo"):
        bytearray(4 << 30)  # over the 1 GiB limit: MemoryError in the worker, not an OOM kill
    return fake_ok(path, data, options)
