"""Terminal output fits the terminal: name columns elide in the middle to `COLUMNS` (or the real
terminal's width); piped output without COLUMNS is never elided and stays the same bytes. The
HTML tables scroll inside their box; the chart's root says what it is; `diff --by module` says
which depth."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops.api import analyze
from hloflops.report.fit import ELLIPSIS, elide_middle, output_width
from hloflops.report.format import format_table
from hloflops.report.text import render_summary
from tests.report.test_html import chromium, dump_dom

ROOT = Path(__file__).resolve().parents[2]
REMAT_SCAN = ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo"


def cli(*args: str, columns: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_scopes_elide_in_the_middle_by_frames() -> None:
    scope = "jit(train_step)/transpose(jvp(StackedMLPsRematted))/while/body/checkpoint/while/body"
    assert elide_middle(scope, 30) == f"jit(train_step)/{ELLIPSIS}/while/body"
    assert elide_middle(scope, 40) == f"jit(train_step)/{ELLIPSIS}/checkpoint/while/body"  # as many as fit
    assert elide_middle("  " + scope, 32) == f"  jit(train_step)/{ELLIPSIS}/while/body"  # indent kept
    assert elide_middle(scope, len(scope)) == scope
    short = elide_middle("a_single_frame_that_is_very_long", 12)
    assert len(short) == 12 and ELLIPSIS in short and short.endswith("long")


def test_table_fits_the_width_by_eliding_only_the_name_column() -> None:
    rows = [["  jit(train_step)/" + "/".join(f"frame_{i}" for i in range(20)), "1,234", "5.0%"]]
    lines = format_table(["  scope", "flops", "share"], rows, width=60, elide=(0,))
    assert all(len(line) <= 60 for line in lines) and ELLIPSIS in lines[1]
    assert lines[1].split()[-2:] == ["1,234", "5.0%"]  # numbers are never cut
    assert format_table(["  scope", "flops", "share"], rows) == format_table(["  scope", "flops", "share"], rows,
                                                                             width=None, elide=(0,))


def test_width_comes_from_columns_then_the_terminal_never_a_pipe() -> None:
    assert output_width(io.StringIO(), {"COLUMNS": "77"}) == 77
    assert output_width(io.StringIO(), {}) is None  # not a terminal: no limit
    assert output_width(io.StringIO(), {"COLUMNS": "wide"}) is None

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(output_width(Tty(), {}), int)


def test_cli_summary_fits_columns_and_a_pipe_is_unchanged() -> None:
    piped = cli(str(REMAT_SCAN), "--depth", "0")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == render_summary(analyze(REMAT_SCAN), depth=None)  # no width: the API's text
    assert ELLIPSIS not in piped.stdout
    assert max(len(line) for line in piped.stdout.splitlines()) > 100  # the full scopes are wide
    narrow = cli(str(REMAT_SCAN), "--depth", "0", columns="100")
    lines = narrow.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("top ")) + 1
    table = lines[start:lines.index("", start)]
    assert len(table) > 5 and all(len(line) <= 100 for line in table), table
    assert any(f"jit(train_step)/{ELLIPSIS}/" in line for line in table)
    # the same numbers, in the same order, as the full-width table; where the names would be
    # elided below 40 characters, the transcendentals column goes first (issue 33)
    full = piped.stdout.splitlines()
    full_start = next(i for i, line in enumerate(full) if line.startswith("top ")) + 1  # notes wrap above it
    kept = [line.split()[-4:] for line in table[1:]]
    assert kept == [[*line.split()[-5:-2], line.split()[-1]] for line in full[full_start + 1:full_start + len(table)]]


def test_batch_summary_fits_columns(tmp_path: Path) -> None:
    deep = tmp_path / ("a_rather_long_directory_name_" * 3) / "runs" / "2026-12-02"
    deep.mkdir(parents=True)
    (deep / "module_0001.jit_train_step.cpu_after_optimizations.txt").write_text(REMAT_SCAN.read_text())
    args = [str(tmp_path), "--db", str(tmp_path / "db.sqlite"), "--no-progress", "-j", "1"]
    wide = cli(*args)
    assert wide.returncode == 0, wide.stderr
    assert max(len(line) for line in wide.stdout.splitlines() if "jit_train_step" in line) > 150
    narrow = cli(*args, columns="120")
    rows = [line for line in narrow.stdout.splitlines() if "jit_train_step" in line and "compiled" not in line]
    assert rows and all(len(line) <= 120 for line in rows), rows
    assert all(line.split()[-2] == "jit_train_step" and ELLIPSIS in line.split()[-1] for line in rows)


def test_diff_by_module_names_its_depth(tmp_path: Path) -> None:
    proc = cli("diff", str(REMAT_SCAN), str(REMAT_SCAN), "--by", "module")
    assert proc.returncode == 0, proc.stderr
    assert "depth None" not in proc.stdout and "by module (depth all)" in proc.stdout
    assert "by scope (depth 3)" in cli("diff", str(REMAT_SCAN), str(REMAT_SCAN)).stdout


def _measured(page: Path, width: int, tmp_path: Path) -> dict[str, int]:
    """Open the page in a `width`-pixel window; what the page and its widest table measure."""
    probe = page.read_text().replace("</body>", """<script>
      var b = document.body, tables = document.querySelectorAll('.scroll');
      var widest = 0, inside = 0;
      tables.forEach(function (t) { widest = Math.max(widest, t.scrollWidth - t.clientWidth);
                                    inside += t.scrollWidth > t.clientWidth ? 1 : 0; });
      b.setAttribute('data-page-overflow', String(document.documentElement.scrollWidth - window.innerWidth));
      b.setAttribute('data-table-overflow', String(widest));
      b.setAttribute('data-scrolling-tables', String(inside));
    </script></body>""")
    measured = tmp_path / "measured.html"
    measured.write_text(probe)
    browser = chromium()
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", measured.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = dict(re.findall(r'data-(page-overflow|table-overflow|scrolling-tables)="(-?\d+)"', proc.stdout))
    return {k: int(v) for k, v in found.items()}


def test_html_tables_scroll_inside_their_box(tmp_path: Path) -> None:
    chromium()
    # a checkout as deep as CI's: the path printed under the title is one long word
    deep = tmp_path / ("a_checkout_directory_as_deep_as_ci_makes_it_" * 2) / "examples"
    deep.mkdir(parents=True)
    module = deep / REMAT_SCAN.name
    module.write_text(REMAT_SCAN.read_text())
    page = tmp_path / "report.html"
    assert cli(str(module), "--html", str(page)).returncode == 0
    measured = _measured(page, 420, tmp_path)
    assert measured["scrolling-tables"] >= 1 and measured["table-overflow"] > 0  # the loops table is wider
    assert measured["page-overflow"] <= 0, measured  # but the page itself does not scroll sideways


def test_chart_root_is_labelled_with_the_module(tmp_path: Path) -> None:
    browser = chromium()
    page = tmp_path / "report.html"
    assert cli(str(REMAT_SCAN), "--html", str(page)).returncode == 0
    dom = dump_dom(browser, page, tmp_path / "profile")
    labels = re.findall(r"<text [^>]*>([^<]*)</text>", dom)
    flops = analyze(REMAT_SCAN).flops
    assert labels[0] == f"jit_train_step: {flops:,} flops in all", labels[:3]
    assert "\u00d7" not in labels[0]


@pytest.mark.parametrize("columns", ["60", "200"])
def test_columns_never_changes_the_json(columns: str) -> None:
    assert cli(str(REMAT_SCAN), "--json", columns=columns).stdout == cli(str(REMAT_SCAN), "--json").stdout
