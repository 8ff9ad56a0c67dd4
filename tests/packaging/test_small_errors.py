"""issue 25's small items: a missing file is FileNotFoundError (the CLI says so in one line); a
file cut off inside its header's stack-frame tables is reported where it ends; `hloflops
--version` answers without importing the analysis."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import hloflops
import hloparse
from hloflops import cli
from hloflops.report.report import GROUP_KEYS

REPO = Path(__file__).resolve().parents[2]
FORI = REPO / "examples" / "fori_loop.after_optimizations.hlo"  # has all four stack-frame tables


def test_analyze_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch.hlo"
    for source in (str(missing), missing):
        with pytest.raises(FileNotFoundError) as info:
            hloflops.analyze(source)
        assert not isinstance(info.value, hloparse.HloParseError)
        assert info.value.filename == str(missing)


def test_cli_says_a_missing_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(tmp_path / "nosuch.hlo")]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"hloflops: error: {tmp_path / 'nosuch.hlo'}: no such file"]


def cut_points(text: str) -> list[tuple[str, int]]:
    """(table, offset) for cuts inside each header table: after its name, after its first row, and
    in the middle of a row."""
    lines = text.splitlines(keepends=True)
    points = []
    offset = 0
    for i, line in enumerate(lines):
        if line.strip() in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            row_end = offset + len(line) + len(lines[i + 1])
            points += [(line.strip(), offset + len(line)), (line.strip(), row_end),
                       (line.strip(), row_end - len(lines[i + 1]) // 2)]
        offset += len(line)
    return points


def test_a_file_cut_off_in_its_header_tables(tmp_path: Path) -> None:
    text = FORI.read_text()
    points = cut_points(text)
    assert {table for table, _ in points} == {"FileNames", "FunctionNames", "FileLocations", "StackFrames"}
    for table, offset in points:
        cut = text[:offset]
        path = tmp_path / "cut.hlo"
        path.write_text(cut)
        with pytest.raises(hloparse.HloParseError) as info:
            hloparse.load(path)
        error = info.value
        body = cut.rstrip()
        end_line, end_column = body.count("\n") + 1, len(body) - (body.rfind("\n") + 1) + 1
        assert (error.line, error.column) == (end_line, end_column), (table, str(error))
        assert error.line > 1
        assert f"in the header's {table} table" in error.message and "before any computation" in error.message, str(
            error)
        assert error.expected


def test_a_header_alone_is_reported_at_its_end() -> None:
    header = FORI.read_text().splitlines()[0]
    with pytest.raises(hloparse.HloParseError) as info:
        hloparse.parse(header + "\n\n")
    assert (info.value.line, info.value.column) == (1, len(header) + 1)
    assert "before any computation" in info.value.message


def test_the_cli_keeps_the_group_keys_of_the_report() -> None:
    assert cli.GROUP_KEYS == GROUP_KEYS


def cpu_seconds(code: str, runs: int = 5) -> float:
    """The least CPU time (user + system) of `runs` fresh interpreters running `code`: CPU, not
    wall, time, since the machine is shared and its wall clock says more about the others."""
    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60, env=dict(os.environ))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return best


def test_version_imports_no_analysis() -> None:
    """`hloflops --version` loads no report, parser, lark or numpy (it took ~0.7 s when it did)."""
    code = ("import sys; from hloflops.cli import main; main(['--version']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'lark', 'numpy', 'networkx', 'hloparse'}), "
            "sorted(m for m in sys.modules if m.startswith('hloflops.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    version, heavy = done.stdout.strip().splitlines()
    assert version.startswith("hloflops ")
    assert heavy == "[] ['hloflops.cli']", heavy


def test_version_is_about_as_fast_as_python_itself() -> None:
    """Against a bare interpreter: it cost ~0.15 s of CPU more when it imported the report layer
    (0.7 s of wall time); now the difference is the CLI module and argparse-free printing."""
    bare = cpu_seconds("pass")
    version = cpu_seconds("from hloflops.cli import main; main(['--version'])")
    assert version < bare + 0.08, (version, bare)
